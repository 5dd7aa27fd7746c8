//! `airlock backup` and `airlock restore` (issue 42 §2): a consistent copy
//! of the current generation, and that generation made current again in
//! an empty or an existing store. The BOSH job's bbr scripts call them.
//!
//! The artifact is a directory:
//! - `backup.json`: what it holds ([`BackupManifest`]);
//! - `store/`: a filesystem store (the layout of [`crate::store`]) whose
//!   `refs/root` names the generation backed up, holding its metadata
//!   documents (state document, pages, room documents, its changes), its
//!   manifests and, from a filesystem store, every blob it reaches (layers,
//!   configs, a stack's rootfs, chunk maps and chunks, torcx archives), and
//!   nothing else; the small objects kept beside generations
//!   ([`KEYED_PREFIXES`]: the pull record, cells' reports, rollout series)
//!   are copied as they are. From an S3 store only the metadata and
//!   manifests are copied (the bucket has its own backup: versioning or
//!   replication); `restore` then checks that the bucket still holds every
//!   blob the generation reaches before it commits.
//!
//! Consistency needs no lock: generations never change, and the backup
//! copies the one current when it starts. The write lock
//! ([`super::write_lock`]) is bbr's contract (and keeps gc from sweeping
//! what the backup is reading when a newer generation would otherwise
//! replace it meanwhile).
//!
//! Every copied object is verified against its digest as it streams; a
//! restore writes nothing to `refs/root` until every object the generation
//! reaches is in the target store, so a failed restore changes no
//! generation (it may leave unreferenced blobs, which gc removes).

use std::collections::HashSet;
use std::path::Path;

use anyhow::{Context, Result, bail};
use bytes::Bytes;

use crate::digest::{Digest, Hasher};
use crate::state::walk::Reached;
use crate::state::{StateDoc, StateStore, now_rfc3339};
use crate::store::{self, Blobstore, StoreError};

/// The kind of [`BackupManifest`].
pub const KIND: &str = "airlock.backup.v1";

/// The artifact's description file.
pub const MANIFEST_FILE: &str = "backup.json";

/// The artifact's store directory.
pub const STORE_DIR: &str = "store";

/// Small objects kept beside generations, copied as they are.
pub const KEYED_PREFIXES: &[&str] = &["pulls/", "stacks/cells/", "ui/rollout/"];

/// `backup.json`: what one backup holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BackupManifest {
    /// [`KIND`].
    pub kind: String,
    /// The generation backed up.
    pub generation: u64,
    /// Its state document.
    pub state: Digest,
    /// When that generation was committed (RFC 3339 UTC).
    pub committed: String,
    /// When the backup was taken (RFC 3339 UTC).
    pub taken: String,
    /// The store it was taken from (`file:///…`, `s3://…`).
    pub source: String,
    /// The airlock that wrote it (`airlock 0.1.0`).
    pub written_by: String,
    /// Whether the blobs the generation reaches are in the artifact
    /// (filesystem stores) or only its metadata and manifests (S3).
    pub blobs: bool,
    /// Metadata documents and manifests copied.
    pub documents: u64,
    /// Blobs copied (0 when `blobs` is false).
    pub blob_count: u64,
    /// Bytes of everything copied.
    pub bytes: u64,
    /// Small objects copied ([`KEYED_PREFIXES`]).
    pub keyed: u64,
}

impl std::fmt::Display for BackupManifest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "backed up generation {} ({}) of {}: {} documents and manifests, {} blobs{}, {} other objects, {}",
            self.generation,
            self.state,
            self.source,
            self.documents,
            self.blob_count,
            if self.blobs {
                ""
            } else {
                " (metadata only: the bucket keeps the blobs)"
            },
            self.keyed,
            crate::config::format_size(self.bytes)
        )
    }
}

/// What a generation reaches, split by what a metadata-only backup copies.
#[derive(Default)]
struct Reach {
    /// State document, pages, room documents, changes (with their second
    /// copies on a store that keeps them).
    metadata: Vec<Digest>,
    /// Manifests and indexes.
    manifests: Vec<Digest>,
    /// Configs, layers and the blobs rooms keep (rootfs, chunks, archives).
    blobs: Vec<Digest>,
}

