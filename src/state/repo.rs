//! One repository's state as a paged tree, and the read API the rooms use.
//!
//! Owns: the keys of a repository tree and [`Repository`], a handle on one
//! repository in one snapshot with lookups (tag, manifest, blob) and ordered
//! listings from a cursor (tags, referrers of a subject, manifests, blobs),
//! each reading O(log N) pages. Never writes: `commit` does.
//!
//! Keys of a repository tree (values are compact JSON):
//! - `t/<tag>` → the manifest digest (string),
//! - `m/<digest>` → its [`ManifestInfo`],
//! - `b/<digest>` → the linked blob's size in bytes,
//! - `r/<subject digest>/<referrer digest>` → `null`: the referrers index,
//!   one entry per manifest whose `subject` is that digest,
//! - `x/<manifest digest>/<tag>` → a [`super::TagMark`]: when the tag was
//!   set to this manifest and by which signed bundle (`null` when set
//!   before marks were kept): the tags of a manifest, so that deleting a manifest finds its
//!   tags without reading every tag, and retention knows each tag's age;
//! - `u/<manifest digest>` → since when the manifest has no tag, seconds
//!   since the Unix epoch (absent: tagged, or untagged before this was
//!   kept): what `gc --delete-untagged` measures against its grace period.
//!
//! Tags, digests and repository names never contain `/` after these
//! prefixes' own, and sort byte-wise, so `tags/list` order is key order.

use super::docs::ManifestInfo;
use super::memo::{Answer, Key, Kind};
use super::page::{self, Pages, Value};
use super::{Result, StateError};
use crate::digest::Digest;
use crate::names::Tag;

/// Sorts after every key with the same prefix (keys are printable ASCII).
pub(super) const END: char = '\u{7f}';

/// Key of a tag.
pub(super) fn tag_key(tag: &str) -> String {
    format!("t/{tag}")
}

/// Key of a manifest's info.
pub(super) fn manifest_key(digest: &Digest) -> String {
    format!("m/{digest}")
}

/// Key of a linked blob.
pub(super) fn blob_key(digest: &Digest) -> String {
    format!("b/{digest}")
}

/// Key of one referrer of `subject`.
pub(super) fn referrer_key(subject: &Digest, referrer: &Digest) -> String {
    format!("r/{subject}/{referrer}")
}

/// Key of one tag of a manifest (the reverse of [`tag_key`]).
pub(super) fn tagged_key(manifest: &Digest, tag: &str) -> String {
    format!("x/{manifest}/{tag}")
}

/// Key of the time a manifest lost its last tag.
pub(super) fn untagged_key(manifest: &Digest) -> String {
    format!("u/{manifest}")
}

/// One tag as retention sees it: its name, its manifest and when it was
/// set there (seconds since the Unix epoch; `None`: before push times
/// were kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagEntry {
    /// The tag.
    pub tag: Tag,
    /// The manifest it points at.
    pub manifest: Digest,
    /// When it was set to that manifest.
    pub pushed: Option<u64>,
    /// The bundle that set it (an import), if one did.
    pub bundle: Option<super::ops::BundleMark>,
}

/// The entries that describe a manifest recorded under `digest`.
pub(super) fn manifest_entries(
    digest: &Digest,
    info: &ManifestInfo,
) -> Result<Vec<(String, Value)>> {
    let mut out = vec![(manifest_key(digest), page::json_value(info)?)];
    if let Some(s) = &info.subject {
        out.push((referrer_key(s, digest), page::null()));
    }
    Ok(out)
}

/// The part of `key` after `prefix`, parsed.
fn suffix<T: std::str::FromStr>(key: &str, prefix: &str) -> Result<T> {
    key.strip_prefix(prefix)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| StateError::Corrupt {
            digest: "(repository page)".into(),
            cause: format!("bad key {key:?} under {prefix:?}"),
        })
}

/// One repository in one snapshot. Cheap to clone; every read goes through
/// the state's byte-bounded page cache.
#[derive(Clone)]
pub struct Repository {
    pages: Pages,
    /// The root page of the repository's tree.
    root: Digest,
}

