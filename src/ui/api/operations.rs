//! `GET /api/v1/operations`: the last GC and fsck reports, the blobs in
//! quarantine (paged), and the configured and token users. All of it is
//! about every repository at once: shown only to a caller who may
//! administer every repository; others get an empty page.

use super::{Paged, Result, page_of};
use crate::auth::Role;
use crate::ops::reports::{self, LastReport};
use crate::store::verify::QUARANTINE_PREFIX;
use crate::ui::Context;
use crate::ui::http::Viewer;

/// The operations page.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Operations {
    /// The last `airlock gc`.
    pub last_gc: Option<LastReport>,
    /// The last `airlock fsck`.
    pub last_fsck: Option<LastReport>,
    /// Blobs found corrupt and moved aside (never served), by digest.
    pub quarantined: Paged<QuarantinedBlob>,
    /// Users, for admins (`None` for others).
    pub users: Option<Users>,
}

/// One quarantined blob.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct QuarantinedBlob {
    /// Its digest (what its content should have hashed to).
    pub digest: String,
    /// Its size in bytes.
    pub size: u64,
    /// When it was moved to quarantine, RFC 3339 UTC.
    pub time: String,
}

/// The users.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Users {
    /// `[[user]]` entries of the config (changed there, not here).
    pub configured: Vec<UserView>,
    /// Token users kept in the state (revocable here).
    pub tokens: Vec<UserView>,
}

/// One user.
#[derive(Debug, Clone, serde::Serialize)]
pub struct UserView {
    /// The name.
    pub name: String,
    /// Roles.
    pub roles: Vec<Role>,
    /// Repository prefixes (empty: all).
    pub repositories: Vec<String>,
    /// Configured: `password`, `certificate`; token users: what it is for.
    pub detail: String,
    /// Token users: created when and by whom.
    pub created: Option<String>,
}

fn rfc3339(t: std::time::SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .replace_nanosecond(0)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

/// The operations page's data.
///
/// Errors: the store or the state cannot be read.
pub async fn build(
    ctx: &dyn Context,
    viewer: &Viewer,
    quarantine_after: Option<&String>,
    limit: usize,
) -> Result<Operations> {
    let state = ctx.state();
    let store = state.blobstore();
    if !viewer.admin_everywhere() {
        return Ok(Operations {
            last_gc: None,
            last_fsck: None,
            quarantined: Paged {
                items: Vec::new(),
                next: None,
                total: None,
            },
            users: None,
        });
    }
    let metas = match store.list_meta(QUARANTINE_PREFIX).await {
        Ok(m) => m,
        Err(crate::store::StoreError::NotFound(_)) => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    // quarantine/<alg>/<2 hex>/<hex> → <alg>:<hex>
    let mut blobs: Vec<QuarantinedBlob> = metas
        .iter()
        .filter_map(|m| {
            let mut parts = m.key.split('/').skip(1);
            let (alg, _, hex) = (parts.next()?, parts.next()?, parts.next()?);
            Some(QuarantinedBlob {
                digest: format!("{alg}:{hex}"),
                size: m.size,
                time: rfc3339(m.modified),
            })
        })
        .collect();
    blobs.sort_by(|a, b| a.digest.cmp(&b.digest));
    let names: Vec<String> = blobs.iter().map(|b| b.digest.clone()).collect();
    let page = page_of(&names, quarantine_after.map(String::as_str), limit);
    let start = quarantine_after.map_or(0, |a| names.partition_point(|n| n.as_str() <= a.as_str()));
    let quarantined = Paged {
        items: blobs[start..start + page.items.len()].to_vec(),
        next: page.next,
        total: page.total,
    };
    let users = if viewer.admin_everywhere() {
        let policy = ctx.policy();
        let configured = policy
            .users()
            .map(|u| UserView {
                name: u.name.clone(),
                roles: u.roles.clone(),
                repositories: u.repositories.clone(),
                detail: if u.password_hash.is_some() {
                    "password or client certificate".into()
                } else {
                    "client certificate only".into()
                },
                created: None,
            })
            .collect();
        let table = crate::auth::tokens::list(state)
            .await
            .map_err(crate::ui::UiError::internal)?;
        let tokens = table
            .users
            .iter()
            .map(|(name, t)| UserView {
                name: name.clone(),
                roles: t.roles.clone(),
                repositories: t.repositories.clone(),
                detail: t.purpose.clone(),
                created: Some(format!("{} by {}", t.created, t.by)),
            })
            .collect();
        Some(Users { configured, tokens })
    } else {
        None
    };
    Ok(Operations {
        last_gc: reports::last(&**store, "gc").await?,
        last_fsck: reports::last(&**store, "fsck").await?,
        quarantined,
        users,
    })
}
