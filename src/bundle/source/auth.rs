//! Registry credentials from the files skopeo, podman and docker write.
//!
//! Owns: finding a username and password for a registry host (and
//! repository). Never talks to the network and never writes a file.
//!
//! Files are searched in the order of containers-auth.json(5) (as skopeo and
//! podman do); the first file with an entry for the host wins:
//! 1. `$REGISTRY_AUTH_FILE`,
//! 2. `$XDG_RUNTIME_DIR/containers/auth.json`,
//! 3. `$XDG_CONFIG_HOME/containers/auth.json` (default `~/.config/containers/auth.json`),
//! 4. `$DOCKER_CONFIG/config.json` (default `~/.docker/config.json`),
//! 5. `~/.dockercfg` (the legacy format: the `auths` map without its wrapper).
//!
//! Within a file, the key `HOST/REPO/PATH` matches more specifically than
//! `HOST/REPO` and `HOST` (containers-auth.json); keys written as URLs
//! (`https://HOST/v1/`, docker's style) are reduced to their host. Each entry's
//! `auth` is base64 of `user:password` (or `username` and `password`
//! fields); `identitytoken` (OAuth2 refresh tokens) is not supported.
//! Left out: credential helpers (`credHelpers`, `credsStore`); an entry that
//! only names a helper is reported in the error when the registry asks for
//! credentials.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use base64::Engine as _;

/// A username and password for HTTP Basic or the token endpoint.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// User name.
    pub username: String,
    /// Password (or token used as a password).
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, <redacted>)", self.username)
    }
}

