//! OCI distribution-spec v1.1 push, referrers, content management and mirror
//! namespaces through the in-process router (`tower::ServiceExt::oneshot`):
//! every endpoint's success and error paths with the spec's status, error
//! code and headers (`Location`, `Range`, `Docker-Upload-UUID`,
//! `Docker-Content-Digest`, `OCI-Subject`, `OCI-Filters-Applied`,
//! `Content-Length: 0`). Digests are computed here with `sha2`, never taken
//! from airlock. Every scenario runs on every blobstore backend (the
//! filesystem, moto and s3s-fs: tests/common/backend.rs).

use std::sync::Arc;
use std::time::Duration;

use airlock::registry::RegistryConfig;
use airlock::server::{self, App};
use airlock::state::StateStore;
use airlock::store::Blobstore;
use axum::Router;
use axum::http::StatusCode;

use crate::common;
use common::backend::{Backend, on_backends};
use common::images::{
    CONFIG, LAYER, OCI_INDEX, OCI_MANIFEST, bytes_of, image_manifest, image_parts, push_blob,
    push_image, put_manifest, sha256,
};
use common::router::{Reply, get, send, send_body};

const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

on_backends!(
    async [fs, moto, s3s_fs]
    monolithic_single_post_with_digest,
    post_then_put_monolithic,
    chunked_upload_follows_the_spec,
    streamed_patch_and_final_chunk_in_put,
    upload_error_paths,
    cross_repository_mount,
    manifest_put_stores_exact_bytes,
    manifest_put_error_paths,
    referrers_list_subjects,
    deletes_follow_the_spec,
    switches_off_answer_405,
    mirror_namespaces,
    parallel_pushes_to_one_tag_and_pulls,
    expired_sessions_are_refused_and_swept,
    repushed_manifest_keeps_its_first_media_type,
    manifest_content_type_is_case_insensitive_and_cannot_relabel,
    overflowing_content_range_is_refused,
    malformed_digest_message_says_invalid,
    ns_as_containerd_sends_it_never_fails_a_read,
    blob_pushes_make_no_generation_and_are_visible_at_once,
    upload_caps,
);

struct Fixture {
    store: Arc<dyn Blobstore>,
    router: Router,
    /// Last: the S3 server outlives the store's clients.
    _backend: Backend,
}

async fn fixture_with(backend: Backend, config: RegistryConfig) -> Fixture {
    let store = backend.open_store().await;
    let app = Arc::new(App::with_config(StateStore::new(store.clone()), config));
    Fixture {
        store,
        router: server::router(app),
        _backend: backend,
    }
}

async fn fixture(backend: Backend) -> Fixture {
    fixture_with(
        backend,
        RegistryConfig {
            allow_push: true,
            allow_delete: true,
            ..RegistryConfig::default()
        },
    )
    .await
}

async fn monolithic_single_post_with_digest(b: Backend) {
    let f = fixture(b).await;
    let blob = bytes_of(300_000, 7);
    let d = sha256(&blob);
    let r = send_body(
        &f.router,
        "POST",
        &format!("/v2/a/b/blobs/uploads/?digest={d}"),
        &[("content-type", "application/octet-stream")],
        blob.clone(),
    )
    .await;
    r.status(201);
    assert_eq!(r.header("location"), format!("/v2/a/b/blobs/{d}"));
    assert_eq!(r.header("docker-content-digest"), d);
    assert_eq!(r.header("content-length"), "0");
    let r = get(&f.router, &format!("/v2/a/b/blobs/{d}")).await;
    r.status(200);
    assert_eq!(r.body, blob);

    // A body that does not match its digest: 400 DIGEST_INVALID, nothing stored.
    let other = sha256(b"something else");
    send_body(
        &f.router,
        "POST",
        &format!("/v2/a/b/blobs/uploads/?digest={other}"),
        &[],
        blob.clone(),
    )
    .await
    .error(400, "DIGEST_INVALID");
    get(&f.router, &format!("/v2/a/b/blobs/{other}"))
        .await
        .error(404, "BLOB_UNKNOWN");
    let hex = other.strip_prefix("sha256:").unwrap();
    let key = format!("blobs/sha256/{}/{hex}", &hex[..2]);
    assert_eq!(f.store.stat(&key).await.unwrap(), None);
    send_body(
        &f.router,
        "POST",
        "/v2/a/b/blobs/uploads/?digest=sha256:nope",
        &[],
        blob,
    )
    .await
    .error(400, "DIGEST_INVALID");
}

