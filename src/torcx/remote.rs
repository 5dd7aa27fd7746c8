//! The host side of a remote (interop-formats.md §1.3): `remote.json`
//! (`remote-manifest-v0`) and the armored keyring beside it, ready for a
//! host's `/etc/torcx/remotes/<remote>/`.
//!
//! Owns: checking the base URL (scheme `http`, `https` or `file`; no
//! credentials, since `remote.json` is world-readable on hosts: airlock
//! serves torcx without them with `[torcx] public = true`; only the
//! template variables torcx knows; a trailing `/` added, since the client
//! resolves `torcx_remote_contents.json.asc` per RFC 3986 and would replace
//! the last segment otherwise) and the document's bytes. Never writes files.

use super::format::{Envelope, REMOTE_MANIFEST_V0, RemoteKey, RemoteManifest};

/// File name of the keyring written beside `remote.json`.
pub const KEYRING_FILE: &str = "keyring.asc";

/// Template variables torcx substitutes in `base_url`.
const VARIABLES: [&str; 4] = ["COREOS_BOARD", "VERSION_ID", "ID", "COREOS_USR"];

/// Checks `url` and returns it with a trailing `/`.
///
/// Errors: another scheme, credentials in the URL (`user:password@`: they
/// would sit in every host's world-readable `remote.json`; the error never
/// repeats them), a `${...}` the client does not know (it would refuse the
/// remote), or an unterminated `${`.
pub fn base_url(url: &str) -> Result<String, String> {
    let Some((_, rest)) = url
        .split_once("://")
        .filter(|(scheme, _)| ["http", "https", "file"].contains(scheme))
    else {
        return Err(format!(
            "base URL {url:?}: torcx fetches http://, https:// or file:// only"
        ));
    };
    if rest
        .split('/')
        .next()
        .is_some_and(|authority| authority.contains('@'))
    {
        return Err(
            "base URL: credentials (user:password@) would be written into every host's world-readable remote.json; \
             let hosts fetch without them instead (airlock serve: [torcx] public = true, or --torcx-public)"
                .into(),
        );
    }
    let mut rest = url;
    while let Some(i) = rest.find("${") {
        let after = &rest[i + 2..];
        let end = after
            .find('}')
            .ok_or_else(|| format!("base URL {url:?}: unterminated ${{"))?;
        let var = &after[..end];
        if !VARIABLES.contains(&var) {
            return Err(format!(
                "base URL {url:?}: unknown variable ${{{var}}} (torcx knows {})",
                VARIABLES.join(", ")
            ));
        }
        rest = &after[end + 1..];
    }
    Ok(if url.ends_with('/') {
        url.to_string()
    } else {
        format!("{url}/")
    })
}

/// The `remote.json` text for `base_url` (already checked) with one keyring
/// [`KEYRING_FILE`], pretty-printed, ending in `\n`.
pub fn remote_json(base_url: &str) -> String {
    let env = Envelope {
        kind: REMOTE_MANIFEST_V0.to_string(),
        value: RemoteManifest {
            base_url: base_url.to_string(),
            keys: vec![RemoteKey {
                armored_keyring: KEYRING_FILE.to_string(),
            }],
        },
    };
    let mut s = serde_json::to_string_pretty(&env).unwrap_or_default();
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls() {
        assert_eq!(
            base_url("http://h/torcx/r/${COREOS_BOARD}/${VERSION_ID}").unwrap(),
            "http://h/torcx/r/${COREOS_BOARD}/${VERSION_ID}/"
        );
        assert!(base_url("ftp://h/").is_err());
        assert!(base_url("http://h/{{.Board}}/${BOARD}/").is_err());
        assert!(base_url("http://h/${VERSION_ID").is_err());
        let e = base_url("https://host:s3cret@h/torcx/r/").unwrap_err();
        assert!(
            e.contains("[torcx] public = true") && !e.contains("s3cret"),
            "{e}"
        );
        assert!(
            base_url("http://h/torcx/r/a@b/").is_ok(),
            "an @ in the path is no credential"
        );
    }
}
