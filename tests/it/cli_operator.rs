//! Issue 25 §6, what an operator meets first: `serve`'s start-up line at
//! the default log level, colour only on a terminal (a pty made by
//! util-linux `script`) and never with `NO_COLOR`, `airlock ls` (sizes
//! computed from the layout's own files), `bundle inspect`'s summary, the
//! note on events no webhook will deliver, and the S3 flags of store
//! commands under their own `--help` heading.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A child process killed (SIGINT, then SIGKILL) on drop.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `airlock [log] serve` on `data`, stderr into `log`, until `/v2/` answers.
fn serve(data: &Path, log: &Path, log_args: &[&str]) -> (Running, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(log_args)
        .args(["serve", "--data", data.to_str().unwrap(), "--listen", &addr])
        .env_remove("AIRLOCK_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let running = Running(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while http(&addr, "GET", "/v2/", &[]).is_err() {
        assert!(Instant::now() < deadline, "serve did not answer");
        std::thread::sleep(Duration::from_millis(50));
    }
    (running, addr)
}

#[test]
fn serve_says_what_it_serves_and_colours_only_a_terminal() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let log = tmp.path().join("serve.log");
    let (server, addr) = serve(&data, &log, &[]);
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("airlock serving on"))
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains(&format!(
            "airlock serving on http://{addr} (store {}; no users: everyone is admin): registry /v2 (push off, delete off), stacks /stacks/v1 (admin routes off), torcx /torcx (off (no --torcx-key)), imports /admin/v1/imports (off)",
            data.display()
        )),
        "{text}"
    );
    assert!(!text.contains('\u{1b}'), "colour in a file: {text:?}");

    // --log info into a file: plain `key=value` a grep finds.
    let (server, addr) = serve(&data, &log, &["--log", "info"]);
    let _ = http(
        &addr,
        "GET",
        "/v2/library/x/manifests/latest?ns=docker.io",
        &[],
    );
    drop(server);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("query=ns=docker.io"), "{text}");
    assert!(!text.contains('\u{1b}'), "{text:?}");

    // On a terminal: colour, unless NO_COLOR is set.
    require_tool("script", "bsdutils");
    let on_a_tty = |no_color: Option<&str>| {
        let line = format!(
            "timeout -s INT 2 {} serve --data {} --listen 127.0.0.1:{}",
            env!("CARGO_BIN_EXE_airlock"),
            data.display(),
            free_port()
        );
        let mut cmd = Command::new("script");
        cmd.args(["-qec", &line, "/dev/null"])
            .env_remove("AIRLOCK_LOG");
        match no_color {
            Some(v) => cmd.env("NO_COLOR", v),
            None => cmd.env_remove("NO_COLOR"),
        };
        String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned()
    };
    let coloured = on_a_tty(None);
    assert!(
        coloured.contains("airlock serving on") && coloured.contains('\u{1b}'),
        "{coloured:?}"
    );
    let plain = on_a_tty(Some("1"));
    assert!(
        plain.contains("airlock serving on") && !plain.contains('\u{1b}'),
        "{plain:?}"
    );
}

/// The sum of the sizes of the manifest `digest`, its config and layers, from the layout's files.
fn image_bytes(layout: &Path, digest: &str) -> u64 {
    let path = blob_file(layout, digest);
    let m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut n = std::fs::metadata(&path).unwrap().len();
    for d in std::iter::once(&m["config"]).chain(m["layers"].as_array().unwrap()) {
        n += std::fs::metadata(blob_file(layout, d["digest"].as_str().unwrap()))
            .unwrap()
            .len();
    }
    n
}

