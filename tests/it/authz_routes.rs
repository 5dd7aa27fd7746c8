//! Every route of the server × every kind of caller (issue 36), generated
//! from the one declaration table (`airlock::server::routes::ROUTES`): a
//! route added to the table without a row in [`EXPECTED`] fails here, and
//! so does a row of [`EXPECTED`] the table lacks. Each route is sent, in
//! process, about a place inside the prefix-limited admin's repositories
//! (stack `bb` of `stacks/bb`, torcx remote `edge`, cell `diego-cell/1`)
//! and one outside them (stack `sec` of `private/secret`, remote `other`,
//! cell `router/1`), as: `r` reader, `c` cell (limited to cells
//! `diego-cell/*`), `p` admin limited to `stacks/` and `torcx/edge`
//! (`padmin`), `a` admin, `m` metrics, `n` anonymous, and `N` anonymous on
//! a server with `anonymous_read = true`. The expected callers are written
//! out below, not derived from the table. A refused request is 401 (or
//! the login form, for a console page), 403, or 404 for a chunk; it
//! changes nothing (`refs/root` is the same) and its body names nothing of
//! the outside place.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use airlock::auth::{Policy, Role, ThrottleLimits, User};
use airlock::server::routes::{ROUTES, Route};
use airlock::server::{self, App};
use airlock::stacks::api::StacksConfig;
use airlock::state::StateStore;
use axum::Router;
use base64::Engine as _;
use common::router::{Reply, send_body};
use common::*;

