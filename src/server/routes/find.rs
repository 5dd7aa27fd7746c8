//! Reading a request's path ([`read`], [`find`]): the one parse of a
//! request, into the rows' pattern and typed [`Params`] (the module docs of
//! [`super`] state the rule). `/v2`, `/stacks/v1` and `/torcx` paths are
//! read by their room's grammar; every other path by the patterns of
//! [`ROUTES`].

use std::sync::OnceLock;

use axum::http::Method;
use axum::response::{IntoResponse, Response};

use super::{ROUTES, Route};
use crate::names::RepositoryName;
use crate::registry::routes::Route as RegistryRoute;
use crate::stacks::StackName;
use crate::stacks::api::Route as StacksRoute;

/// One segment of a parsed pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(&'static str),
    One(&'static str),
    Many(&'static str),
}

struct Pattern {
    /// Segments before the `{name*}` (all of them when there is none).
    head: Vec<Segment>,
    /// The `{name*}`, and the segments after it.
    tail: Option<(&'static str, Vec<Segment>)>,
}

fn parse(path: &'static str) -> Pattern {
    let segs: Vec<Segment> = path
        .strip_prefix('/')
        .unwrap_or(path)
        .split('/')
        .map(
            |s| match s.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
                Some(name) => match name.strip_suffix('*') {
                    Some(n) => Segment::Many(n),
                    None => Segment::One(name),
                },
                None => Segment::Literal(s),
            },
        )
        .collect();
    match segs.iter().position(|s| matches!(s, Segment::Many(_))) {
        Some(at) => {
            let Segment::Many(name) = segs[at] else {
                unreachable!()
            };
            Pattern {
                head: segs[..at].to_vec(),
                tail: Some((name, segs[at + 1..].to_vec())),
            }
        }
        None => Pattern {
            head: segs,
            tail: None,
        },
    }
}

fn patterns() -> &'static [Pattern] {
    static P: OnceLock<Vec<Pattern>> = OnceLock::new();
    P.get_or_init(|| ROUTES.iter().map(|r| parse(r.path)).collect())
}

/// A console asset's file name (`/ui/assets/{file}`), percent-decoded: one
/// path segment of `[A-Za-z0-9._-]`, not starting with `.`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssetName(pub String);

/// The typed parameters of a matched request path: what the access layer
/// checks and what the handler receives, as a request extension (the one
/// parse of the request). Each name is percent-decoded once
/// ([`crate::names::percent_decode`]) and parsed as its type; a path whose
/// name does not parse never matches ([`Found::Invalid`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Params {
    /// A row without parameters (probes, lists, forms).
    None,
    /// A `/v2` endpoint, read by the registry's grammar
    /// ([`crate::registry::routes::Route::parse`]).
    Registry(crate::registry::routes::Route),
    /// A `/stacks/v1` endpoint, read by the stacks API's grammar
    /// ([`crate::stacks::api::Route::of_path`]).
    Stacks(crate::stacks::api::Route),
    /// A torcx remote file ([`crate::torcx::api::FilePath::of_path`]).
    Torcx(crate::torcx::api::FilePath),
    /// A console or admin row's names (`{repo*}`, `{stack}`, `{file}`).
    Named {
        /// `{repo*}`.
        repository: Option<RepositoryName>,
        /// `{stack}`.
        stack: Option<StackName>,
        /// `{file}`.
        asset: Option<AssetName>,
    },
}

impl Params {
    /// The repository the path names (a `/v2` endpoint's or a console
    /// row's `{repo*}`), as sent (before `?ns=`).
    pub fn repository(&self) -> Option<&RepositoryName> {
        match self {
            Params::Registry(r) => r.repository(),
            Params::Named { repository, .. } => repository.as_ref(),
            _ => None,
        }
    }

    /// The stack the path names.
    pub fn stack(&self) -> Option<&StackName> {
        match self {
            Params::Stacks(r) => r.stack(),
            Params::Named { stack, .. } => stack.as_ref(),
            _ => None,
        }
    }

