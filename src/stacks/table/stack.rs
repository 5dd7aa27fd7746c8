//! One [`Stack`]: its promotions with their rollout, rootfs per platform, import
//! candidates and history, and how a cell's promotion is resolved.

use super::*;

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
    /// Its casync blob index and chunk map ([`crate::chunks`]), for deltas;
    /// `None` for a rootfs promoted before chunking existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunks: Option<crate::chunks::ChunkRefs>,
    /// A zstd patch to this rootfs from the rootfs of the same platform in
    /// the promotion this one replaced ([`crate::chunks::patch`]), when one
    /// was made and pays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<crate::chunks::patch::PatchRef>,
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
    /// What changed from the promotion it replaced: packages and
    /// `os-release` per platform ([`crate::sbom::diff`]), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<serde_json::Value>,
}

impl Promotion {
    /// The rootfs for `platform`, else the only one.
    pub fn rootfs_for(&self, platform: Option<&str>) -> Option<&Rootfs> {
        match platform {
            Some(p) => self.rootfs.iter().find(|r| r.platform == p),
            None if self.rootfs.len() == 1 => self.rootfs.first(),
            None => {
                let native = crate::stacks::image::native_platform();
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
    /// The bundle's signed creation time (RFC 3339): a candidate from a
    /// bundle created earlier than the stack's newest candidate's is a
    /// downgrade (issue 24 §1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_created: Option<String>,
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

    /// The fully rolled-out promotion: during an incomplete rollout (below
    /// 100 %, with a previous promotion) the previous one, which every cell
    /// outside the rollout runs; else the active one. What a request naming
    /// no cell gets, and what `stack lifecycle` calls `current`.
    pub fn settled(&self) -> Option<&Promotion> {
        match self.canary() {
            Some((_, _, previous)) => Some(previous),
            None => self.active(),
        }
    }

    /// During an incomplete rollout: the promotion being rolled out, its
    /// percentage and the promotion the other cells keep.
    pub fn canary(&self) -> Option<(&Promotion, u8, &Promotion)> {
        let r = self.rollout?;
        if r.percent >= 100 {
            return None;
        }
        let previous = self.promotion(r.previous?)?;
        Some((self.promotion(r.promotion)?, r.percent, previous))
    }

    /// What `cell` of stack `name` runs now: the rolled-out promotion when
    /// the cell's bucket falls under the percentage (or nothing else
    /// exists), else the previous one. `None` before the first promotion.
    pub fn resolve(&self, name: &StackName, cell: &str) -> Option<Resolution<'_>> {
        let r = self.rollout?;
        let latest = self.promotion(r.promotion)?;
        match r.previous.and_then(|id| self.promotion(id)) {
            Some(prev)
                if !crate::stacks::rollout::selected(
                    name.as_str(),
                    r.promotion,
                    cell,
                    r.percent,
                ) =>
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

    pub(super) fn event(&mut self, now: &str, who: &str, action: &str, detail: String) {
        self.history.push(Event {
            time: now.into(),
            who: who.into(),
            action: action.into(),
            detail,
        });
    }
}