/// Who may, per route: (methods as the table names them, pattern, callers
/// allowed about the inside place, callers allowed about the outside).
const EXPECTED: &[(&str, &str, &str, &str)] = &[
    ("GET HEAD", "/healthz", "rcpamnN", "rcpamnN"),
    ("GET HEAD", "/readyz", "rcpamnN", "rcpamnN"),
    ("GET HEAD", "/metrics", "pam", "pam"),
    ("GET HEAD", "/v2", "rcpaN", "rcpaN"),
    ("GET HEAD", "/v2/", "rcpaN", "rcpaN"),
    ("GET HEAD", "/v2/_catalog", "rcpaN", "rcpaN"),
    (
        "GET HEAD",
        "/v2/{repo*}/manifests/{reference}",
        "rcpaN",
        "rcaN",
    ),
    ("PUT", "/v2/{repo*}/manifests/{reference}", "pa", "a"),
    ("DELETE", "/v2/{repo*}/manifests/{reference}", "pa", "a"),
    ("POST", "/v2/{repo*}/blobs/uploads/", "pa", "a"),
    (
        "GET HEAD",
        "/v2/{repo*}/blobs/uploads/{session}",
        "rcpaN",
        "rcaN",
    ),
    (
        "PUT PATCH DELETE",
        "/v2/{repo*}/blobs/uploads/{session}",
        "pa",
        "a",
    ),
    ("GET HEAD", "/v2/{repo*}/blobs/{blob}", "rcpaN", "rcaN"),
    ("DELETE", "/v2/{repo*}/blobs/{blob}", "pa", "a"),
    ("GET HEAD", "/v2/{repo*}/tags/list", "rcpaN", "rcaN"),
    (
        "GET HEAD",
        "/v2/{repo*}/referrers/{subject}",
        "rcpaN",
        "rcaN",
    ),
    (
        "GET HEAD",
        "/torcx/{remote}/{board}/{os}/{file}",
        "rcpaN",
        "rcaN",
    ),
    ("GET HEAD", "/torcx", "rcpaN", "rcpaN"),
    ("GET HEAD", "/torcx/", "rcpaN", "rcpaN"),
    ("GET HEAD", "/stacks/v1", "cpa", "cpa"),
    ("GET HEAD", "/stacks/v1/", "cpa", "cpa"),
    ("GET HEAD", "/stacks/v1/lifecycle/{digest}", "cpa", "ca"),
    ("GET HEAD", "/stacks/v1/chunks/{chunk*}", "cpa", "ca"),
    ("GET HEAD", "/stacks/v1/{stack}", "cpa", "ca"),
    ("GET HEAD", "/stacks/v1/{stack}/rootfs.tar", "cpa", "ca"),
    ("GET HEAD", "/stacks/v1/{stack}/rootfs.caibx", "cpa", "ca"),
    ("GET HEAD", "/stacks/v1/{stack}/rootfs.patch", "cpa", "ca"),
    ("GET HEAD", "/stacks/v1/{stack}/status", "cpa", "ca"),
    ("PUT", "/stacks/v1/{stack}/cells/{cell*}", "cpa", "a"),
    ("POST", "/stacks/v1/{stack}/promote", "pa", "a"),
    ("POST", "/stacks/v1/{stack}/rollout", "pa", "a"),
    ("POST", "/stacks/v1/{stack}/rollback", "pa", "a"),
    ("POST", "/stacks/v1/{stack}/state", "pa", "a"),
    ("POST", "/stacks/v1/{stack}/default", "pa", "a"),
    ("POST", "/stacks/v1/{stack}/register", "pa", "a"),
    ("POST", "/admin/v1/imports", "pa", "a"),
    ("GET HEAD", "/admin/v1/trust", "rcpa", "rcpa"),
    ("POST", "/admin/v1/trust", "a", "a"),
    ("GET HEAD", "/ui", "rcpamnN", "rcpamnN"),
    ("GET HEAD POST", "/ui/login", "rcpamnN", "rcpamnN"),
    ("POST", "/ui/logout", "rcpamnN", "rcpamnN"),
    ("GET HEAD", "/ui/assets/{file}", "rcpamnN", "rcpamnN"),
    ("GET HEAD", "/ui/", "rcpa", "rcpa"),
    ("GET HEAD", "/api/v1/overview", "rcpa", "rcpa"),
    ("GET HEAD", "/ui/imports", "rcpa", "rcpa"),
    ("GET HEAD", "/api/v1/imports", "rcpa", "rcpa"),
    ("POST", "/ui/imports/rollback", "a", "a"),
    ("GET HEAD", "/ui/repositories", "rcpa", "rcpa"),
    ("GET HEAD", "/api/v1/repositories", "rcpa", "rcpa"),
    ("GET HEAD", "/ui/repositories/{repo*}", "rcpa", "rca"),
    ("GET HEAD", "/api/v1/repositories/{repo*}", "rcpa", "rca"),
    ("GET HEAD", "/ui/stacks", "cpa", "cpa"),
    ("GET HEAD", "/api/v1/stacks", "cpa", "cpa"),
    ("GET HEAD", "/ui/stacks/{stack}", "cpa", "ca"),
    ("GET HEAD", "/api/v1/stacks/{stack}", "cpa", "ca"),
    ("GET HEAD", "/api/v1/stacks/{stack}/effect", "cpa", "ca"),
    ("POST", "/ui/stacks/{stack}/promote", "pa", "a"),
    ("POST", "/ui/stacks/{stack}/rollout", "pa", "a"),
    ("POST", "/ui/stacks/{stack}/rollback", "pa", "a"),
    ("POST", "/ui/stacks/{stack}/state", "pa", "a"),
    ("GET HEAD", "/ui/torcx", "rcpa", "rcpa"),
    ("GET HEAD", "/api/v1/torcx", "rcpa", "rcpa"),
    ("GET HEAD", "/ui/operations", "rcpa", "rcpa"),
    ("GET HEAD", "/api/v1/operations", "rcpa", "rcpa"),
    ("POST", "/ui/operations/revoke", "a", "a"),
    ("GET HEAD", "/api/v1/session", "rcpa", "rcpa"),
    ("GET HEAD", "/api/v1/vulns", "rcpa", "rca"),
];

