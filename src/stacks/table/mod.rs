//! The stack table: the `stacks` document in the state tree, and every rule
//! for changing it.
//!
//! Owns: stack names, Cloud Controller's states (RFC-0045), promotions and
//! their rollout, rollback, the default stack, import candidates and the
//! per-stack history. Every method here is a pure change of the table (it
//! may run again on a newer root after a lost race, see
//! [`crate::state::DocumentChange`]); never reads blobs or speaks HTTP.
//!
//! Rules:
//! - A promotion replaces the stack's active promotion for the share of
//!   cells its rollout percentage selects ([`super::rollout`]); the others
//!   keep the one it replaces. The first promotion of a stack has nothing to
//!   replace and goes to every cell.
//! - A rollout only widens. A new promotion is refused while the previous
//!   rollout is incomplete (below 100 %): widen it or roll it back first, so
//!   that a cell is never moved between two digests it was not rolled to.
//! - Rollback makes the promotion the active one replaced the active one
//!   again, for every cell, and marks the active one rolled back. Rolling
//!   back again walks further back.
//!
//! Files: `name.rs` (stack names, states, image references), `stack.rs` (one stack:
//! promotions, rollout, candidates, history); this file holds the table and its changes.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::StackError;
use crate::digest::Digest;
use crate::names::RepositoryName;

mod name;
mod stack;
pub use name::{ImageRef, StackName, StackState};
pub use stack::{Candidate, Event, Promotion, Resolution, Rollout, Rootfs, Stack};

/// The name of the stack table in [`crate::state::StateDoc::documents`].
pub const DOC_NAME: &str = "stacks";

/// The `kind` of the stack table.
pub const KIND: &str = "airlock.stacks.v1";

/// The whole table.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StackTable {
    /// Always [`KIND`].
    pub kind: String,
    /// The default stack (Cloud Controller's `default_stack`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<StackName>,
    /// Every stack by name.
    #[serde(default)]
    pub stacks: BTreeMap<StackName, Stack>,
    /// Custom stacks by name ([`super::custom`]): never the default, never
    /// rolled out to cells.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub custom: BTreeMap<StackName, super::custom::CustomStack>,
}

impl Default for StackTable {
    fn default() -> StackTable {
        StackTable {
            kind: KIND.into(),
            default: None,
            stacks: BTreeMap::new(),
            custom: BTreeMap::new(),
        }
    }
}

/// What an admin promotes.
#[derive(Debug, Clone)]
pub struct PromotionInput {
    /// The rootfs image, pinned.
    pub image: ImageRef,
    /// Its flattened rootfs per platform (made before the commit).
    pub rootfs: Vec<Rootfs>,
    /// Builders' images and their stack id, already checked.
    pub build_image: Option<ImageRef>,
    /// Builders' run image.
    pub run_image: Option<ImageRef>,
    /// `io.buildpacks.stack.id` of the builder images.
    pub stack_id: Option<String>,
    /// Rollout percentage (0..=100).
    pub percent: u8,
    /// New download limit; `None` keeps the stack's.
    pub max_in_flight: Option<u32>,
    /// New description; `None` keeps the stack's.
    pub description: Option<String>,
    /// Why.
    pub reason: String,
    /// The package diff from the active promotion, kept with the promotion.
    pub diff: Option<serde_json::Value>,
}