/// Everything generation `digest` reaches. `missing_ok`: a chunk map that
/// is absent adds nothing (a metadata-only artifact). Errors: the
/// generation is damaged (a walk problem), the store failed.
async fn reach(
    state: &StateStore,
    digest: &Digest,
    doc: &StateDoc,
    missing_ok: bool,
) -> Result<Reach> {
    let mut out = Reach::default();
    let mut seen = HashSet::new();
    let problems = state
        .walk(digest, &mut |r: Reached| {
            let fresh = seen.insert(r.digest().clone());
            match r {
                Reached::Blob(d) if fresh => out.blobs.push(d),
                Reached::Document(d) if fresh => out.metadata.push(d),
                Reached::Manifest(d) if fresh => out.manifests.push(d),
                _ => {}
            }
            fresh
        })
        .await?;
    if let Some(p) = problems.first() {
        bail!(
            "generation {} is damaged: {p} ({} problems); run `airlock fsck --repair` first",
            doc.generation,
            problems.len()
        );
    }
    if let Some(c) = &doc.changes
        && seen.insert(c.clone())
    {
        out.metadata.push(c.clone());
    }
    let mut maps = HashSet::new();
    for (name, d) in &doc.documents {
        let bytes = store::get_verified(&**state.blobstore(), d)
            .await
            .with_context(|| format!("room document {name} {d}"))?;
        for b in super::rooms::kept_blobs(&**state.blobstore(), name, &bytes, &mut maps, missing_ok)
            .await
            .map_err(anyhow::Error::msg)?
        {
            if seen.insert(b.clone()) {
                out.blobs.push(b);
            }
        }
    }
    Ok(out)
}

/// Copies the blob `digest` from `from` to `to` unless `to` holds it
/// intact (re-hashed: a damaged one is replaced by the verified copy),
/// verifying it as it streams; returns the bytes copied (0: present).
/// Errors: `NotFound` when `from` lacks it, a digest mismatch (the source
/// is damaged; nothing is written), the stores failed.
async fn copy_blob(from: &dyn Blobstore, to: &dyn Blobstore, digest: &Digest) -> Result<u64> {
    use tokio::io::AsyncReadExt;
    let key = store::blob_key(digest);
    if to.stat(&key).await?.is_some() {
        match hash_of(to, &key, digest).await {
            Ok(actual) if &actual == digest => return Ok(0),
            Ok(actual) => {
                tracing::warn!(%digest, %actual, "damaged in the target: replaced by the verified copy")
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                tracing::warn!(%digest, error = %e, "unreadable in the target: replaced by the verified copy")
            }
        }
    }
    let mut r = from.read(&key, None).await?;
    let mut w = to.writer(&key).await?;
    let mut hasher = Hasher::new(digest.algorithm());
    let mut buf = vec![0; 256 << 10];
    let mut n = 0u64;
    loop {
        let got = r.read(&mut buf).await?;
        if got == 0 {
            break;
        }
        hasher.update(&buf[..got]);
        n += got as u64;
        w.write(Bytes::copy_from_slice(&buf[..got])).await?;
    }
    let actual = hasher.finish();
    if &actual != digest {
        w.cancel().await?;
        bail!(
            "blob {digest} is damaged in the source (its content hashes to {actual}): run `airlock fsck --repair` there"
        );
    }
    w.commit().await?;
    Ok(n)
}

/// The digest (of `digest`'s algorithm) of what `store` holds at `key`,
/// read whole through the store. Errors: the store failed, `NotFound`.
async fn hash_of(store: &dyn Blobstore, key: &str, digest: &Digest) -> Result<Digest> {
    use tokio::io::AsyncReadExt;
    let mut r = store.read(key, None).await?;
    let mut hasher = Hasher::new(digest.algorithm());
    let mut buf = vec![0; 256 << 10];
    loop {
        let got = r.read(&mut buf).await?;
        if got == 0 {
            return Ok(hasher.finish());
        }
        hasher.update(&buf[..got]);
    }
}

/// Copies the objects under [`KEYED_PREFIXES`] that `to` lacks (or, for a
/// pull record, holds damaged); returns (objects, bytes). A pull record
/// carries its own checksum: it is copied only as one that passes it
/// (from its second copy when the object is damaged) and refused
/// otherwise, never written damaged.
///
/// Errors: a pull record of `from` is damaged with no good copy (naming
/// it); the stores failed.
async fn copy_keyed(from: &dyn Blobstore, to: &dyn Blobstore) -> Result<(u64, u64)> {
    use crate::state::pulls;
    let (mut count, mut bytes) = (0, 0);
    for prefix in KEYED_PREFIXES {
        for key in from.list(prefix).await? {
            let pull = key.starts_with(pulls::PREFIX);
            if to.stat(&key).await?.is_some()
                && (!pull || pulls::read_object(to, &key).await.is_ok())
            {
                continue;
            }
            if pull {
                let record = match pulls::read_object(from, &key).await {
                    Ok(r) => r,
                    Err(StoreError::NotFound(_)) => continue,
                    Err(e) => {
                        bail!(
                            "pull record {key} is damaged and has no good copy ({e}): nothing was committed; remove it from the backup to restore without it"
                        )
                    }
                };
                let data = record.to_bytes();
                bytes += data.len() as u64;
                // With its second copy where the target keeps copies.
                pulls::write_object(to, &key, &record).await?;
                count += 1;
                continue;
            }
            let data = match store::read_all(from, &key).await {
                Ok(d) => d,
                // Folded away by a replica meanwhile.
                Err(StoreError::NotFound(_)) => continue,
                Err(e) => return Err(e.into()),
            };
            bytes += data.len() as u64;
            let mut w = to.writer(&key).await?;
            w.write(Bytes::from(data)).await?;
            w.commit().await?;
            count += 1;
        }
    }
    Ok((count, bytes))
}

