//! One parse per request (issue 60): the names the access layer checks are
//! the names the handler serves, on every surface. The fixture is
//! `authz_routes`' (stack `bb` of `stacks/bb` inside the prefix `stacks/`,
//! stack `sec` of `private/secret` outside it; `padmin` an admin and
//! `pcell` a cell, both limited to `stacks/`).
//!
//! - The repro of item 1 as written: a percent-encoded stack name
//!   (`%73ec` for `sec`) took the whole stack, and let a prefix-limited
//!   admin roll back and promote a stack outside its prefix.
//! - A property over generated paths: for every row with a name, every
//!   caller and both places, each name spelled with random
//!   percent-encoding gets the answer its plain spelling gets; a name
//!   mutated (dot segments, double slashes, case, malformed `%`, encoded
//!   separators) is either refused without changing anything, or is a
//!   valid name the access layer and the handler both read as the same
//!   object (its canonical spelling gets the same answer).
//! - `/metrics` shows a prefix-limited caller the stack gauges of its
//!   stacks only.

use crate::authz_routes::{
    Fixture, a_chunk, basic, console_session, fixture, refused, request, root, router,
};
use crate::common;

use airlock::server::routes::{self, Found, Params, ROUTES};
use axum::Router;
use axum::http::Method;
use common::router::{Reply, send_body};

async fn setup() -> (Fixture, Router, Router) {
    let mut f = tokio::task::spawn_blocking(fixture).await.unwrap();
    let data = f.data.clone();
    let (closed, open) =
        tokio::task::spawn_blocking(move || (router(&data, false), router(&data, true)))
            .await
            .unwrap();
    f.inside.chunk = a_chunk(&closed, "bb", &[]).await;
    (f, closed, open)
}

/// Sends `method path` as `user` (`None`: no credentials) with a console
/// session and, for a form, its fields.
async fn send(
    router: &Router,
    method: &str,
    path: &str,
    user: Option<&str>,
    session: &(String, String),
    body: Vec<u8>,
) -> Reply {
    let mut h: Vec<(&str, String)> = vec![("cookie", session.0.clone())];
    if let Some(u) = user {
        h.push(("authorization", basic(u)));
    }
    if path.starts_with("/ui/") && method == "POST" {
        h.push(("content-type", "application/x-www-form-urlencoded".into()));
    }
    let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    send_body(router, method, path, &h, body).await
}

