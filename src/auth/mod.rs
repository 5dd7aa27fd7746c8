//! Users, roles and permissions: who may do what on every HTTP surface.
//!
//! Owns: the [`Role`]s and the [`Permission`]s they grant (table below),
//! [`User`]s with optional repository prefix limits, the [`Policy`] built
//! from the serve config (users, `anonymous_read`, failed-login throttling),
//! password hashing and checking ([`password`]), and the one decision
//! [`Grant::allows`]. Which route needs which permission on what is
//! declared in `server::routes`. Never reads HTTP bodies or answers
//! requests: the server's access layer (`server::access`) applies a
//! [`Policy`] to each request and hands the rooms the caller's [`Grant`].
//!
//! | role | grants |
//! | --- | --- |
//! | `reader` | [`Permission::Pull`]: registry reads (`/v2` GET/HEAD), torcx (`/torcx`) |
//! | `cell` | `Pull` and [`Permission::Stack`]: stack resolution, rootfs downloads, cell reports (`/stacks/v1` GET/HEAD, `PUT .../cells/<id>`) |
//! | `admin` | everything: [`Permission::Push`], [`Permission::Delete`], [`Permission::Admin`] (stack promote/rollout/..., `POST /admin/v1/imports`), [`Permission::Metrics`] |
//! | `metrics` | [`Permission::Metrics`]: `GET /metrics` (a scraper's user) |
//!
//! Without any configured user the policy is *open*: every client has the
//! admin role (what the `allow_*` switches serve), as before users existed.

pub mod password;
pub mod throttle;
pub mod tokens;

use std::collections::BTreeMap;
use std::time::Duration;

/// What a request needs (see the module table for who has it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read manifests, blobs, tags, referrers, the catalog; torcx files.
    Pull,
    /// Stack resolution for cells: `/stacks/v1` reads, rootfs, cell reports.
    Stack,
    /// Blob uploads and manifest PUT.
    Push,
    /// Manifest, tag and blob DELETE.
    Delete,
    /// Stack administration (promote, rollout, rollback, state, default)
    /// and imports over HTTP.
    Admin,
    /// Read `/metrics` (a Prometheus scraper), unless `[auth] public_metrics`.
    Metrics,
}

/// A role from the config's `roles = [...]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Pull only.
    Reader,
    /// Pull and stack resolution.
    Cell,
    /// Everything.
    Admin,
    /// `/metrics` only (a Prometheus scraper's user).
    Metrics,
}

impl Role {
    /// Whether this role grants `p`.
    pub fn grants(self, p: Permission) -> bool {
        match self {
            Role::Reader => p == Permission::Pull,
            Role::Cell => matches!(p, Permission::Pull | Permission::Stack),
            Role::Admin => true,
            Role::Metrics => p == Permission::Metrics,
        }
    }
}

/// One `[[user]]` of the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// The login name (HTTP Basic user, or a client certificate's CN/SAN).
    pub name: String,
    /// PHC string of the password (`$argon2id$...`); `None`: the user can
    /// only log in with a client certificate.
    pub password_hash: Option<String>,
    /// The roles; their permissions add up.
    pub roles: Vec<Role>,
    /// Repository prefixes the roles are limited to, matched at a path
    /// boundary ([`covers`]: `stacks/` and `stacks` allow `stacks/bookworm`,
    /// neither allows `stacks-private`); empty: every repository.
    pub repositories: Vec<String>,
    /// Cell ids this user may report for (`PUT /stacks/v1/<stack>/cells/<id>`),
    /// as globs where `*` matches any run of characters (`diego-cell/*`);
    /// empty: any cell (the credential is trusted to name its own).
    pub cells: Vec<String>,
}

/// Whether the glob `pattern` (`*` matches any run of characters, every
/// other character itself) matches all of `text`.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

