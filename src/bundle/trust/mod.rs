//! The site's trust document (issue 41 §3): which keys may sign bundles
//! that touch which repositories, stacks, torcx remotes and feeds, how many
//! of them must sign, and which keys may replace the document. TUF's roles
//! (The Update Framework specification §2.1 roles, §4 document formats:
//! thresholds, versions, expiry, a new root signed by the old one's
//! threshold) over OpenPGP keys and cleartext signatures.
//!
//! Owns: the document's format and rules ([`TrustDoc`]: parse, check a
//! replacement, authorize a bundle) and the [`Verifier`] every import and
//! `bundle verify` uses: the flat keyring, or the trust document the site
//! holds in its state ([`site`]). The signatures themselves are
//! [`super::sign`]'s.
//!
//! A trust document is JSON, cleartext-signed by (a threshold of) its root
//! keys:
//!
//! ```json
//! {
//!   "format": "airlock-trust/v1",
//!   "version": 1,
//!   "expires": "2027-12-01T00:00:00Z",
//!   "keys": { "<FINGERPRINT>": "-----BEGIN PGP PUBLIC KEY BLOCK-----..." },
//!   "root": { "keys": ["<FPR>", "<FPR>", "<FPR>"], "threshold": 2 },
//!   "roles": [
//!     { "name": "apps", "keys": ["<FPR>"], "threshold": 1,
//!       "repositories": ["apps/**"] },
//!     { "name": "release", "keys": ["<FPR>", "<FPR>", "<FPR>"], "threshold": 2,
//!       "repositories": ["stacks/**"], "stacks": ["*"], "torcx": ["*"], "feeds": ["*"] }
//!   ]
//! }
//! ```
//!
//! Patterns are [`crate::names::glob_match`] globs (`*` within a path
//! segment, `**` across). A bundle is let in when every entry it touches
//! (each image's repository, each stack candidate, each torcx remote of its
//! addons and contents, each feed) is covered by some role whose threshold
//! of distinct keys signed the bundle; otherwise it is refused as a whole,
//! naming the first entry that is not.

pub mod site;

use std::collections::{BTreeMap, HashSet};

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::format::BundleDoc;
use super::sign::{Keyring, SignError, Verified};

/// Largest trust document read (a file for `airlock import`, a body for
/// `POST /admin/v1/trust`), in bytes.
pub const MAX_DOCUMENT: u64 = 4 << 20;

pub use site::{Checked, DOCUMENT, Installed, Stored, check, guard_op, install, load, verifier};

/// The `format` of a trust document.
pub const FORMAT: &str = "airlock-trust/v1";

/// Refusals, one line each.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    /// The text is not a valid trust document (JSON shape, unknown keys,
    /// thresholds, patterns, a key that does not match its fingerprint).
    #[error("trust document: {0}")]
    Invalid(String),
    /// A signature check failed (no signature by a key that counts, a bad
    /// signature).
    #[error("trust document: {0}")]
    Signature(#[from] SignError),
    /// Fewer distinct keys of a threshold signed than it needs.
    #[error("{0}")]
    Threshold(String),
    /// A replacement that does not move the version forward.
    #[error("{0}")]
    Version(String),
    /// A bundle touches an entry no role covers, or that its signers may not sign.
    #[error("{0}")]
    Scope(String),
    /// The site's trust document is past its `expires`.
    #[error("{0}")]
    Expired(String),
    /// Neither a trust document nor a keyring to check signatures with.
    #[error("{0}")]
    NoKeys(String),
}

/// A set of keys and how many of them must sign.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Threshold {
    /// Primary key fingerprints (uppercase hex), each a key of [`TrustDoc::keys`].
    pub keys: Vec<String>,
    /// Distinct keys of `keys` that must sign (1 ..= `keys.len()`).
    pub threshold: usize,
}

/// Who may sign bundles touching what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustRole {
    /// A name for messages and history (unique in the document).
    pub name: String,
    /// Primary key fingerprints (uppercase hex), each a key of [`TrustDoc::keys`].
    pub keys: Vec<String>,
    /// Distinct keys of `keys` that must sign a bundle (1 ..= `keys.len()`).
    pub threshold: usize,
    /// Repository globs its bundles may write.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repositories: Vec<String>,
    /// Stack name globs its bundles may carry candidates of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stacks: Vec<String>,
    /// torcx remote globs its bundles may carry addons and contents of.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub torcx: Vec<String>,
    /// Feed name globs its bundles may carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub feeds: Vec<String>,
}

