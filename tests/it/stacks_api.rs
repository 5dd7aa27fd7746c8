//! System stacks through the CLI (every change one root swap) and the
//! `/stacks/v1` API in process: staged rollout over 1000 cells, rollback,
//! states and their warnings, `max_in_flight` under parallel load, cell
//! reports and status, admin routes behind `--allow-admin`, kpack checks,
//! Cloud Controller and cell properties. The scenarios on a store run on
//! the filesystem and on s3s-fs (tests/common/backend.rs; moto is left out
//! to bound CI time).

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response};
use http_body_util::BodyExt;
use tower::ServiceExt;

use airlock::server::{self, App};
use airlock::stacks::api::StacksConfig;
use airlock::state::StateStore;
use common::backend::{Backend, on_backends};
use common::*;

on_backends!(
    async [fs, s3s_fs]
    staged_rollout_to_1000_cells_and_rollback,
    states_warn_and_cells_keep_being_served,
    max_in_flight_holds_under_parallel_load,
    cells_report_and_status_shows_who_lags,
    admin_routes_need_the_switch,
    rootfs_downloads_by_digest_platform_and_range,
);
on_backends!([fs, s3s_fs] kpack_label_checks_and_cluster_stack);

/// The busybox fixture plus `v2` (one more file), `build` and `run`
/// (kpack labels and environment) and `build-bad` (no CNB_GROUP_ID),
/// bundled with a `[[stack]]` candidate; built once per test binary.
fn bundle() -> &'static (PathBuf, PathBuf) {
    static B: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    B.get_or_init(|| {
        let dir = Box::leak(Box::new(tempfile::tempdir().unwrap())).path().to_path_buf();
        let layout = dir.join("layout");
        run_ok(Command::new("cp").arg("-a").arg(fixture_layout()).arg(&layout));
        let l = |tag: &str| format!("{}:{tag}", layout.display());
        let work = dir.join("work");
        run_ok(Command::new("umoci").args(["unpack", "--image", &l("latest"), work.to_str().unwrap()]));
        std::fs::write(work.join("rootfs/etc/stack-version"), "2\n").unwrap();
        run_ok(Command::new("umoci").args(["repack", "--image", &l("v2"), work.to_str().unwrap()]));
        let config = |from: &str, to: &str, args: &[&str]| {
            run_ok(Command::new("umoci")
                .args(["config", "--image", &l(from), "--tag", to])
                .args(args));
        };
        let label = "--config.label=io.buildpacks.stack.id=io.airlock.test";
        config("latest", "build", &[label, "--config.env=CNB_USER_ID=1000", "--config.env=CNB_GROUP_ID=1000"]);
        config("latest", "run", &[label]);
        config("latest", "build-bad", &[label, "--config.env=CNB_USER_ID=1000"]);
        let mut text = String::new();
        for tag in ["latest", "v2", "build", "run", "build-bad"] {
            text.push_str(&format!(
                "[[image]]\nsource = \"oci:{}\"\nrepository = \"stacks/bb\"\ntags = [\"{tag}\"]\n\n",
                l(tag)
            ));
        }
        text.push_str("[[stack]]\nname = \"bb\"\ndescription = \"busybox\"\nimage = \"stacks/bb:v2\"\n");
        let cfg = dir.join("mirror.toml");
        std::fs::write(&cfg, text).unwrap();
        let out = dir.join("bundle.tar");
        create_bundle(&cfg, &out, &[]);
        (out, layout)
    })
}

/// `b` with the bundle imported.
fn data(b: Backend) -> Backend {
    let (_, public) = test_key();
    b.import(&public, &bundle().0);
    b
}

fn generation(data: &Backend) -> usize {
    data.airlock_ok(&["history"], &[])
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .count()
}

/// Runs `airlock stack ARGS` on the store; asserts it made exactly one new generation.
fn stack_change(data: &Backend, args: &[&str]) -> String {
    let before = generation(data);
    let mut all = vec!["stack"];
    all.extend_from_slice(args);
    let out = data.airlock_ok(&all, &[]);
    assert_eq!(
        generation(data),
        before + 1,
        "{args:?} is not one root swap"
    );
    out
}

