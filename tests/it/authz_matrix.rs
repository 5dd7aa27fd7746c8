//! One authorization function for every surface (issue 24 §2, §3): a user
//! limited to a repository prefix acts on nothing outside it, whatever the
//! surface: registry reads, pushes and deletes, imports over HTTP, stack
//! administration, stack and rootfs reads, lifecycle, cell reports, torcx
//! (`torcx/<remote>`) and `/metrics`. Every surface × role × place
//! (inside the prefix `a`, outside `b`, and the boundary `ab`, which the
//! prefix `a` must not cover) is sent to the in-process router and
//! compared with the matrix written out below.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};

use airlock::auth::{Policy, Role, ThrottleLimits, User};
use airlock::server::{self, App};
use airlock::stacks::api::StacksConfig;
use airlock::state::StateStore;
use axum::Router;
use base64::Engine as _;
use common::router::send_body;
use common::*;

const PLACES: [&str; 3] = ["a", "b", "ab"];
const ROLES: [&str; 4] = ["reader", "cell", "admin", "metrics"];

/// The images (one per place, distinct), bundled into `<place>/x` with
/// tags `v1` and `del`, and one more bundle per place into `<place>/imp`.
struct Fixture {
    dir: PathBuf,
    base: PathBuf,
    imports: BTreeMap<&'static str, PathBuf>,
    digests: BTreeMap<&'static str, String>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap())).path().to_path_buf();
        let layout = copy_fixture_layout(&dir);
        let l = |tag: &str| format!("{}:{tag}", layout.display());
        let mut base = String::new();
        let mut imports = BTreeMap::new();
        let mut digests = BTreeMap::new();
        for place in PLACES {
            run_ok(Command::new("umoci").args([
                "config",
                "--image",
                &l("latest"),
                "--tag",
                place,
                &format!("--config.label=place={place}"),
            ]));
            digests.insert(place, layout_ref_digest(&layout, place));
            base.push_str(&format!(
                "[[image]]\nsource = \"oci:{}\"\nrepository = \"{place}/x\"\ntags = [\"v1\", \"del\"]\n\n",
                l(place)
            ));
            let cfg = dir.join(format!("imp-{place}.toml"));
            std::fs::write(
                &cfg,
                format!(
                    "[[image]]\nsource = \"oci:{}\"\nrepository = \"{place}/imp\"\ntags = [\"v1\"]\n",
                    l(place)
                ),
            )
            .unwrap();
            let out = dir.join(format!("imp-{place}.tar"));
            create_bundle(&cfg, &out, &[]);
            imports.insert(place, out);
        }
        let cfg = dir.join("base.toml");
        std::fs::write(&cfg, base).unwrap();
        let out = dir.join("base.tar");
        create_bundle(&cfg, &out, &[]);
        Fixture {
            dir,
            base: out,
            imports,
            digests,
        }
    })
}

fn basic(user: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{user}-pw"))
    )
}

/// A store with the base bundle imported and stacks `s<place>` promoted,
/// served in process to users `reader`, `cell`, `admin` and `metrics`,
/// each limited to the prefixes `a` and `torcx/a`.
fn site() -> (Router, tempfile::TempDir) {
    let f = fixture();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (_, keyring) = test_key();
    import_bundle(&data, &keyring, &f.base);
    let d = data.to_str().unwrap();
    for place in PLACES {
        airlock_ok(&[
            "stack",
            "promote",
            &format!("s{place}"),
            "--image",
            &format!("{place}/x:v1"),
            "--data",
            d,
        ]);
    }
    let users = ROLES
        .iter()
        .map(|role| {
            let hash = site::hash(&format!("{role}-pw"));
            let hash = hash
                .trim_start_matches("password_hash = \"")
                .trim_end_matches('"');
            User {
                name: role.to_string(),
                password_hash: Some(hash.to_string()),
                roles: vec![match *role {
                    "reader" => Role::Reader,
                    "cell" => Role::Cell,
                    "admin" => Role::Admin,
                    _ => Role::Metrics,
                }],
                repositories: vec!["a".into(), "torcx/a".into()],
                cells: Vec::new(),
            }
        })
        .collect();
    let policy = Policy::new(users, false, ThrottleLimits::default()).unwrap();
    let store = Arc::new(airlock::store::fs::FsStore::open(&data).unwrap());
    let config = airlock::registry::RegistryConfig {
        allow_push: true,
        allow_delete: true,
        ..Default::default()
    };
    let mut app = App::with_config(StateStore::new(store), config).with_stacks(StacksConfig {
        allow_admin: true,
        ..StacksConfig::default()
    });
    app.auth = arc_swap::ArcSwap::from_pointee(policy);
    app.import_keyring = arc_swap::ArcSwap::from_pointee(Some(keyring));
    (server::router(Arc::new(app)), tmp)
}

