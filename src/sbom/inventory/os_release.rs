//! `os-release(5)`: `KEY=value` lines, values optionally quoted with `"` or
//! `'` and backslash escapes inside double quotes; `#` comments.

use std::collections::BTreeMap;

/// The parsed fields, key → unquoted value.
pub fn parse(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        if k.is_empty() || !k.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            continue;
        }
        out.insert(k.to_string(), unquote(v));
    }
    out
}

fn unquote(v: &str) -> String {
    let v = v.trim();
    if let Some(inner) = v.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')) {
        return inner.to_string();
    }
    let Some(inner) = v.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return v.to_string();
    };
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoting() {
        let m = super::parse(
            "# c\nID=debian\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nX='a b'\nY=\"q\\\"q\"\n",
        );
        assert_eq!(m["ID"], "debian");
        assert_eq!(m["PRETTY_NAME"], "Debian GNU/Linux 12 (bookworm)");
        assert_eq!(m["X"], "a b");
        assert_eq!(m["Y"], "q\"q");
    }
}