/// Item 1 of issue 60, exactly: `sec` here is the issue's `bb` (a stack
/// whose image is outside the callers' prefix), spelled `%73ec`.
#[tokio::test(flavor = "multi_thread")]
async fn an_encoded_stack_name_takes_over_nothing() {
    let (f, closed, _) = setup().await;
    let session = console_session(&closed).await;
    let csrf = session.1.clone();
    let before = root(&f.data);
    let get = |path: &'static str, user: &'static str| {
        let (closed, session) = (closed.clone(), session.clone());
        async move { send(&closed, "GET", path, Some(user), &session, vec![]).await }
    };
    for path in [
        "/api/v1/stacks/sec",
        "/api/v1/stacks/%73ec",
        "/api/v1/stacks/%73%65%63",
        "/ui/stacks/%73ec",
        "/api/v1/stacks/%73ec/effect?action=rollback",
        "/stacks/v1/%73ec",
        "/stacks/v1/%73ec/status",
        "/stacks/v1/%73ec/rootfs.tar",
    ] {
        let r = get(path, "pcell").await;
        assert_eq!(
            r.status.as_u16(),
            403,
            "pcell GET {path}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(
            !String::from_utf8_lossy(&r.body).contains(f.secret.trim_start_matches("sha256:")),
            "{path}: the refusal names the outside image"
        );
    }
    // The same spelling of a stack inside the prefix is that stack.
    let plain = get("/api/v1/stacks/bb", "pcell").await;
    let encoded = get("/api/v1/stacks/%62b", "pcell").await;
    assert_eq!(plain.status.as_u16(), 200);
    assert_eq!(encoded.status.as_u16(), 200);
    assert_eq!(plain.json()["name"], encoded.json()["name"]);
    assert_eq!(encoded.json()["name"], "bb");
    let form = |path: &'static str, fields: String| {
        let (closed, session) = (closed.clone(), session.clone());
        async move {
            send(
                &closed,
                "POST",
                path,
                Some("padmin"),
                &session,
                fields.into_bytes(),
            )
            .await
        }
    };
    for (path, fields) in [
        ("/ui/stacks/sec/promote", "image=stacks/bb:v1&percent=100"),
        ("/ui/stacks/%73ec/rollback", "reason=x"),
        ("/ui/stacks/%73ec/promote", "image=stacks/bb:v1&percent=100"),
        ("/ui/stacks/%73%65c/state", "state=DISABLED&reason=x"),
        ("/ui/stacks/%73ec/rollout", "percent=100"),
    ] {
        for confirm in ["", "&confirm=yes&expect=x"] {
            let r = form(path, format!("{fields}{confirm}&csrf={csrf}")).await;
            assert_eq!(
                r.status.as_u16(),
                403,
                "padmin POST {path}{confirm}: {}",
                String::from_utf8_lossy(&r.body)
            );
        }
    }
    for path in [
        "/stacks/v1/%73ec/rollback",
        "/stacks/v1/%73ec/promote",
        "/stacks/v1/%73ec/state",
    ] {
        let r = send(
            &closed,
            "POST",
            path,
            Some("padmin"),
            &session,
            br#"{"image":"stacks/bb:v1","reason":"x","state":"DISABLED"}"#.to_vec(),
        )
        .await;
        assert_eq!(r.status.as_u16(), 403, "padmin POST {path}");
    }
    assert_eq!(root(&f.data), before, "a refused request changed the state");
    // Malformed encodings and names of no type are refused before any
    // handler, never taken to name nothing.
    for path in [
        "/api/v1/stacks/%",
        "/api/v1/stacks/%7",
        "/api/v1/stacks/%zz",
        "/api/v1/stacks/S%45C",
        "/ui/stacks/%2e%2e",
        "/stacks/v1/%2Fsec",
    ] {
        let r = get(path, "pcell").await;
        assert_eq!(r.status.as_u16(), 400, "pcell GET {path}");
    }
}

/// A tiny deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `value` with random bytes percent-encoded (hex digits in random case);
/// decodes to `value` again. A `/` is kept or encoded as `%2F` only where
/// `slashes` (a multi-segment name: both spell the same name).
fn encode(value: &str, slashes: bool, rng: &mut Rng) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if (b == b'/' && !slashes) || rng.below(2) == 0 {
            out.push(b as char);
            continue;
        }
        let hex = format!("%{b:02X}");
        out.push_str(&if rng.below(2) == 0 {
            hex
        } else {
            hex.to_lowercase()
        });
    }
    out
}

/// `value` changed in one of the ways an attacker spells a path.
fn mutate(value: &str, rng: &mut Rng) -> String {
    let at = (rng.below(value.len() as u64 + 1)) as usize;
    let at = (0..=at).rev().find(|i| value.is_char_boundary(*i)).unwrap();
    let (a, b) = value.split_at(at);
    match rng.below(11) {
        0 => format!("{a}/./{b}"),
        1 => format!("{a}/../{b}"),
        2 => format!("{a}//{b}"),
        3 => value.to_uppercase(),
        4 => format!("{a}%{b}"),
        5 => format!("{a}%zz{b}"),
        6 => format!("{a}%2e%2e%2f{b}"),
        7 => format!("{a}%00{b}"),
        8 => format!("{a}%2F{b}"),
        9 => format!("./{value}"),
        _ => format!("{a}%C3%28{b}"),
    }
}