/// Opens (creating) the artifact store `dir/store`: one copy of metadata.
async fn artifact_store(dir: &Path, create: bool) -> Result<store::OpenedStore> {
    let url = store::StoreUrl::File(dir.join(STORE_DIR));
    store::open(
        &url,
        &store::s3::S3Settings::new("", ""),
        store::space::FreeSpaceFloor::Default,
        Some(1),
        create,
    )
    .await
    .with_context(|| format!("opening the backup store {}", dir.join(STORE_DIR).display()))
}

/// Backs up the current generation of `state` (the store at `source`)
/// into `dir` (created; it must be empty or absent), copying blobs when
/// `with_blobs`; `progress` is called with the bytes of each object
/// copied.
///
/// Errors: the store is empty, `dir` is not empty, the current generation
/// is damaged (run `airlock fsck --repair`), an object is damaged in the
/// source, the stores failed.
pub async fn backup(
    state: &StateStore,
    source: &str,
    dir: &Path,
    with_blobs: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<BackupManifest> {
    if dir.join(MANIFEST_FILE).exists() || dir.join(STORE_DIR).exists() {
        bail!(
            "{} already holds a backup: back up into an empty directory",
            dir.display()
        );
    }
    let Some(digest) = state.root_digest().await? else {
        bail!("the store {source} is empty: nothing to back up");
    };
    let doc = state.state_doc(&digest).await?;
    let reach = reach(state, &digest, &doc, false).await?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let artifact = artifact_store(dir, true).await?;
    let (from, to) = (&**state.blobstore(), &*artifact.blobstore());
    let mut manifest = BackupManifest {
        kind: KIND.into(),
        generation: doc.generation,
        state: digest.clone(),
        committed: doc.time.clone(),
        taken: now_rfc3339(),
        source: source.to_string(),
        written_by: format!("airlock {}", env!("CARGO_PKG_VERSION")),
        blobs: with_blobs,
        documents: 0,
        blob_count: 0,
        bytes: 0,
        keyed: 0,
    };
    for d in reach.metadata.iter().chain(&reach.manifests) {
        match copy_blob(from, to, d).await {
            Ok(n) => {
                manifest.documents += 1;
                manifest.bytes += n;
                progress(n);
            }
            // A dangling `subject` (allowed by the image-spec): nothing to copy.
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e.context(format!("copying {d}"))),
        }
    }
    if with_blobs {
        for d in &reach.blobs {
            let n = copy_blob(from, to, d)
                .await
                .with_context(|| format!("copying blob {d}"))?;
            manifest.blob_count += 1;
            manifest.bytes += n;
            progress(n);
        }
    }
    let (keyed, bytes) = copy_keyed(from, to).await?;
    manifest.keyed = keyed;
    manifest.bytes += bytes;
    to.sync().await?;
    if !to.swap_root(None, &digest.to_string()).await? {
        bail!("the backup store's root was written meanwhile");
    }
    write_manifest(dir, &manifest)?;
    tracing::info!(generation = doc.generation, %digest, blobs = manifest.blob_count, bytes = manifest.bytes, "backup written");
    Ok(manifest)
}

/// Writes `dir/backup.json` (temporary file, fsync, rename): last, so a
/// directory holding it holds a whole backup.
fn write_manifest(dir: &Path, manifest: &BackupManifest) -> Result<()> {
    use std::io::Write;
    let path = dir.join(MANIFEST_FILE);
    let tmp = dir.join(format!("{MANIFEST_FILE}.tmp"));
    let mut f =
        std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(&serde_json::to_vec_pretty(manifest)?)?;
    f.write_all(b"\n")?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

fn is_not_found(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref(), Some(StoreError::NotFound(_)))
}

/// What [`restore`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Restored {
    /// The backup restored.
    pub backup: BackupManifest,
    /// The generation committed (the backed-up one, renumbered after the
    /// target's newest).
    pub generation: u64,
    /// Its state document.
    pub digest: Digest,
    /// Objects copied into the target (those it lacked).
    pub copied: u64,
    /// Bytes copied.
    pub bytes: u64,
}

