//! OCI distribution-spec v1.1 pull and content discovery, end to end through
//! the in-process router (`tower::ServiceExt::oneshot`), plus one test over a
//! real socket with `curl`.
//!
//! Content is put into the store with `store::put_bytes` and made
//! visible with `StateStore::commit`, on every blobstore backend (the
//! filesystem, moto and s3s-fs: tests/common/backend.rs); every digest the test expects is
//! computed here with `sha2` (and once with the `sha256sum` binary), never
//! taken from airlock.

use std::collections::BTreeSet;
use std::sync::Arc;

use airlock::names::{RepositoryName, Tag};
use airlock::server::{self, App};
use airlock::state::{ManifestInfo, Op, StateStore};
use airlock::store::{Blobstore, fs::FsStore, put_bytes};
use axum::Router;
use axum::http::StatusCode;

use crate::common;
use common::backend::{Backend, on_backends};
use common::images::sha256;
use common::router::{Reply, get, send};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";

on_backends!(
    async [fs, moto, s3s_fs]
    api_version_check,
    manifest_get_by_tag_and_by_digest_returns_stored_bytes,
    manifest_head_has_headers_and_no_body,
    manifest_accept_negotiation,
    manifest_unknown_and_name_unknown,
    invalid_names_references_and_digests_are_400,
    blob_get_streams_exact_bytes,
    blob_head_has_headers_and_no_body,
    blob_ranges,
    blob_not_linked_in_repository_is_unknown_even_if_stored,
    tags_list_and_paging,
    catalog_and_paging,
    write_methods_are_unsupported,
    read_only_upload_sessions_are_unknown_and_referrers_are_empty,
    state_committed_after_router_was_built_is_served,
    health_and_readiness,
    serves_over_tcp_to_curl,
);

fn repo(s: &str) -> RepositoryName {
    s.parse().unwrap()
}

fn tag(s: &str) -> Tag {
    s.parse().unwrap()
}

/// Deterministic pseudo-random bytes (larger than the 256 KiB stream buffer).
fn layer_bytes(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x2545_f491;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) as u8
        })
        .collect()
}

struct Fixture {
    dir: std::path::PathBuf,
    store: Arc<dyn Blobstore>,
    app: Arc<App>,
    router: Router,
    layer: Vec<u8>,
    config: Vec<u8>,
    manifest: Vec<u8>,
    docker_manifest: Vec<u8>,
    other_blob: Vec<u8>,
    /// Last: the S3 server outlives the store's clients.
    backend: Backend,
}

