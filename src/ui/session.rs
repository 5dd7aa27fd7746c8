//! Console sessions: who a browser is logged in as, and the CSRF token of
//! its forms.
//!
//! Owns: the session cookie and its signing key. A session is a signed
//! value, not a server-side record, so that every replica serving one
//! store accepts it: `v2.<user>.<expires>.<nonce>.<credential>.<mac>`
//! (user, nonce and credential base64url, expires in Unix seconds, mac =
//! HMAC-SHA256 over the rest and the transport, `tls` or `plain`, under
//! the key in the store object [`KEY_OBJECT`], created once with a
//! conditional write so replicas agree on it). The credential is the
//! first 16 bytes of a SHA-256 over the user as configured at login
//! (password hash, roles, repositories, cells): a changed password, role,
//! prefix or cell list, a removed user or a revoked token user ends every
//! session of that user at its next request, on every replica. A session
//! minted over plain HTTP is refused on a TLS listener (and the other way
//! round), whichever server of the store minted it. An anonymous session (empty
//! user, in a cookie of its own name) is handed to every visitor so that
//! the login form, and every form of a server without users, carries a
//! CSRF token too. The token of a
//! session is HMAC-SHA256(key, nonce), compared in constant time; a
//! logged-in session gets a fresh nonce, so a token seen before login is
//! worth nothing after it.
//!
//! The cookie is `HttpOnly`, `SameSite=Strict`, `Path=/`, and with TLS
//! `Secure` under the names `__Host-airlock-session` (logged in) and
//! `__Host-airlock-anonymous`. Logging out forgets
//! the cookie in the browser and remembers the nonce as ended in this
//! process until it expires (other replicas accept it until then; the
//! lifetime, `[ui] session_lifetime`, bounds that).
//!
//! Never decides what a user may do: [`user`] only says who the cookie
//! names (re-read from the configured and token users on every request, so
//! a revoked token user or a changed role takes effect at once); the
//! access layer (`server::access`) does the rest.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use bytes::Bytes;
use hmac::{Hmac, Mac};
use rand::RngCore as _;
use sha2::Sha256;
use subtle::ConstantTimeEq as _;

use crate::auth::{Policy, User};
use crate::state::StateStore;
use crate::store::{self, Blobstore, StoreError};

/// The store object holding the signing key (64 hex digits).
pub const KEY_OBJECT: &str = "ui/session-key";

/// Most ended sessions remembered (the oldest are forgotten first).
const MAX_ENDED: usize = 100_000;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

type Key = [u8; 32];

/// One browser's session, as its cookie says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The logged-in user; `None` for an anonymous session.
    pub user: Option<String>,
    /// When it ends, Unix seconds.
    pub expires: u64,
    nonce: [u8; 16],
    csrf: String,
    /// [`credential`] of the user at login (zeros for an anonymous session).
    credential: [u8; 16],
}

/// What a session is bound to of its user: the first 16 bytes of a
/// SHA-256 over the name, password hash, roles, repository prefixes and
/// cell globs (each length-prefixed). Any change to them changes it.
pub fn credential(user: &User) -> [u8; 16] {
    use sha2::Digest as _;
    let mut h = Sha256::new();
    let mut put = |b: &[u8]| {
        h.update((b.len() as u64).to_be_bytes());
        h.update(b);
    };
    put(user.name.as_bytes());
    put(user.password_hash.as_deref().unwrap_or("").as_bytes());
    for r in &user.roles {
        put(format!("role:{r:?}").as_bytes());
    }
    for r in &user.repositories {
        put(format!("repository:{r}").as_bytes());
    }
    for c in &user.cells {
        put(format!("cell:{c}").as_bytes());
    }
    let d = h.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&d[..16]);
    out
}

/// The transport a cookie is bound to.
fn transport(tls: bool) -> &'static [u8] {
    if tls { b"tls" } else { b"plain" }
}

impl Session {
    /// The CSRF token every form of this session carries (base64url).
    pub fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether `token` is this session's CSRF token (constant time).
    pub fn csrf_matches(&self, token: &str) -> bool {
        bool::from(self.csrf.as_bytes().ct_eq(token.as_bytes()))
    }
}

