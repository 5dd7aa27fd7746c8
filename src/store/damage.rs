//! What this process knows to be damaged in its store and not yet
//! repaired: the layout marker, the root pointer, a page or document of
//! the current generation that no copy could restore (issue 61). `/readyz`
//! answers 503 "degraded" while any note applies, and says which objects;
//! `fsck` reports them; a repair (or a new generation that no longer
//! names the object) clears them.
//!
//! Owns: the notes and when each applies. A note is about the store as a
//! whole ([`Scope::Store`]: the layout marker, cleared when a re-check
//! finds it whole) or about one generation ([`Scope::Root`]: what a read of
//! the generation `refs/root` named then failed on; it stops applying once
//! the root names another one). Never reads the store itself.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// What a note is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The store whatever its generation (`refs/layout`).
    Store,
    /// The generation whose state document `refs/root` named (its value).
    Root(String),
}

/// One damaged object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Note {
    /// The object: a key (`refs/layout`) or a digest.
    pub object: String,
    /// What is wrong with it, one line.
    pub cause: String,
}

/// The notes of one store, shared by every clone of it. Bounded: at most
/// 100 objects are kept (the first ones; `/readyz` needs one to say
/// "degraded").
#[derive(Debug, Default)]
pub struct Notes(Mutex<BTreeMap<String, (Scope, String)>>);

impl Notes {
    /// Notes `object` as damaged (`cause`), within `scope`.
    pub fn note(&self, object: &str, scope: Scope, cause: &str) {
        if let Ok(mut n) = self.0.lock()
            && (n.len() < 100 || n.contains_key(object))
        {
            n.insert(object.to_string(), (scope, cause.to_string()));
        }
    }

    /// Forgets `object` (repaired).
    pub fn clear(&self, object: &str) {
        if let Ok(mut n) = self.0.lock() {
            n.remove(object);
        }
    }

    /// Whether `object` is noted.
    pub fn has(&self, object: &str) -> bool {
        self.0.lock().is_ok_and(|n| n.contains_key(object))
    }

    /// The notes that apply while `refs/root` names `root` (its value;
    /// `None`: absent or unread): every store note, and the generation
    /// notes of that root. The others are dropped.
    pub fn current(&self, root: Option<&str>) -> Vec<Note> {
        let Ok(mut n) = self.0.lock() else {
            return Vec::new();
        };
        n.retain(|_, (scope, _)| match scope {
            Scope::Store => true,
            Scope::Root(r) => Some(r.as_str()) == root,
        });
        n.iter()
            .map(|(object, (_, cause))| Note {
                object: object.clone(),
                cause: cause.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_notes_end_with_their_generation() {
        let n = Notes::default();
        n.note("refs/layout", Scope::Store, "fails its check");
        n.note("sha256:aa", Scope::Root("sha256:r1".into()), "page missing");
        assert_eq!(n.current(Some("sha256:r1")).len(), 2);
        assert!(n.has("sha256:aa"));
        let later = n.current(Some("sha256:r2"));
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].object, "refs/layout");
        assert!(!n.has("sha256:aa"));
        n.clear("refs/layout");
        assert!(n.current(None).is_empty());
    }
}
