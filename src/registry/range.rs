//! Byte range requests (RFC 9110 §14): parsing `Range` and `If-Range` for
//! blob downloads.
//!
//! Owns: deciding whether a GET gets the whole blob, one byte range, or
//! 416. Never reads content. Only single ranges are served: multiple ranges,
//! other units and malformed headers are ignored and the whole representation
//! is sent (§14.2 allows a server to ignore `Range`).

use axum::http::{HeaderMap, header};

/// What to send for a GET of a representation of a known size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeOutcome {
    /// 200 with the whole representation.
    Full,
    /// 206 with bytes `start..=end` (inclusive, `end < size`).
    Partial {
        /// First byte offset.
        start: u64,
        /// Last byte offset, inclusive.
        end: u64,
    },
    /// 416 with `Content-Range: bytes */<size>`.
    Unsatisfiable,
}

impl RangeOutcome {
    /// Evaluates the request's `Range` against a representation of `size`
    /// bytes whose strong entity tag is `etag` (with quotes), per RFC 9110
    /// §14.2 and §13.1.5:
    /// - no `Range`, more than one `Range` field, a unit other than `bytes`,
    ///   several ranges or bad syntax: [`RangeOutcome::Full`];
    /// - `If-Range` present and not exactly `etag` (dates never match: airlock
    ///   sends no `Last-Modified`): [`RangeOutcome::Full`];
    /// - `bytes=a-b`, `bytes=a-`: `b` is clamped to `size - 1`; `a >= size`
    ///   is [`RangeOutcome::Unsatisfiable`], and so is `b < a` (an invalid
    ///   range-spec, §14.1.1, which §14.2 lets a server reject);
    /// - `bytes=-n`: the last `n` bytes (all of them when `n >= size`);
    ///   `n = 0` is unsatisfiable; for an empty representation it is ignored.
    pub fn evaluate(headers: &HeaderMap, size: u64, etag: &str) -> RangeOutcome {
        let mut values = headers.get_all(header::RANGE).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return RangeOutcome::Full;
        };
        if let Some(if_range) = headers.get(header::IF_RANGE)
            && if_range.as_bytes() != etag.as_bytes()
        {
            return RangeOutcome::Full;
        }
        match value.to_str().ok().and_then(parse) {
            Some(spec) => spec.resolve(size),
            None => RangeOutcome::Full,
        }
    }
}

/// One syntactically valid `range-spec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    /// `first-last` (`last` = None for `first-`).
    FromTo(u64, Option<u64>),
    /// `first-last` with `last < first`: syntactically a range, but invalid
    /// (§14.1.1); rejected with 416, as §14.2 allows.
    Backwards,
    /// `-suffix_length`.
    Suffix(u64),
}

impl Spec {
    fn resolve(self, size: u64) -> RangeOutcome {
        match self {
            Spec::FromTo(first, last) => {
                if first >= size {
                    return RangeOutcome::Unsatisfiable;
                }
                let end = last.map_or(size - 1, |l| l.min(size - 1));
                RangeOutcome::Partial { start: first, end }
            }
            Spec::Backwards | Spec::Suffix(0) => RangeOutcome::Unsatisfiable,
            Spec::Suffix(_) if size == 0 => RangeOutcome::Full,
            Spec::Suffix(n) => RangeOutcome::Partial {
                start: size.saturating_sub(n),
                end: size - 1,
            },
        }
    }
}

/// Parses `bytes=<one range-spec>`; `None` for anything else.
fn parse(value: &str) -> Option<Spec> {
    let (unit, set) = value.trim().split_once('=')?;
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return None;
    }
    let set = set.trim();
    if set.contains(',') {
        return None;
    }
    let (first, last) = set.split_once('-')?;
    let (first, last) = (first.trim(), last.trim());
    match (first.is_empty(), last.is_empty()) {
        (true, true) => None,
        (true, false) => Some(Spec::Suffix(number(last)?)),
        (false, true) => Some(Spec::FromTo(number(first)?, None)),
        (false, false) => {
            let (a, b) = (number(first)?, number(last)?);
            Some(if b >= a {
                Spec::FromTo(a, Some(b))
            } else {
                Spec::Backwards
            })
        }
    }
}