/// The callers: letter, user name (`None`: no credentials).
const CALLERS: [(char, Option<&str>); 7] = [
    ('r', Some("reader")),
    ('c', Some("cell")),
    ('p', Some("padmin")),
    ('a', Some("admin")),
    ('m', Some("metrics")),
    ('n', None),
    ('N', None),
];

/// One place of the fixture: what each `{name}` stands for.
pub(crate) struct Place {
    pub(crate) repo: &'static str,
    pub(crate) stack: &'static str,
    pub(crate) digest: String,
    pub(crate) chunk: String,
    pub(crate) remote: &'static str,
    pub(crate) cell: &'static str,
    pub(crate) bundle: PathBuf,
}

pub(crate) struct Fixture {
    pub(crate) _tmp: tempfile::TempDir,
    pub(crate) data: PathBuf,
    pub(crate) inside: Place,
    pub(crate) outside: Place,
    /// The outside image's manifest digest: never in a refusal's body.
    pub(crate) secret: String,
}

/// A store with `stacks/bb:v1` (and `:del`) promoted as stack `bb` and a
/// different rootfs `private/secret:v1` (and `:del`) as stack `sec`.
pub(crate) fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let layout = copy_fixture_layout(&dir);
    let l = |tag: &str| format!("{}:{tag}", layout.display());
    let work = dir.join("work");
    run_ok(
        Command::new("umoci")
            .args(["unpack", "--image", &l("latest")])
            .arg(&work),
    );
    std::fs::write(
        work.join("rootfs/etc/secret"),
        "outside the prefix\n".repeat(4096),
    )
    .unwrap();
    run_ok(
        Command::new("umoci")
            .args(["repack", "--image", &l("sec")])
            .arg(&work),
    );
    let mut toml = image_toml(
        &format!("oci:{}", l("latest")),
        "stacks/bb",
        &["v1", "del"],
        "",
    );
    toml.push_str(&image_toml(
        &format!("oci:{}", l("sec")),
        "private/secret",
        &["v1", "del"],
        "",
    ));
    let cfg = dir.join("base.toml");
    std::fs::write(&cfg, toml).unwrap();
    let base = dir.join("base.tar");
    create_bundle(&cfg, &base, &[]);
    let bundle = |repo: &str, name: &str| {
        let cfg = dir.join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            image_toml(&format!("oci:{}", l("latest")), repo, &["v1"], ""),
        )
        .unwrap();
        let out = dir.join(format!("{name}.tar"));
        create_bundle(&cfg, &out, &[]);
        out
    };
    let data = dir.join("data");
    let (_, keyring) = test_key();
    import_bundle(&data, &keyring, &base);
    let d = data.to_str().unwrap();
    for (stack, image) in [("bb", "stacks/bb:v1"), ("sec", "private/secret:v1")] {
        airlock_ok(&["stack", "promote", stack, "--image", image, "--data", d]);
    }
    let inside = Place {
        repo: "stacks/bb",
        stack: "bb",
        digest: layout_ref_digest(&layout, "latest"),
        chunk: String::new(),
        remote: "edge",
        cell: "diego-cell/1",
        bundle: bundle("stacks/imp", "imp-in"),
    };
    let outside = Place {
        repo: "private/secret",
        stack: "sec",
        digest: layout_ref_digest(&layout, "sec"),
        chunk: String::new(),
        remote: "other",
        cell: "router/1",
        bundle: bundle("private/imp", "imp-out"),
    };
    let secret = outside.digest.clone();
    Fixture {
        _tmp: tmp,
        data,
        inside,
        outside,
        secret,
    }
}

pub(crate) fn password(user: &str) -> String {
    format!("{user}-pw")
}

pub(crate) fn basic(user: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    format!("Basic {}", b64.encode(format!("{user}:{}", password(user))))
}

