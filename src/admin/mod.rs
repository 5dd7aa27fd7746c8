//! The `/admin/v1` HTTP API: administration an admin can do without a
//! login on the appliance host.
//!
//! | request | answer |
//! | --- | --- |
//! | `GET`, `POST /admin/v1/trust` | the site's trust document ([`trust_doc`]) |
//! | `POST /admin/v1/imports[?dry_run=true][&allow_downgrade=true][&allow_expired=true][&reason=TEXT]` (body: the bundle, a tar stream; volumes concatenated in order) | 200 JSON `{id, created, images, blobs_new, blobs_skipped, bytes_new, bytes_read, generation, changed, dry_run, repaired?, tags: [{repository, tag, old?, new, action, downgrade?}], elapsed_secs, message}` (`repaired`: the damaged generation the import restored first, as `airlock fsck --repair`; 403 for an admin limited to repository prefixes), as `airlock import` prints |
//!
//! Errors are `{"code","message"}`: 400 `BUNDLE_INVALID` (bad signature,
//! digest, format; nothing stored is changed), 409 `REFUSED` (a downgrade
//! without `allow_downgrade`, an immutable tag, a bundle past its
//! `expires` without `allow_expired`, a bundle its signers may not bring in
//! under the site's trust document; nothing committed), 403
//! `DENIED` when the config has no `[import] keyring` and the site no trust
//! document, or the bundle writes
//! a repository outside the caller's prefixes (checked on the signed
//! document, before any blob is written), 500 `UNKNOWN` for store failures.
//!
//! Owns: streaming the request body into the same import pipeline and checks
//! as the CLI ([`crate::bundle::import::import`]) with the site's trust
//! document, or else the keyring of the config's `[import] keyring`, read
//! at each import (so a keyring change needs no restart). Who may call it is the access layer's business (the
//! admin role); the state change records the request's actor.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::TryStreamExt;
use serde_json::json;

use crate::bundle::{import, sign, trust};

mod trust_doc;
use crate::state::StateStore;

/// What the admin API needs from the composition root.
pub trait Context: Send + Sync + 'static {
    /// The state imports commit into.
    fn state(&self) -> &StateStore;
    /// The armored keyring trusted to sign bundles imported over HTTP;
    /// `None`: imports over HTTP are off.
    fn import_keyring(&self) -> Option<PathBuf>;
    /// Immutable tag rules (`[registry] immutable_tags`).
    fn immutable_tags(&self) -> Vec<String>;
    /// The site's upstream signature policy (`[[import.policy]]`).
    fn signature_policy(&self) -> crate::signatures::SitePolicy;
}

/// The `/admin/v1` router.
pub fn router(ctx: Arc<dyn Context>) -> Router {
    Router::new()
        .route("/admin/v1/imports", post(import_bundle))
        .route(
            "/admin/v1/trust",
            get(trust_doc::show).post(trust_doc::install),
        )
        .with_state(ctx)
}

fn error(status: StatusCode, code: &str, message: String) -> Response {
    (
        status,
        axum::Json(json!({ "code": code, "message": message })),
    )
        .into_response()
}

/// `dry_run`, `allow_downgrade`, `allow_expired` and `reason` of the
/// request's query.
fn options(req: &axum::extract::Request, ctx: &dyn Context) -> import::ImportOptions {
    let query: std::collections::HashMap<String, String> =
        form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let yes = |k: &str| query.get(k).is_some_and(|v| v == "true" || v == "1");
    let grant = req
        .extensions()
        .get::<crate::auth::Grant>()
        .cloned()
        .unwrap_or_default();
    import::ImportOptions {
        dry_run: yes("dry_run"),
        allow_downgrade: yes("allow_downgrade")
            .then(|| query.get("reason").cloned().unwrap_or_default()),
        allow_expired: yes("allow_expired")
            .then(|| query.get("reason").cloned().unwrap_or_default()),
        immutable_tags: ctx.immutable_tags(),
        signature_policy: ctx.signature_policy(),
        may_repair: grant.allows_everywhere(crate::auth::Permission::Admin),
        may_write: Some(Arc::new(move |r| {
            grant.allows(crate::auth::Permission::Admin, &[r.as_str()])
        })),
    }
}

