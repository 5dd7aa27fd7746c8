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

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use super::StackError;
use crate::digest::Digest;
use crate::names::RepositoryName;

/// The name of the stack table in [`crate::state::StateDoc::documents`].
pub const DOC_NAME: &str = "stacks";
/// The `kind` of the stack table.
pub const KIND: &str = "airlock.stacks.v1";

/// A stack name, such as `cflinuxfs4`: 1 to 128 characters of `[a-z0-9._-]`,
/// starting and ending with a letter or digit (it appears in URLs, object
/// keys and rep's `NAME:/path` properties).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct StackName(String);

impl StackName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for StackName {
    type Err = StackError;
    fn from_str(s: &str) -> Result<Self, StackError> {
        let b = s.as_bytes();
        let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
        let ok = !b.is_empty()
            && b.len() <= 128
            && alnum(b[0])
            && alnum(b[b.len() - 1])
            && b.iter()
                .all(|&c| alnum(c) || matches!(c, b'.' | b'_' | b'-'));
        if ok {
            Ok(StackName(s.to_string()))
        } else {
            Err(StackError::Invalid(format!(
                "invalid stack name {s:?}: 1 to 128 characters of [a-z0-9._-], starting and ending with a letter or digit"
            )))
        }
    }
}

impl TryFrom<String> for StackName {
    type Error = StackError;
    fn try_from(s: String) -> Result<Self, StackError> {
        s.parse()
    }
}

impl From<StackName> for String {
    fn from(n: StackName) -> String {
        n.0
    }
}

impl fmt::Display for StackName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for StackName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Cloud Controller's stack states (v3 API, RFC-0045).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum StackState {
    /// Staging and running work.
    #[default]
    Active,
    /// Staging works, with a warning.
    Deprecated,
    /// No new apps; restaging existing ones works (with a warning).
    Restricted,
    /// No staging at all; running apps keep running.
    Disabled,
}

impl StackState {
    /// The upper-case name Cloud Controller uses.
    pub fn as_str(self) -> &'static str {
        match self {
            StackState::Active => "ACTIVE",
            StackState::Deprecated => "DEPRECATED",
            StackState::Restricted => "RESTRICTED",
            StackState::Disabled => "DISABLED",
        }
    }

    /// What the state means, in Cloud Controller's terms.
    pub fn meaning(self) -> &'static str {
        match self {
            StackState::Active => "staging and running work",
            StackState::Deprecated => "staging works with a warning; it will be removed",
            StackState::Restricted => "no new apps; restaging existing apps works with a warning",
            StackState::Disabled => "no staging at all; running apps keep running",
        }
    }

    /// The warning cells and clients get for this state, `None` for ACTIVE,
    /// in Cloud Controller's words: its staging warning for DEPRECATED and
    /// RESTRICTED (restaging still works), its staging refusal for DISABLED.
    pub fn warning(self, name: &StackName, reason: &str) -> Option<String> {
        let tail = if reason.is_empty() {
            String::new()
        } else {
            format!(" {reason}")
        };
        let state = self.as_str();
        match self {
            StackState::Active => None,
            StackState::Deprecated | StackState::Restricted => Some(format!(
                "The stack '{name}' is '{state}' and will be removed in the future.{tail}"
            )),
            StackState::Disabled => Some(format!(
                "The stack '{name}' is '{state}' and cannot be used for staging.{tail}"
            )),
        }
    }
}

impl FromStr for StackState {
    type Err = StackError;
    fn from_str(s: &str) -> Result<Self, StackError> {
        Ok(match s.to_ascii_uppercase().as_str() {
            "ACTIVE" => StackState::Active,
            "DEPRECATED" => StackState::Deprecated,
            "RESTRICTED" => StackState::Restricted,
            "DISABLED" => StackState::Disabled,
            _ => {
                return Err(StackError::Invalid(format!(
                    "invalid state {s:?}: ACTIVE, DEPRECATED, RESTRICTED or DISABLED"
                )));
            }
        })
    }
}

/// An image pinned by digest: `repository@digest`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ImageRef {
    /// The repository.
    pub repository: RepositoryName,
    /// The root manifest or index digest.
    pub digest: Digest,
}

impl FromStr for ImageRef {
    type Err = StackError;
    fn from_str(s: &str) -> Result<Self, StackError> {
        let bad =
            || StackError::Invalid(format!("invalid image reference {s:?}: REPOSITORY@DIGEST"));
        let (repo, digest) = s.split_once('@').ok_or_else(bad)?;
        Ok(ImageRef {
            repository: repo.parse().map_err(|_| bad())?,
            digest: digest.parse().map_err(|_| bad())?,
        })
    }
}

impl TryFrom<String> for ImageRef {
    type Error = StackError;
    fn try_from(s: String) -> Result<Self, StackError> {
        s.parse()
    }
}

impl From<ImageRef> for String {
    fn from(r: ImageRef) -> String {
        r.to_string()
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.repository, self.digest)
    }
}

impl fmt::Debug for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// The flattened root file system of one platform of a promoted image.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rootfs {
    /// `os/architecture[/variant]`, e.g. `linux/amd64`.
    pub platform: String,
    /// The platform's image manifest digest (what a cell should run).
    pub manifest: Digest,
    /// The flattened tar's blob digest (sha256).
    pub sha256: Digest,
    /// Its size in bytes.
    pub size: u64,
}

