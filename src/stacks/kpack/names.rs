//! Names in the kpack documents, checked as their readers check them, so
//! that nothing airlock prints is refused after it was printed (or after a
//! token user was made for it).
//!
//! Owns:
//! - object names: RFC 1123 subdomains, as the Kubernetes API server
//!   requires of a ClusterStack, ServiceAccount and Secret (`IsDNS1123Subdomain`:
//!   at most 253 of `[a-z0-9.-]`, each dot-separated part starting and
//!   ending with a letter or digit); a stack's object name is its name with
//!   `_` written `-`, or one given with `--name`;
//! - namespaces: RFC 1123 labels (`IsDNS1123Label`: at most 63 of
//!   `[a-z0-9-]`, starting and ending with a letter or digit);
//! - the registry host: what go-containerregistry's `name.NewRepository`
//!   (which kpack uses for every image reference) reads as the registry of
//!   `HOST/REPOSITORY@DIGEST`: a first component holding `.` or `:`, that is
//!   an RFC 3986 authority (`url.Parse("//"+host).Host == host`). airlock
//!   accepts a host name, an IPv4 address or a bracketed IPv6 address, with
//!   an optional port; a scheme, a path, `localhost` without a port (Docker
//!   Hub's `index.docker.io/localhost/...` to kpack) and spaces are refused;
//! - repositories: go-containerregistry reads 2 to 255 characters.

use super::super::StackError;
use super::super::table::{StackName, StackTable};

/// Whether `s` is an RFC 1123 subdomain, as the Kubernetes API server
/// requires of most object names (ClusterStack, ServiceAccount, Secret).
pub fn is_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(|part| is_label_chars(part, 253))
}

/// Whether `s` is an RFC 1123 label, as the API server requires of a namespace.
pub fn is_label(s: &str) -> bool {
    is_label_chars(s, 63)
}

fn is_label_chars(s: &str, max: usize) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= max
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

/// The ClusterStack name for stack `stack`: `requested` when given, else
/// the stack name with each `_` written `-`.
///
/// Errors: [`StackError::Invalid`] when the name is not an RFC 1123
/// subdomain, or a stack named with `_` would get the name of another
/// stack of `table` (the ClusterStack is cluster-wide: one would replace
/// the other; the stack whose name is already valid keeps it).
pub fn object_name(
    table: &StackTable,
    stack: &StackName,
    requested: Option<&str>,
) -> Result<String, StackError> {
    let mapped = |n: &StackName| n.as_str().replace('_', "-");
    let name = requested.map_or_else(|| mapped(stack), str::to_string);
    if !is_subdomain(&name) {
        let why = match requested {
            Some(_) => format!("--name {name:?}"),
            None => format!("stack {stack} (as {name:?})"),
        };
        return Err(StackError::Invalid(format!(
            "{why} is not a Kubernetes object name (RFC 1123: at most 253 of lowercase letters, digits, '-' and '.', each '.'-separated part starting and ending with a letter or digit): give one with --name"
        )));
    }
    // A stack whose name is already valid keeps it; the one written with
    // `_` gives way.
    if requested.is_none()
        && name != stack.as_str()
        && let Some(other) = table
            .stacks
            .keys()
            .find(|other| *other != stack && mapped(other) == name)
    {
        return Err(StackError::Invalid(format!(
            "stacks {stack} and {other} would both be ClusterStack {name:?} ('_' is written '-'): give this one another name with --name"
        )));
    }
    Ok(name)
}

/// Checks a Kubernetes namespace. Errors: [`StackError::Invalid`] when it
/// is not an RFC 1123 label.
pub fn check_namespace(namespace: &str) -> Result<(), StackError> {
    if is_label(namespace) {
        return Ok(());
    }
    Err(StackError::Invalid(format!(
        "--namespace {namespace:?} is not a Kubernetes namespace (RFC 1123 label: at most 63 of lowercase letters, digits and '-', starting and ending with a letter or digit)"
    )))
}

