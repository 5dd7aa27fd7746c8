//! The one table of who may do what: every route of the server, with the
//! permission it needs and the resources it touches ([`ROUTES`]).
//!
//! Owns: the declaration of every route (method, path pattern, [`Need`]),
//! and finding the declaration of a request ([`find`]). The access layer
//! (`super::access`) enforces the declaration before any handler runs; a
//! request that no declaration matches never reaches a handler (404, or
//! 405 with `Allow` when only the method is undeclared; under `/v2/` such
//! a method needs push rights and the registry answers the 405 with the
//! `Allow` its switches give, [`REGISTRY_OTHER_METHODS`]), so a route added
//! to a router without a row here answers nobody, and the generated matrix
//! test (`tests/it/authz_routes.rs`) walks every row. The table of
//! docs/users-and-tls.md is generated from [`ROUTES`] ([`markdown`]).
//! Never reads state or serves a request (the refusal of a name that does
//! not parse is the room grammar's own answer, handed to the access layer).
//!
//! One parse per request: [`find`] reads the path once into typed
//! [`Params`] (each name percent-decoded once, then parsed as its type:
//! [`crate::names::RepositoryName`], [`crate::stacks::StackName`], a digest, a cell id, a chunk, a
//! torcx remote), the access layer checks exactly those values and hands
//! them on to the handler as request extensions ([`Params::hand_on`]); no
//! handler reads a name from the path again. `/v2`, `/stacks/v1` and
//! `/torcx` paths are read by their room's own grammar (the registry's,
//! the stacks API's, torcx's), which names the row its endpoint is; a name
//! that does not parse is refused there ([`Found::Invalid`]), never taken
//! to name nothing.
//!
//! Patterns are `/`-separated: a literal segment, `{name}` (one segment),
//! or one `{name*}` per pattern (one or more segments; the segments after
//! it are matched from the end of the path, so a repository name may hold
//! `/`, as distribution-spec's `<name>` does). Rows declaring `GET` declare
//! `HEAD` too ([`Methods::READ`]). Rows of one pattern are told apart by
//! method; the first that declares the request's decides.

mod find;

use axum::http::Method;

pub use self::find::{AssetName, Found, Params, find, read, select};
use crate::auth::Permission;

/// A set of HTTP methods (bit flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Methods(u8);

impl Methods {
    /// `GET` and `HEAD` (a row never declares one without the other: a
    /// `HEAD` is the `GET` without its body, RFC 9110 §9.3.2).
    pub const READ: Methods = Methods(1 | 2);
    /// `POST`.
    pub const POST: Methods = Methods(4);
    /// `PUT`.
    pub const PUT: Methods = Methods(8);
    /// `PATCH`.
    pub const PATCH: Methods = Methods(16);
    /// `DELETE`.
    pub const DELETE: Methods = Methods(32);
    /// `GET`, `HEAD` and `POST` (the login form).
    pub const READ_POST: Methods = Methods(1 | 2 | 4);
    /// `PATCH`, `PUT` and `DELETE` (an upload session's writes).
    pub const SESSION_WRITES: Methods = Methods(8 | 16 | 32);

    fn bit(m: &Method) -> u8 {
        match *m {
            Method::GET => 1,
            Method::HEAD => 2,
            Method::POST => 4,
            Method::PUT => 8,
            Method::PATCH => 16,
            Method::DELETE => 32,
            _ => 64,
        }
    }

    /// Whether `m` is one of these.
    pub fn contains(self, m: &Method) -> bool {
        self.0 & Methods::bit(m) != 0
    }

    /// The names, e.g. `["GET", "HEAD"]`.
    pub fn names(self) -> Vec<&'static str> {
        ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"]
            .into_iter()
            .enumerate()
            .filter(|(i, _)| self.0 & (1 << i) != 0)
            .map(|(_, n)| n)
            .collect()
    }

    /// One method of the set, for a request that exercises the row.
    pub fn first(self) -> Method {
        [
            Method::GET,
            Method::HEAD,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ]
        .into_iter()
        .enumerate()
        .find(|(i, _)| self.0 & (1 << i) != 0)
        .map_or(Method::GET, |(_, m)| m)
    }
}