    /// Puts the typed values into `ext` for the handler: a room's own
    /// route (the registry's boxed, the stacks API's, torcx's), or each
    /// console name by its type ([`RepositoryName`], [`StackName`],
    /// [`AssetName`]).
    pub fn hand_on(self, ext: &mut axum::http::Extensions) {
        match self {
            Params::None => {}
            Params::Registry(r) => {
                // Boxed: the registry holds it across its request's awaits,
                // and every byte of that future is copied per request.
                ext.insert(Box::new(r));
            }
            Params::Stacks(r) => {
                ext.insert(r);
            }
            Params::Torcx(f) => {
                ext.insert(f);
            }
            Params::Named {
                repository,
                stack,
                asset,
            } => {
                if let Some(r) = repository {
                    ext.insert(r);
                }
                if let Some(s) = stack {
                    ext.insert(s);
                }
                if let Some(a) = asset {
                    ext.insert(a);
                }
            }
        }
    }
}

/// Why a `{name}` of a console or admin row does not parse.
fn named_error(what: &str, value: &str, e: impl std::fmt::Display) -> Box<Response> {
    let mut res = (
        axum::http::StatusCode::BAD_REQUEST,
        axum::Json(serde_json::json!({
            "code": "NAME_INVALID",
            "message": format!("invalid {what} {value:?}: {e}"),
        })),
    )
        .into_response();
    res.extensions_mut()
        .insert(crate::registry::errors::LoggedCode("NAME_INVALID"));
    Box::new(res)
}

/// The typed value of a console or admin row's `{name}` (`value` as sent),
/// into `out`. Errors: the 400 answer.
fn put_named(out: &mut Params, name: &str, value: &str) -> Result<(), Box<Response>> {
    let Params::Named {
        repository,
        stack,
        asset,
    } = out
    else {
        return Ok(());
    };
    let decoded = crate::names::percent_decode(value).map_err(|e| named_error(name, value, e))?;
    match name {
        "repo" => {
            *repository = Some(
                decoded
                    .parse()
                    .map_err(|e| named_error("repository name", value, e))?,
            );
        }
        "stack" => {
            *stack = Some(
                decoded
                    .parse()
                    .map_err(|e| named_error("stack name", value, e))?,
            );
        }
        "file" => {
            let ok = !decoded.is_empty()
                && !decoded.starts_with('.')
                && decoded
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !ok {
                return Err(named_error("file name", value, "not [A-Za-z0-9._-]"));
            }
            *asset = Some(AssetName(decoded.into_owned()));
        }
        other => return Err(named_error(other, value, "no type for this parameter")),
    }
    Ok(())
}

/// Whether `parts` (the path split at `/`) fit `pattern`'s shape: its
/// literals, and a non-empty part for every `{name}`; the `{name*}` part
/// as one slice of `path`. `Some` with each parameter's raw value.
fn shape<'a>(
    p: &Pattern,
    path: &'a str,
    parts: &[&'a str],
) -> Option<Vec<(&'static str, &'a str)>> {
    let fits = |pattern: &[Segment], parts: &[&'a str], out: &mut Vec<(&'static str, &'a str)>| {
        pattern.len() == parts.len()
            && pattern.iter().zip(parts).all(|(p, v)| match p {
                Segment::Literal(l) => l == v,
                Segment::One(n) => {
                    out.push((n, v));
                    !v.is_empty()
                }
                Segment::Many(_) => false,
            })
    };
    let mut out = Vec::new();
    match &p.tail {
        None => fits(&p.head, parts, &mut out).then_some(out),
        Some((name, after)) => {
            if parts.len() < p.head.len() + 1 + after.len() {
                return None;
            }
            let (head, rest) = parts.split_at(p.head.len());
            let (many, tail) = rest.split_at(rest.len() - after.len());
            if !fits(&p.head, head, &mut out) || !fits(after, tail, &mut out) {
                return None;
            }
            let start = head.iter().map(|s| s.len() + 1).sum::<usize>() + 1;
            let len = many.iter().map(|s| s.len()).sum::<usize>() + many.len() - 1;
            // Empty parts inside (`a//b`) are the type's to refuse.
            out.push((name, path.get(start..start + len)?));
            Some(out)
        }
    }
}

