//! `/ui/operations`: GC and fsck reports, quarantined blobs, users (and,
//! for admins, revoking token users).

use maud::{Markup, html as m};

use super::{bytes, layout, query};
use crate::ops::reports::LastReport;
use crate::ui::api::operations::Operations;
use crate::ui::http::Viewer;

fn report(r: &Option<LastReport>, what: &str) -> Markup {
    match r {
        None => m! { p.muted { "Never run here (" code { "airlock " (what) } ")." } },
        Some(r) => m! {
            p { "Last run " (r.time) " by " (r.who) "." }
            details {
                summary { "Report" }
                dl.kv {
                    @if let Some(o) = r.report.as_object() {
                        @for (k, v) in o {
                            dt { (k) }
                            dd { @if let Some(a) = v.as_array() {
                                @if a.is_empty() { "none" } @else { ul { @for x in a { li { code { (x) } } } } }
                            } @else { (v) } }
                        }
                    }
                }
            }
        },
    }
}

/// The operations page of `o`.
pub fn page(viewer: &Viewer, o: &Operations, done: Option<&str>) -> Markup {
    let body = m! {
        @if done == Some("revoked") { div.notice.done role="status" { "Token user revoked." } }
        h2 { "Garbage collection" }
        (report(&o.last_gc, "gc"))
        h2 { "Consistency check" }
        (report(&o.last_fsck, "fsck"))
        h2 { "Quarantined blobs" }
        @if o.quarantined.items.is_empty() {
            p.muted { "None: no blob was found corrupt." }
        } @else {
            p { (o.quarantined.total.unwrap_or(0)) " blobs whose content did not match their digest; never served. Re-import a bundle that carries them." }
            table {
                thead { tr { th scope="col" { "Digest" } th.num scope="col" { "Size" } th scope="col" { "Quarantined" } } }
                tbody { @for b in &o.quarantined.items { tr { td { code { (b.digest) } } td.num { (bytes(b.size)) } td { (b.time) } } } }
            }
            @if let Some(n) = &o.quarantined.next {
                div.pager { a href=(format!("/ui/operations{}", query(&[("quarantine_after", n)]))) { "Next page" } }
            }
        }
        h2 { "Users" }
        @match &o.users {
            None => p.muted { "Only admins see the users." },
            Some(u) => {
                h3 { "Configured users" }
                @if u.configured.is_empty() { p.muted { "None: the server is open (everyone is admin)." } } @else {
                    table {
                        thead { tr { th scope="col" { "Name" } th scope="col" { "Roles" } th scope="col" { "Repositories" } th scope="col" { "Login" } } }
                        tbody { @for x in &u.configured { tr {
                            td { (x.name) } td { (format!("{:?}", x.roles).to_lowercase()) }
                            td { @if x.repositories.is_empty() { "all" } @else { (x.repositories.join(", ")) } }
                            td { (x.detail) }
                        } } }
                    }
                    p.muted { "Configured users change in the config file ([[user]])." }
                }
                h3 { "Token users" }
                @if u.tokens.is_empty() { p.muted { "None." } } @else {
                    table {
                        thead { tr { th scope="col" { "Name" } th scope="col" { "Roles" } th scope="col" { "Repositories" } th scope="col" { "Purpose" } th scope="col" { "Created" } th scope="col" { "Admin" } } }
                        tbody { @for x in &u.tokens { tr {
                            td { (x.name) } td { (format!("{:?}", x.roles).to_lowercase()) }
                            td { @if x.repositories.is_empty() { "all" } @else { (x.repositories.join(", ")) } }
                            td { (x.detail) } td { (x.created.as_deref().unwrap_or("")) }
                            td {
                                form method="post" action="/ui/operations/revoke" {
                                    input type="hidden" name="csrf" value=(viewer.csrf());
                                    input type="hidden" name="user" value=(x.name);
                                    button.danger type="submit" aria-label=(format!("Revoke token user {}", x.name)) { "Revoke" }
                                }
                            }
                        } } }
                    }
                }
            }
        }
        p.muted { "JSON: " a href="/api/v1/operations" { "/api/v1/operations" } }
    };
    layout(viewer, "Operations", "/ui/operations", body)
}
