//! `/admin/v1/trust`: the site's trust document over HTTP, so a BOSH-deployed
//! appliance rotates its keys as it imports bundles, without a login on
//! the host ([`crate::bundle::trust`]; docs/trust.md).
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /admin/v1/trust` | 200 JSON: the document in force as it was signed (`{format, version, expires?, keys: {FINGERPRINT: armored key}, root: {keys, threshold}, roles: [{name, keys, threshold, repositories?, stacks?, torcx?, feeds?}]}`) and `armored`, the signed text; `{version: null}` when the site has none (its flat keyring decides) |
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
    let shown = async {
        let snap = ctx.state().snapshot().await?;
        let Some(stored) = trust::site::stored(ctx.state(), &snap).await? else {
            return Ok(json!({ "version": null }));
        };
        let doc = trust::TrustDoc::parse(&sign::unverified_text(&stored.armored)?)?;
        let mut out = serde_json::to_value(&doc)?;
        out["armored"] = stored.armored.into();
        Ok::<_, anyhow::Error>(out)
    };
    match shown.await {
        Ok(v) => axum::Json(v).into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "UNKNOWN",
            format!("{e:#}"),
        ),
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
        trust::check(ctx.state(), &armored).await.map(|c| {
            json!({
                "trust_version": c.doc.version,
                "previous": c.previous,
                "signers": c.signers,
                "generation": null,
                "dry_run": true,
                "message": c.to_string(),
            })
        })
    } else {
        trust::install(ctx.state(), &armored, &who)
            .await
            .map(|i| {
                tracing::info!(who = %who, version = i.doc.version, generation = i.generation, "trust document installed over HTTP");
                let mut out = i.to_json();
                out["dry_run"] = false.into();
                out["message"] = i.to_string().into();
                out
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