/// Runs a stack command that must fail; asserts the cause and an unchanged root.
fn stack_refused(data: &Backend, args: &[&str], cause: &str) {
    let root = data.root();
    let mut all = vec!["stack"];
    all.extend_from_slice(args);
    let o = data.airlock(&all, &[]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
    assert!(err.contains(cause), "{args:?}: {err}");
    assert_eq!(data.root(), root, "{args:?} changed the root");
}

async fn app(data: &Backend, allow_admin: bool) -> (Router, Arc<App>) {
    let state = StateStore::new(data.open_store().await);
    let app = Arc::new(App::new(state).with_stacks(StacksConfig {
        allow_admin,
        ..StacksConfig::default()
    }));
    (server::router(app.clone()), app)
}

async fn request(router: &Router, method: &str, uri: &str, body: &str) -> Response<Body> {
    let req = Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    router.clone().oneshot(req).await.unwrap()
}

async fn json(router: &Router, uri: &str) -> (u16, Option<String>, serde_json::Value) {
    let res = request(router, "GET", uri, "").await;
    let status = res.status().as_u16();
    let warning = res
        .headers()
        .get("warning")
        .map(|w| w.to_str().unwrap().to_string());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        warning,
        serde_json::from_slice(&body).unwrap_or_default(),
    )
}

fn tag_digest(tag: &str) -> String {
    layout_ref_digest(&bundle().1, tag)
}

async fn staged_rollout_to_1000_cells_and_rollback(b: Backend) {
    let data = data(b);
    // The bundle's candidate is recorded with the import.
    let list: serde_json::Value =
        serde_json::from_str(&data.airlock_ok(&["stack", "list", "--json"], &[])).unwrap();
    let candidate = &list["stacks"][0]["candidates"][0];
    assert_eq!(
        candidate["image"],
        format!("stacks/bb@{}", tag_digest("v2"))
    );

    let v1 = tag_digest("latest");
    let v2 = tag_digest("v2");
    stack_change(
        &data,
        &[
            "promote",
            "bb",
            "--image",
            "stacks/bb:latest",
            "--reason",
            "first",
        ],
    );
    let out = stack_change(
        &data,
        &[
            "promote",
            "bb",
            "--image",
            "stacks/bb:v2",
            "--rollout",
            "10%",
            "--reason",
            "CVE fix",
        ],
    );
    assert!(
        out.contains("promotion 2") && out.contains("to 10 % of cells"),
        "{out}"
    );
    // The promotion names the import it came from.
    let show: serde_json::Value =
        serde_json::from_str(&data.airlock_ok(&["stack", "show", "bb", "--json"], &[])).unwrap();
    assert_eq!(show["active"]["import"], candidate["bundle"]);

    let (router, _) = app(&data, false).await;
    let cells: Vec<String> = (0..1000)
        .map(|i| format!("diego-cell/{i:08x}-cell"))
        .collect();
    let mut previous: Vec<bool> = vec![false; cells.len()];
    for percent in [10u32, 50, 100] {
        if percent != 10 {
            stack_change(&data, &["rollout", "bb", &percent.to_string()]);
        }
        let mut now = Vec::new();
        for c in &cells {
            let (status, _, v) = json(&router, &format!("/stacks/v1/bb?cell={c}")).await;
            assert_eq!(status, 200, "{v}");
            let digest = v["digest"].as_str().unwrap();
            assert!(digest == v1 || digest == v2, "{v}");
            assert_eq!(v["latest"].as_bool().unwrap(), digest == v2);
            now.push(digest == v2);
        }
        let n = now.iter().filter(|x| **x).count() as i64;
        assert!(
            (n - percent as i64 * 10).abs() <= 30,
            "{percent} %: {n} of 1000 cells"
        );
        assert!(
            previous.iter().zip(&now).all(|(b, a)| !b || *a),
            "a cell moved back at {percent} %"
        );
        previous = now;
    }
    // Refusals: a narrower rollout, nothing to do, a bad percentage; the root stays.
    stack_refused(&data, &["rollout", "bb", "40"], "only widens");
    stack_refused(
        &data,
        &["promote", "bb", "--image", "stacks/bb:v2"],
        "already the active promotion",
    );
    stack_refused(
        &data,
        &["promote", "bb", "--image", "stacks/bb:nope"],
        "tag nope not known",
    );
    stack_refused(&data, &["rollback", "nope"], "stack nope not known");

    stack_change(&data, &["rollback", "bb", "--reason", "regression"]);
    for c in &cells {
        let (_, _, v) = json(&router, &format!("/stacks/v1/bb?cell={c}")).await;
        assert_eq!(v["digest"], v1.as_str(), "rollback did not return {c}");
        assert_eq!(v["promotion"], 1);
    }
    // A new promotion is refused while a rollout is incomplete.
    stack_change(
        &data,
        &["promote", "bb", "--image", "stacks/bb:v2", "--rollout", "5"],
    );
    stack_refused(
        &data,
        &["promote", "bb", "--image", "stacks/bb:latest"],
        "rolled out to 5 % only",
    );
}

