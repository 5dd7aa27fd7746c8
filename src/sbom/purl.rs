//! Package URLs (the purl specification): `pkg:TYPE/NAMESPACE/NAME@VERSION?QUALIFIERS`,
//! each component percent-encoded except `A-Z a-z 0-9 . - _ ~`, qualifiers
//! sorted by key.

/// Writes a purl. `qualifiers` are (key, value) pairs; empty values are left out.
pub fn format(
    kind: &str,
    namespace: &str,
    name: &str,
    version: &str,
    qualifiers: &[(&str, String)],
) -> String {
    let mut out = if namespace.is_empty() {
        format!("pkg:{kind}/{}", encode(name))
    } else {
        format!("pkg:{kind}/{}/{}", encode(namespace), encode(name))
    };
    if !version.is_empty() {
        out.push('@');
        out.push_str(&encode(version));
    }
    let mut q: Vec<_> = qualifiers.iter().filter(|(_, v)| !v.is_empty()).collect();
    q.sort_by_key(|(k, _)| *k);
    for (i, (k, v)) in q.iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        out.push_str(k);
        out.push('=');
        out.push_str(&encode(v));
    }
    out
}

fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A parsed purl.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purl {
    /// `deb`, `apk`, ...
    pub kind: String,
    /// `debian`, `ubuntu`, `alpine` (may be empty).
    pub namespace: String,
    /// Package name.
    pub name: String,
    /// Version (may be empty).
    pub version: String,
    /// Qualifiers, key → decoded value.
    pub qualifiers: std::collections::BTreeMap<String, String>,
}

/// Parses a purl; `None` when it is not `pkg:TYPE/.../NAME[@VERSION][?Q][#S]`.
pub fn parse(s: &str) -> Option<Purl> {
    let rest = s.strip_prefix("pkg:")?;
    let rest = rest.split_once('#').map_or(rest, |(r, _)| r);
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (kind, path) = rest.trim_start_matches('/').split_once('/')?;
    let (path, version) = match path.rsplit_once('@') {
        Some((p, v)) => (p, decode(v)),
        None => (path, String::new()),
    };
    let path = path.trim_end_matches('/');
    let (namespace, name) = match path.rsplit_once('/') {
        Some((ns, n)) => (decode(ns), decode(n)),
        None => (String::new(), decode(path)),
    };
    if name.is_empty() {
        return None;
    }
    let qualifiers = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_ascii_lowercase(), decode(v)))
        .collect();
    Some(Purl {
        kind: kind.to_ascii_lowercase(),
        namespace,
        name,
        version,
        qualifiers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = format(
            "deb",
            "debian",
            "zlib1g",
            "1:1.2.13.dfsg-1+b1",
            &[("distro", "debian-12".into()), ("arch", "amd64".into())],
        );
        assert_eq!(
            p,
            "pkg:deb/debian/zlib1g@1%3A1.2.13.dfsg-1%2Bb1?arch=amd64&distro=debian-12"
        );
        let back = parse(&p).unwrap();
        assert_eq!(back.version, "1:1.2.13.dfsg-1+b1");
        assert_eq!(back.qualifiers["arch"], "amd64");
        assert_eq!(
            format(
                "deb",
                "debian",
                "openssl",
                "3.0.11-1~deb12u2",
                &[("arch", "amd64".into()), ("distro", "debian-12".into())]
            ),
            "pkg:deb/debian/openssl@3.0.11-1~deb12u2?arch=amd64&distro=debian-12"
        );
    }
}
