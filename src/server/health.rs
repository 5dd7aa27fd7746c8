//! Liveness and readiness probes for operators and BOSH/Kubernetes.
//!
//! Owns: `/healthz` (the process answers) and `/readyz` (the state can be
//! read). Never reports details of failures to the caller; they are logged.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;

use super::App;

/// `GET /healthz`: always 200 `ok` while the process serves requests.
pub async fn healthz() -> &'static str {
    "ok"
}

/// How long `/readyz` waits for the store: a hung object store is
/// reported within this (a balancer's check timeout should be above it).
pub const READY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET /readyz`: 200 `ok` when the current state can be read from the
/// blobstore (the root, the state document and the repository table's
/// first page) within [`READY_DEADLINE`], else 503 `not ready` (the cause
/// is logged at warn); 503
/// `stopping` once the server got SIGTERM or SIGINT ([`super::serve`]);
/// 503 `degraded: ...` naming what is damaged while the current generation
/// or the root is (reads answered from the last good generation), or the
/// store's layout marker or a page or document of the current generation
/// is known damaged ([`crate::store::damage`]).
/// With `[import] max_staleness` and a newest imported bundle older than
/// that, still 200, with a second line `stale: ...` naming the bundle and
/// its age ([`crate::bundle::freshness::staleness`]).
pub async fn readyz(State(app): State<Arc<App>>) -> (StatusCode, String) {
    if app.stopping.load(std::sync::atomic::Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "stopping\n".into());
    }
    let ready = async {
        let snap = app.state.snapshot().await?;
        app.state.repositories(&snap, None, 1).await?;
        Ok::<_, crate::state::StateError>(snap)
    };
    let Ok(ready) = tokio::time::timeout(READY_DEADLINE, ready).await else {
        tracing::warn!(
            deadline_s = READY_DEADLINE.as_secs(),
            "not ready: the store did not answer within the readiness deadline"
        );
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "not ready: the store did not answer within {} s\n",
                READY_DEADLINE.as_secs()
            ),
        );
    };
    match ready {
        Ok(snap) => match app.state.damage() {
            // A stale site still serves what it has (taking every replica
            // out of the balancer would stop pulls too): it says so.
            None if !degraded(&app, &snap).is_empty() => {
                let notes = degraded(&app, &snap);
                let list: Vec<String> = notes
                    .iter()
                    .map(|n| format!("{}: {}", n.object, n.cause))
                    .collect();
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("degraded: {}; run airlock fsck --repair\n", list.join("; ")),
                )
            }
            None => {
                let max = app.staleness_bound();
                match crate::bundle::freshness::report(&app.state, &snap, max).await {
                    Ok(r) => match r.stale {
                        None => (StatusCode::OK, "ok".into()),
                        Some(stale) => (StatusCode::OK, format!("ok\n{stale}\n")),
                    },
                    Err(e) => {
                        tracing::warn!(error = %e, "staleness: the imports document cannot be read");
                        (StatusCode::OK, "ok".into())
                    }
                }
            }
            Some((root, cause)) => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "degraded: the current generation ({root}) is damaged ({cause}); serving the last good one; run airlock fsck --repair\n"
                ),
            ),
        },
        Err(e) => {
            tracing::warn!(error = %e, "not ready: state cannot be read");
            (StatusCode::SERVICE_UNAVAILABLE, "not ready".into())
        }
    }
}

/// The damage this process knows of in its store that applies to the
/// generation `snap` (the layout marker; a page or document of it that no
/// copy restored: [`crate::store::damage`]).
fn degraded(app: &App, snap: &crate::state::Snapshot) -> Vec<crate::store::damage::Note> {
    let root = snap.root.as_ref().map(|r| r.value.as_str());
    app.state
        .blobstore()
        .damage()
        .map(|n| n.current(root))
        .unwrap_or_default()
}