async fn states_warn_and_cells_keep_being_served(b: Backend) {
    let data = data(b);
    stack_change(&data, &["promote", "bb", "--image", "stacks/bb:latest"]);
    let (router, _) = app(&data, false).await;
    let (status, warning, _) = json(&router, "/stacks/v1/bb?cell=c1").await;
    assert_eq!((status, warning), (200, None));
    for (state, text) in [
        (
            "DEPRECATED",
            "'DEPRECATED' and will be removed in the future. use bb2",
        ),
        (
            "restricted",
            "'RESTRICTED' and will be removed in the future. use bb2",
        ),
        (
            "DISABLED",
            "'DISABLED' and cannot be used for staging. use bb2",
        ),
    ] {
        stack_change(&data, &["set-state", "bb", state, "--reason", "use bb2"]);
        let (status, warning, v) = json(&router, "/stacks/v1/bb?cell=c1").await;
        assert_eq!(status, 200, "cells are served in every state");
        assert_eq!(v["state"], state.to_uppercase());
        assert_eq!(v["state_reason"], "use bb2");
        let w = warning.expect("a Warning header");
        assert!(
            w.starts_with("299 - \"The stack 'bb' is ") && w.contains(text),
            "{w}"
        );
        let res = request(&router, "HEAD", "/stacks/v1/bb/rootfs.tar", "").await;
        assert_eq!(res.status(), 200);
        assert!(res.headers().get("warning").is_some());
    }
    stack_change(&data, &["set-state", "bb", "ACTIVE"]);
    assert_eq!(json(&router, "/stacks/v1/bb?cell=c1").await.1, None);
    let o = data.airlock(&["stack", "set-state", "bb", "GONE"], &[]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("ACTIVE, DEPRECATED, RESTRICTED or DISABLED")
    );

    stack_change(&data, &["set-default", "bb"]);
    cf_fragments_add_to_a_cf_deployment_manifest(&data);
}

/// A cf-deployment style manifest: cflinuxfs4 on the cells and in Cloud
/// Controller, the default stack.
const CF_MANIFEST: &str = "\
name: cf
releases: []
instance_groups:
- name: api
  jobs:
  - name: cloud_controller_ng
    properties:
      cc:
        default_stack: cflinuxfs4
        stacks:
        - name: cflinuxfs4
          description: Cloud Foundry Linux-based filesystem (Ubuntu 22.04)
- name: diego-cell
  jobs:
  - name: garden
    properties:
      garden:
        persistent_image_list:
        - /var/vcap/packages/cflinuxfs4/rootfs.tar
  - name: rep
    properties:
      diego:
        rep:
          preloaded_rootfses:
          - cflinuxfs4:/var/vcap/packages/cflinuxfs4/rootfs.tar
";

