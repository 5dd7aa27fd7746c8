//! What a caller limited to some repositories may see of site-wide lists:
//! generations of the history and events. One rule for the overview, the
//! history and the events: an entry is shown when everything it names is
//! readable by the caller (every tag's repository, the stack's images);
//! an entry that names anything else, or that the caller cannot judge
//! (a whole-state rollback, token users, torcx documents, a tag list cut
//! short), is shown only to callers who may read every repository. Client
//! addresses are shown only to callers who may administer every
//! repository.

use super::EventView;
use super::imports::GenerationView;
use crate::auth::Permission;
use crate::stacks::StackName;
use crate::stacks::table::StackTable;
use crate::ui::http::Viewer;

/// Whether `viewer` may read every repository (sees every entry).
pub fn sees_all(viewer: &Viewer) -> bool {
    viewer.grant.allows_everywhere(Permission::Pull)
}

/// The stack a generation's or event's reason names (`stack NAME: ...`).
fn stack_of(reason: &str) -> Option<StackName> {
    reason
        .strip_prefix("stack ")?
        .split(':')
        .next()?
        .parse()
        .ok()
}

/// Whether `viewer` may see the generation `g` (module docs).
pub fn generation(viewer: &Viewer, table: &StackTable, g: &GenerationView) -> bool {
    if sees_all(viewer) {
        return true;
    }
    let Some(changes) = g.details.get("changes") else {
        return false;
    };
    let tags = changes["tags"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let tags_ok = changes["more_tags"].as_u64().unwrap_or(0) == 0
        && tags
            .iter()
            .all(|t| t["repository"].as_str().is_some_and(|r| viewer.may_read(r)));
    let docs = changes["documents"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let docs_ok = docs.iter().all(|d| {
        d.as_str() == Some(crate::stacks::table::DOC_NAME)
            && stack_of(&g.reason).is_some_and(|s| viewer.may_read_stack(table, &s))
    });
    tags_ok && docs_ok && (!tags.is_empty() || !docs.is_empty())
}

/// `g` as `viewer` sees it: without the client address unless they may
/// administer every repository.
pub fn redact(viewer: &Viewer, mut g: GenerationView) -> GenerationView {
    if !viewer.admin_everywhere() {
        g.address = None;
    }
    g
}

/// Whether `viewer` may see the event `e`: a stack event of a stack they
/// may read, an import whose images and stacks they may all read.
pub fn event(viewer: &Viewer, table: &StackTable, e: &EventView) -> bool {
    if sees_all(viewer) {
        return true;
    }
    let stack_ok = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|s| s.parse::<StackName>().ok())
            .is_some_and(|s| viewer.may_read_stack(table, &s))
    };
    if e.kind.starts_with("stack.") {
        return stack_ok(&e.data["stack"]);
    }
    if e.kind == "import.completed" {
        let images = e.data["images"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let stacks = e.data["stacks"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        return images
            .iter()
            .all(|r| r.as_str().is_some_and(|r| viewer.may_read(r)))
            && stacks.iter().all(stack_ok)
            && !(images.is_empty() && stacks.is_empty());
    }
    false
}
