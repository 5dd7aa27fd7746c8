//! The web console (issue 28) over HTTPS with users: in a real browser
//! (Debian chromium and chromium-driver, driven by Python selenium:
//! tests/ui/console_test.py) against imported content, a stack at 10 %
//! and 200 reporting cells; and its sessions, cookies and headers with
//! curl.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::site::{self, Site};
use common::*;

/// The console part of the config, after the site's own sections.
fn console_config() -> String {
    format!(
        "[ui]\nenabled = true\nsample_interval = \"1s\"\n[stacks]\nallow_admin = true\n\
         [[user]]\nname = \"cells\"\n{}\nroles = [\"cell\"]\n",
        site::hash("cells-pw")
    )
}

/// The annotation every page must show as text.
const XSS: &str = "<img src=x onerror=alert(1)>";

/// Imports into `site` a bundle with `stacks/bb:latest` and `:v2` (a
/// `[[stack]]` candidate), `library/xss:latest` (annotated with [`XSS`])
/// and a torcx addon; promotes `bb` to latest, then v2 at 10 %.
fn content(site: &Site) {
    let dir = site.dir.join("content");
    std::fs::create_dir_all(&dir).unwrap();
    let layout = copy_fixture_layout(&dir);
    let l = |tag: &str| format!("{}:{tag}", layout.display());
    let work = dir.join("work");
    run_ok(
        Command::new("umoci")
            .args(["unpack", "--image", &l("latest")])
            .arg(&work),
    );
    std::fs::write(work.join("rootfs/etc/stack-version"), "2\n").unwrap();
    run_ok(
        Command::new("umoci")
            .args(["repack", "--image", &l("v2")])
            .arg(&work),
    );
    run_ok(Command::new("umoci").args([
        "config",
        "--image",
        &l("latest"),
        "--tag",
        "xss",
        "--manifest.annotation",
        &format!("org.opencontainers.image.description={XSS}"),
    ]));
    let mut toml = String::new();
    for (tag, repo, as_tag) in [
        ("latest", "stacks/bb", "latest"),
        ("v2", "stacks/bb", "v2"),
        ("xss", "library/xss", "latest"),
    ] {
        toml.push_str(&image_toml(&format!("oci:{}", l(tag)), repo, &[as_tag], ""));
    }
    toml.push_str(
        "[[stack]]\nname = \"bb\"\ndescription = \"busybox\"\nimage = \"stacks/bb:v2\"\n",
    );
    toml.push_str(&common::hello_addon(&dir));
    let config = dir.join("mirror.toml");
    std::fs::write(&config, toml).unwrap();
    let bundle = dir.join("bundle.tar");
    create_bundle(&config, &bundle, &[]);
    site.airlock_ok(&[
        "import",
        "--keyring",
        site.dir.join("keyring.asc").to_str().unwrap(),
        bundle.to_str().unwrap(),
    ]);
    site.airlock_ok(&["stack", "promote", "bb", "--image", "stacks/bb:latest"]);
    site.airlock_ok(&["stack", "promote", "xs", "--image", "library/xss:latest"]);
    site.airlock_ok(&[
        "stack",
        "promote",
        "bb",
        "--image",
        "stacks/bb:v2",
        "--rollout",
        "10",
        "--reason",
        "<img src=x onerror=alert(2)>",
    ]);
}

/// Fails, naming the package, unless the browser test's tools are here.
fn require_browser() {
    require_tool("chromium", "chromium");
    require_tool("chromedriver", "chromium-driver");
    let selenium = Command::new("python3")
        .args(["-c", "import selenium"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        selenium,
        "python3 module selenium is required: scripts/install-test-deps.sh (pip install selenium==4.50.0)"
    );
}

/// Where the screenshots go: `<target>/ui-screenshots`.
fn screenshots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap_or(Path::new("target"))
        .join("ui-screenshots")
}