/// One promotion of a stack.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Promotion {
    /// 1, 2, ... per stack.
    pub id: u64,
    /// The rootfs image.
    pub image: ImageRef,
    /// One flattened rootfs per platform of the image.
    pub rootfs: Vec<Rootfs>,
    /// The builders' build image (kpack ClusterStack `buildImage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_image: Option<ImageRef>,
    /// The builders' run image (kpack ClusterStack `runImage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<ImageRef>,
    /// When, RFC 3339 UTC.
    pub time: String,
    /// Who.
    pub who: String,
    /// Why.
    pub reason: String,
    /// The bundle that carried it, when it was an import candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<String>,
    /// The promotion it replaced (cells outside the rollout keep that one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<u64>,
    /// When it was rolled back, if it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<String>,
}

impl Promotion {
    /// The rootfs for `platform`, else the only one.
    pub fn rootfs_for(&self, platform: Option<&str>) -> Option<&Rootfs> {
        match platform {
            Some(p) => self.rootfs.iter().find(|r| r.platform == p),
            None if self.rootfs.len() == 1 => self.rootfs.first(),
            None => {
                let native = super::image::native_platform();
                self.rootfs.iter().find(|r| r.platform == native)
            }
        }
    }
}

/// The active rollout of a stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rollout {
    /// The promotion being rolled out.
    pub promotion: u64,
    /// Percentage of cells that run it (0..=100).
    pub percent: u8,
    /// What the other cells run (`None`: every cell runs `promotion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<u64>,
}

/// A stack image carried by an imported bundle, waiting for an admin.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Candidate {
    /// The rootfs image.
    pub image: ImageRef,
    /// Builders' build image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build_image: Option<ImageRef>,
    /// Builders' run image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_image: Option<ImageRef>,
    /// The bundle id.
    pub bundle: String,
    /// When it was imported.
    pub time: String,
}

/// One change to a stack, for `stack show`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// When, RFC 3339 UTC.
    pub time: String,
    /// Who.
    pub who: String,
    /// What (`promote`, `rollout`, `rollback`, `state`, `default`, `candidate`).
    pub action: String,
    /// Details, one line.
    pub detail: String,
}

/// One system stack.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stack {
    /// Free text (Cloud Controller's `description`).
    #[serde(default)]
    pub description: String,
    /// Cloud Controller's state.
    #[serde(default)]
    pub state: StackState,
    /// Why it is in that state.
    #[serde(default)]
    pub state_reason: String,
    /// The Cloud Native Buildpacks stack id (`io.buildpacks.stack.id`) of its
    /// build and run images, when it has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stack_id: Option<String>,
    /// At most this many concurrent rootfs downloads (None: no limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    /// The active rollout (None before the first promotion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// Every promotion, oldest first.
    #[serde(default)]
    pub promotions: Vec<Promotion>,
    /// Import candidates, oldest first.
    #[serde(default)]
    pub candidates: Vec<Candidate>,
    /// Every change, oldest first.
    #[serde(default)]
    pub history: Vec<Event>,
}

/// What a cell should run.
#[derive(Debug, Clone, Copy)]
pub struct Resolution<'a> {
    /// The promotion the cell gets.
    pub promotion: &'a Promotion,
    /// True when that is the promotion being rolled out (not the previous one).
    pub latest: bool,
}

impl Stack {
    /// The promotion with this id.
    pub fn promotion(&self, id: u64) -> Option<&Promotion> {
        self.promotions.iter().find(|p| p.id == id)
    }

    /// The promotion being rolled out (what a 100 % cell runs).
    pub fn active(&self) -> Option<&Promotion> {
        self.rollout.and_then(|r| self.promotion(r.promotion))
    }

    /// What `cell` of stack `name` runs now: the rolled-out promotion when
    /// the cell's bucket falls under the percentage (or nothing else
    /// exists), else the previous one. `None` before the first promotion.
    pub fn resolve(&self, name: &StackName, cell: &str) -> Option<Resolution<'_>> {
        let r = self.rollout?;
        let latest = self.promotion(r.promotion)?;
        match r.previous.and_then(|id| self.promotion(id)) {
            Some(prev)
                if !super::rollout::selected(name.as_str(), r.promotion, cell, r.percent) =>
            {
                Some(Resolution {
                    promotion: prev,
                    latest: false,
                })
            }
            _ => Some(Resolution {
                promotion: latest,
                latest: true,
            }),
        }
    }

    /// Every digest (image or platform manifest) a cell may be told to run now.
    pub fn serving(&self) -> Vec<&Promotion> {
        let Some(r) = self.rollout else {
            return Vec::new();
        };
        [Some(r.promotion), r.previous]
            .into_iter()
            .flatten()
            .filter_map(|id| self.promotion(id))
            .collect()
    }

    /// The stack as JSON for `stack show --json` and `GET /stacks/v1/<name>`:
    /// its fields plus `name`, `default` and `active` (the promotion being
    /// rolled out, in full).
    pub fn view(&self, name: &StackName, default: bool) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(o) = v.as_object_mut() {
            o.insert("name".into(), name.as_str().into());
            o.insert("default".into(), default.into());
            o.insert(
                "active".into(),
                serde_json::to_value(self.active()).unwrap_or_default(),
            );
        }
        v
    }

    fn event(&mut self, now: &str, who: &str, action: &str, detail: String) {
        self.history.push(Event {
            time: now.into(),
            who: who.into(),
            action: action.into(),
            detail,
        });
    }
}

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
}

impl StackTable {
    /// Every blob the table keeps: the flattened rootfs of every promotion
    /// (rolled back or not: a rollback may bring it back). For garbage
    /// collection, which marks them ([`crate::ops::gc`]).
    pub fn blobs(&self) -> impl Iterator<Item = &Digest> {
        self.stacks
            .values()
            .flat_map(|s| &s.promotions)
            .flat_map(|p| &p.rootfs)
            .map(|r| &r.sha256)
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