impl Repository {
    pub(super) fn paged(pages: Pages, root: Digest) -> Repository {
        Repository { pages, root }
    }

    /// The root page of the repository's tree.
    pub fn root(&self) -> &Digest {
        &self.root
    }

    /// Entries `prefix<after>` (exclusive; from the start of `prefix` when
    /// `None`) up to the end of `prefix`, at most `limit`, as (key without
    /// the prefix, value).
    pub(super) async fn scan(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Value)>> {
        let root = &self.root;
        let from = match after {
            Some(a) => format!("{prefix}{a}\0"),
            None => prefix.to_string(),
        };
        let to = format!("{prefix}{END}");
        let mut out = self.pages.range(root, &from, &to, limit).await?;
        for (k, _) in &mut out {
            k.drain(..prefix.len());
        }
        Ok(out)
    }

    /// The answer for `key` in this repository's tree: from the memo
    /// ([`super::memo`]) or, the first time, the value under `full_key()`
    /// read from the pages, decoded with `decode`, and remembered.
    async fn memoized<F>(
        &self,
        key: Key<'_>,
        full_key: F,
        decode: fn(&Value) -> Result<Answer>,
    ) -> Result<Answer>
    where
        F: FnOnce() -> String,
    {
        if let Some(a) = self.pages.memo.get(&key) {
            return Ok(a);
        }
        // Boxed: a miss is rare, and its future (a page read) would
        // otherwise make every request's future larger (see `server::conn`).
        let answer = match Box::pin(self.pages.get(key.root, &full_key())).await? {
            Some(v) => decode(&v)?,
            None => Answer::Absent,
        };
        self.pages.memo.put(&key, answer.clone());
        Ok(answer)
    }

    /// The manifest digest tag `tag` points at.
    pub async fn tag(&self, tag: &Tag) -> Result<Option<Digest>> {
        let root = &self.root;
        let key = Key::text(root, Kind::Tag, tag.as_str());
        let decode = |v: &Value| page::digest_value(v).map(Answer::Digest);
        match self.memoized(key, || tag_key(tag.as_str()), decode).await? {
            Answer::Digest(d) => Ok(Some(d)),
            _ => Ok(None),
        }
    }

    /// What the manifest `digest` is, if it is recorded here.
    pub async fn manifest(&self, digest: &Digest) -> Result<Option<ManifestInfo>> {
        let root = &self.root;
        let key = Key::digest(root, Kind::Manifest, digest);
        let decode = |v: &Value| page::parse_value(v).map(Answer::Manifest);
        match self.memoized(key, || manifest_key(digest), decode).await? {
            Answer::Manifest(m) => Ok(Some(m)),
            _ => Ok(None),
        }
    }

    /// The size in bytes of the blob `digest`, if it is linked here.
    pub async fn blob(&self, digest: &Digest) -> Result<Option<u64>> {
        let root = &self.root;
        let key = Key::digest(root, Kind::Blob, digest);
        let decode = |v: &Value| page::parse_value(v).map(Answer::Size);
        match self.memoized(key, || blob_key(digest), decode).await? {
            Answer::Size(n) => Ok(Some(n)),
            _ => Ok(None),
        }
    }

    /// Whether `digest` may be served from here: a linked blob or a manifest.
    pub async fn is_linked(&self, digest: &Digest) -> Result<bool> {
        Ok(self.blob(digest).await?.is_some() || self.manifest(digest).await?.is_some())
    }

    /// Up to `limit` tags after `last` (exclusive; it need not exist), in
    /// byte-wise order, with the manifest each points at.
    pub async fn tags(&self, last: Option<&str>, limit: usize) -> Result<Vec<(Tag, Digest)>> {
        self.scan("t/", last, limit)
            .await?
            .into_iter()
            .map(|(t, v)| Ok((suffix(&t, "")?, page::digest_value(&v)?)))
            .collect()
    }