/// Which resources a request touches: what the permission is checked on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touches {
    /// No repository: the permission alone (the `/v2/` ping, probes of a
    /// role such as `/metrics`).
    Nothing,
    /// A list or summary: the permission alone, and the room shows only
    /// the items the caller may read (the caller's grant filters them).
    Listed,
    /// The repository `{repo*}` of the path; for registry writes, the
    /// repository as `?ns=` makes it the target.
    Repository,
    /// A registry read: the repository the registry finally reads (mirror
    /// namespaces may fall back to another), checked by the registry
    /// against the caller's scope before anything is read.
    Resolved,
    /// Every repository of the images the stack `{stack}` names.
    StackImages,
    /// As [`Touches::StackImages`], and the cell `{cell*}` must be one the
    /// credential may report for (a user's `cells` globs).
    Cell,
    /// The stack whose promotion or candidate `{digest}` is (every image
    /// of it); nothing more for a digest of no stack.
    Lifecycle,
    /// The chunk `{chunk*}`: some stack the caller may read uses it; else
    /// 404 as if absent.
    Chunk,
    /// The torcx remote `{remote}`, as the resource `torcx/<remote>`.
    Remote,
    /// Every repository there is and will be: the caller needs the
    /// permission with no repository prefix (whole-state changes).
    Everything,
    /// The repositories named in the body or query (an import's bundle, a
    /// promotion's image, a report's image or stack): the room checks them
    /// with the caller's grant as it reads them, before it changes or
    /// shows anything.
    Named,
    /// [`Touches::StackImages`], then [`Touches::Named`] (a promotion's image).
    StackAndNamed,
}

/// A switch of the server config that makes a route public.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Switch {
    /// `[torcx] public = true`: torcx reads need no credentials.
    TorcxPublic,
    /// `[auth] public_metrics = true`: `/metrics` needs no credentials.
    PublicMetrics,
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Nothing: anyone (probes, the login form, the console's assets).
    Public,
    /// `permission` on what the request touches.
    Grant {
        /// The permission.
        permission: Permission,
        /// What it is checked on.
        touches: Touches,
        /// Whether `anonymous_read` lets a caller without credentials in
        /// (pulls only: `/v2` and `/torcx` reads; never the console).
        anonymous: bool,
        /// A switch that makes the route public.
        public_when: Option<Switch>,
    },
}

/// One row of [`ROUTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The methods this row declares.
    pub methods: Methods,
    /// The path pattern (module docs).
    pub path: &'static str,
    /// What it needs.
    pub need: Need,
    /// What it is, for the docs.
    pub what: &'static str,
}

impl Route {
    /// Whether a request of `method` on this row is a write that the
    /// store's write lock holds back ([`crate::ops::write_lock`]: 503
    /// `UNAVAILABLE` while a backup runs): every method but `GET` and
    /// `HEAD` on a row that needs a grant, except a cell's report (kept
    /// beside generations, not in them: rollouts go on during a backup).
    /// Public rows (the login form) are never held.
    pub fn writes(&self, method: &Method) -> bool {
        match self.need {
            Need::Public => false,
            Need::Grant { permission, .. } => {
                !Methods::READ.contains(method) && permission != Permission::Stack
            }
        }
    }
}

const fn grant(permission: Permission, touches: Touches) -> Need {
    Need::Grant {
        permission,
        touches,
        anonymous: false,
        public_when: None,
    }
}

const fn pull(touches: Touches) -> Need {
    Need::Grant {
        permission: Permission::Pull,
        touches,
        anonymous: true,
        public_when: None,
    }
}

/// A torcx read: pull, for anyone with `anonymous_read` or `[torcx] public`.
const fn torcx(touches: Touches) -> Need {
    Need::Grant {
        permission: Permission::Pull,
        touches,
        anonymous: true,
        public_when: Some(Switch::TorcxPublic),
    }
}

const fn row(methods: Methods, path: &'static str, need: Need, what: &'static str) -> Route {
    Route {
        methods,
        path,
        need,
        what,
    }
}

use Permission::{Admin, Delete, Metrics, Push};
use Touches::*;

