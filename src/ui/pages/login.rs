//! `/ui/login` and `/ui/logout`: the login form (the password checked as
//! HTTP Basic checks it, throttled alike: `server::access::password_login`)
//! and logging out. A successful login starts a new session (a new nonce,
//! so a token seen before login is worthless) and goes back to `next`, a
//! console path only.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html as m};

use super::{html, layout};
use crate::server::access::{LoginRefused, password_login};
use crate::ui::Context;
use crate::ui::http::{self, UiError, Viewer};

/// Where to go after login: `next` when it is a console path, else `/ui/`.
fn next_of(next: Option<&String>) -> String {
    match next {
        Some(n)
            if n.starts_with("/ui/")
                && !n.starts_with("//")
                && !n.contains('\\')
                && !n.chars().any(char::is_control) =>
        {
            n.clone()
        }
        _ => "/ui/".into(),
    }
}

fn login_page(viewer: &Viewer, next: &str, error: Option<&str>) -> Markup {
    let body = m! {
        div.login {
            @if viewer.open {
                div.notice { "This server has no users: everyone may use the console. " a href="/ui/" { "Go to the overview" } }
            }
            @if let Some(e) = error { div.notice.error role="alert" { (e) } }
            form.stack method="post" action="/ui/login" {
                input type="hidden" name="csrf" value=(viewer.csrf());
                input type="hidden" name="next" value=(next);
                div { label for="username" { "User" } input id="username" type="text" name="username" autocomplete="username" required autofocus; }
                div { label for="password" { "Password" } input id="password" type="password" name="password" autocomplete="current-password" required; }
                div { button type="submit" { "Log in" } }
            }
            p.muted { "Users are the server's [[user]] entries and token users; scripts use HTTP Basic on /api/v1/ instead." }
        }
    };
    layout(viewer, "Log in", "", body)
}

/// `GET /ui/login?next=PATH`.
pub async fn form(seen: axum::Extension<Viewer>, uri: Uri) -> Response {
    let q = http::query(&uri);
    html(login_page(&seen, &next_of(q.get("next")), None))
}

/// `POST /ui/login` (`username`, `password`, `next`, `csrf`).
pub async fn submit(
    State(ctx): State<Arc<dyn Context>>,
    seen: axum::Extension<Viewer>,
    client: Option<axum::Extension<crate::server::trace::ClientAddr>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let f = match crate::ui::routes::checked_form(&seen, &headers, body).await {
        Ok(f) => f,
        Err(e) => return super::error_page(&seen, &e),
    };
    let Some(console) = ctx.console() else {
        return UiError::not_found("console off").into_response();
    };
    let next = next_of(f.get("next"));
    let user = f.get("username").map_or("", String::as_str);
    let password = f.get("password").map_or("", String::as_str);
    let ip = client.map_or_else(|| "-".into(), |c| c.0.0.ip().to_string());
    let refused = |status: StatusCode, why: &str| {
        let mut res = html(login_page(&seen, &next, Some(why)));
        *res.status_mut() = status;
        res
    };
    if user.is_empty() {
        return refused(StatusCode::BAD_REQUEST, "Enter a user name and a password.");
    }
    match password_login(&ctx.policy(), ctx.state(), user, password, &ip).await {
        Ok(u) => match console
            .sessions
            .start(&**ctx.state().blobstore(), Some(&u))
            .await
        {
            Ok((_, cookie)) => {
                tracing::info!(user = %u.name, client = %ip, "console login");
                let mut res = http::redirect(&next);
                res.headers_mut().insert(header::SET_COOKIE, cookie);
                res
            }
            Err(e) => UiError::internal(e).into_response(),
        },
        Err(LoginRefused::Throttled(wait)) => refused(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "Too many failed logins; try again in {} s.",
                wait.as_secs().max(1)
            ),
        ),
        Err(LoginRefused::Invalid) => {
            refused(StatusCode::UNAUTHORIZED, "Invalid user name or password.")
        }
    }
}

/// `POST /ui/logout` (`csrf`): ends the session.
pub async fn logout(
    State(ctx): State<Arc<dyn Context>>,
    seen: axum::Extension<Viewer>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = crate::ui::routes::checked_form(&seen, &headers, body).await {
        return super::error_page(&seen, &e);
    }
    let mut res = http::redirect("/ui/login");
    if let (Some(console), Some(s)) = (ctx.console(), &seen.session) {
        res.headers_mut()
            .insert(header::SET_COOKIE, console.sessions.end(s));
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_in_the_console() {
        let n = |s: &str| next_of(Some(&s.to_string()));
        assert_eq!(n("/ui/stacks/bb"), "/ui/stacks/bb");
        assert_eq!(n("https://evil.example/"), "/ui/");
        assert_eq!(n("//evil.example/ui/"), "/ui/");
        assert_eq!(n("/v2/"), "/ui/");
        assert_eq!(next_of(None), "/ui/");
        assert_eq!(n("/ui/\r\nSet-Cookie: x=1"), "/ui/");
        assert_eq!(n("/ui/a\nb"), "/ui/");
    }
}
