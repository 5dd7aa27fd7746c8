//! Mirror namespaces: which repository a request means when airlock stands
//! in for another registry.
//!
//! Owns: the `ns=` query parameter that containerd adds when airlock is a
//! mirror (`hosts.toml`): `GET /v2/library/busybox/manifests/latest?ns=docker.io`
//! means repository `docker.io/library/busybox`. And the configured default
//! namespace for clients that send no `ns` (docker's `registry-mirrors`):
//! a read of `<name>` that does not exist falls back to `<default>/<name>`.
//! Never changes state. Writes never fall back: they go to the name asked for
//! (with `ns=` applied).

use serde_json::json;

use super::Context;
use super::errors::{ErrorCode, RegistryError, Result};
use super::query::QueryParams;
use super::routes::Route;
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

/// Rewrites the route's repository for `ns=` (every method) or, for reads
/// (`read = true`) without `ns`, for the configured default namespace when
/// `<name>` does not exist but `<default>/<name>` does.
pub async fn apply(
    ctx: &dyn Context,
    route: &mut Route,
    query: &QueryParams,
    read: bool,
) -> Result<()> {
    let Some(name) = route.repository_mut() else {
        return Ok(());
    };
    if let Some(ns) = query.get("ns").filter(|ns| !ns.is_empty()) {
        *name = qualify(ns, name)?;
        return Ok(());
    }
    let Some(default) = ctx.config().mirror_namespace.as_deref() else {
        return Ok(());
    };
    if !read {
        return Ok(());
    }
    let state = ctx.state();
    let snap = state.snapshot().await?;
    if snap.table.repositories.contains_key(name) {
        return Ok(());
    }
    if let Ok(full) = qualify(default, name)
        && snap.table.repositories.contains_key(&full)
    {
        *name = full;
    }
    Ok(())
}