async fn post_then_put_monolithic(b: Backend) {
    let f = fixture(b).await;
    let r = send_body(&f.router, "POST", "/v2/x/blobs/uploads/", &[], Vec::new()).await;
    r.status(202);
    let loc = r.header("location").to_string();
    let uuid = r.header("docker-upload-uuid").to_string();
    assert_eq!(loc, format!("/v2/x/blobs/uploads/{uuid}"));
    assert!(uuid::Uuid::parse_str(&uuid).is_ok());
    assert_eq!(r.header("range"), "0-0");
    assert_eq!(r.header("content-length"), "0");
    let blob = b"{}".to_vec();
    let d = sha256(&blob);
    let r = send_body(&f.router, "PUT", &format!("{loc}?digest={d}"), &[], blob).await;
    r.status(201);
    assert_eq!(r.header("location"), format!("/v2/x/blobs/{d}"));
    assert_eq!(r.header("docker-content-digest"), d);
    assert_eq!(r.header("content-length"), "0");
    // The session is gone.
    get(&f.router, &loc).await.error(404, "BLOB_UPLOAD_UNKNOWN");
    // Scratch objects are not blobs: nothing under blobs/ names the session.
    let keys = f.store.list("uploads/").await.unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

async fn chunked_upload_follows_the_spec(b: Backend) {
    let f = fixture(b).await;
    let blob = bytes_of(700_000, 3);
    let d = sha256(&blob);
    let (c1, c2) = blob.split_at(400_000);
    let r = send_body(
        &f.router,
        "POST",
        "/v2/c/blobs/uploads/",
        &[("content-length", "0")],
        Vec::new(),
    )
    .await;
    r.status(202);
    let loc = r.header("location").to_string();
    let uuid = r.header("docker-upload-uuid").to_string();
    let r2 = format!("400000-{}", blob.len() - 1);
    let patch = |range: String, body: Vec<u8>| {
        let loc = loc.clone();
        let router = f.router.clone();
        async move {
            send_body(
                &router,
                "PATCH",
                &loc,
                &[
                    ("content-type", "application/octet-stream"),
                    ("content-range", &range),
                    ("content-length", &body.len().to_string()),
                ],
                body,
            )
            .await
        }
    };
    // Out of order: 416, with where the session stands.
    let r = patch(r2.clone(), c2.to_vec()).await;
    r.error(416, "BLOB_UPLOAD_INVALID");
    assert_eq!(r.header("range"), "0-0");
    assert_eq!(r.header("location"), loc);
    // First chunk.
    let r = patch("0-399999".into(), c1.to_vec()).await;
    r.status(202);
    assert_eq!(r.header("range"), "0-399999");
    assert_eq!(r.header("location"), loc);
    assert_eq!(r.header("docker-upload-uuid"), uuid);
    assert_eq!(r.header("content-length"), "0");
    // Retrying it: 416; the session survives.
    patch("0-399999".into(), c1.to_vec())
        .await
        .error(416, "BLOB_UPLOAD_INVALID");
    let r = get(&f.router, &loc).await;
    r.status(204);
    assert_eq!(r.header("range"), "0-399999");
    assert_eq!(r.header("location"), loc);
    assert_eq!(r.header("docker-upload-uuid"), uuid);
    assert!(r.body.is_empty());
    // Second chunk, then close with an empty PUT.
    let r = patch(r2, c2.to_vec()).await;
    r.status(202);
    assert_eq!(r.header("range"), format!("0-{}", blob.len() - 1));
    let r = send_body(
        &f.router,
        "PUT",
        &format!("{loc}?digest={d}"),
        &[("content-length", "0")],
        Vec::new(),
    )
    .await;
    r.status(201);
    assert_eq!(r.header("docker-content-digest"), d);
    let r = get(&f.router, &format!("/v2/c/blobs/{d}")).await;
    assert_eq!(r.body, blob);
}

async fn streamed_patch_and_final_chunk_in_put(b: Backend) {
    let f = fixture(b).await;
    let blob = bytes_of(100_000, 11);
    let d = sha256(&blob);
    let r = send_body(&f.router, "POST", "/v2/s/blobs/uploads/", &[], Vec::new()).await;
    let loc = r.header("location").to_string();
    // PATCH without Content-Range appends (docker, containerd, skopeo).
    let r = send_body(&f.router, "PATCH", &loc, &[], blob[..60_000].to_vec()).await;
    r.status(202);
    assert_eq!(r.header("range"), "0-59999");
    let r = send_body(&f.router, "PATCH", &loc, &[], blob[60_000..90_000].to_vec()).await;
    assert_eq!(r.header("range"), "0-89999");
    // The last chunk rides on the PUT, with its range.
    let r = send_body(
        &f.router,
        "PUT",
        &format!("{loc}?digest={d}"),
        &[("content-range", "90000-99999")],
        blob[90_000..].to_vec(),
    )
    .await;
    r.status(201);
    assert_eq!(get(&f.router, &format!("/v2/s/blobs/{d}")).await.body, blob);
}

async fn upload_error_paths(b: Backend) {
    let f = fixture(b).await;
    let new_session = || async {
        let r = send_body(&f.router, "POST", "/v2/e/blobs/uploads/", &[], Vec::new()).await;
        r.header("location").to_string()
    };
    let loc = new_session().await;
    // PUT without digest, with a malformed one.
    send_body(&f.router, "PUT", &loc, &[], Vec::new())
        .await
        .error(400, "DIGEST_INVALID");
    send_body(
        &f.router,
        "PUT",
        &format!("{loc}?digest=md5:x"),
        &[],
        Vec::new(),
    )
    .await
    .error(400, "DIGEST_INVALID");
    // Malformed Content-Range; announced length differs from the body.
    send_body(
        &f.router,
        "PATCH",
        &loc,
        &[("content-range", "a-b")],
        b"xy".to_vec(),
    )
    .await
    .error(400, "BLOB_UPLOAD_INVALID");
    send_body(
        &f.router,
        "PATCH",
        &loc,
        &[("content-range", "0-9")],
        b"xy".to_vec(),
    )
    .await
    .error(400, "SIZE_INVALID");
    // Nothing was appended by the failures.
    assert_eq!(get(&f.router, &loc).await.header("range"), "0-0");
    // Wrong digest: 400, nothing stored, session gone.
    send_body(&f.router, "PATCH", &loc, &[], b"hello".to_vec())
        .await
        .status(202);
    let wrong = sha256(b"not hello");
    send_body(
        &f.router,
        "PUT",
        &format!("{loc}?digest={wrong}"),
        &[],
        Vec::new(),
    )
    .await
    .error(400, "DIGEST_INVALID");
    get(&f.router, &loc).await.error(404, "BLOB_UPLOAD_UNKNOWN");
    get(&f.router, &format!("/v2/e/blobs/{wrong}"))
        .await
        .error(404, "NAME_UNKNOWN");
    assert!(f.store.list("blobs/").await.unwrap().is_empty());
    // Unknown, malformed and foreign sessions.
    let unknown = "/v2/e/blobs/uploads/3f1c0c3e-9f5e-4a53-8f8e-0c6d2c1e9b11";
    for m in ["GET", "PATCH", "PUT", "DELETE"] {
        send_body(
            &f.router,
            m,
            &format!("{unknown}?digest={wrong}"),
            &[],
            Vec::new(),
        )
        .await
        .error(404, "BLOB_UPLOAD_UNKNOWN");
        send_body(&f.router, m, "/v2/e/blobs/uploads/..%2Fx", &[], Vec::new())
            .await
            .error(404, "BLOB_UPLOAD_UNKNOWN");
    }
    let loc = new_session().await;
    let foreign = loc.replace("/v2/e/", "/v2/other/");
    get(&f.router, &foreign)
        .await
        .error(404, "BLOB_UPLOAD_UNKNOWN");
    // Cancel: 204, then unknown.
    let r = send_body(&f.router, "DELETE", &loc, &[], Vec::new()).await;
    r.status(204);
    assert!(r.body.is_empty());
    get(&f.router, &loc).await.error(404, "BLOB_UPLOAD_UNKNOWN");
    send_body(&f.router, "DELETE", &loc, &[], Vec::new())
        .await
        .error(404, "BLOB_UPLOAD_UNKNOWN");
    assert!(f.store.list("uploads/").await.unwrap().is_empty());
    // Methods an upload endpoint does not serve.
    let r = send_body(&f.router, "PUT", "/v2/e/blobs/uploads/", &[], Vec::new()).await;
    r.error(405, "UNSUPPORTED");
    assert_eq!(r.header("allow"), "GET, HEAD, POST");
}

async fn cross_repository_mount(b: Backend) {
    let f = fixture(b).await;
    let blob = bytes_of(5000, 5);
    let d = push_blob(&f.router, "src/repo", &blob).await;
    get(&f.router, &format!("/v2/dst/blobs/{d}"))
        .await
        .error(404, "NAME_UNKNOWN");
    let r = send_body(
        &f.router,
        "POST",
        &format!("/v2/dst/blobs/uploads/?mount={d}&from=src/repo"),
        &[],
        Vec::new(),
    )
    .await;
    r.status(201);
    assert_eq!(r.header("location"), format!("/v2/dst/blobs/{d}"));
    assert_eq!(r.header("docker-content-digest"), d);
    assert_eq!(
        get(&f.router, &format!("/v2/dst/blobs/{d}")).await.body,
        blob
    );
    // Not linked in `from`, no `from`, bad `from`: a normal session (202).
    let absent = sha256(b"absent");
    for q in [
        format!("mount={absent}&from=src/repo"),
        format!("mount={d}"),
        format!("mount={d}&from=Not_A_Repo"),
        format!("mount={d}&from=third"),
        "mount=sha256:bad&from=src/repo".to_string(),
    ] {
        let r = send_body(
            &f.router,
            "POST",
            &format!("/v2/other/blobs/uploads/?{q}"),
            &[],
            Vec::new(),
        )
        .await;
        r.status(202);
        assert!(r.header("location").starts_with("/v2/other/blobs/uploads/"));
    }
    get(&f.router, &format!("/v2/other/blobs/{d}"))
        .await
        .error(404, "NAME_UNKNOWN");
}

async fn manifest_put_stores_exact_bytes(b: Backend) {
    let f = fixture(b).await;
    let (m, d) = push_image(&f.router, "img", "v1", 1).await;
    let r = get(&f.router, "/v2/img/manifests/v1").await;
    r.status(200);
    assert_eq!(r.body, m);
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    assert_eq!(r.header("docker-content-digest"), d);
    // PUT by digest, response headers.
    let r = put_manifest(&f.router, "img", &d, OCI_MANIFEST, &m).await;
    r.status(201);
    assert_eq!(r.header("location"), format!("/v2/img/manifests/{d}"));
    assert_eq!(r.header("docker-content-digest"), d);
    assert_eq!(r.header("content-length"), "0");
    assert!(r.headers.get("oci-subject").is_none());
    // Content-Type with parameters is stored without them.
    let r = put_manifest(
        &f.router,
        "img",
        "v2",
        "application/vnd.oci.image.manifest.v1+json; charset=utf-8",
        &m,
    )
    .await;
    r.status(201);
    let r = send_body(&f.router, "HEAD", "/v2/img/manifests/v2", &[], Vec::new()).await;
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    assert_eq!(r.header("content-length"), m.len().to_string());

    // Index over it, and a Docker manifest list over it.
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": d, "size": m.len(),
                       "platform": {"architecture": "amd64", "os": "linux"}}]
    }))
    .unwrap();
    put_manifest(&f.router, "img", "multi", OCI_INDEX, &index)
        .await
        .status(201);
    let list = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": DOCKER_LIST,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": d, "size": m.len()}]
    }))
    .unwrap();
    put_manifest(&f.router, "img", "list", DOCKER_LIST, &list)
        .await
        .status(201);
    let r = get(&f.router, "/v2/img/manifests/list").await;
    assert_eq!(r.header("content-type"), DOCKER_LIST);
    assert_eq!(r.body, list);

    // Docker schema 2 image manifest.
    let config = b"{\"os\":\"linux\"}".to_vec();
    push_blob(&f.router, "img", &config).await;
    let dm = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": sha256(&config), "size": config.len()},
        "layers": []
    }))
    .unwrap();
    put_manifest(&f.router, "img", "docker", DOCKER_MANIFEST, &dm)
        .await
        .status(201);
    // Served as stored, never converted, whatever the Accept header says.
    let r = get_with_accept(&f.router, "/v2/img/manifests/docker", OCI_MANIFEST).await;
    r.status(200);
    assert_eq!(r.body, dm);
    assert_eq!(r.header("content-type"), DOCKER_MANIFEST);
    let r = get_with_accept(&f.router, "/v2/img/manifests/docker", DOCKER_MANIFEST).await;
    assert_eq!(r.body, dm);
    assert_eq!(r.header("docker-content-digest"), sha256(&dm));

    // Any other media type is kept as given.
    let helm = b"{\"anything\": true}".to_vec();
    put_manifest(
        &f.router,
        "img",
        "other",
        "application/vnd.example.thing.v1+json",
        &helm,
    )
    .await
    .status(201);
    let r = get(&f.router, "/v2/img/manifests/other").await;
    assert_eq!(
        r.header("content-type"),
        "application/vnd.example.thing.v1+json"
    );
    assert_eq!(r.body, helm);
}