impl StackTable {
    /// The repositories of every image the stack `name` names (each
    /// promotion's image and builder images, its candidates; a custom
    /// stack's image), sorted: what a caller needs rights on to act on or
    /// read the stack (issue 24 §2). Empty for an unknown name.
    pub fn repositories(&self, name: &StackName) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        if let Some(s) = self.stacks.get(name) {
            for p in &s.promotions {
                out.extend(
                    [Some(&p.image), p.build_image.as_ref(), p.run_image.as_ref()]
                        .into_iter()
                        .flatten()
                        .map(|i| i.repository.to_string()),
                );
            }
            for c in &s.candidates {
                out.extend(
                    [Some(&c.image), c.build_image.as_ref(), c.run_image.as_ref()]
                        .into_iter()
                        .flatten()
                        .map(|i| i.repository.to_string()),
                );
            }
        }
        if let Some(c) = self.custom.get(name) {
            out.push(c.image.repository.to_string());
        }
        out.sort();
        out.dedup();
        out
    }

    /// Every blob the table keeps: the flattened rootfs of every promotion
    /// (rolled back or not: a rollback may bring it back), with its chunk
    /// index, chunk map and patch. For garbage collection, which marks them
    /// ([`crate::ops::gc`]); the chunks a map names are [`StackTable::chunk_maps`].
    pub fn blobs(&self) -> impl Iterator<Item = &Digest> {
        self.rootfs().flat_map(|r| {
            std::iter::once(&r.sha256)
                .chain(r.chunks.iter().flat_map(|c| [&c.index, &c.map]))
                .chain(r.patch.iter().map(|p| &p.blob))
        })
    }

    /// The sizes the table records for blobs it keeps: each rootfs tar and
    /// each patch, in bytes (chunk indexes, maps and chunks record none).
    /// For fsck, which compares them with the stored sizes.
    pub fn blob_sizes(&self) -> impl Iterator<Item = (&Digest, u64)> {
        self.rootfs().flat_map(|r| {
            std::iter::once((&r.sha256, r.size)).chain(r.patch.iter().map(|p| (&p.blob, p.size)))
        })
    }

    /// Every rootfs of every promotion.
    pub fn rootfs(&self) -> impl Iterator<Item = &Rootfs> {
        self.stacks
            .values()
            .flat_map(|s| &s.promotions)
            .flat_map(|p| &p.rootfs)
    }

    /// The chunk maps of every rootfs ([`crate::chunks::map`]): the
    /// `.cacnk` blobs they name are kept too.
    pub fn chunk_maps(&self) -> impl Iterator<Item = &Digest> {
        self.rootfs()
            .filter_map(|r| r.chunks.as_ref().map(|c| &c.map))
    }

    /// [`StackTable::chunk_maps`], each once.
    pub fn chunk_map_set(&self) -> std::collections::HashSet<Digest> {
        self.chunk_maps().cloned().collect()
    }

    /// The stack `name`. Errors: [`StackError::NotFound`].
    pub fn get(&self, name: &StackName) -> Result<&Stack, StackError> {
        self.stacks
            .get(name)
            .ok_or_else(|| StackError::NotFound(format!("stack {name} not known")))
    }

    fn get_mut(&mut self, name: &StackName) -> Result<&mut Stack, StackError> {
        self.stacks
            .get_mut(name)
            .ok_or_else(|| StackError::NotFound(format!("stack {name} not known")))
    }

    /// Promotes `input` for stack `name` (created if new); returns the new
    /// promotion id. Errors: the previous rollout is incomplete, or the image
    /// is already the one rolled out (Conflict).
    pub fn promote(
        &mut self,
        name: &StackName,
        input: &PromotionInput,
        now: &str,
        who: &str,
    ) -> Result<u64, StackError> {
        if input.percent > 100 {
            return Err(StackError::Invalid(format!(
                "rollout percentage {} is over 100",
                input.percent
            )));
        }
        if self.custom.contains_key(name) {
            return Err(StackError::Conflict(format!(
                "{name} is a custom stack; custom stacks are never promoted"
            )));
        }
        let stack = self.stacks.entry(name.clone()).or_default();
        if let Some(r) = stack.rollout {
            if r.percent < 100 && r.previous.is_some() {
                return Err(StackError::Conflict(format!(
                    "stack {name}: promotion {} is rolled out to {} % only; widen it (airlock stack rollout {name} 100) or roll it back first",
                    r.promotion, r.percent
                )));
            }
            if stack.active().is_some_and(|p| {
                p.image.digest == input.image.digest
                    && p.build_image == input.build_image
                    && p.run_image == input.run_image
            }) {
                return Err(StackError::Conflict(format!(
                    "stack {name}: {} is already the active promotion",
                    input.image
                )));
            }
        }
        let id = stack.promotions.iter().map(|p| p.id).max().unwrap_or(0) + 1;
        let replaces = stack.rollout.map(|r| r.promotion);
        let import = stack
            .candidates
            .iter()
            .rev()
            .find(|c| c.image.digest == input.image.digest)
            .map(|c| c.bundle.clone());
        stack.promotions.push(Promotion {
            id,
            image: input.image.clone(),
            rootfs: input.rootfs.clone(),
            build_image: input.build_image.clone(),
            run_image: input.run_image.clone(),
            time: now.into(),
            who: who.into(),
            reason: input.reason.clone(),
            import,
            replaces,
            rolled_back: None,
            diff: input.diff.clone(),
        });
        stack.rollout = Some(Rollout {
            promotion: id,
            percent: if replaces.is_some() {
                input.percent
            } else {
                100
            },
            previous: replaces,
        });
        if let Some(n) = input.max_in_flight {
            stack.max_in_flight = (n > 0).then_some(n);
        }
        if let Some(d) = &input.description {
            stack.description = d.clone();
        }
        if input.stack_id.is_some() {
            stack.stack_id = input.stack_id.clone();
        }
        let percent = stack.rollout.map_or(100, |r| r.percent);
        stack.event(
            now,
            who,
            "promote",
            format!(
                "promotion {id}: {} to {percent} % of cells: {}",
                input.image, input.reason
            ),
        );
        Ok(id)
    }

    /// Widens the rollout of `name` to `percent`. Errors: no promotion yet,
    /// or a percentage below the current one (a rollout only widens).
    pub fn widen(
        &mut self,
        name: &StackName,
        percent: u8,
        now: &str,
        who: &str,
    ) -> Result<(), StackError> {
        if percent > 100 {
            return Err(StackError::Invalid(format!(
                "rollout percentage {percent} is over 100"
            )));
        }
        let stack = self.get_mut(name)?;
        let r = stack.rollout.as_mut().ok_or_else(|| {
            StackError::Conflict(format!("stack {name} has no promotion to roll out"))
        })?;
        if percent < r.percent {
            return Err(StackError::Conflict(format!(
                "stack {name}: promotion {} is at {} %; a rollout only widens (use rollback to return every cell)",
                r.promotion, r.percent
            )));
        }
        if percent == r.percent {
            return Ok(());
        }
        r.percent = percent;
        let id = r.promotion;
        stack.event(
            now,
            who,
            "rollout",
            format!("promotion {id} to {percent} % of cells"),
        );
        Ok(())
    }

    /// Returns every cell of `name` to the promotion the active one
    /// replaced; returns its id. Errors: nothing to roll back to.
    pub fn rollback(
        &mut self,
        name: &StackName,
        reason: &str,
        now: &str,
        who: &str,
    ) -> Result<u64, StackError> {
        let stack = self.get_mut(name)?;
        let active = stack
            .rollout
            .ok_or_else(|| {
                StackError::Conflict(format!("stack {name} has no promotion to roll back"))
            })?
            .promotion;
        let target = stack
            .promotion(active)
            .and_then(|p| p.replaces)
            .ok_or_else(|| {
                StackError::Conflict(format!(
                    "stack {name}: promotion {active} replaced nothing; there is nothing to roll back to"
                ))
            })?;
        if let Some(p) = stack.promotions.iter_mut().find(|p| p.id == active) {
            p.rolled_back = Some(now.into());
        }
        stack.rollout = Some(Rollout {
            promotion: target,
            percent: 100,
            previous: None,
        });
        stack.event(
            now,
            who,
            "rollback",
            format!("promotion {active} rolled back; every cell runs promotion {target}: {reason}"),
        );
        Ok(target)
    }

    /// Sets the state of `name`.
    pub fn set_state(
        &mut self,
        name: &StackName,
        state: StackState,
        reason: &str,
        now: &str,
        who: &str,
    ) -> Result<(), StackError> {
        if reason.len() > 5000 {
            return Err(StackError::Invalid(
                "state reason over 5000 characters".into(),
            ));
        }
        let stack = self.get_mut(name)?;
        if stack.state == state && stack.state_reason == reason {
            return Ok(());
        }
        stack.state = state;
        stack.state_reason = reason.into();
        stack.event(now, who, "state", format!("{}: {reason}", state.as_str()));
        Ok(())
    }

    /// Makes `name` the default stack.
    pub fn set_default(
        &mut self,
        name: &StackName,
        now: &str,
        who: &str,
    ) -> Result<(), StackError> {
        let stack = self.get_mut(name)?;
        stack.event(now, who, "default", format!("{name} is the default stack"));
        self.default = Some(name.clone());
        Ok(())
    }

    /// Records candidates carried by bundle `bundle` (stacks created as
    /// needed, with `description` when new). A candidate already recorded
    /// for the same images is not recorded again.
    pub fn add_candidate(
        &mut self,
        name: &StackName,
        description: &str,
        candidate: Candidate,
        who: &str,
    ) {
        let stack = self.stacks.entry(name.clone()).or_insert_with(|| Stack {
            description: description.into(),
            ..Stack::default()
        });
        stack.add_candidate(candidate, who);
    }

    /// The newest bundle creation time among `name`'s candidates, with the
    /// bundle's id, when one is recorded.
    pub fn newest_candidate(&self, name: &StackName) -> Option<(&str, &str)> {
        self.stacks
            .get(name)?
            .candidates
            .iter()
            .filter_map(|c| Some((c.bundle_created.as_deref()?, c.bundle.as_str())))
            .max()
    }
}