/// A trust document (see the module docs), checked by [`TrustDoc::parse`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustDoc {
    /// [`FORMAT`].
    pub format: String,
    /// Starts at 1; each replacement has a higher one.
    pub version: u64,
    /// RFC 3339; past it the site imports no bundle until a newer document
    /// comes. Absent: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<String>,
    /// Fingerprint (uppercase hex) → the armored public key.
    pub keys: BTreeMap<String, String>,
    /// Who may sign the next trust document.
    pub root: Threshold,
    /// Who may sign bundles.
    pub roles: Vec<TrustRole>,
}

impl TrustDoc {
    /// One line for `airlock status` and the console: `version N (root T
    /// of K, R roles, K keys[, expires …])`.
    pub fn summary(&self) -> String {
        let expires = self
            .expires
            .as_deref()
            .map(|e| format!(", expires {e}"))
            .unwrap_or_default();
        format!(
            "version {} (root {} of {}, {} roles, {} keys{expires})",
            self.version,
            self.root.threshold,
            self.root.keys.len(),
            self.roles.len(),
            self.keys.len()
        )
    }
}

/// The kinds of entries a bundle touches, as roles name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An image's repository.
    Repository,
    /// A stack candidate's stack name.
    Stack,
    /// A torcx addon's or contents' remote.
    Torcx,
    /// A feed's name.
    Feed,
}

impl Kind {
    fn word(self) -> &'static str {
        match self {
            Kind::Repository => "repository",
            Kind::Stack => "stack",
            Kind::Torcx => "torcx remote",
            Kind::Feed => "feed",
        }
    }

    fn patterns(self, role: &TrustRole) -> &[String] {
        match self {
            Kind::Repository => &role.repositories,
            Kind::Stack => &role.stacks,
            Kind::Torcx => &role.torcx,
            Kind::Feed => &role.feeds,
        }
    }
}

impl TrustDoc {
    /// Parses and checks `text` (the signed text, JSON): the format, a
    /// version ≥ 1, `expires` RFC 3339, each key armored and one key whose
    /// primary fingerprint is its name, every fingerprint named by `root`
    /// and `roles` in `keys` and none twice in one list, thresholds of 1 up
    /// to their keys, unique non-empty role names, and each role with at
    /// least one pattern.
    ///
    /// Errors: [`TrustError::Invalid`] naming the field.
    pub fn parse(text: &str) -> Result<TrustDoc, TrustError> {
        let doc: TrustDoc = serde_json::from_str(text)
            .map_err(|e| TrustError::Invalid(format!("not a trust document: {e}")))?;
        doc.check()?;
        Ok(doc)
    }

    fn check(&self) -> Result<(), TrustError> {
        let bad = |m: String| Err(TrustError::Invalid(m));
        if self.format != FORMAT {
            return bad(format!("format {:?}, expected {FORMAT:?}", self.format));
        }
        if self.version == 0 {
            return bad("version must be 1 or more".into());
        }
        if let Some(e) = &self.expires
            && OffsetDateTime::parse(e, &Rfc3339).is_err()
        {
            return bad(format!("expires {e:?} is not an RFC 3339 time"));
        }
        for (fpr, armored) in &self.keys {
            let ring = Keyring::from_armored(armored)
                .map_err(|e| TrustError::Invalid(format!("keys.{fpr}: {e}")))?;
            if ring.fingerprints() != [fpr.clone()] {
                return bad(format!(
                    "keys.{fpr}: holds key(s) {}, expected exactly the key named",
                    ring.fingerprints().join(", ")
                ));
            }
        }
        self.check_threshold("root", &self.root.keys, self.root.threshold)?;
        let mut names = HashSet::new();
        for role in &self.roles {
            let at = format!("roles.{}", role.name);
            if role.name.trim().is_empty() {
                return bad("a role has an empty name".into());
            }
            if !names.insert(role.name.as_str()) {
                return bad(format!("{at}: the name is used twice"));
            }
            self.check_threshold(&at, &role.keys, role.threshold)?;
            let patterns = [&role.repositories, &role.stacks, &role.torcx, &role.feeds];
            if patterns.iter().all(|p| p.is_empty()) {
                return bad(format!(
                    "{at}: names no repositories, stacks, torcx or feeds"
                ));
            }
            if let Some(p) = patterns
                .iter()
                .flat_map(|p| p.iter())
                .find(|p| p.is_empty())
            {
                return bad(format!("{at}: an empty pattern {p:?}"));
            }
        }
        Ok(())
    }