async fn get_with_accept(router: &Router, uri: &str, accept: &str) -> Reply {
    send_body(router, "GET", uri, &[("accept", accept)], Vec::new()).await
}

async fn manifest_put_error_paths(b: Backend) {
    let f = fixture(b).await;
    let (m, d) = push_image(&f.router, "img", "v1", 2).await;

    // Digest reference that is not the body's digest.
    let other = sha256(b"other");
    put_manifest(&f.router, "img", &other, OCI_MANIFEST, &m)
        .await
        .error(400, "DIGEST_INVALID");
    // A layer that is not in the repository (or only in another one).
    let missing = bytes_of(10, 99);
    let config = br#"{"seed":2}"#.to_vec();
    push_blob(&f.router, "elsewhere", &missing).await;
    let root = root_of(&f).await.unwrap();
    let bad = image_manifest(&config, &[&missing]);
    put_manifest(&f.router, "img", "bad", OCI_MANIFEST, &bad)
        .await
        .error(400, "MANIFEST_BLOB_UNKNOWN");
    // An index whose child is unknown.
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": other, "size": 5}]
    }))
    .unwrap();
    put_manifest(&f.router, "img", "idx", OCI_INDEX, &index)
        .await
        .error(400, "MANIFEST_BLOB_UNKNOWN");
    // Not JSON, wrong schemaVersion, mediaType differing from Content-Type, no config.
    for (ct, body) in [
        (OCI_MANIFEST, b"not json".to_vec()),
        (OCI_MANIFEST, br#"{"schemaVersion":1}"#.to_vec()),
        (OCI_INDEX, m.clone()),
        (OCI_MANIFEST, br#"{"schemaVersion":2,"layers":[]}"#.to_vec()),
    ] {
        put_manifest(&f.router, "img", "bad", ct, &body)
            .await
            .error(400, "MANIFEST_INVALID");
    }
    // Over 4 MiB: 413.
    let mut huge = m.clone();
    huge.resize(4 * 1024 * 1024 + 1, b' ');
    let r = put_manifest(&f.router, "img", "huge", OCI_MANIFEST, &huge).await;
    r.error(413, "SIZE_INVALID");
    // Bad references.
    put_manifest(&f.router, "img", "-bad", OCI_MANIFEST, &m)
        .await
        .error(400, "TAG_INVALID");
    put_manifest(&f.router, "Bad", "v1", OCI_MANIFEST, &m)
        .await
        .error(400, "NAME_INVALID");
    // None of it changed the state.
    assert_eq!(root_of(&f).await.unwrap(), root);
    get(&f.router, "/v2/img/manifests/bad")
        .await
        .error(404, "MANIFEST_UNKNOWN");
    assert_eq!(
        get(&f.router, &format!("/v2/img/manifests/{d}")).await.body,
        m
    );
}

async fn referrers_list_subjects(b: Backend) {
    let f = fixture(b).await;
    let (m, d) = push_image(&f.router, "app", "v1", 3).await;
    let empty = b"{}".to_vec();
    push_blob(&f.router, "app", &empty).await;
    let sbom = b"sbom contents".to_vec();
    push_blob(&f.router, "app", &sbom).await;
    let artifact = |at: &str, subject: &str, size: usize, note: &str| {
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": at,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": sha256(&empty), "size": 2},
            "layers": [{"mediaType": "application/spdx+json", "digest": sha256(&sbom), "size": sbom.len()}],
            "subject": {"mediaType": OCI_MANIFEST, "digest": subject, "size": size},
            "annotations": {"org.example.note": note}
        }))
        .unwrap()
    };
    let a1 = artifact("application/spdx+json", &d, m.len(), "sbom");
    let a2 = artifact(
        "application/vnd.dev.cosign.simplesigning.v1+json",
        &d,
        m.len(),
        "sig",
    );
    for a in [&a1, &a2] {
        let r = put_manifest(&f.router, "app", &sha256(a), OCI_MANIFEST, a).await;
        r.status(201);
        assert_eq!(r.header("oci-subject"), d);
    }
    let r = get(&f.router, &format!("/v2/app/referrers/{d}")).await;
    r.status(200);
    assert_eq!(r.header("content-type"), OCI_INDEX);
    assert!(r.headers.get("oci-filters-applied").is_none());
    let v = r.json();
    assert_eq!(v["schemaVersion"], 2);
    assert_eq!(v["mediaType"], OCI_INDEX);
    let list = v["manifests"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    let sbom_desc = list.iter().find(|x| x["digest"] == sha256(&a1)).unwrap();
    assert_eq!(
        sbom_desc,
        &serde_json::json!({"mediaType": OCI_MANIFEST, "digest": sha256(&a1), "size": a1.len(),
            "artifactType": "application/spdx+json", "annotations": {"org.example.note": "sbom"}})
    );
    // Filter.
    let r = get(
        &f.router,
        &format!("/v2/app/referrers/{d}?artifactType=application/spdx%2Bjson"),
    )
    .await;
    r.status(200);
    assert_eq!(r.header("oci-filters-applied"), "artifactType");
    let list = r.json()["manifests"].as_array().unwrap().clone();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["digest"], sha256(&a1));
    let r = get(
        &f.router,
        &format!("/v2/app/referrers/{d}?artifactType=x/y"),
    )
    .await;
    assert_eq!(r.header("oci-filters-applied"), "artifactType");
    assert_eq!(r.json()["manifests"], serde_json::json!([]));
    // A subject that does not exist (yet): accepted, listed.
    let ghost = sha256(b"ghost");
    let a3 = artifact("application/x-note", &ghost, 10, "dangling");
    let r = put_manifest(&f.router, "app", "note", OCI_MANIFEST, &a3).await;
    r.status(201);
    assert_eq!(r.header("oci-subject"), ghost);
    let r = get(&f.router, &format!("/v2/app/referrers/{ghost}")).await;
    assert_eq!(r.json()["manifests"][0]["digest"], sha256(&a3));
    // Unknown repository: an empty index, never 404. Bad digest: 400.
    let r = get(&f.router, &format!("/v2/nowhere/referrers/{d}")).await;
    r.status(200);
    assert_eq!(r.json()["manifests"], serde_json::json!([]));
    get(&f.router, "/v2/app/referrers/sha256:123")
        .await
        .error(400, "DIGEST_INVALID");
}

