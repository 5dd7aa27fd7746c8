//! Push with real clients over a real socket: `airlock serve --allow-push
//! --allow-delete --mirror-namespace docker.io` as a child process; skopeo
//! pushes and pulls the busybox fixture (one image, and the two-platform
//! index with `--all`, streamed PATCH uploads, a cross-repository mount);
//! oras (the Python package) pushes an artifact with a `subject`
//! (monolithic and chunked uploads), lists it through the referrers API and
//! pulls it back; a containerd-style `?ns=` pull. Digests are computed
//! independently (`sha256sum`, the layout's own index), never hard-coded.
//! Each runs on the filesystem and on s3s-fs (tests/common/backend.rs);
//! moto is left out to bound CI time.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::backend::{Backend, on_backends};
use common::*;

on_backends!(
    [fs, s3s_fs]
    skopeo_pushes_and_pulls_one_image,
    skopeo_copy_all_pushes_the_two_platform_index,
    skopeo_cross_repository_copy_mounts_blobs,
    containerd_style_ns_pull_and_docker_mirror_default,
    oras_pushes_an_artifact_with_a_subject_and_lists_referrers,
);

/// `airlock serve --allow-push --allow-delete --mirror-namespace docker.io` on `b`.
fn serve_push(b: &Backend) -> Server {
    b.serve(&[
        "--allow-push",
        "--allow-delete",
        "--mirror-namespace",
        "docker.io",
    ])
}

fn history(b: &Backend) -> String {
    b.airlock_ok(&["history"], &[])
}

/// skopeo pushes `oci:<fixture>:<r>` to `docker://<addr>/<dest>`.
fn push_fixture(s: &Server, r: &str, dest: &str, all: bool) {
    let layout = fixture_layout();
    let src = format!("oci:{}:{r}", layout.display());
    let dst = format!("docker://{}/{dest}", s.addr);
    let mut args = vec!["copy", "--dest-tls-verify=false"];
    if all {
        args.push("--all");
    }
    args.extend([src.as_str(), dst.as_str()]);
    skopeo(&args);
}

fn skopeo_pushes_and_pulls_one_image(b: Backend) {
    require_tool("skopeo", "skopeo");
    let s = serve_push(&b);
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "latest");
    assert_eq!(sha256sum(&blob_file(&layout, &want)), want);
    push_fixture(&s, "latest", "pushed/busybox:latest", false);
    // The stored manifest is the layout's, byte for byte.
    let raw = raw_manifest(&s.addr, "pushed/busybox:latest");
    assert_eq!(raw, std::fs::read(blob_file(&layout, &want)).unwrap());
    // Pull it back; every digest unchanged.
    let out = tempfile::tempdir().unwrap();
    let dst = format!("oci:{}:back", out.path().display());
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/pushed/busybox:latest", s.addr),
        &dst,
    ]);
    assert_eq!(layout_ref_digest(out.path(), "back"), want);
    let manifest: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let mut blobs = vec![manifest["config"]["digest"].as_str().unwrap().to_string()];
    for l in manifest["layers"].as_array().unwrap() {
        blobs.push(l["digest"].as_str().unwrap().to_string());
    }
    for d in &blobs {
        assert_eq!(sha256sum(&blob_file(out.path(), d)), *d);
    }
    // The push was one root swap (the manifest's; blobs need none), with its reason.
    let h = history(&b);
    assert!(h.contains("push manifest pushed/busybox:latest"), "{h}");
    assert!(!h.contains("push blob"), "{h}");
    assert_eq!(common::history_rows(&h).len(), 1, "one generation: {h}");
    // Scratch objects are gone; inventory lists blobs only.
    if let Some(keys) = b.key_dir() {
        let left = files_under(&keys.join("uploads"));
        assert!(left.is_empty(), "{:?}: {left:?}", b.kind);
    }
    let inv = b.airlock_ok(&["inventory"], &[]);
    for d in &blobs {
        assert!(inv.contains(d.as_str()), "{inv}");
    }
    // Delete the tag over HTTP: 202, then 404.
    let (st, h, _) = http(
        &s.addr,
        "DELETE",
        "/v2/pushed/busybox/manifests/latest",
        &[],
    )
    .unwrap();
    assert_eq!(st, 202);
    assert_eq!(header(&h, "content-length"), Some("0"));
    let (st, _, _) = http(&s.addr, "GET", "/v2/pushed/busybox/manifests/latest", &[]).unwrap();
    assert_eq!(st, 404);
}