/// What [`find`] found for a request.
#[derive(Debug)]
pub enum Found {
    /// The row declaring this method on this path, and its typed parameters.
    Route(&'static Route, Params),
    /// Rows declare the path, none this method: 405 with these in `Allow`
    /// (under `/v2`, see [`super::REGISTRY_OTHER_METHODS`]); the typed parameters.
    Method(Vec<&'static str>, Params),
    /// No row declares the path: 404.
    None,
    /// The path has a row's shape but a name in it does not parse as its
    /// type: the room's own refusal (400 `NAME_INVALID` and the like, 404
    /// for torcx), answered before anything else (fail closed: a name that
    /// does not parse never reaches a handler, nor is taken to name
    /// nothing).
    Invalid(Box<Response>),
}

impl Found {
    /// The typed parameters, when a row matched the path.
    pub fn params(&self) -> Option<&Params> {
        match self {
            Found::Route(_, p) | Found::Method(_, p) => Some(p),
            Found::None | Found::Invalid(_) => None,
        }
    }
}

/// The declaration of `method` on `path` (the path as sent), with the
/// path's typed parameters: the one parse of a request's path. `/v2`,
/// `/stacks/v1` and `/torcx` paths are read by their room's grammar (which
/// names its row's pattern); every other path by the patterns of
/// [`ROUTES`], each `{name}` percent-decoded once and parsed as its type.
pub fn find(method: &Method, path: &str) -> Found {
    match read(method, path) {
        Ok(Some((pattern, params))) => select(method, pattern, params),
        Ok(None) => Found::None,
        Err(res) => Found::Invalid(res),
    }
}

/// The row of `method` among those of `pattern` (what [`read`] found), with
/// `params`: no parsing.
pub fn select(method: &Method, pattern: &'static str, params: Params) -> Found {
    let mut allow: Vec<&'static str> = Vec::new();
    for route in ROUTES.iter().filter(|r| r.path == pattern) {
        if route.methods.contains(method) {
            return Found::Route(route, params);
        }
        for m in route.methods.names() {
            if !allow.contains(&m) {
                allow.push(m);
            }
        }
    }
    if allow.is_empty() {
        // A grammar named a pattern no row declares: nobody may call it.
        return Found::None;
    }
    Found::Method(allow, params)
}

/// The one parse of a request's path: the pattern of the rows it matches
/// and its typed parameters; `Ok(None)` when no row has its shape; `Err`
/// with the room's refusal of a name that does not parse (`method` picks
/// the registry's code: a read of a bad tag is `MANIFEST_UNKNOWN`).
pub fn read(method: &Method, path: &str) -> Result<Option<(&'static str, Params)>, Box<Response>> {
    use crate::registry::errors::RegistryError;
    if path == "/v2" {
        return Ok(Some(("/v2", Params::Registry(RegistryRoute::Base))));
    }
    if path.starts_with("/v2/") {
        return match RegistryRoute::parse(path) {
            Ok(r) => Ok(Some((r.pattern(), Params::Registry(r)))),
            Err(RegistryError::NoEndpoint) => Ok(None),
            Err(e) => Err(Box::new(e.for_method(method).into_response())),
        };
    }
    if path == "/stacks/v1" {
        return Ok(Some(("/stacks/v1", Params::Stacks(StacksRoute::List))));
    }
    if path.starts_with("/stacks/v1/") {
        return Ok(StacksRoute::of_path(path)?.map(|r| (r.pattern(), Params::Stacks(r))));
    }
    if path.starts_with("/torcx/") && path != "/torcx/" {
        return match crate::torcx::api::FilePath::of_path(path) {
            Ok(Some(f)) => Ok(Some((
                crate::torcx::api::FilePath::PATTERN,
                Params::Torcx(f),
            ))),
            Ok(None) => Ok(None),
            Err(e) => Err(Box::new(e.into_response())),
        };
    }
    let parts: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    for (route, pattern) in ROUTES.iter().zip(patterns()) {
        if delegated(route.path) {
            continue;
        }
        let Some(raw) = shape(pattern, path, &parts) else {
            continue;
        };
        let mut params = if raw.is_empty() {
            Params::None
        } else {
            Params::Named {
                repository: None,
                stack: None,
                asset: None,
            }
        };
        for (name, value) in raw {
            put_named(&mut params, name, value)?;
        }
        return Ok(Some((route.path, params)));
    }
    Ok(None)
}

/// Whether rows of `pattern` are matched by a room's grammar
/// ([`read`]), not by their pattern.
fn delegated(pattern: &str) -> bool {
    pattern == "/v2"
        || pattern.starts_with("/v2/")
        || pattern == "/stacks/v1"
        || pattern.starts_with("/stacks/v1/")
        || pattern == crate::torcx::api::FilePath::PATTERN
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::routes::markdown;

    fn route(m: Method, p: &str) -> Option<(&'static str, Params)> {
        match find(&m, p) {
            Found::Route(r, params) => Some((r.path, params)),
            _ => None,
        }
    }

    fn named(repo: Option<&str>, stack: Option<&str>) -> Params {
        Params::Named {
            repository: repo.map(|r| r.parse().unwrap()),
            stack: stack.map(|s| s.parse().unwrap()),
            asset: None,
        }
    }

    /// A path of `pattern`'s shape, with a valid value for every name.
    fn sample(pattern: &str) -> String {
        let d = crate::digest::Digest::sha256_of(b"x").to_string();
        let chunk = crate::chunks::ChunkId::of(b"x").store_path();
        pattern
            .replace("{repo*}", "a/b")
            .replace("{reference}", "v1")
            .replace("{blob}", &d)
            .replace("{subject}", &d)
            .replace("{digest}", &d)
            .replace("{session}", "5f1c3e2a-0000-4000-8000-000000000000")
            .replace("{stack}", "bb")
            .replace("{cell*}", "diego-cell/0a")
            .replace("{chunk*}", &chunk)
            .replace("{remote}", "r")
            .replace("{board}", "amd64-usr")
            .replace("{os}", "3033.2.0")
            .replace("{file}", "console.css")
    }

    #[test]
    fn every_row_is_found_by_a_path_of_its_shape() {
        for r in ROUTES {
            let path = sample(r.path);
            for m in r.methods.names() {
                let m: Method = m.parse().unwrap();
                match find(&m, &path) {
                    Found::Route(found, _) => assert_eq!(found.path, r.path, "{m} {path}"),
                    other => panic!("{m} {path}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn a_get_row_declares_head() {
        for r in ROUTES {
            assert_eq!(
                r.methods.contains(&Method::GET),
                r.methods.contains(&Method::HEAD),
                "{}",
                r.path
            );
        }
    }

    #[test]
    fn names_are_typed_and_decoded_once() {
        let stack = |s: &str| crate::stacks::api::Route::Stack(s.parse().unwrap());
        assert_eq!(
            route(Method::GET, "/api/v1/stacks/%62b"),
            Some(("/api/v1/stacks/{stack}", named(None, Some("bb"))))
        );
        assert_eq!(
            route(Method::GET, "/stacks/v1/%62b"),
            Some(("/stacks/v1/{stack}", Params::Stacks(stack("bb"))))
        );
        assert_eq!(
            route(Method::GET, "/ui/repositories/private%2Fsecret"),
            Some((
                "/ui/repositories/{repo*}",
                named(Some("private/secret"), None)
            ))
        );
        assert_eq!(
            route(Method::GET, "/ui/repositories/private/secret"),
            Some((
                "/ui/repositories/{repo*}",
                named(Some("private/secret"), None)
            ))
        );
        assert_eq!(
            route(Method::GET, "/v2/priv%61te/manifests/v1")
                .and_then(|(_, p)| p.repository().map(ToString::to_string)),
            Some("private".into())
        );
        assert_eq!(
            route(Method::PUT, "/stacks/v1/bb/cells/diego-cell%2F0a"),
            Some((
                "/stacks/v1/{stack}/cells/{cell*}",
                Params::Stacks(crate::stacks::api::Route::Cell(
                    "bb".parse().unwrap(),
                    "diego-cell/0a".into()
                ))
            ))
        );
        // A name that does not parse as its type is refused, on every
        // surface, whatever the method.
        for (m, p, status) in [
            (Method::GET, "/api/v1/stacks/%", 400),
            (Method::GET, "/api/v1/stacks/B", 400),
            (Method::POST, "/ui/stacks/%2e%2e/promote", 400),
            (Method::GET, "/ui/stacks/..", 400),
            (Method::GET, "/stacks/v1/%zz", 400),
            (Method::GET, "/stacks/v1/BB/status", 400),
            (Method::GET, "/ui/repositories/a//b", 400),
            (Method::GET, "/ui/repositories/A", 400),
            (Method::GET, "/v2/A/manifests/v1", 400),
            (Method::GET, "/torcx/%zz/b/1/f", 404),
            (Method::GET, "/torcx/.r/b/1/f", 404),
            (Method::GET, "/ui/assets/..", 400),
        ] {
            match find(&m, p) {
                Found::Invalid(res) => assert_eq!(res.status().as_u16(), status, "{m} {p}"),
                other => panic!("{m} {p}: {other:?}"),
            }
        }
    }

    #[test]
    fn stacks_rows_are_told_apart_as_the_stacks_api_reads_them() {
        let d = crate::digest::Digest::sha256_of(b"x");
        assert_eq!(
            route(Method::GET, &format!("/stacks/v1/lifecycle/{d}")).map(|r| r.0),
            Some("/stacks/v1/lifecycle/{digest}")
        );
        assert_eq!(
            route(Method::GET, "/stacks/v1/lifecycle/status").map(|r| r.0),
            Some("/stacks/v1/{stack}/status")
        );
        let id = crate::chunks::ChunkId::of(b"x");
        assert_eq!(
            route(
                Method::GET,
                &format!("/stacks/v1/chunks/{}", id.store_path())
            )
            .map(|r| r.0),
            Some("/stacks/v1/chunks/{chunk*}")
        );
        assert_eq!(
            route(Method::GET, "/stacks/v1/chunks/status").map(|r| r.0),
            Some("/stacks/v1/{stack}/status")
        );
    }

    #[test]
    fn undeclared_paths_and_methods() {
        assert!(matches!(find(&Method::GET, "/nothing"), Found::None));
        assert!(matches!(
            find(&Method::GET, "/ui/stacks/bb/frobnicate"),
            Found::None
        ));
        assert!(matches!(
            find(&Method::GET, "/stacks/v1/bb/nope"),
            Found::None
        ));
        assert!(matches!(find(&Method::GET, "/torcx/a/b/c"), Found::None));
        let allow = |m: Method, p: &str| match find(&m, p) {
            Found::Method(a, _) => a,
            other => panic!("{p}: {other:?}"),
        };
        assert_eq!(allow(Method::GET, "/stacks/v1/bb/promote"), ["POST"]);
        assert_eq!(
            allow(Method::POST, "/v2/a/manifests/v1"),
            ["GET", "HEAD", "PUT", "DELETE"]
        );
        assert_eq!(allow(Method::DELETE, "/v2/_catalog"), ["GET", "HEAD"]);
        assert!(matches!(
            find(&Method::GET, "/v2//manifests/v1"),
            Found::Invalid(_)
        ));
    }

    /// A pattern a room's grammar names is a row of the table, and rows
    /// matched by their pattern are never shadowed by another pattern.
    #[test]
    fn grammars_name_rows_and_patterns_do_not_overlap() {
        let d = crate::digest::Digest::sha256_of(b"x");
        let n = |s: &str| s.parse::<RepositoryName>().unwrap();
        use crate::stacks::api::{Action, Artifact, Route as S};
        let stack: StackName = "bb".parse().unwrap();
        let named: Vec<&'static str> = [
            RegistryRoute::Base,
            RegistryRoute::Catalog,
            RegistryRoute::Manifest {
                name: n("a"),
                reference: "v1".parse().unwrap(),
            },
            RegistryRoute::Blob {
                name: n("a"),
                digest: d.clone(),
            },
            RegistryRoute::TagsList { name: n("a") },
            RegistryRoute::Referrers {
                name: n("a"),
                digest: d.clone(),
            },
            RegistryRoute::Upload {
                name: n("a"),
                session: None,
            },
            RegistryRoute::Upload {
                name: n("a"),
                session: Some(crate::registry::uploads::UploadId::new()),
            },
        ]
        .iter()
        .map(RegistryRoute::pattern)
        .chain(
            [
                S::List,
                S::Stack(stack.clone()),
                S::Rootfs(stack.clone(), Artifact::Tar),
                S::Rootfs(stack.clone(), Artifact::Index),
                S::Rootfs(stack.clone(), Artifact::Patch),
                S::Chunk(crate::chunks::ChunkId::of(b"x")),
                S::Status(stack.clone()),
                S::Cell(stack.clone(), "c".into()),
                S::Admin(stack.clone(), Action::Promote),
                S::Admin(stack.clone(), Action::Rollout),
                S::Admin(stack.clone(), Action::Rollback),
                S::Admin(stack.clone(), Action::State),
                S::Admin(stack.clone(), Action::Default),
                S::Register(stack),
                S::Lifecycle(d),
            ]
            .iter()
            .map(S::pattern),
        )
        // The two paths `read` names itself.
        .chain(["/v2", "/stacks/v1", crate::torcx::api::FilePath::PATTERN])
        .collect();
        for p in &named {
            assert!(ROUTES.iter().any(|r| r.path == *p), "{p}: no row");
        }
        for (r, pattern) in ROUTES.iter().zip(patterns()) {
            if delegated(r.path) {
                assert!(named.contains(&r.path), "{}: no grammar names it", r.path);
                continue;
            }
            for other in ROUTES
                .iter()
                .filter(|o| o.path != r.path && !delegated(o.path))
            {
                let path = sample(other.path);
                let parts: Vec<&str> = path[1..].split('/').collect();
                assert!(
                    shape(pattern, &path, &parts).is_none(),
                    "{} also fits {path}",
                    r.path
                );
            }
        }
    }

    #[test]
    fn every_row_parses() {
        for (i, r) in ROUTES.iter().enumerate() {
            let p = parse(r.path);
            let manys = p
                .head
                .iter()
                .filter(|s| matches!(s, Segment::Many(_)))
                .count()
                + p.tail.as_ref().map_or(0, |(_, a)| {
                    1 + a.iter().filter(|s| matches!(s, Segment::Many(_))).count()
                });
            assert!(manys <= 1, "{}: more than one {{name*}}", r.path);
            // No earlier row with the same methods shadows this one entirely.
            let shadowed = ROUTES[..i]
                .iter()
                .any(|e| e.path == r.path && e.methods.0 & r.methods.0 != 0);
            assert!(!shadowed, "{} declared twice for a method", r.path);
        }
        assert!(markdown().lines().count() == ROUTES.len() + 2);
    }
}