    /// Up to `limit` manifests whose `subject` is `subject`, after the
    /// referrer `last` (exclusive), sorted by digest, with their info.
    /// Reads only the referrers index, never every manifest.
    pub async fn referrers(
        &self,
        subject: &Digest,
        last: Option<&Digest>,
        limit: usize,
    ) -> Result<Vec<(Digest, ManifestInfo)>> {
        let prefix = format!("r/{subject}/");
        let last = last.map(|d| d.to_string());
        let mut out = Vec::new();
        for (k, _) in self.scan(&prefix, last.as_deref(), limit).await? {
            let digest: Digest = suffix(&k, "")?;
            let info = self
                .manifest(&digest)
                .await?
                .ok_or_else(|| StateError::Corrupt {
                    digest: digest.to_string(),
                    cause: "referrers index names a manifest that is not recorded".into(),
                })?;
            out.push((digest, info));
        }
        Ok(out)
    }

    /// Up to `limit` tags with their push times (see [`TagEntry`]), after
    /// (manifest, tag) `last` (exclusive), in manifest order.
    pub async fn tag_entries(
        &self,
        last: Option<(&Digest, &str)>,
        limit: usize,
    ) -> Result<Vec<TagEntry>> {
        let last = last.map(|(d, t)| format!("{d}/{t}"));
        self.scan("x/", last.as_deref(), limit)
            .await?
            .into_iter()
            .map(|(k, v)| {
                let (d, t) = k.split_once('/').ok_or_else(|| StateError::Corrupt {
                    digest: "(repository page)".into(),
                    cause: format!("bad key x/{k:?}"),
                })?;
                let mark = super::ops::TagMark::read(&v);
                Ok(TagEntry {
                    manifest: suffix(d, "")?,
                    tag: suffix(t, "")?,
                    pushed: mark.as_ref().map(|m| m.pushed),
                    bundle: mark.and_then(|m| m.bundle),
                })
            })
            .collect()
    }

    /// Every tag that points at `manifest`, sorted.
    pub async fn tags_of(&self, manifest: &Digest) -> Result<Vec<String>> {
        Ok(self
            .scan(&tagged_key(manifest, ""), None, usize::MAX)
            .await?
            .into_iter()
            .map(|(t, _)| t)
            .collect())
    }

    /// What is recorded with `tag` at `manifest` (when and by which
    /// bundle it was set), if the tag points there and a mark was kept.
    pub async fn tag_mark(&self, manifest: &Digest, tag: &str) -> Result<Option<super::TagMark>> {
        Ok(self
            .pages
            .get(&self.root, &tagged_key(manifest, tag))
            .await?
            .as_ref()
            .and_then(super::TagMark::read))
    }

    /// Since when `digest` has had no tag (seconds since the Unix epoch),
    /// when known.
    pub async fn untagged_since(&self, digest: &Digest) -> Result<Option<u64>> {
        match self.pages.get(&self.root, &untagged_key(digest)).await? {
            Some(v) => Ok(page::parse_value::<u64>(&v).ok()),
            None => Ok(None),
        }
    }

    /// Up to `limit` manifests after `last` (exclusive), sorted by digest.
    pub async fn manifests(
        &self,
        last: Option<&Digest>,
        limit: usize,
    ) -> Result<Vec<(Digest, ManifestInfo)>> {
        self.digests("m/", last, limit).await
    }

    /// Up to `limit` linked blobs after `last` (exclusive), sorted by
    /// digest, with their sizes in bytes.
    pub async fn blobs(&self, last: Option<&Digest>, limit: usize) -> Result<Vec<(Digest, u64)>> {
        self.digests("b/", last, limit).await
    }

    /// Up to `limit` entries `<prefix><digest>` after `last`, parsed.
    async fn digests<T: serde::de::DeserializeOwned>(
        &self,
        prefix: &str,
        last: Option<&Digest>,
        limit: usize,
    ) -> Result<Vec<(Digest, T)>> {
        let last = last.map(|d| d.to_string());
        self.scan(prefix, last.as_deref(), limit)
            .await?
            .into_iter()
            .map(|(d, v)| Ok((suffix(&d, "")?, page::parse_value(&v)?)))
            .collect()
    }
}
