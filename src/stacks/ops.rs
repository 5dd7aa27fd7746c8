//! Stack operations, each one root swap: promote, rollout, rollback,
//! set-state, set-default; and recording import candidates in an import's
//! own commit. The CLI and the admin API both call these.
//!
//! Owns: the work done before a change is committed (pinning references,
//! checking builder images, flattening rootfs tars) and handing the change
//! to `state` as a [`DocumentChange`] over the [`StackTable`]. Never speaks
//! HTTP.

use std::sync::{Arc, Mutex};

use super::StackError;
use super::custom::{self, Actor, CustomPolicy, CustomStack};
use super::flatten;
use super::image::{self, PlatformImage};
use super::kpack;
use super::table::{
    Candidate, ImageRef, Promotion, PromotionInput, Rootfs, StackName, StackState, StackTable,
};
use crate::digest::Digest;
use crate::events;
use crate::state::{Commit, DocumentChange, Op, StateError, StateStore, now_rfc3339};

/// The stack table in the current state (empty when there is none yet).
pub async fn load(state: &StateStore) -> Result<StackTable, StackError> {
    let snap = state.snapshot().await?;
    load_in(state, &snap).await
}

/// The stack table in `snap`.
pub async fn load_in(
    state: &StateStore,
    snap: &crate::state::Snapshot,
) -> Result<StackTable, StackError> {
    Ok(state
        .document::<StackTable>(snap, super::table::DOC_NAME)
        .await?
        .unwrap_or_default())
}

/// The op that applies `f` to the stack table; `f`'s typed error or value
/// is left in `slot` (the op may run more than once; the last run counts).
fn table_op<T, F>(f: F, slot: Arc<Mutex<Option<Result<T, StackError>>>>) -> Op
where
    T: Send + 'static,
    F: Fn(&mut StackTable) -> Result<T, StackError> + Send + Sync + 'static,
{
    Op::Document {
        name: super::table::DOC_NAME.into(),
        change: DocumentChange::json(move |current: Option<StackTable>| {
            let mut table = current.unwrap_or_default();
            let result = f(&mut table);
            let out = match &result {
                Ok(_) => Ok(Some(table)),
                Err(e) => Err(StateError::Rejected(e.to_string())),
            };
            if let Ok(mut s) = slot.lock() {
                *s = Some(result);
            }
            out
        }),
    }
}

/// Applies `f` to the stack table and commits it with one root swap.
/// Returns `f`'s value and the commit.
pub async fn change<T, F>(
    state: &StateStore,
    reason: &str,
    who: &str,
    f: F,
) -> Result<(T, Commit), StackError>
where
    T: Send + 'static,
    F: Fn(&mut StackTable) -> Result<T, StackError> + Send + Sync + 'static,
{
    let slot = Arc::new(Mutex::new(None));
    let op = table_op(f, slot.clone());
    let committed = state.commit(reason, who, &[op]).await;
    let result = slot.lock().ok().and_then(|mut s| s.take());
    match (committed, result) {
        (Ok(commit), Some(Ok(value))) => Ok((value, commit)),
        (Err(StateError::Rejected(_)), Some(Err(e))) => Err(e),
        (Err(e), _) => Err(e.into()),
        (Ok(_), _) => Err(StackError::Other(anyhow::anyhow!(
            "stack change did not run"
        ))),
    }
}

/// The stack-candidate op an import adds to its own commit (so candidates
/// appear with the images, in the same root swap).
///
/// A candidate from a bundle created earlier than the stack's newest
/// candidate's bundle is a downgrade: the whole change is refused
/// ([`StateError::Rejected`]) unless `allow_downgrade` (issue 24 §1).
pub fn candidates_op(
    entries: Vec<(StackName, String, Candidate)>,
    who: String,
    allow_downgrade: bool,
) -> Op {
    Op::Document {
        name: super::table::DOC_NAME.into(),
        change: DocumentChange::json(move |current: Option<StackTable>| {
            let mut table = current.unwrap_or_default();
            for (name, description, candidate) in &entries {
                if let (Some(new), Some((newest, bundle))) = (
                    candidate.bundle_created.as_deref(),
                    table.newest_candidate(name),
                ) && newest > new
                    && !allow_downgrade
                {
                    return Err(StateError::Rejected(format!(
                        "downgrade refused: stack {name} has a candidate from bundle {bundle} created {newest}; bundle {} was created {new}, earlier (import --allow-downgrade --reason TEXT)",
                        candidate.bundle
                    )));
                }
                table.add_candidate(name, description, candidate.clone(), &who);
            }
            Ok(Some(table))
        }),
    }
}