async fn deletes_follow_the_spec(b: Backend) {
    let f = fixture(b).await;
    let (m, d) = push_image(&f.router, "del", "v1", 4).await;
    put_manifest(&f.router, "del", "v2", OCI_MANIFEST, &m)
        .await
        .status(201);
    // Tag: 202, the manifest stays.
    let r = send_body(&f.router, "DELETE", "/v2/del/manifests/v1", &[], Vec::new()).await;
    r.status(202);
    assert_eq!(r.header("content-length"), "0");
    get(&f.router, "/v2/del/manifests/v1")
        .await
        .error(404, "MANIFEST_UNKNOWN");
    get(&f.router, "/v2/del/manifests/v2").await.status(200);
    send_body(&f.router, "DELETE", "/v2/del/manifests/v1", &[], Vec::new())
        .await
        .error(404, "MANIFEST_UNKNOWN");
    // Digest: 202, its tags go too.
    send_body(
        &f.router,
        "DELETE",
        &format!("/v2/del/manifests/{d}"),
        &[],
        Vec::new(),
    )
    .await
    .status(202);
    get(&f.router, &format!("/v2/del/manifests/{d}"))
        .await
        .error(404, "MANIFEST_UNKNOWN");
    get(&f.router, "/v2/del/manifests/v2")
        .await
        .error(404, "MANIFEST_UNKNOWN");
    send_body(
        &f.router,
        "DELETE",
        &format!("/v2/del/manifests/{d}"),
        &[],
        Vec::new(),
    )
    .await
    .error(404, "MANIFEST_UNKNOWN");
    // Blob: 202, then 404.
    let layer = bytes_of(3000, 4);
    let ld = sha256(&layer);
    send_body(
        &f.router,
        "DELETE",
        &format!("/v2/del/blobs/{ld}"),
        &[],
        Vec::new(),
    )
    .await
    .status(202);
    get(&f.router, &format!("/v2/del/blobs/{ld}"))
        .await
        .error(404, "BLOB_UNKNOWN");
    send_body(
        &f.router,
        "DELETE",
        &format!("/v2/del/blobs/{ld}"),
        &[],
        Vec::new(),
    )
    .await
    .error(404, "BLOB_UNKNOWN");
    send_body(
        &f.router,
        "DELETE",
        &format!("/v2/nope/blobs/{ld}"),
        &[],
        Vec::new(),
    )
    .await
    .error(404, "NAME_UNKNOWN");
    send_body(
        &f.router,
        "DELETE",
        "/v2/nope/manifests/v1",
        &[],
        Vec::new(),
    )
    .await
    .error(404, "NAME_UNKNOWN");
    send_body(
        &f.router,
        "DELETE",
        "/v2/del/blobs/sha256:1",
        &[],
        Vec::new(),
    )
    .await
    .error(400, "DIGEST_INVALID");
}

async fn switches_off_answer_405(b: Backend) {
    let kind = b.kind;
    let push_only = fixture_with(
        b,
        RegistryConfig {
            allow_push: true,
            ..RegistryConfig::default()
        },
    )
    .await;
    let (_, d) = push_image(&push_only.router, "p", "v1", 5).await;
    for uri in [
        "/v2/p/manifests/v1".to_string(),
        format!("/v2/p/manifests/{d}"),
    ] {
        let r = send_body(&push_only.router, "DELETE", &uri, &[], Vec::new()).await;
        r.error(405, "UNSUPPORTED");
        assert_eq!(r.header("allow"), "GET, HEAD, PUT");
    }
    let r = send_body(
        &push_only.router,
        "DELETE",
        &format!("/v2/p/blobs/{d}"),
        &[],
        Vec::new(),
    )
    .await;
    r.error(405, "UNSUPPORTED");
    assert_eq!(r.header("allow"), "GET, HEAD");
    get(&push_only.router, "/v2/p/manifests/v1")
        .await
        .status(200);

    let read_only = fixture_with(
        Backend::start(kind),
        RegistryConfig {
            allow_delete: true,
            ..RegistryConfig::default()
        },
    )
    .await;
    let r = send_body(
        &read_only.router,
        "POST",
        "/v2/p/blobs/uploads/",
        &[],
        Vec::new(),
    )
    .await;
    r.error(405, "UNSUPPORTED");
    assert_eq!(r.header("allow"), "GET, HEAD");
    let r = put_manifest(&read_only.router, "p", "v1", OCI_MANIFEST, b"{}").await;
    r.error(405, "UNSUPPORTED");
    assert_eq!(r.header("allow"), "GET, HEAD, DELETE");
}