    fn check_threshold(
        &self,
        at: &str,
        keys: &[String],
        threshold: usize,
    ) -> Result<(), TrustError> {
        let bad = |m: String| Err(TrustError::Invalid(m));
        let mut seen = HashSet::new();
        for k in keys {
            if !self.keys.contains_key(k) {
                return bad(format!("{at}: key {k} is not in keys"));
            }
            if !seen.insert(k) {
                return bad(format!("{at}: key {k} is listed twice"));
            }
        }
        if threshold == 0 || threshold > keys.len() {
            return bad(format!(
                "{at}: threshold {threshold} must be from 1 to its {} keys",
                keys.len()
            ));
        }
        Ok(())
    }

    /// Every key of the document as one keyring (what bundle and trust
    /// signatures are checked against).
    ///
    /// Errors: [`TrustError::Invalid`] (not after [`TrustDoc::parse`]).
    pub fn keyring(&self) -> Result<Keyring, TrustError> {
        let all: Vec<&str> = self.keys.values().map(String::as_str).collect();
        Keyring::from_armored(&all.join("\n"))
            .map_err(|e| TrustError::Invalid(format!("keys: {e}")))
    }

    /// Whether the document is past its `expires` at `now`: the one-line
    /// refusal when it is.
    pub fn check_expiry(&self, now: OffsetDateTime) -> Result<(), TrustError> {
        let Some(e) = &self.expires else {
            return Ok(());
        };
        match OffsetDateTime::parse(e, &Rfc3339) {
            Ok(at) if now < at => Ok(()),
            _ => Err(TrustError::Expired(format!(
                "the site's trust document (version {}) expired at {e}; import a newer one signed by its root keys; nothing imported",
                self.version
            ))),
        }
    }

    /// Verifies `armored`, a signed trust document meant to follow `self`
    /// (`None`: the first one a site installs), and returns it.
    ///
    /// The rules (TUF §5.3.4): the new document is valid
    /// ([`TrustDoc::parse`]); a threshold of its own root keys signed it;
    /// with a current document, a threshold of the current root keys
    /// signed it too and its version is higher (a key the new document
    /// removes thus cannot block a rotation the others agree on, and an
    /// old document cannot be replayed).
    ///
    /// Errors: [`TrustError::Signature`], [`TrustError::Threshold`]
    /// (naming the keys that signed and the ones it needs),
    /// [`TrustError::Version`], [`TrustError::Invalid`].
    pub fn check_successor(
        current: Option<&TrustDoc>,
        armored: &str,
    ) -> Result<(TrustDoc, Vec<String>), TrustError> {
        let text = super::sign::unverified_text(armored)?;
        let new = TrustDoc::parse(&text)?;
        let own = new.keyring()?.verify_cleartext(armored)?;
        let mut signers = own.signers.clone();
        count("its own root keys", &new.root, &own)?;
        if let Some(cur) = current {
            if new.version <= cur.version {
                return Err(TrustError::Version(format!(
                    "trust document version {} does not follow the site's version {}; nothing changed",
                    new.version, cur.version
                )));
            }
            let theirs = cur.keyring()?.verify_cleartext(armored).map_err(|e| {
                TrustError::Threshold(format!(
                    "trust document version {}: no signature by the current (version {}) keys: {e}",
                    new.version, cur.version
                ))
            })?;
            count(
                &format!("the root keys of version {}", cur.version),
                &cur.root,
                &theirs,
            )?;
            for s in theirs.signers {
                if !signers.contains(&s) {
                    signers.push(s);
                }
            }
        }
        Ok((new, signers))
    }

    /// Whether `signers` (distinct primary fingerprints whose signatures
    /// verified) may bring in everything `bundle` touches.
    ///
    /// Errors: [`TrustError::Scope`] naming the first entry (in document
    /// order: repositories, stacks, torcx remotes, feeds) that no role
    /// covers, or whose roles' thresholds the signers do not meet.
    pub fn authorize(&self, bundle: &BundleDoc, signers: &[String]) -> Result<(), TrustError> {
        for (kind, entry) in touched(bundle) {
            let roles: Vec<&TrustRole> = self
                .roles
                .iter()
                .filter(|r| {
                    kind.patterns(r)
                        .iter()
                        .any(|p| crate::names::glob_match(p, &entry))
                })
                .collect();
            if roles.is_empty() {
                return Err(TrustError::Scope(format!(
                    "bundle {} touches {} {entry}, which no role of the site's trust document (version {}) covers; nothing imported",
                    bundle.id,
                    kind.word(),
                    self.version
                )));
            }
            if roles
                .iter()
                .any(|r| met(&r.keys, r.threshold, signers).is_ok())
            {
                continue;
            }
            let needs: Vec<String> = roles
                .iter()
                .map(|r| {
                    format!(
                        "role {} needs {} of {}",
                        r.name,
                        r.threshold,
                        short_list(&r.keys)
                    )
                })
                .collect();
            return Err(TrustError::Scope(format!(
                "bundle {} touches {} {entry}: {}; it is signed by {}; nothing imported",
                bundle.id,
                kind.word(),
                needs.join(", or "),
                short_list(signers)
            )));
        }
        Ok(())
    }
}

