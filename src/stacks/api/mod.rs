//! The `/stacks/v1` HTTP API for cells and admins.
//!
//! | request | answer |
//! | --- | --- |
//! | `GET /stacks/v1/` | the stack table (every stack, the default) |
//! | `GET /stacks/v1/<name>?cell=<id>[&platform=P]` | what that cell runs: `digest`, `image`, `platform`, `rootfs_url`, `rootfs_index_url` and `chunk_store_url` (or null), `rootfs_patch` (`{url, from, from_size, digest, size}` or null), `rootfs_sha256`, `rootfs_digest`, `rootfs_size`, `state`, `state_reason`, `promotion`, `latest`, `rollout_percent` |
//! | `GET /stacks/v1/<name>` | the stack (as `stack show --json`) |
//! | `GET/HEAD /stacks/v1/<name>/rootfs.tar[?digest=D][&platform=P][&cell=ID]` | the flattened rootfs (a blob: `Docker-Content-Digest`, `ETag`, ranges); `digest` names a promoted image or platform manifest; without it the cell's, or without a cell the fully rolled-out promotion (during a canary: what every cell outside it runs). Digest-addressed answers are immutable, the others `no-cache` ([`caching`]); `If-None-Match` gets 304 |
//! | `GET/HEAD /stacks/v1/<name>/rootfs.caibx`, `.../rootfs.patch` (same query) | that rootfs's casync index, or its zstd patch from the rootfs its promotion replaced ([`crate::chunks`]), by the same rules; with `cell=` the GET leases a download slot for the cell's delta; 404 when it has none |
//! | `GET/HEAD /stacks/v1/chunks/<4 hex>/<id>.cacnk` | a chunk of any promoted rootfs |
//! | `PUT /stacks/v1/<name>/cells/<id>` `{"digest", "platform"?}` | 204: the cell's report ([`super::cells`]) |
//! | `GET /stacks/v1/<name>/status` | `stack status --json` |
//! | `POST /stacks/v1/<name>/{promote,rollout,rollback,state,default}` | admin: as the CLI; 403 `DENIED` unless `serve --allow-admin` |
//! | `POST /stacks/v1/<name>/register` `{"image", "description"?}` | a custom stack ([`super::custom`]), if the `custom_stacks` policy allows the caller |
//! | `GET /stacks/v1/lifecycle/<digest>` | [`super::lifecycle::Lifecycle`]: `current` (with `rolling_out_to` during a rollout), `canary`, `superseded`, `rolled_back`, `custom` or `unknown`; `restage_required`; with vulnerability feeds imported, `reason` and `fixes` ([`crate::sbom::report::lifecycle_reason`]) |
//!
//! Cells are served in every state; DEPRECATED, RESTRICTED and DISABLED
//! add `Warning: 299 - "<Cloud Controller's warning>"`. A stack with
//! `max_in_flight` N serves at most N rootfs downloads at once; the next
//! gets 429 `TOOMANYREQUESTS` with `Retry-After` (the base plus a random
//! share of it, so refused cells do not come back all at once).
//! Errors are `{"code","message"}` with the status of [`StackError`].
//!
//! Owns: paths, query and body parsing, statuses and headers. Handlers call
//! one function of [`super::ops`], [`super::cells`] or the table.
//!
//! Files: `route.rs` (paths), `reads.rs` (cells' requests), `writes.rs` (reports, admin
//! actions, registration), `error.rs` (error bodies), `caching.rs` (cache headers of
//! downloads), `gauges.rs` (the stack gauges of `/metrics`); this file holds the router
//! and dispatch.

use crate::registry::scope::RepositoryScope;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use serde_json::json;

use super::StackError;
use super::cells::{self, CellReport};
use super::custom::{Actor, CustomPolicy};
use super::lifecycle;
use super::ops::{self, PromoteRequest};
use super::table::{Promotion, Rootfs, Stack, StackName, StackState, StackTable};
use crate::auth::{Grant, Permission};
use crate::digest::Digest;
use crate::registry::pull::blob_response;
use crate::registry::query::QueryParams;
use crate::state::{StateStore, now_rfc3339};
use crate::store::blob_key;

