//! Content discovery (distribution-spec v1.1 "Content Discovery"): the tags
//! list (end-8a, end-8b) and the catalog (`/v2/_catalog`, the reference
//! registry's extension with the same paging).
//!
//! Owns: paging with `n` and `last`. Lists are in byte-wise ("ASCIIbetical")
//! order, as Go's `sort.Strings` in the reference registry and as the
//! spec's post-1.1.1 text allows; `last` is exclusive and need not exist.
//! An `n` that is not a non-negative decimal integer is ignored (the whole
//! rest of the list is sent). Never changes state.

use axum::http::Uri;
use serde::Serialize;

use super::errors::Result;
use super::pull::repository;
use super::responses::JsonPage;
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
    /// At most this many entries (`n`); `None`: all remaining.
    pub n: Option<usize>,
    /// Only entries after this one (`last`, exclusive).
    pub last: Option<String>,
}

impl Paging {
    /// Reads `n` and `last` from the query string (first occurrence wins;
    /// an undecodable query counts as absent).
    pub fn from_uri(uri: &Uri) -> Paging {
        let pairs = axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map(|q| q.0)
            .unwrap_or_default();
        let get = |k: &str| {
            pairs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
        };
        Paging {
            n: get("n").and_then(|n| n.parse().ok()),
            last: get("last"),
        }
    }

    /// Applies the paging to a sorted list. Returns the page and, when `n`
    /// was given and entries remain after the page, the `last` value for
    /// the next page. `n = 0` gives an empty page and no next page.
    pub fn apply<'a>(
        &self,
        sorted: impl Iterator<Item = &'a str>,
    ) -> (Vec<String>, Option<String>) {
        let mut rest = sorted
            .filter(|s| self.last.as_deref().is_none_or(|l| *s > l))
            .peekable();
        match self.n {
            Some(0) => (Vec::new(), None),
            Some(n) => {
                let page: Vec<String> = rest.by_ref().take(n).map(str::to_owned).collect();
                let next = match rest.peek() {
                    Some(_) => page.last().cloned(),
                    None => None,
                };
                (page, next)
            }
            None => (rest.map(str::to_owned).collect(), None),
        }
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
    let (tags, next) = paging.apply(repo.tags.keys().map(|t| t.as_str()));
    Ok(JsonPage {
        body: TagList {
            name: name.to_string(),
            tags,
        },
        next: next.map(|last| {
            format!(
                "/v2/{name}/tags/list?n={}&last={last}",
                paging.n.unwrap_or(0)
            )
        }),
    })
}

/// `GET /v2/_catalog[?n=&last=]`: 200 with [`Catalog`] and, when more
/// repositories remain, `Link: </v2/_catalog?n=<n>&last=<name>>; rel="next"`.
/// Tag and repository characters need no percent-encoding in a query.
pub async fn catalog(state: &StateStore, paging: &Paging) -> Result<JsonPage<Catalog>> {
    let snap = state.snapshot().await?;
    let (repositories, next) = paging.apply(snap.table.repositories.keys().map(|r| r.as_str()));
    Ok(JsonPage {
        body: Catalog { repositories },
        next: next.map(|last| format!("/v2/_catalog?n={}&last={last}", paging.n.unwrap_or(0))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paging(q: &str) -> Paging {
        Paging::from_uri(&format!("/x?{q}").parse().unwrap())
    }

    #[test]
    fn query() {
        assert_eq!(
            paging("n=2&last=b"),
            Paging {
                n: Some(2),
                last: Some("b".into())
            }
        );
        assert_eq!(paging("n=-1"), Paging::default());
        assert_eq!(paging("n=x&n=3"), Paging::default());
        assert_eq!(
            paging("last=a%2Fb"),
            Paging {
                n: None,
                last: Some("a/b".into())
            }
        );
        assert_eq!(Paging::from_uri(&"/x".parse().unwrap()), Paging::default());
    }

    #[test]
    fn pages() {
        let all = ["a", "b", "c", "d"];
        let run = |q: &str| paging(q).apply(all.iter().copied());
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(run(""), (v(&all), None));
        assert_eq!(run("n=0"), (v(&[]), None));
        assert_eq!(run("n=2"), (v(&["a", "b"]), Some("b".into())));
        assert_eq!(run("n=2&last=b"), (v(&["c", "d"]), None));
        assert_eq!(run("n=4"), (v(&all), None));
        assert_eq!(run("last=bb"), (v(&["c", "d"]), None));
        assert_eq!(run("last=z&n=1"), (v(&[]), None));
    }
}