/// The in-process server over `data`, with the console on, pushes,
/// deletes, stack administration, custom stacks and imports on.
pub(crate) fn router(data: &Path, anonymous_read: bool) -> Router {
    let user = |name: &str, role: Role, repos: &[&str], cells: &[&str]| {
        let hash = site::hash(&password(name));
        let hash = hash
            .trim_start_matches("password_hash = \"")
            .trim_end_matches('"')
            .to_string();
        User {
            name: name.into(),
            password_hash: Some(hash),
            roles: vec![role],
            repositories: repos.iter().map(|s| s.to_string()).collect(),
            cells: cells.iter().map(|s| s.to_string()).collect(),
        }
    };
    let users = vec![
        user("reader", Role::Reader, &[], &[]),
        user("cell", Role::Cell, &[], &["diego-cell/*"]),
        user("padmin", Role::Admin, &["stacks/", "torcx/edge"], &[]),
        user("admin", Role::Admin, &[], &[]),
        user("metrics", Role::Metrics, &[], &[]),
        // Issue 60's cell limited to `stacks/` (not a caller of the matrix).
        user("pcell", Role::Cell, &["stacks/"], &[]),
    ];
    let policy = Policy::new(users, anonymous_read, ThrottleLimits::default()).unwrap();
    let store = Arc::new(airlock::store::fs::FsStore::open(data).unwrap());
    let config = airlock::registry::RegistryConfig {
        allow_push: true,
        allow_delete: true,
        ..Default::default()
    };
    let mut app = App::with_config(StateStore::new(store), config).with_stacks(StacksConfig {
        allow_admin: true,
        custom_stacks: airlock::stacks::custom::CustomPolicy::On,
        ..StacksConfig::default()
    });
    app.auth = arc_swap::ArcSwap::from_pointee(policy);
    let (_, keyring) = test_key();
    app.import_keyring = arc_swap::ArcSwap::from_pointee(Some(keyring));
    app.ui = Some(Arc::new(airlock::ui::Console::new(airlock::ui::UiConfig {
        store: airlock::ui::StoreInfo::of(&airlock::store::StoreUrl::File(data.to_path_buf())),
        ..airlock::ui::UiConfig::default()
    })));
    server::router(Arc::new(app))
}

/// A console session's cookie and CSRF token (from the public login form).
pub(crate) async fn console_session(router: &Router) -> (String, String) {
    let r = send_body(router, "GET", "/ui/login", &[], vec![]).await;
    let cookie = r
        .header("set-cookie")
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let page = String::from_utf8_lossy(&r.body).to_string();
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    let token = page[at..].split('"').next().unwrap().to_string();
    (cookie, token)
}

