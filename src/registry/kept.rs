//! Whole answers to repeated GETs of small content, kept per worker thread
//! (issue 40): a manifest, or a whole blob of at most
//! [`HOT_BLOB_MAX`](crate::store::hot::HOT_BLOB_MAX) bytes, asked for again
//! by the same path is answered from the kept response head and bytes,
//! without parsing the route, looking the repository, tag and record up
//! again or building the head: most of a small GET's cost.
//!
//! Owns: which answers are kept and when one is reused. Kept: a `200 OK`
//! to a `GET` without a query string ([`keepable`]) whose content the
//! state's tree names (not a blob linked only by a push), computed in the
//! snapshot whose state document digest it is kept under, with the
//! registry configuration it is kept with (the `Arc` itself). Reused for
//! a `GET` of the same path while the current snapshot
//! ([`StateStore::fresh_snapshot`](crate::state::StateStore::fresh_snapshot),
//! the same freshness rule as every read) is that one and the
//! configuration the same: a state document's digest names the whole
//! state, so the handlers would find the same content and build the same
//! answer. A changed root or a reloaded configuration is a miss, and the
//! handlers answer (and the new answer is kept). A blob's answer is never
//! reused for a request with `Range` (a range is answered by the
//! handlers). A reused manifest answer notes its pull as the handler does.
//! The bytes are those the handlers read and verified (shared with the
//! store's own cache of small verified blobs, not copied).
//!
//! Never decides who may read: the access layer did, before the registry
//! saw the request. The caller's [`RepositoryScope`] is checked on the
//! repository the answer is from, as `dispatch` does; one outside it
//! goes to the handlers (and their 403). With a default mirror namespace
//! (`mirror_namespace`), where the repository a path means depends on the
//! caller's scope, only a caller whose scope covers every repository
//! keeps or reuses answers.
//!
//! Bounds, per worker thread: [`KEPT_MAX`] answers and [`KEPT_BYTES`]
//! bytes of bodies; a full table starts over.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::Response;
use bytes::Bytes;

use super::Context;
use super::config::RegistryConfig;
use super::scope::RepositoryScope;
use crate::digest::Digest;
use crate::names::{RepositoryName, Tag};

/// Answers kept per worker thread at most.
pub const KEPT_MAX: usize = 1024;
/// Bytes of kept bodies per worker thread at most (4 MiB; the bytes are
/// mostly shared with the store's cache of small verified blobs).
pub const KEPT_BYTES: usize = 4 << 20;

/// When an answer was read: the registry configuration, the store's
/// [`forgotten`](crate::store::Blobstore::forgotten) count and the state
/// document digest of the current snapshot, taken before the handlers
/// read anything (mirror namespaces included).
pub struct Mark {
    config: Arc<RegistryConfig>,
    forgotten: u64,
    root: Digest,
}

impl PartialEq for Mark {
    /// The same configuration (the same `Arc`), count and snapshot.
    fn eq(&self, other: &Mark) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
            && self.forgotten == other.forgotten
            && self.root == other.root
    }
}

impl Mark {
    /// Now, when the held snapshot is fresh and not empty.
    pub fn now(ctx: &dyn Context) -> Option<Mark> {
        let state = ctx.state();
        // Configuration and count first: what changes after them is seen
        // by the check before keeping.
        let config = Arc::clone(&ctx.config());
        let forgotten = state.blobstore().forgotten();
        Some(Mark {
            config,
            forgotten,
            root: state.fresh_snapshot()?.digest.clone()?,
        })
    }
}

/// What a handler hands over to be kept with its answer: the repository
/// the answer is from (after mirror namespaces), when it was read, its
/// whole body, and for a manifest the pull to note on reuse.
pub struct Keep {
    /// When the answer was read (taken before).
    pub mark: Mark,
    /// The repository the content was served from.
    pub repository: RepositoryName,
    /// The whole body.
    pub body: Bytes,
    /// What the answer is.
    pub kind: Kind,
}