/// What an admin asks to promote (CLI flags or the admin API's JSON body).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromoteRequest {
    /// The rootfs image: `REPO:TAG`, `REPO@DIGEST` (or `REPO` for `:latest`).
    pub image: String,
    /// Rollout percentage (default 100).
    #[serde(default)]
    pub rollout: Option<u8>,
    /// At most this many concurrent rootfs downloads (0: no limit).
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// Builders' build image (with `run_image`).
    #[serde(default)]
    pub build_image: Option<String>,
    /// Builders' run image (with `build_image`).
    #[serde(default)]
    pub run_image: Option<String>,
    /// Expected `io.buildpacks.stack.id` (default: the build image's label).
    #[serde(default)]
    pub stack_id: Option<String>,
    /// The stack's description.
    #[serde(default)]
    pub description: Option<String>,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
    /// The package diff from the active promotion (set by the caller, never
    /// read from the request body): stored with the promotion and sent in
    /// the `stack.promoted` event ([`crate::sbom::diff`]).
    #[serde(skip)]
    pub diff: Option<serde_json::Value>,
}

/// The result of a promotion.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Promoted {
    /// The new promotion id.
    pub promotion: u64,
    /// The pinned image.
    pub image: ImageRef,
    /// Its rootfs per platform.
    pub rootfs: Vec<Rootfs>,
    /// Rollout percentage.
    pub percent: u8,
    /// The generation now current.
    pub generation: u64,
}

/// The rootfs of each platform of `image`: reused when any stack already
/// flattened that manifest, else flattened now; each chunked for deltas
/// ([`crate::chunks::build`]) unless its chunks are stored already, and
/// patched from the same platform's rootfs in `replaced` ([`patch_from`]).
/// Returns the rootfs and, per chunking done now, the shared `.cacnk`
/// blobs it found present (to check again after the commit).
async fn rootfs_of(
    state: &StateStore,
    table: &StackTable,
    platforms: &[PlatformImage],
    replaced: Option<&Promotion>,
) -> Result<(Vec<Rootfs>, Vec<(Rootfs, Vec<Digest>)>), StackError> {
    let known = |m: &crate::digest::Digest| table.rootfs().find(|r| &r.manifest == m).cloned();
    let store = state.blobstore();
    let mut out = Vec::new();
    let mut shared = Vec::new();
    for p in platforms {
        let mut r = match known(&p.manifest) {
            Some(mut r)
                if store.stat(&crate::store::blob_key(&r.sha256)).await? == Some(r.size) =>
            {
                r.platform = p.platform.clone();
                r
            }
            _ => {
                let f = flatten::flatten(store.clone(), p.layers.clone())
                    .await
                    .map_err(|e| {
                        StackError::Image(format!(
                            "flattening {} ({}): {e:#}",
                            p.manifest, p.platform
                        ))
                    })?;
                tracing::info!(manifest = %p.manifest, platform = %p.platform, rootfs = %f.digest, size = f.size, "rootfs flattened");
                Rootfs {
                    platform: p.platform.clone(),
                    manifest: p.manifest.clone(),
                    sha256: f.digest,
                    size: f.size,
                    chunks: None,
                    patch: None,
                }
            }
        };
        if !chunks_stored(&**store, &r).await? {
            let built = chunk_rootfs(store, &r).await?;
            r.chunks = Some(built.refs);
            shared.push((r.clone(), built.present));
        }
        r.patch = patch_from(store, replaced, &r).await;
        out.push(r);
    }
    Ok((out, shared))
}

