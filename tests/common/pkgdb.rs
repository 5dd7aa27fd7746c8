//! The package-database fixture (tests/fixtures/make-pkgdb-image.sh), its
//! bundle, and hand-made OSV feeds in the real OSV schema.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The fixture layout (refs `deb-v1`, `deb-v2`, `distroless`, `alpine`),
/// built once per test binary from the host's dpkg database.
pub fn layout() -> PathBuf {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT
        .get_or_init(|| {
            super::require_tool("umoci", "umoci");
            super::require_tool("dpkg-query", "dpkg");
            let out = super::shared_dir().join("pkgdb-layout");
            super::fixture_script("make-pkgdb-image.sh", &out);
            out
        })
        .clone()
}

/// A mirror config in `dir` carrying the fixture's images as
/// `stacks/deb:v1`, `stacks/deb:v2`, `stacks/distroless:latest`,
/// `stacks/alpine:3.19`, plus `extra` TOML (feeds).
pub fn config(dir: &Path, extra: &str) -> PathBuf {
    let l = layout();
    let mut text = String::new();
    for (r, repo, tag) in [
        ("deb-v1", "stacks/deb", "v1"),
        ("deb-v2", "stacks/deb", "v2"),
        ("distroless", "stacks/distroless", "latest"),
        ("alpine", "stacks/alpine", "3.19"),
    ] {
        text.push_str(&super::image_toml(
            &format!("oci:{}:{r}", l.display()),
            repo,
            &[tag],
            "",
        ));
    }
    text.push_str(extra);
    let path = dir.join("mirror.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// One OSV record (OSV schema 1.6) for `package` in `Debian:12`, affected
/// from the first version until `fixed`.
pub fn osv_record(
    id: &str,
    aliases: &[&str],
    package: &str,
    fixed: &str,
    severity: &str,
) -> serde_json::Value {
    serde_json::json!({
        "schema_version": "1.6.0",
        "id": id,
        "modified": "2026-11-28T10:00:00Z",
        "published": "2026-11-27T00:00:00Z",
        "aliases": aliases,
        "summary": format!("{package}: test advisory {id}"),
        "details": "Made by the airlock tests.",
        "severity": [{"type": "CVSS_V3", "score": severity}],
        "affected": [{
            "package": {"ecosystem": "Debian:12", "name": package, "purl": format!("pkg:deb/debian/{package}?arch=source")},
            "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fixed}]}],
        }],
    })
}

/// The tests' feed, one file per record in `dir`: DSA-9999-1
/// (CVE-2026-1234, critical) fixed in airlock-test 1.0-2 (between v1's 1.0-1
/// and v2's 1.0-3), and DEBIAN-CVE-2026-5678 (medium) fixed in 2.0-1
/// (affects both); plus a record of another ecosystem that must not match.
pub fn osv_dir(dir: &Path) -> PathBuf {
    let d = dir.join("osv");
    std::fs::create_dir_all(&d).unwrap();
    let records = [
        osv_record(
            "DSA-9999-1",
            &["CVE-2026-1234"],
            "airlock-test",
            "1.0-2",
            "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        ),
        osv_record(
            "DEBIAN-CVE-2026-5678",
            &["CVE-2026-5678"],
            "airlock-test",
            "2.0-1",
            "CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N",
        ),
    ];
    for r in &records {
        std::fs::write(
            d.join(format!("{}.json", r["id"].as_str().unwrap())),
            r.to_string(),
        )
        .unwrap();
    }
    let mut other = osv_record(
        "PYSEC-1",
        &[],
        "airlock-test",
        "9",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
    );
    other["affected"][0]["package"]["ecosystem"] = "PyPI".into();
    std::fs::write(d.join("PYSEC-1.json"), other.to_string()).unwrap();
    d
}
