//! Query parameters of a `/v2` request (`digest`, `mount`, `from`, `ns`,
//! `artifactType`, ...), percent-decoded.
//!
//! Owns: decoding the query string once. Never interprets values.

use axum::http::Uri;

/// The decoded `key=value` pairs of a request's query, in order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct QueryParams(Vec<(String, String)>);

impl QueryParams {
    /// The query of `uri`; an undecodable query counts as empty.
    pub fn from_uri(uri: &Uri) -> QueryParams {
        if uri.query().is_none() {
            // Most requests (every pull): nothing to decode.
            return QueryParams(Vec::new());
        }
        QueryParams(
            axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
                .map(|q| q.0)
                .unwrap_or_default(),
        )
    }

    /// The first value of `key`, if any.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}
