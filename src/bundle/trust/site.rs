//! The trust document a site holds: the `trust` room document of the state
//! (so every replica reads the same one, and history records each change),
//! installing or rotating it, and the [`Verifier`] an import uses.

use anyhow::{Result, anyhow};
use serde::{Deserialize, Serialize};

use super::{TrustDoc, TrustError, Verifier, short_list};
use crate::bundle::sign::Keyring;
use crate::state::{DocumentChange, Op, Snapshot, StateError, StateStore};

/// The room document's name.
pub const DOCUMENT: &str = "trust";

/// The room document: the signed trust document as it came, so its
/// signatures can be checked again and the next version checked against it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Stored {
    /// Its version (the same as inside `armored`).
    pub version: u64,
    /// The cleartext-signed document.
    pub armored: String,
}

/// What [`install`] did.
#[derive(Debug, Clone)]
pub struct Installed {
    /// The document now in force.
    pub doc: TrustDoc,
    /// The version it replaced (`None`: the site had none, its keyring decided).
    pub previous: Option<u64>,
    /// Every key whose signature on it verified (primary fingerprints).
    pub signers: Vec<String>,
    /// The generation that records it.
    pub generation: u64,
}

impl std::fmt::Display for Installed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let from = match self.previous {
            Some(v) => format!("replaces version {v}"),
            None => "first trust document of this site; the flat keyring no longer decides".into(),
        };
        write!(
            f,
            "trust document version {} installed ({from}): {} keys, root {} of {}, {} roles; signed by {}; generation {}",
            self.doc.version,
            self.doc.keys.len(),
            self.doc.root.threshold,
            self.doc.root.keys.len(),
            self.doc.roles.len(),
            short_list(&self.signers),
            self.generation
        )
    }
}

impl Installed {
    /// `{trust_version, previous, signers, generation}`: what `airlock
    /// import TRUST.asc --json` prints and `POST /admin/v1/trust` answers.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "trust_version": self.doc.version,
            "previous": self.previous,
            "signers": self.signers,
            "generation": self.generation,
        })
    }
}

/// What [`check`] found: the document would be installed.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The document checked.
    pub doc: TrustDoc,
    /// Every key whose signature on it verified.
    pub signers: Vec<String>,
    /// The version it would replace (`None`: the flat keyring decides now).
    pub previous: Option<u64>,
}

impl std::fmt::Display for Checked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "dry run: trust document version {} verified (signed by {}); would replace {}; nothing changed",
            self.doc.version,
            self.signers.join(", "),
            self.previous
                .map_or("the flat keyring".into(), |v| format!("version {v}"))
        )
    }
}

/// The checks [`install`] makes of `armored` on the current generation,
/// without committing (a dry run). Errors: as [`install`]'s.
pub async fn check(state: &StateStore, armored: &str) -> Result<Checked> {
    let snap = state.snapshot().await?;
    let current = load(state, &snap).await?;
    let (doc, signers) = TrustDoc::check_successor(current.as_ref(), armored)?;
    Ok(Checked {
        doc,
        signers,
        previous: current.map(|c| c.version),
    })
}

/// The stored document of `snap`, if the site has one.
///
/// Errors: the room document cannot be read.
pub async fn stored(state: &StateStore, snap: &Snapshot) -> Result<Option<Stored>, StateError> {
    state.document::<Stored>(snap, DOCUMENT).await
}

/// The site's trust document in `snap`, parsed (`None`: the site has none).
///
/// Errors: the room document cannot be read, or what it holds no longer
/// parses (a newer airlock wrote it).
pub async fn load(state: &StateStore, snap: &Snapshot) -> Result<Option<TrustDoc>> {
    let Some(s) = stored(state, snap).await? else {
        return Ok(None);
    };
    let text = crate::bundle::sign::unverified_text(&s.armored)?;
    Ok(Some(TrustDoc::parse(&text)?))
}