pub mod caching;
mod error;
mod gauges;
mod reads;
mod route;
mod writes;
use error::*;
pub use gauges::with_stack_gauges;
use reads::*;
pub use route::{Action, Artifact, Route};
use writes::*;

/// What the operator switched on for `/stacks/v1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StacksConfig {
    /// Serve the admin POST routes (to the admin role when users are
    /// configured; `airlock serve --allow-admin`).
    pub allow_admin: bool,
    /// Base of `Retry-After` on a 429; a random extra of up to the same again is added.
    pub retry_after: Duration,
    /// Cell reports older than this count as stale in `status`.
    pub stale_after: Duration,
    /// Who may register custom stacks (`custom_stacks`, default off).
    pub custom_stacks: CustomPolicy,
}

impl Default for StacksConfig {
    /// Admin routes off, `Retry-After` 10 to 20 s, stale after 1 hour.
    fn default() -> StacksConfig {
        StacksConfig {
            allow_admin: false,
            retry_after: Duration::from_secs(10),
            stale_after: Duration::from_secs(3600),
            custom_stacks: CustomPolicy::Off,
        }
    }
}

/// How long a cell's delta download keeps its slot without asking for a chunk.
pub const LEASE_IDLE: Duration = Duration::from_secs(60);

/// The stacks API's share of the server: its switches and the rootfs
/// downloads in flight per stack.
#[derive(Debug, Default)]
pub struct StacksServer {
    /// The switches.
    pub config: StacksConfig,
    downloads: Mutex<HashMap<String, Arc<AtomicU32>>>,
    /// The last stack table read, by its document digest (cells ask often;
    /// the table changes rarely).
    table: Mutex<Option<(Digest, Arc<StackTable>)>>,
    /// Delta downloads in flight: (stack, cell) → the slot its index GET took.
    leases: Mutex<HashMap<(String, String), Lease>>,
    /// Where each chunk of the promoted rootfs is, for the table digest it was built from.
    chunks: tokio::sync::Mutex<Option<(Digest, Arc<crate::chunks::store::ChunkLookup>)>>,
}

/// One cell's delta download: its slot, and when it last asked for something.
#[derive(Debug)]
struct Lease {
    slot: Slot,
    touched: std::time::Instant,
}

impl StacksServer {
    /// A server with `config`.
    pub fn new(config: StacksConfig) -> StacksServer {
        StacksServer {
            config,
            ..StacksServer::default()
        }
    }

    /// The stack table in the current state: one read of the root, the
    /// document parsed only when its digest changed.
    ///
    /// Errors: the state or the document cannot be read.
    pub async fn table(
        &self,
        state: &StateStore,
    ) -> std::result::Result<Arc<StackTable>, StackError> {
        self.table_in(state, state.snapshot().await?).await
    }

    /// The stack table of a root read at or after `since`
    /// ([`StateStore::snapshot_since`]): for a URL naming a rootfs digest
    /// the held table lacks, which another replica may have just handed out.
    ///
    /// Errors: the state or the document cannot be read.
    pub async fn table_since(
        &self,
        state: &StateStore,
        since: std::time::Instant,
    ) -> std::result::Result<Arc<StackTable>, StackError> {
        self.table_in(state, state.snapshot_since(since).await?)
            .await
    }

    async fn table_in(
        &self,
        state: &StateStore,
        snap: Arc<crate::state::Snapshot>,
    ) -> std::result::Result<Arc<StackTable>, StackError> {
        let Some(digest) = snap
            .state
            .as_ref()
            .and_then(|s| s.documents.get(super::table::DOC_NAME))
        else {
            return Ok(Arc::new(StackTable::default()));
        };
        if let Ok(cached) = self.table.lock()
            && let Some((d, t)) = cached.as_ref()
            && d == digest
        {
            return Ok(t.clone());
        }
        let table = Arc::new(ops::load_in(state, &snap).await?);
        if let Ok(mut cached) = self.table.lock() {
            *cached = Some((digest.clone(), table.clone()));
        }
        Ok(table)
    }