/// The path of `pattern` with each name spelled by `spell` (the name
/// placeholder, its value, whether it may hold `/`).
fn spelled(pattern: &str, path: &str, spell: &mut dyn FnMut(&str, &str, bool) -> String) -> String {
    // The plain path's names, found by walking the pattern against it.
    let pat: Vec<&str> = pattern[1..].split('/').collect();
    let segs: Vec<&str> = path[1..].split(['?']).next().unwrap().split('/').collect();
    let query = path.split_once('?').map(|(_, q)| format!("?{q}"));
    let mut out = Vec::new();
    let many = pat.iter().position(|p| p.ends_with("*}"));
    let (before, after) = match many {
        Some(i) => (i, pat.len() - i - 1),
        None => (pat.len(), 0),
    };
    for (p, s) in pat[..before].iter().zip(&segs[..before]) {
        out.push(match p.starts_with('{') {
            true => spell(p, s, false),
            false => s.to_string(),
        });
    }
    if let Some(i) = many {
        let middle = segs[before..segs.len() - after].join("/");
        out.push(spell(pat[i], &middle, true));
        for (p, s) in pat[i + 1..].iter().zip(&segs[segs.len() - after..]) {
            out.push(match p.starts_with('{') {
                true => spell(p, s, false),
                false => s.to_string(),
            });
        }
    }
    format!("/{}{}", out.join("/"), query.unwrap_or_default())
}

/// The canonical spelling of what `find` read from `path` (a path of
/// `pattern`): the same path with each name as its decoded, typed value.
fn canonical(pattern: &str, found: &Params, path: &str) -> String {
    use airlock::stacks::api::Route as S;
    let mut names: Vec<(&str, String)> = Vec::new();
    if let Some(r) = found.repository() {
        names.push(("{repo*}", r.to_string()));
    }
    if let Some(s) = found.stack() {
        names.push(("{stack}", s.to_string()));
    }
    match found {
        Params::Registry(r) => {
            use airlock::registry::routes::Route as R;
            match r {
                R::Manifest { reference, .. } => names.push(("{reference}", reference.to_string())),
                R::Blob { digest, .. } => names.push(("{blob}", digest.to_string())),
                R::Referrers { digest, .. } => names.push(("{subject}", digest.to_string())),
                R::Upload {
                    session: Some(s), ..
                } => names.push(("{session}", s.as_str().to_string())),
                _ => {}
            }
        }
        Params::Stacks(S::Cell(_, c)) => names.push(("{cell*}", c.clone())),
        Params::Stacks(S::Lifecycle(d)) => names.push(("{digest}", d.to_string())),
        Params::Stacks(S::Chunk(c)) => names.push(("{chunk*}", c.store_path())),
        Params::Torcx(t) => {
            names.push(("{remote}", t.remote.clone()));
            names.push(("{board}", t.board.clone()));
            names.push(("{os}", t.os_version.clone()));
            names.push(("{file}", t.file.clone()));
        }
        Params::Named { asset: Some(a), .. } => names.push(("{file}", a.0.clone())),
        _ => {}
    }
    spelled(pattern, path, &mut |p, s, _| {
        names
            .iter()
            .find(|(n, _)| n == &p)
            .map_or_else(|| s.to_string(), |(_, v)| v.clone())
    })
}

const USERS: [(char, Option<&str>); 6] = [
    ('r', Some("reader")),
    ('c', Some("cell")),
    ('q', Some("pcell")),
    ('p', Some("padmin")),
    ('a', Some("admin")),
    ('n', None),
];