/// The signing key (loaded from the store on first use) and the sessions
/// ended in this process.
pub struct Sessions {
    lifetime: Duration,
    secure: bool,
    key: tokio::sync::OnceCell<Key>,
    ended: Mutex<HashMap<[u8; 16], u64>>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn mac(key: &Key, parts: &[&[u8]]) -> Hmac<Sha256> {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    for p in parts {
        m.update(&(p.len() as u64).to_be_bytes());
        m.update(p);
    }
    m
}

fn csrf_of(key: &Key, nonce: &[u8; 16]) -> String {
    B64.encode(
        mac(key, &[b"airlock-ui-csrf-v1", nonce])
            .finalize()
            .into_bytes(),
    )
}

impl Sessions {
    /// Sessions lasting `lifetime`, with `Secure` cookies when `secure`.
    pub fn new(lifetime: Duration, secure: bool) -> Sessions {
        Sessions {
            lifetime,
            secure,
            key: tokio::sync::OnceCell::new(),
            ended: Mutex::new(HashMap::new()),
        }
    }

    /// The name of the cookie of a logged-in session (`logged_in`) or of
    /// an anonymous one. Two names, so that an anonymous session handed
    /// out when the browser did not send its login cookie (a navigation
    /// from another site: `SameSite=Strict`) never replaces the login.
    pub fn cookie_name(&self, logged_in: bool) -> &'static str {
        match (self.secure, logged_in) {
            (true, true) => "__Host-airlock-session",
            (true, false) => "__Host-airlock-anonymous",
            (false, true) => "airlock-session",
            (false, false) => "airlock-anonymous",
        }
    }

    async fn key(&self, store: &dyn Blobstore) -> Result<&Key, StoreError> {
        self.key.get_or_try_init(|| load_or_create(store)).await
    }

    /// The session `headers`' cookie names, if it is valid (signed with the
    /// key for this transport, `tls`, not expired, not ended here).
    /// The logged-in session's cookie wins over an anonymous one.
    pub async fn open(
        &self,
        store: &dyn Blobstore,
        headers: &HeaderMap,
        tls: bool,
    ) -> Option<Session> {
        let login = cookie(headers, self.cookie_name(true));
        let anonymous = cookie(headers, self.cookie_name(false));
        if login.is_none() && anonymous.is_none() {
            return None;
        }
        let key = match self.key(store).await {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!(error = %e, "console: session key cannot be read");
                return None;
            }
        };
        let t = now();
        let valid = |v: Option<&str>, logged_in: bool| {
            let s = parse(key, v?, t, tls)?;
            let ended = self.ended.lock().ok()?.contains_key(&s.nonce);
            (!ended && s.user.is_some() == logged_in).then_some(s)
        };
        valid(login, true).or_else(|| valid(anonymous, false))
    }

    /// A new session for `user` (`None`: anonymous), bound to its
    /// [`credential`] and to this server's transport, and the `Set-Cookie`
    /// value that hands it to the browser.
    ///
    /// Errors: the signing key cannot be read or created.
    pub async fn start(
        &self,
        store: &dyn Blobstore,
        user: Option<&User>,
    ) -> Result<(Session, HeaderValue), StoreError> {
        let key = self.key(store).await?;
        let mut nonce = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut nonce);
        let expires = now() + self.lifetime.as_secs();
        let credential = user.map_or([0u8; 16], credential);
        let value = seal(
            key,
            user.map_or("", |u| u.name.as_str()),
            expires,
            nonce,
            credential,
            self.secure,
        );
        let session = Session {
            user: user.map(|u| u.name.clone()),
            expires,
            nonce,
            csrf: csrf_of(key, &nonce),
            credential,
        };
        let name = self.cookie_name(user.is_some());
        Ok((
            session,
            self.set_cookie(name, &value, self.lifetime.as_secs()),
        ))
    }

    /// Ends `session` in this process and returns the `Set-Cookie` value
    /// that makes the browser forget it.
    pub fn end(&self, session: &Session) -> HeaderValue {
        if let Ok(mut ended) = self.ended.lock() {
            let t = now();
            ended.retain(|_, exp| *exp > t);
            if ended.len() >= MAX_ENDED
                && let Some(oldest) = ended.iter().min_by_key(|(_, e)| **e).map(|(n, _)| *n)
            {
                ended.remove(&oldest);
            }
            ended.insert(session.nonce, session.expires);
        }
        self.set_cookie(self.cookie_name(session.user.is_some()), "", 0)
    }

    fn set_cookie(&self, name: &str, value: &str, max_age: u64) -> HeaderValue {
        let secure = if self.secure { "; Secure" } else { "" };
        let text =
            format!("{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}");
        HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// The value of cookie `name` in `headers` (RFC 6265 §5.4: `a=b; c=d`).
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (k, v) = pair.trim().split_once('=')?;
            (k == name).then_some(v)
        })
}

