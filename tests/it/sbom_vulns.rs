//! Stack diffs and offline vulnerability status, end to end on the
//! package-database fixture (tests/common/pkgdb.rs):
//! - a hand-made OSV feed in the real OSV schema, carried in its own
//!   bundle, with a fix between the stack's v1 (affected) and v2 (not);
//! - importing it while v1 is promoted sends `stack.vulnerable`;
//! - `stack promote --dry-run` shows the diff and changes nothing; the
//!   promotion keeps the diff and the `stack.promoted` event carries it;
//! - `stack diff`, `vulns`, the lifecycle reason, `GET /api/v1/vulns` and
//!   the `airlock_stack_vulnerabilities` gauges agree.
//!
//! Runs on the filesystem and on s3s-fs.

use crate::common;

use std::process::Command;

use common::backend::{Backend, on_backends};
use common::*;

on_backends!([fs, s3s_fs] feed_fix_between_v1_and_v2_names_the_cve_everywhere);

/// Days since 2026-11-28 by `date` (the feed's newest `modified`).
fn feed_age_days() -> i64 {
    let o = Command::new("date").args(["-u", "+%s"]).output().unwrap();
    let now: i64 = String::from_utf8(o.stdout).unwrap().trim().parse().unwrap();
    let o = Command::new("date")
        .args(["-u", "-d", "2026-11-28", "+%s"])
        .output()
        .unwrap();
    let then: i64 = String::from_utf8(o.stdout).unwrap().trim().parse().unwrap();
    (now - then) / 86_400
}

/// Every event of type `kind` in `airlock events --json`.
fn events(b: &Backend, kind: &str) -> Vec<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["events"], &["--json"])).unwrap();
    let mut out = Vec::new();
    fn walk(v: &serde_json::Value, kind: &str, out: &mut Vec<serde_json::Value>) {
        match v {
            serde_json::Value::Object(o)
                if o.get("type").and_then(|t| t.as_str()) == Some(kind) =>
            {
                out.push(v.clone())
            }
            serde_json::Value::Object(o) => o.values().for_each(|x| walk(x, kind, out)),
            serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, kind, out)),
            _ => {}
        }
    }
    walk(&v, kind, &mut out);
    out
}

