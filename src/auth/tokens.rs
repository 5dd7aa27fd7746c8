//! Token users: credentials airlock creates itself (e.g. the read-only
//! pull credential of `airlock stack kpack --pull-secret`), kept in the
//! state so that every replica sees them and none keeps state of its own.
//!
//! Owns: the state document `users` ([`DOC_NAME`], a [`TokenTable`]: name →
//! [`TokenUser`] with roles, repository prefixes, who created it, when and
//! why, and the argon2id PHC hash of its token; the token itself is printed
//! once and never stored), creating and revoking entries (one commit each,
//! recorded in the audit trail), and [`TokenUsers`], the server's cache of
//! the table keyed by the document's digest, so that a login reads the
//! table only after it changed. Configured `[[user]]` entries win over a
//! token user of the same name.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;

use super::{Role, User, password};
use crate::digest::Digest;
use crate::state::{Commit, DocumentChange, Op, StateError, StateStore};

/// The state document holding the token users.
pub const DOC_NAME: &str = "users";

/// One token user.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenUser {
    /// PHC argon2id hash of the token (the token is never stored).
    pub token_hash: String,
    /// Roles (a kpack pull credential: `reader`).
    pub roles: Vec<Role>,
    /// Repository prefixes the roles are limited to (see [`super::covers`]).
    pub repositories: Vec<String>,
    /// When it was created, RFC 3339 UTC.
    pub created: String,
    /// Who created it (`user@host` on the CLI).
    pub by: String,
    /// What it is for (e.g. `kpack pull secret for stack bb in namespace builds`).
    pub purpose: String,
}

/// The `users` document: token user name → entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TokenTable {
    /// By name.
    pub users: BTreeMap<String, TokenUser>,
}

impl TokenUser {
    /// As a [`User`] the policy checks.
    pub fn user(&self, name: &str) -> User {
        User {
            name: name.to_string(),
            password_hash: Some(self.token_hash.clone()),
            roles: self.roles.clone(),
            repositories: self.repositories.clone(),
            cells: Vec::new(),
        }
    }
}

/// Errors of token-user changes.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Revoking a name that is no token user.
    #[error("no token user {0:?}")]
    Unknown(String),
    /// A bad request (name, roles).
    #[error("{0}")]
    Invalid(String),
    /// The state could not be read or changed.
    #[error(transparent)]
    State(#[from] StateError),
}

/// The token table in the current state (empty when there is none).
///
/// Errors: the state or the document cannot be read.
pub async fn list(state: &StateStore) -> Result<TokenTable, TokenError> {
    let snap = state.snapshot().await?;
    Ok(state
        .document::<TokenTable>(&snap, DOC_NAME)
        .await?
        .unwrap_or_default())
}

/// A fresh token: 32 random bytes, base64url without padding (43 characters).
fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Creates token user `name` with `roles` limited to `repositories` and
/// commits it (reason `create token user NAME`, by `who`). Returns the
/// token (shown once) and the commit.
///
/// Errors: [`TokenError::Invalid`] for an empty name, one with `:` or
/// control characters, no roles, or a name already taken; state errors.
pub async fn create(
    state: &StateStore,
    name: &str,
    roles: Vec<Role>,
    repositories: Vec<String>,
    purpose: &str,
    who: &str,
) -> Result<(String, Commit), TokenError> {
    if name.is_empty() || name.contains(':') || name.chars().any(char::is_control) {
        return Err(TokenError::Invalid(format!(
            "token user name {name:?}: must be non-empty, without ':' or control characters"
        )));
    }
    if roles.is_empty() {
        return Err(TokenError::Invalid("a token user needs a role".into()));
    }
    let token = new_token();
    let entry = TokenUser {
        token_hash: password::hash(&token).map_err(TokenError::Invalid)?,
        roles,
        repositories,
        created: crate::state::now_rfc3339(),
        by: who.to_string(),
        purpose: purpose.to_string(),
    };
    let key = name.to_string();
    let op = Op::Document {
        name: DOC_NAME.into(),
        change: DocumentChange::json(move |current: Option<TokenTable>| {
            let mut table = current.unwrap_or_default();
            if table.users.contains_key(&key) {
                return Err(StateError::Rejected(format!(
                    "token user {key:?} exists already"
                )));
            }
            table.users.insert(key.clone(), entry.clone());
            Ok(Some(table))
        }),
    };
    let commit = state
        .commit(&format!("create token user {name}"), who, &[op])
        .await
        .map_err(|e| match e {
            StateError::Rejected(m) => TokenError::Invalid(m),
            e => e.into(),
        })?;
    Ok((token, commit))
}

/// Removes token user `name` (reason `revoke token user NAME`, by `who`);
/// its token is refused (401) from the next request on, by every replica.
///
/// Errors: [`TokenError::Unknown`] when there is no such token user; state errors.
pub async fn revoke(state: &StateStore, name: &str, who: &str) -> Result<Commit, TokenError> {
    let key = name.to_string();
    let op = Op::Document {
        name: DOC_NAME.into(),
        change: DocumentChange::json(move |current: Option<TokenTable>| {
            let mut table = current.unwrap_or_default();
            if table.users.remove(&key).is_none() {
                return Err(StateError::Rejected(key.clone()));
            }
            Ok((!table.users.is_empty()).then_some(table))
        }),
    };
    state
        .commit(&format!("revoke token user {name}"), who, &[op])
        .await
        .map_err(|e| match e {
            StateError::Rejected(_) => TokenError::Unknown(name.to_string()),
            e => e.into(),
        })
}

/// The server's view of the token table, re-read only when the `users`
/// document's digest changes.
#[derive(Debug, Default)]
pub struct TokenUsers {
    cached: Mutex<Option<(Digest, Arc<TokenTable>)>>,
}

impl TokenUsers {
    /// Token user `name` in the current state; `None` when there is none,
    /// or the state cannot be read (logged; the login fails).
    pub async fn user(&self, state: &StateStore, name: &str) -> Option<User> {
        let table = match self.table(state).await {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the token users");
                return None;
            }
        };
        table.users.get(name).map(|u| u.user(name))
    }

    async fn table(&self, state: &StateStore) -> Result<Arc<TokenTable>, StateError> {
        let snap = state.snapshot().await?;
        let Some(digest) = snap
            .state
            .as_ref()
            .and_then(|s| s.documents.get(DOC_NAME))
            .cloned()
        else {
            return Ok(Arc::default());
        };
        if let Ok(c) = self.cached.lock()
            && let Some((d, t)) = c.as_ref()
            && *d == digest
        {
            return Ok(t.clone());
        }
        let table: Arc<TokenTable> = Arc::new(
            state
                .document::<TokenTable>(&snap, DOC_NAME)
                .await?
                .unwrap_or_default(),
        );
        if let Ok(mut c) = self.cached.lock() {
            *c = Some((digest, table.clone()));
        }
        Ok(table)
    }
}