    /// Takes one of `limit` download slots of `stack`; `None` when all are taken.
    fn acquire(&self, stack: &StackName, limit: u32) -> Option<Slot> {
        let counter = self
            .downloads
            .lock()
            .ok()?
            .entry(stack.to_string())
            .or_default()
            .clone();
        counter
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(Slot(counter))
    }

    /// A slot for a tar download of `stack`: the lease of `cell`'s delta
    /// download when it has one (a cell falling back to the full download
    /// keeps its place), else a new one of `limit`.
    fn take_slot(&self, stack: &StackName, cell: Option<&str>, limit: u32) -> Option<Slot> {
        let mut leases = self.leases.lock().ok()?;
        expire(&mut leases);
        if let Some(l) = cell.and_then(|c| leases.remove(&(stack.to_string(), c.to_string()))) {
            return Some(l.slot);
        }
        drop(leases);
        self.acquire(stack, limit)
    }

    /// Leases one of `limit` slots of `stack` to `cell`'s delta download
    /// (kept while the cell asks for chunks at least every [`LEASE_IDLE`],
    /// given back by its report); true when it holds one now.
    fn lease(&self, stack: &StackName, cell: &str, limit: u32) -> bool {
        let Ok(mut leases) = self.leases.lock() else {
            return false;
        };
        expire(&mut leases);
        let key = (stack.to_string(), cell.to_string());
        if let Some(l) = leases.get_mut(&key) {
            l.touched = std::time::Instant::now();
            return true;
        }
        match self.acquire(stack, limit) {
            Some(slot) => {
                let touched = std::time::Instant::now();
                leases.insert(key, Lease { slot, touched });
                true
            }
            None => false,
        }
    }

    /// Keeps `cell`'s lease on `stack` alive (a chunk request).
    fn touch_lease(&self, stack: &str, cell: &str) {
        if let Ok(mut leases) = self.leases.lock()
            && let Some(l) = leases.get_mut(&(stack.to_string(), cell.to_string()))
        {
            l.touched = std::time::Instant::now();
        }
    }

    /// Gives back `cell`'s lease on `stack` (it reported: the download is over).
    fn release_lease(&self, stack: &StackName, cell: &str) {
        if let Ok(mut leases) = self.leases.lock() {
            leases.remove(&(stack.to_string(), cell.to_string()));
        }
    }

    /// Where each chunk of every promoted rootfs is (rebuilt when the
    /// stack table changed, reading only chunk maps not read before).
    async fn chunk_lookup(
        &self,
        state: &StateStore,
    ) -> std::result::Result<Arc<crate::chunks::store::ChunkLookup>, StackError> {
        let table = self.table(state).await?;
        let snap = state.snapshot().await?;
        let digest = snap
            .state
            .as_ref()
            .and_then(|s| s.documents.get(super::table::DOC_NAME).cloned());
        let mut cached = self.chunks.lock().await;
        let previous = cached.clone();
        if let Some((seen, lookup)) = &previous
            && Some(seen) == digest.as_ref()
        {
            return Ok(lookup.clone());
        }
        let maps = table.chunk_map_set();
        let store = state.blobstore().clone();
        let load = crate::chunks::store::ChunkLookup::load(store, maps, previous.map(|(_, l)| l));
        let lookup = Arc::new(load.await?);
        if let Some(d) = digest {
            *cached = Some((d, lookup.clone()));
        }
        Ok(lookup)
    }

    /// The stacks whose promoted rootfs chunk maps name the chunk `id`
    /// (for the access layer: a chunk is readable when the caller may read
    /// one of them).
    ///
    /// Errors: the state, the table or a chunk map cannot be read.
    pub async fn stacks_using_chunk(
        &self,
        state: &StateStore,
        id: &crate::chunks::ChunkId,
    ) -> std::result::Result<Vec<StackName>, StackError> {
        let lookup = self.chunk_lookup(state).await?;
        let maps: std::collections::HashSet<&Digest> = lookup.maps_of(id).collect();
        if maps.is_empty() {
            return Ok(Vec::new());
        }
        let table = self.table(state).await?;
        Ok(table
            .stacks
            .iter()
            .filter(|(_, s)| {
                s.promotions
                    .iter()
                    .flat_map(|p| &p.rootfs)
                    .any(|r| r.chunks.as_ref().is_some_and(|c| maps.contains(&c.map)))
            })
            .map(|(n, _)| n.clone())
            .collect())
    }