impl Stack {
    /// Records `candidate` (unless the same images are one already).
    fn add_candidate(&mut self, candidate: Candidate, who: &str) {
        let stack = self;
        let same = |c: &Candidate| {
            c.image == candidate.image
                && c.build_image == candidate.build_image
                && c.run_image == candidate.run_image
        };
        if stack.candidates.iter().any(same) {
            return;
        }
        let time = candidate.time.clone();
        let detail = format!("{} from bundle {}", candidate.image, candidate.bundle);
        stack.candidates.push(candidate);
        stack.event(&time, who, "candidate", detail);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A promotion of `stacks/x@sha256(n)` to `percent` % of cells.
    pub(crate) fn input(n: u8, percent: u8) -> PromotionInput {
        PromotionInput {
            image: format!("stacks/x@{}", Digest::sha256_of(&[n]))
                .parse()
                .unwrap(),
            rootfs: Vec::new(),
            build_image: None,
            run_image: None,
            stack_id: None,
            percent,
            max_in_flight: None,
            description: None,
            reason: "test".into(),
            diff: None,
        }
    }

    #[test]
    fn promote_widen_rollback() {
        let name: StackName = "cflinuxfs4".parse().unwrap();
        let mut t = StackTable::default();
        assert_eq!(t.promote(&name, &input(1, 10), "t", "me").unwrap(), 1);
        assert_eq!(
            t.stacks[&name].rollout.unwrap().percent,
            100,
            "first promotion goes everywhere"
        );
        assert_eq!(t.promote(&name, &input(2, 10), "t", "me").unwrap(), 2);
        assert!(matches!(
            t.promote(&name, &input(3, 10), "t", "me"),
            Err(StackError::Conflict(_))
        ));
        assert!(matches!(
            t.widen(&name, 5, "t", "me"),
            Err(StackError::Conflict(_))
        ));
        t.widen(&name, 100, "t", "me").unwrap();
        assert!(matches!(
            t.promote(&name, &input(2, 10), "t", "me"),
            Err(StackError::Conflict(_))
        ));
        assert_eq!(t.rollback(&name, "bad", "t", "me").unwrap(), 1);
        assert!(matches!(
            t.rollback(&name, "bad", "t", "me"),
            Err(StackError::Conflict(_))
        ));
        let s = &t.stacks[&name];
        assert!(s.promotion(2).unwrap().rolled_back.is_some());
        assert_eq!(s.resolve(&name, "any").unwrap().promotion.id, 1);
        assert!("Bad".parse::<StackName>().is_err());
        assert!("-a".parse::<StackName>().is_err());
    }
}