/// The request of `surface` about `place`: (method, path, body).
fn request(surface: &str, place: &str) -> (&'static str, String, Vec<u8>) {
    let f = fixture();
    let digest = &f.digests[place];
    match surface {
        "pull" => ("GET", format!("/v2/{place}/x/manifests/v1"), vec![]),
        "push" => ("POST", format!("/v2/{place}/x/blobs/uploads/"), vec![]),
        "delete" => ("DELETE", format!("/v2/{place}/x/manifests/del"), vec![]),
        "import" => (
            "POST",
            "/admin/v1/imports".into(),
            std::fs::read(&f.imports[place]).unwrap(),
        ),
        "promote" => (
            "POST",
            format!("/stacks/v1/s{place}/promote"),
            format!(r#"{{"image": "{place}/x:v1"}}"#).into_bytes(),
        ),
        "set-state" => (
            "POST",
            format!("/stacks/v1/s{place}/state"),
            br#"{"state": "ACTIVE"}"#.to_vec(),
        ),
        "show" => ("GET", format!("/stacks/v1/s{place}"), vec![]),
        "rootfs" => ("HEAD", format!("/stacks/v1/s{place}/rootfs.tar"), vec![]),
        "lifecycle" => ("GET", format!("/stacks/v1/lifecycle/{digest}"), vec![]),
        "cell-report" => (
            "PUT",
            format!("/stacks/v1/s{place}/cells/c1"),
            format!(r#"{{"digest": "{digest}"}}"#).into_bytes(),
        ),
        "torcx" => (
            "GET",
            format!("/torcx/{place}/amd64-usr/1.0.0/torcx_remote_contents.json.asc"),
            vec![],
        ),
        "vulns-image" => ("GET", format!("/api/v1/vulns?image={place}/x:v1"), vec![]),
        "vulns-stack" => ("GET", format!("/api/v1/vulns?stack=s{place}"), vec![]),
        "vulns-lifecycle" => ("GET", format!("/api/v1/vulns?digest={digest}"), vec![]),
        _ => unreachable!("{surface}"),
    }
}

/// Who may do what, inside the prefix (`a`); outside (`b`) and at the
/// boundary (`ab`) nobody may do anything.
const ALLOWED_INSIDE: &[(&str, &[&str])] = &[
    ("pull", &["reader", "cell", "admin"]),
    ("push", &["admin"]),
    ("delete", &["admin"]),
    ("import", &["admin"]),
    ("promote", &["admin"]),
    ("set-state", &["admin"]),
    ("show", &["cell", "admin"]),
    ("rootfs", &["cell", "admin"]),
    ("lifecycle", &["cell", "admin"]),
    ("cell-report", &["cell", "admin"]),
    ("torcx", &["reader", "cell", "admin"]),
    ("vulns-image", &["reader", "cell", "admin"]),
    ("vulns-stack", &["reader", "cell", "admin"]),
    ("vulns-lifecycle", &["reader", "cell", "admin"]),
];

#[tokio::test(flavor = "multi_thread")]
async fn every_surface_role_and_prefix() {
    let (router, _tmp) = tokio::task::spawn_blocking(site).await.unwrap();
    let mut wrong = Vec::new();
    for (surface, inside) in ALLOWED_INSIDE {
        for place in PLACES {
            for role in ROLES {
                let (method, path, body) = request(surface, place);
                let auth = basic(role);
                let r = send_body(&router, method, &path, &[("authorization", &auth)], body).await;
                let denied = matches!(r.status.as_u16(), 401 | 403);
                let allowed = place == "a" && inside.contains(&role);
                if denied == allowed {
                    wrong.push(format!(
                        "{surface} {method} {path} as {role}: {} (expected {}) {}",
                        r.status,
                        if allowed { "allowed" } else { "403" },
                        String::from_utf8_lossy(&r.body[..r.body.len().min(200)])
                    ));
                }
                if !allowed {
                    assert_eq!(r.status.as_u16(), 403, "{surface} {path} as {role}");
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // /metrics: the metrics and admin roles; others 403, anonymous 401.
    for (who, want) in [
        ("metrics", 200),
        ("admin", 200),
        ("reader", 403),
        ("cell", 403),
    ] {
        let auth = basic(who);
        let r = send_body(
            &router,
            "GET",
            "/metrics",
            &[("authorization", &auth)],
            vec![],
        )
        .await;
        assert_eq!(r.status.as_u16(), want, "/metrics as {who}");
    }
    let r = send_body(&router, "GET", "/metrics", &[], vec![]).await;
    assert_eq!(r.status.as_u16(), 401, "/metrics anonymous");
    assert!(fixture().dir.exists());
}

/// An import onto a damaged current generation would first restore the
/// newest generation that verifies, which changes every repository: an
/// admin limited to prefixes is refused (403, the root unchanged) even for
/// a bundle inside its prefix; nothing is repaired behind its back.
#[tokio::test]
async fn a_prefix_limited_admin_cannot_repair_by_import() {
    let (router, tmp) = tokio::task::spawn_blocking(site).await.unwrap();
    let data = tmp.path().join("data");
    let root = std::fs::read_to_string(data.join("refs/root")).unwrap();
    let hex = root.trim().trim_start_matches("sha256:").to_string();
    // The document and its second copies (metadata_copies = 2, the
    // default): damage no copy repairs.
    let doc = data.join("blobs/sha256").join(&hex[..2]).join(&hex);
    let mut bytes = std::fs::read(&doc).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    std::fs::write(&doc, &bytes).unwrap();
    let packs = data.join("copies/packs");
    let mut damaged = 0;
    for pack in common::synth::files(&packs) {
        let pack = packs.join(pack);
        let mut bytes = std::fs::read(&pack).unwrap();
        for (d, at, len) in common::objects::pack_entries(&bytes.clone()) {
            if d == root.trim() {
                bytes[at + len / 2] ^= 0x20;
                damaged += 1;
            }
        }
        std::fs::write(&pack, &bytes).unwrap();
    }
    assert!(damaged > 0, "the state document has no copy");
    let body = std::fs::read(&fixture().imports["a"]).unwrap();
    let auth = basic("admin");
    let r = send_body(
        &router,
        "POST",
        "/admin/v1/imports",
        &[("authorization", &auth)],
        body,
    )
    .await;
    let text = String::from_utf8_lossy(&r.body);
    assert_eq!(r.status.as_u16(), 403, "{text}");
    assert!(text.contains("damaged"), "{text}");
    assert!(text.contains("fsck --repair"), "{text}");
    assert_eq!(
        std::fs::read_to_string(data.join("refs/root")).unwrap(),
        root,
        "the root moved"
    );
}