/// The MAC of a cookie's fields under `key`.
fn tag(
    key: &Key,
    user_b64: &str,
    expires: &str,
    nonce: &[u8; 16],
    credential: &[u8; 16],
    tls: bool,
) -> Hmac<Sha256> {
    mac(
        key,
        &[
            b"airlock-ui-session-v2",
            user_b64.as_bytes(),
            expires.as_bytes(),
            nonce,
            credential,
            transport(tls),
        ],
    )
}

/// The cookie value of a session (module docs).
fn seal(
    key: &Key,
    user: &str,
    expires: u64,
    nonce: [u8; 16],
    credential: [u8; 16],
    tls: bool,
) -> String {
    let user_b64 = B64.encode(user.as_bytes());
    let e = expires.to_string();
    let t = tag(key, &user_b64, &e, &nonce, &credential, tls)
        .finalize()
        .into_bytes();
    format!(
        "v2.{user_b64}.{e}.{}.{}.{}",
        B64.encode(nonce),
        B64.encode(credential),
        B64.encode(t)
    )
}

/// The session in a cookie value signed with `key` for the transport
/// `tls`, unless expired at `now`.
fn parse(key: &Key, value: &str, now: u64, tls: bool) -> Option<Session> {
    let mut parts = value.split('.');
    let (v, user_b64, expires_text, nonce_b64, credential_b64, tag_b64) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    if v != "v2" || parts.next().is_some() {
        return None;
    }
    let nonce: [u8; 16] = B64.decode(nonce_b64).ok()?.try_into().ok()?;
    let credential: [u8; 16] = B64.decode(credential_b64).ok()?.try_into().ok()?;
    let t = B64.decode(tag_b64).ok()?;
    tag(key, user_b64, expires_text, &nonce, &credential, tls)
        .verify_slice(&t)
        .ok()?;
    let expires: u64 = expires_text.parse().ok()?;
    if expires <= now {
        return None;
    }
    let user = String::from_utf8(B64.decode(user_b64).ok()?).ok()?;
    Some(Session {
        user: (!user.is_empty()).then_some(user),
        expires,
        nonce,
        csrf: csrf_of(key, &nonce),
        credential,
    })
}

/// The key in [`KEY_OBJECT`], made (32 random bytes) when there is none:
/// created only if still absent, so that of two replicas starting at once
/// both end up with the one that was stored first.
async fn load_or_create(store: &dyn Blobstore) -> Result<Key, StoreError> {
    for _ in 0..3 {
        match store::read_all(store, KEY_OBJECT).await {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let key: Key = hex::decode(text.trim())
                    .ok()
                    .and_then(|k| k.try_into().ok())
                    .ok_or_else(|| {
                        StoreError::Corrupt(format!(
                            "{KEY_OBJECT} is not 64 hex digits; remove it to make a new key"
                        ))
                    })?;
                return Ok(key);
            }
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        let mut key = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut key);
        let mut w = store.writer(KEY_OBJECT).await?;
        w.write(Bytes::from(hex::encode(key))).await?;
        match w.commit_new().await {
            Ok(true) => return Ok(key),
            // Another replica stored one first: read it.
            Ok(false) => {}
            Err(StoreError::Io(e)) if e.kind() == std::io::ErrorKind::Unsupported => {
                let mut w = store.writer(KEY_OBJECT).await?;
                w.write(Bytes::from(hex::encode(key))).await?;
                w.commit().await?;
                return Ok(key);
            }
            Err(e) => return Err(e),
        }
    }
    Err(StoreError::Corrupt(format!(
        "{KEY_OBJECT} could neither be read nor created"
    )))
}

