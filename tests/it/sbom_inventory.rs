//! Package inventories and SBOMs against independent readers.
//!
//! - The Debian inventory (attached at `bundle create` as an SPDX referrer)
//!   equals what `dpkg-query --admindir=ROOT/var/lib/dpkg -W` lists for the
//!   same image unpacked by umoci (a copy of the host's real dpkg
//!   database plus the fixture's packages); distroless `status.d/` the
//!   same, with the whited-out status file gone; the Alpine database equals
//!   what a second reader (Python, in this file) makes of it.
//! - The SPDX document validates with `spdx-tools`, the CycloneDX one with
//!   `cyclonedx-python-lib`'s strict JSON validator (both PyPI); the oras
//!   client (oras-py) lists the referrer and pulls the SPDX file.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::backend::{Backend, Kind};
use common::*;

/// `name version arch` of every package of an SPDX document (its `name`,
/// `versionInfo` and the purl's `arch` qualifier), OS and image left out.
fn spdx_packages(doc: &serde_json::Value) -> BTreeSet<String> {
    doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["primaryPackagePurpose"] == "LIBRARY")
        .map(|p| {
            let purl = p["externalRefs"][0]["referenceLocator"].as_str().unwrap();
            let arch = purl
                .split("arch=")
                .nth(1)
                .unwrap()
                .split('&')
                .next()
                .unwrap();
            format!(
                "{} {} {arch}",
                p["name"].as_str().unwrap(),
                p["versionInfo"].as_str().unwrap()
            )
        })
        .collect()
}

/// `umoci unpack` of `layout:reference` into `dir`; returns the rootfs.
fn unpack(layout: &Path, reference: &str, dir: &Path) -> std::path::PathBuf {
    let bundle = dir.join(reference);
    run_ok(Command::new("umoci").args([
        "unpack",
        "--image",
        &format!("{}:{reference}", layout.display()),
        bundle.to_str().unwrap(),
    ]));
    bundle.join("rootfs")
}

