//! One manifest rule (issue 60, item 3): what the registry accepts as a
//! manifest is what `fsck`, `gc`, `rollback` and their recovery read. The
//! repro as written (an `application/json` body `{}` took fsck, gc and
//! rollback down, and `fsck --repair` threw away newer generations with a
//! good tag), and a property over generated bodies and media types: every
//! PUT answered 201 leaves a store that `fsck`, `gc --dry-run` and a
//! rollback to that generation (and back) accept, on the filesystem and
//! on moto's S3.

use crate::common;

use std::sync::Arc;

use airlock::registry::RegistryConfig;
use airlock::server::{self, App};
use airlock::state::StateStore;
use axum::Router;
use common::backend::{Backend, on_backends};
use common::images::{
    CONFIG, LAYER, OCI_INDEX, OCI_MANIFEST, bytes_of, image_manifest, image_parts, push_blob,
    push_image, put_manifest, sha256,
};
use common::router::get;

on_backends!([fs, moto] an_application_json_manifest_breaks_nothing,);
on_backends!([fs] every_manifest_the_registry_accepts_is_one_fsck_gc_and_rollback_read,);

async fn router(backend: &Backend) -> Router {
    let store = backend.open_store().await;
    let config = RegistryConfig {
        allow_push: true,
        allow_delete: true,
        ..RegistryConfig::default()
    };
    server::router(Arc::new(App::with_config(StateStore::new(store), config)))
}

/// The generation of the store's current root (`airlock history`).
fn generation(b: &Backend) -> u64 {
    b.history().iter().map(|(g, _)| *g).max().unwrap()
}

fn an_application_json_manifest_breaks_nothing(b: Backend) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(router(&b));
    let (good, good_digest) = rt.block_on(push_image(&r, "good", "b", 1));
    let at_good = generation(&b);
    let put = rt.block_on(put_manifest(&r, "evil", "t", "application/json", b"{}"));
    put.status(201);
    let evil = put.header("docker-content-digest").to_string();
    assert_eq!(evil, sha256(b"{}"));
    rt.block_on(push_image(&r, "good", "c", 2));
    let newest = generation(&b);
    // fsck reads every generation's manifests: nothing is damaged.
    let fsck = b.airlock_ok(&["fsck"], &[]);
    assert!(fsck.contains("0 problems"), "{fsck}");
    let repair = b.airlock_ok(&["fsck"], &["--repair"]);
    assert!(!repair.contains("lost"), "{repair}");
    // gc sees the manifest (and sweeps nothing it names).
    let gc = b.airlock_ok(&["gc"], &["--dry-run"]);
    assert!(!gc.contains("corrupt"), "{gc}");
    // Rollback to the generation of the good tag, and forward again.
    b.airlock_ok(
        &["rollback"],
        &["--to", &at_good.to_string(), "--reason", "test"],
    );
    b.airlock_ok(
        &["rollback"],
        &["--to", &newest.to_string(), "--reason", "test"],
    );
    let r = rt.block_on(router(&b));
    let served = rt.block_on(get(&r, "/v2/good/manifests/b"));
    assert_eq!(served.body, good);
    assert_eq!(served.header("docker-content-digest"), good_digest);
    let served = rt.block_on(get(&r, "/v2/evil/manifests/t"));
    assert_eq!(served.body, b"{}");
    assert_eq!(served.header("content-type"), "application/json");
    b.airlock_ok(&["fsck"], &[]);
}