impl std::fmt::Display for Restored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "restored generation {} (backed up {} from {}) as generation {} ({}); {} objects copied, {}",
            self.backup.generation,
            self.backup.taken,
            self.backup.source,
            self.generation,
            self.digest,
            self.copied,
            crate::config::format_size(self.bytes)
        )
    }
}

/// Reads `dir/backup.json`. Errors: absent, unreadable, or of another kind.
pub fn read_manifest(dir: &Path) -> Result<BackupManifest> {
    let path = dir.join(MANIFEST_FILE);
    let bytes =
        std::fs::read(&path).with_context(|| format!("{} is not a backup", dir.display()))?;
    let m: BackupManifest = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a backup description", path.display()))?;
    if m.kind != KIND {
        bail!("{}: kind {:?}, expected {KIND}", path.display(), m.kind);
    }
    Ok(m)
}

/// Restores the backup in `dir` into `target` (empty or not): copies what
/// the target lacks, checks that the target then holds everything the
/// generation reaches, and commits it as a new generation (parent: the
/// backed-up one; history says "restored from the backup …"); `who` is
/// recorded. `progress` as for [`backup`].
///
/// Errors: `dir` is not a backup; an object is damaged; (metadata-only
/// backups) the target lacks blobs the generation reaches, naming the
/// first ones; the stores failed. Nothing is committed then.
pub async fn restore(
    target: &StateStore,
    dir: &Path,
    who: &str,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Restored> {
    let manifest = read_manifest(dir)?;
    let artifact = artifact_store(dir, false).await?;
    let from_state = StateStore::new(artifact.blobstore());
    let Some(digest) = from_state.root_digest().await? else {
        bail!("{}: the backup store has no root", dir.display());
    };
    if digest != manifest.state {
        bail!(
            "{}: the backup store's root {digest} is not the generation backup.json names ({})",
            dir.display(),
            manifest.state
        );
    }
    let (from, to) = (&*artifact.blobstore(), &**target.blobstore());
    let (mut copied, mut bytes) = (0, 0);
    for prefix in store::fan_prefixes() {
        for key in from.list(&prefix).await? {
            let Some(d) = store::verify::blob_digest(&key) else {
                continue;
            };
            let n = copy_blob(from, to, &d)
                .await
                .with_context(|| format!("restoring {d}"))?;
            if n > 0 {
                copied += 1;
                bytes += n;
                progress(n);
            }
        }
    }
    let (keyed, keyed_bytes) = copy_keyed(from, to).await?;
    copied += keyed;
    bytes += keyed_bytes;
    // Everything the generation reaches must now be in the target.
    let doc = target.state_doc(&digest).await?;
    let reach = reach(target, &digest, &doc, false).await?;
    let mut missing = Vec::new();
    for d in &reach.blobs {
        if to.stat(&store::blob_key(d)).await?.is_none() {
            missing.push(d.to_string());
        }
    }
    if !missing.is_empty() {
        bail!(
            "the target lacks {} blobs generation {} reaches (first: {}){}; nothing was committed",
            missing.len(),
            doc.generation,
            missing[..missing.len().min(3)].join(", "),
            if manifest.blobs {
                ""
            } else {
                ": this backup holds metadata only; restore the bucket's blobs from its own backup first"
            }
        );
    }
    if to.metadata_copies() >= 2 {
        let mut docs = Vec::with_capacity(reach.metadata.len());
        for d in &reach.metadata {
            docs.push((d.clone(), Bytes::from(store::get_verified(to, d).await?)));
        }
        store::copies::ensure(to, &docs).await?;
    }
    to.sync().await?;
    for _ in 0..50 {
        let root = to.read_root().await?;
        let newest = match target.root_digest().await {
            Ok(Some(d)) => target.state_doc(&d).await.map_or(0, |c| c.generation),
            _ => 0,
        };
        let next = StateDoc {
            kind: doc.kind.clone(),
            generation: newest.max(doc.generation) + 1,
            parent: Some(digest.clone()),
            time: now_rfc3339(),
            reason: format!(
                "restored from the backup of generation {} (committed {}, backed up {} from {})",
                doc.generation, doc.time, manifest.taken, manifest.source
            ),
            who: who.to_string(),
            address: None,
            repositories: doc.repositories.clone(),
            documents: doc.documents.clone(),
            changes: None,
        };
        let text = serde_json::to_vec(&next)?;
        let new = store::put_metadata(to, &text).await?;
        to.sync().await?;
        if to.swap_root(root.as_ref(), &new.to_string()).await? {
            target.forget_root();
            tracing::info!(
                restored = doc.generation,
                generation = next.generation,
                "backup restored"
            );
            return Ok(Restored {
                backup: manifest,
                generation: next.generation,
                digest: new,
                copied,
                bytes,
            });
        }
    }
    bail!("the state root kept changing; restore gave up after 50 attempts (nothing was committed)")
}