#[test]
fn console_in_a_real_browser() {
    require_browser();
    let site = site::site(&console_config());
    content(&site);
    let _server = site.start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui/console_test.py");
    let out = Command::new("python3")
        .arg(&script)
        .env("UI_BASE", format!("https://{}", site.addr()))
        .env("UI_CA", site.dir.join("ca.crt"))
        .env("AIRLOCK", env!("CARGO_BIN_EXE_airlock"))
        .env("AIRLOCK_DATA", &site.data)
        .env("UI_SCREENSHOTS", screenshots())
        .env("UI_ADMIN", "ops:ops-pw")
        .env("UI_READER", "rd:rd-pw")
        .env("UI_PADMIN", "stk:ops-pw")
        .env("UI_CELL", "cells:cells-pw")
        .output()
        .unwrap();
    let log = std::fs::read_to_string(site.dir.join("serve.log")).unwrap_or_default();
    assert!(
        out.status.success(),
        "browser test failed:\n{}{}\nserver log (tail):\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        log.lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
    // The changes the page made are in history as the admin's, with the
    // client address, as every change over HTTP.
    let history = site.history();
    let by_console: Vec<&serde_json::Value> = history
        .iter()
        .filter(|g| {
            g["who"] == "ops" && g["reason"].as_str().unwrap_or("").starts_with("stack bb: ")
        })
        .collect();
    assert_eq!(by_console.len(), 2, "widen and rollback: {history:#?}");
    assert!(by_console.iter().all(|g| {
        g["address"]
            .as_str()
            .is_some_and(|a| a.starts_with("127.0.0.1:"))
    }));
    for page in ["overview", "stack", "tag", "operations", "confirm-rollback"] {
        let png = screenshots().join(format!("{page}.png"));
        let bytes = std::fs::read(&png).unwrap_or_default();
        assert!(
            bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
            "{} is no PNG",
            png.display()
        );
    }
}

fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    page[at..].split('"').next().unwrap().to_string()
}

/// The session cookie's value in a curl cookie jar.
fn jar_value(jar: &Path, name: &str) -> String {
    let text = std::fs::read_to_string(jar).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            l.split('\t')
                .collect::<Vec<_>>()
                .get(5..7)
                .map(|kv| (kv[0].to_string(), kv[1].to_string()))
        })
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_default()
}