/// `MANIFEST -o ops...` applied by go-patch's replace semantics
/// (tests/fixtures/bosh-ops.rb), as `bosh int` does.
fn bosh_int(ops: &[&str]) -> serde_json::Value {
    require_tool("ruby", "ruby");
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("cf.yml");
    std::fs::write(&manifest, CF_MANIFEST).unwrap();
    let mut cmd = Command::new("ruby");
    cmd.arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/bosh-ops.rb"))
        .arg(&manifest);
    for (i, text) in ops.iter().enumerate() {
        let f = dir.path().join(format!("ops-{i}.yml"));
        std::fs::write(&f, text).unwrap();
        cmd.arg(f);
    }
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// Issue 25 §2: the fragments add bb to what the deployment has; the
/// default stack changes only with --set-default.
fn cf_fragments_add_to_a_cf_deployment_manifest(data: &Backend) {
    let cc = data.airlock_ok(&["stack", "cc-config"], &[]);
    let cells = data.airlock_ok(
        &[
            "stack",
            "cell-properties",
            "--ops-file",
            "--rootfs-dir",
            "/var/vcap/data/rootfs",
        ],
        &[],
    );
    let m = bosh_int(&[&cc, &cells]);
    let ig = |name: &str| {
        m["instance_groups"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == name)
            .unwrap()
            .clone()
    };
    let job = |g: &serde_json::Value, name: &str| {
        g["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["name"] == name)
            .unwrap()["properties"]
            .clone()
    };
    let cc_props = job(&ig("api"), "cloud_controller_ng")["cc"].clone();
    assert_eq!(
        cc_props["stacks"],
        serde_json::json!([
            {"name": "cflinuxfs4", "description": "Cloud Foundry Linux-based filesystem (Ubuntu 22.04)"},
            {"name": "bb", "description": "busybox"}
        ])
    );
    assert_eq!(cc_props["default_stack"], "cflinuxfs4");
    let cell = ig("diego-cell");
    assert_eq!(
        job(&cell, "garden")["garden"]["persistent_image_list"],
        serde_json::json!([
            "/var/vcap/packages/cflinuxfs4/rootfs.tar",
            "/var/vcap/data/rootfs/bb/rootfs.tar"
        ])
    );
    assert_eq!(
        job(&cell, "rep")["diego"]["rep"]["preloaded_rootfses"],
        serde_json::json!([
            "cflinuxfs4:/var/vcap/packages/cflinuxfs4/rootfs.tar",
            "bb:/var/vcap/data/rootfs/bb/rootfs.tar"
        ])
    );
    // The release's own ops file (add-airlock-rootfs.yml) gives the cells
    // the same lists as cell-properties with its default directory.
    let release_ops = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("bosh-release/manifests/operations/add-airlock-rootfs.yml"),
    )
    .unwrap()
    .replace("((airlock_stack))", "bb");
    let ours = data.airlock_ok(&["stack", "cell-properties", "--ops-file"], &[]);
    let lists = |m: &serde_json::Value| {
        let cell = &m["instance_groups"][1]["jobs"];
        let find = |n: &str| {
            cell.as_array()
                .unwrap()
                .iter()
                .find(|j| j["name"] == n)
                .unwrap()["properties"]
                .clone()
        };
        (
            find("garden")["garden"]["persistent_image_list"].clone(),
            find("rep")["diego"]["rep"]["preloaded_rootfses"].clone(),
        )
    };
    assert_eq!(
        lists(&bosh_int(&[&release_ops])),
        lists(&bosh_int(&[&ours]))
    );
    // Applied twice (a re-run of cc-config): bb is updated, not duplicated.
    let again = bosh_int(&[&cc, &cc]);
    let stacks = &again["instance_groups"][0]["jobs"][0]["properties"]["cc"]["stacks"];
    assert_eq!(stacks.as_array().unwrap().len(), 2, "{stacks}");
    // The default stack moves only when asked.
    let set = data.airlock_ok(&["stack", "cc-config", "--set-default"], &[]);
    let m = bosh_int(&[&set]);
    assert_eq!(
        m["instance_groups"][0]["jobs"][0]["properties"]["cc"]["default_stack"],
        "bb"
    );
    let file = data.airlock_ok(&["stack", "cc-config", "--stacks-file"], &[]);
    assert!(
        file.contains("\nstacks:\n- name: \"bb\"\n") && !file.contains("\ndefault:"),
        "{file}"
    );
    let file = data.airlock_ok(
        &["stack", "cc-config", "--stacks-file", "--set-default"],
        &[],
    );
    assert!(file.contains("\ndefault: \"bb\"\nstacks:\n"), "{file}");
    // The property blocks list the items to add (and say so).
    let props = data.airlock_ok(&["stack", "cell-properties"], &[]);
    assert!(props.contains("# Add these items to the lists"), "{props}");
    assert!(
        props.contains(
            "persistent_image_list:\n      - \"/var/vcap/data/airlock-rootfs/bb/rootfs.tar\""
        ),
        "{props}"
    );
}

async fn max_in_flight_holds_under_parallel_load(b: Backend) {
    let data = data(b);
    stack_change(
        &data,
        &[
            "promote",
            "bb",
            "--image",
            "stacks/bb:latest",
            "--max-in-flight",
            "3",
        ],
    );
    let (router, app) = app(&data, false).await;
    let (_, _, answer) = json(&router, "/stacks/v1/bb?cell=c1").await;
    let sha = answer["rootfs_sha256"].as_str().unwrap().to_string();

    // Held bodies hold their slots: the fourth download is refused.
    let mut held = Vec::new();
    for _ in 0..3 {
        let res = request(&router, "GET", "/stacks/v1/bb/rootfs.tar", "").await;
        assert_eq!(res.status(), 200);
        held.push(res);
    }
    let res = request(&router, "GET", "/stacks/v1/bb/rootfs.tar", "").await;
    assert_eq!(res.status(), 429);
    let retry: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((10..=20).contains(&retry), "{retry}");
    let body: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["code"], "TOOMANYREQUESTS");
    // HEAD takes no slot.
    assert_eq!(
        request(&router, "HEAD", "/stacks/v1/bb/rootfs.tar", "")
            .await
            .status(),
        200
    );
    held.pop();
    assert_eq!(app.stacks.in_flight("bb"), 2);
    held.push(request(&router, "GET", "/stacks/v1/bb/rootfs.tar", "").await);
    assert_eq!(held.last().unwrap().status(), 200);
    held.clear();
    assert_eq!(app.stacks.in_flight("bb"), 0);

    // 40 cells at once: never more than 3 bodies in flight, every body whole.
    let current = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..40 {
        let (router, app, current, peak, sha) = (
            router.clone(),
            app.clone(),
            current.clone(),
            peak.clone(),
            sha.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let res = request(&router, "GET", "/stacks/v1/bb/rootfs.tar", "").await;
            if res.status() == 429 {
                assert!(res.headers().contains_key("retry-after"));
                return false;
            }
            assert_eq!(res.status(), 200);
            let n = current.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(n, Ordering::SeqCst);
            assert!(app.stacks.in_flight("bb") <= 3);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            let bytes = res.into_body().collect().await.unwrap().to_bytes();
            current.fetch_sub(1, Ordering::SeqCst);
            use sha2::Digest as _;
            assert_eq!(hex::encode(sha2::Sha256::digest(&bytes)), sha);
            true
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += usize::from(t.await.unwrap());
    }
    assert!(
        peak.load(Ordering::SeqCst) <= 3,
        "peak {}",
        peak.load(Ordering::SeqCst)
    );
    assert!((3..40).contains(&ok), "{ok} downloads served");
    assert_eq!(app.stacks.in_flight("bb"), 0);
}

async fn cells_report_and_status_shows_who_lags(b: Backend) {
    let data = data(b);
    stack_change(&data, &["promote", "bb", "--image", "stacks/bb:latest"]);
    stack_change(
        &data,
        &[
            "promote",
            "bb",
            "--image",
            "stacks/bb:v2",
            "--rollout",
            "50",
        ],
    );
    let (router, _) = app(&data, false).await;
    let (v1, v2) = (tag_digest("latest"), tag_digest("v2"));
    let mut lagging = Vec::new();
    let mut on_v2 = 0;
    for i in 0..20 {
        let cell = format!("diego-cell/{i}");
        let (_, _, answer) = json(&router, &format!("/stacks/v1/bb?cell={cell}")).await;
        // Every cell still reports v1: those rolled into v2 lag behind.
        let res = request(
            &router,
            "PUT",
            &format!("/stacks/v1/bb/cells/{cell}"),
            &format!(r#"{{"digest":"{v1}"}}"#),
        )
        .await;
        assert_eq!(res.status(), 204);
        if answer["digest"] == v2.as_str() {
            lagging.push(cell);
        }
    }
    // One cell catches up.
    if let Some(cell) = lagging.pop() {
        let res = request(
            &router,
            "PUT",
            &format!("/stacks/v1/bb/cells/{cell}"),
            &format!(r#"{{"digest":"{v2}"}}"#),
        )
        .await;
        assert_eq!(res.status(), 204);
        on_v2 = 1;
    }
    lagging.sort();
    assert!(!lagging.is_empty(), "no cell rolled into 50 %");
    let status: serde_json::Value =
        serde_json::from_str(&data.airlock_ok(&["stack", "status", "bb", "--json"], &[])).unwrap();
    assert_eq!(status["cells"], 20);
    assert_eq!(status["on_latest"], on_v2);
    assert_eq!(status["lagging"], serde_json::json!(lagging));
    assert_eq!(status["digests"][&v1], 20 - on_v2);
    assert_eq!(status["stale"], serde_json::json!([]));
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let stale: serde_json::Value = serde_json::from_str(&data.airlock_ok(
        &["stack", "status", "bb", "--json", "--stale-after-secs", "0"],
        &[],
    ))
    .unwrap();
    assert_eq!(stale["stale"].as_array().unwrap().len(), 20);
    let prom = data.airlock_ok(&["stack", "status", "--prometheus"], &[]);
    for line in [
        "# TYPE airlock_stack_cells gauge".to_string(),
        format!(
            "airlock_stack_cells{{stack=\"bb\",digest=\"{v1}\"}} {}",
            20 - on_v2
        ),
        format!(
            "airlock_stack_cells_lagging{{stack=\"bb\"}} {}",
            lagging.len()
        ),
        "airlock_stack_rollout_percent{stack=\"bb\",promotion=\"2\"} 50".to_string(),
        "airlock_stack_state{stack=\"bb\",state=\"ACTIVE\"} 1".to_string(),
    ] {
        assert!(
            prom.lines().any(|l| l == line),
            "missing {line:?} in\n{prom}"
        );
    }
    // The server's /metrics carries the same gauges, and downloads in flight.
    let res = request(&router, "GET", "/metrics", "").await;
    let metrics =
        String::from_utf8(res.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap();
    for line in [
        format!(
            "airlock_stack_cells_lagging{{stack=\"bb\"}} {}",
            lagging.len()
        ),
        format!(
            "airlock_stack_cells{{stack=\"bb\",digest=\"{v1}\"}} {}",
            20 - on_v2
        ),
        "airlock_stack_rootfs_downloads_in_flight{stack=\"bb\"} 0".to_string(),
    ] {
        assert!(
            metrics.lines().any(|l| l == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    // A real OpenMetrics parser (Python prometheus_client) reads it all.
    let samples = openmetrics(&metrics);
    assert!(samples.iter().any(
        |(name, labels, value)| name == "airlock_stack_cells_lagging"
            && labels["stack"] == "bb"
            && *value == lagging.len() as f64
    ));
    // The text status names at most --max-cells lagging cells, then how many more.
    let text = data.airlock_ok(&["stack", "status", "bb", "--max-cells", "2"], &[]);
    let shown = lagging
        .iter()
        .take(2)
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    let more = lagging.len().saturating_sub(2);
    let want = if more > 0 {
        format!(
            "  lagging (need a restart on their digest): {shown} ... and {more} more (--json lists all)"
        )
    } else {
        format!("  lagging (need a restart on their digest): {shown}")
    };
    assert!(
        text.lines().any(|l| l == want),
        "missing {want:?} in\n{text}"
    );
    // Bad reports are refused and store nothing.
    for (uri, body, want) in [
        ("/stacks/v1/bb/cells/c1", r#"{"digest":"sha256:abc"}"#, 400),
        (
            "/stacks/v1/bb/cells/c%20x",
            &format!(r#"{{"digest":"{v1}"}}"#) as &str,
            400,
        ),
        (
            "/stacks/v1/nope/cells/c1",
            &format!(r#"{{"digest":"{v1}"}}"#) as &str,
            404,
        ),
    ] {
        assert_eq!(
            request(&router, "PUT", uri, body).await.status(),
            want,
            "{uri}"
        );
    }
    let status: serde_json::Value =
        serde_json::from_str(&data.airlock_ok(&["stack", "status", "bb", "--json"], &[])).unwrap();
    assert_eq!(status["cells"], 20);
}

async fn admin_routes_need_the_switch(b: Backend) {
    let data = data(b);
    let root = data.root();
    let (router, _) = app(&data, false).await;
    for (uri, body) in [
        ("/stacks/v1/bb/promote", r#"{"image":"stacks/bb:latest"}"#),
        ("/stacks/v1/bb/rollout", r#"{"percent":50}"#),
        ("/stacks/v1/bb/rollback", "{}"),
        ("/stacks/v1/bb/state", r#"{"state":"DISABLED"}"#),
        ("/stacks/v1/bb/default", "{}"),
    ] {
        let res = request(&router, "POST", uri, body).await;
        assert_eq!(res.status(), 403, "{uri}");
        let v: serde_json::Value =
            serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(v["code"], "DENIED");
        assert!(v["message"].as_str().unwrap().contains("--allow-admin"));
    }
    assert_eq!(data.root(), root);

    let (router, _) = app(&data, true).await;
    let res = request(
        &router,
        "POST",
        "/stacks/v1/bb/promote",
        r#"{"image":"stacks/bb:latest","reason":"over http"}"#,
    )
    .await;
    assert_eq!(res.status(), 200);
    let res = request(
        &router,
        "POST",
        "/stacks/v1/bb/promote",
        r#"{"image":"stacks/bb:v2","rollout":20}"#,
    )
    .await;
    assert_eq!(res.status(), 200);
    let res = request(
        &router,
        "POST",
        "/stacks/v1/bb/rollout",
        r#"{"percent":10}"#,
    )
    .await;
    assert_eq!(res.status(), 409);
    let res = request(
        &router,
        "POST",
        "/stacks/v1/bb/state",
        r#"{"state":"DEPRECATED","reason":"old"}"#,
    )
    .await;
    assert_eq!(res.status(), 200);
    let res = request(
        &router,
        "POST",
        "/stacks/v1/bb/rollback",
        r#"{"reason":"http"}"#,
    )
    .await;
    assert_eq!(res.status(), 200);
    let v: serde_json::Value =
        serde_json::from_slice(&res.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(v["result"]["promotion"], 1);
    assert_eq!(v["state"], "DEPRECATED");
    assert_eq!(
        v["history"].as_array().unwrap().last().unwrap()["who"],
        "admin (http)"
    );
    let res = request(
        &router,
        "POST",
        "/stacks/v1/bb/promote",
        r#"{"image":"stacks/bb:latest","bogus":1}"#,
    )
    .await;
    assert_eq!(res.status(), 400);
}

fn kpack_label_checks_and_cluster_stack(b: Backend) {
    let data = data(b);
    let promote = |build: &str, run: &str, extra: &[&'static str]| {
        let mut args = vec!["promote", "bb", "--image", "stacks/bb:latest"];
        args.extend(["--build-image", build, "--run-image", run]);
        args.extend_from_slice(extra);
        args.into_iter().map(str::to_string).collect::<Vec<_>>()
    };
    for (build, run, extra, cause) in [
        (
            "stacks/bb:build-bad",
            "stacks/bb:run",
            &[][..],
            "lacks the environment variable CNB_GROUP_ID",
        ),
        (
            "stacks/bb:build",
            "stacks/bb:latest",
            &[],
            "lacks the label io.buildpacks.stack.id",
        ),
        (
            "stacks/bb:build",
            "stacks/bb:run",
            &["--stack-id", "io.other"],
            "has io.buildpacks.stack.id=\"io.airlock.test\", the stack id is \"io.other\"",
        ),
    ] {
        let args = promote(build, run, extra);
        stack_refused(
            &data,
            &args.iter().map(String::as_str).collect::<Vec<_>>(),
            cause,
        );
    }
    let args = promote("stacks/bb:build", "stacks/bb:run", &[]);
    stack_change(&data, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let yaml = data.airlock_ok(
        &[
            "stack",
            "kpack",
            "bb",
            "--registry",
            "airlock.internal:5000",
        ],
        &[],
    );
    let expected = format!(
        "apiVersion: kpack.io/v1alpha2\nkind: ClusterStack\nmetadata:\n  name: \"bb\"\nspec:\n  id: \"io.airlock.test\"\n  buildImage:\n    image: \"airlock.internal:5000/stacks/bb@{}\"\n  runImage:\n    image: \"airlock.internal:5000/stacks/bb@{}\"\n",
        tag_digest("build"),
        tag_digest("run")
    );
    assert!(yaml.ends_with(&expected), "{yaml}");
}

async fn rootfs_downloads_by_digest_platform_and_range(b: Backend) {
    let data = data(b);
    stack_change(&data, &["promote", "bb", "--image", "stacks/bb:latest"]);
    stack_change(
        &data,
        &["promote", "bb", "--image", "stacks/bb:v2", "--rollout", "0"],
    );
    let (router, _) = app(&data, false).await;
    let body = |res: Response<Body>| async { res.into_body().collect().await.unwrap().to_bytes() };
    // Every promoted digest stays downloadable, cacheable for good.
    let show: serde_json::Value =
        serde_json::from_str(&data.airlock_ok(&["stack", "show", "bb", "--json"], &[])).unwrap();
    let etag = |r: &serde_json::Value| format!("\"{}\"", r["sha256"].as_str().unwrap());
    for p in show["promotions"].as_array().unwrap() {
        let r = &p["rootfs"][0];
        let uri = format!(
            "/stacks/v1/bb/rootfs.tar?digest={}",
            r["manifest"].as_str().unwrap()
        );
        let res = request(&router, "GET", &uri, "").await;
        assert_eq!(res.status(), 200);
        assert_eq!(res.headers()["content-type"], "application/x-tar");
        assert_eq!(
            res.headers()["docker-content-digest"],
            r["sha256"].as_str().unwrap()
        );
        assert_eq!(
            res.headers()["cache-control"],
            "public, max-age=31536000, immutable"
        );
        assert_eq!(res.headers()["etag"], etag(r).as_str());
        let bytes = body(res).await;
        use sha2::Digest as _;
        assert_eq!(
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes))),
            r["sha256"].as_str().unwrap()
        );
        assert_eq!(bytes.len() as u64, r["size"].as_u64().unwrap());
    }
    // Without a digest or a cell: the fully rolled-out promotion (1), not
    // the canary (2, at 0 %); its content changes, so caches must revalidate.
    let (first, second) = (
        &show["promotions"][0]["rootfs"][0],
        &show["active"]["rootfs"][0],
    );
    assert_ne!(
        first["sha256"], second["sha256"],
        "the fixture's two rootfs differ"
    );
    let res = request(&router, "GET", "/stacks/v1/bb/rootfs.tar", "").await;
    assert_eq!(
        res.headers()["docker-content-digest"],
        first["sha256"].as_str().unwrap()
    );
    assert_eq!(res.headers()["cache-control"], "no-cache");
    assert_eq!(res.headers()["etag"], etag(first).as_str());
    let revalidate = |tag: String, uri: &'static str| {
        let req = Request::builder()
            .uri(uri)
            .header("if-none-match", tag)
            .body(Body::empty())
            .unwrap();
        router.clone().oneshot(req)
    };
    let res = revalidate(etag(first), "/stacks/v1/bb/rootfs.tar")
        .await
        .unwrap();
    assert_eq!(res.status(), 304);
    assert_eq!(res.headers()["cache-control"], "no-cache");
    assert!(body(res).await.is_empty());
    // A cell's URL changes with the rollout too: no-cache.
    let res = request(&router, "GET", "/stacks/v1/bb/rootfs.tar?cell=c1", "").await;
    assert_eq!(res.headers()["cache-control"], "no-cache");
    // Widened to every cell: the same URL now answers the new rootfs, and
    // a cache holding the old one is told so (200, not 304).
    stack_change(&data, &["rollout", "bb", "100"]);
    let res = revalidate(etag(first), "/stacks/v1/bb/rootfs.tar")
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(res.headers()["etag"], etag(second).as_str());
    // One byte range, as for blobs.
    let req = Request::builder()
        .uri("/stacks/v1/bb/rootfs.tar")
        .header("range", "bytes=0-511")
        .body(Body::empty())
        .unwrap();
    let res = router.clone().oneshot(req).await.unwrap();
    assert_eq!(res.status(), 206);
    assert_eq!(body(res).await.len(), 512);
    // What cannot be served says why.
    let other = format!("/stacks/v1/bb/rootfs.tar?digest={}", tag_digest("build"));
    for (uri, status, text) in [
        (other.as_str(), 404, "never promoted"),
        (
            "/stacks/v1/bb/rootfs.tar?platform=linux/s390x",
            404,
            "no rootfs for platform linux/s390x",
        ),
        ("/stacks/v1/bb/rootfs.tar?digest=sha256:nope", 400, "digest"),
        ("/stacks/v1/nope/rootfs.tar", 404, "stack nope not known"),
        ("/stacks/v1/bb?cell=bad%20cell", 400, "invalid cell id"),
    ] {
        let (got, _, v) = json(&router, uri).await;
        assert_eq!(got, status, "{uri}: {v}");
        assert!(v["message"].as_str().unwrap().contains(text), "{uri}: {v}");
    }
    assert_eq!(
        request(&router, "DELETE", "/stacks/v1/bb/rootfs.tar", "")
            .await
            .status(),
        405
    );
}

#[test]
fn bundle_stack_candidates_must_name_bundled_images() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = fixture_layout();
    let cfg = tmp.path().join("m.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[image]]\nsource = \"oci:{}:latest\"\nrepository = \"stacks/bb\"\ntags = [\"latest\"]\n\n[[stack]]\nname = \"bb\"\nimage = \"stacks/bb:other\"\n",
            layout.display()
        ),
    )
    .unwrap();
    let out = tmp.path().join("b.tar");
    let o = create_bundle_output(&cfg, &out);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("stack bb: image \"stacks/bb:other\" is not REPOSITORY:TAG of an [[image]] in this config"), "{err}");
    assert!(!out.exists());
    std::fs::write(
        &cfg,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace("name = \"bb\"", "name = \"BB\""),
    )
    .unwrap();
    let o = create_bundle_output(&cfg, &out);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("invalid stack name \"BB\""),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}
