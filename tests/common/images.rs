//! Images pushed through the in-process router: blobs, manifests and
//! whole images built here, with digests computed here (`sha2`), never
//! taken from airlock.

use axum::Router;
use sha2::{Digest as _, Sha256};

use super::router::{Reply, send_body};

pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const LAYER: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `len` pseudo-random bytes from `seed` (an LCG: the same bytes every run).
pub fn bytes_of(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (x >> 16) as u8
        })
        .collect()
}

/// Pushes `blob` into `name` (POST, then PUT with the digest); returns its digest.
pub async fn push_blob(router: &Router, name: &str, blob: &[u8]) -> String {
    let d = sha256(blob);
    let r = send_body(
        router,
        "POST",
        &format!("/v2/{name}/blobs/uploads/"),
        &[],
        Vec::new(),
    )
    .await;
    r.status(202);
    let loc = r.header("location").to_string();
    let r = send_body(
        router,
        "PUT",
        &format!("{loc}?digest={d}"),
        &[("content-type", "application/octet-stream")],
        blob.to_vec(),
    )
    .await;
    r.status(201);
    d
}

/// An OCI image manifest naming `config` and `layers` (pretty-printed on
/// purpose: the exact bytes must come back).
pub fn image_manifest(config: &[u8], layers: &[&[u8]]) -> Vec<u8> {
    let layers: Vec<serde_json::Value> = layers
        .iter()
        .map(|l| serde_json::json!({"mediaType": LAYER, "digest": sha256(l), "size": l.len()}))
        .collect();
    serde_json::to_vec_pretty(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": CONFIG, "digest": sha256(config), "size": config.len()},
        "layers": layers,
    }))
    .unwrap()
}

/// PUT of manifest `m` (content type `ct`) at `name:reference`.
pub async fn put_manifest(
    router: &Router,
    name: &str,
    reference: &str,
    ct: &str,
    m: &[u8],
) -> Reply {
    send_body(
        router,
        "PUT",
        &format!("/v2/{name}/manifests/{reference}"),
        &[("content-type", ct)],
        m.to_vec(),
    )
    .await
}

/// The config and layer of the image of `seed`.
pub fn image_parts(seed: u32) -> (Vec<u8>, Vec<u8>) {
    let config = format!(r#"{{"architecture":"amd64","os":"linux","seed":{seed}}}"#).into_bytes();
    (config, bytes_of(3000, seed))
}

/// Pushes a config + one layer + manifest at `reference` (a tag, or its
/// digest for a push by digest); returns (manifest, digest).
pub async fn push_image(
    router: &Router,
    name: &str,
    reference: &str,
    seed: u32,
) -> (Vec<u8>, String) {
    let (config, layer) = image_parts(seed);
    push_blob(router, name, &config).await;
    push_blob(router, name, &layer).await;
    let m = image_manifest(&config, &[&layer]);
    let d = sha256(&m);
    let reference = if reference.is_empty() {
        d.as_str()
    } else {
        reference
    };
    put_manifest(router, name, reference, OCI_MANIFEST, &m)
        .await
        .status(201);
    (m, d)
}