/// Every file under `p` (none when it does not exist); directories left
/// empty by a store (s3s-fs keeps them) do not count.
fn files_under(p: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![p.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            if e.file_type().unwrap().is_dir() {
                dirs.push(e.path());
            } else {
                files.push(e.path());
            }
        }
    }
    files
}

fn skopeo_copy_all_pushes_the_two_platform_index(b: Backend) {
    require_tool("skopeo", "skopeo");
    let s = serve_push(&b);
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "multi");
    push_fixture(&s, "multi", "multi/busybox:v1", true);
    let raw = raw_manifest(&s.addr, "multi/busybox:v1");
    assert_eq!(raw, std::fs::read(blob_file(&layout, &want)).unwrap());
    let index: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let children = index["manifests"].as_array().unwrap();
    assert_eq!(children.len(), 2);
    for c in children {
        let d = c["digest"].as_str().unwrap();
        let child = raw_manifest(&s.addr, &format!("multi/busybox@{d}"));
        assert_eq!(child, std::fs::read(blob_file(&layout, d)).unwrap());
    }
    let out = tempfile::tempdir().unwrap();
    skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        &format!("docker://{}/multi/busybox:v1", s.addr),
        &format!("oci:{}:multi", out.path().display()),
    ]);
    let got = layout_ref_digest(out.path(), "multi");
    assert_eq!(got, want);
    assert_eq!(sha256sum(&blob_file(out.path(), &got)), want);
}

fn skopeo_cross_repository_copy_mounts_blobs(b: Backend) {
    require_tool("skopeo", "skopeo");
    let s = serve_push(&b);
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "latest");
    push_fixture(&s, "latest", "team-a/busybox:latest", false);
    let raw = raw_manifest(&s.addr, "team-a/busybox:latest");
    let manifest: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    // skopeo copies within one registry by mounting (?mount=&from=).
    skopeo(&[
        "copy",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
        &format!("docker://{}/team-a/busybox:latest", s.addr),
        &format!("docker://{}/team-b/busybox:latest", s.addr),
    ]);
    // One generation per manifest push; blob pushes and mounts make none.
    let h = history(&b);
    assert_eq!(common::history_rows(&h).len(), 2, "two generations: {h}");
    assert!(h.contains("push manifest team-b/busybox:latest"), "{h}");
    let (st, hd, body) = http(
        &s.addr,
        "GET",
        &format!("/v2/team-b/busybox/blobs/{layer}"),
        &[],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(header(&hd, "docker-content-digest"), Some(layer.as_str()));
    assert_eq!(body, std::fs::read(blob_file(&layout, &layer)).unwrap());
    let raw_b = raw_manifest(&s.addr, "team-b/busybox:latest");
    assert_eq!(raw_b, std::fs::read(blob_file(&layout, &want)).unwrap());
    // An explicit mount over HTTP: 201 with the blob's Location.
    let (st, hd, _) = http(
        &s.addr,
        "POST",
        &format!("/v2/team-c/busybox/blobs/uploads/?mount={layer}&from=team-a/busybox"),
        &[("Content-Length", "0")],
    )
    .unwrap();
    assert_eq!(st, 201);
    assert_eq!(
        header(&hd, "location"),
        Some(format!("/v2/team-c/busybox/blobs/{layer}").as_str())
    );
}

