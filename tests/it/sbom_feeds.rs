//! Bad vulnerability feeds are refused, big ones stream.
//!
//! - `bundle create` refuses a malformed OSV record, naming its file;
//! - a signed bundle whose feed blob is malformed (made here with the
//!   library's own signing, as a hostile or broken creator would) is
//!   refused at import and leaves the state as it was; the same feed
//!   signed by a key the site does not trust is refused before any blob;
//! - a 1 GiB OSV feed (AIRLOCK_TEST_FEED_MIB to change) is created,
//!   imported and matched with a peak RSS (GNU time) far below its size.

use crate::common;

use std::path::Path;
use std::process::Command;

use airlock::bundle::format::{BlobEntry, BundleDoc, FORMAT_V1, LayoutDigests};
use airlock::digest::Digest;
use airlock::sbom::feed::{FeedEntry, Format};
use common::*;

/// A bundle tar at `out` carrying only `feed` (as `name`), signed with `key`.
fn feed_bundle(out: &Path, key: &Path, name: &str, feed: &[u8]) {
    let key = airlock::bundle::sign::SigningKey::load(key).unwrap();
    let digest = Digest::sha256_of(feed);
    let layout = airlock::oci::layout_header();
    let index = airlock::oci::layout_index(&[]);
    let doc = BundleDoc {
        format: FORMAT_V1.into(),
        id: uuid::Uuid::new_v4().to_string(),
        created: "2026-11-30T00:00:00Z".into(),
        expires: None,
        creator: "test".into(),
        images: Vec::new(),
        layout: LayoutDigests {
            oci_layout: Digest::sha256_of(&layout),
            index_json: Digest::sha256_of(&index),
        },
        blobs: vec![BlobEntry {
            digest: digest.clone(),
            size: feed.len() as u64,
        }],
        required: Vec::new(),
        addons: Vec::new(),
        torcx_contents: Vec::new(),
        stacks: Vec::new(),
        feeds: vec![FeedEntry {
            name: name.into(),
            format: Format::Osv,
            date: "2026-11-30".into(),
            digest: digest.clone(),
            size: feed.len() as u64,
            records: 1,
        }],
    };
    let signed = key
        .clearsign(&serde_json::to_string_pretty(&doc).unwrap())
        .unwrap();
    let mut tar = tar::Builder::new(std::fs::File::create(out).unwrap());
    for (path, bytes) in [
        ("airlock-bundle.json.asc", signed.as_bytes()),
        ("oci-layout", &layout[..]),
        ("index.json", &index[..]),
        (&format!("blobs/sha256/{}", digest.hex())[..], feed),
    ] {
        let mut h = tar::Header::new_ustar();
        h.set_size(bytes.len() as u64);
        h.set_mode(0o644);
        tar.append_data(&mut h, path, bytes).unwrap();
    }
    tar.finish().unwrap();
}

