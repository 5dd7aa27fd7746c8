//! OCI distribution-spec v1.1 routes: pull (end-1, end-2, end-3), push
//! (end-4a/4b, end-5, end-6, end-7, end-11, end-13, upload cancel), content
//! discovery (end-8a/8b tags list, end-12a/12b referrers, `/v2/_catalog`)
//! and content management (end-9, end-10), with `?ns=` mirror namespaces.
//!
//! Layers inside: one wildcard `/v2` handler parses the path ([`routes`]),
//! resolves the repository ([`namespace`]), picks a handler from the
//! (route, method) table in [`dispatch`], and the handler calls one function
//! of [`pull`], [`discovery`], [`referrers`], [`upload`], [`push`] or
//! [`delete`], which read or change `state` and return a typed response
//! ([`responses`]) or the one error type ([`errors`]). Upload sessions live
//! in [`uploads`]. Writes are served only when [`RegistryConfig`] switches
//! them on; otherwise they answer 405 `UNSUPPORTED` with `Allow`.

pub mod config;
pub mod delete;
pub mod discovery;
pub mod errors;
pub mod kept;
pub mod links;
pub mod namespace;
pub mod pull;
pub mod push;
pub mod query;
pub mod range;
pub mod referrers;
pub mod responses;
pub mod routes;
pub mod scope;
pub mod upload;
pub mod uploads;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::extract::{Request as HttpRequest, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde_json::json;

pub use self::config::RegistryConfig;
use self::errors::{ErrorCode, RegistryError, Result};
use self::query::QueryParams;
use self::responses::{API_VERSION, ApiBase, DOCKER_DISTRIBUTION_API_VERSION};
use self::routes::Route;
use self::scope::RepositoryScope;
use self::uploads::{BodyStream, UploadId, Uploads};
use crate::names::Reference;
use crate::state::StateStore;
use crate::state::pulls::PullRecorder;

/// What the registry needs from the composition root (`server::App`).
pub trait Context: Send + Sync + 'static {
    /// The state to serve; read once per request via `snapshot()`, so
    /// changes committed by other processes show up on the next request.
    fn state(&self) -> &StateStore;
    /// The operator's switches as they are now (a config reload may
    /// replace them between requests).
    fn config(&self) -> ConfigGuard;
    /// Upload sessions.
    fn uploads(&self) -> &Uploads;
    /// Where manifest GETs are noted (`gc`'s `pulled_within_days`).
    fn pulls(&self) -> &PullRecorder;
}

/// A read of the current [`RegistryConfig`] (cheap: no reference count).
pub type ConfigGuard = arc_swap::Guard<Arc<RegistryConfig>>;

/// The `/v2` router: `/v2`, `/v2/` and `/v2/{*path}` all go to one handler.
/// Every response carries `Docker-Distribution-API-Version: registry/2.0`.
pub fn router(ctx: Arc<dyn Context>) -> Router {
    Router::new()
        .route("/v2", any(v2))
        .route("/v2/", any(v2))
        .route("/v2/{*path}", any(v2))
        .with_state(ctx)
}

async fn v2(State(ctx): State<Arc<dyn Context>>, req: HttpRequest) -> Response {
    serve(&*ctx, req).await
}

/// [`serve`] with the context owned (the server's hot path, whose future
/// must not borrow).
pub async fn serve_owned<C: Context>(ctx: Arc<C>, req: HttpRequest) -> Response {
    serve(&*ctx, req).await
}