async fn import_bundle(
    State(ctx): State<Arc<dyn Context>>,
    req: axum::extract::Request,
) -> Response {
    let opts = options(&req, &*ctx);
    let body: Body = req.into_body();
    let keyring = match ctx.import_keyring().map(|p| (sign::Keyring::load(&p), p)) {
        None => None,
        Some((Ok(k), _)) => Some(k),
        Some((Err(e), path)) => {
            tracing::error!(keyring = %path.display(), error = %e, "cannot load the import keyring");
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "UNKNOWN",
                "the server's import keyring cannot be loaded".into(),
            );
        }
    };
    let verifier = match trust::verifier(ctx.state(), keyring).await {
        Ok(v) => v,
        Err(e) => {
            return match e.downcast_ref::<trust::TrustError>() {
                Some(trust::TrustError::NoKeys(_)) => error(
                    StatusCode::FORBIDDEN,
                    "DENIED",
                    "imports over HTTP are off: the serve config has no [import] keyring and the site has no trust document".into(),
                ),
                Some(t) => error(StatusCode::CONFLICT, "REFUSED", t.to_string()),
                None => error(StatusCode::INTERNAL_SERVER_ERROR, "UNKNOWN", format!("{e:#}")),
            };
        }
    };
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    let reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let reader = Box::new(std::io::BufReader::with_capacity(1 << 20, reader));
    let who =
        crate::state::audit::current().map_or_else(|| crate::auth::OPEN_WHO.into(), |a| a.who);
    match import::import(
        ctx.state(),
        verifier,
        reader,
        &who,
        indicatif::ProgressBar::hidden(),
        &opts,
    )
    .await
    {
        Ok(r) => {
            tracing::info!(bundle = %r.id, who = %who, generation = r.generation, dry_run = r.dry_run, "bundle imported over HTTP");
            axum::Json(json!({
                "id": r.id,
                "created": r.created,
                "dry_run": r.dry_run,
                "tags": r.tags,
                "images": r.images,
                "blobs_new": r.blobs_new,
                "blobs_skipped": r.blobs_skipped,
                "bytes_new": r.bytes_new,
                "bytes_read": r.bytes_read,
                "generation": r.generation,
                "changed": r.changed,
                "repaired": r.repaired,
                "elapsed_secs": r.elapsed.as_secs_f64(),
                "message": r.to_string(),
            }))
            .into_response()
        }
        Err(e) => {
            let cause = format!("{e:#}");
            tracing::warn!(who = %who, error = %cause, "bundle import over HTTP failed");
            if e.chain()
                .any(|c| c.downcast_ref::<import::AccessDenied>().is_some())
            {
                return error(StatusCode::FORBIDDEN, "DENIED", cause);
            }
            let refused = e.chain().any(|c| {
                c.downcast_ref::<import::Refused>().is_some()
                    || matches!(
                        c.downcast_ref::<crate::state::StateError>(),
                        Some(crate::state::StateError::Rejected(_))
                    )
            });
            if refused {
                return error(StatusCode::CONFLICT, "REFUSED", cause);
            }
            let store_failure = e.chain().any(|c| {
                c.downcast_ref::<crate::store::StoreError>().is_some()
                    || c.downcast_ref::<crate::state::StateError>().is_some()
            });
            if let Some(secs) = crate::store::retry_after_in(&e) {
                let mut res = error(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", cause);
                res.headers_mut()
                    .insert(axum::http::header::RETRY_AFTER, secs.into());
                res
            } else if store_failure {
                error(StatusCode::INTERNAL_SERVER_ERROR, "UNKNOWN", cause)
            } else {
                error(StatusCode::BAD_REQUEST, "BUNDLE_INVALID", cause)
            }
        }
    }
}
