//! Password hashes: PHC strings made with argon2id (RustCrypto `argon2`,
//! RFC 9106 parameters of the crate's defaults: 19 MiB, 2 passes), and
//! checking a login against them.
//!
//! Owns: [`hash`] (what `airlock user hash` prints), [`check_phc`] (config
//! validation) and [`Verifier`], which runs argon2 in a blocking thread and
//! remembers the SHA-256 of the last good password per user so that a
//! client sending Basic credentials on every request (docker, skopeo)
//! costs one hash per user, not one argon2 run per request. Comparisons are
//! constant-time (`subtle`).

use std::collections::HashMap;
use std::sync::Mutex;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use sha2::{Digest as _, Sha256};
use subtle::ConstantTimeEq;

/// A fixed hash checked for unknown users, so that their logins take as
/// long as known users' (the password of this hash is not used anywhere).
const DUMMY: &str =
    "$argon2id$v=19$m=19456,t=2,p=1$YWlybG9jay1kdW1teQ$R2vYvSbuTE+yzQ7xs3Ja8CZ52CfKSDd5F9lw0pFjvXs";

/// The PHC string (`$argon2id$v=19$m=19456,t=2,p=1$<salt>$<hash>`) of
/// `password` with a random salt.
///
/// Errors: the hasher failed (a message).
pub fn hash(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut argon2::password_hash::rand_core::OsRng);
    argon2::Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| e.to_string())
}

/// Checks that `phc` is a PHC string of an argon2 algorithm.
///
/// Errors: a one-line cause.
pub fn check_phc(phc: &str) -> Result<(), String> {
    let h =
        PasswordHash::new(phc).map_err(|e| format!("password_hash is not a PHC string: {e}"))?;
    match h.algorithm.as_str() {
        "argon2id" | "argon2i" | "argon2d" => Ok(()),
        other => Err(format!(
            "password_hash algorithm {other} is not argon2 (use `airlock user hash`)"
        )),
    }
}

fn verify_phc(phc: &str, password: &str) -> bool {
    PasswordHash::new(phc).is_ok_and(|h| {
        argon2::Argon2::default()
            .verify_password(password.as_bytes(), &h)
            .is_ok()
    })
}

/// Verifies passwords against PHC hashes, remembering the last good one.
#[derive(Debug, Default)]
pub struct Verifier {
    /// User → SHA-256 of (user, hash, password) of the last success.
    good: Mutex<HashMap<String, [u8; 32]>>,
}

fn fingerprint(user: &str, phc: &str, password: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    for part in [user, phc, password] {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().into()
}

impl Verifier {
    /// Whether `password` matches `phc` (`None`: unknown user or no
    /// password; always false, after the same work as a real check).
    pub async fn verify(&self, user: &str, phc: Option<String>, password: &str) -> bool {
        let known = phc.is_some();
        let phc = phc.unwrap_or_else(|| DUMMY.to_string());
        let fp = fingerprint(user, &phc, password);
        if known
            && let Ok(good) = self.good.lock()
            && let Some(g) = good.get(user)
            && bool::from(g.ct_eq(&fp))
        {
            return true;
        }
        let pw = password.to_string();
        let ok = tokio::task::spawn_blocking(move || verify_phc(&phc, &pw))
            .await
            .unwrap_or(false)
            && known;
        if ok && let Ok(mut good) = self.good.lock() {
            good.insert(user.to_string(), fp);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn hash_then_verify() {
        let h = hash("s3cret").unwrap();
        assert!(h.starts_with("$argon2id$v=19$"));
        check_phc(&h).unwrap();
        check_phc(DUMMY).unwrap();
        assert!(check_phc("plain").is_err());
        let v = Verifier::default();
        assert!(v.verify("a", Some(h.clone()), "s3cret").await);
        // Second time from the remembered digest.
        assert!(v.verify("a", Some(h.clone()), "s3cret").await);
        assert!(!v.verify("a", Some(h.clone()), "wrong").await);
        assert!(!v.verify("b", None, "s3cret").await);
    }
}