/// The request of `method` on the row `pattern` about `place`: the path
/// with every `{name}` filled in, and the body.
pub(crate) fn request(pattern: &str, method: &str, place: &Place, csrf: &str) -> (String, Vec<u8>) {
    let fill = |p: &str| {
        p.replace("{repo*}", place.repo)
            .replace("{reference}", if method == "DELETE" { "del" } else { "v1" })
            .replace("{session}", "00000000-0000-4000-8000-000000000000")
            .replace("{blob}", &place.digest)
            .replace("{subject}", &place.digest)
            .replace("{remote}", place.remote)
            .replace("{board}", "amd64-usr")
            .replace("{os}", "1.0.0")
            .replace(
                "{file}",
                if p.starts_with("/ui/") {
                    "console.css"
                } else {
                    "torcx_remote_contents.json.asc"
                },
            )
            .replace("{digest}", &place.digest)
            .replace("{chunk*}", &place.chunk)
            .replace("{stack}", place.stack)
            .replace("{cell*}", place.cell)
    };
    let image = format!("{}:v1", place.repo);
    let form = |fields: &str| format!("{fields}&csrf={csrf}").into_bytes();
    let path = fill(pattern);
    let json = |v: serde_json::Value| v.to_string().into_bytes();
    let body = match (method, pattern) {
        ("PUT", p) if p.contains("/cells/") => json(serde_json::json!({ "digest": place.digest })),
        ("POST", "/stacks/v1/{stack}/promote") => json(serde_json::json!({ "image": image })),
        ("POST", "/stacks/v1/{stack}/rollout") => json(serde_json::json!({ "percent": 100 })),
        ("POST", "/stacks/v1/{stack}/rollback") => json(serde_json::json!({ "reason": "x" })),
        ("POST", "/stacks/v1/{stack}/state") => {
            json(serde_json::json!({ "state": "ACTIVE", "reason": "x" }))
        }
        ("POST", "/stacks/v1/{stack}/default") => b"{}".to_vec(),
        ("POST", "/stacks/v1/{stack}/register") => json(serde_json::json!({ "image": image })),
        ("POST", "/admin/v1/imports") => std::fs::read(&place.bundle).unwrap(),
        ("POST", "/ui/login") => form("username=admin&password=admin-pw"),
        ("POST", "/ui/stacks/{stack}/promote") => form(&format!("image={image}&percent=10")),
        ("POST", "/ui/stacks/{stack}/rollout") => form("percent=100"),
        ("POST", "/ui/stacks/{stack}/rollback") => form("reason=x"),
        ("POST", "/ui/stacks/{stack}/state") => form("state=DEPRECATED&reason=x"),
        ("POST", "/ui/imports/rollback") => form("to=1&reason=x"),
        ("POST", "/ui/operations/revoke") => form("user=nobody"),
        ("POST", "/ui/logout") => form("x=1"),
        _ => Vec::new(),
    };
    let path = match pattern {
        "/stacks/v1/{stack}/register" => {
            path.replace(place.stack, &format!("custom-{}", place.stack))
        }
        "/api/v1/stacks/{stack}/effect" => {
            format!("{path}?action=promote&image={image}&percent=10")
        }
        "/api/v1/vulns" => format!("{path}?image={image}"),
        _ => path,
    };
    (path, body)
}

pub(crate) fn refused(r: &Reply, chunk: bool) -> bool {
    let login = r.status.as_u16() == 303 && r.header("location").starts_with("/ui/login?next=");
    matches!(r.status.as_u16(), 401 | 403) || login || (chunk && r.status.as_u16() == 404)
}

pub(crate) fn root(data: &Path) -> String {
    std::fs::read_to_string(data.join("refs/root")).unwrap()
}