/// The patch to `r` from the rootfs of `r`'s platform in `replaced`: the
/// one `r` names already when it is from that rootfs and stored, else one
/// made now ([`super::patch`]). `None` for a first promotion, the same
/// rootfs, a patch that would not pay, or one that could not be made
/// (logged: cells then use chunks; a promotion never fails for it).
async fn patch_from(
    store: &Arc<dyn crate::store::Blobstore>,
    replaced: Option<&Promotion>,
    r: &Rootfs,
) -> Option<crate::chunks::patch::PatchRef> {
    let from = replaced?.rootfs.iter().find(|x| x.platform == r.platform)?;
    if let Some(p) = &r.patch
        && p.from == from.sha256
        && matches!(store.stat(&crate::store::blob_key(&p.blob)).await, Ok(Some(n)) if n == p.size)
    {
        return Some(p.clone());
    }
    match super::patch::make(store, from, r).await {
        Ok(p) => p,
        Err(e) => {
            tracing::warn!(from = %from.sha256, to = %r.sha256, error = format!("{e:#}"), "no rootfs patch; cells use chunks");
            None
        }
    }
}

/// Whether the index and the map `r` names are in the store.
async fn chunks_stored(
    store: &dyn crate::store::Blobstore,
    r: &Rootfs,
) -> Result<bool, StackError> {
    let Some(c) = &r.chunks else {
        return Ok(false);
    };
    for d in [&c.index, &c.map] {
        if store.stat(&crate::store::blob_key(d)).await?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Cuts the rootfs `r` into chunks, with casync's default sizes.
pub(super) async fn chunk_rootfs(
    store: &std::sync::Arc<dyn crate::store::Blobstore>,
    r: &Rootfs,
) -> Result<crate::chunks::build::Built, StackError> {
    let sizes = crate::chunks::ChunkSizes::DEFAULT;
    let b = crate::chunks::build::chunk_blob(store.clone(), &r.sha256, r.size, sizes)
        .await
        .map_err(|e| StackError::Other(e.context(format!("chunking rootfs {}", r.sha256))))?;
    tracing::info!(
        rootfs = %r.sha256,
        chunks = b.chunks,
        distinct = b.distinct,
        written = b.written,
        shared = b.present.len(),
        compressed_bytes = b.compressed_bytes,
        mb_per_s = format!("{:.0}", r.size as f64 / 1e6 / b.seconds.max(1e-9)),
        index = %b.refs.index,
        "rootfs chunked"
    );
    Ok(b)
}

/// After the commit that names them: chunks again each rootfs whose
/// shared `.cacnk` blobs a GC removed between the presence check and the
/// commit (rare), so every chunk its map names is stored; makes again a
/// patch found missing the same way (the same inputs make the same bytes).
async fn recheck_shared(
    state: &StateStore,
    shared: &[(Rootfs, Vec<Digest>)],
    rootfs: &[Rootfs],
    replaced: Option<&Promotion>,
) -> Result<(), StackError> {
    let store = state.blobstore();
    for (r, present) in shared {
        let gone =
            crate::chunks::build::missing_after_commit(store.clone(), present.clone()).await?;
        if !gone.is_empty() {
            tracing::warn!(rootfs = %r.sha256, missing = gone.len(), "shared chunks collected meanwhile; writing them again");
            chunk_rootfs(store, r).await?;
        }
    }
    for r in rootfs {
        if let Some(p) = &r.patch
            && store
                .stat(&crate::store::blob_key(&p.blob))
                .await?
                .is_none()
        {
            tracing::warn!(rootfs = %r.sha256, patch = %p.blob, "rootfs patch collected meanwhile; making it again");
            let mut unpatched = r.clone();
            unpatched.patch = None;
            patch_from(store, replaced, &unpatched).await;
        }
    }
    Ok(())
}

/// Promotes an image for stack `name` (created if new): pins the
/// references, checks builder images as kpack would, flattens the rootfs
/// of every platform (once per manifest), then commits the promotion.
///
/// Errors: [`StackError::Invalid`] (bad reference, percentage, only one of
/// build/run image), [`StackError::NotFound`] (image not held),
/// [`StackError::Refused`] (builder images kpack would reject, with the
/// reason), [`StackError::Conflict`] (incomplete rollout), [`StackError::Image`].
pub async fn promote(
    state: &StateStore,
    name: &StackName,
    req: &PromoteRequest,
    who: &str,
) -> Result<Promoted, StackError> {
    let percent = req.rollout.unwrap_or(100);
    if percent > 100 {
        return Err(StackError::Invalid(format!(
            "rollout percentage {percent} is over 100"
        )));
    }
    let snap = state.snapshot().await?;
    let table = load_in(state, &snap).await?;
    let image = image::pin(state, &snap, &req.image).await?;
    let candidate = table.stacks.get(name).and_then(|s| {
        s.candidates
            .iter()
            .rev()
            .find(|c| c.image.digest == image.digest)
            .cloned()
    });
    let (build, run) = match (&req.build_image, &req.run_image) {
        (Some(b), Some(r)) => (
            Some(image::pin(state, &snap, b).await?),
            Some(image::pin(state, &snap, r).await?),
        ),
        (None, None) => match &candidate {
            Some(c) => (c.build_image.clone(), c.run_image.clone()),
            None => (None, None),
        },
        _ => {
            return Err(StackError::Invalid(
                "a builder stack needs both --build-image and --run-image".into(),
            ));
        }
    };
    let store = state.blobstore();
    let stack_id = match (&build, &run) {
        (Some(b), Some(r)) => {
            let bp = image::platforms(&**store, b).await?;
            let rp = image::platforms(&**store, r).await?;
            let expected = req
                .stack_id
                .clone()
                .or_else(|| table.stacks.get(name).and_then(|s| s.stack_id.clone()));
            Some(kpack::check(expected.as_deref(), &bp, &rp).map_err(StackError::Refused)?)
        }
        _ => None,
    };
    let platforms = image::platforms(&**store, &image).await?;
    let mut replaced = table.stacks.get(name).and_then(|s| s.active()).cloned();
    let (mut rootfs, shared) = rootfs_of(state, &table, &platforms, replaced.as_ref()).await?;
    let reason = req
        .reason
        .clone()
        .unwrap_or_else(|| format!("promote {image}"));
    let mut diff = req.diff.clone();
    let mut raced = 0;
    let (id, percent, commit) = loop {
        let input = PromotionInput {
            image: image.clone(),
            rootfs: rootfs.clone(),
            build_image: build.clone(),
            run_image: run.clone(),
            stack_id: stack_id.clone(),
            percent,
            max_in_flight: req.max_in_flight,
            description: req.description.clone(),
            reason: reason.clone(),
            diff: diff.clone(),
        };
        let (n, w, now) = (name.clone(), who.to_string(), now_rfc3339());
        let expect = replaced.as_ref().map(|p| p.id);
        let done = change(
            state,
            &format!("stack {name}: promote {image}: {reason}"),
            who,
            move |t| {
                // The patch and the diff were made against the promotion
                // this one replaces: another promotion committed meanwhile
                // (another process) means making them again.
                if t.stacks.get(&n).and_then(|s| s.active()).map(|p| p.id) != expect {
                    return Err(StackError::Conflict(RACED.into()));
                }
                let id = t.promote(&n, &input, &now, &w)?;
                Ok((id, t.get(&n)?.rollout.map_or(100, |r| r.percent)))
            },
        )
        .await;
        match done {
            Err(StackError::Conflict(m)) if m == RACED && raced < MAX_RACES => {
                raced += 1;
                let table = load(state).await?;
                replaced = table.stacks.get(name).and_then(|s| s.active()).cloned();
                for r in &mut rootfs {
                    r.patch = patch_from(store, replaced.as_ref(), r).await;
                }
                diff = crate::sbom::compare::promotion_diff(state, name, &req.image).await;
                tracing::info!(stack = %name, "another promotion landed first; patch and diff made again against it");
            }
            Err(StackError::Conflict(m)) if m == RACED => {
                return Err(StackError::Conflict(format!(
                    "stack {name}: other promotions landed first {MAX_RACES} times; try again"
                )));
            }
            Err(e) => return Err(e),
            Ok(((id, percent), commit)) => break (id, percent, commit),
        }
    };
    recheck_shared(state, &shared, &rootfs, replaced.as_ref()).await?;
    events::emit_logged(
        &**store,
        "stack.promoted",
        commit.generation,
        who,
        serde_json::json!({
            "stack": name,
            "promotion": id,
            "image": image,
            "percent": percent,
            "rootfs": rootfs,
            "reason": reason,
            "diff": diff,
        }),
    )
    .await;
    Ok(Promoted {
        promotion: id,
        image,
        rootfs,
        percent,
        generation: commit.generation,
    })
}

/// The conflict a promotion's commit reports when another promotion of the
/// stack landed after its patch and diff were made.
const RACED: &str = "raced by another promotion";

/// Times a promotion makes its patch and diff again after losing a race.
const MAX_RACES: u32 = 8;

/// Widens the rollout of `name` to `percent` (one root swap).
pub async fn rollout(
    state: &StateStore,
    name: &StackName,
    percent: u8,
    who: &str,
) -> Result<Commit, StackError> {
    let (n, w, now) = (name.clone(), who.to_string(), now_rfc3339());
    let ((), c) = change(
        state,
        &format!("stack {name}: rollout to {percent} %"),
        who,
        move |t| t.widen(&n, percent, &now, &w),
    )
    .await?;
    Ok(c)
}

/// Returns every cell of `name` to the previous promotion; returns its id.
pub async fn rollback(
    state: &StateStore,
    name: &StackName,
    reason: &str,
    who: &str,
) -> Result<(u64, Commit), StackError> {
    let (n, w, r, now) = (
        name.clone(),
        who.to_string(),
        reason.to_string(),
        now_rfc3339(),
    );
    let (to, c) = change(
        state,
        &format!("stack {name}: rollback: {reason}"),
        who,
        move |t| t.rollback(&n, &r, &now, &w),
    )
    .await?;
    let table = load(state).await?;
    let image = table.get(name)?.promotion(to).map(|p| p.image.clone());
    events::emit_logged(
        &**state.blobstore(),
        "stack.rolled_back",
        c.generation,
        who,
        serde_json::json!({ "stack": name, "promotion": to, "image": image, "reason": reason }),
    )
    .await;
    Ok((to, c))
}

/// Sets the state of `name`.
pub async fn set_state(
    state: &StateStore,
    name: &StackName,
    st: StackState,
    reason: &str,
    who: &str,
) -> Result<Commit, StackError> {
    let (n, w, r, now) = (
        name.clone(),
        who.to_string(),
        reason.to_string(),
        now_rfc3339(),
    );
    let ((), c) = change(
        state,
        &format!("stack {name}: state {}: {reason}", st.as_str()),
        who,
        move |t| t.set_state(&n, st, &r, &now, &w),
    )
    .await?;
    if c.changed {
        events::emit_logged(
            &**state.blobstore(),
            "stack.state_changed",
            c.generation,
            who,
            serde_json::json!({ "stack": name, "state": st.as_str(), "reason": reason }),
        )
        .await;
    }
    Ok(c)
}

/// Registers the custom stack `name` for `image` (`REPO:TAG` or
/// `REPO@DIGEST`, held by the registry) on behalf of `actor`, if `policy`
/// allows it and `scope` (the caller's repository prefixes) covers the
/// image's repository (one root swap). Returns the pinned image.
///
/// Errors: [`StackError::Denied`] (the policy, naming it, another owner, or
/// an image outside the caller's repositories), [`StackError::Conflict`] (a system stack of that name),
/// [`StackError::NotFound`] (image not held), [`StackError::Invalid`].
pub async fn register_custom(
    state: &StateStore,
    name: &StackName,
    image: &str,
    description: &str,
    actor: &Actor,
    policy: CustomPolicy,
    scope: &crate::registry::scope::RepositoryScope,
) -> Result<(ImageRef, Commit), StackError> {
    custom::authorize(policy, actor, name)?;
    let snap = state.snapshot().await?;
    let pinned = image::pin(state, &snap, image).await?;
    if !scope.covers(pinned.repository.as_str()) {
        return Err(StackError::Denied(format!(
            "custom stack {name}: image repository {} is outside the repositories {} may access",
            pinned.repository, actor.name
        )));
    }
    let entry = CustomStack {
        image: pinned.clone(),
        description: description.into(),
        owner: actor.name.clone(),
        time: now_rfc3339(),
    };
    let (n, admin) = (name.clone(), actor.admin);
    let ((), c) = change(
        state,
        &format!("stack {name}: register custom {pinned}"),
        &actor.name,
        move |t| t.register_custom(&n, entry.clone(), admin),
    )
    .await?;
    Ok((pinned, c))
}

/// Makes `name` the default stack.
pub async fn set_default(
    state: &StateStore,
    name: &StackName,
    who: &str,
) -> Result<Commit, StackError> {
    let (n, w, now) = (name.clone(), who.to_string(), now_rfc3339());
    let ((), c) = change(state, &format!("stack {name}: default"), who, move |t| {
        t.set_default(&n, &now, &w)
    })
    .await?;
    Ok(c)
}
