//! The vertical slice with a real client: bundle → import → `airlock serve`
//! on an ephemeral port → skopeo pulls it back, digests unchanged; on every
//! blobstore backend (the filesystem, moto and s3s-fs: tests/common/backend.rs).

use crate::common;

use std::path::PathBuf;

use common::backend::{Backend, on_backends};
use common::*;

on_backends!(
    [fs, moto, s3s_fs]
    skopeo_copy_keeps_every_digest,
    skopeo_copy_all_keeps_the_index,
    range_gets_follow_rfc_9110,
    a_new_import_is_served_without_restart,
);

struct Slice {
    _dir: tempfile::TempDir,
    dir: PathBuf,
    public: PathBuf,
    server: Server,
    /// Last: the S3 server outlives airlock's.
    backend: Backend,
}

fn slice(backend: Backend) -> Slice {
    require_tool("skopeo", "skopeo");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let layout = fixture_layout();
    let (_, public) = test_key();
    let config = write_config(
        &path,
        &layout,
        &[
            ("latest", "stacks/busybox", &["latest", "1.0"]),
            ("multi", "docker.io/library/multi", &["v1"]),
        ],
    );
    let bundle = path.join("b.tar");
    create_bundle(&config, &bundle, &[]);
    backend.import(&public, &bundle);
    let server = backend.serve(&[]);
    Slice {
        _dir: dir,
        dir: path,
        public,
        backend,
        server,
    }
}

fn skopeo_copy_keeps_every_digest(b: Backend) {
    let s = slice(b);
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "latest");
    let out = s.dir.join("pulled");
    let src = format!("docker://{}/stacks/busybox:latest", s.server.addr);
    let dst = format!("oci:{}:latest", out.display());
    skopeo(&["copy", "--src-tls-verify=false", &src, &dst]);
    let got = layout_ref_digest(&out, "latest");
    assert_eq!(got, want);
    // The pulled manifest's bytes hash (by sha256sum) to the source digest.
    assert_eq!(sha256sum(&blob_file(&out, &got)), want);
    // Every layer came back bit for bit.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_file(&out, &got)).unwrap()).unwrap();
    for l in manifest["layers"].as_array().unwrap() {
        let d = l["digest"].as_str().unwrap();
        assert_eq!(sha256sum(&blob_file(&out, d)), d);
        assert_eq!(sha256sum(&blob_file(&layout, d)), d);
    }
    // inspect --raw returns the stored bytes exactly.
    let raw = raw_manifest(&s.server.addr, "stacks/busybox:1.0");
    assert_eq!(raw, std::fs::read(blob_file(&layout, &want)).unwrap());
}

fn skopeo_copy_all_keeps_the_index(b: Backend) {
    let s = slice(b);
    let layout = fixture_layout();
    let want = layout_ref_digest(&layout, "multi");
    let out = s.dir.join("multi");
    let src = format!("docker://{}/docker.io/library/multi:v1", s.server.addr);
    skopeo(&[
        "copy",
        "--all",
        "--src-tls-verify=false",
        &src,
        &format!("oci:{}:multi", out.display()),
    ]);
    let got = layout_ref_digest(&out, "multi");
    assert_eq!(got, want);
    assert_eq!(sha256sum(&blob_file(&out, &got)), want);
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(blob_file(&out, &got)).unwrap()).unwrap();
    let children = index["manifests"].as_array().unwrap();
    assert_eq!(children.len(), 2);
    for c in children {
        let d = c["digest"].as_str().unwrap();
        assert_eq!(sha256sum(&blob_file(&out, d)), d);
    }
    // The arm64 child is pullable by digest on its own.
    let arm = children
        .iter()
        .find(|c| c["platform"]["architecture"] == "arm64")
        .unwrap()["digest"]
        .as_str()
        .unwrap();
    let raw = raw_manifest(&s.server.addr, &format!("docker.io/library/multi@{arm}"));
    assert_eq!(raw, std::fs::read(blob_file(&layout, arm)).unwrap());
}

fn range_gets_follow_rfc_9110(b: Backend) {
    let s = slice(b);
    let layout = fixture_layout();
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(blob_file(&layout, &layout_ref_digest(&layout, "latest"))).unwrap(),
    )
    .unwrap();
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let bytes = std::fs::read(blob_file(&layout, &layer)).unwrap();
    let size = bytes.len();
    let path = format!("/v2/stacks/busybox/blobs/{layer}");

    let (st, h, body) = http(&s.server.addr, "GET", &path, &[("Range", "bytes=0-99")]).unwrap();
    assert_eq!(st, 206);
    assert_eq!(body, &bytes[..100]);
    assert_eq!(
        header(&h, "content-range"),
        Some(format!("bytes 0-99/{size}").as_str())
    );
    let (st, _, body) = http(&s.server.addr, "GET", &path, &[("Range", "bytes=-10")]).unwrap();
    assert_eq!(st, 206);
    assert_eq!(body, &bytes[size - 10..]);
    let (st, h, _) = http(
        &s.server.addr,
        "GET",
        &path,
        &[("Range", &format!("bytes={size}-"))],
    )
    .unwrap();
    assert_eq!(st, 416);
    assert_eq!(
        header(&h, "content-range"),
        Some(format!("bytes */{size}").as_str())
    );
    let (st, h, body) = http(&s.server.addr, "GET", &path, &[]).unwrap();
    assert_eq!(st, 200);
    assert_eq!(header(&h, "docker-content-digest"), Some(layer.as_str()));
    assert_eq!(body, bytes);
}

fn a_new_import_is_served_without_restart(b: Backend) {
    let s = slice(b);
    let layout = fixture_layout();
    let (st, _, _) = http(&s.server.addr, "GET", "/v2/stacks/later/manifests/v2", &[]).unwrap();
    assert_eq!(st, 404);
    let config = write_config(&s.dir, &layout, &[("latest", "stacks/later", &["v2"])]);
    let bundle = s.dir.join("later.tar");
    create_bundle(&config, &bundle, &[]);
    s.backend.import(&s.public, &bundle);
    // On S3 the server notices another process's root within its refresh
    // interval (1 s by default); on the filesystem at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let accept = [("Accept", "application/vnd.oci.image.manifest.v1+json")];
    while http(
        &s.server.addr,
        "GET",
        "/v2/stacks/later/manifests/v2",
        &accept,
    )
    .unwrap()
    .0 != 200
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}: import not served",
            s.backend.kind
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let raw = raw_manifest(&s.server.addr, "stacks/later:v2");
    assert_eq!(
        raw,
        std::fs::read(blob_file(&layout, &layout_ref_digest(&layout, "latest"))).unwrap()
    );
    let (st, _, body) = http(&s.server.addr, "GET", "/v2/_catalog", &[]).unwrap();
    assert_eq!(st, 200);
    let cat: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        cat["repositories"],
        serde_json::json!(["docker.io/library/multi", "stacks/busybox", "stacks/later"])
    );
}
