//! The console's HTML: one module per page, each a function of the page's
//! JSON model ([`super::api`]) and the [`Viewer`], drawn with `maud`
//! (every interpolated value is HTML-escaped; repository names, tags,
//! annotations, reasons and descriptions are attacker-controlled).
//!
//! Owns: the page shell (skip link, navigation, who is logged in, the
//! logout form), the confirmation page of the admin forms, error pages and
//! the small formatting helpers. No inline script or style: the stylesheet
//! is `/ui/assets/console.css`, and every form control has a label.

pub mod imports;
pub mod login;
pub mod operations;
pub mod overview;
pub mod repos;
pub mod stacks;
pub mod torcx;

use std::collections::BTreeMap;

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use maud::{DOCTYPE, Markup, html as m};

use super::http::{UiError, Viewer};

/// The pages of the navigation: (path, label).
const NAV: [(&str, &str); 6] = [
    ("/ui/", "Overview"),
    ("/ui/imports", "Imports"),
    ("/ui/repositories", "Repositories"),
    ("/ui/stacks", "Stacks"),
    ("/ui/torcx", "torcx"),
    ("/ui/operations", "Operations"),
];

/// `markup` as a `text/html` answer.
pub fn html(markup: Markup) -> Response {
    let mut res = markup.into_string().into_response();
    res.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    res
}

/// The page shell around `content`: `title`, the navigation with
/// `current` marked, who is logged in.
pub fn layout(viewer: &Viewer, title: &str, current: &str, content: Markup) -> Markup {
    m! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · airlock" }
                link rel="stylesheet" href="/ui/assets/console.css";
                link rel="icon" href="/ui/assets/favicon.svg" type="image/svg+xml";
            }
            body {
                a.skip href="#content" { "Skip to content" }
                header.top {
                    a.brand href="/ui/" { "airlock" }
                    nav.main aria-label="Console" {
                        ul {
                            @for (path, label) in NAV {
                                @if path != "/ui/stacks" || viewer.grant.holds(crate::auth::Permission::Stack) {
                                li {
                                    @if path == current {
                                        a href=(path) aria-current="page" { (label) }
                                    } @else {
                                        a href=(path) { (label) }
                                    }
                                }
                                }
                            }
                        }
                    }
                    div.who {
                        @if viewer.open {
                            span { "open server: no users configured, everyone is admin" }
                        } @else if viewer.logged_in() {
                            span { "logged in as " strong { (viewer.who) } @if viewer.admin() { " (admin)" } }
                            form method="post" action="/ui/logout" {
                                input type="hidden" name="csrf" value=(viewer.csrf());
                                button type="submit" { "Log out" }
                            }
                        } @else {
                            span { (viewer.who) }
                            a href="/ui/login" { "Log in" }
                        }
                    }
                }
                main id="content" tabindex="-1" {
                    h1 { (title) }
                    (content)
                }
            }
        }
    }
}

/// An error as a page with its status.
pub fn error_page(viewer: &Viewer, e: &UiError) -> Response {
    let title = match e.status.as_u16() {
        403 => "Not allowed",
        404 => "Not found",
        409 => "Changed meanwhile",
        400 | 422 => "Refused",
        503 => "Busy: try again",
        _ => "Error",
    };
    let body = m! {
        div.notice.error role="alert" {
            p { strong { (e.code) } ": " (e.message) }
        }
        p { a href="/ui/" { "Back to the overview" } }
    };
    let mut res = html(layout(viewer, title, "", body));
    *res.status_mut() = e.status;
    if let Some(secs) = e.retry_after {
        res.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, secs.into());
    }
    res
}

/// The confirmation step of an admin form: what the change will do
/// (`effect`), a form re-posting `fields` with `confirm=yes` to `action`,
/// and a way back to `back`.
pub fn confirm(
    viewer: &Viewer,
    title: &str,
    effect: &str,
    action: &str,
    fields: &BTreeMap<String, String>,
    back: &str,
) -> Markup {
    let body = m! {
        div.notice role="status" {
            p id="effect" { (effect) }
        }
        form.inline method="post" action=(action) {
            input type="hidden" name="csrf" value=(viewer.csrf());
            input type="hidden" name="confirm" value="yes";
            @for (k, v) in fields {
                input type="hidden" name=(k) value=(v);
            }
            button.danger type="submit" { "Confirm: " (title) }
            a.button href=(back) { "Cancel" }
        }
    };
    layout(viewer, &format!("Confirm: {title}"), "", body)
}

/// `1.5 GiB`: bytes for people.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A digest cut for a table cell, the whole of it in a tooltip.
pub fn digest(d: &impl std::fmt::Display) -> Markup {
    let full = d.to_string();
    let short = match full.split_once(':') {
        Some((alg, hex)) if hex.len() > 12 => format!("{alg}:{}…", &hex[..12]),
        _ => full.clone(),
    };
    m! { code title=(full) { (short) } }
}

/// `?key=value&...` with every value URL-encoded.
pub fn query(pairs: &[(&str, &str)]) -> String {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    format!("?{}", s.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_escaped() {
        let v = Viewer {
            who: "<img src=x onerror=alert(1)>".into(),
            ..Viewer::default()
        };
        let page = layout(&v, "<script>t</script>", "", m! { p { ("a\"b<c>") } }).into_string();
        assert!(!page.contains("<img src=x"));
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;"));
        assert!(!page.contains("<script>"));
        assert!(page.contains("a&quot;b&lt;c&gt;"));
        assert!(!page.contains("style="), "no inline styles");
    }

    #[test]
    fn sizes_and_queries() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
        assert_eq!(
            query(&[("q", "a b&c"), ("after", "x/y")]),
            "?q=a+b%26c&after=x%2Fy"
        );
    }
}