async fn mirror_namespaces(b: Backend) {
    let kind = b.kind;
    let f = fixture_with(
        b,
        RegistryConfig {
            allow_push: true,
            mirror_namespace: Some("docker.io".into()),
            ..RegistryConfig::default()
        },
    )
    .await;
    // A push with ns= lands in docker.io/library/busybox.
    let config = b"{\"ns\":true}".to_vec();
    let r = send_body(
        &f.router,
        "POST",
        &format!(
            "/v2/library/busybox/blobs/uploads/?ns=docker.io&digest={}",
            sha256(&config)
        ),
        &[],
        config.clone(),
    )
    .await;
    r.status(201);
    assert_eq!(
        r.header("location"),
        format!("/v2/docker.io/library/busybox/blobs/{}", sha256(&config))
    );
    let m = image_manifest(&config, &[]);
    put_manifest(
        &f.router,
        "docker.io/library/busybox",
        "latest",
        OCI_MANIFEST,
        &m,
    )
    .await
    .status(201);
    // containerd: ?ns=docker.io.
    let r = get(
        &f.router,
        "/v2/library/busybox/manifests/latest?ns=docker.io",
    )
    .await;
    r.status(200);
    assert_eq!(r.body, m);
    let r = get(
        &f.router,
        &format!("/v2/library/busybox/blobs/{}?ns=docker.io", sha256(&config)),
    )
    .await;
    assert_eq!(r.body, config);
    // docker registry-mirrors: no ns, the default namespace.
    assert_eq!(
        get(&f.router, "/v2/library/busybox/manifests/latest")
            .await
            .body,
        m
    );
    // The full name still works; another ns does not find it.
    get(&f.router, "/v2/docker.io/library/busybox/manifests/latest")
        .await
        .status(200);
    // An ns whose repository does not exist is answered as without ns,
    // and a request that names an ns never falls back to the default
    // namespace (docker.io/library/busybox is another registry's image):
    // library/busybox itself does not exist, 404, never 400.
    for ns in ["quay.io", "localhost:5000", "[::1]:5000"] {
        let r = get(
            &f.router,
            &format!("/v2/library/busybox/manifests/latest?ns={ns}"),
        )
        .await;
        r.error(404, "NAME_UNKNOWN");
        assert!(r.headers.get("oci-namespace").is_none(), "{ns}");
    }
    // A mount's from= is resolved as a read of that name is (field report:
    // HEAD of library/busybox's blob answered 200 through the default
    // namespace while a mount from library/busybox opened a session).
    let blob_uri = format!("/v2/library/busybox/blobs/{}", sha256(&config));
    send(&f.router, "HEAD", &blob_uri, &[]).await.status(200);
    for (query, target) in [
        ("from=library/busybox", "mnt/test"),
        ("from=docker.io/library/busybox", "mnt/test"),
        // With ns= the write goes to the namespace too.
        ("from=library/busybox&ns=docker.io", "docker.io/mnt/test"),
    ] {
        let r = send_body(
            &f.router,
            "POST",
            &format!(
                "/v2/mnt/test/blobs/uploads/?mount={}&{query}",
                sha256(&config)
            ),
            &[],
            Vec::new(),
        )
        .await;
        r.status(201);
        assert_eq!(
            r.header("location"),
            format!("/v2/{target}/blobs/{}", sha256(&config)),
            "{query}"
        );
    }
    get(
        &f.router,
        &format!("/v2/mnt/test/blobs/{}", sha256(&config)),
    )
    .await
    .status(200);
    // A from= that names another registry's namespace is not found there:
    // a session opens instead (202), as for any unknown blob.
    send_body(
        &f.router,
        "POST",
        &format!(
            "/v2/mnt/other/blobs/uploads/?mount={}&from=library/busybox&ns=quay.io",
            sha256(&config)
        ),
        &[],
        Vec::new(),
    )
    .await
    .status(202);
    // Without a default namespace, no fallback.
    let plain = fixture_with(Backend::start(kind), RegistryConfig::default()).await;
    get(&plain.router, "/v2/library/busybox/manifests/latest")
        .await
        .error(404, "NAME_UNKNOWN");
}

async fn parallel_pushes_to_one_tag_and_pulls(b: Backend) {
    let f = fixture(b).await;
    let router = f.router.clone();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..4 {
        let router = router.clone();
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let mut seen = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // An in-process GET may complete without ever yielding: let
                // the pushers run on the runtime's two workers.
                tokio::task::yield_now().await;
                let r = get(&router, "/v2/race/manifests/latest").await;
                if r.status == StatusCode::OK {
                    // Whole manifests only: the body hashes to its digest header.
                    assert_eq!(sha256(&r.body), r.header("docker-content-digest"));
                    serde_json::from_slice::<serde_json::Value>(&r.body).unwrap();
                    seen += 1;
                } else {
                    // Before the first manifest: no repository, or no tag yet.
                    let code = r.json()["errors"][0]["code"].as_str().unwrap().to_string();
                    assert!(
                        code == "NAME_UNKNOWN" || code == "MANIFEST_UNKNOWN",
                        "{code}"
                    );
                    r.status(404);
                }
            }
            seen
        }));
    }
    let mut pushers = Vec::new();
    for i in 0..8u32 {
        let router = router.clone();
        pushers.push(tokio::spawn(async move {
            push_image(&router, "race", "latest", 100 + i).await
        }));
    }
    let mut pushed = Vec::new();
    for p in pushers {
        pushed.push(p.await.unwrap());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    // One winner; every manifest and blob whole and reachable.
    let r = get(&router, "/v2/race/manifests/latest").await;
    r.status(200);
    assert!(
        pushed
            .iter()
            .any(|(m, d)| *m == r.body && *d == r.header("docker-content-digest"))
    );
    for (i, (m, d)) in pushed.iter().enumerate() {
        assert_eq!(
            &get(&router, &format!("/v2/race/manifests/{d}")).await.body,
            m
        );
        let layer = bytes_of(3000, 100 + i as u32);
        assert_eq!(
            get(&router, &format!("/v2/race/blobs/{}", sha256(&layer)))
                .await
                .body,
            layer
        );
    }
    assert!(f.store.list("uploads/").await.unwrap().is_empty());
}

async fn expired_sessions_are_refused_and_swept(b: Backend) {
    let f = fixture_with(
        b,
        RegistryConfig {
            allow_push: true,
            upload_expiry: Duration::from_secs(1),
            ..RegistryConfig::default()
        },
    )
    .await;
    let r = send_body(&f.router, "POST", "/v2/x/blobs/uploads/", &[], Vec::new()).await;
    let loc = r.header("location").to_string();
    send_body(&f.router, "PATCH", &loc, &[], b"part".to_vec())
        .await
        .status(202);
    assert!(!f.store.list("uploads/").await.unwrap().is_empty());
    tokio::time::sleep(Duration::from_millis(2100)).await;
    get(&f.router, &loc).await.error(404, "BLOB_UPLOAD_UNKNOWN");
    let uploads = airlock::registry::uploads::Uploads::new(f.store.clone(), Duration::from_secs(1));
    assert_eq!(uploads.sweep().await.unwrap(), 1);
    assert!(f.store.list("uploads/").await.unwrap().is_empty());
    assert!(f.store.list("blobs/").await.unwrap().is_empty());
}

async fn root_of(f: &Fixture) -> Option<String> {
    f.store.read_root().await.unwrap().map(|r| r.value)
}