/// The registry `HOST[:PORT]` builders pull from (one trailing `/`
/// dropped), checked as go-containerregistry reads it (module docs).
///
/// Errors: [`StackError::Invalid`] naming what is wrong and what to give.
pub fn registry(given: &str) -> Result<String, StackError> {
    let r = given.strip_suffix('/').unwrap_or(given);
    let bad = |why: &str| {
        Err(StackError::Invalid(format!(
            "--registry {given:?}: {why}; give HOST[:PORT] as builders reach airlock (e.g. airlock.internal:5000)"
        )))
    };
    if let Some((scheme, _)) = r.split_once("://") {
        return bad(&format!(
            "a registry is not a URL (kpack would read {:?} as the registry): drop {scheme}://",
            format!("{scheme}:")
        ));
    }
    if r.contains('/') {
        return bad("a path after the host is not part of a registry");
    }
    if let Some(c) = r
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-.:[]".contains(*c)))
    {
        return bad(&format!(
            "{c:?} is not in a host name (letters, digits, '-' and '.'), an IP address or a port"
        ));
    }
    if !r.contains('.') && !r.contains(':') {
        return bad(
            "an image reference's first part is its registry only when it holds '.' or ':' (kpack would pull from Docker Hub); add the port (localhost:5000)",
        );
    }
    let (host, port) = if let Some(rest) = r.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return bad("an IPv6 address without its closing ']'");
        };
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return bad("not an IPv6 address between '[' and ']'");
        }
        match after {
            "" => (ip, None),
            p => match p.strip_prefix(':') {
                Some(port) => (ip, Some(port)),
                None => return bad("only :PORT may follow ']'"),
            },
        }
    } else {
        match r.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (r, None),
        }
    };
    if let Some(port) = port
        && !(port.len() <= 5
            && port.bytes().all(|c| c.is_ascii_digit())
            && port.parse::<u32>().is_ok_and(|p| (1..=65535).contains(&p)))
    {
        return bad(&format!("port {port:?} is not 1 to 65535"));
    }
    if !r.starts_with('[') {
        let label_ok = |l: &str| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        };
        if host.len() > 253 || !host.split('.').all(label_ok) {
            return bad(&format!(
                "{host:?} is not a host name or IPv4 address (letters, digits and '-', in '.'-separated parts)"
            ));
        }
    }
    Ok(r.to_string())
}

/// Checks that kpack can read `REGISTRY/repository@DIGEST`:
/// go-containerregistry takes repositories of 2 to 255 characters.
///
/// Errors: [`StackError::Invalid`] naming the repository.
pub fn check_repository(repository: &str) -> Result<(), StackError> {
    if (2..=255).contains(&repository.len()) {
        return Ok(());
    }
    Err(StackError::Invalid(format!(
        "repository {repository:?}: kpack (go-containerregistry) reads repositories of 2 to 255 characters: push the builder images to another repository and promote again"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_as_go_containerregistry_reads_them() {
        for ok in [
            "airlock.internal:5000",
            "airlock.internal",
            "127.0.0.1:5077",
            "localhost:5000",
            "[::1]:5000",
            "[fd00::1]",
            "Airlock.Internal",
            "airlock.internal:5000/",
        ] {
            assert!(registry(ok).is_ok(), "{ok}: {:?}", registry(ok));
        }
        assert_eq!(registry("a.b:1/").unwrap(), "a.b:1");
        for (bad, why) in [
            ("https://airlock.internal", "drop https://"),
            ("localhost", "Docker Hub"),
            ("airlock", "Docker Hub"),
            ("airlock internal", "' ' is not in a host name"),
            ("air_lock.internal", "'_' is not in a host name"),
            ("airlock.internal:", "port \"\""),
            ("airlock.internal:99999", "port \"99999\""),
            ("airlock.internal:http", "port \"http\""),
            ("airlock.internal/v2", "path"),
            ("a..b", "not a host name"),
            ("-a.b", "not a host name"),
            ("[::1", "closing"),
            ("[zz]:1", "IPv6"),
            ("[::1]x", "only :PORT"),
            ("", "Docker Hub"),
        ] {
            let e = registry(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn rfc_1123_names() {
        for ok in ["a", "my-stack", "a.b-c", "0x"] {
            assert!(is_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "my_stack",
            "A",
            "a.-b",
            "a..b",
            "-a",
            "a-",
            &"a".repeat(254),
        ] {
            assert!(!is_subdomain(bad), "{bad}");
        }
        for ok in ["builds", "b-1", &"a".repeat(63)] {
            assert!(is_label(ok), "{ok}");
        }
        for bad in ["Builds", "b_x", "a.b", "-b", &"a".repeat(64)] {
            assert!(!is_label(bad), "{bad}");
        }
    }
}