fn containerd_style_ns_pull_and_docker_mirror_default(b: Backend) {
    require_tool("skopeo", "skopeo");
    let s = serve_push(&b);
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "latest");
    push_fixture(&s, "latest", "docker.io/library/busybox:latest", false);
    let accept =
        "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";
    // containerd (hosts.toml mirror): ?ns=docker.io.
    let (st, h, body) = http(
        &s.addr,
        "GET",
        "/v2/library/busybox/manifests/latest?ns=docker.io",
        &[("Accept", accept)],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(header(&h, "docker-content-digest"), Some(want.as_str()));
    assert_eq!(body, std::fs::read(blob_file(&layout, &want)).unwrap());
    let manifest: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap();
    let (st, _, blob) = http(
        &s.addr,
        "GET",
        &format!("/v2/library/busybox/blobs/{layer}?ns=docker.io"),
        &[],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(blob, std::fs::read(blob_file(&layout, layer)).unwrap());
    // docker (registry-mirrors): no ns, the configured default namespace.
    let (st, h, _) = http(
        &s.addr,
        "HEAD",
        "/v2/library/busybox/manifests/latest",
        &[("Accept", accept)],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(header(&h, "docker-content-digest"), Some(want.as_str()));
    // skopeo through the same path with the ns parameter's result.
    let raw = raw_manifest(&s.addr, "library/busybox:latest");
    assert_eq!(raw, std::fs::read(blob_file(&layout, &want)).unwrap());
}

/// Pushes a file as an artifact with a subject using oras-py; prints the
/// manifest response's `Docker-Content-Digest`, then pulls it back into `out`.
const ORAS_SCRIPT: &str = r#"
import sys, oras.client, oras.oci
addr, repo, subject, size, path, out, chunked = sys.argv[1:8]
c = oras.client.OrasClient(hostname=addr, insecure=True)
r = c.push(
    target=f"{addr}/{repo}:sbom-{chunked}",
    files=[path + ":application/spdx+json"],
    manifest_config="none:application/vnd.example.sbom.v1+json",
    manifest_annotations={"org.example.kind": "sbom", "org.example.mode": chunked},
    subject=oras.oci.Subject(mediaType="application/vnd.oci.image.manifest.v1+json", digest=subject, size=int(size)),
    disable_path_validation=True,
    do_chunked=(chunked == "chunked"),
    chunk_size=1000,
    quiet=True,
)
assert r.status_code == 201, r.status_code
print(r.headers["Docker-Content-Digest"])
print(r.headers["OCI-Subject"])
files = c.pull(target=f"{addr}/{repo}:sbom-{chunked}", outdir=out)
print(files[0])
"#;

fn require_oras() {
    let ok = Command::new("python3")
        .args(["-c", "import oras.client"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "the oras Python package is required by this test: pip install oras==0.2.43"
    );
}

fn oras_pushes_an_artifact_with_a_subject_and_lists_referrers(b: Backend) {
    require_tool("skopeo", "skopeo");
    require_oras();
    let s = serve_push(&b);
    let layout = fixture_layout();
    let subject = layout_ref_digest(&layout, "latest");
    let size = std::fs::metadata(blob_file(&layout, &subject))
        .unwrap()
        .len();
    push_fixture(&s, "latest", "art/busybox:latest", false);
    let work = tempfile::tempdir().unwrap();
    let sbom = work.path().join("sbom.spdx.json");
    let content: String = (0..400).map(|i| format!("{{\"pkg\":{i}}}\n")).collect();
    std::fs::write(&sbom, &content).unwrap();
    let mut artifacts = Vec::new();
    for mode in ["monolithic", "chunked"] {
        let out = work.path().join(format!("out-{mode}"));
        let o = Command::new("python3")
            .args([
                "-c",
                ORAS_SCRIPT,
                &s.addr,
                "art/busybox",
                &subject,
                &size.to_string(),
                sbom.to_str().unwrap(),
                out.to_str().unwrap(),
                mode,
            ])
            .current_dir(work.path())
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "oras {mode}: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines[1], subject, "OCI-Subject");
        // Pulled back bit for bit (checked by sha256sum).
        let pulled = PathBuf::from(lines[2]);
        assert_eq!(sha256sum(&pulled), sha256sum(&sbom));
        // The artifact manifest as served hashes to the digest the push returned.
        let (st, _, body) = http(
            &s.addr,
            "GET",
            &format!("/v2/art/busybox/manifests/sbom-{mode}"),
            &[],
        )
        .unwrap();
        assert_eq!(st, 200);
        let file = work.path().join(format!("manifest-{mode}.json"));
        std::fs::write(&file, &body).unwrap();
        assert_eq!(sha256sum(&file), lines[0]);
        artifacts.push(lines[0].to_string());
    }
    // Both listed by the referrers API, with artifactType and annotations.
    let (st, h, body) = http(
        &s.addr,
        "GET",
        &format!("/v2/art/busybox/referrers/{subject}"),
        &[],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(
        header(&h, "content-type"),
        Some("application/vnd.oci.image.index.v1+json")
    );
    let index: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let list = index["manifests"].as_array().unwrap();
    assert_eq!(list.len(), 2, "{index}");
    for d in &artifacts {
        let e = list.iter().find(|e| e["digest"] == d.as_str()).unwrap();
        assert_eq!(e["artifactType"], "application/vnd.example.sbom.v1+json");
        assert_eq!(e["annotations"]["org.example.kind"], "sbom");
        assert_eq!(e["mediaType"], "application/vnd.oci.image.manifest.v1+json");
    }
    let (st, h, body) = http(
        &s.addr,
        "GET",
        &format!("/v2/art/busybox/referrers/{subject}?artifactType=application/vnd.example.sbom.v1%2Bjson"),
        &[],
    )
    .unwrap();
    assert_eq!(st, 200);
    assert_eq!(header(&h, "oci-filters-applied"), Some("artifactType"));
    let index: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(index["manifests"].as_array().unwrap().len(), 2);
}