/// A manifest pushed again keeps the media type it was first stored with.
async fn repushed_manifest_keeps_its_first_media_type(b: Backend) {
    let f = fixture(b).await;
    let (m, d) = push_image(&f.router, "img", "latest", 10).await;
    // The body declares an OCI manifest: relabelling it is refused.
    let root = root_of(&f).await;
    put_manifest(&f.router, "img", &d, "text/plain", &m)
        .await
        .error(400, "MANIFEST_INVALID");
    assert_eq!(root_of(&f).await, root);
    let r = get_with_accept(&f.router, "/v2/img/manifests/latest", OCI_MANIFEST).await;
    r.status(200);
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    assert_eq!(r.body, m);

    // An OCI manifest without a mediaType field (optional in image-spec):
    // the text/plain re-PUT is accepted, but the digest keeps its type.
    let (config, layer) = image_parts(10);
    let bare = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "config": {"mediaType": CONFIG, "digest": sha256(&config), "size": config.len()},
        "layers": [{"mediaType": LAYER, "digest": sha256(&layer), "size": layer.len()}],
    }))
    .unwrap();
    let bare_d = sha256(&bare);
    put_manifest(&f.router, "img", "bare", OCI_MANIFEST, &bare)
        .await
        .status(201);
    let root = root_of(&f).await;
    let r = put_manifest(&f.router, "img", &bare_d, "text/plain", &bare).await;
    r.status(201);
    assert_eq!(r.header("docker-content-digest"), bare_d);
    assert_eq!(root_of(&f).await, root, "same bytes, same state");
    // By tag: only the tag moves.
    put_manifest(&f.router, "img", "moved", "text/plain", &bare)
        .await
        .status(201);
    for reference in ["bare", "moved", bare_d.as_str()] {
        let r = get_with_accept(
            &f.router,
            &format!("/v2/img/manifests/{reference}"),
            OCI_MANIFEST,
        )
        .await;
        r.status(200);
        assert_eq!(r.header("content-type"), OCI_MANIFEST, "{reference}");
        assert_eq!(r.body, bare);
    }

    // Bytes that are no JSON object are no manifest, whatever the type
    // (gc and fsck could not read them: issue 60).
    put_manifest(
        &f.router,
        "img",
        "opaque",
        "application/vnd.example.a",
        b"opaque bytes",
    )
    .await
    .error(400, "MANIFEST_INVALID");
    // An artifact keeps the type it was first pushed with.
    let art = br#"{"opaque":"artifact bytes"}"#.to_vec();
    let art_d = sha256(&art);
    put_manifest(&f.router, "img", "art", "application/vnd.example.a", &art)
        .await
        .status(201);
    let root = root_of(&f).await;
    put_manifest(&f.router, "img", &art_d, "application/vnd.example.b", &art)
        .await
        .status(201);
    assert_eq!(root_of(&f).await, root);
    let r = get(&f.router, "/v2/img/manifests/art").await;
    r.status(200);
    assert_eq!(r.header("content-type"), "application/vnd.example.a");
}

async fn manifest_content_type_is_case_insensitive_and_cannot_relabel(b: Backend) {
    let f = fixture(b).await;
    let (m, _) = push_image(&f.router, "img", "v1", 11).await;
    let (config, _) = image_parts(11);
    let missing = bytes_of(10, 98);
    let bad = image_manifest(&config, &[&missing]);
    let root = root_of(&f).await;
    // Upper case is the same media type: the reference checks apply.
    put_manifest(
        &f.router,
        "img",
        "bad",
        "APPLICATION/VND.OCI.IMAGE.MANIFEST.V1+JSON",
        &bad,
    )
    .await
    .error(400, "MANIFEST_BLOB_UNKNOWN");
    // A foreign type on a body declaring a manifest type.
    for ct in [
        "application/octet-stream",
        "text/plain; charset=utf-8",
        OCI_INDEX,
        DOCKER_MANIFEST,
    ] {
        put_manifest(&f.router, "img", "bad", ct, &bad)
            .await
            .error(400, "MANIFEST_INVALID");
        put_manifest(&f.router, "img", "relabel", ct, &m)
            .await
            .error(400, "MANIFEST_INVALID");
    }
    assert_eq!(root_of(&f).await, root, "nothing stored");
    for tag in ["bad", "relabel"] {
        get(&f.router, &format!("/v2/img/manifests/{tag}"))
            .await
            .error(404, "MANIFEST_UNKNOWN");
    }
    // The normalized type is stored (fresh repository: nothing recorded yet).
    let (config, layer) = image_parts(11);
    push_blob(&f.router, "fresh", &config).await;
    push_blob(&f.router, "fresh", &layer).await;
    put_manifest(
        &f.router,
        "fresh",
        "v1",
        "Application/Vnd.OCI.Image.Manifest.V1+JSON ; charset=utf-8",
        &m,
    )
    .await
    .status(201);
    let r = get_with_accept(&f.router, "/v2/fresh/manifests/v1", OCI_MANIFEST).await;
    r.status(200);
    assert_eq!(r.header("content-type"), OCI_MANIFEST);
    assert_eq!(r.body, m);
}

async fn overflowing_content_range_is_refused(b: Backend) {
    let f = fixture(b).await;
    let r = send_body(&f.router, "POST", "/v2/o/blobs/uploads/", &[], Vec::new()).await;
    let loc = r.header("location").to_string();
    let empty = sha256(b"");
    for range in ["0-18446744073709551615", "bytes 0-18446744073709551615/*"] {
        send_body(
            &f.router,
            "PATCH",
            &loc,
            &[("content-range", range)],
            Vec::new(),
        )
        .await
        .error(400, "BLOB_UPLOAD_INVALID");
        send_body(
            &f.router,
            "PUT",
            &format!("{loc}?digest={empty}"),
            &[("content-range", range)],
            Vec::new(),
        )
        .await
        .error(400, "BLOB_UPLOAD_INVALID");
        // Beyond u64: malformed.
        send_body(
            &f.router,
            "PATCH",
            &loc,
            &[("content-range", "0-18446744073709551616")],
            Vec::new(),
        )
        .await
        .error(400, "BLOB_UPLOAD_INVALID");
    }
    // Nothing appended, nothing stored, the session lives on.
    let r = get(&f.router, &loc).await;
    r.status(204);
    assert_eq!(r.header("range"), "0-0");
    assert!(f.store.list("blobs/").await.unwrap().is_empty());
    assert_eq!(root_of(&f).await, None);

    send_body(&f.router, "PATCH", &loc, &[], b"hello".to_vec())
        .await
        .status(202);
    // End before start: out of order, 416 with the session's Range.
    let r = send_body(
        &f.router,
        "PATCH",
        &loc,
        &[("content-range", "5-4")],
        Vec::new(),
    )
    .await;
    r.error(416, "BLOB_UPLOAD_INVALID");
    assert_eq!(r.header("range"), "0-4");
    // A huge but representable length is compared, not wrapped: it is over
    // the maximum blob size, so 413 SIZE_INVALID before any byte is read.
    send_body(
        &f.router,
        "PATCH",
        &loc,
        &[("content-range", "5-18446744073709551615")],
        b"x".to_vec(),
    )
    .await
    .error(413, "SIZE_INVALID");
    // Within the maximum, a length that differs from the body's is 400.
    send_body(
        &f.router,
        "PATCH",
        &loc,
        &[("content-range", "5-9")],
        b"x".to_vec(),
    )
    .await
    .error(400, "SIZE_INVALID");
    assert_eq!(get(&f.router, &loc).await.header("range"), "0-4");
    let d = sha256(b"hello");
    send_body(
        &f.router,
        "PUT",
        &format!("{loc}?digest={d}"),
        &[],
        Vec::new(),
    )
    .await
    .status(201);
}