#[test]
fn malformed_or_unsigned_feeds_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    // At create: a record without `modified`.
    let dir = tmp.path().join("osv");
    pkgdb::osv_dir(tmp.path());
    let mut bad = pkgdb::osv_record(
        "DSA-1-1",
        &[],
        "x",
        "1",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
    );
    bad.as_object_mut().unwrap().remove("modified");
    std::fs::write(dir.join("DSA-1-1.json"), bad.to_string()).unwrap();
    let cfg = tmp.path().join("feed.toml");
    std::fs::write(
        &cfg,
        format!(
            "[[feed]]\nname = \"bad\"\nsource = {:?}\n",
            dir.display().to_string()
        ),
    )
    .unwrap();
    let o = create_bundle_output(&cfg, &tmp.path().join("never.tar"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("DSA-1-1.json") && err.contains("modified"),
        "{err}"
    );

    // At import: signed, listed, hashed right, but not OSV.
    let data = tmp.path().join("data");
    let ok = tmp.path().join("ok.tar");
    let good = pkgdb::osv_record(
        "DSA-2-1",
        &[],
        "x",
        "1",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
    );
    feed_bundle(&ok, &test_key().0, "good", format!("{good}\n").as_bytes());
    import_bundle(&data, &test_key().1, &ok);
    let before = root_of(&data);
    let broken = tmp.path().join("broken.tar");
    feed_bundle(
        &broken,
        &test_key().0,
        "good",
        b"{\"id\": \"DSA-3-1\", \"modified\": \"yesterday\"}\n",
    );
    let d = data.to_str().unwrap();
    let key = test_key().1;
    let o = airlock(&[
        "import",
        "--data",
        d,
        "--keyring",
        key.to_str().unwrap(),
        broken.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("feed good refused") && err.contains("line 1"),
        "{err}"
    );
    assert_eq!(root_of(&data), before, "a refused feed changes nothing");

    // Signed by a key the site does not trust.
    let (other, _) = keypair(tmp.path(), "stranger");
    let unsigned = tmp.path().join("stranger.tar");
    feed_bundle(&unsigned, &other, "good", format!("{good}\n").as_bytes());
    let o = airlock(&[
        "import",
        "--data",
        d,
        "--keyring",
        key.to_str().unwrap(),
        unsigned.to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "an untrusted signature is refused");
    assert_eq!(root_of(&data), before);
}

/// Peak RSS in KiB of a command, by GNU time.
fn peak_rss_kib(args: &[&str]) -> u64 {
    let o = Command::new("/usr/bin/time")
        .arg("-v")
        .arg(env!("CARGO_BIN_EXE_airlock"))
        .args(args)
        .output()
        .expect("/usr/bin/time (apt-get install time)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "airlock {args:?}: {err}");
    err.lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn a_huge_feed_is_streamed_in_bounded_memory() {
    require_tool("/usr/bin/time", "time");
    let mib: u64 = std::env::var("AIRLOCK_TEST_FEED_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let tmp = tempfile::tempdir().unwrap();
    let feed = tmp.path().join("huge.jsonl");
    // Records with 64 KiB of details each, one of them for the fixture's package.
    let script = r#"
import json, sys
path, mib = sys.argv[1], int(sys.argv[2])
details = "x" * 65536
with open(path, "w") as f:
    n, size = 0, 0
    while size < mib << 20:
        pkg = "airlock-test" if n == 7 else f"pkg{n % 5000}"
        r = {"id": f"DEBIAN-CVE-2026-{n}", "modified": "2026-11-29T00:00:00Z", "details": details,
             "affected": [{"package": {"ecosystem": "Debian:12", "name": pkg},
                           "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "1.0-2"}]}]}]}
        line = json.dumps(r) + "\n"
        f.write(line)
        size += len(line)
        n += 1
"#;
    run_ok(Command::new("python3").args(["-c", script, feed.to_str().unwrap(), &mib.to_string()]));
    let cfg = pkgdb::config(
        tmp.path(),
        &format!(
            "[[feed]]\nname = \"huge\"\nsource = {:?}\n",
            feed.display().to_string()
        ),
    );
    let bundle = tmp.path().join("b.tar");
    create_bundle(&cfg, &bundle, &[]);
    std::fs::remove_file(&feed).unwrap();
    let data = tmp.path().join("data");
    let key = test_key().1;
    let rss = peak_rss_kib(&[
        "import",
        "--data",
        data.to_str().unwrap(),
        "--keyring",
        key.to_str().unwrap(),
        bundle.to_str().unwrap(),
    ]);
    assert!(
        rss < 160 * 1024,
        "import of a {mib} MiB feed peaked at {rss} KiB"
    );
    let out = airlock_ok(&[
        "vulns",
        "--data",
        data.to_str().unwrap(),
        "stacks/deb:v1",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["platforms"][0]["vulnerabilities"][0]["id"],
        "DEBIAN-CVE-2026-7"
    );
}

/// What import refuses, create refuses first (issue 36): a single `.json`
/// record over the record limit, and range versions that are no version
/// (`introduced: ""`, a NUL in `last_affected`); nothing is written. The
/// same versions in a signed bundle are refused at import too.
#[test]
fn create_applies_the_imports_feed_limits() {
    let tmp = tempfile::tempdir().unwrap();
    let create = |name: &str, source: &Path| {
        let cfg = tmp.path().join(format!("{name}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[[feed]]\nname = \"{name}\"\nsource = {:?}\n",
                source.display().to_string()
            ),
        )
        .unwrap();
        let out = tmp.path().join(format!("{name}.tar"));
        let o = create_bundle_output(&cfg, &out);
        (o, out)
    };
    let record = || {
        pkgdb::osv_record(
            "DSA-3-1",
            &[],
            "x",
            "1",
            "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        )
    };
    // A 17 MiB record in one .json file.
    let mut huge = record();
    huge["details"] = serde_json::Value::String("x".repeat(17 << 20));
    let file = tmp.path().join("huge.json");
    std::fs::write(&file, huge.to_string()).unwrap();
    let (o, out) = create("huge", &file);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("over the 16777216 bytes"),
        "{err}"
    );
    assert!(!out.exists(), "a refused bundle was written");
    // Versions that are none.
    for (name, events) in [
        (
            "empty",
            serde_json::json!([{"introduced": ""}, {"fixed": "1"}]),
        ),
        (
            "nul",
            serde_json::json!([{"introduced": "0"}, {"last_affected": "1\u{0}2"}]),
        ),
        (
            "space",
            serde_json::json!([{"introduced": "0"}, {"fixed": "1 2"}]),
        ),
    ] {
        let mut r = record();
        r["affected"][0]["ranges"][0]["events"] = events;
        let file = tmp.path().join(format!("{name}.json"));
        std::fs::write(&file, r.to_string()).unwrap();
        let (o, out) = create(name, &file);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("version"),
            "{name}: {err}"
        );
        assert!(!out.exists(), "{name}: a refused bundle was written");
        // Signed and carried anyway: import refuses it, nothing changes.
        let data = tmp.path().join(format!("data-{name}"));
        let ok = tmp.path().join(format!("ok-{name}.tar"));
        feed_bundle(
            &ok,
            &test_key().0,
            "good",
            format!("{}\n", record()).as_bytes(),
        );
        import_bundle(&data, &test_key().1, &ok);
        let before = root_of(&data);
        let bad = tmp.path().join(format!("bad-{name}.tar"));
        feed_bundle(&bad, &test_key().0, "good", format!("{r}\n").as_bytes());
        let o = airlock(&[
            "import",
            "--data",
            data.to_str().unwrap(),
            "--keyring",
            test_key().1.to_str().unwrap(),
            bad.to_str().unwrap(),
        ]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("version"),
            "{name}: {err}"
        );
        assert_eq!(root_of(&data), before, "{name}: import changed the state");
    }
}
