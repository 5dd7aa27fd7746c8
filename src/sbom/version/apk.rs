//! Alpine (apk) version ordering, as `apk version -t A B` decides it.
//!
//! The grammar is `digits{.digits}...{letter}{_suffix{digits}}...{~hash}{-rN}`
//! (apk-tools' `version.c`, derived from Gentoo's). Both versions are read
//! token by token; while the token kinds agree their values are compared:
//! numbers as numbers, except a dotted component with a leading zero in
//! either version, which compares as a string; a letter by its code; a
//! suffix by its rank (`alpha` < `beta` < `pre` < `rc` < none < `cvs` <
//! `svn` < `git` < `hg` < `p`); a hash as a string. When one version runs
//! out (or turns invalid) first, the longer one is greater, unless what it
//! has next is a pre-release suffix; otherwise the token kind that comes
//! later in the grammar makes its version the smaller one.

use std::cmp::Ordering;

/// Token kinds in grammar order (the order matters: see [`compare`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Initial,
    Digit,
    Letter,
    Suffix,
    SuffixNo,
    Hash,
    Revision,
    End,
    Invalid,
}

/// Suffix ranks; `NONE` sits between the pre-release and post-release ones.
const PRE: [&str; 4] = ["alpha", "beta", "pre", "rc"];
const POST: [&str; 5] = ["cvs", "svn", "git", "hg", "p"];
const NONE: usize = PRE.len();

struct Token<'a> {
    kind: Kind,
    number: u64,
    text: &'a [u8],
    suffix: usize,
}

struct Lexer<'a> {
    rest: &'a [u8],
}

impl<'a> Lexer<'a> {
    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a [u8] {
        let n = self.rest.iter().take_while(|c| f(**c)).count();
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        head
    }

    fn digits(&mut self, kind: Kind) -> Token<'a> {
        let text = self.take_while(|c| c.is_ascii_digit());
        let number = text.iter().fold(0u64, |n, d| {
            n.wrapping_mul(10).wrapping_add(u64::from(d - b'0'))
        });
        Token {
            kind: if text.is_empty() { Kind::Invalid } else { kind },
            number,
            text,
            suffix: 0,
        }
    }

    fn first(&mut self) -> Token<'a> {
        self.digits(Kind::Initial)
    }

    /// The token after one of kind `prev`.
    fn next(&mut self, prev: Kind) -> Token<'a> {
        let invalid = Token {
            kind: Kind::Invalid,
            number: 0,
            text: b"",
            suffix: 0,
        };
        let Some(&c) = self.rest.first() else {
            return Token {
                kind: Kind::End,
                ..invalid
            };
        };
        match c {
            b'a'..=b'z' if prev <= Kind::Digit => {
                let text = &self.rest[..1];
                self.rest = &self.rest[1..];
                Token {
                    kind: Kind::Letter,
                    number: u64::from(c),
                    text,
                    suffix: 0,
                }
            }
            b'.' | b'0'..=b'9' => {
                if c == b'.' {
                    if prev > Kind::Digit {
                        return invalid;
                    }
                    self.rest = &self.rest[1..];
                }
                match prev {
                    Kind::Initial | Kind::Digit => self.digits(Kind::Digit),
                    Kind::Suffix if c != b'.' => self.digits(Kind::SuffixNo),
                    _ => invalid,
                }
            }
            b'_' if prev <= Kind::SuffixNo => {
                self.rest = &self.rest[1..];
                let text = self.take_while(|c| c.is_ascii_lowercase());
                let rank = PRE.iter().position(|s| s.as_bytes() == text).or_else(|| {
                    POST.iter()
                        .position(|s| s.as_bytes() == text)
                        .map(|i| NONE + 1 + i)
                });
                match rank {
                    Some(suffix) => Token {
                        kind: Kind::Suffix,
                        number: 0,
                        text,
                        suffix,
                    },
                    None => invalid,
                }
            }
            b'~' if prev < Kind::Hash => {
                self.rest = &self.rest[1..];
                let text = self.take_while(|c| c.is_ascii_hexdigit());
                if text.is_empty() {
                    return invalid;
                }
                Token {
                    kind: Kind::Hash,
                    number: 0,
                    text,
                    suffix: 0,
                }
            }
            b'-' if prev < Kind::Revision && self.rest.starts_with(b"-r") => {
                self.rest = &self.rest[2..];
                self.digits(Kind::Revision)
            }
            _ => invalid,
        }
    }
}

fn compare_tokens(a: &Token<'_>, b: &Token<'_>) -> Ordering {
    match a.kind {
        Kind::Digit if a.text.first() == Some(&b'0') || b.text.first() == Some(&b'0') => {
            a.text.cmp(b.text)
        }
        Kind::Initial | Kind::Digit | Kind::SuffixNo | Kind::Revision | Kind::Letter => {
            a.number.cmp(&b.number)
        }
        Kind::Suffix => a.suffix.cmp(&b.suffix),
        _ => a.text.cmp(b.text),
    }
}

/// Orders two apk versions as `apk version -t A B` prints `<`, `=` or `>`.
pub fn compare(a: &str, b: &str) -> Ordering {
    let (mut la, mut lb) = (Lexer { rest: a.as_bytes() }, Lexer { rest: b.as_bytes() });
    let (mut ta, mut tb) = (la.first(), lb.first());
    while ta.kind == tb.kind && ta.kind < Kind::End {
        let r = compare_tokens(&ta, &tb);
        if r != Ordering::Equal {
            return r;
        }
        ta = la.next(ta.kind);
        tb = lb.next(tb.kind);
    }
    if ta.kind == tb.kind {
        return Ordering::Equal;
    }
    if ta.kind == Kind::Suffix && ta.suffix < NONE {
        return Ordering::Less;
    }
    if tb.kind == Kind::Suffix && tb.suffix < NONE {
        return Ordering::Greater;
    }
    // The kind later in the grammar (the end above all) is the smaller version.
    tb.kind.cmp(&ta.kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Ordering::*;

    #[test]
    fn grammar_cases() {
        for (a, b, want) in [
            ("1.0", "1.0-r0", Less),
            ("1.2.3_rc1", "1.2.3", Less),
            ("1.2.3_p1", "1.2.3", Greater),
            ("3.1.4-r0", "3.1.4-r1", Less),
            ("1.02", "1.1", Less),
            ("1.0a", "1.0", Greater),
            (
                "1.0.0_pre20191002222144-r0",
                "1.0.0_pre20210530193627-r0",
                Less,
            ),
        ] {
            assert_eq!(compare(a, b), want, "{a} vs {b}");
            assert_eq!(compare(b, a), want.reverse(), "{b} vs {a}");
        }
    }
}