async fn malformed_digest_message_says_invalid(b: Backend) {
    let f = fixture(b).await;
    let message = |r: &Reply| r.json()["errors"][0]["message"].clone();
    for uri in [
        "/v2/img/blobs/sha256:xyz",
        "/v2/img/blobs/md5:abc",
        "/v2/img/referrers/sha256:short",
    ] {
        let r = get(&f.router, uri).await;
        r.error(400, "DIGEST_INVALID");
        assert_eq!(
            message(&r),
            "provided digest is missing or invalid",
            "{uri}"
        );
        assert!(r.json()["errors"][0]["detail"]["reason"].is_string());
    }
    let r = send_body(&f.router, "POST", "/v2/img/blobs/uploads/", &[], Vec::new()).await;
    let loc = r.header("location").to_string();
    for uri in [loc.clone(), format!("{loc}?digest=sha256:xyz")] {
        let r = send_body(&f.router, "PUT", &uri, &[], Vec::new()).await;
        r.error(400, "DIGEST_INVALID");
        assert_eq!(
            message(&r),
            "provided digest is missing or invalid",
            "{uri}"
        );
    }
    // A well-formed digest the content does not match keeps the spec's message.
    let r = send_body(
        &f.router,
        "POST",
        &format!("/v2/img/blobs/uploads/?digest={}", sha256(b"a")),
        &[],
        b"b".to_vec(),
    )
    .await;
    r.error(400, "DIGEST_INVALID");
    assert_eq!(
        message(&r),
        "provided digest did not match uploaded content"
    );
    assert!(f.store.list("blobs/").await.unwrap().is_empty());
    assert_eq!(root_of(&f).await, None);
}

