//! Mirror namespaces: which repository a request means when airlock stands
//! in for another registry.
//!
//! Owns: the `ns=` query parameter that containerd adds when airlock is a
//! mirror (`hosts.toml`): `GET /v2/library/busybox/manifests/latest?ns=docker.io`
//! means repository `docker.io/library/busybox`. And the configured default
//! namespace for clients that send no `ns` (docker's `registry-mirrors`).
//! On reads the namespaced repository wins when it exists and the caller's
//! [`RepositoryScope`] covers it, and `ns` never makes a read fail; a
//! request with `ns=` never falls back to the default namespace (see
//! [`resolve_read`], which a mount's `from=` also goes through). Never
//! changes state. Writes never fall back: they go to the
//! name asked for with `ns=` applied ([`write_target`], which the access
//! layer also uses to authorize them).

use serde_json::json;

use super::Context;
use super::errors::{ErrorCode, RegistryError, Result};
use super::query::QueryParams;
use super::routes::Route;
use super::scope::RepositoryScope;
use crate::names::RepositoryName;

/// `<ns>/<name>`; `NAME_INVALID` when that is no repository name (e.g. an
/// `ns` with a port, `localhost:5000`, which the grammar cannot hold).
pub fn qualify(ns: &str, name: &RepositoryName) -> Result<RepositoryName> {
    let full = format!("{}/{name}", ns.trim_end_matches('/'));
    full.parse().map_err(|_| {
        RegistryError::new(
            ErrorCode::NameInvalid,
            json!({ "name": full, "reason": "ns parameter does not form a repository name" }),
        )
    })
}

/// An upstream host as a namespace: lower case, the default ports `:443` and
/// `:80` dropped, Docker Hub's aliases (`index.docker.io`,
/// `registry-1.docker.io`) as `docker.io`. Other ports stay (such a
/// namespace can never form a repository name, so it never matches one).
pub fn normalize_host(ns: &str) -> String {
    let ns = ns.trim().trim_end_matches('/').to_ascii_lowercase();
    let host = ns
        .strip_suffix(":443")
        .or_else(|| ns.strip_suffix(":80"))
        .unwrap_or(&ns);
    match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".into(),
        h => h.into(),
    }
}

/// `name` inside namespace `ns`: `name` itself when it already starts with
/// `<ns>/` (containerd's `override_path` with a path-prefix mirror),
/// `<ns>/<name>` otherwise, `None` when that is no repository name.
fn within(ns: &str, name: &RepositoryName) -> Option<RepositoryName> {
    if name
        .as_str()
        .strip_prefix(ns)
        .is_some_and(|rest| rest.starts_with('/'))
    {
        return Some(name.clone());
    }
    qualify(ns, name).ok()
}

/// The repository a write to `name` with query parameter `ns` (raw, as
/// sent; `None`: absent) goes to: `name` without `ns`, else `name` inside
/// the normalised namespace ([`normalize_host`]; not prefixed again when
/// the path already starts with it).
///
/// Errors: 400 `NAME_INVALID` when that is no repository name.
pub fn write_target(ns: Option<&str>, name: &RepositoryName) -> Result<RepositoryName> {
    match ns.map(normalize_host).filter(|ns| !ns.is_empty()) {
        None => Ok(name.clone()),
        Some(ns) => match within(&ns, name) {
            Some(n) => Ok(n),
            None => qualify(&ns, name),
        },
    }
}

/// The `ns` query parameter, normalised ([`normalize_host`]); `None` when
/// absent or empty.
pub fn ns_param(query: &QueryParams) -> Option<String> {
    query
        .get("ns")
        .map(normalize_host)
        .filter(|ns| !ns.is_empty())
}

/// The repository a read of `name` means, and the namespace to echo in
/// `OCI-Namespace` when an `ns=` namespace was used.
///
/// With `ns` (normalised, [`ns_param`]) the only candidates are
/// `<ns>/<name>` (not prefixed again when `name` already starts with it)
/// and `name` itself: the namespaced repository when it exists and `scope`
/// covers it, else `name`. Without `ns`, the configured default namespace
/// (`mirror_namespace`, docker's `registry-mirrors`) is tried the same way.
/// So one reference means one image whichever client asks, another
/// registry's namespace is never served for an `ns=` that names a
/// different one, and a user limited to some repositories never reads
/// another through a namespace (the caller checks the repository finally
/// chosen against `scope`). Never fails because of `ns`.
///
/// Errors: the state cannot be read.
pub async fn resolve_read(
    ctx: &dyn Context,
    name: &RepositoryName,
    ns: Option<String>,
    scope: &RepositoryScope,
) -> Result<(RepositoryName, Option<String>)> {
    let (namespace, echo) = match ns {
        Some(ns) => (ns.clone(), Some(ns)),
        None => match ctx.config().mirror_namespace.as_deref().map(normalize_host) {
            Some(default) => (default, None),
            None => return Ok((name.clone(), None)),
        },
    };
    let Some(full) = within(&namespace, name).filter(|n| scope.covers(n.as_str())) else {
        return Ok((name.clone(), None));
    };
    let state = ctx.state();
    let snap = state.snapshot().await?;
    if state.repository(&snap, &full).await?.is_some() {
        Ok((full, echo))
    } else {
        Ok((name.clone(), None))
    }
}

/// Rewrites the route's repository for a mirror request and returns the
/// namespace to echo in `OCI-Namespace` (when an `ns=` namespace was used).
/// Reads (`read = true`) go to [`resolve_read`]; writes go to
/// [`write_target`] and never fall back.
pub async fn apply(
    ctx: &dyn Context,
    route: &mut Route,
    query: &QueryParams,
    read: bool,
    scope: &RepositoryScope,
) -> Result<Option<String>> {
    let Some(name) = route.repository_mut() else {
        return Ok(None);
    };
    if !read {
        *name = write_target(query.get("ns"), name)?;
        return Ok(None);
    }
    let ns = ns_param(query);
    if ns.is_none() && ctx.config().mirror_namespace.is_none() {
        return Ok(None);
    }
    // Boxed: namespaces are rare, and this future is part of every read's.
    let (full, echo) = Box::pin(resolve_read(ctx, name, ns, scope)).await?;
    *name = full;
    Ok(echo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_normalised() {
        assert_eq!(normalize_host("Registry.Local:443"), "registry.local");
        assert_eq!(normalize_host("registry.local:80"), "registry.local");
        assert_eq!(normalize_host("registry.local:5000"), "registry.local:5000");
        assert_eq!(normalize_host("index.docker.io"), "docker.io");
        assert_eq!(normalize_host("[::1]:5000"), "[::1]:5000");
    }

    #[test]
    fn a_path_already_in_the_namespace_is_not_prefixed_again() {
        let n = |s: &str| s.parse::<RepositoryName>().unwrap();
        assert_eq!(
            within("docker.io", &n("docker.io/library/app")),
            Some(n("docker.io/library/app"))
        );
        assert_eq!(
            within("docker.io", &n("docker.iox/app")),
            Some(n("docker.io/docker.iox/app"))
        );
        assert_eq!(within("registry.local:5000", &n("app")), None);
    }
}