/// A decimal `1*DIGIT`, saturating at `u64::MAX` (a huge first byte is then
/// simply beyond the representation, a huge last byte is clamped).
fn number(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(s.bytes().fold(0u64, |n, b| {
        n.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const ETAG: &str = "\"sha256:x\"";

    fn eval(range: &str, size: u64) -> RangeOutcome {
        let mut h = HeaderMap::new();
        h.insert(header::RANGE, HeaderValue::from_str(range).unwrap());
        RangeOutcome::evaluate(&h, size, ETAG)
    }

    fn part(start: u64, end: u64) -> RangeOutcome {
        RangeOutcome::Partial { start, end }
    }

    #[test]
    fn single_ranges() {
        assert_eq!(eval("bytes=0-0", 10), part(0, 0));
        assert_eq!(eval("bytes=2-5", 10), part(2, 5));
        assert_eq!(eval("bytes=2-", 10), part(2, 9));
        assert_eq!(eval("bytes=-3", 10), part(7, 9));
        assert_eq!(eval("bytes=-30", 10), part(0, 9));
        assert_eq!(eval("bytes=5-99", 10), part(5, 9));
        assert_eq!(eval("BYTES = 1-2 ", 10), part(1, 2));
        assert_eq!(eval("bytes=9-99999999999999999999999", 10), part(9, 9));
    }

    #[test]
    fn unsatisfiable() {
        assert_eq!(eval("bytes=10-", 10), RangeOutcome::Unsatisfiable);
        assert_eq!(eval("bytes=10-20", 10), RangeOutcome::Unsatisfiable);
        assert_eq!(eval("bytes=-0", 10), RangeOutcome::Unsatisfiable);
        assert_eq!(eval("bytes=500-0", 1000), RangeOutcome::Unsatisfiable);
        assert_eq!(eval("bytes=5-4", 10), RangeOutcome::Unsatisfiable);
        assert_eq!(eval("bytes=0-", 0), RangeOutcome::Unsatisfiable);
        assert_eq!(
            eval("bytes=99999999999999999999999-", 10),
            RangeOutcome::Unsatisfiable
        );
    }

    #[test]
    fn ignored() {
        for r in [
            "bytes=0-1,3-4",
            "bytes=0-1,",
            "bytes=-",
            "bytes=a-b",
            "bytes=1-2-3",
            "items=0-1",
            "bytes 0-1",
            "bytes=+1-2",
            "",
        ] {
            assert_eq!(eval(r, 10), RangeOutcome::Full, "{r:?}");
        }
        assert_eq!(eval("bytes=-5", 0), RangeOutcome::Full);
        assert_eq!(
            RangeOutcome::evaluate(&HeaderMap::new(), 10, ETAG),
            RangeOutcome::Full
        );
    }

    #[test]
    fn two_range_fields_are_ignored() {
        let mut h = HeaderMap::new();
        h.append(header::RANGE, HeaderValue::from_static("bytes=0-1"));
        h.append(header::RANGE, HeaderValue::from_static("bytes=2-3"));
        assert_eq!(RangeOutcome::evaluate(&h, 10, ETAG), RangeOutcome::Full);
    }

    #[test]
    fn if_range() {
        let mut h = HeaderMap::new();
        h.insert(header::RANGE, HeaderValue::from_static("bytes=0-1"));
        h.insert(header::IF_RANGE, HeaderValue::from_static(ETAG));
        assert_eq!(RangeOutcome::evaluate(&h, 10, ETAG), part(0, 1));
        h.insert(header::IF_RANGE, HeaderValue::from_static("\"other\""));
        assert_eq!(RangeOutcome::evaluate(&h, 10, ETAG), RangeOutcome::Full);
        h.insert(
            header::IF_RANGE,
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(RangeOutcome::evaluate(&h, 10, ETAG), RangeOutcome::Full);
    }
}
