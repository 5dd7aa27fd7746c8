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
//! | `current` | the digest belongs to the stack's fully rolled-out promotion; during a rollout `rolling_out_to` names the promotion replacing it on a share of cells (`digest`, `promotion`, `percent`) |
//! | `canary` | it is the promotion being rolled out to `rollout_percent` % of cells; the other cells keep the `current` one |
//! | `superseded` | it was promoted, and a newer promotion is fully rolled out now: `restage_required` |
//! | `rolled_back` | it was promoted and then withdrawn by `stack rollback`: `restage_required` (apps staged on it during its rollout should move back) |
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
    /// `current`, `canary`, `superseded`, `rolled_back`, `custom` or `unknown`.
    pub status: &'static str,
    /// The stack that names it (`None` when `unknown`).
    pub stack: Option<StackName>,
    /// The promotion that names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<u64>,
    /// When `current` during a rollout: the promotion replacing it on a
    /// share of cells.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rolling_out_to: Option<RollingOut>,
    /// When `canary`: the share of cells that run it, in percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_percent: Option<u8>,
    /// When `superseded` or `rolled_back`: the image digest of the current
    /// (fully rolled-out) promotion.
    pub superseded_by: Option<Digest>,
    /// RFC 3339: since when the status holds (the time the digest became
    /// current or canary; for `superseded` the time its successor became
    /// current; for `rolled_back` the rollback; for `custom` the
    /// registration time).
    pub since: Option<String>,
    /// True when `superseded` or `rolled_back`: apps built on this digest
    /// should be restaged.
    pub restage_required: bool,
}

/// The rollout a `current` digest is being replaced by.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RollingOut {
    /// The image digest of the promotion being rolled out.
    pub digest: Digest,
    /// Its promotion id.
    pub promotion: u64,
    /// The share of cells that run it, in percent.
    pub percent: u8,
}

impl Lifecycle {
    /// `unknown` status of `digest`, every other field empty.
    fn unknown(digest: &Digest) -> Lifecycle {
        Lifecycle {
            digest: digest.clone(),
            status: "unknown",
            stack: None,
            promotion: None,
            rolling_out_to: None,
            rollout_percent: None,
            superseded_by: None,
            since: None,
            restage_required: false,
        }
    }
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

/// The status of `digest` in one stack: `current` or `canary` (served
/// now), else the latest promotion naming it as `superseded` or
/// `rolled_back`; `None` when the stack never named it.
fn in_stack(name: &StackName, stack: &Stack, digest: &Digest) -> Option<Lifecycle> {
    let settled = stack.settled()?;
    let canary = stack.canary();
    let mut out = Lifecycle {
        status: "current",
        stack: Some(name.clone()),
        ..Lifecycle::unknown(digest)
    };
    if names(settled, digest) {
        out.promotion = Some(settled.id);
        out.since = Some(active_since(stack, settled));
        out.rolling_out_to = canary.map(|(p, percent, _)| RollingOut {
            digest: p.image.digest.clone(),
            promotion: p.id,
            percent,
        });
        return Some(out);
    }
    if let Some((p, percent, _)) = canary.filter(|(p, _, _)| names(p, digest)) {
        out.status = "canary";
        out.promotion = Some(p.id);
        out.rollout_percent = Some(percent);
        out.since = Some(p.time.clone());
        return Some(out);
    }
    let p = stack.promotions.iter().rev().find(|p| names(p, digest))?;
    out.promotion = Some(p.id);
    out.superseded_by = Some(settled.image.digest.clone());
    out.restage_required = true;
    match &p.rolled_back {
        Some(when) => {
            out.status = "rolled_back";
            out.since = Some(when.clone());
        }
        None => {
            out.status = "superseded";
            out.since = Some(active_since(stack, settled));
        }
    }
    Some(out)
}

/// Every digest [`lifecycle`] knows in `table` (images, platform
/// manifests, rootfs, builder images of every promotion; custom stacks'
/// images), for resolving a short prefix typed at the command line.
pub fn known(table: &StackTable) -> Vec<&Digest> {
    let mut out = Vec::new();
    for p in table.stacks.values().flat_map(|s| &s.promotions) {
        out.push(&p.image.digest);
        out.extend(p.rootfs.iter().flat_map(|r| [&r.manifest, &r.sha256]));
        out.extend(p.build_image.iter().chain(&p.run_image).map(|i| &i.digest));
    }
    out.extend(table.custom.values().map(|c| &c.image.digest));
    out
}

/// The lifecycle status of `digest` in `table`: a stack that serves it now
/// (`current`, `canary`) wins over one that only did before.
pub fn lifecycle(table: &StackTable, digest: &Digest) -> Lifecycle {
    let mut earlier = None;
    for (name, stack) in &table.stacks {
        match in_stack(name, stack, digest) {
            Some(l) if matches!(l.status, "current" | "canary") => return l,
            Some(l) if earlier.is_none() => earlier = Some(l),
            _ => {}
        }
    }
    if let Some(l) = earlier {
        return l;
    }
    let mut out = Lifecycle::unknown(digest);
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
        // A canary: promotion 3 on 10 % of cells.
        let v3 = Digest::sha256_of(&[3]);
        t.promote(&name, &promotion(3, 10), "2026-03-01T00:00:00Z", "me")
            .unwrap();
        let l2 = lifecycle(&t, &v2);
        assert_eq!((l2.status, l2.restage_required), ("current", false));
        assert_eq!(
            l2.rolling_out_to,
            Some(RollingOut {
                digest: v3.clone(),
                promotion: 3,
                percent: 10
            })
        );
        let l3 = lifecycle(&t, &v3);
        assert_eq!((l3.status, l3.rollout_percent), ("canary", Some(10)));
        assert_eq!(lifecycle(&t, &v1).superseded_by.as_ref(), Some(&v2));
        // Withdrawn: rolled_back, the previous one current again.
        t.rollback(&name, "bad", "2026-03-02T00:00:00Z", "me")
            .unwrap();
        let l3 = lifecycle(&t, &v3);
        assert_eq!((l3.status, l3.restage_required), ("rolled_back", true));
        assert_eq!(l3.superseded_by.as_ref(), Some(&v2));
        assert_eq!(l3.since.as_deref(), Some("2026-03-02T00:00:00Z"));
        let l2 = lifecycle(&t, &v2);
        assert_eq!((l2.status, l2.rolling_out_to), ("current", None));
        assert_eq!(l2.since.as_deref(), Some("2026-03-02T00:00:00Z"));
        // Rolled back once more: promotion 2 withdrawn, 1 current again.
        t.rollback(&name, "bad", "2026-04-01T00:00:00Z", "me")
            .unwrap();
        let l1 = lifecycle(&t, &v1);
        assert_eq!(l1.status, "current");
        assert_eq!(l1.since.as_deref(), Some("2026-04-01T00:00:00Z"));
        assert_eq!(lifecycle(&t, &v2).status, "rolled_back");
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