/// `library/busybox`: an OCI manifest (config + 600 000-byte layer) tagged
/// `1.36`, `1.36.1`, `Zed`, `glibc`, `latest`.
/// `stacks/bookworm`: a Docker v2 manifest tagged `latest`, plus a blob only
/// linked there. `a` and `zz/top`: one small blob each (catalog paging).
async fn fixture(backend: Backend) -> Fixture {
    let dir = backend.dir.path().to_path_buf();
    let store: Arc<dyn Blobstore> = backend.open_store().await;
    let layer = layer_bytes(600_000);
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#
            .to_vec();
    // Deliberately not canonical JSON: the exact bytes must come back.
    let manifest = format!(
        "{{\n  \"schemaVersion\": 2,\n  \"mediaType\": \"{OCI_MANIFEST}\",\n  \"config\": {{\"mediaType\": \"application/vnd.oci.image.config.v1+json\", \"digest\": \"{}\", \"size\": {}}},\n  \"layers\": [{{\"mediaType\": \"application/vnd.oci.image.layer.v1.tar+gzip\", \"digest\": \"{}\", \"size\": {}}}]\n}}\n",
        sha256(&config),
        config.len(),
        sha256(&layer),
        layer.len()
    )
    .into_bytes();
    let other_blob = b"only in stacks/bookworm".to_vec();
    let docker_manifest = format!(
        "{{\"schemaVersion\":2,\"mediaType\":\"{DOCKER_MANIFEST}\",\"config\":{{\"mediaType\":\"application/vnd.docker.container.image.v1+json\",\"digest\":\"{}\",\"size\":{}}},\"layers\":[]}}",
        sha256(&other_blob),
        other_blob.len()
    )
    .into_bytes();
    let small = b"small".to_vec();
    for b in [
        &layer,
        &config,
        &manifest,
        &docker_manifest,
        &other_blob,
        &small,
    ] {
        let d = put_bytes(&*store, b).await.unwrap();
        assert_eq!(d.to_string(), sha256(b));
    }
    let state = StateStore::new(store.clone());
    let d = |b: &[u8]| sha256(b).parse().unwrap();
    let ops = vec![
        Op::LinkBlobs {
            repo: repo("library/busybox"),
            blobs: vec![
                (d(&config), config.len() as u64),
                (d(&layer), layer.len() as u64),
            ],
        },
        Op::PutManifest {
            repo: repo("library/busybox"),
            digest: d(&manifest),
            info: ManifestInfo {
                media_type: OCI_MANIFEST.into(),
                size: manifest.len() as u64,
                subject: None,
                artifact_type: None,
            },
            tags: ["latest", "1.36", "1.36.1", "glibc", "Zed"]
                .map(tag)
                .to_vec(),
            guard: airlock::state::TagGuard::default(),
        },
        Op::LinkBlobs {
            repo: repo("stacks/bookworm"),
            blobs: vec![(d(&other_blob), other_blob.len() as u64)],
        },
        Op::PutManifest {
            repo: repo("stacks/bookworm"),
            digest: d(&docker_manifest),
            info: ManifestInfo {
                media_type: DOCKER_MANIFEST.into(),
                size: docker_manifest.len() as u64,
                subject: None,
                artifact_type: None,
            },
            tags: vec![tag("latest")],
            guard: airlock::state::TagGuard::default(),
        },
        Op::LinkBlobs {
            repo: repo("a"),
            blobs: vec![(d(&small), 5)],
        },
        Op::LinkBlobs {
            repo: repo("zz/top"),
            blobs: vec![(d(&small), 5)],
        },
    ];
    state.commit("test fixture", "test", &ops).await.unwrap();
    let app = Arc::new(App::new(state));
    let router = server::router(app.clone());
    Fixture {
        dir,
        store,
        app,
        router,
        layer,
        config,
        manifest,
        docker_manifest,
        other_blob,
        backend,
    }
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

async fn api_version_check(b: Backend) {
    let f = fixture(b).await;
    for uri in ["/v2/", "/v2"] {
        let r = get(&f.router, uri).await;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.body, b"{}");
        assert_eq!(
            r.header_names(),
            names(&[
                "content-type",
                "content-length",
                "docker-distribution-api-version"
            ])
        );
        assert_eq!(r.header("content-type"), "application/json");
        assert_eq!(r.header("content-length"), "2");
        assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
    }
}

async fn manifest_get_by_tag_and_by_digest_returns_stored_bytes(b: Backend) {
    let f = fixture(b).await;
    let digest = sha256(&f.manifest);
    for reference in ["latest", "1.36", digest.as_str()] {
        let r = get(
            &f.router,
            &format!("/v2/library/busybox/manifests/{reference}"),
        )
        .await;
        assert_eq!(r.status, StatusCode::OK, "{reference}");
        assert_eq!(r.body, f.manifest);
        assert_eq!(sha256(&r.body), digest);
        assert_eq!(
            r.header_names(),
            names(&[
                "content-type",
                "content-length",
                "docker-content-digest",
                "docker-distribution-api-version"
            ])
        );
        assert_eq!(r.header("content-type"), OCI_MANIFEST);
        assert_eq!(r.header("content-length"), f.manifest.len().to_string());
        assert_eq!(r.header("docker-content-digest"), digest);
        assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
    }
    let r = get(&f.router, "/v2/stacks/bookworm/manifests/latest").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.docker_manifest);
    assert_eq!(r.header("content-type"), DOCKER_MANIFEST);
    assert_eq!(
        r.header("docker-content-digest"),
        sha256(&f.docker_manifest)
    );
}

