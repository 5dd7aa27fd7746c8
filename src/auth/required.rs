//! The (method, path) → [`Requirement`] table of every HTTP surface.
//!
//! | surface | request | needs |
//! | --- | --- | --- |
//! | probes | `/healthz`, `/readyz` | nothing |
//! | metrics | `/metrics` | `Metrics` (the `metrics` or `admin` role), nothing with `[auth] public_metrics` |
//! | console | `/ui/login`, `/ui/logout`, `/ui/assets/...` | nothing (the form checks the password, `server::access::password_login`) |
//! | console | other `/ui/...`, `/api/v1/...` | `Pull` (then 404 when `[ui]` is off); admin forms check the admin role themselves |
//! | registry | `/v2/` GET/HEAD | `Pull` (so clients learn the auth scheme from its 401) |
//! | registry | `/v2/...` GET/HEAD | `Pull`; the repository actually read (after `?ns=` and the mirror namespace chose it) is checked by the registry against the user's scope (`registry::scope`) |
//! | registry | blob uploads (POST/PATCH/PUT/DELETE of `.../blobs/uploads/...`), manifest PUT | `Push` on the repository written (`?ns=` applied as the registry applies it) |
//! | registry | manifest or blob DELETE | `Delete` on the repository |
//! | torcx | `/torcx/...` | `Pull` |
//! | stacks | `/stacks/v1...` GET/HEAD, `PUT .../cells/<id>` | `Stack` |
//! | stacks | `POST .../register` (a custom stack; the `custom_stacks` policy decides) | `Pull` |
//! | stacks | other (`POST .../promote`, ...) | `Admin` |
//! | admin | `/admin/...` | `Admin` |
//! | anything else | | `Pull` (then 404) |

use axum::http::{Method, Uri};

use super::Permission;
use crate::registry::query::QueryParams;
use crate::registry::routes::Route;

/// What one request needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The permission.
    pub permission: Permission,
    /// The repository it is about, if any (for prefix limits).
    pub repository: Option<String>,
}

impl Requirement {
    fn any(permission: Permission) -> Option<Requirement> {
        Some(Requirement {
            permission,
            repository: None,
        })
    }
}

/// What `method` on `uri` needs; `None` for the public probes.
pub fn required(method: &Method, uri: &Uri) -> Option<Requirement> {
    let path = uri.path();
    let read = matches!(*method, Method::GET | Method::HEAD);
    if matches!(path, "/healthz" | "/readyz") {
        return None;
    }
    if path == "/metrics" {
        return Requirement::any(Permission::Metrics);
    }
    if matches!(path, "/ui/login" | "/ui/logout") || path.starts_with("/ui/assets/") {
        // The console's login form and its compiled-in assets.
        return None;
    }
    if path == "/v2" || path.starts_with("/v2/") {
        return Some(registry(method, uri));
    }
    if path == "/torcx" || path.starts_with("/torcx/") {
        return Requirement::any(Permission::Pull);
    }
    if path == "/stacks/v1" || path.starts_with("/stacks/v1/") {
        let cell_report = *method == Method::PUT && path.contains("/cells/");
        return Requirement::any(if read || cell_report {
            Permission::Stack
        } else if *method == Method::POST && path.ends_with("/register") {
            Permission::Pull
        } else {
            Permission::Admin
        });
    }
    if path == "/admin" || path.starts_with("/admin/") {
        return Requirement::any(Permission::Admin);
    }
    Requirement::any(Permission::Pull)
}

fn registry(method: &Method, uri: &Uri) -> Requirement {
    let read = matches!(*method, Method::GET | Method::HEAD);
    let route = Route::parse(uri.path()).ok();
    let permission = match &route {
        _ if read => Permission::Pull,
        Some(Route::Upload { .. }) => Permission::Push,
        Some(Route::Manifest { .. } | Route::Blob { .. }) if *method == Method::DELETE => {
            Permission::Delete
        }
        // Methods no endpoint serves: the registry answers 405 or 404
        // to whoever may write.
        _ => Permission::Push,
    };
    // Reads: the registry resolves mirror namespaces (which may fall back
    // to another repository) and checks the one it reads. Writes never fall
    // back: their target is known here.
    let repository = route
        .as_ref()
        .and_then(Route::repository)
        .filter(|_| !read)
        .map(|name| {
            let ns = QueryParams::from_uri(uri).get("ns").map(str::to_string);
            crate::registry::namespace::write_target(ns.as_deref(), name)
                .map_or_else(|_| name.to_string(), |n| n.to_string())
        });
    Requirement {
        permission,
        repository,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(m: Method, p: &str) -> Option<(Permission, Option<String>)> {
        required(&m, &p.parse().unwrap()).map(|r| (r.permission, r.repository))
    }

    #[test]
    fn table() {
        use Permission::*;
        assert_eq!(need(Method::GET, "/healthz"), None);
        assert_eq!(need(Method::GET, "/v2/"), Some((Pull, None)));
        assert_eq!(
            need(Method::GET, "/v2/a/b/manifests/latest"),
            Some((Pull, None)),
            "reads: the registry checks the repository it resolves"
        );
        assert_eq!(
            need(Method::POST, "/v2/a/blobs/uploads/"),
            Some((Push, Some("a".into())))
        );
        assert_eq!(
            need(Method::DELETE, "/v2/a/blobs/uploads/xyz"),
            Some((Push, Some("a".into())))
        );
        assert_eq!(
            need(Method::PUT, "/v2/a/manifests/v1"),
            Some((Push, Some("a".into())))
        );
        assert_eq!(
            need(Method::DELETE, "/v2/a/manifests/v1"),
            Some((Delete, Some("a".into())))
        );
        assert_eq!(need(Method::GET, "/torcx/x/y"), Some((Pull, None)));
        assert_eq!(
            need(Method::GET, "/stacks/v1/bb?cell=1"),
            Some((Stack, None))
        );
        assert_eq!(
            need(Method::PUT, "/stacks/v1/bb/cells/c1"),
            Some((Stack, None))
        );
        assert_eq!(
            need(Method::POST, "/stacks/v1/bb/promote"),
            Some((Admin, None))
        );
        assert_eq!(need(Method::POST, "/admin/v1/imports"), Some((Admin, None)));
        // Writes with ns=: the target as the registry writes it (host
        // normalised, aliases folded, not prefixed twice).
        for (uri, want) in [
            (
                "/v2/library/app/blobs/uploads/?ns=DOCKER.IO",
                "docker.io/library/app",
            ),
            (
                "/v2/library/app/blobs/uploads/?ns=index.docker.io",
                "docker.io/library/app",
            ),
            (
                "/v2/docker.io/app/blobs/uploads/?ns=docker.io",
                "docker.io/app",
            ),
            (
                "/v2/library/app/manifests/v1?ns=registry.local:443",
                "registry.local/library/app",
            ),
        ] {
            let r = required(&Method::POST, &uri.parse().unwrap()).unwrap();
            assert_eq!(r.repository.as_deref(), Some(want), "{uri}");
        }
    }
}