#[test]
fn sessions_cookies_and_headers_over_tls() {
    let site = site::site(&console_config());
    let server = site.start();
    let jar = |name: &str| site.dir.join(name);
    let (anon, login_jar) = (jar("anon.jar"), jar("login.jar"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // An anonymous page visit goes to the login form; the API answers 401.
    let (st, h, _) = site.curl(&["/ui/stacks"]);
    assert_eq!(st, 303);
    assert!(h.contains("location: /ui/login?next=%2fui%2fstacks"), "{h}");
    assert_eq!(site.curl(&["/api/v1/overview"]).0, 401);
    // The login form hands out an anonymous session: Secure, HttpOnly,
    // SameSite=Strict, __Host- prefixed; every answer carries the CSP.
    let (st, h, page) = site.curl(&["/ui/login", "-c", &s(&anon)]);
    assert_eq!(st, 200);
    let set = h
        .lines()
        .find(|l| l.starts_with("set-cookie: "))
        .unwrap()
        .to_string();
    for part in [
        "__host-airlock-anonymous=v2.",
        "path=/",
        "httponly",
        "samesite=strict",
        "secure",
    ] {
        assert!(set.contains(part), "{set} lacks {part}");
    }
    assert!(h.contains(
        "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ), "{h}");
    assert!(h.contains("x-frame-options: deny") && h.contains("x-content-type-options: nosniff"));
    assert!(
        h.contains("strict-transport-security: max-age=31536000"),
        "no HSTS over TLS: {h}"
    );
    let csrf = csrf_of(&page);
    let login = |password: &str, token: &str| {
        site.curl(&[
            "/ui/login",
            "-b",
            &s(&anon),
            "-c",
            &s(&login_jar),
            "--data-urlencode",
            "username=ops",
            "--data-urlencode",
            &format!("password={password}"),
            "--data-urlencode",
            &format!("csrf={token}"),
            "--data-urlencode",
            "next=/ui/stacks",
        ])
    };
    assert_eq!(
        login("ops-pw", "forged").0,
        403,
        "a login without the form's token"
    );
    assert_eq!(login("wrong", &csrf).0, 401);
    let (st, h, _) = login("ops-pw", &csrf);
    assert_eq!(st, 303);
    assert!(h.contains("location: /ui/stacks"), "{h}");
    let logged_in = jar_value(&login_jar, "__Host-airlock-session");
    assert!(logged_in.starts_with("v2."), "no login cookie");
    assert_ne!(
        logged_in,
        jar_value(&anon, "__Host-airlock-anonymous"),
        "a login starts a new session"
    );
    let who = |jar: &Path| site.curl(&["/api/v1/session", "-b", &s(jar)]);
    let (st, _, body) = who(&login_jar);
    assert_eq!(st, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (v["who"].as_str(), v["admin"].as_bool()),
        (Some("ops"), Some(true))
    );
    assert_eq!(who(&anon).0, 401, "an anonymous session is no login");
    // A session cookie counts on the console only.
    assert_eq!(site.curl(&["/v2/", "-b", &s(&login_jar)]).0, 401);
    // Scripts use Basic; a reader reads the API.
    let (st, _, body) = site.curl(&["/api/v1/overview", "-u", "rd:rd-pw"]);
    assert_eq!(st, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["generation"], 0);
    // Assets need no login.
    let (st, h, css) = site.curl(&["/ui/assets/console.css"]);
    assert_eq!(st, 200);
    assert!(h.contains("content-type: text/css"));
    assert!(css.contains(".chart"));
    // Logging out ends the session here.
    let page = site.curl(&["/ui/", "-b", &s(&login_jar)]).2;
    let token = csrf_of(&page);
    let kept = jar("kept.jar");
    std::fs::copy(&login_jar, &kept).unwrap();
    let (st, h, _) = site.curl(&[
        "/ui/logout",
        "-b",
        &s(&login_jar),
        "--data-urlencode",
        &format!("csrf={token}"),
    ]);
    assert_eq!(st, 303);
    assert!(h.contains("max-age=0"), "{h}");
    assert_eq!(who(&kept).0, 401, "a logged-out session is refused");

    // A next= with CR/LF falls back to the overview.
    let (st, _, page) = site.curl(&["/ui/login", "-c", &s(&anon)]);
    assert_eq!(st, 200);
    let token = csrf_of(&page);
    let (st, h, _) = site.curl(&[
        "/ui/login",
        "-b",
        &s(&anon),
        "-c",
        &s(&login_jar),
        "--data-urlencode",
        "username=ops",
        "--data-urlencode",
        "password=ops-pw",
        "--data-urlencode",
        &format!("csrf={token}"),
        "--data-urlencode",
        "next=/ui/\r\nSet-Cookie: x=1",
    ]);
    assert_eq!(st, 303);
    assert!(h.contains("location: /ui/\r\n"), "{h}");
    // A changed password ends the user's sessions at the next request
    // after the reload (SIGHUP), on every surface of the console.
    assert_eq!(who(&login_jar).0, 200);
    let config = site.dir.join("airlock.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let old = site::hash_line_of(&text, "ops");
    std::fs::write(&config, text.replace(&old, &site::hash("ops-new"))).unwrap();
    // SAFETY: kill(2) on our own child's pid with a valid signal.
    assert_eq!(unsafe { libc::kill(server.0.id() as i32, libc::SIGHUP) }, 0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while site.curl(&["/v2/", "-u", "ops:ops-pw"]).0 != 401 {
        assert!(
            std::time::Instant::now() < deadline,
            "the reload did not take"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(who(&login_jar).0, 401, "a session outlived its password");
}

#[test]
fn console_is_off_unless_enabled() {
    let site = site::site("");
    let _server = site.start();
    assert_eq!(site.curl(&["/ui/", "-u", "ops:ops-pw"]).0, 404);
    assert_eq!(site.curl(&["/api/v1/overview", "-u", "ops:ops-pw"]).0, 404);
    assert_eq!(site.curl(&["/ui/", "-u", "rd:rd-pw"]).0, 404);
}