async fn manifest_head_has_headers_and_no_body(b: Backend) {
    let f = fixture(b).await;
    let r = send(
        &f.router,
        "HEAD",
        "/v2/library/busybox/manifests/latest",
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    assert_eq!(r.header("content-length"), f.manifest.len().to_string());
    assert_eq!(r.header("docker-content-digest"), sha256(&f.manifest));
    assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
    let r = send(&f.router, "HEAD", "/v2/library/busybox/manifests/nope", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.body.is_empty());
}

async fn manifest_accept_negotiation(b: Backend) {
    let f = fixture(b).await;
    let uri = "/v2/library/busybox/manifests/latest";
    for accept in [
        "*/*",
        OCI_MANIFEST,
        "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json; q=0.5",
        "application/vnd.docker.distribution.manifest.v2+json;q=0.9, */*;q=0.1",
    ] {
        let r = send(&f.router, "GET", uri, &[("accept", accept)]).await;
        assert_eq!(r.status, StatusCode::OK, "{accept}");
        assert_eq!(r.body, f.manifest);
        assert_eq!(r.header("content-type"), OCI_MANIFEST);
    }
    // Only other types: the stored bytes all the same, with their real type,
    // never converted and never hidden (an old client then fails with a
    // clear media-type error, not "not found").
    let docker_only = "application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";
    let r = send(&f.router, "GET", uri, &[("accept", docker_only)]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.manifest);
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    let r = send(&f.router, "HEAD", uri, &[("accept", DOCKER_MANIFEST)]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    assert_eq!(r.header("content-length"), f.manifest.len().to_string());
    // The Docker manifest is served to a Docker-only client.
    let r = send(
        &f.router,
        "GET",
        "/v2/stacks/bookworm/manifests/latest",
        &[("accept", DOCKER_MANIFEST)],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.docker_manifest);
}

async fn manifest_unknown_and_name_unknown(b: Backend) {
    let f = fixture(b).await;
    get(&f.router, "/v2/library/busybox/manifests/nope")
        .await
        .error(404, "MANIFEST_UNKNOWN");
    // A digest known in another repository is unknown here.
    let other = sha256(&f.docker_manifest);
    get(&f.router, &format!("/v2/library/busybox/manifests/{other}"))
        .await
        .error(404, "MANIFEST_UNKNOWN");
    // A layer is a blob, not a manifest.
    let layer = sha256(&f.layer);
    get(&f.router, &format!("/v2/library/busybox/manifests/{layer}"))
        .await
        .error(404, "MANIFEST_UNKNOWN");
    let r = get(&f.router, "/v2/library/nothing/manifests/latest").await;
    r.error(404, "NAME_UNKNOWN");
    assert_eq!(r.json()["errors"][0]["detail"]["name"], "library/nothing");
    get(&f.router, "/v2/library/nothing/tags/list")
        .await
        .error(404, "NAME_UNKNOWN");
    get(&f.router, &format!("/v2/library/nothing/blobs/{layer}"))
        .await
        .error(404, "NAME_UNKNOWN");
}

async fn invalid_names_references_and_digests_are_400(b: Backend) {
    let f = fixture(b).await;
    for uri in [
        "/v2/A/B/manifests/latest",
        "/v2/a//b/manifests/latest",
        "/v2/a//b/tags/list",
        "/v2/-a/blobs/sha256:0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        get(&f.router, uri).await.error(400, "NAME_INVALID");
    }
    let r = get(&f.router, "/v2/A/B/manifests/latest").await;
    assert_eq!(r.json()["errors"][0]["detail"]["name"], "A/B");
    for uri in [
        "/v2/library/busybox/manifests/-latest",
        "/v2/library/busybox/manifests/sha256:1234",
        "/v2/library/busybox/manifests/md5:d41d8cd98f00b204e9800998ecf8427e",
        "/v2/library/busybox/manifests/.INVALID_MANIFEST_NAME",
        &format!("/v2/library/busybox/manifests/{}", "a".repeat(129)),
    ] {
        // A reference that cannot exist is unknown on reads (the conformance
        // suite's expectation) and deletes; only PUT says TAG_INVALID.
        get(&f.router, uri).await.error(404, "MANIFEST_UNKNOWN");
        send(&f.router, "HEAD", uri, &[]).await.status(404);
    }
    for uri in [
        "/v2/library/busybox/blobs/latest",
        "/v2/library/busybox/blobs/sha256:1234",
        "/v2/library/busybox/blobs/sha256:..%2F..%2Fetc",
        "/v2/library/busybox/blobs/SHA256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    ] {
        get(&f.router, uri).await.error(400, "DIGEST_INVALID");
    }
    // Paths that match no endpoint still get an OCI error body.
    for uri in [
        "/v2/library/busybox",
        "/v2/library/busybox/manifests/",
        "/v2/x/manifests/a/b",
        "/v2/library/busybox/blobs/sha256:../../../../etc/passwd",
        "/v2/library/busybox/tags/list/x",
    ] {
        let r = get(&f.router, uri).await;
        r.error(404, "NAME_UNKNOWN");
        assert_eq!(r.header("content-type"), "application/json", "{uri}");
        assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
    }
}

fn assert_blob_headers(r: &Reply, digest: &str, length: usize) {
    let mut expected = names(&[
        "content-type",
        "content-length",
        "docker-content-digest",
        "accept-ranges",
        "etag",
        "cache-control",
        "docker-distribution-api-version",
    ]);
    if r.status == StatusCode::PARTIAL_CONTENT {
        expected.insert("content-range".into());
    }
    assert_eq!(r.header_names(), expected);
    assert_eq!(r.header("content-type"), "application/octet-stream");
    assert_eq!(r.header("content-length"), length.to_string());
    assert_eq!(r.header("docker-content-digest"), digest);
    assert_eq!(r.header("accept-ranges"), "bytes");
    assert_eq!(r.header("etag"), format!("\"{digest}\""));
    assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
}

async fn blob_get_streams_exact_bytes(b: Backend) {
    let f = fixture(b).await;
    let digest = sha256(&f.layer);
    let r = get(&f.router, &format!("/v2/library/busybox/blobs/{digest}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_blob_headers(&r, &digest, f.layer.len());
    assert_eq!(r.body, f.layer);
    assert_eq!(sha256(&r.body), digest);

    // Independently with the sha256sum binary.
    let path = f.dir.join("downloaded-layer");
    std::fs::write(&path, &r.body).unwrap();
    let out = match std::process::Command::new("sha256sum").arg(&path).output() {
        Ok(out) => out,
        Err(e) => panic!("cannot run sha256sum (Debian package `coreutils`): {e}"),
    };
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let hex = line.split_whitespace().next().unwrap();
    assert_eq!(format!("sha256:{hex}"), r.header("docker-content-digest"));

    // The config, and a manifest of the repository, are blobs too.
    let r = get(
        &f.router,
        &format!("/v2/library/busybox/blobs/{}", sha256(&f.config)),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.config);
    let r = get(
        &f.router,
        &format!("/v2/library/busybox/blobs/{}", sha256(&f.manifest)),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.manifest);
    assert_eq!(r.header("content-type"), "application/octet-stream");
}

async fn blob_head_has_headers_and_no_body(b: Backend) {
    let f = fixture(b).await;
    let digest = sha256(&f.layer);
    let uri = format!("/v2/library/busybox/blobs/{digest}");
    let r = send(&f.router, "HEAD", &uri, &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    assert_blob_headers(&r, &digest, f.layer.len());
    // HEAD ignores Range (RFC 9110 §14.2: range handling is defined for GET).
    let r = send(&f.router, "HEAD", &uri, &[("range", "bytes=0-0")]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    assert_eq!(r.header("content-length"), f.layer.len().to_string());
}

async fn blob_ranges(b: Backend) {
    let f = fixture(b).await;
    let digest = sha256(&f.layer);
    let uri = format!("/v2/library/busybox/blobs/{digest}");
    let size = f.layer.len();
    let cases: [(&str, usize, usize); 6] = [
        ("bytes=0-0", 0, 0),                        // first byte
        ("bytes=-100", size - 100, size - 1),       // suffix
        ("bytes=300000-", 300_000, size - 1),       // open end, crosses a buffer
        ("bytes=599990-700000", 599_990, size - 1), // end beyond size clamps
        ("bytes=10-262200", 10, 262_200),           // beyond one 256 KiB read
        ("bytes=-9999999", 0, size - 1),            // suffix longer than blob
    ];
    for (range, start, end) in cases {
        let r = send(&f.router, "GET", &uri, &[("range", range)]).await;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "{range}");
        assert_blob_headers(&r, &digest, end - start + 1);
        assert_eq!(
            r.header("content-range"),
            format!("bytes {start}-{end}/{size}"),
            "{range}"
        );
        assert_eq!(r.body, &f.layer[start..=end], "{range}");
    }
    for range in [
        "bytes=600000-",
        "bytes=700000-700001",
        "bytes=-0",
        "bytes=500-0",
        "bytes=5-1",
    ] {
        let r = send(&f.router, "GET", &uri, &[("range", range)]).await;
        assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
        assert_eq!(r.header("content-range"), format!("bytes */{size}"));
        assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
        // An OCI error body says why (RFC 9110 §15.5.17 allows one).
        let e: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(e["errors"][0]["code"], "SIZE_INVALID", "{range}");
    }
    for range in ["bytes=0-1,5-6", "bytes=x-", "lines=1-2"] {
        let r = send(&f.router, "GET", &uri, &[("range", range)]).await;
        assert_eq!(r.status, StatusCode::OK, "{range}");
        assert_blob_headers(&r, &digest, size);
        assert_eq!(r.body, f.layer, "{range}");
    }
    // If-Range with our ETag honours the range; with another validator it does not.
    let etag = format!("\"{digest}\"");
    let r = send(
        &f.router,
        "GET",
        &uri,
        &[("range", "bytes=1-2"), ("if-range", &etag)],
    )
    .await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.body, &f.layer[1..=2]);
    let r = send(
        &f.router,
        "GET",
        &uri,
        &[("range", "bytes=1-2"), ("if-range", "\"other\"")],
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body.len(), size);
}

async fn blob_not_linked_in_repository_is_unknown_even_if_stored(b: Backend) {
    let f = fixture(b).await;
    let other = sha256(&f.other_blob);
    assert!(
        f.store
            .stat(&format!("blobs/sha256/{}/{}", &other[7..9], &other[7..]))
            .await
            .unwrap()
            .is_some()
    );
    let r = get(&f.router, &format!("/v2/library/busybox/blobs/{other}")).await;
    r.error(404, "BLOB_UNKNOWN");
    assert_eq!(r.json()["errors"][0]["detail"]["digest"], other);
    let r = send(
        &f.router,
        "HEAD",
        &format!("/v2/library/busybox/blobs/{other}"),
        &[],
    )
    .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.body.is_empty());
    // Served where it is linked.
    let r = get(&f.router, &format!("/v2/stacks/bookworm/blobs/{other}")).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.other_blob);
    // Unknown everywhere.
    get(
        &f.router,
        &format!("/v2/library/busybox/blobs/{}", sha256(b"nothing")),
    )
    .await
    .error(404, "BLOB_UNKNOWN");
}

async fn tags_list_and_paging(b: Backend) {
    let f = fixture(b).await;
    let base = "/v2/library/busybox/tags/list";
    let r = get(&f.router, base).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.header_names(),
        names(&[
            "content-type",
            "content-length",
            "docker-distribution-api-version"
        ])
    );
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(
        r.body,
        br#"{"name":"library/busybox","tags":["1.36","1.36.1","Zed","glibc","latest"]}"#
    );
    let page = |q: &'static str| {
        let router = f.router.clone();
        async move { get(&router, &format!("{base}{q}")).await }
    };
    let r = page("?n=2").await;
    assert_eq!(r.json()["tags"], serde_json::json!(["1.36", "1.36.1"]));
    assert_eq!(
        r.header("link"),
        r#"</v2/library/busybox/tags/list?n=2&last=1.36.1>; rel="next""#
    );
    let r = page("?n=2&last=1.36.1").await;
    assert_eq!(r.json()["tags"], serde_json::json!(["Zed", "glibc"]));
    assert_eq!(
        r.header("link"),
        r#"</v2/library/busybox/tags/list?n=2&last=glibc>; rel="next""#
    );
    let r = page("?n=2&last=glibc").await;
    assert_eq!(r.json()["tags"], serde_json::json!(["latest"]));
    assert!(r.headers.get("link").is_none());
    let r = page("?n=0").await;
    assert_eq!(r.body, br#"{"name":"library/busybox","tags":[]}"#);
    assert!(r.headers.get("link").is_none());
    let r = page("?last=Zed").await;
    assert_eq!(r.json()["tags"], serde_json::json!(["glibc", "latest"]));
    assert!(r.headers.get("link").is_none());
    let r = page("?n=5").await;
    assert_eq!(r.json()["tags"].as_array().unwrap().len(), 5);
    assert!(r.headers.get("link").is_none());
    let r = page("?last=zzz").await;
    assert_eq!(r.json()["tags"], serde_json::json!([]));
    // n must be a non-negative decimal integer.
    for q in ["?n=-1", "?n=abc", "?n=1.5", "?n="] {
        page(q).await.error(400, "PAGINATION_NUMBER_INVALID");
    }
    get(&f.router, "/v2/_catalog?n=-1")
        .await
        .error(400, "PAGINATION_NUMBER_INVALID");
    // A repository with blobs but no tags lists none.
    let r = get(&f.router, "/v2/zz/top/tags/list").await;
    assert_eq!(r.body, br#"{"name":"zz/top","tags":[]}"#);
}

async fn catalog_and_paging(b: Backend) {
    let f = fixture(b).await;
    let r = get(&f.router, "/v2/_catalog").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(
        r.body,
        br#"{"repositories":["a","library/busybox","stacks/bookworm","zz/top"]}"#
    );
    assert!(r.headers.get("link").is_none());
    let r = get(&f.router, "/v2/_catalog?n=3").await;
    assert_eq!(
        r.json()["repositories"],
        serde_json::json!(["a", "library/busybox", "stacks/bookworm"])
    );
    assert_eq!(
        r.header("link"),
        r#"</v2/_catalog?n=3&last=stacks/bookworm>; rel="next""#
    );
    let r = get(&f.router, "/v2/_catalog?n=3&last=stacks/bookworm").await;
    assert_eq!(r.body, br#"{"repositories":["zz/top"]}"#);
    assert!(r.headers.get("link").is_none());
    let r = get(&f.router, "/v2/_catalog?n=0").await;
    assert_eq!(r.body, br#"{"repositories":[]}"#);
    assert!(r.headers.get("link").is_none());
    let r = get(&f.router, "/v2/_catalog?last=library%2Fbusybox").await;
    assert_eq!(
        r.json()["repositories"],
        serde_json::json!(["stacks/bookworm", "zz/top"])
    );
}

async fn write_methods_are_unsupported(b: Backend) {
    let f = fixture(b).await;
    let layer = sha256(&f.layer);
    let uris = [
        "/v2/".to_string(),
        "/v2/_catalog".to_string(),
        "/v2/library/busybox/manifests/latest".to_string(),
        format!("/v2/library/busybox/blobs/{layer}"),
        "/v2/library/busybox/blobs/uploads/".to_string(),
        "/v2/library/busybox/blobs/uploads/0b5bd0c4-5b5a-4b51-9a3a-3e6d1c2f7f00".to_string(),
        "/v2/library/busybox/tags/list".to_string(),
        "/v2/new/repo/manifests/v1".to_string(),
    ];
    for method in ["PUT", "POST", "PATCH", "DELETE"] {
        for uri in &uris {
            let r = send(&f.router, method, uri, &[]).await;
            r.error(405, "UNSUPPORTED");
            assert_eq!(r.header("allow"), "GET, HEAD", "{method} {uri}");
        }
    }
    // Nothing changed.
    let r = get(&f.router, "/v2/library/busybox/manifests/latest").await;
    assert_eq!(r.status, StatusCode::OK);
}

async fn read_only_upload_sessions_are_unknown_and_referrers_are_empty(b: Backend) {
    let f = fixture(b).await;
    get(&f.router, "/v2/library/busybox/blobs/uploads/abc")
        .await
        .error(404, "BLOB_UPLOAD_UNKNOWN");
    let r = get(
        &f.router,
        &format!("/v2/library/busybox/referrers/{}", sha256(&f.manifest)),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
    assert_eq!(
        r.header("content-type"),
        "application/vnd.oci.image.index.v1+json"
    );
    assert_eq!(
        r.json(),
        serde_json::json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []})
    );
}

async fn state_committed_after_router_was_built_is_served(b: Backend) {
    let f = fixture(b).await;
    let uri = "/v2/late/arrival/manifests/v1";
    get(&f.router, uri).await.error(404, "NAME_UNKNOWN");
    get(&f.router, "/v2/library/busybox/manifests/v2")
        .await
        .error(404, "MANIFEST_UNKNOWN");

    // Another StateStore on the same directory, as `airlock import` in another process.
    let other_process = StateStore::new(f.backend.open_store().await);
    let d = sha256(&f.manifest).parse().unwrap();
    let info = ManifestInfo {
        media_type: OCI_MANIFEST.into(),
        size: f.manifest.len() as u64,
        subject: None,
        artifact_type: None,
    };
    let ops = [
        Op::PutManifest {
            repo: repo("late/arrival"),
            digest: d,
            info: info.clone(),
            tags: vec![tag("v1")],
            guard: airlock::state::TagGuard::default(),
        },
        Op::PutManifest {
            repo: repo("library/busybox"),
            digest: sha256(&f.manifest).parse().unwrap(),
            info,
            tags: vec![tag("v2")],
            guard: airlock::state::TagGuard::default(),
        },
    ];
    other_process
        .commit("late import", "test", &ops)
        .await
        .unwrap();

    let r = get(&f.router, uri).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.manifest);
    let r = get(&f.router, "/v2/library/busybox/manifests/v2").await;
    assert_eq!(r.status, StatusCode::OK);
    let r = get(&f.router, "/v2/_catalog").await;
    assert!(
        r.json()["repositories"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!("late/arrival"))
    );
    // The blob of a late manifest is not linked to the new repository's layers.
    get(
        &f.router,
        &format!("/v2/late/arrival/blobs/{}", sha256(&f.layer)),
    )
    .await
    .error(404, "BLOB_UNKNOWN");
}

async fn health_and_readiness(b: Backend) {
    let f = fixture(b).await;
    let r = get(&f.router, "/healthz").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, b"ok");
    let r = get(&f.router, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, b"ok");
    assert!(r.headers.get("docker-distribution-api-version").is_none());
    // A root naming a document that is not there: not ready.
    let tmp = tempfile::tempdir().unwrap();
    let store = FsStore::open(tmp.path()).unwrap();
    let missing = sha256(b"no such state");
    assert!(store.swap_root(None, &missing).await.unwrap());
    let broken = server::router(Arc::new(App::new(StateStore::new(Arc::new(store)))));
    let r = get(&broken, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    // ... and the API answers 503 UNAVAILABLE with Retry-After (damage the
    // operator repairs), never a 404 that would read as "no such tag".
    let r = get(&broken, "/v2/library/busybox/tags/list").await;
    r.error(503, "UNAVAILABLE");
    assert_eq!(r.headers["retry-after"], "60");
    let reason = r.json()["errors"][0]["detail"]["reason"].to_string();
    assert!(reason.contains("fsck --repair"), "{reason}");
    let _ = &f.app;
}

async fn curl(args: &[&str]) -> (String, Vec<u8>) {
    let out = match tokio::process::Command::new("curl")
        .args(args)
        .output()
        .await
    {
        Ok(out) => out,
        Err(e) => panic!("cannot run curl (install the Debian package `curl`): {e}"),
    };
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.stdout,
    )
}

async fn serves_over_tcp_to_curl(b: Backend) {
    let f = fixture(b).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(server::serve_on(
        listener,
        f.app.clone(),
        server::Limits::default(),
        async {
            let _ = stopped.await;
        },
    ));
    let base = format!("http://{addr}");

    // Manifest: headers and exact bytes over a real connection.
    let manifest_url = format!("{base}/v2/library/busybox/manifests/latest");
    let (_, out) = curl(&["-sS", "-i", "--http1.1", &manifest_url]).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains(&format!("docker-content-digest: {}", sha256(&f.manifest))),
        "{head}"
    );
    assert!(
        head.contains(&format!("content-length: {}", f.manifest.len())),
        "{head}"
    );
    assert!(
        head.contains(&format!("content-type: {OCI_MANIFEST}")),
        "{head}"
    );
    assert_eq!(body.as_bytes(), &f.manifest[..]);

    // HEAD keeps Content-Length through hyper.
    let (_, out) = curl(&["-sS", "-I", &manifest_url]).await;
    let head = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(
        head.contains(&format!("content-length: {}", f.manifest.len())),
        "{head}"
    );

    // Blob: whole and one range, both verified independently.
    let blob_url = format!("{base}/v2/library/busybox/blobs/{}", sha256(&f.layer));
    let (_, out) = curl(&["-sS", "--fail", &blob_url]).await;
    assert_eq!(sha256(&out), sha256(&f.layer));
    let (_, out) = curl(&["-sS", "--fail", "-r", "1000-1999", &blob_url]).await;
    assert_eq!(out, &f.layer[1000..2000]);

    // Two requests on one keep-alive connection.
    let (stderr, out) = curl(&[
        "-sS",
        "-v",
        "--fail",
        &format!("{base}/healthz"),
        &format!("{base}/v2/"),
    ])
    .await;
    assert_eq!(out, b"ok{}");
    assert!(
        stderr.contains("Re-using existing connection") || stderr.contains("Reusing existing"),
        "{stderr}"
    );

    stop.send(()).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), server)
        .await
        .expect("server did not shut down")
        .unwrap()
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
}