    /// Rootfs downloads of `stack` in flight now (delta downloads included).
    pub fn in_flight(&self, stack: &str) -> u32 {
        if let Ok(mut leases) = self.leases.lock() {
            expire(&mut leases);
        }
        self.downloads
            .lock()
            .ok()
            .and_then(|m| m.get(stack).map(|c| c.load(Ordering::Acquire)))
            .unwrap_or(0)
    }
}

/// Drops the leases idle for longer than [`LEASE_IDLE`] (a cell that died
/// or went away mid-delta gives its slot back).
fn expire(leases: &mut HashMap<(String, String), Lease>) {
    leases.retain(|_, l| l.touched.elapsed() < LEASE_IDLE);
}

/// One download slot, given back when the response body is dropped.
#[derive(Debug)]
struct Slot(Arc<AtomicU32>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What the stacks API needs from the composition root (`server::App`).
pub trait Context: Send + Sync + 'static {
    /// The state to serve (re-read on every request).
    fn state(&self) -> &StateStore;
    /// Switches and download slots.
    fn stacks(&self) -> &StacksServer;
}

/// The `/stacks/v1` router.
pub fn router(ctx: Arc<dyn Context>) -> Router {
    Router::new()
        .route("/stacks/v1", any(handle))
        .route("/stacks/v1/", any(handle))
        .route("/stacks/v1/{*path}", any(handle))
        .with_state(ctx)
}

type Result<T> = std::result::Result<T, ApiError>;

/// Serves the [`Route`] the access layer parsed and checked (its request
/// extension); a request without one (a router used without the access
/// layer) is refused, never parsed again here.
async fn handle(State(ctx): State<Arc<dyn Context>>, req: axum::extract::Request) -> Response {
    let (mut parts, body) = req.into_parts();
    let (method, uri, headers) = (&parts.method, &parts.uri, &parts.headers);
    let Some(route) = parts.extensions.remove::<Route>() else {
        tracing::error!(path = %uri.path(), "stacks API request without the access layer's route");
        return ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "UNKNOWN",
            "the request was not routed by the access layer",
        )
        .into_response();
    };
    let scope = parts
        .extensions
        .get::<RepositoryScope>()
        .cloned()
        .unwrap_or_default();
    let grant = parts.extensions.get::<Grant>().cloned().unwrap_or_default();
    let caller = Caller {
        scope: &scope,
        grant: &grant,
    };
    dispatch(&*ctx, route, method, uri, headers, &caller, body)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Who calls, as the access layer found them.
struct Caller<'a> {
    /// The repositories the caller may read (custom stack registration).
    scope: &'a RepositoryScope,
    /// What the caller may do ([`Grant::allows`]).
    grant: &'a Grant,
}

impl Caller<'_> {
    /// Whether the caller may read stack `name` (in `table`): what a list
    /// shows. The access layer has already checked the route itself
    /// (`server::routes`); this only filters.
    fn reads(&self, table: &StackTable, name: &StackName) -> bool {
        self.grant
            .allows(Permission::Stack, &table.repositories(name))
    }

    /// `Ok` when the caller may do `permission` on every repository of
    /// `named` (the images a request body names: the access layer checked
    /// the stack's own, `server::routes::Touches::StackAndNamed`); else 403
    /// `DENIED` naming them.
    fn named(&self, name: &StackName, permission: Permission, named: &[String]) -> Result<()> {
        if self.grant.allows(permission, named) {
            return Ok(());
        }
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "DENIED",
            format!(
                "stack {name}: the images named are in repositories outside this user's: {}",
                named.join(", ")
            ),
        ))
    }
}

/// The 404 of a chunk that no stack the caller may read uses: the same
/// answer as for a chunk that is in no promoted rootfs at all, so the
/// chunk store tells nobody what exists outside what they may read.
pub fn chunk_not_found(id: &crate::chunks::ChunkId) -> Response {
    ApiError::from(chunk_missing(id)).into_response()
}

