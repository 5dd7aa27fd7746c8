//! RFC-0040 around system stacks: lifecycle status of a digest (CLI and
//! `GET /stacks/v1/lifecycle/<digest>`), the custom-stacks policy, and
//! signed promotion events delivered to a webhook receiver (Python's
//! `http.server`, verifying the HMAC with Python's `hmac`), with a retry
//! after a 500 and a queue that survives a restart of airlock. Each runs
//! on the filesystem and on s3s-fs (tests/common/backend.rs); moto is left
//! out to bound CI time (the store paths are the ones s3s-fs covers).

use crate::common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::backend::{Backend, on_backends};
use common::*;

on_backends!(
    [fs, s3s_fs]
    lifecycle_follows_promotion_rollback_and_custom_stacks,
    promotion_events_reach_a_webhook_signed_retried_and_durable,
);

/// The busybox fixture as three images of `stacks/bb` (tags `v1`, `v2`,
/// `custom`: the same layers, configs with different labels), bundled with
/// `v1` as a stack candidate, imported into `b`. Returns the digests of
/// v1, v2, custom.
fn data(tmp: &Path, b: &Backend) -> [String; 3] {
    require_tool("curl", "curl");
    require_tool("python3", "python3");
    let layout = copy_fixture_layout(tmp);
    let l = |tag: &str| format!("{}:{tag}", layout.display());
    for (tag, label) in [("v2", "airlock.test=2"), ("custom", "airlock.test=3")] {
        run_ok(Command::new("umoci").args([
            "config",
            "--image",
            &l("latest"),
            "--tag",
            tag,
            &format!("--config.label={label}"),
        ]));
    }
    let cfg = write_config(
        tmp,
        &layout,
        &[
            ("latest", "stacks/bb", &["v1"]),
            ("v2", "stacks/bb", &["v2"]),
            ("custom", "stacks/bb", &["custom"]),
        ],
    );
    let bundle = tmp.join("b.tar");
    create_bundle(&cfg, &bundle, &[]);
    b.import(&test_key().1, &bundle);
    ["latest", "v2", "custom"].map(|t| layout_ref_digest(&layout, t))
}

fn lifecycle(addr: &str, digest: &str) -> serde_json::Value {
    let (status, _, body) =
        http(addr, "GET", &format!("/stacks/v1/lifecycle/{digest}"), &[]).unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice(&body).unwrap()
}

fn stack(data: &Backend, args: &[&str]) -> std::process::Output {
    data.airlock(&["stack", args[0]], &args[1..])
}