/// Whether the repository prefix `prefix` covers `repository`: the
/// repository itself (`stacks/bb` covers `stacks/bb`) or any name below it
/// (`stacks/bb/x`), never a name that merely starts with the same letters
/// (`stacks` does not cover `stacks-private`). A trailing `/` is optional.
pub fn covers(prefix: &str, repository: &str) -> bool {
    let p = prefix.trim_end_matches('/');
    p.is_empty()
        || repository
            .strip_prefix(p)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

impl User {
    /// Whether the user may do `p` on `repository` (`None`: a request about
    /// no repository, e.g. `/v2/`, the catalog or a stack).
    pub fn may(&self, p: Permission, repository: Option<&str>) -> bool {
        self.roles.iter().any(|r| r.grants(p))
            && repository.is_none_or(|repo| {
                self.repositories.is_empty()
                    || self.repositories.iter().any(|prefix| covers(prefix, repo))
            })
    }
}

/// What one request's caller may do: the one authorization function every
/// surface asks ([`Grant::allows`]) with the action and the repositories it
/// touches (issue 24 §2). The access layer builds it for each request
/// (`server::access`) and hands it to the rooms as a request extension:
/// the registry asks for the repository it reads or writes, an import for
/// every repository the bundle writes, the stacks API for every repository
/// of the images a stack names, torcx for `torcx/<remote>`.
#[derive(Debug, Clone)]
pub struct Grant {
    /// `None`: the open policy (no users: everyone may do everything).
    principal: Option<Principal>,
    anonymous_read: bool,
}

impl Default for Grant {
    /// The open policy's grant.
    fn default() -> Grant {
        Grant::open()
    }
}

impl Grant {
    /// Everything (no users configured).
    pub fn open() -> Grant {
        Grant {
            principal: None,
            anonymous_read: true,
        }
    }

    /// What `principal` may do under `policy`.
    pub fn of(policy: &Policy, principal: Principal) -> Grant {
        if policy.is_open() {
            return Grant::open();
        }
        Grant {
            principal: Some(principal),
            anonymous_read: policy.anonymous_read,
        }
    }

    /// Whether the caller may do `permission` on every one of `resources`
    /// (repository names, or `torcx/<remote>`; none: a request about no
    /// repository). Anonymous callers may only pull, and only where
    /// `anonymous_read` is on; a user needs a role granting `permission`
    /// and, when limited to repository prefixes, a prefix covering each
    /// resource ([`covers`]).
    pub fn allows<S: AsRef<str>>(&self, permission: Permission, resources: &[S]) -> bool {
        decide(
            self.principal.as_ref(),
            self.anonymous_read,
            permission,
            resources,
        )
    }

    /// Whether the caller may report for the cell `id`: the open policy,
    /// or a user whose `cells` globs are empty or one matches.
    pub fn may_report_for(&self, id: &str) -> bool {
        match &self.principal {
            None => true,
            Some(Principal::Anonymous) => false,
            Some(Principal::User(u)) => u.cells.is_empty() || u.cells.iter().any(|g| glob(g, id)),
        }
    }

    /// Whether the caller may read the repository `repo` (a list shows only
    /// these).
    pub fn may_read(&self, repo: &str) -> bool {
        self.allows(Permission::Pull, &[repo])
    }

    /// Whether the caller holds a role granting `permission` somewhere
    /// (ignoring repository prefixes): what a page offers, never a check.
    pub fn holds(&self, permission: Permission) -> bool {
        match &self.principal {
            None => true,
            Some(Principal::Anonymous) => self.anonymous_read && permission == Permission::Pull,
            Some(Principal::User(u)) => u.may(permission, None),
        }
    }

    /// The user's name (`None`: anonymous or the open policy).
    pub fn user(&self) -> Option<&str> {
        match &self.principal {
            Some(Principal::User(u)) => Some(&u.name),
            _ => None,
        }
    }

    /// Whether the caller may do `permission` on every repository there
    /// is and will be: the open policy, or a user with a role granting it
    /// and no repository prefixes (e.g. what repairing the whole state
    /// needs: it changes every repository at once).
    pub fn allows_everywhere(&self, permission: Permission) -> bool {
        match &self.principal {
            None => true,
            Some(Principal::Anonymous) => false,
            Some(Principal::User(u)) => u.may(permission, None) && u.repositories.is_empty(),
        }
    }

    /// Whether no users are configured.
    pub fn is_open(&self) -> bool {
        self.principal.is_none()
    }
}

/// The one decision behind [`Grant::allows`]:
/// whether `principal` (`None`: the open policy) may do `permission` on
/// every one of `resources`.
fn decide<S: AsRef<str>>(
    principal: Option<&Principal>,
    anonymous_read: bool,
    permission: Permission,
    resources: &[S],
) -> bool {
    match principal {
        None => true,
        Some(Principal::Anonymous) => anonymous_read && permission == Permission::Pull,
        Some(Principal::User(u)) => {
            u.may(permission, None)
                && resources
                    .iter()
                    .all(|r| u.may(permission, Some(r.as_ref())))
        }
    }
}

/// Who a request comes from, once authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// No credentials (or the policy is open).
    Anonymous,
    /// A configured user or a token user ([`tokens`]), as looked up at login.
    User(User),
}

