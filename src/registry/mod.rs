//! OCI distribution-spec v1.1 routes: pull (end-1, end-2, end-3) and content
//! discovery (end-8a/8b tags list, `/v2/_catalog`).
//!
//! Layers inside: one wildcard `/v2` handler parses the path ([`routes`]),
//! picks a handler from the (route, method) table in [`dispatch`], and the
//! handler calls one function of [`pull`] or [`discovery`], which read
//! `state` and return a typed response ([`responses`]) or the one error type
//! ([`errors`]). Handlers never touch the blobstore layout; `pull` and
//! `discovery` never see HTTP requests beyond headers they interpret.
//!
//! Not yet served: push, deletes (405 `UNSUPPORTED`), referrers and upload
//! sessions (404, so clients fall back to the referrers tag schema).

pub mod discovery;
pub mod errors;
pub mod pull;
pub mod range;
pub mod responses;
pub mod routes;

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::json;

use self::errors::{ErrorCode, RegistryError, Result};
use self::responses::{API_VERSION, ApiBase, DOCKER_DISTRIBUTION_API_VERSION};
use self::routes::Route;
use crate::state::StateStore;

/// What the registry needs from the composition root (`server::App`).
pub trait Context: Send + Sync + 'static {
    /// The state to serve; read once per request via `snapshot()`, so
    /// changes committed by other processes show up on the next request.
    fn state(&self) -> &StateStore;
}

/// The `/v2` router: `/v2`, `/v2/` and `/v2/{*path}` all go to one handler.
/// Every response carries `Docker-Distribution-API-Version: registry/2.0`.
pub fn router(ctx: Arc<dyn Context>) -> Router {
    Router::new()
        .route("/v2", any(v2))
        .route("/v2/", any(v2))
        .route("/v2/{*path}", any(v2))
        .with_state(ctx)
}

async fn v2(
    State(ctx): State<Arc<dyn Context>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let mut res = dispatch(ctx.state(), &method, &uri, &headers)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    res.headers_mut()
        .insert(DOCKER_DISTRIBUTION_API_VERSION, API_VERSION);
    res
}

/// How a method relates to the API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// GET (`head = false`) or HEAD (`head = true`).
    Read { head: bool },
    /// Anything else (POST, PUT, PATCH, DELETE, ...).
    Other,
}

impl Access {
    fn of(method: &Method) -> Access {
        match *method {
            Method::GET => Access::Read { head: false },
            Method::HEAD => Access::Read { head: true },
            _ => Access::Other,
        }
    }
}

/// The (route, method) dispatch table. Push, deletes and referrers go here
/// beside the pull rows when they are implemented.
async fn dispatch(
    state: &StateStore,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<Response> {
    let route = Route::parse(uri.path())?;
    let Access::Read { head } = Access::of(method) else {
        return Err(RegistryError::MethodNotAllowed { allow: "GET, HEAD" });
    };
    Ok(match route {
        Route::Base => ApiBase.into_response(),
        Route::Manifest { name, reference } => {
            pull::manifest(state, &name, &reference, headers, head)
                .await?
                .into_response()
        }
        Route::Blob { name, digest } => pull::blob(state, &name, &digest, headers, head).await?,
        Route::TagsList { name } => {
            let paging = discovery::Paging::from_uri(uri);
            discovery::tags_list(state, &name, &paging)
                .await?
                .into_response()
        }
        Route::Catalog => {
            let paging = discovery::Paging::from_uri(uri);
            discovery::catalog(state, &paging).await?.into_response()
        }
        Route::Upload { name, session } => {
            return Err(RegistryError::new(
                ErrorCode::BlobUploadUnknown,
                json!({ "name": name, "session": session }),
            ));
        }
        Route::Referrers { .. } => return Err(RegistryError::NoEndpoint),
    })
}