/// What `bundle` touches, in document order.
fn touched(bundle: &BundleDoc) -> Vec<(Kind, String)> {
    let mut out: Vec<(Kind, String)> = Vec::new();
    let mut push = |k: Kind, e: String| {
        if !out.iter().any(|(k2, e2)| *k2 == k && *e2 == e) {
            out.push((k, e));
        }
    };
    for i in &bundle.images {
        push(Kind::Repository, i.repository.to_string());
    }
    for s in &bundle.stacks {
        push(Kind::Stack, s.name.to_string());
    }
    for a in &bundle.addons {
        push(Kind::Torcx, a.remote.clone());
    }
    for v in &bundle.torcx_contents {
        push(Kind::Torcx, v.remote.clone());
    }
    for f in &bundle.feeds {
        push(Kind::Feed, f.name.clone());
    }
    out
}

/// `Ok` when at least `threshold` of `keys` are in `signers`; else the
/// ones that are.
fn met(keys: &[String], threshold: usize, signers: &[String]) -> Result<(), Vec<String>> {
    let have: Vec<String> = keys
        .iter()
        .filter(|k| signers.contains(k))
        .cloned()
        .collect();
    if have.len() >= threshold {
        Ok(())
    } else {
        Err(have)
    }
}

/// [`met`] for a trust document's root, as a [`TrustError::Threshold`].
fn count(what: &str, t: &Threshold, v: &Verified) -> Result<(), TrustError> {
    met(&t.keys, t.threshold, &v.signers).map_err(|have| {
        TrustError::Threshold(format!(
            "the trust document needs {} signatures of {what} ({}); it has {} ({}); nothing changed",
            t.threshold,
            short_list(&t.keys),
            have.len(),
            if have.is_empty() {
                "none".to_string()
            } else {
                short_list(&have)
            }
        ))
    })
}

/// Fingerprints as their last 16 digits (the long key id gpg prints),
/// comma-separated.
fn short_list(fprs: &[String]) -> String {
    if fprs.is_empty() {
        return "no key".into();
    }
    fprs.iter()
        .map(|f| f[f.len().saturating_sub(16)..].to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the signatures of bundles are checked: against a flat keyring
/// (any key may sign anything), or against the site's trust document
/// (its keys, then its roles' scopes and thresholds).
pub struct Verifier {
    keyring: Keyring,
    trust: Option<TrustDoc>,
}

impl Verifier {
    /// Any key of `keyring` may sign any bundle.
    pub fn keyring(keyring: Keyring) -> Verifier {
        Verifier {
            keyring,
            trust: None,
        }
    }

    /// The keys and roles of `doc`.
    ///
    /// Errors: [`TrustError::Invalid`] (not for a parsed document).
    pub fn trust(doc: TrustDoc) -> Result<Verifier, TrustError> {
        Ok(Verifier {
            keyring: doc.keyring()?,
            trust: Some(doc),
        })
    }

    /// The keys signatures are checked against (also for volume lists).
    pub fn keys(&self) -> &Keyring {
        &self.keyring
    }

    /// The trust document in force, if any.
    pub fn document(&self) -> Option<&TrustDoc> {
        self.trust.as_ref()
    }

    /// Checks the signatures of `armored` (a cleartext-signed bundle document).
    ///
    /// Errors: those of [`Keyring::verify_cleartext`].
    pub fn verify(&self, armored: &str) -> Result<Verified, SignError> {
        self.keyring.verify_cleartext(armored)
    }

    /// Whether the signers may bring in `bundle`: always with a flat
    /// keyring; by [`TrustDoc::authorize`] with a trust document.
    ///
    /// Errors: [`TrustError::Scope`].
    pub fn authorize(&self, bundle: &BundleDoc, signers: &[String]) -> Result<(), TrustError> {
        match &self.trust {
            None => Ok(()),
            Some(t) => t.authorize(bundle, signers),
        }
    }
}

#[cfg(test)]
mod tests;
