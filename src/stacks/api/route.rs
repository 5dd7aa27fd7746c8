//! [`Route`]: a `/stacks/v1` path parsed into what is asked (percent-decoded,
//! typed names, the admin actions): the only reading of a `/stacks/v1` path.
//! The access layer's route table (`server::routes`) matches `/stacks/v1`
//! rows through [`Route::parse`] and hands the parsed [`Route`] on as a
//! request extension, which [`super::router`]'s handler serves.

use super::*;

/// A parsed `/stacks/v1` path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/stacks/v1` or `/stacks/v1/`: the stack table.
    List,
    /// `/stacks/v1/<name>`.
    Stack(StackName),
    /// `/stacks/v1/<name>/rootfs.{tar,caibx,patch}`.
    Rootfs(StackName, Artifact),
    /// `/stacks/v1/chunks/<4 hex>/<id>.cacnk`.
    Chunk(crate::chunks::ChunkId),
    /// `/stacks/v1/<name>/status`.
    Status(StackName),
    /// `/stacks/v1/<name>/cells/<id>` (the id percent-decoded: `%2F` or `/`).
    Cell(StackName, String),
    /// `/stacks/v1/<name>/{promote,rollout,rollback,state,default}`.
    Admin(StackName, Action),
    /// `/stacks/v1/<name>/register`.
    Register(StackName),
    /// `/stacks/v1/lifecycle/<digest>`.
    Lifecycle(Digest),
}

/// What a rootfs download sends: the tar, its casync blob index, or its
/// zstd patch from the rootfs it replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Artifact {
    /// `rootfs.tar`.
    Tar,
    /// `rootfs.caibx`.
    Index,
    /// `rootfs.patch`.
    Patch,
}

impl Artifact {
    /// The file name in the URL (`.../NAME/<file>`).
    pub(super) fn file(self) -> &'static str {
        match self {
            Artifact::Tar => "rootfs.tar",
            Artifact::Index => "rootfs.caibx",
            Artifact::Patch => "rootfs.patch",
        }
    }

    /// What it is, for messages.
    pub(super) fn what(self) -> &'static str {
        match self {
            Artifact::Tar => "rootfs",
            Artifact::Index => "rootfs index",
            Artifact::Patch => "rootfs patch",
        }
    }

    /// Its `Content-Type`.
    pub(super) fn content_type(self) -> &'static str {
        match self {
            Artifact::Tar => "application/x-tar",
            Artifact::Index => "application/octet-stream",
            Artifact::Patch => "application/zstd",
        }
    }
}

/// An admin action on a stack (`POST /stacks/v1/<name>/<action>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// `promote`.
    Promote,
    /// `rollout`.
    Rollout,
    /// `rollback`.
    Rollback,
    /// `state`.
    State,
    /// `default`.
    Default,
}

/// A path part percent-decoded ([`crate::names::percent_decode`]), or 400.
fn decode<'a>(what: &str, s: &'a str) -> Result<std::borrow::Cow<'a, str>> {
    crate::names::percent_decode(s)
        .map_err(|e| StackError::Invalid(format!("bad {what} {s:?}: {e}")).into())
}

impl Route {
    /// The stack the route is about, if any.
    pub fn stack(&self) -> Option<&StackName> {
        match self {
            Route::Stack(n)
            | Route::Rootfs(n, _)
            | Route::Status(n)
            | Route::Cell(n, _)
            | Route::Admin(n, _)
            | Route::Register(n) => Some(n),
            Route::List | Route::Chunk(_) | Route::Lifecycle(_) => None,
        }
    }