/// What dpkg-query lists as present (not purged, not only config files).
fn dpkg_query(admindir: &Path) -> BTreeSet<String> {
    let o = Command::new("dpkg-query")
        .arg(format!("--admindir={}", admindir.display()))
        .args([
            "-W",
            "-f",
            "${db:Status-Status} ${Package} ${Version} ${Architecture}\n",
        ])
        .output()
        .expect("dpkg-query (apt-get install dpkg)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(status, _)| !matches!(*status, "not-installed" | "config-files"))
        .map(|(_, rest)| rest.to_string())
        .collect()
}

fn sbom(b: &Backend, image: &str, format: &str) -> serde_json::Value {
    serde_json::from_str(&b.airlock_ok(&["sbom"], &[image, "--format", format])).unwrap()
}

const APK_READER: &str = r#"
import sys
for stanza in open(sys.argv[1]).read().split("\n\n"):
    f = dict(l.split(":", 1) for l in stanza.splitlines() if ":" in l)
    if "P" in f:
        print(f["P"], f["V"], f["A"])
"#;

#[test]
fn inventories_match_dpkg_query_and_a_second_apk_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let b = Backend::start(Kind::Fs);
    let bundle = tmp.path().join("b.tar");
    create_bundle(&pkgdb::config(tmp.path(), ""), &bundle, &[]);
    b.import(&test_key().1, &bundle);
    let layout = pkgdb::layout();

    // Debian: the referrer attached at bundle create, against dpkg-query.
    let root = unpack(&layout, "deb-v1", tmp.path());
    let want = dpkg_query(&root.join("var/lib/dpkg"));
    assert!(
        want.len() > 50,
        "the host database lists {} packages",
        want.len()
    );
    let doc = sbom(&b, "stacks/deb:v1", "spdx");
    assert_eq!(spdx_packages(&doc), want);
    let report: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["vulns"], &["stacks/deb:v1", "--json"])).unwrap();
    assert!(
        report["platforms"][0]["inventory"]["attached"].is_string(),
        "{report}"
    );
    assert_eq!(
        report["platforms"][0]["os"],
        "Debian GNU/Linux 12 (bookworm)"
    );

    // Distroless: status.d/ (md5sums files are not stanzas), the whited-out status file gone.
    let root = unpack(&layout, "distroless", tmp.path());
    let db = tmp.path().join("distroless-db");
    std::fs::create_dir_all(&db).unwrap();
    let mut status = String::new();
    let mut names: Vec<_> = std::fs::read_dir(root.join("var/lib/dpkg/status.d"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_none_or(|x| x != "md5sums"))
        .collect();
    names.sort();
    for p in names {
        status.push_str(&std::fs::read_to_string(p).unwrap());
        status.push('\n');
    }
    assert!(!root.join("var/lib/dpkg/status").exists());
    std::fs::write(db.join("status"), status).unwrap();
    let want = dpkg_query(&db);
    assert_eq!(want.len(), 40);
    let got = spdx_packages(&sbom(&b, "stacks/distroless:latest", "spdx"));
    assert_eq!(got, want);
    assert!(!got.iter().any(|p| p.starts_with("hidden ")));

    // Alpine: against a second reader of the same file.
    let root = unpack(&layout, "alpine", tmp.path());
    let o = Command::new("python3")
        .args([
            "-c",
            APK_READER,
            root.join("lib/apk/db/installed").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let want: BTreeSet<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let doc = sbom(&b, "stacks/alpine:3.19", "spdx");
    assert_eq!(spdx_packages(&doc), want);
    let purls: Vec<&str> = doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["externalRefs"][0]["referenceLocator"].as_str())
        .collect();
    assert!(
        purls.contains(
            &"pkg:apk/alpine/libssl3@3.1.4-r5?arch=x86_64&distro=alpine-3.19.1&upstream=openssl"
        ),
        "{purls:?}"
    );
}

const VALIDATE: &str = r#"
import sys
from spdx_tools.spdx.parser.parse_anything import parse_file
from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document
from cyclonedx.validation.json import JsonStrictValidator
from cyclonedx.schema import SchemaVersion
spdx, cdx = sys.argv[1:3]
doc = parse_file(spdx)
problems = validate_full_spdx_document(doc)
assert not problems, [p.validation_message for p in problems][:5]
print(len(doc.packages))
error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(open(cdx).read())
assert error is None, error
print("ok")
"#;

/// Lists the referrers of SUBJECT with oras-py's session, then pulls the SPDX
/// one with `pull`; prints the artifact digest and the pulled file.
const ORAS_REFERRERS: &str = r#"
import sys, oras.client
addr, repo, subject, out = sys.argv[1:5]
c = oras.client.OrasClient(hostname=addr, insecure=True)
r = c.do_request(f"http://{addr}/v2/{repo}/referrers/{subject}")
assert r.status_code == 200, r.status_code
found = [m for m in r.json()["manifests"] if m.get("artifactType") == "application/spdx+json"]
assert len(found) == 1, r.json()
print(found[0]["digest"])
print(c.pull(target=f"{addr}/{repo}@{found[0]['digest']}", outdir=out)[0])
"#;

#[test]
fn spdx_and_cyclonedx_validate_and_oras_reads_the_referrer() {
    require_python("spdx_tools", "spdx-tools==0.8.5");
    require_python("cyclonedx", "cyclonedx-python-lib==11.12.0");
    require_python("oras.client", "oras==0.2.43");
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let bundle = tmp.path().join("b.tar");
    create_bundle(&pkgdb::config(tmp.path(), ""), &bundle, &[]);
    import_bundle(&data, &test_key().1, &bundle);
    let d = data.to_str().unwrap();
    for image in ["stacks/deb:v2", "stacks/alpine:3.19"] {
        let spdx = tmp.path().join("doc.spdx.json");
        let cdx = tmp.path().join("doc.cdx.json");
        std::fs::write(&spdx, airlock_ok(&["sbom", "--data", d, image])).unwrap();
        std::fs::write(
            &cdx,
            airlock_ok(&["sbom", "--data", d, image, "--format", "cyclonedx"]),
        )
        .unwrap();
        let o = Command::new("python3")
            .args([
                "-c",
                VALIDATE,
                spdx.to_str().unwrap(),
                cdx.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{image}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let s = serve(&data, &[]);
    let subject = layout_ref_digest(&pkgdb::layout(), "deb-v2");
    let out = tmp.path().join("pulled");
    let o = Command::new("python3")
        .args([
            "-c",
            ORAS_REFERRERS,
            &s.addr,
            "stacks/deb",
            &subject,
            out.to_str().unwrap(),
        ])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "oras: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let stdout = String::from_utf8(o.stdout).unwrap();
    let pulled = stdout.lines().nth(1).unwrap();
    // The pulled document is the one `airlock sbom` reads back (as stored, compact).
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(pulled).unwrap()).unwrap();
    let printed: serde_json::Value =
        serde_json::from_str(&airlock_ok(&["sbom", "--data", d, "stacks/deb:v2"])).unwrap();
    assert_eq!(doc, printed);
    assert_eq!(doc["packages"][0]["versionInfo"], subject.as_str());
}
