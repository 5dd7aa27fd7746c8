//! Which repositories the caller's rights cover, as the server's access
//! layer hands it to the registry (a request extension).
//!
//! Owns: [`RepositoryScope`], checked on the repository a request actually
//! reads or writes, after mirror namespaces resolved it
//! ([`super::namespace`]): a namespaced or default-namespace repository is
//! only used when the scope covers it, a request outside the scope is 403
//! `DENIED`, the catalog lists only covered repositories, and a
//! cross-repository mount (`from=`) is only made from a covered one. The
//! rules behind it (users' repository prefixes) belong to `crate::auth`;
//! the registry only asks.

use std::sync::Arc;

use serde_json::json;

use super::errors::{ErrorCode, RegistryError, Result};
use crate::names::RepositoryName;

type Covers = dyn Fn(&str) -> bool + Send + Sync;

/// The repositories a request may touch; the default covers all (no
/// users, anonymous reads, unlimited users).
#[derive(Clone, Default)]
pub struct RepositoryScope(Option<Arc<Covers>>);

impl std::fmt::Debug for RepositoryScope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "RepositoryScope(limited)"
        } else {
            "RepositoryScope(all)"
        })
    }
}

impl RepositoryScope {
    /// Every repository.
    pub fn all() -> RepositoryScope {
        RepositoryScope(None)
    }

    /// The repositories for which `covers(name)` is true.
    pub fn limited(covers: impl Fn(&str) -> bool + Send + Sync + 'static) -> RepositoryScope {
        RepositoryScope(Some(Arc::new(covers)))
    }

    /// Whether the scope covers every repository (no limit).
    pub fn is_all(&self) -> bool {
        self.0.is_none()
    }

    /// Whether `name` is in the scope.
    pub fn covers(&self, name: &str) -> bool {
        self.0.as_ref().is_none_or(|f| f(name))
    }

    /// `Ok` when `name` is in the scope, else 403 `DENIED` naming it.
    pub fn check(&self, name: &RepositoryName) -> Result<()> {
        if self.covers(name.as_str()) {
            return Ok(());
        }
        Err(RegistryError::new(
            ErrorCode::Denied,
            json!({ "repository": name, "reason": "outside the repositories this user may access" }),
        ))
    }
}