#[test]
fn ls_inspect_events_and_help_say_it_in_words() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let d = data.to_str().unwrap();
    let layout = fixture_layout();
    let config = write_config(
        tmp.path(),
        &layout,
        &[("latest", "stacks/bb", &["latest", "1.0"])],
    );
    let bundle = tmp.path().join("b.tar");
    create_bundle(&config, &bundle, &[]);

    let summary = airlock_ok(&["bundle", "inspect", bundle.to_str().unwrap()]);
    let digest = layout_ref_digest(&layout, "latest");
    assert!(
        summary.contains(&format!("  stacks/bb:latest,1.0  {digest}")),
        "{summary}"
    );
    // Sizes in powers of 1024, from the layout's own files.
    let mib = format!(
        "{:.1} MiB",
        image_bytes(&layout, &digest) as f64 / 1048576.0
    );
    assert!(
        summary.contains("(signature not checked)")
            && summary.contains(&format!("blobs    4 carried, {mib};")),
        "{summary}"
    );

    let (_, public) = test_key();
    let out = import_bundle(&data, &public, &bundle);
    assert!(
        out.contains(&format!("{mib} written")) && !out.contains(" MB"),
        "{out}"
    );
    airlock_ok(&[
        "stack",
        "promote",
        "--data",
        d,
        "bb",
        "--image",
        "stacks/bb:latest",
    ]);

    let all: serde_json::Value =
        serde_json::from_str(&airlock_ok(&["ls", "--data", d, "--json"])).unwrap();
    assert_eq!(all["repositories"][0]["repository"], "stacks/bb");
    assert_eq!(all["repositories"][0]["tags"], 2);
    assert_eq!(
        all["repositories"][0]["size"],
        image_bytes(&layout, &digest)
    );
    assert_eq!(all["stacks"][0]["name"], "bb");
    let text = airlock_ok(&["ls", "--data", d]);
    assert!(
        text.contains("stacks/bb")
            && text
                .lines()
                .any(|l| l.starts_with("bb ") && l.contains("ACTIVE")),
        "{text}"
    );
    let tags: serde_json::Value =
        serde_json::from_str(&airlock_ok(&["ls", "--data", d, "stacks/bb", "--json"])).unwrap();
    assert_eq!(tags["tags"][0]["tag"], "1.0");
    assert_eq!(tags["tags"][1]["digest"], digest.as_str());
    assert_eq!(tags["tags"][1]["size"], image_bytes(&layout, &digest));
    let o = airlock(&["ls", "--data", d, "nope/x"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("repository nope/x not found"));

    // The promotion queued an event that nothing will deliver: said so.
    let events = airlock_ok(&["events", "--data", d]);
    assert!(
        events.contains("queued events were never attempted: only `airlock serve` delivers them"),
        "{events}"
    );
    let serve_cfg = tmp.path().join("airlock.toml");
    std::fs::write(&serve_cfg, "listen = [\"127.0.0.1:5000\"]\n").unwrap();
    let events = airlock_ok(&[
        "events",
        "--data",
        d,
        "--config",
        serve_cfg.to_str().unwrap(),
    ]);
    assert!(
        events.contains("will never be delivered") && events.contains("configures no [[webhook]]"),
        "{events}"
    );

    // Store commands: the S3 flags under their own heading, after the others.
    for cmd in [["import", "--help"], ["gc", "--help"], ["ls", "--help"]] {
        let help = airlock_ok(&cmd);
        let heading = help
            .find("S3 store (with --store s3://BUCKET/PREFIX):")
            .expect(&help);
        let flag = help.find("--s3-endpoint").unwrap();
        assert!(
            flag > heading && help.find("--data").unwrap() < heading,
            "{help}"
        );
    }
}

/// Content never drives the terminal (issue 36): a stack description and a
/// reason holding an OSC title sequence and an erase-line sequence are
/// printed by `stack show` and `history` as text (`\u{1b}`), never as the
/// raw bytes; `--json` keeps JSON's own escapes.
#[test]
fn control_sequences_in_content_are_printed_as_text() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let d = data.to_str().unwrap();
    let layout = fixture_layout();
    let config = write_config(tmp.path(), &layout, &[("latest", "stacks/bb", &["latest"])]);
    let bundle = tmp.path().join("b.tar");
    create_bundle(&config, &bundle, &[]);
    import_bundle(&data, &test_key().1, &bundle);
    let evil = "\u{1b}]0;owned\u{7}\u{1b}[2K\rfixed";
    airlock_ok(&[
        "stack",
        "promote",
        "--data",
        d,
        "bb",
        "--image",
        "stacks/bb:latest",
        "--description",
        evil,
        "--reason",
        evil,
    ]);
    for args in [
        vec!["stack", "show", "bb", "--data", d],
        vec!["stack", "list", "--data", d],
        vec!["history", "--data", d],
    ] {
        let out = airlock(&args);
        assert!(out.status.success(), "{args:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !out.stdout.contains(&0x1b) && !out.stdout.contains(&b'\r'),
            "{args:?}: {text:?}"
        );
        if args[0] != "stack" || args[1] == "show" {
            assert!(text.contains("\\u{1b}]0;owned\\u{7}"), "{args:?}: {text}");
        }
    }
    let json = airlock_ok(&["stack", "show", "bb", "--json", "--data", d]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["description"], evil);
}