fn method_not_allowed(allow: &'static str) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "UNSUPPORTED",
        format!("allowed: {allow}"),
    );
    e.allow = Some(allow);
    e
}

async fn dispatch(
    ctx: &dyn Context,
    route: Route,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    caller: &Caller<'_>,
    body: Body,
) -> Result<Response> {
    let query = QueryParams::from_uri(uri);
    let read = matches!(*method, Method::GET | Method::HEAD);
    // Who may call which route is declared in `server::routes` and
    // enforced before this handler runs.
    match route {
        Route::List if read => list(ctx, caller).await,
        Route::Stack(name) if read => match query.get("cell") {
            Some(cell) => resolve(ctx, &name, cell, query.get("platform")).await,
            None => show(ctx, &name).await,
        },
        Route::Rootfs(name, artifact) if read => {
            rootfs(
                ctx,
                &name,
                artifact,
                &query,
                headers,
                *method == Method::HEAD,
            )
            .await
        }
        Route::Chunk(id) if read => chunk(ctx, &id, &query, headers, *method == Method::HEAD).await,
        Route::Status(name) if read => status(ctx, &name).await,
        Route::Lifecycle(digest) if read => {
            let table = ctx.stacks().table(ctx.state()).await?;
            let l = lifecycle::lifecycle(&table, &digest);
            Ok(
                axum::Json(crate::sbom::report::lifecycle_json(ctx.state(), &l).await)
                    .into_response(),
            )
        }
        Route::Register(name) if *method == Method::POST => {
            register(ctx, &name, caller.scope, body).await
        }
        Route::Cell(name, id) if *method == Method::PUT => report(ctx, &name, id, body).await,
        Route::Admin(name, action) if *method == Method::POST => {
            admin(ctx, &name, action, caller, body).await
        }
        Route::Cell(..) => Err(method_not_allowed("PUT")),
        Route::Admin(..) | Route::Register(..) => Err(method_not_allowed("POST")),
        _ => Err(method_not_allowed("GET, HEAD")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let n = |s: &str| s.parse::<StackName>().unwrap();
        assert_eq!(Route::parse("/stacks/v1/").ok(), Some(Route::List));
        assert_eq!(
            Route::parse("/stacks/v1/fs4").ok(),
            Some(Route::Stack(n("fs4")))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/rootfs.tar").ok(),
            Some(Route::Rootfs(n("fs4"), Artifact::Tar))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/rootfs.caibx").ok(),
            Some(Route::Rootfs(n("fs4"), Artifact::Index))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/rootfs.patch").ok(),
            Some(Route::Rootfs(n("fs4"), Artifact::Patch))
        );
        let id = crate::chunks::ChunkId::of(b"x");
        assert_eq!(
            Route::parse(&format!("/stacks/v1/chunks/{}", id.store_path())).ok(),
            Some(Route::Chunk(id))
        );
        assert_eq!(
            Route::parse("/stacks/v1/chunks/status").ok(),
            Some(Route::Status(n("chunks")))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/cells/diego-cell%2F0a").ok(),
            Some(Route::Cell(n("fs4"), "diego-cell/0a".into()))
        );
        assert_eq!(
            Route::parse("/stacks/v1/fs4/cells/diego-cell/0a").ok(),
            Some(Route::Cell(n("fs4"), "diego-cell/0a".into()))
        );
        let d = Digest::sha256_of(b"x");
        assert_eq!(
            Route::parse(&format!("/stacks/v1/lifecycle/{d}")).ok(),
            Some(Route::Lifecycle(d))
        );
        assert_eq!(
            Route::parse("/stacks/v1/lifecycle/status").ok(),
            Some(Route::Status(n("lifecycle")))
        );
        assert!(Route::parse("/stacks/v1/FS4").is_err());
        assert!(Route::parse("/stacks/v1/fs4/nope").is_err());
        assert!(Route::parse("/stacks/v1/fs4/cells/a%2").is_err());
    }
}