/// Serves one request whose path is `/v2` or starts with `/v2/` (what
/// every route of [`router`] calls; the server also calls it directly on
/// its hot path, without a router). The response carries
/// `Docker-Distribution-API-Version: registry/2.0`.
pub async fn serve(ctx: &dyn Context, req: HttpRequest) -> Response {
    // The request is taken apart, not extracted piecewise: extracting the
    // `HeaderMap` would copy every header of every request.
    let (mut parts, body) = req.into_parts();
    let mut body = body.into_data_stream();
    // The access layer's parse of the path, when it read it (with users
    // configured, and for writes); else [`dispatch`]'s is the one parse.
    let route = parts.extensions.remove::<Box<Route>>();
    let client = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(a)| a.ip());
    let scope = parts
        .extensions
        .get::<RepositoryScope>()
        .cloned()
        .unwrap_or_default();
    let user = parts
        .extensions
        .get::<uploads::Uploader>()
        .map(|u| u.0.as_str());
    // A GET of small content answered before is answered again without
    // the handlers (`kept`).
    let keepable = kept::keepable(&parts.method, &parts.uri);
    if keepable && let Some(res) = kept::answer(ctx, parts.uri.path(), &parts.headers, &scope) {
        return res;
    }
    let req = Request {
        method: &parts.method,
        uri: &parts.uri,
        headers: &parts.headers,
        client,
        user,
        scope: &scope,
    };
    let mut keep = None;
    let mut res = dispatch(ctx, &req, route, &mut body, keepable.then_some(&mut keep))
        .await
        .unwrap_or_else(IntoResponse::into_response);
    res.headers_mut()
        .insert(DOCKER_DISTRIBUTION_API_VERSION, API_VERSION);
    if let Some(k) = keep {
        kept::keep(ctx, parts.uri.path(), &scope, k, &res);
    }
    res
}

/// The `Allow` header of each endpoint, by what is switched on.
fn allow(route: &Route, cfg: &RegistryConfig) -> &'static str {
    let (push, del) = (cfg.allow_push, cfg.allow_delete);
    match route {
        Route::Manifest { .. } => match (push, del) {
            (false, false) => "GET, HEAD",
            (true, false) => "GET, HEAD, PUT",
            (false, true) => "GET, HEAD, DELETE",
            (true, true) => "GET, HEAD, PUT, DELETE",
        },
        Route::Blob { .. } if del => "GET, HEAD, DELETE",
        Route::Upload { session: None, .. } if push => "GET, HEAD, POST",
        Route::Upload {
            session: Some(_), ..
        } if push => "GET, HEAD, PATCH, PUT, DELETE",
        _ => "GET, HEAD",
    }
}

/// What [`dispatch`] needs of a request besides its body.
struct Request<'a> {
    method: &'a Method,
    uri: &'a Uri,
    headers: &'a HeaderMap,
    /// The client's IP address when the listener knows it.
    client: Option<IpAddr>,
    /// The user, when users are configured (the access layer's extension).
    user: Option<&'a str>,
    /// The repositories the caller's rights cover (the access layer's
    /// extension; all when absent).
    scope: &'a RepositoryScope,
}

