//! [`Route`]: a `/stacks/v1` path and method parsed into what is asked (percent-decoded
//! names, the admin actions).

use super::*;

/// A parsed `/stacks/v1` path.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Route {
    List,
    Stack(StackName),
    Rootfs(StackName, Artifact),
    Chunk(crate::chunks::ChunkId),
    Status(StackName),
    Cell(StackName, String),
    Admin(StackName, Action),
    Register(StackName),
    Lifecycle(Digest),
}

/// What a rootfs download sends: the tar, its casync blob index, or its
/// zstd patch from the rootfs it replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Artifact {
    Tar,
    Index,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Promote,
    Rollout,
    Rollback,
    State,
    Default,
}

/// Percent-decodes a path part (`%2F` in a cell id); `None` when malformed.
pub(super) fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Route {
    pub(super) fn parse(path: &str) -> Result<Route> {
        let no_route = || {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                format!("no stacks endpoint {path}"),
            )
        };
        let rest = path
            .strip_prefix("/stacks/v1")
            .ok_or_else(no_route)?
            .trim_start_matches('/');
        if rest.is_empty() {
            return Ok(Route::List);
        }
        let (name, tail) = match rest.split_once('/') {
            Some((n, t)) => (n, Some(t)),
            None => (rest, None),
        };
        if name == "lifecycle"
            && let Some(Ok(d)) = tail.map(str::parse::<Digest>)
        {
            return Ok(Route::Lifecycle(d));
        }
        if name == "chunks"
            && let Some(id) = tail.and_then(crate::chunks::parse_store_path)
        {
            return Ok(Route::Chunk(id));
        }
        let name: StackName = name.parse()?;
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
                    let id = decode(id)
                        .ok_or_else(|| StackError::Invalid(format!("bad cell id {id:?}")))?;
                    cells::check_cell_id(&id)?;
                    Route::Cell(name, id)
                }
                None => return Err(no_route()),
            },
        })
    }
}