fn stack_ok(data: &Backend, args: &[&str]) -> String {
    let o = stack(data, args);
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn lifecycle_follows_promotion_rollback_and_custom_stacks(data: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let [v1, v2, custom] = self::data(tmp.path(), &data);
    let server = data.serve(&[
        "--allow-admin",
        "--custom-stacks",
        "admin-only",
        // The CLI's changes below are seen at once (S3's default is 1 s).
        "--root-refresh-ms",
        "0",
    ]);
    let addr = &server.addr;
    let unknown = format!("sha256:{}", "0".repeat(64));
    assert_eq!(lifecycle(addr, &unknown)["status"], "unknown");
    assert_eq!(
        lifecycle(addr, &v1)["status"],
        "unknown",
        "not promoted yet"
    );

    stack_ok(&data, &["promote", "bb", "--image", "stacks/bb:v1"]);
    let l1 = lifecycle(addr, &v1);
    assert_eq!(
        (l1["status"].as_str(), l1["stack"].as_str()),
        (Some("current"), Some("bb"))
    );
    assert_eq!(l1["restage_required"], false);

    // A canary: v2 on 10 % of cells. v1 is still what (nearly) every cell
    // runs: current, with the rollout named; v2 is the canary.
    stack_ok(
        &data,
        &[
            "promote",
            "bb",
            "--image",
            "stacks/bb:v2",
            "--rollout",
            "10",
        ],
    );
    let l1 = lifecycle(addr, &v1);
    assert_eq!(
        (l1["status"].as_str(), l1["restage_required"].as_bool()),
        (Some("current"), Some(false))
    );
    assert_eq!(
        l1["rolling_out_to"],
        serde_json::json!({"digest": v2, "promotion": 2, "percent": 10})
    );
    let l2 = lifecycle(addr, &v2);
    assert_eq!(
        (l2["status"].as_str(), l2["rollout_percent"].as_u64()),
        (Some("canary"), Some(10))
    );
    // The CLI answers the same, also for a 12-digit prefix (docker's short id).
    let short = &v1["sha256:".len().."sha256:".len() + 12];
    let cli = stack_ok(&data, &["lifecycle", short, "--json"]);
    let cli: serde_json::Value = serde_json::from_str(&cli).unwrap();
    assert_eq!(cli, l1, "CLI and API agree");
    let text = stack_ok(&data, &["lifecycle", short]);
    assert!(
        text.starts_with(&format!("{v1} current stack bb promotion 1 since "))
            && text.contains(&format!(
                "; rolling out to {v2} (promotion 2) on 10 % of cells"
            )),
        "{text}"
    );
    let o = stack(
        &data,
        &["lifecycle", &v1["sha256:".len().."sha256:".len() + 11]],
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("at least 12 hex digits"));

    // Widened to every cell: v1 superseded by v2.
    stack_ok(&data, &["rollout", "bb", "100"]);
    let l1 = lifecycle(addr, &v1);
    assert_eq!(l1["status"], "superseded");
    assert_eq!(l1["superseded_by"], v2.as_str());
    assert_eq!(l1["restage_required"], true);
    assert!(l1["since"].as_str().unwrap().ends_with('Z'));
    assert_eq!(lifecycle(addr, &v2)["status"], "current");
    assert_eq!(lifecycle(addr, &v2).get("rolling_out_to"), None);

    // Rolled back: v1 current again, v2 withdrawn (not "superseded").
    stack_ok(&data, &["rollback", "bb", "--reason", "v2 broke"]);
    assert_eq!(lifecycle(addr, &v1)["status"], "current");
    let l2 = lifecycle(addr, &v2);
    assert_eq!(
        (l2["status"].as_str(), l2["superseded_by"].as_str()),
        (Some("rolled_back"), Some(v1.as_str()))
    );
    assert_eq!(l2["restage_required"], true);

    // Custom stacks: the policy refuses the CLI when off, and names itself.
    let o = stack(
        &data,
        &[
            "register",
            "ops-x",
            "--image",
            "stacks/bb:custom",
            "--custom",
            "--custom-stacks",
            "off",
        ],
    );
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("custom_stacks = \"off\""), "{err}");
    // A system stack's name is refused; a custom one is registered over HTTP by an admin.
    let post = |name: &str, body: &str| {
        let o = Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/stderr",
                "-w",
                "%{http_code}",
                "-X",
                "POST",
                "-H",
                "Content-Type: application/json",
                "--data",
                body,
            ])
            .arg(format!("http://{addr}/stacks/v1/{name}/register"))
            .output()
            .unwrap();
        (
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, body) = post("bb", r#"{"image":"stacks/bb:custom"}"#);
    assert_eq!(code, "409", "{body}");
    let (code, body) = post("ops-x", &format!(r#"{{"image":"stacks/bb@{custom}"}}"#));
    assert_eq!(code, "200", "{body}");
    let lc = lifecycle(addr, &custom);
    assert_eq!(
        (lc["status"].as_str(), lc["stack"].as_str()),
        (Some("custom"), Some("ops-x"))
    );
    assert!(stack_ok(&data, &["list"]).contains("CUSTOM"));
    // A custom stack is never promoted.
    let o = stack(&data, &["promote", "ops-x", "--image", "stacks/bb:v2"]);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("custom stack"),
        "{o:?}"
    );

    // Without the admin role (no --allow-admin) the policy refuses HTTP callers.
    drop(server);
    let server = data.serve(&["--custom-stacks", "admin-only"]);
    let o = Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            "-X",
            "POST",
            "--data",
            r#"{"image":"stacks/bb:custom"}"#,
        ])
        .arg(format!("http://{}/stacks/v1/anon-x/register", server.addr))
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.ends_with("403") && out.contains("admin-only"), "{out}");
}

/// A webhook receiver: answers 500 to the first POST and 200 after,
/// appending `ok|bad <event type> <id>` per POST to `log` (ok when
/// `X-Airlock-Signature` matches the HMAC-SHA256 of the body under `secret`).
fn receiver(port: u16, log: &Path, secret: &str) -> Child {
    let script = r#"
import hmac, hashlib, json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, log, secret = int(sys.argv[1]), sys.argv[2], sys.argv[3].encode()
seen = [0]
class H(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers['Content-Length']))
        want = 'sha256=' + hmac.new(secret, body, hashlib.sha256).hexdigest()
        ok = hmac.compare_digest(want, self.headers.get('X-Airlock-Signature', ''))
        ev = json.loads(body)
        seen[0] += 1
        status = 500 if seen[0] == 1 else 200
        with open(log, 'a') as f:
            f.write('%s %s %s %d\n' % ('ok' if ok else 'bad', ev['type'], ev['id'], status))
        self.send_response(status)
        self.send_header('Content-Length', '0')
        self.end_headers()
    def log_message(self, *a):
        pass