/// Installs `armored` as the site's trust document, on the current
/// generation: the first one when the site has none (a threshold of its
/// own root keys signed it), else a successor of the one in force
/// ([`TrustDoc::check_successor`]). History records `trust document
/// version N (signed by …)`. A document installed meanwhile by another
/// process refuses this one (it is checked again on the root the commit
/// lands on).
///
/// Errors: [`TrustError`] refusals (one line; nothing changed), state errors.
pub async fn install(state: &StateStore, armored: &str, who: &str) -> Result<Installed> {
    let snap = state.snapshot().await?;
    let current = load(state, &snap).await?;
    let (doc, signers) = TrustDoc::check_successor(current.as_ref(), armored)?;
    let previous = current.as_ref().map(|c| c.version);
    let stored = Stored {
        version: doc.version,
        armored: armored.to_string(),
    };
    let op = Op::Document {
        name: DOCUMENT.into(),
        change: DocumentChange::json(move |now: Option<Stored>| {
            let now_version = now.as_ref().map(|s| s.version);
            if now_version != previous {
                return Err(StateError::Rejected(format!(
                    "the site's trust document changed meanwhile (now version {}); nothing changed",
                    now_version.map_or("none".into(), |v| v.to_string())
                )));
            }
            Ok(Some(stored.clone()))
        }),
    };
    let reason = format!(
        "trust document version {} (signed by {})",
        doc.version,
        short_list(&signers)
    );
    let commit = state.commit(&reason, who, &[op]).await?;
    Ok(Installed {
        doc,
        previous,
        signers,
        generation: commit.generation,
    })
}

/// The op an import commits with: it changes nothing, and refuses the
/// commit when the site's trust document is no longer `version` (`None`:
/// none), so a bundle checked against a document rotated meanwhile is not
/// committed.
pub fn guard_op(version: Option<u64>) -> Op {
    Op::Document {
        name: DOCUMENT.into(),
        change: DocumentChange::bytes(move |now| {
            let now_version = match now {
                None => None,
                Some(b) => Some(
                    serde_json::from_slice::<Stored>(b)
                        .map_err(|e| StateError::Corrupt {
                            digest: "(trust document)".into(),
                            cause: e.to_string(),
                        })?
                        .version,
                ),
            };
            if now_version != version {
                return Err(StateError::Rejected(format!(
                    "the site's trust document changed while the bundle was checked (version {} then, {} now); import it again",
                    version.map_or("none".into(), |v| v.to_string()),
                    now_version.map_or("none".into(), |v| v.to_string())
                )));
            }
            Ok(now.map(<[u8]>::to_vec))
        }),
    }
}

/// The [`Verifier`] for an import into `state` now: the site's trust
/// document when it has one (a `keyring` given as well is not used, and a
/// log line says so), else `keyring`.
///
/// When the document cannot be read (a damaged generation) and a keyring
/// is given, the keyring checks the bundle and the import's
/// [`guard_op`] refuses its commit if the site turns out to hold a
/// trust document.
///
/// Errors: [`TrustError::Expired`] for a trust document past its
/// `expires`; neither a trust document nor a keyring; state errors
/// without a keyring.
pub async fn verifier(state: &StateStore, keyring: Option<Keyring>) -> Result<Verifier> {
    let current = match state.snapshot().await {
        Ok(snap) => load(state, &snap).await,
        Err(e) => Err(e.into()),
    };
    let current = match (current, keyring.is_some()) {
        (Ok(c), _) => c,
        // A damaged current generation: the import repairs it (or says
        // how) as before. Its commit carries [`guard_op`] for "no trust
        // document", so if the repaired site holds one the commit is
        // refused rather than let in by the keyring.
        (Err(e), true) => {
            tracing::warn!(error = %format!("{e:#}"), "the site's trust document cannot be read; checking the bundle with the keyring (its commit is refused if the site holds a trust document)");
            None
        }
        (Err(e), false) => return Err(e),
    };
    match (current, keyring) {
        (Some(doc), keyring) => {
            if keyring.is_some() {
                tracing::info!(
                    version = doc.version,
                    "the site's trust document decides; the keyring given is not used"
                );
            }
            doc.check_expiry(time::OffsetDateTime::now_utc())?;
            Ok(Verifier::trust(doc)?)
        }
        (None, Some(k)) => Ok(Verifier::keyring(k)),
        (None, None) => Err(anyhow!(TrustError::NoKeys(
            "the site has no trust document and no keyring was given (--keyring, or [import] keyring)".into()
        ))),
    }
}
