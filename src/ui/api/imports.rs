//! `GET /api/v1/imports`: the history of the state, imports first: each
//! generation with who, from where, why, the bundle, and every other field
//! its state document carries (what an import changed, when the import
//! records it), newest first, paged by generation.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Result;
use crate::digest::Digest;
use crate::state::StateError;
use crate::ui::Context;
use crate::ui::http::UiError;

/// State documents read at most for one page of imports.
const MAX_SCAN: usize = 500;

/// Generations looked at for the overview's last import.
const LAST_IMPORT_SCAN: usize = 200;

/// The fields of a state document shown as columns; any other field is
/// shown as a detail.
const KNOWN: [&str; 9] = [
    "kind",
    "generation",
    "parent",
    "time",
    "reason",
    "who",
    "address",
    "repositories",
    "documents",
];

/// One page of history.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Imports {
    /// Newest first.
    pub generations: Vec<GenerationView>,
    /// Pass as `before` for the next (older) page; `None` at the end.
    pub next: Option<u64>,
    /// Why the history ends, when it ends before generation 1 (removed by
    /// gc retention, or damaged).
    pub end: Option<String>,
    /// True when every generation is listed, not only imports.
    pub all: bool,
    /// The current generation.
    pub current: u64,
    /// The newest and oldest generation this page looked at (at most 500
    /// per page: a page of imports among many pushes may be short or empty).
    pub seen: (u64, u64),
}

/// One generation.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct GenerationView {
    /// Its number.
    pub generation: u64,
    /// Its state document's digest.
    pub digest: Digest,
    /// When, RFC 3339 UTC.
    pub time: String,
    /// Who (`user@host`, or the HTTP user).
    pub who: String,
    /// From where (HTTP client address), if over HTTP.
    pub address: Option<String>,
    /// Why (`import bundle ID`, `push REPO:TAG`, `stack NAME: ...`).
    pub reason: String,
    /// `import`, `push`, `delete`, `stack`, `rollback`, `torcx`, `users` or `other`.
    pub kind: &'static str,
    /// The bundle id of an import.
    pub bundle: Option<String>,
    /// Every other field of the state document (e.g. what an import
    /// changed), as stored.
    pub details: BTreeMap<String, serde_json::Value>,
}

/// What kind of change `reason` names.
pub fn kind_of(reason: &str) -> &'static str {
    let starts = |p: &str| reason.starts_with(p);
    if starts("import bundle ") {
        "import"
    } else if starts("push ") {
        "push"
    } else if starts("delete ") {
        "delete"
    } else if starts("stack ") {
        "stack"
    } else if starts("rollback to generation ") {
        "rollback"
    } else if starts("torcx ") {
        "torcx"
    } else if reason.contains("token user ") {
        "users"
    } else {
        "other"
    }
}

fn view(digest: &Digest, doc: &serde_json::Value) -> GenerationView {
    let s = |k: &str| doc[k].as_str().unwrap_or_default().to_string();
    let reason = s("reason");
    let kind = kind_of(&reason);
    GenerationView {
        generation: doc["generation"].as_u64().unwrap_or(0),
        digest: digest.clone(),
        time: s("time"),
        who: s("who"),
        address: doc["address"].as_str().map(str::to_string),
        bundle: (kind == "import").then(|| reason["import bundle ".len()..].to_string()),
        reason,
        kind,
        details: doc
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| !KNOWN.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// The state document `digest` as JSON (every field), cached: documents
/// are immutable.
async fn document(ctx: &dyn Context, digest: &Digest) -> Result<Arc<serde_json::Value>> {
    let cache = &ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?
        .cache;
    if let Some(v) = cache.generations.get(digest) {
        return Ok(v);
    }
    let bytes = crate::store::get_verified(&**ctx.state().blobstore(), digest).await?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        UiError::from(StateError::Corrupt {
            digest: digest.to_string(),
            cause: e.to_string(),
        })
    })?;
    let v = Arc::new(v);
    cache.generations.put(digest.clone(), v.clone());
    Ok(v)
}

/// The generation whose state document is `digest`.
///
/// Errors: the document cannot be read.
pub async fn generation(ctx: &dyn Context, digest: &Digest) -> Result<GenerationView> {
    Ok(view(digest, &*document(ctx, digest).await?))
}

fn parent(doc: &serde_json::Value) -> Option<Digest> {
    doc["parent"].as_str().and_then(|p| p.parse().ok())
}