/// The user a console request's session cookie names, as configured now
/// (a configured user, else a token user of `state`); `None` without a
/// valid logged-in session for this transport (`tls`), or when the user is
/// gone or changed since login ([`credential`]). For the access layer,
/// which then applies the policy to it.
pub async fn user(
    sessions: &Sessions,
    policy: &Policy,
    state: &StateStore,
    headers: &HeaderMap,
    tls: bool,
) -> Option<User> {
    let session = sessions.open(&**state.blobstore(), headers, tls).await?;
    let name = session.user.as_deref()?;
    let user = match policy.user(name) {
        Some(u) => u.clone(),
        None => policy.tokens.user(state, name).await?,
    };
    let same: bool = credential(&user).ct_eq(&session.credential).into();
    same.then_some(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        [7u8; 32]
    }

    fn seal(user: Option<&str>, expires: u64, nonce: [u8; 16]) -> String {
        super::seal(&key(), user.unwrap_or(""), expires, nonce, [3; 16], false)
    }

    fn parse(key: &Key, value: &str, now: u64) -> Option<Session> {
        super::parse(key, value, now, false)
    }

    #[test]
    fn sessions_are_bound_to_their_transport_and_credential() {
        let v = seal(Some("ops"), 2000, [1; 16]);
        assert!(super::parse(&key(), &v, 1000, false).is_some());
        assert!(
            super::parse(&key(), &v, 1000, true).is_none(),
            "a plain-HTTP session on TLS"
        );
        let tls = super::seal(&key(), "ops", 2000, [1; 16], [3; 16], true);
        assert!(super::parse(&key(), &tls, 1000, true).is_some());
        assert!(super::parse(&key(), &tls, 1000, false).is_none());
        // Another credential under the same tag.
        let forged = v.replacen(&B64.encode([3u8; 16]), &B64.encode([4u8; 16]), 1);
        assert!(parse(&key(), &forged, 1000).is_none());
        let u = |hash: &str, roles: Vec<crate::auth::Role>| User {
            name: "ops".into(),
            password_hash: Some(hash.into()),
            roles,
            repositories: Vec::new(),
            cells: Vec::new(),
        };
        let base = credential(&u("h1", vec![crate::auth::Role::Admin]));
        assert_ne!(base, credential(&u("h2", vec![crate::auth::Role::Admin])));
        assert_ne!(base, credential(&u("h1", vec![crate::auth::Role::Reader])));
        let mut limited = u("h1", vec![crate::auth::Role::Admin]);
        limited.repositories.push("stacks/".into());
        assert_ne!(base, credential(&limited));
        assert_eq!(base, credential(&u("h1", vec![crate::auth::Role::Admin])));
    }

    #[test]
    fn cookies_verify_expire_and_resist_tampering() {
        let v = seal(Some("ops"), 2000, [1; 16]);
        let s = parse(&key(), &v, 1000).expect("valid");
        assert_eq!(s.user.as_deref(), Some("ops"));
        assert_eq!(s.expires, 2000);
        assert!(parse(&key(), &v, 2000).is_none(), "expired");
        assert!(parse(&[8u8; 32], &v, 1000).is_none(), "other key");
        // Another user under the same tag.
        let forged = v.replacen(&B64.encode("ops"), &B64.encode("root"), 1);
        assert!(parse(&key(), &forged, 1000).is_none());
        // A later expiry under the same tag.
        let forged = v.replacen(".2000.", ".9999.", 1);
        assert!(parse(&key(), &forged, 1000).is_none());
        assert!(parse(&key(), &format!("{v}.x"), 1000).is_none());
        assert!(parse(&key(), &v.replacen("v2.", "v1.", 1), 1000).is_none());
        let anon = parse(&key(), &seal(None, 2000, [2; 16]), 1000).unwrap();
        assert_eq!(anon.user, None);
    }

    #[test]
    fn csrf_tokens_are_per_nonce() {
        let a = parse(&key(), &seal(None, 2000, [1; 16]), 0).unwrap();
        let b = parse(&key(), &seal(Some("ops"), 2000, [2; 16]), 0).unwrap();
        assert!(a.csrf_matches(a.csrf()));
        assert!(!b.csrf_matches(a.csrf()));
        assert!(!a.csrf_matches(""));
        // The token is HMAC-SHA256(key, nonce) as documented: 32 bytes.
        assert_eq!(B64.decode(a.csrf()).unwrap().len(), 32);
    }

    #[test]
    fn cookie_header_parsing() {
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; airlock-session=v1.x; b=2"),
        );
        assert_eq!(cookie(&h, "airlock-session"), Some("v1.x"));
        assert_eq!(cookie(&h, "c"), None);
    }
}
