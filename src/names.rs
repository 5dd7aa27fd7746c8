//! Validated names from the OCI distribution-spec: repository names, tags and
//! references ("Pulling manifests": `<name>` and `<reference>` grammars).
//!
//! Owns: the grammars, and the one decoding of a name carried in a request
//! path ([`percent_decode`]). Every newtype deserializes through its
//! validator, so an invalid name cannot exist anywhere in airlock.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use crate::digest::Digest;

/// Why a name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not of the `<name>` grammar.
    #[error("invalid repository name {0:?}")]
    Repository(String),
    /// Not of the tag grammar `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
    #[error("invalid tag {0:?}")]
    Tag(String),
    /// A path part whose percent-encoding is malformed (a `%` not followed
    /// by two hexadecimal digits) or whose bytes are not UTF-8.
    #[error("malformed percent-encoding in {0:?}")]
    Encoding(String),
}

/// A name as a request path carries it, percent-decoded once (RFC 3986
/// §2.1: `%HH` is the byte `0xHH`; anything else stands for itself): the
/// one decoding every route grammar applies to a path parameter before it
/// parses it as its type, so that the access layer and the handler read
/// the same name. Borrowed when `part` has no `%`.
///
/// Errors: [`NameError::Encoding`] for a `%` not followed by two hex
/// digits, or decoded bytes that are not UTF-8.
pub fn percent_decode(part: &str) -> Result<Cow<'_, str>, NameError> {
    if !part.contains('%') {
        return Ok(Cow::Borrowed(part));
    }
    let bad = || NameError::Encoding(part.to_string());
    let b = part.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or_else(bad)?;
            let digit = |c: u8| (c as char).to_digit(16);
            match (digit(hex[0]), digit(hex[1])) {
                (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                _ => return Err(bad()),
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map(Cow::Owned).map_err(|_| bad())
}

/// Maximum length of a repository name we accept (distribution's limit).
pub const MAX_NAME_LEN: usize = 255;

/// A repository name: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*`,
/// at most 255 characters. `stacks/bookworm` and `docker.io/library/busybox` are valid.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepositoryName(String);

fn component_ok(c: &str) -> bool {
    // [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

impl RepositoryName {
    /// The name as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for RepositoryName {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        if s.len() > MAX_NAME_LEN || !s.split('/').all(component_ok) {
            return Err(NameError::Repository(s.to_string()));
        }
        Ok(RepositoryName(s.to_string()))
    }
}

/// A tag: `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Tag(String);

impl Tag {
    /// The tag as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Tag {
    type Err = NameError;
    fn from_str(s: &str) -> Result<Self, NameError> {
        let b = s.as_bytes();
        let first_ok = b
            .first()
            .is_some_and(|&x| x.is_ascii_alphanumeric() || x == b'_');
        let rest_ok = b
            .iter()
            .skip(1)
            .all(|&x| x.is_ascii_alphanumeric() || matches!(x, b'.' | b'_' | b'-'));
        if !first_ok || !rest_ok || b.len() > 128 {
            return Err(NameError::Tag(s.to_string()));
        }
        Ok(Tag(s.to_string()))
    }
}

/// A manifest reference: a digest or a tag, nothing else.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reference {
    /// By digest.
    Digest(Digest),
    /// By tag.
    Tag(Tag),
}

impl FromStr for Reference {
    type Err = String;
    /// A string with `:` must be a valid digest; otherwise a valid tag.
    fn from_str(s: &str) -> Result<Self, String> {
        if s.contains(':') {
            s.parse()
                .map(Reference::Digest)
                .map_err(|e: crate::digest::DigestError| e.to_string())
        } else {
            s.parse()
                .map(Reference::Tag)
                .map_err(|e: NameError| e.to_string())
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Digest(d) => d.fmt(f),
            Reference::Tag(t) => t.fmt(f),
        }
    }
}

macro_rules! string_newtype {
    ($t:ty) => {
        impl TryFrom<String> for $t {
            type Error = NameError;
            fn try_from(s: String) -> Result<Self, NameError> {
                s.parse()
            }
        }
        impl From<$t> for String {
            fn from(v: $t) -> String {
                v.0
            }
        }
        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:?}", self.0)
            }
        }
    };
}
string_newtype!(RepositoryName);
string_newtype!(Tag);

/// Whether `name` matches `pattern`: `*` matches within one path segment
/// (no `/`), `**` across segments, anything else itself (retention rules,
/// immutable tags).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match p.split_first() {
            None => n.is_empty(),
            Some((b'*', rest)) if rest.first() == Some(&b'*') => {
                let rest = &rest[1..];
                (0..=n.len()).any(|i| go(rest, &n[i..]))
            }
            Some((b'*', rest)) => {
                let seg = n.iter().position(|&c| c == b'/').unwrap_or(n.len());
                (0..=seg).any(|i| go(rest, &n[i..]))
            }
            Some((c, rest)) => n.first() == Some(c) && go(rest, &n[1..]),
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_grammar() {
        for ok in [
            "stacks/bookworm",
            "docker.io/library/busybox",
            "a",
            "a__b",
            "a---b/c.d_e",
            "0/1",
        ] {
            assert!(ok.parse::<RepositoryName>().is_ok(), "{ok}");
        }
        for bad in [
            "", "A", "a/", "/a", "a//b", "a___b", "-a", "a-", "a..b", "a/../b", "a b", "a:b",
        ] {
            assert!(bad.parse::<RepositoryName>().is_err(), "{bad}");
        }
        assert!("a".repeat(256).parse::<RepositoryName>().is_err());
    }

    #[test]
    fn percent_decoding() {
        assert!(matches!(percent_decode("bb").unwrap(), Cow::Borrowed("bb")));
        assert_eq!(percent_decode("%62b").unwrap(), "bb");
        assert_eq!(percent_decode("a%2Fb%2f").unwrap(), "a/b/");
        assert_eq!(percent_decode("%25").unwrap(), "%");
        assert_eq!(percent_decode("%C3%A9").unwrap(), "é");
        for bad in ["%", "%2", "a%zz", "%G0", "%ff", "%C3"] {
            assert!(percent_decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tag_grammar() {
        assert!("latest".parse::<Tag>().is_ok());
        assert!("_x.y-Z".parse::<Tag>().is_ok());
        assert!("a".repeat(128).parse::<Tag>().is_ok());
        assert!("a".repeat(129).parse::<Tag>().is_err());
        assert!(".x".parse::<Tag>().is_err());
        assert!("-x".parse::<Tag>().is_err());
        assert!("".parse::<Tag>().is_err());
        assert!("a/b".parse::<Tag>().is_err());
    }
}