    /// The pattern of the route table row (`server::routes::ROUTES`) this
    /// endpoint is: what the access layer enforces for it.
    pub fn pattern(&self) -> &'static str {
        match self {
            Route::List => "/stacks/v1/",
            Route::Stack(_) => "/stacks/v1/{stack}",
            Route::Rootfs(_, Artifact::Tar) => "/stacks/v1/{stack}/rootfs.tar",
            Route::Rootfs(_, Artifact::Index) => "/stacks/v1/{stack}/rootfs.caibx",
            Route::Rootfs(_, Artifact::Patch) => "/stacks/v1/{stack}/rootfs.patch",
            Route::Chunk(_) => "/stacks/v1/chunks/{chunk*}",
            Route::Status(_) => "/stacks/v1/{stack}/status",
            Route::Cell(..) => "/stacks/v1/{stack}/cells/{cell*}",
            Route::Admin(_, Action::Promote) => "/stacks/v1/{stack}/promote",
            Route::Admin(_, Action::Rollout) => "/stacks/v1/{stack}/rollout",
            Route::Admin(_, Action::Rollback) => "/stacks/v1/{stack}/rollback",
            Route::Admin(_, Action::State) => "/stacks/v1/{stack}/state",
            Route::Admin(_, Action::Default) => "/stacks/v1/{stack}/default",
            Route::Register(_) => "/stacks/v1/{stack}/register",
            Route::Lifecycle(_) => "/stacks/v1/lifecycle/{digest}",
        }
    }

    /// Parses a `/stacks/v1` path as sent (split at `/`, each name
    /// percent-decoded once, then parsed as its type), as the access layer
    /// asks it: `Ok(None)` for a path that is no endpoint (the access layer
    /// answers 404), `Err` with the answer (400) for a stack name or cell
    /// id that does not parse as its type.
    pub fn of_path(path: &str) -> std::result::Result<Option<Route>, Box<Response>> {
        match Route::parse(path) {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.status == StatusCode::NOT_FOUND => Ok(None),
            Err(e) => Err(Box::new(e.into_response())),
        }
    }

    /// Parses a `/stacks/v1` path as sent: split at `/`, each name
    /// percent-decoded once, then parsed as its type.
    ///
    /// Errors: 404 `NOT_FOUND` for a path that is no endpoint; 400 for a
    /// stack name or cell id that is not one (or malformed encoding).
    pub(super) fn parse(path: &str) -> Result<Route> {
        let no_route = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("no stacks endpoint {path}"),
            )
        };
        // One `/` after the prefix: `/stacks/v1//bb` names no stack (an
        // empty one), as every other path's empty segment names nothing.
        let rest = path.strip_prefix("/stacks/v1").ok_or_else(no_route)?;
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        if rest.is_empty() {
            return Ok(Route::List);
        }
        let (name, tail) = match rest.split_once('/') {
            Some((n, t)) => (n, Some(t)),
            None => (rest, None),
        };
        if name == "lifecycle"
            && let Some(d) = tail.and_then(|t| crate::names::percent_decode(t).ok()?.parse().ok())
        {
            return Ok(Route::Lifecycle(d));
        }
        if name == "chunks"
            && let Some(id) = tail.and_then(crate::chunks::parse_store_path)
        {
            return Ok(Route::Chunk(id));
        }
        let name: StackName = decode("stack name", name)?.parse()?;
        Ok(match tail {
            None | Some("") => Route::Stack(name),
            Some(t) if t == Artifact::Tar.file() => Route::Rootfs(name, Artifact::Tar),
            Some(t) if t == Artifact::Index.file() => Route::Rootfs(name, Artifact::Index),
            Some(t) if t == Artifact::Patch.file() => Route::Rootfs(name, Artifact::Patch),
            Some("status") => Route::Status(name),
            Some("promote") => Route::Admin(name, Action::Promote),
            Some("rollout") => Route::Admin(name, Action::Rollout),
            Some("rollback") => Route::Admin(name, Action::Rollback),
            Some("state") => Route::Admin(name, Action::State),
            Some("default") => Route::Admin(name, Action::Default),
            Some("register") => Route::Register(name),
            Some(t) => match t.strip_prefix("cells/") {
                Some(id) => {
                    let id = decode("cell id", id)?.into_owned();
                    cells::check_cell_id(&id)?;
                    Route::Cell(name, id)
                }
                None => return Err(no_route()),
            },
        })
    }
}