/// Who is recorded as the actor of changes made while the policy is open
/// (no users configured): every client then has the admin role.
pub const OPEN_WHO: &str = "admin (http)";
/// The realm of `WWW-Authenticate: Basic realm="airlock"`.
pub const REALM: &str = "airlock";

/// Failed-login throttling: after `max_failures` failures within `window`
/// from one client address, or for one user name, further attempts are
/// refused (429) until the window passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottleLimits {
    /// Failures allowed per window (at least 1).
    pub max_failures: u32,
    /// The window.
    pub window: Duration,
}

impl Default for ThrottleLimits {
    /// 10 failures per 60 s.
    fn default() -> ThrottleLimits {
        ThrottleLimits {
            max_failures: 10,
            window: Duration::from_secs(60),
        }
    }
}

/// The access rules of one server: users, anonymous access and limits.
#[derive(Debug, Default)]
pub struct Policy {
    users: BTreeMap<String, User>,
    /// Whether requests without credentials may pull.
    pub anonymous_read: bool,
    /// Whether `/metrics` answers without credentials (`[auth]
    /// public_metrics`; otherwise it needs the `metrics` or `admin` role).
    pub public_metrics: bool,
    /// Failed-login counters.
    pub throttle: throttle::Throttle,
    /// Token users kept in the state (cached by document digest).
    pub tokens: tokens::TokenUsers,
    passwords: password::Verifier,
}

/// Errors building a [`Policy`].
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// Two users with one name.
    #[error("user {0:?} is defined twice")]
    Duplicate(String),
    /// A bad user entry.
    #[error("user {name:?}: {cause}")]
    User {
        /// The user.
        name: String,
        /// What is wrong.
        cause: String,
    },
}

impl Policy {
    /// The open policy: no users, everyone may do everything.
    pub fn open() -> Policy {
        Policy::default()
    }

    /// A policy with `users` (checked: unique non-empty names, at least one
    /// role, password hashes that parse as PHC strings).
    ///
    /// Errors: [`PolicyError`] naming the user and the cause.
    pub fn new(
        users: Vec<User>,
        anonymous_read: bool,
        throttle: ThrottleLimits,
    ) -> Result<Policy, PolicyError> {
        let mut map = BTreeMap::new();
        for u in users {
            let bad = |cause: &str| PolicyError::User {
                name: u.name.clone(),
                cause: cause.into(),
            };
            if u.name.is_empty() || u.name.contains(':') || u.name.chars().any(char::is_control) {
                return Err(bad(
                    "a name must be non-empty, without ':' or control characters",
                ));
            }
            if u.roles.is_empty() {
                return Err(bad("no roles (reader, cell, admin or metrics)"));
            }
            if let Some(h) = &u.password_hash {
                password::check_phc(h).map_err(|e| bad(&e))?;
            }
            if map.contains_key(&u.name) {
                return Err(PolicyError::Duplicate(u.name));
            }
            map.insert(u.name.clone(), u);
        }
        Ok(Policy {
            users: map,
            anonymous_read,
            public_metrics: false,
            throttle: throttle::Throttle::new(throttle),
            tokens: tokens::TokenUsers::default(),
            passwords: password::Verifier::default(),
        })
    }

