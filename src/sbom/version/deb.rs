//! Debian version ordering, as `dpkg --compare-versions` decides it
//! (deb-version(7), Debian Policy §5.6.12): `[epoch:]upstream[-revision]`;
//! epochs compare as numbers, then the upstream version, then the revision,
//! each by the same rule: alternate runs of non-digits (compared character
//! by character, `~` before anything, even the end, then the end, then
//! letters, then everything else by code) and runs of digits (compared as
//! numbers).

use std::cmp::Ordering;

/// A version split into its three parts.
struct Parts<'a> {
    epoch: u64,
    upstream: &'a str,
    revision: &'a str,
}

/// Splits like dpkg's `parseversion`: the epoch is what precedes the first
/// `:` (0 when absent or not a number), the revision what follows the last
/// `-` (empty when absent). Surrounding white space is ignored.
fn parts(v: &str) -> Parts<'_> {
    let v = v.trim();
    let (epoch, rest) = match v.split_once(':') {
        Some((e, r)) => (e.parse().unwrap_or(0), r),
        None => (0, v),
    };
    let (upstream, revision) = match rest.rfind('-') {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, ""),
    };
    Parts {
        epoch,
        upstream,
        revision,
    }
}

/// The weight of one non-digit character (`None`: the end of the run).
fn order(c: Option<u8>) -> i32 {
    match c {
        Some(b'~') => -1,
        None => 0,
        Some(c) if c.is_ascii_digit() => 0,
        Some(c) if c.is_ascii_alphabetic() => i32::from(c),
        Some(c) => i32::from(c) + 256,
    }
}

/// Compares one part (upstream or revision) as dpkg's `verrevcmp`.
fn compare_part(a: &[u8], b: &[u8]) -> Ordering {
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        // The non-digit run.
        while (i < a.len() && !a[i].is_ascii_digit()) || (j < b.len() && !b[j].is_ascii_digit()) {
            let ac = a.get(i).copied().filter(|c| !c.is_ascii_digit());
            let bc = b.get(j).copied().filter(|c| !c.is_ascii_digit());
            let (x, y) = (order(ac), order(bc));
            if x != y {
                return x.cmp(&y);
            }
            i += usize::from(ac.is_some());
            j += usize::from(bc.is_some());
        }
        // The digit run: leading zeros do not count, then length, then digits.
        while a.get(i) == Some(&b'0') {
            i += 1;
        }
        while b.get(j) == Some(&b'0') {
            j += 1;
        }
        let (si, sj) = (i, j);
        while a.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        while b.get(j).is_some_and(u8::is_ascii_digit) {
            j += 1;
        }
        let by_len = (i - si).cmp(&(j - sj));
        if by_len != Ordering::Equal {
            return by_len;
        }
        let by_digits = a[si..i].cmp(&b[sj..j]);
        if by_digits != Ordering::Equal {
            return by_digits;
        }
    }
    Ordering::Equal
}

/// Orders two Debian versions exactly as `dpkg --compare-versions A lt B`
/// (and `eq`, `gt`) would.
pub fn compare(a: &str, b: &str) -> Ordering {
    let (a, b) = (parts(a), parts(b));
    a.epoch
        .cmp(&b.epoch)
        .then_with(|| compare_part(a.upstream.as_bytes(), b.upstream.as_bytes()))
        .then_with(|| compare_part(a.revision.as_bytes(), b.revision.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::*;

    #[test]
    fn policy_examples() {
        for (a, b, want) in [
            ("1.0~rc1", "1.0", Less),
            ("1.0", "1.0-0", Equal),
            ("1:0.1", "2.0", Greater),
            ("3.0.11-1~deb12u2", "3.0.11-1", Less),
            ("3.0.11-1+deb12u1", "3.0.11-1", Greater),
            ("1.2a", "1.2+", Less),
            ("1.002", "1.2", Equal),
            ("1.0~~", "1.0~", Less),
            ("2.36-9+deb12u4", "2.36-9+deb12u10", Less),
        ] {
            assert_eq!(compare(a, b), want, "{a} vs {b}");
            assert_eq!(compare(b, a), want.reverse(), "{b} vs {a}");
        }
    }
}
