//! Kept answers (`registry::kept`, issue 40): a repeated GET of a manifest
//! or a small blob is answered from what the registry kept, and what it
//! kept is never served once it may be stale: after another process's
//! commit, under a reloaded configuration, for a blob the store forgot (a
//! scrub re-verifying it and finding it damaged), for a `Range`. Each
//! scenario asserts that the kept answer was reused (`kept::reused`, the
//! requests run on the test's thread) before it changes what it rests on.

use std::sync::Arc;
use std::time::Duration;

use airlock::registry::RegistryConfig;
use airlock::registry::kept;
use airlock::server::{self, App};
use airlock::state::{ManifestInfo, Op, StateStore, TagGuard};
use airlock::store::{Blobstore, blob_key, put_bytes};
use axum::Router;
use axum::http::StatusCode;

use crate::common;
use common::backend::{Backend, on_backends};
use common::images::sha256;
use common::router::{Reply, get, send};

on_backends!(
    async [fs, moto]
    repeated_gets_are_answered_as_the_first,
    a_commit_by_another_process_is_served_after_the_refresh,
    a_blob_the_store_forgot_is_read_again,
    a_reloaded_configuration_is_applied,
);

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The root refresh of the fixture's state (as `--root-refresh-ms`).
const REFRESH: Duration = Duration::from_millis(100);

struct Fixture {
    app: Arc<App>,
    router: Router,
    store: Arc<dyn Blobstore>,
    /// A 4 KiB layer linked in `apps/web`.
    layer: Vec<u8>,
    /// `apps/web:v1`.
    v1: Vec<u8>,
    /// Another manifest of the same layer (stored, not tagged).
    v2: Vec<u8>,
    /// Last: the S3 server outlives the store's clients.
    backend: Backend,
}

fn manifest(config: &[u8], layer: &[u8], note: &str) -> Vec<u8> {
    format!(
        "{{\"schemaVersion\":2,\"mediaType\":\"{OCI_MANIFEST}\",\"config\":{{\"mediaType\":\"application/vnd.oci.image.config.v1+json\",\"digest\":\"{}\",\"size\":{}}},\"layers\":[{{\"mediaType\":\"application/vnd.oci.image.layer.v1.tar\",\"digest\":\"{}\",\"size\":{}}}],\"annotations\":{{\"note\":\"{note}\"}}}}",
        sha256(config),
        config.len(),
        sha256(layer),
        layer.len()
    )
    .into_bytes()
}

fn put_manifest(repo: &str, bytes: &[u8], tag: &str) -> Op {
    Op::PutManifest {
        repo: repo.parse().unwrap(),
        digest: sha256(bytes).parse().unwrap(),
        info: ManifestInfo {
            media_type: OCI_MANIFEST.into(),
            size: bytes.len() as u64,
            subject: None,
            artifact_type: None,
        },
        tags: vec![tag.parse().unwrap()],
        guard: TagGuard::default(),
    }
}

async fn fixture(backend: Backend) -> Fixture {
    let store: Arc<dyn Blobstore> = backend.open_store().await;
    let layer: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let config = br#"{"architecture":"amd64","os":"linux"}"#.to_vec();
    let (v1, v2) = (
        manifest(&config, &layer, "one"),
        manifest(&config, &layer, "two"),
    );
    for b in [&layer, &config, &v1, &v2] {
        assert_eq!(put_bytes(&*store, b).await.unwrap().to_string(), sha256(b));
    }
    let state = StateStore::new(store.clone()).with_root_refresh(REFRESH);
    let d = |b: &[u8]| sha256(b).parse().unwrap();
    let ops = vec![
        Op::LinkBlobs {
            repo: "apps/web".parse().unwrap(),
            blobs: vec![
                (d(&config), config.len() as u64),
                (d(&layer), layer.len() as u64),
            ],
        },
        put_manifest("apps/web", &v1, "v1"),
    ];
    state.commit("fixture", "test", &ops).await.unwrap();
    let app = Arc::new(App::new(state));
    let router = server::router(app.clone());
    Fixture {
        app,
        router,
        store,
        layer,
        v1,
        v2,
        backend,
    }
}

/// GETs `uri` `n` times, asserting every answer is the first's (status,
/// headers, body); returns it and how many of them were kept answers.
async fn get_n(router: &Router, uri: &str, n: usize) -> (Reply, u64) {
    let before = kept::reused();
    let first = get(router, uri).await;
    for _ in 1..n {
        let r = get(router, uri).await;
        assert_eq!(r.status, first.status, "{uri}");
        assert_eq!(r.headers, first.headers, "{uri}");
        assert_eq!(r.body, first.body, "{uri}");
    }
    (first, kept::reused() - before)
}

