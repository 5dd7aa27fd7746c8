//! `/admin/v1/trust`: the site's trust document over HTTP, so a BOSH-deployed
//! appliance rotates its keys as it imports bundles, without a login on
//! the host ([`crate::bundle::trust`]; docs/trust.md).
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /admin/v1/trust` | 200 JSON `{version, expires?, root: {threshold, keys}, keys: [{fingerprint, name}], roles: [{name, threshold, keys, repositories, stacks, torcx, feeds}], armored}`; `{version: null}` when the site has none (its flat keyring decides) |
//! | `POST /admin/v1/trust[?dry_run=true]` (body: the cleartext-signed trust document) | 200 JSON `{trust_version, previous, signers, generation, dry_run, message}`, as `airlock import TRUST.asc --json` prints |
//!
//! Errors are `{"code","message"}`: 400 `TRUST_INVALID` (not a trust
//! document, not UTF-8, over 4 MiB), 409 `REFUSED` (not signed by a
//! threshold of the current root keys, a version that does not move
//! forward, another document installed meanwhile; nothing changed), 500
//! `UNKNOWN` for store failures. Who may call it is the route table's
//! business: `POST` needs the admin role on every repository.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{Context, error};
use crate::bundle::{sign, trust};

const MAX_TRUST_DOCUMENT: usize = trust::MAX_DOCUMENT as usize;

/// `GET /admin/v1/trust`.
pub(super) async fn show(State(ctx): State<Arc<dyn Context>>) -> Response {
    let stored = async {
        let snap = ctx.state().snapshot().await?;
        trust::site::stored(ctx.state(), &snap).await
    };
    match stored.await {
        Ok(None) => axum::Json(json!({ "version": null })).into_response(),
        Ok(Some(s)) => {
            let doc = sign::unverified_text(&s.armored)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .unwrap_or_default();
            let mut out = json!({ "version": s.version, "armored": s.armored });
            for k in ["expires", "root", "keys", "roles"] {
                if let Some(v) = doc.get(k) {
                    out[k] = v.clone();
                }
            }
            axum::Json(out).into_response()
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, "UNKNOWN", e.to_string()),
    }
}

/// `POST /admin/v1/trust`.
pub(super) async fn install(
    State(ctx): State<Arc<dyn Context>>,
    req: axum::extract::Request,
) -> Response {
    let dry_run = form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
        .any(|(k, v)| k == "dry_run" && (v == "true" || v == "1"));
    let bytes = match axum::body::to_bytes(req.into_body(), MAX_TRUST_DOCUMENT).await {
        Ok(b) => b,
        Err(_) => {
            return error(
                StatusCode::BAD_REQUEST,
                "TRUST_INVALID",
                format!("the body is not a trust document of at most {MAX_TRUST_DOCUMENT} bytes"),
            );
        }
    };
    let Ok(armored) = String::from_utf8(bytes.to_vec()) else {
        return error(
            StatusCode::BAD_REQUEST,
            "TRUST_INVALID",
            "the body is not UTF-8 text".into(),
        );
    };
    if let Err(e) = sign::unverified_text(&armored)
        .map_err(|e| e.to_string())
        .and_then(|t| trust::TrustDoc::parse(&t).map_err(|e| e.to_string()))
    {
        return error(StatusCode::BAD_REQUEST, "TRUST_INVALID", e);
    }
    let who =
        crate::state::audit::current().map_or_else(|| crate::auth::OPEN_WHO.into(), |a| a.who);
    let result = if dry_run {
        check(&*ctx, &armored).await
    } else {
        trust::install(ctx.state(), &armored, &who)
            .await
            .map(|i| {
                tracing::info!(who = %who, version = i.doc.version, generation = i.generation, "trust document installed over HTTP");
                json!({
                    "trust_version": i.doc.version,
                    "previous": i.previous,
                    "signers": i.signers,
                    "generation": i.generation,
                    "dry_run": false,
                    "message": i.to_string(),
                })
            })
    };
    match result {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => {
            let cause = format!("{e:#}");
            tracing::warn!(who = %who, error = %cause, "trust document over HTTP refused");
            let refused = e.chain().any(|c| {
                c.downcast_ref::<trust::TrustError>().is_some()
                    || matches!(
                        c.downcast_ref::<crate::state::StateError>(),
                        Some(crate::state::StateError::Rejected(_))
                    )
            });
            if refused {
                error(StatusCode::CONFLICT, "REFUSED", cause)
            } else {
                error(StatusCode::INTERNAL_SERVER_ERROR, "UNKNOWN", cause)
            }
        }
    }
}

/// `dry_run`: the checks [`trust::install`] makes, without the commit.
async fn check(ctx: &dyn Context, armored: &str) -> anyhow::Result<serde_json::Value> {
    let snap = ctx.state().snapshot().await?;
    let current = trust::load(ctx.state(), &snap).await?;
    let (doc, signers) = trust::TrustDoc::check_successor(current.as_ref(), armored)?;
    let previous = current.map(|c| c.version);
    Ok(json!({
        "trust_version": doc.version,
        "previous": previous,
        "signers": signers,
        "generation": null,
        "dry_run": true,
        "message": format!(
            "dry run: trust document version {} verified (signed by {}); would replace {}; nothing changed",
            doc.version,
            signers.join(", "),
            previous.map_or("the flat keyring".into(), |v| format!("version {v}"))
        ),
    }))
}