/// The kind of a kept answer.
pub enum Kind {
    /// A whole blob (not reused for a request with `Range`).
    Blob,
    /// A manifest: its digest and the tag it was asked for by (noted as a
    /// pull on reuse, `gc`'s `pulled_within_days`).
    Manifest(Digest, Option<Tag>),
}

/// A kept answer.
struct Kept {
    keep: Keep,
    head: HeaderMap,
}

#[derive(Default)]
struct Table {
    answers: HashMap<Box<str>, Kept, foldhash::fast::RandomState>,
    bytes: usize,
    /// Answers reused on this thread ([`reused`]).
    reused: std::cell::Cell<u64>,
}

thread_local! {
    static KEPT: RefCell<Table> = RefCell::new(Table::default());
}

/// Whether a request's answer may be kept or reused: a `GET` without a
/// query string (`ns=` and the other parameters go to the handlers).
pub fn keepable(method: &Method, uri: &Uri) -> bool {
    *method == Method::GET && uri.query().is_none()
}

/// The answer kept for a [`keepable`] `GET` of `path` when it may be
/// reused for this request (see the module), else `None`.
pub fn answer(
    ctx: &dyn Context,
    path: &str,
    headers: &HeaderMap,
    scope: &RepositoryScope,
) -> Option<Response> {
    KEPT.with_borrow(|table| {
        let kept = table.answers.get(path)?;
        let (state, mark) = (ctx.state(), &kept.keep.mark);
        let snap = state.fresh_snapshot()?;
        if snap.digest.as_ref() != Some(&mark.root)
            || state.blobstore().forgotten() != mark.forgotten
            || !Arc::ptr_eq(&ctx.config(), &mark.config)
            || !scope.covers(kept.keep.repository.as_str())
            || (mark.config.mirror_namespace.is_some() && !scope.is_all())
        {
            return None;
        }
        match &kept.keep.kind {
            Kind::Blob if headers.contains_key(header::RANGE) => return None,
            Kind::Blob => {}
            Kind::Manifest(digest, tag) => {
                ctx.pulls()
                    .note(&kept.keep.repository, digest, tag.as_ref())
            }
        }
        let mut res = Response::new(Body::from(kept.keep.body.clone()));
        *res.headers_mut() = kept.head.clone();
        table.reused.set(table.reused.get() + 1);
        Some(res)
    })
}

/// How many kept answers this thread has reused (a request served on the
/// caller's thread, as a router's `oneshot` is, counts here).
pub fn reused() -> u64 {
    KEPT.with_borrow(|t| t.reused.get())
}

/// Keeps `res`, the answer to a [`keepable`] `GET` of `path`, with what
/// its handler handed over, when it is a `200 OK` and nothing changed
/// since its [`Mark`] (the same configuration, nothing forgotten by the
/// store, the same current snapshot).
pub fn keep(ctx: &dyn Context, path: &str, scope: &RepositoryScope, keep: Keep, res: &Response) {
    if res.status() != StatusCode::OK
        || (keep.mark.config.mirror_namespace.is_some() && !scope.is_all())
        || Mark::now(ctx).as_ref() != Some(&keep.mark)
    {
        return;
    }
    let len = keep.body.len();
    KEPT.with_borrow_mut(|table| {
        if table.answers.len() >= KEPT_MAX || table.bytes + len > KEPT_BYTES {
            table.answers.clear();
            table.bytes = 0;
        }
        let kept = Kept {
            keep,
            head: res.headers().clone(),
        };
        if let Some(old) = table.answers.insert(path.into(), kept) {
            table.bytes -= old.keep.body.len();
        }
        table.bytes += len;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_gets_without_a_query_are_keepable() {
        let uri = |u: &str| u.parse::<Uri>().unwrap();
        assert!(keepable(&Method::GET, &uri("/v2/a/manifests/v1")));
        assert!(!keepable(&Method::HEAD, &uri("/v2/a/manifests/v1")));
        assert!(!keepable(&Method::PUT, &uri("/v2/a/manifests/v1")));
        assert!(!keepable(
            &Method::GET,
            &uri("/v2/a/manifests/v1?ns=docker.io")
        ));
        assert!(!keepable(&Method::GET, &uri("/v2/a/manifests/v1?")));
    }
}
