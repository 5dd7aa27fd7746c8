//! CycloneDX 1.5 JSON documents of an [`Inventory`] (CycloneDX 1.5
//! specification, JSON schema `bom-1.5.schema.json`): `metadata.component`
//! is the image (type `container`), `components` the operating system
//! (type `operating-system`) and every package (type `library`, with its
//! purl as `bom-ref` and `purl`; the source package as the property
//! `airlock:package:source`).
//!
//! Deterministic like [`super::spdx`]: the timestamp is the image's creation
//! time and the serial number a name-based UUID of the manifest digest.

use serde_json::{Value, json};

use super::inventory::Inventory;
use super::spdx::Subject;

/// Media type of a CycloneDX 1.5 JSON document.
pub const MEDIA_TYPE: &str = "application/vnd.cyclonedx+json";

/// `urn:uuid:` of a version 5 style UUID made from the digest's first 16 bytes.
fn serial(subject: &Subject) -> String {
    let hex = subject.manifest.hex();
    let mut b: Vec<u8> = (0..16)
        .map(|i| u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("00"), 16).unwrap_or(0))
        .collect();
    b[6] = (b[6] & 0x0f) | 0x50;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex::encode(b);
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The CycloneDX 1.5 JSON document of `inv` for `subject`.
pub fn document(inv: &Inventory, subject: &Subject) -> Value {
    let mut components = Vec::new();
    if let Some(id) = inv.os_id() {
        let mut os = json!({
            "type": "operating-system",
            "bom-ref": format!("os:{id}"),
            "name": id,
            "description": inv.os_name(),
        });
        if let Some(v) = inv.os_version() {
            os["version"] = v.into();
        }
        components.push(os);
    }
    let mut seen = std::collections::HashSet::new();
    for p in &inv.packages {
        let purl = inv.purl(p);
        if !seen.insert(purl.clone()) {
            continue;
        }
        let mut c = json!({
            "type": "library",
            "bom-ref": purl,
            "name": p.name,
            "version": p.version,
            "purl": purl,
        });
        let mut props = Vec::new();
        if p.source.is_some() || p.source_version.is_some() {
            props.push(json!({"name": "airlock:package:source", "value": p.source_name()}));
            props.push(
                json!({"name": "airlock:package:source_version", "value": p.source_version()}),
            );
        }
        if !p.arch.is_empty() {
            props.push(json!({"name": "airlock:package:arch", "value": p.arch}));
        }
        if !props.is_empty() {
            c["properties"] = props.into();
        }
        components.push(c);
    }
    json!({
        "$schema": "http://cyclonedx.org/schema/bom-1.5.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": serial(subject),
        "version": 1,
        "metadata": {
            "timestamp": super::spdx::spdx_time(&subject.created),
            "tools": {"components": [{
                "type": "application",
                "name": "airlock",
                "version": env!("CARGO_PKG_VERSION"),
            }]},
            "component": {
                "type": "container",
                "bom-ref": format!("image:{}", subject.manifest),
                "name": subject.name,
                "version": subject.manifest.to_string(),
            },
        },
        "components": components,
    })
}