/// Media types a client may send, and bodies of every shape.
fn cases(subject: &str, child: &(Vec<u8>, String)) -> Vec<(Option<&'static str>, Vec<u8>)> {
    let types: [Option<&'static str>; 11] = [
        Some(OCI_MANIFEST),
        Some(OCI_INDEX),
        Some("application/vnd.docker.distribution.manifest.v2+json"),
        Some("application/vnd.docker.distribution.manifest.list.v2+json"),
        Some("application/json"),
        Some("application/vnd.oci.artifact.manifest.v1+json"),
        Some("application/vnd.docker.distribution.manifest.v1+prettyjws"),
        Some("application/vnd.example.thing.v1+json"),
        Some("text/plain"),
        Some("APPLICATION/VND.OCI.IMAGE.MANIFEST.V1+JSON; charset=utf-8"),
        None,
    ];
    let (config, layer) = image_parts(7);
    let image = image_manifest(&config, &[&layer]);
    let index = serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [{"mediaType": OCI_MANIFEST, "digest": child.1, "size": child.0.len()}]
    })
    .to_string();
    let descriptor =
        |d: &str| serde_json::json!({"mediaType": OCI_MANIFEST, "digest": d, "size": 10});
    let bodies: Vec<Vec<u8>> = vec![
        b"{}".to_vec(),
        b"  {}\n".to_vec(),
        b"[]".to_vec(),
        b"[null,null,null]".to_vec(),
        b"null".to_vec(),
        b"\"x\"".to_vec(),
        b"not json".to_vec(),
        b"{} x".to_vec(),
        b"\xef\xbb\xbf{}".to_vec(),
        br#"{"schemaVersion":2}"#.to_vec(),
        br#"{"schemaVersion":1,"name":"x","tag":"y","fsLayers":[],"history":[]}"#.to_vec(),
        br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json"}"#.to_vec(),
        br#"{"schemaVersion":2,"config":"x","layers":[]}"#.to_vec(),
        br#"{"schemaVersion":2,"manifests":3}"#.to_vec(),
        br#"{"a":{"a":{"a":{"a":{"a":[[[[[[1e999]]]]]]}}}}}"#.to_vec(),
        br#"{"subject":5}"#.to_vec(),
        br#"{"subject":{"mediaType":"x","digest":"sha256:00","size":1}}"#.to_vec(),
        serde_json::json!({"subject": descriptor(subject), "artifactType": "application/x"})
            .to_string()
            .into_bytes(),
        serde_json::json!({
            "mediaType": "application/vnd.oci.artifact.manifest.v1+json",
            "artifactType": "application/spdx+json",
            "blobs": [{"mediaType": LAYER, "digest": sha256(&layer), "size": layer.len()}],
            "subject": descriptor(subject),
        })
        .to_string()
        .into_bytes(),
        image.clone(),
        index.into_bytes(),
        serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": CONFIG, "digest": sha256(&config), "size": config.len()},
            "layers": [], "manifests": [descriptor(subject)], "subject": descriptor(subject),
        })
        .to_string()
        .into_bytes(),
        [&image[..], b" "].concat(),
        bytes_of(100, 3),
    ];
    types
        .iter()
        .flat_map(|t| bodies.iter().map(move |b| (*t, b.clone())))
        .collect()
}

fn every_manifest_the_registry_accepts_is_one_fsck_gc_and_rollback_read(b: Backend) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(router(&b));
    let child = rt.block_on(push_image(&r, "img", "child", 1));
    let (config, layer) = image_parts(7);
    rt.block_on(push_blob(&r, "img", &config));
    rt.block_on(push_blob(&r, "img", &layer));
    let first = generation(&b);
    let mut accepted = Vec::new();
    let mut refused = 0;
    for (i, (ct, body)) in cases(&child.1, &child).into_iter().enumerate() {
        let tag = format!("t{i}");
        let path = format!("/v2/img/manifests/{tag}");
        let headers: Vec<(&str, &str)> = ct.iter().map(|t| ("content-type", *t)).collect();
        let res = rt.block_on(common::router::send_body(
            &r,
            "PUT",
            &path,
            &headers,
            body.clone(),
        ));
        match res.status.as_u16() {
            201 => accepted.push((tag, ct, body)),
            400 => {
                let code = res.json()["errors"][0]["code"]
                    .as_str()
                    .unwrap()
                    .to_string();
                assert!(
                    ["MANIFEST_INVALID", "MANIFEST_BLOB_UNKNOWN"].contains(&code.as_str()),
                    "{ct:?} {}: {code}",
                    String::from_utf8_lossy(&body)
                );
                refused += 1;
            }
            other => panic!(
                "{ct:?} {}: {other} {}",
                String::from_utf8_lossy(&body),
                String::from_utf8_lossy(&res.body)
            ),
        }
    }
    assert!(
        accepted.len() > 30 && refused > 100,
        "{} accepted, {refused} refused",
        accepted.len()
    );
    let last = generation(&b);
    // Every accepted manifest is served byte for byte.
    for (tag, _, body) in &accepted {
        let got = rt.block_on(get(&r, &format!("/v2/img/manifests/{tag}")));
        assert_eq!(&got.body, body, "{tag}");
    }
    let fsck = b.airlock_ok(&["fsck"], &[]);
    assert!(fsck.contains("0 problems"), "{fsck}");
    b.airlock_ok(&["gc"], &["--dry-run"]);
    // Each generation a push made rolls back and forward (checked whole).
    for to in [first, (first + last) / 2, last - 1] {
        b.airlock_ok(&["rollback"], &["--to", &to.to_string(), "--reason", "t"]);
        b.airlock_ok(&["fsck"], &[]);
    }
    b.airlock_ok(&["rollback"], &["--to", &last.to_string(), "--reason", "t"]);
    let fsck = b.airlock_ok(&["fsck"], &["--repair"]);
    assert!(!fsck.contains("lost"), "{fsck}");
}