/// Why a walk down the history stopped at a document that cannot be read.
fn ended(e: &UiError) -> String {
    if e.status == axum::http::StatusCode::NOT_FOUND {
        "older generations were removed by gc".into()
    } else {
        format!("history ends early: {} (run airlock fsck)", e.message)
    }
}

/// Up to `limit` generations older than `before` (all when `None`), newest
/// first: only imports, or every generation when `all`; only those
/// `viewer` may see ([`super::visible`]).
///
/// Errors: the root cannot be read.
pub async fn build(
    ctx: &dyn Context,
    viewer: &crate::ui::http::Viewer,
    before: Option<u64>,
    limit: usize,
    all: bool,
) -> Result<Imports> {
    let root = ctx.state().root_digest().await?;
    let table = ctx.stacks().table(ctx.state()).await?;
    let mut out = Imports {
        generations: Vec::new(),
        next: None,
        end: None,
        all,
        current: 0,
        seen: (0, 0),
    };
    let mut next = root;
    let mut scanned = 0;
    while let Some(d) = next {
        let doc = match document(ctx, &d).await {
            Ok(doc) => doc,
            Err(e) if out.current == 0 && out.generations.is_empty() && scanned == 0 => {
                return Err(e);
            }
            Err(e) => {
                out.end = Some(ended(&e));
                out.next = None;
                return Ok(out);
            }
        };
        let g = doc["generation"].as_u64().unwrap_or(0);
        if out.current == 0 {
            out.current = g;
        }
        next = parent(&doc);
        if before.is_some_and(|b| g >= b) {
            continue;
        }
        scanned += 1;
        if scanned == 1 {
            out.seen.0 = g;
        }
        out.seen.1 = g;
        let v = view(&d, &doc);
        if (all || v.kind == "import") && super::visible::generation(viewer, &table, &v) {
            out.generations.push(super::visible::redact(viewer, v));
        }
        if out.generations.len() == limit || scanned >= MAX_SCAN {
            out.next = next.is_some().then_some(g);
            return Ok(out);
        }
    }
    Ok(out)
}

/// The newest import at or before the state document `root` (looking at
/// most 200 generations back). The answer is kept for every generation
/// walked, so after a push only the new generation is read: its parent's
/// answer is known.
///
/// Errors: the first document cannot be read.
pub async fn last_import(ctx: &dyn Context, root: &Digest) -> Result<Option<GenerationView>> {
    let cache = &ctx
        .console()
        .ok_or_else(|| UiError::not_found("console off"))?
        .cache;
    let mut walked = Vec::new();
    let mut found = None;
    let mut next = Some(root.clone());
    for _ in 0..LAST_IMPORT_SCAN {
        let Some(d) = next else { break };
        if let Some(known) = cache.last_import.get(&d) {
            found = (*known).clone();
            break;
        }
        let doc = match document(ctx, &d).await {
            Ok(doc) => doc,
            Err(e) if e.status == axum::http::StatusCode::NOT_FOUND => break,
            Err(e) if &d == root => return Err(e),
            Err(_) => break,
        };
        let v = view(&d, &doc);
        walked.push(d);
        if v.kind == "import" {
            found = Some(v);
            break;
        }
        next = parent(&doc);
    }
    let answer = Arc::new(found.clone());
    for d in walked {
        cache.last_import.put(d, answer.clone());
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_extra_fields() {
        assert_eq!(kind_of("import bundle 2026-11-01-x"), "import");
        assert_eq!(kind_of("push stacks/bb:v2"), "push");
        assert_eq!(kind_of("stack bb: rollout to 50 %"), "stack");
        assert_eq!(kind_of("rollback to generation 4: bad"), "rollback");
        assert_eq!(kind_of("revoke token user kp"), "users");
        assert_eq!(kind_of("something"), "other");
        let d = Digest::sha256_of(b"g");
        let doc = serde_json::json!({
            "kind": "airlock.state.v2", "generation": 7, "time": "t", "who": "ops",
            "reason": "import bundle b1", "repositories": d.to_string(),
            "changes": {"tags": [{"tag": "a:1", "from": null, "to": "x"}]},
        });
        let v = view(&d, &doc);
        assert_eq!(v.generation, 7);
        assert_eq!(v.bundle.as_deref(), Some("b1"));
        assert_eq!(v.details.keys().collect::<Vec<_>>(), ["changes"]);
    }
}
