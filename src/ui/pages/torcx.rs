//! `/ui/torcx`: remotes, boards, OS versions and addon images.

use maud::{Markup, html as m};

use super::{bytes, digest, layout};
use crate::ui::api::torcx::TorcxView;
use crate::ui::http::Viewer;

/// The torcx page of `t`.
pub fn page(viewer: &Viewer, t: &TorcxView) -> Markup {
    let body = m! {
        @if t.remotes.is_empty() {
            p.muted { "No torcx remotes: import a bundle with [[torcx]] addons." }
        }
        @for r in &t.remotes {
            h2 { "Remote " code { (r.name) } }
            p { "Boards: " @for (i, b) in r.boards.iter().enumerate() { @if i > 0 { ", " } code { (b) } } }
            h3 { "OS versions" }
            table {
                thead { tr { th scope="col" { "Board" } th scope="col" { "OS version" } th.num scope="col" { "Images offered" } th scope="col" { "Contents" } } }
                tbody { @for tv in &r.targets { tr {
                    td { (tv.target.board) } td { (tv.target.os_version) } td.num { (tv.offered) }
                    td { @if tv.vendor { "vendor-signed" } @else { "signed by this site" } }
                } } }
            }
            h3 { "Images" }
            table {
                thead { tr {
                    th scope="col" { "Name" } th scope="col" { "Version" } th scope="col" { "Format" }
                    th.num scope="col" { "Size" } th scope="col" { "sha256" } th scope="col" { "Built for" } th scope="col" { "Default for" }
                } }
                tbody { @for b in &r.images { tr {
                    td { (b.name) } td { (b.version) } td { (b.format.as_str()) } td.num { (bytes(b.size)) }
                    td { (digest(&b.sha256)) }
                    td { @for tg in &b.targets { (tg.board) " " (tg.os_version) br; } }
                    td { @for tg in &b.default_for { (tg.board) " " (tg.os_version) br; } }
                } } }
            }
            @if !r.deprecations.is_empty() {
                h3 { "Deprecations" }
                table {
                    thead { tr { th scope="col" { "Image" } th scope="col" { "From OS version" } th scope="col" { "Why" } } }
                    tbody { @for d in &r.deprecations { tr { td { (d.name) ":" (d.version) } td { (d.from_os_version) } td { (d.reason) } } } }
                }
            }
        }
        p.muted { "JSON: " a href="/api/v1/torcx" { "/api/v1/torcx" } }
    };
    layout(viewer, "torcx", "/ui/torcx", body)
}
