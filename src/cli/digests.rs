//! Digests typed at the command line: a full digest (`sha256:<hex>`), or a
//! unique prefix of 12 or more hex digits of one the command knows (with or
//! without `sha256:`), as docker accepts short image ids. Every command that
//! takes a digest resolves it here.

use anyhow::{Result, bail};

use airlock::digest::Digest;

/// Fewest hex digits a prefix must have.
pub const MIN_PREFIX: usize = 12;

/// Resolves `typed` against `known`: a full digest is itself (known or
/// not); a prefix must match exactly one known digest.
///
/// Errors: not hex, shorter than [`MIN_PREFIX`], matching nothing, or
/// matching several (the error lists them).
pub fn resolve<'a>(typed: &str, known: impl IntoIterator<Item = &'a Digest>) -> Result<Digest> {
    if let Ok(d) = typed.parse::<Digest>() {
        return Ok(d);
    }
    let (alg, hex) = match typed.split_once(':') {
        Some((a, h)) => (Some(a), h),
        None => (None, typed),
    };
    if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("{typed:?} is not a digest (sha256:<64 hex digits>) or a prefix of one");
    }
    if hex.len() < MIN_PREFIX {
        bail!(
            "digest prefix {typed:?} is too short: give at least {MIN_PREFIX} hex digits, or the whole digest"
        );
    }
    let hex = hex.to_ascii_lowercase();
    let mut found: Vec<&Digest> = known
        .into_iter()
        .filter(|d| alg.is_none_or(|a| a == d.algorithm().name()) && d.hex().starts_with(&hex))
        .collect();
    found.sort_by_key(|d| d.text());
    found.dedup();
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => bail!("no known digest starts with {typed}"),
        many => bail!(
            "digest prefix {typed} is ambiguous: {}",
            many.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let a: Digest = format!("sha256:29412f6719be{}", "0".repeat(52))
            .parse()
            .unwrap();
        let b: Digest = format!("sha256:29412f6719bf{}", "1".repeat(52))
            .parse()
            .unwrap();
        let known = [a.clone(), b.clone()];
        assert_eq!(resolve("29412f6719be", &known).unwrap(), a);
        assert_eq!(resolve("sha256:29412F6719BF", &known).unwrap(), b);
        assert_eq!(resolve(&a.to_string(), []).unwrap(), a);
        let e = resolve("29412f6719b", &known).unwrap_err().to_string();
        assert!(e.contains("too short"), "{e}");
        let e = resolve("29412f6719b0", &known).unwrap_err().to_string();
        assert!(e.contains("no known digest"), "{e}");
        let two = [
            a.clone(),
            format!("sha256:29412f6719be{}", "2".repeat(52))
                .parse()
                .unwrap(),
        ];
        let e = resolve("29412f6719be", &two).unwrap_err().to_string();
        assert!(e.contains("ambiguous") && e.contains(&a.to_string()), "{e}");
        assert!(resolve("xyz", &known).is_err());
    }
}