/// The (route, method) dispatch table. The repository finally used (after
/// mirror namespaces) must be in the caller's scope, else 403 `DENIED`.
/// With `keep` (a [`kept::keepable`] request), a pull of small content the
/// state names leaves there what [`kept::keep`] needs.
async fn dispatch(
    ctx: &dyn Context,
    req: &Request<'_>,
    route: Option<Box<Route>>,
    body: &mut (impl BodyStream + ?Sized),
    keep: Option<&mut Option<kept::Keep>>,
) -> Result<Response> {
    let Request {
        method,
        uri,
        headers,
        client,
        user,
        scope,
    } = *req;
    let mut route = match route {
        Some(r) => *r,
        None => Route::parse(uri.path()).map_err(|e| e.for_method(method))?,
    };
    // Taken before anything is read (the namespace's resolution included).
    let mark = match (&keep, &route) {
        (Some(_), Route::Manifest { .. } | Route::Blob { .. }) => kept::Mark::now(ctx),
        _ => None,
    };
    let query = QueryParams::from_uri(uri);
    let read = matches!(*method, Method::GET | Method::HEAD);
    let namespace = namespace::apply(ctx, &mut route, &query, read, scope).await?;
    if let Some(name) = route.repository() {
        scope.check(name)?;
    }
    let cfg = ctx.config();
    let not_allowed = RegistryError::MethodNotAllowed {
        allow: allow(&route, &cfg),
    };
    let state = ctx.state();
    let head = *method == Method::HEAD;
    let (push, del) = (cfg.allow_push, cfg.allow_delete);
    // Every handler but the pulls is boxed: this future's size is that of
    // its largest arm, and it is moved (copied) per request on its way
    // into the connection's task.
    let mut res = match (route, method.clone()) {
        (Route::Base, Method::GET | Method::HEAD) => ApiBase.into_response(),
        (Route::Manifest { name, reference }, Method::GET | Method::HEAD) => {
            let m = pull::manifest(state, &name, &reference, head).await?;
            let tag = match reference {
                Reference::Tag(t) => Some(t),
                Reference::Digest(_) => None,
            };
            if !head {
                // A pull (HEAD is not one, as in zot and Harbor).
                ctx.pulls().note(&name, &m.digest, tag.as_ref());
            }
            if let (Some(keep), Some(mark), Some(body)) = (keep, mark, &m.body) {
                *keep = Some(kept::Keep {
                    mark,
                    body: body.clone(),
                    kind: kept::Kind::Manifest(m.digest.clone(), tag),
                    repository: name,
                });
            }
            m.into_response()
        }
        (Route::Manifest { name, reference }, Method::PUT) if push => {
            Box::pin(push::manifest(ctx, &name, &reference, headers, body))
                .await?
                .into_response()
        }
        (Route::Manifest { name, reference }, Method::DELETE) if del => {
            let frozen = |tag: &str| cfg.is_immutable(&name, tag);
            Box::pin(delete::manifest(state, &name, &reference, &frozen))
                .await?
                .into_response()
        }
        (Route::Blob { name, digest }, Method::GET | Method::HEAD) => {
            let b = pull::blob(state, &name, &digest, headers, head, cfg.blob_redirect).await?;
            if let (Some(keep), Some(mark), Some(body)) = (keep, mark, b.whole) {
                *keep = Some(kept::Keep {
                    mark,
                    body,
                    kind: kept::Kind::Blob,
                    repository: name,
                });
            }
            b.response
        }
        (Route::Blob { name, digest }, Method::DELETE) if del => {
            Box::pin(delete::blob(state, &name, &digest))
                .await?
                .into_response()
        }
        (Route::TagsList { name }, Method::GET | Method::HEAD) => {
            let paging = discovery::Paging::from_uri(uri, cfg.max_page)?;
            Box::pin(discovery::tags_list(state, &name, &paging))
                .await?
                .into_response()
        }
        (Route::Catalog, Method::GET | Method::HEAD) => {
            let paging = discovery::Paging::from_uri(uri, cfg.max_page)?;
            Box::pin(discovery::catalog(state, &paging, scope))
                .await?
                .into_response()
        }
        (Route::Referrers { name, digest }, Method::GET | Method::HEAD) => {
            let paging = discovery::Paging::from_uri(uri, cfg.referrers.max_descriptors)?;
            let t = query.get("artifactType");
            Box::pin(referrers::referrers(
                state,
                &name,
                &digest,
                t,
                &paging,
                cfg.referrers,
            ))
            .await?
            .into_response()
        }
        (
            Route::Upload {
                name,
                session: None,
            },
            Method::POST,
        ) if push => {
            let owner = uploads::Owner {
                repository: name,
                client,
                user: user.map(str::to_string),
            };
            Box::pin(upload::start(ctx, owner, &query, scope, headers, body)).await?
        }
        (
            Route::Upload {
                name,
                session: Some(s),
            },
            m,
        ) if push => match m {
            Method::GET | Method::HEAD => Box::pin(upload::progress(ctx, &name, &s))
                .await?
                .into_response(),
            Method::PATCH => Box::pin(upload::patch(ctx, &name, &s, headers, body))
                .await?
                .into_response(),
            Method::PUT => Box::pin(upload::finish(ctx, &name, &s, &query, headers, body))
                .await?
                .into_response(),
            Method::DELETE => Box::pin(upload::cancel(ctx, &name, &s))
                .await?
                .into_response(),
            _ => return Err(not_allowed),
        },
        (Route::Upload { name, session }, Method::GET | Method::HEAD) => {
            return Err(RegistryError::new(
                ErrorCode::BlobUploadUnknown,
                json!({ "name": name, "session": session.as_ref().map(UploadId::as_str) }),
            ));
        }
        _ => return Err(not_allowed),
    };
    if let Some(ns) = namespace
        && let Ok(v) = axum::http::HeaderValue::from_str(&ns)
    {
        res.headers_mut().insert(OCI_NAMESPACE, v);
    }
    Ok(res)
}

/// Echoed on a read served from an `ns=` namespaced repository.
const OCI_NAMESPACE: &str = "oci-namespace";