/// The first chunk of `stack`'s rootfs index not in `not_in`.
pub(crate) async fn a_chunk(router: &Router, stack: &str, not_in: &[String]) -> String {
    let admin = basic("admin");
    let r = send_body(
        router,
        "GET",
        &format!("/stacks/v1/{stack}/rootfs.caibx"),
        &[("authorization", &admin)],
        vec![],
    )
    .await;
    assert_eq!(r.status.as_u16(), 200, "index of {stack}");
    let index = airlock::chunks::BlobIndex::parse(&r.body).unwrap();
    index
        .chunks
        .iter()
        .map(|c| c.id.store_path())
        .find(|p| !not_in.contains(p))
        .unwrap_or_else(|| panic!("{stack}: no chunk of its own"))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_every_caller_inside_and_outside() {
    let mut f = tokio::task::spawn_blocking(fixture).await.unwrap();
    let data = f.data.clone();
    let routers = tokio::task::spawn_blocking(move || (router(&data, false), router(&data, true)))
        .await
        .unwrap();
    let (closed, open) = routers;
    f.inside.chunk = a_chunk(&closed, "bb", &[]).await;
    let all_bb: Vec<String> = {
        let admin = basic("admin");
        let r = send_body(
            &closed,
            "GET",
            "/stacks/v1/bb/rootfs.caibx",
            &[("authorization", &admin)],
            vec![],
        )
        .await;
        airlock::chunks::BlobIndex::parse(&r.body)
            .unwrap()
            .chunks
            .iter()
            .map(|c| c.id.store_path())
            .collect()
    };
    f.outside.chunk = a_chunk(&closed, "sec", &all_bb).await;

    // The table and the expectations name the same rows.
    let key = |r: &Route| (r.methods.names().join(" "), r.path.to_string());
    let table: Vec<(String, String)> = ROUTES.iter().map(key).collect();
    let expected: Vec<(String, String)> = EXPECTED
        .iter()
        .map(|(m, p, _, _)| (m.to_string(), p.to_string()))
        .collect();
    let missing: Vec<_> = table.iter().filter(|k| !expected.contains(k)).collect();
    let extra: Vec<_> = expected.iter().filter(|k| !table.contains(k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "routes without an expectation: {missing:?}; expectations without a route: {extra:?}"
    );

    let (cookie, csrf) = console_session(&closed).await;
    let (open_cookie, open_csrf) = console_session(&open).await;
    let mut wrong = Vec::new();
    let mut tried = 0;
    let places: [(&str, &Place); 2] = [("inside", &f.inside), ("outside", &f.outside)];
    for (methods, pattern, inside, outside) in EXPECTED {
        for method in methods.split(' ') {
            for (where_, place) in places {
                let allowed = if where_ == "inside" { inside } else { outside };
                for (letter, user) in CALLERS {
                    let router = if letter == 'N' { &open } else { &closed };
                    // A form gets a session of its own (a logout ends the one it is sent with).
                    let (cookie, csrf) = match pattern.starts_with("/ui/") && method == "POST" {
                        true => console_session(router).await,
                        false if letter == 'N' => (open_cookie.clone(), open_csrf.clone()),
                        false => (cookie.clone(), csrf.clone()),
                    };
                    let (path, body) = request(pattern, method, place, &csrf);
                    let mut headers: Vec<(&str, String)> = vec![("cookie", cookie.clone())];
                    if let Some(u) = user {
                        headers.push(("authorization", basic(u)));
                    }
                    if !body.is_empty() && (pattern.starts_with("/ui/")) {
                        headers.push(("content-type", "application/x-www-form-urlencoded".into()));
                    }
                    let h: Vec<(&str, &str)> =
                        headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let before = root(&f.data);
                    let r = send_body(router, method, &path, &h, body).await;
                    tried += 1;
                    let chunk = pattern.contains("{chunk*}");
                    let want = allowed.contains(letter);
                    let got = !refused(&r, chunk);
                    let text = String::from_utf8_lossy(&r.body);
                    if want != got {
                        wrong.push(format!(
                            "{method} {path} as {letter}: {} (expected {}) {}",
                            r.status,
                            if want { "allowed" } else { "refused" },
                            &text[..text.len().min(160)]
                        ));
                    }
                    if !want {
                        if root(&f.data) != before {
                            wrong.push(format!(
                                "{method} {path} as {letter}: refused but the state changed"
                            ));
                        }
                        if text.contains(f.secret.trim_start_matches("sha256:")) {
                            wrong.push(format!(
                                "{method} {path} as {letter}: refused but names the outside image"
                            ));
                        }
                    }
                    if want && chunk {
                        assert_eq!(r.status.as_u16(), 200, "{method} {path} as {letter}");
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {tried} wrong:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    assert!(tried > 900, "{tried}");
}

/// Items 1–5 of issue 36, as a prefix-limited admin (and anonymous with
/// `anonymous_read`), with the exact requests: refused, nothing changed,
/// and the lists name nothing outside the prefix.
#[tokio::test(flavor = "multi_thread")]
async fn a_prefix_limited_admin_sees_and_changes_only_its_prefix() {
    let f = tokio::task::spawn_blocking(fixture).await.unwrap();
    let data = f.data.clone();
    let (closed, open) =
        tokio::task::spawn_blocking(move || (router(&data, false), router(&data, true)))
            .await
            .unwrap();
    let (cookie, csrf) = console_session(&closed).await;
    let padmin = basic("padmin");
    let form = |router: &Router, path: &str, fields: String| {
        let (router, path) = (router.clone(), path.to_string());
        let (cookie, padmin) = (cookie.clone(), padmin.clone());
        async move {
            send_body(
                &router,
                "POST",
                &path,
                &[
                    ("cookie", &cookie),
                    ("authorization", &padmin),
                    ("content-type", "application/x-www-form-urlencoded"),
                ],
                fields.into_bytes(),
            )
            .await
        }
    };
    let before = root(&f.data);
    // 1. Console forms on a stack outside the prefix, or with an image outside it.
    let r = form(
        &closed,
        "/ui/stacks/sec/state",
        format!("state=DISABLED&reason=x&confirm=yes&expect=x&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status.as_u16(), 403);
    let r = form(
        &closed,
        "/ui/stacks/bb/promote",
        format!("image=private/secret:v1&percent=10&confirm=yes&expect=x&csrf={csrf}"),
    )
    .await;
    assert_eq!(
        r.status.as_u16(),
        403,
        "{}",
        String::from_utf8_lossy(&r.body)
    );
    // 2. Whole-state rollback and revocation.
    let r = form(
        &closed,
        "/ui/imports/rollback",
        format!("to=1&reason=x&confirm=yes&expect=3&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status.as_u16(), 403);
    let r = form(
        &closed,
        "/ui/operations/revoke",
        format!("user=x&confirm=yes&csrf={csrf}"),
    )
    .await;
    assert_eq!(r.status.as_u16(), 403);
    assert_eq!(root(&f.data), before, "a refused form changed the state");
    // 3. Reads: only what the prefix covers.
    let secret_hex = f.secret.trim_start_matches("sha256:").to_string();
    for path in [
        "/api/v1/stacks",
        "/api/v1/imports?all=1",
        "/api/v1/overview",
        "/api/v1/operations",
        "/ui/stacks",
        "/ui/imports?all=1",
        "/ui/",
        "/ui/operations",
        "/api/v1/repositories",
    ] {
        let r = send_body(&closed, "GET", path, &[("authorization", &padmin)], vec![]).await;
        let text = String::from_utf8_lossy(&r.body);
        assert_eq!(r.status.as_u16(), 200, "{path}");
        for leak in [
            secret_hex.as_str(),
            "private/secret",
            "/stacks/v1/sec",
            "\"sec\"",
            f.data.to_str().unwrap(),
            "padmin\",\"roles",
        ] {
            assert!(
                !text.contains(leak),
                "{path} names {leak}: {}",
                &text[..text.len().min(400)]
            );
        }
    }
    let r = send_body(
        &closed,
        "GET",
        "/api/v1/stacks",
        &[("authorization", &padmin)],
        vec![],
    )
    .await;
    assert_eq!(r.json()["stacks"].as_array().unwrap().len(), 1, "only bb");
    // The full admin sees both, the store path and the users.
    let admin = basic("admin");
    let r = send_body(
        &closed,
        "GET",
        "/api/v1/overview",
        &[("authorization", &admin)],
        vec![],
    )
    .await;
    assert!(String::from_utf8_lossy(&r.body).contains(f.data.to_str().unwrap()));
    let r = send_body(
        &closed,
        "GET",
        "/api/v1/stacks",
        &[("authorization", &admin)],
        vec![],
    )
    .await;
    assert_eq!(r.json()["stacks"].as_array().unwrap().len(), 2);
    // The effect preview of a promotion of an image outside the prefix.
    let r = send_body(
        &closed,
        "GET",
        "/api/v1/stacks/bb/effect?action=promote&image=private/secret:v1&percent=10",
        &[("authorization", &padmin)],
        vec![],
    )
    .await;
    assert_eq!(r.status.as_u16(), 403);
    assert!(!String::from_utf8_lossy(&r.body).contains(&secret_hex));
    // 4. A chunk of the outside rootfs: 404, as an absent chunk is.
    let sec_chunk = a_chunk(&closed, "sec", &[]).await;
    let bb = a_chunk(&closed, "bb", &[]).await;
    if sec_chunk != bb {
        let r = send_body(
            &closed,
            "GET",
            &format!("/stacks/v1/chunks/{sec_chunk}"),
            &[("authorization", &padmin)],
            vec![],
        )
        .await;
        assert_eq!(r.status.as_u16(), 404);
        let absent = airlock::chunks::ChunkId::of(b"no such chunk").store_path();
        let a = send_body(
            &closed,
            "GET",
            &format!("/stacks/v1/chunks/{absent}"),
            &[("authorization", &padmin)],
            vec![],
        )
        .await;
        assert_eq!(a.status.as_u16(), 404);
        let norm = |r: &Reply, id: &str| String::from_utf8_lossy(&r.body).replace(id, "ID");
        let id = |p: &str| {
            p.rsplit('/')
                .next()
                .unwrap()
                .trim_end_matches(".cacnk")
                .to_string()
        };
        assert_eq!(
            norm(&r, &id(&sec_chunk)),
            norm(&a, &id(&absent)),
            "denied and absent differ"
        );
    }
    // 5. Anonymous with anonymous_read: pulls yes, the console no.
    for path in [
        "/api/v1/stacks/sec",
        "/api/v1/imports?all=1",
        "/api/v1/overview",
    ] {
        let r = send_body(&open, "GET", path, &[], vec![]).await;
        assert_eq!(r.status.as_u16(), 401, "{path}");
    }
    let r = send_body(&open, "GET", "/ui/stacks/sec", &[], vec![]).await;
    assert_eq!(r.status.as_u16(), 303);
    assert!(r.header("location").starts_with("/ui/login"));
    let r = send_body(
        &open,
        "GET",
        "/v2/stacks/bb/manifests/v1",
        &[("accept", "application/vnd.oci.image.manifest.v1+json")],
        vec![],
    )
    .await;
    assert_eq!(r.status.as_u16(), 200);
}

/// A credential bound to cells reports only for them; long cell ids (128
/// to 253 characters, documented as valid) are stored on the filesystem.
#[tokio::test(flavor = "multi_thread")]
async fn cell_reports_are_bound_and_long_ids_work() {
    let f = tokio::task::spawn_blocking(fixture).await.unwrap();
    let data = f.data.clone();
    let closed = tokio::task::spawn_blocking(move || router(&data, false))
        .await
        .unwrap();
    let body = serde_json::json!({ "digest": f.inside.digest }).to_string();
    let cell = basic("cell");
    let admin = basic("admin");
    let put = |id: String, auth: String| {
        let (closed, body) = (closed.clone(), body.clone());
        async move {
            send_body(
                &closed,
                "PUT",
                &format!("/stacks/v1/bb/cells/{id}"),
                &[
                    ("authorization", &auth),
                    ("content-type", "application/json"),
                ],
                body.into_bytes(),
            )
            .await
        }
    };
    assert_eq!(
        put("diego-cell/0a".into(), cell.clone())
            .await
            .status
            .as_u16(),
        204
    );
    for invented in ["router/0a", "x", "diego-cellX"] {
        let r = put(invented.into(), cell.clone()).await;
        assert_eq!(r.status.as_u16(), 403, "{invented}");
    }
    for n in [127, 128, 200, 253] {
        let id = format!("diego-cell/{}", "a".repeat(n - 11));
        assert_eq!(id.len(), n);
        let r = put(id.clone(), admin.clone()).await;
        assert_eq!(
            r.status.as_u16(),
            204,
            "{n}: {}",
            String::from_utf8_lossy(&r.body)
        );
    }
    let r = send_body(
        &closed,
        "GET",
        "/stacks/v1/bb/status",
        &[("authorization", &admin)],
        vec![],
    )
    .await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(r.json()["cells"], 5, "{}", String::from_utf8_lossy(&r.body));
}
