//! The site's signature policy (`[[import.policy]]`,
//! [`crate::signatures::SitePolicy`]) over a verified bundle, before
//! anything is committed: every tagged image the bundle brings into a
//! repository a rule covers must carry, in the bundle (or already in the
//! store, for a delta), the cosign signature image `sha256-<hex>.sig` of
//! its repository, signed by one of the rule's keys. The first image that
//! fails refuses the whole bundle (409 over HTTP), naming it.

use std::collections::BTreeMap;

use anyhow::Result;

use super::plan::Refused;
use crate::bundle::format::{BundleDoc, ImageEntry};
use crate::signatures::{self, Found, Signatures, SitePolicy};
use crate::store::{self, Blobstore};

/// Checks every image of `doc` against `policy` (blobs read from `store`,
/// where the import has put them). Errors: [`Refused`] naming the image
/// and the cause; a store failure as itself.
pub(super) async fn check(
    store: &dyn Blobstore,
    doc: &BundleDoc,
    policy: &SitePolicy,
) -> Result<()> {
    if policy.is_empty() {
        return Ok(());
    }
    for img in doc.images.iter().filter(|i| is_subject(i)) {
        let mut rules = policy.rules_for(img.repository.as_str()).peekable();
        if rules.peek().is_none() {
            continue;
        }
        let manifest = store::get_verified(store, &img.digest).await?;
        for (each_platform, signers) in rules {
            let wanted =
                signatures::policy::to_sign(&img.digest, &manifest, each_platform, &img.absent)?;
            for digest in wanted {
                let found = signatures_of(store, doc, img, &digest).await?;
                if let Err(e) = signatures::check(&digest, signers, &found) {
                    let tag = img.tags.first().map(|t| t.to_string()).unwrap_or_default();
                    let which = if digest == img.digest {
                        format!("{}:{tag} ({digest})", img.repository)
                    } else {
                        format!(
                            "{}:{tag} ({}), platform manifest {digest}",
                            img.repository, img.digest
                        )
                    };
                    return Err(Refused(format!(
                        "{which} fails the site's signature policy: {e}; nothing imported"
                    ))
                    .into());
                }
            }
        }
    }
    Ok(())
}

/// A tagged image that is not itself a signature image.
fn is_subject(img: &ImageEntry) -> bool {
    !img.tags.is_empty() && !img.tags.iter().all(|t| is_signature_tag(&t.to_string()))
}

/// `sha256-<64 hex>.sig` (or another algorithm's).
fn is_signature_tag(tag: &str) -> bool {
    tag.strip_suffix(".sig")
        .and_then(|r| r.split_once('-'))
        .is_some_and(|(alg, hex)| {
            !alg.is_empty() && hex.len() >= 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// The signatures of `digest` the bundle carries in `img`'s repository,
/// read from the store: the signature image tagged `sha256-<hex>.sig`, and
/// the sigstore bundles of its referrers (untagged manifests whose subject
/// is `digest`).
async fn signatures_of(
    store: &dyn Blobstore,
    doc: &BundleDoc,
    img: &ImageEntry,
    digest: &crate::digest::Digest,
) -> Result<Found> {
    let tag = signatures::signature_tag(digest);
    let mut found = Found::default();
    if let Some(sig) = doc
        .images
        .iter()
        .find(|i| i.repository == img.repository && i.tags.iter().any(|t| t.to_string() == tag))
    {
        let manifest = store::get_verified(store, &sig.digest).await?;
        let mut payloads = BTreeMap::new();
        // A manifest that does not parse has no payloads; `check` names it.
        for l in signatures::payload_layers(&manifest).unwrap_or_default() {
            let bytes = store::get_verified(store, &l.digest).await?;
            payloads.insert(l.digest, bytes);
        }
        found.simple = Some(Signatures { manifest, payloads });
    }
    for r in doc
        .images
        .iter()
        .filter(|i| i.repository == img.repository && i.tags.is_empty())
    {
        let manifest = store::get_verified(store, &r.digest).await?;
        for l in signatures::sigstore::bundle_layers(&manifest, digest) {
            found
                .bundles
                .push(store::get_verified(store, &l.digest).await?);
        }
    }
    Ok(found)
}
