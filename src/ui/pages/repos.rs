//! `/ui/repositories` (search) and `/ui/repositories/NAME` (tags, one tag
//! in detail with its annotations, referrers and pull commands).

use maud::{Markup, html as m};

use super::{bytes, digest, layout, query};
use crate::ui::api::repos::{RepoList, RepoView, TagDetail};
use crate::ui::http::Viewer;

/// The search page of `l`.
pub fn list(viewer: &Viewer, l: &RepoList) -> Markup {
    let q = l.query.as_deref().unwrap_or("");
    let body = m! {
        form.inline method="get" action="/ui/repositories" role="search" {
            div {
                label for="q" { "Repository name starts with" }
                input id="q" type="search" name="q" value=(q) autocomplete="off";
            }
            button type="submit" { "Search" }
        }
        @if l.repositories.is_empty() {
            p.muted { "No repositories" @if !q.is_empty() { " starting with " code { (q) } } "." }
        } @else {
            table {
                thead { tr { th scope="col" { "Repository" } } }
                tbody { @for r in &l.repositories { tr { td { a href=(format!("/ui/repositories/{r}")) { (r) } } } } }
            }
        }
        div.pager {
            @if let Some(n) = &l.next {
                a href=(format!("/ui/repositories{}", query(&[("q", q), ("after", n)]))) { "Next page" }
            }
        }
        p.muted { "JSON: " a href=(format!("/api/v1/repositories{}", query(&[("q", q)]))) { "/api/v1/repositories" } }
    };
    layout(viewer, "Repositories", "/ui/repositories", body)
}

fn detail(name: &str, t: &TagDetail) -> Markup {
    m! {
        section aria-labelledby="tag-detail" {
            h2 id="tag-detail" { code { (name) ":" (t.tag) } }
            dl.kv {
                dt { "Digest" } dd { code { (t.digest) } }
                @if let Some(mt) = &t.image.media_type { dt { "Media type" } dd { code { (mt) } } }
                @if let Some(at) = &t.image.artifact_type { dt { "Artifact type" } dd { code { (at) } } }
                dt { "Size" } dd { (bytes(t.image.size)) }
            }
            h3 { "Platforms" }
            table {
                thead { tr { th scope="col" { "Platform" } th scope="col" { "Manifest" } th.num scope="col" { "Size" } } }
                tbody { @for p in &t.image.platforms { tr {
                    td { (p.platform) } td { (digest(&p.digest)) }
                    td.num { @if let Some(s) = p.size { (bytes(s)) } }
                } } }
            }
            h3 { "Annotations" }
            @if t.image.annotations.is_empty() {
                p.muted { "None." }
            } @else {
                table id="annotations" {
                    thead { tr { th scope="col" { "Key" } th scope="col" { "Value" } } }
                    tbody { @for (k, v) in &t.image.annotations { tr { td { code { (k) } } td { (v) } } } }
                }
            }
            h3 { "Referrers" }
            @if t.referrers.is_empty() {
                p.muted { "None (no signatures or SBOMs refer to it)." }
            } @else {
                table {
                    thead { tr { th scope="col" { "Artifact type" } th scope="col" { "Digest" } th scope="col" { "Media type" } th.num scope="col" { "Size" } } }
                    tbody { @for r in &t.referrers { tr {
                        td { (r.artifact_type.as_deref().unwrap_or("–")) } td { (digest(&r.digest)) }
                        td { code { (r.media_type) } } td.num { (bytes(r.size)) }
                    } } }
                }
            }
            h3 { "Pull" }
            dl.kv {
                dt { "docker" } dd { pre.cmd { (t.pull.docker) } }
                dt { "podman" } dd { pre.cmd { (t.pull.podman) } }
                dt { "skopeo" } dd { pre.cmd { (t.pull.skopeo) } }
                dt { "ctr" } dd { pre.cmd { (t.pull.ctr) } }
            }
        }
    }
}

/// The page of repository `r`.
pub fn show(viewer: &Viewer, r: &RepoView) -> Markup {
    let base = format!("/ui/repositories/{}", r.name);
    let body = m! {
        @if let Some(t) = &r.selected { (detail(&r.name, t)) }
        h2 { "Tags" }
        table {
            thead { tr {
                th scope="col" { "Tag" } th scope="col" { "Digest" } th scope="col" { "Media type" }
                th scope="col" { "Platforms" } th.num scope="col" { "Size" } th.num scope="col" { "Referrers" }
            } }
            tbody { @for t in &r.tags { tr {
                td { a href=(format!("{base}{}", query(&[("tag", &t.tag)]))) { (t.tag) } }
                td { (digest(&t.digest)) }
                td { code { (t.media_type) } }
                td { (t.platforms.join(", ")) }
                td.num { @if let Some(s) = t.size { (bytes(s)) } }
                td.num { (t.referrers) }
            } } }
        }
        div.pager {
            @if let Some(n) = &r.next { a href=(format!("{base}{}", query(&[("after", n)]))) { "Next page" } }
        }
        p.muted { "JSON: " a href=(format!("/api/v1/repositories/{}", r.name)) { "/api/v1/repositories/" (r.name) } }
    };
    layout(
        viewer,
        &format!("Repository {}", r.name),
        "/ui/repositories",
        body,
    )
}