    /// True when no users are configured (everyone has every permission).
    pub fn is_open(&self) -> bool {
        self.users.is_empty()
    }

    /// How many users are configured.
    pub fn user_count(&self) -> usize {
        self.users.len()
    }

    /// The configured users, by name.
    pub fn users(&self) -> impl Iterator<Item = &User> {
        self.users.values()
    }

    /// The user named `name`.
    pub fn user(&self, name: &str) -> Option<&User> {
        self.users.get(name)
    }

    /// The first configured user among a client certificate's names (CN
    /// first, then SANs).
    pub fn user_for_certificate(&self, names: &[String]) -> Option<&User> {
        names.iter().find_map(|n| self.users.get(n))
    }

    /// The user `name` if `password` is theirs: a configured user, else a
    /// token user of `state` ([`tokens`]; a configured user of the same name
    /// wins). Argon2 runs in a blocking thread; a recent success is
    /// remembered as a SHA-256 digest compared in constant time. An unknown
    /// user costs the same as a known one.
    pub async fn login(
        &self,
        state: &crate::state::StateStore,
        name: &str,
        password: &str,
    ) -> Option<User> {
        let user = match self.users.get(name) {
            Some(u) => Some(u.clone()),
            None => self.tokens.user(state, name).await,
        };
        let hash = user.as_ref().and_then(|u| u.password_hash.clone());
        if self.passwords.verify(name, hash, password).await {
            user
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(roles: &[Role], repos: &[&str]) -> User {
        User {
            name: "u".into(),
            password_hash: None,
            roles: roles.to_vec(),
            repositories: repos.iter().map(|s| s.to_string()).collect(),
            cells: Vec::new(),
        }
    }

    #[test]
    fn cell_globs() {
        assert!(glob("diego-cell/*", "diego-cell/0a"));
        assert!(!glob("diego-cell/*", "router/0a"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXbYc"));
        assert!(!glob("a*b*c", "aXc"));
        assert!(glob("exact", "exact"));
        assert!(!glob("exact", "exactly"));
        assert!(!glob("ab*ba", "aba"));
    }

    #[test]
    fn roles_grant_exactly_their_permissions() {
        use Permission::*;
        let all = [Pull, Stack, Push, Delete, Admin];
        let granted = |r: Role| all.iter().filter(|p| r.grants(**p)).count();
        assert_eq!(granted(Role::Reader), 1);
        assert_eq!(granted(Role::Cell), 2);
        assert_eq!(granted(Role::Admin), 5);
        assert!(!Role::Cell.grants(Push));
        assert!(Role::Cell.grants(Stack));
    }

    #[test]
    fn repository_prefixes_limit_roles() {
        let u = user(&[Role::Admin], &["stacks/"]);
        assert!(u.may(Permission::Push, Some("stacks/bookworm")));
        assert!(!u.may(Permission::Push, Some("library/busybox")));
        assert!(u.may(Permission::Pull, None));
        let r = user(&[Role::Reader], &[]);
        assert!(r.may(Permission::Pull, Some("any/thing")));
        assert!(!r.may(Permission::Push, Some("any/thing")));
    }

    #[test]
    fn prefixes_match_at_path_boundaries() {
        assert!(covers("stacks/", "stacks/bb"));
        assert!(covers("stacks", "stacks/bb"));
        assert!(covers("stacks/bb", "stacks/bb"));
        assert!(covers("stacks/bb", "stacks/bb/x"));
        assert!(!covers("stacks", "stacks-private/x"));
        assert!(!covers("stacks/bb", "stacks/bbx"));
        assert!(!covers("stacks/", "other/stacks/x"));
        assert!(covers("", "any"));
    }
}