HTTPServer(('127.0.0.1', port), H).serve_forever()
"#;
    Command::new("python3")
        .args([
            "-c",
            script,
            &port.to_string(),
            log.to_str().unwrap(),
            secret,
        ])
        .spawn()
        .unwrap()
}

/// Lines of the receiver's log answered 200, once `pred` holds (20 s at most).
fn delivered(log: &Path, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let lines: Vec<String> = std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with(" 200"))
            .map(String::from)
            .collect();
        if pred(&lines) || Instant::now() > deadline {
            return lines;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn promotion_events_reach_a_webhook_signed_retried_and_durable(data: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    self::data(tmp.path(), &data);
    let port = free_port();
    let hooks = tmp.path().join("airlock.toml");
    std::fs::write(
        &hooks,
        format!("[[webhook]]\nurl = \"http://127.0.0.1:{port}/hook\"\nsecret = \"s3cret\"\n"),
    )
    .unwrap();
    let log = tmp.path().join("received.log");
    let mut rx = receiver(port, &log, "s3cret");
    std::thread::sleep(Duration::from_millis(300));
    let server = data.serve(&[
        "--config",
        hooks.to_str().unwrap(),
        "--root-refresh-ms",
        "0",
    ]);
    stack_ok(&data, &["promote", "bb", "--image", "stacks/bb:v1"]);
    stack_ok(&data, &["promote", "bb", "--image", "stacks/bb:v2"]);
    stack_ok(&data, &["rollback", "bb"]);
    let kinds = |l: &[String]| {
        l.iter()
            .map(|x| x.split(' ').nth(1).unwrap().to_string())
            .collect::<Vec<_>>()
    };
    let lines = delivered(&log, |l| l.len() >= 4);
    assert!(
        lines.iter().all(|l| l.starts_with("ok ")),
        "signature checked by Python's hmac: {lines:?}"
    );
    let mut got = kinds(&lines);
    got.sort();
    assert_eq!(
        got,
        [
            "import.completed",
            "stack.promoted",
            "stack.promoted",
            "stack.rolled_back"
        ],
        "{lines:?}"
    );
    let all = std::fs::read_to_string(&log).unwrap();
    assert!(
        all.lines().next().unwrap().ends_with(" 500"),
        "the first POST got a 500 and was retried: {all}"
    );
    let first_id = all.lines().next().unwrap().split(' ').nth(2).unwrap();
    assert!(
        lines.iter().any(|l| l.contains(first_id)),
        "the event answered 500 was delivered later"
    );

    // Restart: an event queued while no airlock runs is delivered after.
    // Delivery is at least once: the receiver may log its 200 before the
    // server records it, so stop the server only once the store says so
    // (a kill between the two is a redelivery after restart, by design).
    let recorded = Instant::now() + Duration::from_secs(20);
    loop {
        let ev = data.airlock_ok(&["events"], &["--json"]);
        let ev: serde_json::Value = serde_json::from_str(&ev).unwrap();
        if ev["log"].as_array().map_or(0, Vec::len) == 4 || Instant::now() > recorded {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(server);
    stack_ok(
        &data,
        &["set-state", "bb", "DEPRECATED", "--reason", "use bb2"],
    );
    let ev = data.airlock_ok(&["events"], &["--json"]);
    let ev: serde_json::Value = serde_json::from_str(&ev).unwrap();
    assert_eq!(ev["queued"][0]["event"]["type"], "stack.state_changed");
    assert_eq!(ev["log"].as_array().unwrap().len(), 4);
    let _server = data.serve(&[
        "--config",
        hooks.to_str().unwrap(),
        "--root-refresh-ms",
        "0",
    ]);
    let lines = delivered(&log, |l| l.len() >= 5);
    assert_eq!(
        kinds(&lines).last().map(String::as_str),
        Some("stack.state_changed"),
        "{lines:?}"
    );
    let text = data.airlock_ok(&["events"], &[]);
    assert_eq!(text.matches("delivered").count(), 5, "{text}");
    let _ = rx.kill();
    let _ = rx.wait();
}