impl Credentials {
    /// The `Authorization: Basic ...` header value.
    pub fn basic_header(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

#[derive(serde::Deserialize, Default)]
struct AuthFile {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: BTreeMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// What the search found for a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// A username and password, and the file they came from.
    Credentials(Credentials, PathBuf),
    /// Only a credential helper names this host (not supported): its name and the file.
    Helper(String, PathBuf),
    /// Nothing: anonymous.
    None,
}

/// The credentials files in search order (see the module docs), from the environment.
pub fn auth_file_paths() -> Vec<(PathBuf, bool)> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let home = env("HOME");
    let mut paths = Vec::new();
    if let Some(p) = env("REGISTRY_AUTH_FILE") {
        paths.push((p, false));
    }
    if let Some(r) = env("XDG_RUNTIME_DIR") {
        paths.push((r.join("containers/auth.json"), false));
    }
    match (env("XDG_CONFIG_HOME"), &home) {
        (Some(x), _) => paths.push((x.join("containers/auth.json"), false)),
        (None, Some(h)) => paths.push((h.join(".config/containers/auth.json"), false)),
        _ => {}
    }
    match (env("DOCKER_CONFIG"), &home) {
        (Some(d), _) => paths.push((d.join("config.json"), false)),
        (None, Some(h)) => paths.push((h.join(".docker/config.json"), false)),
        _ => {}
    }
    if let Some(h) = &home {
        paths.push((h.join(".dockercfg"), true));
    }
    paths
}

/// Finds credentials for `host` and `repository` in `paths` (`(file, legacy)`),
/// first file first. A missing file is skipped; an unreadable or malformed one
/// is an error naming it.
pub fn find(paths: &[(PathBuf, bool)], host: &str, repository: &str) -> Result<Found> {
    for (path, legacy) in paths {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        let file: AuthFile = if *legacy {
            AuthFile {
                auths: serde_json::from_str(&text)
                    .with_context(|| format!("{}: not a credentials file", path.display()))?,
                ..AuthFile::default()
            }
        } else {
            serde_json::from_str(&text)
                .with_context(|| format!("{}: not a credentials file", path.display()))?
        };
        if let Some(found) = lookup(&file, path, host, repository)? {
            return Ok(found);
        }
    }
    Ok(Found::None)
}

/// Reduces a key to `HOST[/PATH]`: drops `http(s)://` and docker's `/v1/`, `/v2/` suffix.
fn normalize_key(key: &str) -> String {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let k = k.trim_end_matches('/');
    let k = k
        .strip_suffix("/v1")
        .or_else(|| k.strip_suffix("/v2"))
        .unwrap_or(k);
    k.to_string()
}

fn lookup(file: &AuthFile, path: &Path, host: &str, repository: &str) -> Result<Option<Found>> {
    let docker_hub = |h: &str| {
        if matches!(h, "index.docker.io" | "registry-1.docker.io") {
            "docker.io".to_string()
        } else {
            h.to_string()
        }
    };
    let host = docker_hub(host);
    // Most specific first: host/a/b/c, host/a/b, host/a, host.
    let mut candidates = Vec::new();
    let mut scope = format!("{host}/{repository}");
    loop {
        candidates.push(scope.clone());
        match scope.rfind('/') {
            Some(i) => scope.truncate(i),
            None => break,
        }
    }
    for want in &candidates {
        for (key, entry) in &file.auths {
            let k = normalize_key(key);
            let k = match k.split_once('/') {
                Some((h, rest)) => format!("{}/{rest}", docker_hub(h)),
                None => docker_hub(&k),
            };
            if &k != want {
                continue;
            }
            if let Some(c) =
                decode(entry).with_context(|| format!("{}: entry {key:?}", path.display()))?
            {
                return Ok(Some(Found::Credentials(c, path.to_path_buf())));
            }
        }
    }
    if let Some(helper) = file
        .cred_helpers
        .iter()
        .find(|(k, _)| docker_hub(&normalize_key(k)) == host)
        .map(|(_, v)| v.clone())
        .or_else(|| file.creds_store.clone())
    {
        return Ok(Some(Found::Helper(helper, path.to_path_buf())));
    }
    Ok(None)
}

fn decode(entry: &AuthEntry) -> Result<Option<Credentials>> {
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|_| anyhow!("`auth` is not base64"))?;
        let raw = String::from_utf8(raw).map_err(|_| anyhow!("`auth` is not UTF-8"))?;
        let (u, p) = raw
            .split_once(':')
            .ok_or_else(|| anyhow!("`auth` is not base64 of user:password"))?;
        return Ok(Some(Credentials {
            username: u.to_string(),
            password: p.to_string(),
        }));
    }
    match (&entry.username, &entry.password) {
        (Some(u), Some(p)) => Ok(Some(Credentials {
            username: u.clone(),
            password: p.clone(),
        })),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn finds_in_order_and_most_specific() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("auth.json");
        let second = dir.path().join("config.json");
        std::fs::write(
            &first,
            format!(
                r#"{{"auths":{{"reg:5000/team/app":{{"auth":"{}"}},"reg:5000":{{"auth":"{}"}}}}}}"#,
                b64("app:pw1"),
                b64("any:pw2")
            ),
        )
        .unwrap();
        std::fs::write(
            &second,
            format!(
                r#"{{"auths":{{"https://other.example/v1/":{{"auth":"{}"}},"https://index.docker.io/v1/":{{"auth":"{}"}}}},"credHelpers":{{"helped.example":"pass"}}}}"#,
                b64("o:pw3"),
                b64("hub:pw4")
            ),
        )
        .unwrap();
        let paths = vec![
            (dir.path().join("missing.json"), false),
            (first.clone(), false),
            (second.clone(), false),
        ];
        let creds = |host, repo| match find(&paths, host, repo).unwrap() {
            Found::Credentials(c, p) => Some((c.username, c.password, p)),
            _ => None,
        };
        assert_eq!(
            creds("reg:5000", "team/app/x"),
            Some(("app".into(), "pw1".into(), first.clone()))
        );
        assert_eq!(
            creds("reg:5000", "team/other"),
            Some(("any".into(), "pw2".into(), first.clone()))
        );
        assert_eq!(
            creds("other.example", "a"),
            Some(("o".into(), "pw3".into(), second.clone()))
        );
        assert_eq!(
            creds("registry-1.docker.io", "library/busybox"),
            Some(("hub".into(), "pw4".into(), second.clone()))
        );
        assert_eq!(
            find(&paths, "helped.example", "a").unwrap(),
            Found::Helper("pass".into(), second.clone())
        );
        assert_eq!(find(&paths, "nobody.example", "a").unwrap(), Found::None);
        std::fs::write(&first, "not json").unwrap();
        assert!(find(&paths, "reg:5000", "a").is_err());
    }

    #[test]
    fn legacy_dockercfg() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(".dockercfg");
        std::fs::write(
            &p,
            format!(r#"{{"https://reg/v1/":{{"auth":"{}"}}}}"#, b64("u:p:q")),
        )
        .unwrap();
        match find(&[(p, true)], "reg", "x").unwrap() {
            Found::Credentials(c, _) => {
                assert_eq!((c.username.as_str(), c.password.as_str()), ("u", "p:q"))
            }
            other => panic!("{other:?}"),
        }
    }
}