#[tokio::test(flavor = "multi_thread")]
async fn generated_paths_name_what_the_access_layer_checked() {
    let (mut f, closed, _) = setup().await;
    let all_bb = vec![f.inside.chunk.clone()];
    f.outside.chunk = a_chunk(&closed, "sec", &all_bb).await;
    let session = console_session(&closed).await;
    let mut rng = Rng(0x6f6e_6520_7061_7273);
    let (mut tried, mut wrong) = (0, Vec::new());
    let rows: Vec<_> = ROUTES
        .iter()
        .filter(|r| r.path.contains('{'))
        .filter(|r| !r.path.starts_with("/ui/assets/"))
        .collect();
    for row in rows {
        for method in row.methods.names() {
            for place in [&f.inside, &f.outside] {
                let (plain, body) = request(row.path, method, place, &session.1);
                for (letter, user) in USERS {
                    let base = send(&closed, method, &plain, user, &session, body.clone()).await;
                    let read = method == "GET" || method == "HEAD";
                    // Writes only where the plain one is refused: nothing
                    // may change, whatever the spelling.
                    if !read && !refused(&base, false) {
                        continue;
                    }
                    for variant in 0..12 {
                        let path = spelled(
                            row.path,
                            &plain,
                            &mut |_, value, slashes| match variant < 6 {
                                true => encode(value, slashes, &mut rng),
                                false => mutate(value, &mut rng),
                            },
                        );
                        let before = root(&f.data);
                        let got = send(&closed, method, &path, user, &session, body.clone()).await;
                        tried += 1;
                        let m: Method = method.parse().unwrap();
                        let want = match routes::find(&m, path.split('?').next().unwrap()) {
                            Found::Route(r, params) => Some(canonical(r.path, &params, &path)),
                            _ => None,
                        };
                        let say = |what: &str| {
                            format!(
                                "{method} {path} as {letter} (plain {plain}: {}): {what}: {} {}",
                                base.status,
                                got.status,
                                String::from_utf8_lossy(&got.body[..got.body.len().min(160)])
                            )
                        };
                        match want {
                            // The same object as its canonical spelling.
                            Some(canon) => {
                                let expect = if canon == plain {
                                    base.status
                                } else {
                                    send(&closed, method, &canon, user, &session, body.clone())
                                        .await
                                        .status
                                };
                                if got.status != expect {
                                    wrong.push(say(&format!("expected {expect} as {canon}")));
                                }
                                if variant < 6 && canon != plain {
                                    wrong.push(say("an encoding decoded to another name"));
                                }
                            }
                            // No row: refused before any handler.
                            None => {
                                if !(400..500).contains(&got.status.as_u16()) {
                                    wrong.push(say("not refused"));
                                }
                            }
                        }
                        if !read && root(&f.data) != before {
                            wrong.push(say("the state changed"));
                        }
                        if refused(&got, false)
                            && String::from_utf8_lossy(&got.body)
                                .contains(f.secret.trim_start_matches("sha256:"))
                        {
                            wrong.push(say("a refusal names the outside image"));
                        }
                    }
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {tried} wrong:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(40)].join("\n")
    );
    assert!(tried > 5000, "{tried}");
}

/// `/metrics` (item 4): a prefix-limited admin sees the gauges of the
/// stacks in its prefix only; an unlimited one sees every stack.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_labels_are_bounded_by_the_callers_prefixes() {
    let (_f, closed, _) = setup().await;
    let session = console_session(&closed).await;
    let text = |user: &'static str| {
        let (closed, session) = (closed.clone(), session.clone());
        async move {
            let r = send(&closed, "GET", "/metrics", Some(user), &session, vec![]).await;
            assert_eq!(r.status.as_u16(), 200, "{user}");
            String::from_utf8(r.body).unwrap()
        }
    };
    let limited = text("padmin").await;
    let all = text("admin").await;
    for t in [&limited, &all] {
        assert!(
            t.contains("airlock_stack_rootfs_downloads_in_flight{stack=\"bb\"} 0"),
            "{t}"
        );
        assert!(
            t.contains("airlock_stack_vulnerabilities{stack=\"bb\","),
            "{t}"
        );
        assert!(t.ends_with("# EOF\n"), "{t}");
    }
    // Every gauge labelled with a stack outside the prefix is left out,
    // the process's own (vulnerabilities) as the stack room's.
    assert!(!limited.contains("stack=\"sec\""), "{limited}");
    for gauge in [
        "airlock_stack_rootfs_downloads_in_flight{stack=\"sec\"} 0",
        "airlock_stack_vulnerabilities{stack=\"sec\",",
    ] {
        assert!(all.contains(gauge), "{gauge}");
    }
}