fn ids(report: &serde_json::Value) -> Vec<(String, String, String)> {
    report["platforms"][0]["vulnerabilities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["id"].as_str().unwrap().to_string(),
                f["severity"].as_str().unwrap().to_string(),
                f["fixed"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn feed_fix_between_v1_and_v2_names_the_cve_everywhere(b: Backend) {
    let tmp = tempfile::tempdir().unwrap();
    let images = tmp.path().join("images.tar");
    create_bundle(&pkgdb::config(tmp.path(), ""), &images, &[]);
    b.import(&test_key().1, &images);
    b.airlock_ok(
        &["stack", "promote"],
        &["bookworm", "--image", "stacks/deb:v1"],
    );

    // The feed crosses in a bundle of its own, while v1 is promoted.
    let feed_dir = tmp.path().join("feedcfg");
    std::fs::create_dir_all(&feed_dir).unwrap();
    let osv = pkgdb::osv_dir(&feed_dir);
    let cfg = feed_dir.join("feed.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[feed]]\nname = \"debian-osv\"\nsource = {:?}\n",
            osv.display().to_string()
        ),
    )
    .unwrap();
    let feed_bundle = tmp.path().join("feed.tar");
    create_bundle(&cfg, &feed_bundle, &[]);
    b.import(&test_key().1, &feed_bundle);
    let vulnerable = events(&b, "stack.vulnerable");
    assert_eq!(vulnerable.len(), 1, "{vulnerable:?}");
    assert_eq!(vulnerable[0]["data"]["stack"], "bookworm");
    assert_eq!(
        vulnerable[0]["data"]["new"],
        serde_json::json!(["CVE-2026-1234", "CVE-2026-5678"])
    );

    // The dry run shows the diff and changes nothing.
    let dry = b.airlock_ok(
        &["stack", "promote"],
        &["bookworm", "--image", "stacks/deb:v2", "--dry-run"],
    );
    for line in [
        "^ libairlock-test1 (",
        ") 1.0-1 -> 1.0-3",
        "+ airlock-new (all) 1.5",
        "- airlock-gone (all) 1",
        "os-release PRETTY_NAME",
        "1 upgraded, 0 downgraded, 1 added, 1 removed",
    ] {
        assert!(dry.contains(line), "{line:?} not in:\n{dry}");
    }
    let show: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "show"], &["bookworm", "--json"])).unwrap();
    assert_eq!(show["promotions"].as_array().unwrap().len(), 1);

    let out = b.airlock_ok(
        &["stack", "promote"],
        &["bookworm", "--image", "stacks/deb:v2"],
    );
    assert!(out.contains("+ airlock-new (all) 1.5"), "{out}");
    let show: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "show"], &["bookworm", "--json"])).unwrap();
    let kept = &show["promotions"][1]["diff"]["platforms"][0];
    assert_eq!(kept["upgraded"][0]["name"], "libairlock-test1");
    let promoted = events(&b, "stack.promoted");
    assert_eq!(
        promoted.last().unwrap()["data"]["diff"]["platforms"][0]["added"][0]["name"],
        "airlock-new"
    );

    // stack diff, by name and by images.
    let by_name = b.airlock_ok(&["stack", "diff"], &["bookworm"]);
    assert!(by_name.contains("^ libairlock-test1"), "{by_name}");
    let d: serde_json::Value = serde_json::from_str(&b.airlock_ok(
        &["stack", "diff"],
        &["stacks/deb:v1", "stacks/deb:v2", "--json"],
    ))
    .unwrap();
    let p = &d["platforms"][0];
    assert_eq!(p["upgraded"][0]["from"], "1.0-1");
    assert_eq!(p["upgraded"][0]["to"], "1.0-3");
    assert_eq!(p["removed"][0]["name"], "airlock-gone");
    assert_eq!(p["os_release"][0]["key"], "PRETTY_NAME");
    assert_eq!(p["downgraded"].as_array().unwrap().len(), 0);

    // v1 is affected by both, v2 only by the one fixed in 2.0-1.
    let v1: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["vulns"], &["stacks/deb:v1", "--json"])).unwrap();
    assert_eq!(
        ids(&v1),
        [
            ("CVE-2026-1234".into(), "critical".into(), "1.0-2".into()),
            ("CVE-2026-5678".into(), "medium".into(), "2.0-1".into())
        ]
    );
    assert_eq!(
        v1["platforms"][0]["vulnerabilities"][0]["advisory"],
        "DSA-9999-1"
    );
    assert_eq!(
        v1["platforms"][0]["vulnerabilities"][0]["packages"],
        serde_json::json!(["libairlock-test1"])
    );
    let age = feed_age_days();
    let age_line = match age {
        0 => "data from 2026-11-28, today".to_string(),
        1 => "data from 2026-11-28, 1 day old".to_string(),
        n => format!("data from 2026-11-28, {n} days old"),
    };
    assert_eq!(v1["feeds"][0]["age"], age_line.as_str());
    let text = b.airlock_ok(&["vulns"], &["bookworm"]);
    assert!(text.contains(&age_line), "{text}");
    assert!(
        text.contains("CVE-2026-5678") && !text.contains("CVE-2026-1234"),
        "{text}"
    );

    // The lifecycle of v1 names what a restage fixes.
    let v1_digest = layout_ref_digest(&pkgdb::layout(), "deb-v1");
    let l = b.airlock_ok(&["stack", "lifecycle"], &[&v1_digest]);
    let want =
        format!("superseded (restage required: fixes CVE-2026-1234; debian-osv: {age_line})");
    assert!(l.contains(&want), "{want:?} not in {l}");
    let lj: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "lifecycle"], &[&v1_digest, "--json"]))
            .unwrap();
    assert_eq!(lj["fixes"], serde_json::json!(["CVE-2026-1234"]));

    // The same over HTTP, and the gauges.
    if b.s3.is_none() {
        let s = serve(&b.data_dir(), &[]);
        let (st, _, body) = http(&s.addr, "GET", "/api/v1/vulns?stack=bookworm", &[]).unwrap();
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
        let api: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            ids(&api),
            [("CVE-2026-5678".into(), "medium".into(), "2.0-1".into())]
        );
        let (st, _, body) = http(
            &s.addr,
            "GET",
            &format!("/api/v1/vulns?digest={v1_digest}"),
            &[],
        )
        .unwrap();
        assert_eq!(st, 200);
        let api: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(api["reason"].as_str().unwrap(), want);
        let (st, _, _) = http(&s.addr, "GET", "/api/v1/vulns?stack=nosuch", &[]).unwrap();
        assert_eq!(st, 404);
        let (_, _, body) = http(&s.addr, "GET", "/metrics", &[]).unwrap();
        let metrics = String::from_utf8(body).unwrap();
        for line in [
            "airlock_stack_vulnerabilities{stack=\"bookworm\",severity=\"medium\"} 1",
            "airlock_stack_vulnerabilities{stack=\"bookworm\",severity=\"critical\"} 0",
        ] {
            assert!(metrics.contains(line), "{line} not in /metrics");
        }
    }
}
