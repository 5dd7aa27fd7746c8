//! Content discovery (distribution-spec v1.1 "Content Discovery"): the tags
//! list (end-8a, end-8b) and the catalog (`/v2/_catalog`, the reference
//! registry's extension with the same paging).
//!
//! Owns: paging with `n` and `last`. Lists are in byte-wise ("ASCIIbetical")
//! order, as Go's `sort.Strings` in the reference registry and as the
//! spec's post-1.1.1 text allows; `last` is exclusive and need not exist.
//! An `n` that is not a non-negative decimal integer is 400
//! `PAGINATION_NUMBER_INVALID`; `n` is clamped to the page cap
//! ([`super::RegistryConfig::max_page`], default 1,000), which also applies
//! when `n` is absent, and a `Link` header names the next page whenever
//! entries remain. Never changes state.

use axum::http::Uri;
use serde::Serialize;

use serde_json::json;

use super::errors::{ErrorCode, RegistryError, Result};
use super::pull::repository;
use super::responses::JsonPage;
use super::scope::RepositoryScope;
use crate::names::RepositoryName;
use crate::state::StateStore;

/// The body of `GET /v2/<name>/tags/list`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct TagList {
    /// The repository name.
    pub name: String,
    /// Tags, sorted.
    pub tags: Vec<String>,
}

/// The body of `GET /v2/_catalog`.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Catalog {
    /// Repository names, sorted.
    pub repositories: Vec<String>,
}

/// The paging parameters of a listing request.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Paging {
    /// At most this many entries (`n`, clamped to the page cap).
    pub n: usize,
    /// Only entries after this one (`last`, exclusive).
    pub last: Option<String>,
}

impl Paging {
    /// Reads `n` and `last` from the query string (first occurrence wins;
    /// an undecodable query counts as absent). `n` is clamped to `max`, and
    /// is `max` when absent.
    ///
    /// Errors: 400 `PAGINATION_NUMBER_INVALID` when `n` is not a
    /// non-negative decimal integer (`-1`, `abc`, `1.5`).
    pub fn from_uri(uri: &Uri, max: usize) -> Result<Paging> {
        let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map(|q| q.0)
            .unwrap_or_default();
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        let n = match get("n") {
            None => max,
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                n.parse::<usize>().unwrap_or(usize::MAX).min(max)
            }
            Some(n) => {
                return Err(RegistryError::new(
                    ErrorCode::PaginationNumberInvalid,
                    json!({ "n": n }),
                ));
            }
        };
        Ok(Paging {
            n,
            last: get("last"),
        })
    }

    /// Applies the paging to a sorted list. Returns the page and, when
    /// entries remain after the page, the `last` value for the next page.
    /// `n = 0` gives an empty page and no next page.
    pub fn apply<'a>(
        &self,
        sorted: impl Iterator<Item = &'a str>,
    ) -> (Vec<String>, Option<String>) {
        if self.n == 0 {
            return (Vec::new(), None);
        }
        let mut rest = sorted
            .filter(|s| self.last.as_deref().is_none_or(|l| *s > l))
            .peekable();
        let page: Vec<String> = rest.by_ref().take(self.n).map(str::to_owned).collect();
        let next = match rest.peek() {
            Some(_) => page.last().cloned(),
            None => None,
        };
        (page, next)
    }
}

/// `GET /v2/<name>/tags/list[?n=&last=]`: 200 with [`TagList`] and, when
/// more tags remain, `Link: </v2/<name>/tags/list?n=<n>&last=<tag>>; rel="next"`.
///
/// Errors: `NAME_UNKNOWN` when the repository does not exist.
pub async fn tags_list(
    state: &StateStore,
    name: &RepositoryName,
    paging: &Paging,
) -> Result<JsonPage<TagList>> {
    let repo = repository(state, name).await?;
    let found = repo.tags(paging.last.as_deref(), paging.n + 1).await?;
    let (tags, next) = paging.apply(found.iter().map(|(t, _)| t.as_str()));
    Ok(JsonPage {
        body: TagList {
            name: name.to_string(),
            tags,
        },
        next: next.map(|last| format!("/v2/{name}/tags/list?n={}&last={last}", paging.n)),
    })
}

/// `GET /v2/_catalog[?n=&last=]`: 200 with [`Catalog`] and, when more
/// repositories remain, `Link: </v2/_catalog?n=<n>&last=<name>>; rel="next"`.
/// Tag and repository characters need no percent-encoding in a query.
///
/// Only repositories `scope` covers are listed (a user limited to
/// `stacks/` sees only those); paging runs over that filtered list, reading
/// the repository table in batches until a page (and one more name, for
/// `Link`) is found or the table ends.
pub async fn catalog(
    state: &StateStore,
    paging: &Paging,
    scope: &RepositoryScope,
) -> Result<JsonPage<Catalog>> {
    let snap = state.snapshot().await?;
    let want = paging.n.saturating_add(1);
    let batch = want.max(CATALOG_BATCH);
    let mut found: Vec<RepositoryName> = Vec::new();
    let mut after = paging.last.clone();
    loop {
        let read = state.repositories(&snap, after.as_deref(), batch).await?;
        let end = read.len() < batch;
        if let Some(last) = read.last() {
            after = Some(last.to_string());
        }
        found.extend(read.into_iter().filter(|r| scope.covers(r.as_str())));
        if end || found.len() >= want {
            break;
        }
    }
    let (repositories, next) = paging.apply(found.iter().map(|r| r.as_str()));
    Ok(JsonPage {
        body: Catalog { repositories },
        next: next.map(|last| format!("/v2/_catalog?n={}&last={last}", paging.n)),
    })
}

/// Repository names read per batch when filtering the catalog.
const CATALOG_BATCH: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    fn paging(q: &str) -> Paging {
        Paging::from_uri(&format!("/x?{q}").parse().unwrap(), 3).unwrap()
    }

    #[test]
    fn query() {
        assert_eq!(
            paging("n=2&last=b"),
            Paging {
                n: 2,
                last: Some("b".into())
            }
        );
        assert_eq!(paging("n=99999999999999999999999").n, 3, "clamped");
        assert_eq!(paging("").n, 3, "absent: the cap");
        assert_eq!(
            paging("last=a%2Fb"),
            Paging {
                n: 3,
                last: Some("a/b".into())
            }
        );
        for bad in ["n=-1", "n=abc", "n=1.5", "n=", "n=x&n=3", "n=+1"] {
            let err = Paging::from_uri(&format!("/x?{bad}").parse().unwrap(), 3).unwrap_err();
            assert_eq!(err.status(), 400, "{bad}");
            assert!(err.body().contains("PAGINATION_NUMBER_INVALID"), "{bad}");
        }
    }

    #[test]
    fn pages() {
        let all = ["a", "b", "c", "d"];
        let run = |q: &str| paging(q).apply(all.iter().copied());
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(run(""), (v(&["a", "b", "c"]), Some("c".into())));
        assert_eq!(run("n=0"), (v(&[]), None));
        assert_eq!(run("n=2"), (v(&["a", "b"]), Some("b".into())));
        assert_eq!(run("n=2&last=b"), (v(&["c", "d"]), None));
        assert_eq!(run("n=4&last=a"), (v(&["b", "c", "d"]), None));
        assert_eq!(run("last=bb"), (v(&["c", "d"]), None));
        assert_eq!(run("last=z&n=1"), (v(&[]), None));
    }
}
