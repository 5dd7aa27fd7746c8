//! The state operations an import makes: each image's manifests walked
//! from the store and linked into its repository, and the bundle's stack
//! candidates for the stack table.

use super::*;

/// Walks an image's manifests in the store and returns the ops that link it.
/// `guard` goes with the tags of the image's root manifest.
pub(super) async fn image_ops(
    store: &dyn Blobstore,
    img: &ImageEntry,
    guard: &crate::state::TagGuard,
) -> Result<Vec<Op>> {
    let mut ops = Vec::new();
    let mut blobs = Vec::new();
    let mut stack = vec![(img.digest.clone(), img.media_type.clone(), img.size, true)];
    let mut seen = HashSet::new();
    while let Some((digest, media_type, size, is_root)) = stack.pop() {
        if !seen.insert(digest.clone()) {
            continue;
        }
        let bytes = store::get_verified(store, &digest).await.with_context(|| {
            format!(
                "image {}: manifest {digest} is neither in the bundle nor in the store",
                img.repository
            )
        })?;
        if bytes.len() as u64 != size {
            bail!(
                "manifest {digest}: descriptor says {size} bytes, content has {}",
                bytes.len()
            );
        }
        // The one manifest rule, with the media type it will be recorded
        // with: what a push of it must pass, and what gc and fsck read.
        let m = Manifest::read(&bytes, Some(&media_type))
            .with_context(|| format!("manifest {digest} ({media_type})"))?;
        for child in &m.manifests {
            if is_root && img.absent.contains(&child.digest) {
                // Left out on purpose (`platforms`): the index is kept whole, the child is absent.
                continue;
            }
            if oci::is_manifest_type(&child.media_type) {
                stack.push((
                    child.digest.clone(),
                    child.media_type.clone(),
                    child.size,
                    false,
                ));
            } else {
                blobs.push((child.digest.clone(), child.size));
            }
        }
        for b in m.blobs() {
            blobs.push((b.digest.clone(), b.size));
        }
        ops.push(Op::PutManifest {
            repo: img.repository.clone(),
            digest,
            info: ManifestInfo {
                media_type,
                size,
                subject: m.subject.as_ref().map(|s| s.digest.clone()),
                artifact_type: m.referrer_artifact_type(),
            },
            tags: if is_root {
                img.tags.clone()
            } else {
                Vec::new()
            },
            guard: guard.clone(),
        });
    }
    for (d, size) in &blobs {
        match store.stat(&blob_key(d)).await? {
            Some(s) if s == *size => {}
            _ => bail!(
                "image {}: blob {d} ({size} bytes) is neither in the bundle nor in the store",
                img.repository
            ),
        }
    }
    ops.insert(
        0,
        Op::LinkBlobs {
            repo: img.repository.clone(),
            blobs,
        },
    );
    Ok(ops)
}

/// The op recording the bundle's stack candidates (in the import's own
/// commit). Errors: a candidate names an image the bundle does not carry.
pub(super) fn stack_candidates(doc: &BundleDoc, who: &str, allow_downgrade: bool) -> Result<Op> {
    let carried = |r: &crate::stacks::ImageRef| {
        doc.images
            .iter()
            .any(|i| i.repository == r.repository && i.digest == r.digest)
    };
    let now = crate::state::now_rfc3339();
    let mut entries = Vec::new();
    for s in &doc.stacks {
        for r in [Some(&s.image), s.build_image.as_ref(), s.run_image.as_ref()]
            .into_iter()
            .flatten()
        {
            if !carried(r) {
                bail!(
                    "stack candidate {}: image {r} is not one of the bundle's images",
                    s.name
                );
            }
        }
        let candidate = crate::stacks::table::Candidate {
            image: s.image.clone(),
            build_image: s.build_image.clone(),
            run_image: s.run_image.clone(),
            bundle: doc.id.clone(),
            time: now.clone(),
            bundle_created: Some(doc.created.clone()),
        };
        entries.push((s.name.clone(), s.description.clone(), candidate));
    }
    Ok(crate::stacks::ops::candidates_op(
        entries,
        who.to_string(),
        allow_downgrade,
    ))
}