async fn repeated_gets_are_answered_as_the_first(b: Backend) {
    let f = fixture(b).await;
    let tag = "/v2/apps/web/manifests/v1";
    let (r, reused) = get_n(&f.router, tag, 4).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.v1);
    assert_eq!(r.header("docker-content-digest"), sha256(&f.v1));
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    assert_eq!(r.header("content-length"), f.v1.len().to_string());
    assert_eq!(r.header("docker-distribution-api-version"), "registry/2.0");
    assert_eq!(reused, 3, "the first GET keeps, the next three reuse");
    // A reused manifest answer is a pull, as the handler's is.
    assert!(f.app.pulls.pending() > 0);
    f.app.pulls.flush(&*f.store).await.unwrap();
    assert_eq!(f.app.pulls.pending(), 0);
    let (_, reused) = get_n(&f.router, tag, 1).await;
    assert_eq!(reused, 1);
    assert!(f.app.pulls.pending() > 0, "the kept answer noted its pull");

    let blob = format!("/v2/apps/web/blobs/{}", sha256(&f.layer));
    let (r, reused) = get_n(&f.router, &blob, 3).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.layer);
    assert_eq!(r.header("etag"), format!("\"{}\"", sha256(&f.layer)));
    assert_eq!(reused, 2);
    // A range is the handlers' (206), never the kept whole blob.
    let before = kept::reused();
    let r = send(&f.router, "GET", &blob, &[("range", "bytes=10-19")]).await;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.body, &f.layer[10..20]);
    assert_eq!(r.header("content-range"), "bytes 10-19/4096");
    // HEAD and a query string go to the handlers too.
    let r = send(&f.router, "HEAD", &blob, &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    assert_eq!(r.header("content-length"), "4096");
    let r = get(&f.router, &format!("{tag}?ns=example.com")).await;
    assert_eq!(r.body, f.v1);
    assert_eq!(kept::reused(), before);
    // Unknown content is never kept.
    let (r, reused) = get_n(&f.router, "/v2/apps/web/manifests/v9", 2).await;
    r.error(404, "MANIFEST_UNKNOWN");
    assert_eq!(reused, 0);
}

async fn a_commit_by_another_process_is_served_after_the_refresh(b: Backend) {
    let f = fixture(b).await;
    let tag = "/v2/apps/web/manifests/v1";
    let (r, reused) = get_n(&f.router, tag, 2).await;
    assert_eq!((r.body, reused), (f.v1.clone(), 1));
    // `airlock import` in another process: v1 now names the other manifest.
    let other = StateStore::new(f.backend.open_store().await);
    other
        .commit("retag", "test", &[put_manifest("apps/web", &f.v2, "v1")])
        .await
        .unwrap();
    tokio::time::sleep(REFRESH + Duration::from_millis(50)).await;
    let (r, reused) = get_n(&f.router, tag, 3).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.v2, "the new root's manifest, not the kept one");
    assert_eq!(r.header("docker-content-digest"), sha256(&f.v2));
    // The first GET after the refresh interval reads the new root (a
    // snapshot not yet fresh keeps nothing), the second keeps, the third
    // reuses.
    assert_eq!(reused, 1, "kept again under the new root");
}

async fn a_blob_the_store_forgot_is_read_again(b: Backend) {
    let f = fixture(b).await;
    let blob = format!("/v2/apps/web/blobs/{}", sha256(&f.layer));
    let (r, reused) = get_n(&f.router, &blob, 2).await;
    assert_eq!((r.body, reused), (f.layer.clone(), 1));
    // The layer's object is damaged in place of the store's (same key),
    // and a scrub forgets it as verified to read it again.
    let key = blob_key(&sha256(&f.layer).parse().unwrap());
    let mut damaged = f.layer.clone();
    damaged[100] ^= 0xff;
    let mut w = f.store.writer(&key).await.unwrap();
    w.write(damaged.into()).await.unwrap();
    w.commit().await.unwrap();
    f.store.forget_verified(&key);
    let before = kept::reused();
    let r = get(&f.router, &blob).await;
    assert_eq!(kept::reused(), before, "not the kept answer");
    r.error(404, "BLOB_UNKNOWN");
}

async fn a_reloaded_configuration_is_applied(b: Backend) {
    let f = fixture(b).await;
    // docker.io/apps/web:v1 is the other manifest.
    f.app
        .state
        .commit(
            "namespaced",
            "test",
            &[put_manifest("docker.io/apps/web", &f.v2, "v1")],
        )
        .await
        .unwrap();
    let tag = "/v2/apps/web/manifests/v1";
    let (r, reused) = get_n(&f.router, tag, 2).await;
    assert_eq!((r.body, reused), (f.v1.clone(), 1));
    // A reload sets a default mirror namespace: the same path now means
    // docker.io/apps/web.
    f.app.set_registry(RegistryConfig {
        mirror_namespace: Some("docker.io".into()),
        ..RegistryConfig::default()
    });
    let (r, reused) = get_n(&f.router, tag, 3).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.body, f.v2, "the namespaced manifest, not the kept one");
    assert_eq!(reused, 2, "a caller of every repository keeps and reuses");
}
