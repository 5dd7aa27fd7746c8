//! Lifecycle status of an image digest (RFC-0040 "transparency for app
//! owners"): is the stack a droplet was built on still the current one, or
//! has a patched one superseded it so that a restage is required?
//!
//! Answers for any digest: the image (index or manifest) of a promotion, one
//! of its platform manifests, its flattened rootfs (`rootfs_sha256`), or its
//! builders' build or run image. Pure: reads the stack table only.
//!
//! | status | meaning |
//! | --- | --- |
//! | `current` | the digest belongs to the stack's active promotion |
//! | `superseded` | it was promoted, and another promotion is active now (a newer one, or an older one after a rollback): `restage_required` |
//! | `custom` | it is the image of a custom stack ([`super::custom`]) |
//! | `unknown` | no stack names it |

use super::table::{Promotion, Stack, StackName, StackTable};
use crate::digest::Digest;

/// The answer of `GET /stacks/v1/lifecycle/<digest>` and `airlock stack
/// lifecycle DIGEST`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Lifecycle {
    /// The digest asked about.
    pub digest: Digest,
    /// `current`, `superseded`, `custom` or `unknown`.
    pub status: &'static str,
    /// The stack that names it (`None` when `unknown`).
    pub stack: Option<StackName>,
    /// The promotion that names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<u64>,
    /// When `superseded`: the image digest of the active promotion.
    pub superseded_by: Option<Digest>,
    /// RFC 3339: since when the status holds (the time the digest, or for
    /// `superseded` its successor, became active; for `custom` the
    /// registration time).
    pub since: Option<String>,
    /// True when `superseded`: apps built on this digest should be restaged.
    pub restage_required: bool,
}

fn names(p: &Promotion, digest: &Digest) -> bool {
    &p.image.digest == digest
        || p.rootfs
            .iter()
            .any(|r| &r.manifest == digest || &r.sha256 == digest)
        || p.build_image.as_ref().is_some_and(|i| &i.digest == digest)
        || p.run_image.as_ref().is_some_and(|i| &i.digest == digest)
}

/// When promotion `p` last became active: its own time, or the latest
/// rollback of a promotion that had replaced it.
fn active_since(stack: &Stack, p: &Promotion) -> String {
    stack
        .promotions
        .iter()
        .filter(|q| q.replaces == Some(p.id))
        .filter_map(|q| q.rolled_back.clone())
        .chain(std::iter::once(p.time.clone()))
        .max()
        .unwrap_or_default()
}

/// The lifecycle status of `digest` in `table`.
pub fn lifecycle(table: &StackTable, digest: &Digest) -> Lifecycle {
    let mut out = Lifecycle {
        digest: digest.clone(),
        status: "unknown",
        stack: None,
        promotion: None,
        superseded_by: None,
        since: None,
        restage_required: false,
    };
    let mut superseded = None;
    for (name, stack) in &table.stacks {
        let Some(active) = stack.active() else {
            continue;
        };
        if names(active, digest) {
            out.status = "current";
            out.stack = Some(name.clone());
            out.promotion = Some(active.id);
            out.since = Some(active_since(stack, active));
            return out;
        }
        if superseded.is_none()
            && let Some(p) = stack.promotions.iter().rev().find(|p| names(p, digest))
        {
            superseded = Some((name, stack, p, active));
        }
    }
    if let Some((name, stack, p, active)) = superseded {
        out.status = "superseded";
        out.stack = Some(name.clone());
        out.promotion = Some(p.id);
        out.superseded_by = Some(active.image.digest.clone());
        out.since = Some(active_since(stack, active));
        out.restage_required = true;
        return out;
    }
    if let Some((name, c)) = table.custom.iter().find(|(_, c)| &c.image.digest == digest) {
        out.status = "custom";
        out.stack = Some(name.clone());
        out.since = Some(c.time.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stacks::custom::CustomStack;
    use crate::stacks::table::tests::input as promotion;

    #[test]
    fn promote_supersede_rollback_custom_unknown() {
        let name: StackName = "cflinuxfs4".parse().unwrap();
        let (v1, v2) = (Digest::sha256_of(&[1]), Digest::sha256_of(&[2]));
        let mut t = StackTable::default();
        t.promote(&name, &promotion(1, 100), "2026-01-01T00:00:00Z", "me")
            .unwrap();
        assert_eq!(lifecycle(&t, &v1).status, "current");
        t.promote(&name, &promotion(2, 100), "2026-02-01T00:00:00Z", "me")
            .unwrap();
        let l1 = lifecycle(&t, &v1);
        assert_eq!(l1.status, "superseded");
        assert_eq!(l1.superseded_by.as_ref(), Some(&v2));
        assert!(l1.restage_required);
        assert_eq!(l1.since.as_deref(), Some("2026-02-01T00:00:00Z"));
        let l2 = lifecycle(&t, &v2);
        assert_eq!((l2.status, l2.restage_required), ("current", false));
        t.rollback(&name, "bad", "2026-03-01T00:00:00Z", "me")
            .unwrap();
        let l1 = lifecycle(&t, &v1);
        assert_eq!(l1.status, "current");
        assert_eq!(l1.since.as_deref(), Some("2026-03-01T00:00:00Z"));
        assert_eq!(lifecycle(&t, &v2).superseded_by.as_ref(), Some(&v1));
        let v9 = Digest::sha256_of(&[9]);
        assert_eq!(lifecycle(&t, &v9).status, "unknown");
        t.custom.insert(
            "alice-x".parse().unwrap(),
            CustomStack {
                image: format!("apps/x@{v9}").parse().unwrap(),
                description: String::new(),
                owner: "alice".into(),
                time: "t".into(),
            },
        );
        assert_eq!(lifecycle(&t, &v9).status, "custom");
    }
}