/// containerd sends `ns=<upstream host>` on every mirror request (with the
/// port when the reference has one); docker sends none and relies on the
/// default namespace. Every case answers as without `ns` unless the
/// namespaced repository exists, which then wins for both clients.
async fn ns_as_containerd_sends_it_never_fails_a_read(b: Backend) {
    let kind = b.kind;
    let plain = fixture_with(
        b,
        RegistryConfig {
            allow_push: true,
            ..RegistryConfig::default()
        },
    )
    .await;
    let (m_app, _) = push_image(&plain.router, "app", "v1", 1).await;
    let (m_case, case_digest) = push_image(&plain.router, "bugs/case09", "1.5.2", 2).await;
    let (_, docker_digest) = push_image(&plain.router, "docker.io/library/app", "v1", 3).await;
    let config = format!(r#"{{"architecture":"amd64","os":"linux","seed":{}}}"#, 1).into_bytes();
    let same_as_without = |uri: &str, ns: &str| {
        let router = plain.router.clone();
        let (uri, ns) = (uri.to_string(), ns.to_string());
        async move {
            for method in ["GET", "HEAD"] {
                let without = send(&router, method, &uri, &[]).await;
                let sep = if uri.contains('?') { '&' } else { '?' };
                let with = send(&router, method, &format!("{uri}{sep}ns={ns}"), &[]).await;
                assert_eq!(with.status, without.status, "{method} {uri} ns={ns}");
                assert_eq!(with.body, without.body, "{method} {uri} ns={ns}");
                assert_eq!(with.headers, without.headers, "{method} {uri} ns={ns}");
                assert!(
                    without.status.is_success(),
                    "{method} {uri}: {}",
                    without.status
                );
            }
        }
    };
    for ns in [
        "registry.local:5000",
        "registry.local%3A5000",
        "registry.local:443",
        "%5B%3A%3A1%5D:5000",
        "registry.suse.com",
        "",
    ] {
        same_as_without("/v2/app/manifests/v1", ns).await;
        same_as_without("/v2/app/tags/list", ns).await;
        same_as_without(&format!("/v2/app/blobs/{}", sha256(&config)), ns).await;
        same_as_without("/v2/bugs/case09/manifests/1.5.2", ns).await;
    }
    let r = get(&plain.router, "/v2/app/manifests/v1?ns=registry.local:5000").await;
    assert_eq!(r.body, m_app);
    let r = get(
        &plain.router,
        "/v2/bugs/case09/manifests/1.5.2?ns=registry.suse.com",
    )
    .await;
    assert_eq!((r.status, r.body.clone()), (StatusCode::OK, m_case));
    assert_eq!(r.header("docker-content-digest"), case_digest);
    // override_path with a path-prefix mirror: the path already holds the
    // namespace and is not prefixed again.
    let r = get(
        &plain.router,
        "/v2/docker.io/library/app/manifests/v1?ns=docker.io",
    )
    .await;
    r.status(200);
    assert_eq!(r.header("docker-content-digest"), docker_digest);
    assert_eq!(r.header("oci-namespace"), "docker.io");

    // One reference, one image: with both library/app and
    // docker.io/library/app present, containerd (ns=docker.io) and docker
    // (default namespace docker.io, no ns) get the namespaced one.
    let mirror = fixture_with(
        Backend::start(kind),
        RegistryConfig {
            allow_push: true,
            mirror_namespace: Some("docker.io".into()),
            ..RegistryConfig::default()
        },
    )
    .await;
    let (_, plain_digest) = push_image(&mirror.router, "library/app", "v1", 4).await;
    let (_, ns_digest) = push_image(&mirror.router, "docker.io/library/app", "v1", 5).await;
    assert_ne!(plain_digest, ns_digest);
    for (uri, echoed) in [
        (
            "/v2/library/app/manifests/v1?ns=docker.io",
            Some("docker.io"),
        ),
        (
            "/v2/library/app/manifests/v1?ns=Index.Docker.IO:443",
            Some("docker.io"),
        ),
        ("/v2/library/app/manifests/v1", None),
    ] {
        let r = get(&mirror.router, uri).await;
        r.status(200);
        assert_eq!(r.header("docker-content-digest"), ns_digest, "{uri}");
        assert_eq!(
            r.headers.get("oci-namespace").map(|v| v.to_str().unwrap()),
            echoed,
            "{uri}"
        );
    }
    // A request naming another namespace gets the plain repository, never
    // the default namespace's image (field report: ns=registry.local:5000
    // and ns=quay.io served docker.io's image).
    for ns in ["quay.io", "registry.local%3A5000", "registry.local:5000"] {
        for method in ["GET", "HEAD"] {
            let r = send(
                &mirror.router,
                method,
                &format!("/v2/library/app/manifests/v1?ns={ns}"),
                &[],
            )
            .await;
            r.status(200);
            assert_eq!(r.header("docker-content-digest"), plain_digest, "{ns}");
            assert!(r.headers.get("oci-namespace").is_none(), "{ns}");
        }
    }
}

/// A push of N blobs and one manifest makes one generation: a finished blob
/// is linked without a root swap, visible at once in its repository only,
/// and enters the state tree with the manifest that names it.
async fn blob_pushes_make_no_generation_and_are_visible_at_once(b: Backend) {
    let f = fixture(b).await;
    let state = StateStore::new(f.store.clone());
    let config = bytes_of(100, 1);
    let layers: Vec<Vec<u8>> = (0..5).map(|i| bytes_of(2000, 10 + i)).collect();
    push_blob(&f.router, "gen/app", &config).await;
    for l in &layers {
        push_blob(&f.router, "gen/app", l).await;
        // Visible in gen/app at once, not in another repository.
        let r = send(
            &f.router,
            "HEAD",
            &format!("/v2/gen/app/blobs/{}", sha256(l)),
            &[],
        )
        .await;
        r.status(200);
        assert_eq!(r.header("content-length"), l.len().to_string());
        get(&f.router, &format!("/v2/gen/other/blobs/{}", sha256(l)))
            .await
            .error(404, "NAME_UNKNOWN");
    }
    assert_eq!(
        state.snapshot().await.unwrap().generation(),
        0,
        "no root swap for blobs"
    );
    // Another repository cannot name them in a manifest.
    let refs: Vec<&[u8]> = layers.iter().map(|l| l.as_slice()).collect();
    let m = image_manifest(&config, &refs);
    put_manifest(&f.router, "gen/other", "v1", OCI_MANIFEST, &m)
        .await
        .error(400, "MANIFEST_BLOB_UNKNOWN");
    put_manifest(&f.router, "gen/app", "v1", OCI_MANIFEST, &m)
        .await
        .status(201);
    let snap = state.snapshot().await.unwrap();
    assert_eq!(snap.generation(), 1, "one generation for the whole push");
    let repo = state
        .repository(&snap, &"gen/app".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    for b in layers.iter().chain([&config]) {
        let d = sha256(b).parse().unwrap();
        assert_eq!(repo.blob(&d).await.unwrap(), Some(b.len() as u64));
    }
    // Deleting a blob that is only linked removes the link: 202, then 404.
    let extra = bytes_of(10, 99);
    push_blob(&f.router, "gen/app", &extra).await;
    let uri = format!("/v2/gen/app/blobs/{}", sha256(&extra));
    send(&f.router, "DELETE", &uri, &[]).await.status(202);
    get(&f.router, &uri).await.error(404, "BLOB_UNKNOWN");
    assert_eq!(state.snapshot().await.unwrap().generation(), 1);
}

/// Upload caps: a blob over the maximum size is 413 `SIZE_INVALID` (PATCH,
/// final PUT and monolithic POST, nothing stored); sessions over the caps
/// per repository and in total are 429 `TOOMANYREQUESTS`, and a finished or
/// cancelled session frees its place.
async fn upload_caps(b: Backend) {
    use airlock::registry::uploads::UploadLimits;
    let f = fixture_with(
        b,
        RegistryConfig {
            allow_push: true,
            uploads: UploadLimits {
                max_blob_size: 1000,
                max_sessions: 3,
                max_sessions_per_repository: 2,
                max_sessions_per_client: 100,
                ..UploadLimits::default()
            },
            ..RegistryConfig::default()
        },
    )
    .await;
    let big = bytes_of(1001, 3);
    let fits = bytes_of(1000, 4);
    // Monolithic POST.
    let r = send_body(
        &f.router,
        "POST",
        &format!("/v2/cap/a/blobs/uploads/?digest={}", sha256(&big)),
        &[],
        big.clone(),
    )
    .await;
    r.error(413, "SIZE_INVALID");
    assert_eq!(r.json()["errors"][0]["detail"]["max"], 1000);
    // A Content-Length over the cap is refused before any byte of the body
    // is read (field report: the server waited for a 91 TiB body and timed
    // out with 408): here the body never sends a byte, so reading it would
    // hang. Monolithic POST, PATCH and the final PUT alike.
    let session = send_body(
        &f.router,
        "POST",
        "/v2/cap/a/blobs/uploads/",
        &[],
        Vec::new(),
    )
    .await
    .header("location")
    .to_string();
    for (method, uri) in [
        (
            "POST",
            format!("/v2/cap/a/blobs/uploads/?digest={}", sha256(&big)),
        ),
        ("PATCH", session.clone()),
        ("PUT", format!("{session}?digest={}", sha256(&big))),
    ] {
        use tower::ServiceExt as _;
        let never = futures_util::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
        let req = axum::http::Request::builder()
            .method(method)
            .uri(&uri)
            .header("content-length", "99999999999999")
            .body(axum::body::Body::from_stream(never))
            .unwrap();
        let res = tokio::time::timeout(Duration::from_secs(10), f.router.clone().oneshot(req))
            .await
            .unwrap_or_else(|_| panic!("{method} {uri}: no answer before the body"))
            .unwrap();
        assert_eq!(
            res.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "{method} {uri}"
        );
    }
    // The refused requests left the session as it was: it goes on below.
    // PATCH past the cap, in two chunks: the second is refused, the first kept.
    let loc = session;
    send_body(&f.router, "PATCH", &loc, &[], big[..600].to_vec())
        .await
        .status(202);
    send_body(&f.router, "PATCH", &loc, &[], big[600..].to_vec())
        .await
        .error(413, "SIZE_INVALID");
    let r = send(&f.router, "GET", &loc, &[]).await;
    assert_eq!(r.header("range"), "0-599");
    // The final PUT with the rest is refused too; the blob is not stored.
    send_body(
        &f.router,
        "PUT",
        &format!("{loc}?digest={}", sha256(&big)),
        &[],
        big[600..].to_vec(),
    )
    .await
    .error(413, "SIZE_INVALID");
    get(&f.router, &format!("/v2/cap/a/blobs/{}", sha256(&big)))
        .await
        .status(404);
    assert_eq!(
        f.store
            .stat(&format!(
                "blobs/sha256/{0}/{1}",
                &sha256(&big)[7..9],
                &sha256(&big)[7..]
            ))
            .await
            .unwrap(),
        None
    );
    // Exactly the maximum is fine.
    push_blob(&f.router, "cap/a", &fits).await;

    // Sessions: 2 per repository, 3 in all. Idle sessions make room: at a
    // cap the least recently active one is removed.
    let open = |repo: &'static str| {
        let router = f.router.clone();
        async move {
            send_body(
                &router,
                "POST",
                &format!("/v2/{repo}/blobs/uploads/"),
                &[],
                Vec::new(),
            )
            .await
        }
    };
    let s1 = open("cap/b").await;
    s1.status(202);
    let s2 = open("cap/b").await;
    s2.status(202);
    let s3 = open("cap/b").await;
    s3.status(202);
    get(&f.router, s1.header("location"))
        .await
        .error(404, "BLOB_UPLOAD_UNKNOWN");
    get(&f.router, s2.header("location")).await.status(204);
    // Busy sessions (a PATCH whose body is still arriving) are never
    // removed: with every counted session busy, the new one is 429.
    let busy = |loc: String| {
        use tower::ServiceExt as _;
        let router = f.router.clone();
        tokio::spawn(async move {
            let never = futures_util::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
            let req = axum::http::Request::builder()
                .method("PATCH")
                .uri(&loc)
                .body(axum::body::Body::from_stream(never))
                .unwrap();
            router.oneshot(req).await
        })
    };
    let mut holds = vec![
        busy(s2.header("location").to_string()),
        busy(s3.header("location").to_string()),
    ];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = open("cap/b").await;
    r.error(429, "TOOMANYREQUESTS");
    assert_eq!(r.json()["errors"][0]["detail"]["max"], 2);
    assert_eq!(r.json()["errors"][0]["detail"]["scope"], "repository");
    let c = open("cap/c").await;
    c.status(202);
    holds.push(busy(c.header("location").to_string()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = open("cap/d").await;
    r.error(429, "TOOMANYREQUESTS");
    assert_eq!(r.json()["errors"][0]["detail"]["max"], 3);
    assert_eq!(r.json()["errors"][0]["detail"]["scope"], "registry");
    // Once a request ends, its session may make room again.
    for h in holds {
        h.abort();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    open("cap/d").await.status(202);
}