/// Every route of the server, in matching order.
pub const ROUTES: &[Route] = &[
    // Probes and metrics.
    row(Methods::READ, "/healthz", Need::Public, "liveness"),
    row(Methods::READ, "/readyz", Need::Public, "readiness"),
    row(
        Methods::READ,
        "/metrics",
        Need::Grant {
            permission: Metrics,
            touches: Nothing,
            anonymous: false,
            public_when: Some(Switch::PublicMetrics),
        },
        "Prometheus metrics",
    ),
    // OCI distribution-spec v1.1.
    row(Methods::READ, "/v2", pull(Nothing), "API version check"),
    row(Methods::READ, "/v2/", pull(Nothing), "API version check"),
    row(Methods::READ, "/v2/_catalog", pull(Listed), "catalog"),
    row(
        Methods::READ,
        "/v2/{repo*}/manifests/{reference}",
        pull(Resolved),
        "pull a manifest",
    ),
    row(
        Methods::PUT,
        "/v2/{repo*}/manifests/{reference}",
        grant(Push, Repository),
        "push a manifest",
    ),
    row(
        Methods::DELETE,
        "/v2/{repo*}/manifests/{reference}",
        grant(Delete, Repository),
        "delete a manifest or tag",
    ),
    row(
        Methods::POST,
        "/v2/{repo*}/blobs/uploads/",
        grant(Push, Repository),
        "open an upload (or mount, or monolithic push)",
    ),
    row(
        Methods::READ,
        "/v2/{repo*}/blobs/uploads/{session}",
        pull(Resolved),
        "upload progress",
    ),
    row(
        Methods::SESSION_WRITES,
        "/v2/{repo*}/blobs/uploads/{session}",
        grant(Push, Repository),
        "upload a chunk, finish or cancel",
    ),
    row(
        Methods::READ,
        "/v2/{repo*}/blobs/{blob}",
        pull(Resolved),
        "pull a blob",
    ),
    row(
        Methods::DELETE,
        "/v2/{repo*}/blobs/{blob}",
        grant(Delete, Repository),
        "delete a blob",
    ),
    row(
        Methods::READ,
        "/v2/{repo*}/tags/list",
        pull(Resolved),
        "list tags",
    ),
    row(
        Methods::READ,
        "/v2/{repo*}/referrers/{subject}",
        pull(Resolved),
        "list referrers",
    ),
    // torcx remote.
    row(
        Methods::READ,
        "/torcx/{remote}/{board}/{os}/{file}",
        torcx(Remote),
        "torcx remote contents and addon images",
    ),
    row(
        Methods::READ,
        "/torcx",
        torcx(Nothing),
        "not a remote (404)",
    ),
    row(
        Methods::READ,
        "/torcx/",
        torcx(Nothing),
        "not a remote (404)",
    ),
    // Stacks API.
    row(
        Methods::READ,
        "/stacks/v1",
        grant(Permission::Stack, Listed),
        "stack table",
    ),
    row(
        Methods::READ,
        "/stacks/v1/",
        grant(Permission::Stack, Listed),
        "stack table",
    ),
    row(
        Methods::READ,
        "/stacks/v1/lifecycle/{digest}",
        grant(Permission::Stack, Lifecycle),
        "lifecycle of a digest",
    ),
    row(
        Methods::READ,
        "/stacks/v1/chunks/{chunk*}",
        grant(Permission::Stack, Chunk),
        "a rootfs chunk",
    ),
    row(
        Methods::READ,
        "/stacks/v1/{stack}",
        grant(Permission::Stack, StackImages),
        "a stack; with ?cell= what that cell runs",
    ),
    row(
        Methods::READ,
        "/stacks/v1/{stack}/rootfs.tar",
        grant(Permission::Stack, StackImages),
        "flattened rootfs",
    ),
    row(
        Methods::READ,
        "/stacks/v1/{stack}/rootfs.caibx",
        grant(Permission::Stack, StackImages),
        "rootfs chunk index",
    ),
    row(
        Methods::READ,
        "/stacks/v1/{stack}/rootfs.patch",
        grant(Permission::Stack, StackImages),
        "rootfs patch",
    ),
    row(
        Methods::READ,
        "/stacks/v1/{stack}/status",
        grant(Permission::Stack, StackImages),
        "rollout status",
    ),
    row(
        Methods::PUT,
        "/stacks/v1/{stack}/cells/{cell*}",
        grant(Permission::Stack, Cell),
        "a cell's report",
    ),
    row(
        Methods::POST,
        "/stacks/v1/{stack}/promote",
        grant(Admin, StackAndNamed),
        "promote an image",
    ),
    row(
        Methods::POST,
        "/stacks/v1/{stack}/rollout",
        grant(Admin, StackImages),
        "widen a rollout",
    ),
    row(
        Methods::POST,
        "/stacks/v1/{stack}/rollback",
        grant(Admin, StackImages),
        "roll a stack back",
    ),
    row(
        Methods::POST,
        "/stacks/v1/{stack}/state",
        grant(Admin, StackImages),
        "set a stack's state",
    ),
    row(
        Methods::POST,
        "/stacks/v1/{stack}/default",
        grant(Admin, StackImages),
        "make a stack the default",
    ),
    row(
        Methods::POST,
        "/stacks/v1/{stack}/register",
        grant(Permission::Pull, Named),
        "register a custom stack (the custom_stacks policy decides)",
    ),
    // Imports over HTTP.
    row(
        Methods::POST,
        "/admin/v1/imports",
        grant(Admin, Named),
        "import a bundle (every repository it writes; a repair: every repository)",
    ),
    row(
        Methods::READ,
        "/admin/v1/trust",
        grant(Permission::Pull, Nothing),
        "the site's trust document",
    ),
    row(
        Methods::POST,
        "/admin/v1/trust",
        grant(Admin, Everything),
        "install or rotate the trust document",
    ),
    // Console: pages and their JSON.
    row(Methods::READ, "/ui", Need::Public, "redirect to /ui/"),
    row(Methods::READ_POST, "/ui/login", Need::Public, "login form"),
    row(Methods::POST, "/ui/logout", Need::Public, "log out"),
    row(
        Methods::READ,
        "/ui/assets/{file}",
        Need::Public,
        "stylesheet, script, icon",
    ),
    row(
        Methods::READ,
        "/ui/",
        grant(Permission::Pull, Listed),
        "overview",
    ),
    row(
        Methods::READ,
        "/api/v1/overview",
        grant(Permission::Pull, Listed),
        "overview",
    ),
    row(
        Methods::READ,
        "/ui/imports",
        grant(Permission::Pull, Listed),
        "history",
    ),
    row(
        Methods::READ,
        "/api/v1/imports",
        grant(Permission::Pull, Listed),
        "history",
    ),
    row(
        Methods::POST,
        "/ui/imports/rollback",
        grant(Admin, Everything),
        "roll the whole state back",
    ),
    row(
        Methods::READ,
        "/ui/repositories",
        grant(Permission::Pull, Listed),
        "repositories",
    ),
    row(
        Methods::READ,
        "/api/v1/repositories",
        grant(Permission::Pull, Listed),
        "repositories",
    ),
    row(
        Methods::READ,
        "/ui/repositories/{repo*}",
        grant(Permission::Pull, Repository),
        "a repository",
    ),
    row(
        Methods::READ,
        "/api/v1/repositories/{repo*}",
        grant(Permission::Pull, Repository),
        "a repository",
    ),
    row(
        Methods::READ,
        "/ui/stacks",
        grant(Permission::Stack, Listed),
        "stacks",
    ),
    row(
        Methods::READ,
        "/api/v1/stacks",
        grant(Permission::Stack, Listed),
        "stacks",
    ),
    row(
        Methods::READ,
        "/ui/stacks/{stack}",
        grant(Permission::Stack, StackImages),
        "a stack and its rollout",
    ),
    row(
        Methods::READ,
        "/api/v1/stacks/{stack}",
        grant(Permission::Stack, StackImages),
        "a stack and its rollout",
    ),
    row(
        Methods::READ,
        "/api/v1/stacks/{stack}/effect",
        grant(Permission::Stack, StackAndNamed),
        "what a stack change would do",
    ),
    row(
        Methods::POST,
        "/ui/stacks/{stack}/promote",
        grant(Admin, StackAndNamed),
        "promote (form)",
    ),
    row(
        Methods::POST,
        "/ui/stacks/{stack}/rollout",
        grant(Admin, StackImages),
        "widen (form)",
    ),
    row(
        Methods::POST,
        "/ui/stacks/{stack}/rollback",
        grant(Admin, StackImages),
        "roll back (form)",
    ),
    row(
        Methods::POST,
        "/ui/stacks/{stack}/state",
        grant(Admin, StackImages),
        "set the state (form)",
    ),
    row(
        Methods::READ,
        "/ui/torcx",
        grant(Permission::Pull, Listed),
        "torcx remotes",
    ),
    row(
        Methods::READ,
        "/api/v1/torcx",
        grant(Permission::Pull, Listed),
        "torcx remotes",
    ),
    row(
        Methods::READ,
        "/ui/operations",
        grant(Permission::Pull, Listed),
        "gc, fsck, quarantine, users",
    ),
    row(
        Methods::READ,
        "/api/v1/operations",
        grant(Permission::Pull, Listed),
        "gc, fsck, quarantine, users",
    ),
    row(
        Methods::POST,
        "/ui/operations/revoke",
        grant(Admin, Everything),
        "revoke a token user",
    ),
    row(
        Methods::READ,
        "/api/v1/session",
        grant(Permission::Pull, Nothing),
        "who the console thinks the caller is",
    ),
    row(
        Methods::READ,
        "/api/v1/vulns",
        grant(Permission::Pull, Named),
        "vulnerability reports (of the image, stack or digest named)",
    ),
];

/// What a method no row declares on a `/v2` path needs: push rights on its
/// repository. It then reaches the registry, which answers 405
/// `UNSUPPORTED` with the `Allow` its switches give (a read-only server
/// allows `GET, HEAD` where this table also declares writes).
pub const REGISTRY_OTHER_METHODS: Need = grant(Push, Repository);

/// Who may call each row, for the docs: a markdown table of every route
/// with the roles that may, and what the check is made on.
pub fn markdown() -> String {
    let mut out = String::from(
        "| methods | path | what | needs | checked on | held by a write lock |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for r in ROUTES {
        let (needs, on) = match r.need {
            Need::Public => ("anyone".to_string(), String::new()),
            Need::Grant {
                permission,
                touches,
                anonymous,
                public_when,
            } => {
                let roles: Vec<&str> = [
                    (crate::auth::Role::Reader, "reader"),
                    (crate::auth::Role::Cell, "cell"),
                    (crate::auth::Role::Admin, "admin"),
                    (crate::auth::Role::Metrics, "metrics"),
                ]
                .into_iter()
                .filter(|(role, _)| role.grants(permission))
                .map(|(_, n)| n)
                .collect();
                let mut needs = roles.join(", ");
                if anonymous {
                    needs.push_str("; anyone with `anonymous_read`");
                }
                match public_when {
                    Some(Switch::TorcxPublic) => needs.push_str("; anyone with `[torcx] public`"),
                    Some(Switch::PublicMetrics) => {
                        needs.push_str("; anyone with `[auth] public_metrics`")
                    }
                    None => {}
                }
                (needs, touches_text(touches).to_string())
            }
        };
        let held = if r.writes(&r.methods.first()) {
            "yes (503)"
        } else {
            ""
        };
        out.push_str(&format!(
            "| {} | `{}` | {} | {needs} | {on} | {held} |\n",
            r.methods.names().join(", "),
            r.path,
            r.what
        ));
    }
    out
}

fn touches_text(t: Touches) -> &'static str {
    match t {
        Nothing => "the role alone",
        Listed => "the role; the answer lists only what the caller may read",
        Repository => "the repository (a write: as `?ns=` makes the target)",
        Resolved => "the repository the registry reads (after mirror namespaces)",
        StackImages => "every repository of the stack's images",
        Cell => "every repository of the stack's images, and the user's `cells`",
        Lifecycle => "every repository of the images of the digest's stack",
        Chunk => "some stack the caller may read uses the chunk (else 404)",
        Remote => "`torcx/<remote>`",
        Everything => "every repository (no repository prefix)",
        Named => "every repository the body or query names",
        StackAndNamed => "every repository of the stack's images and of the image named",
    }
}
