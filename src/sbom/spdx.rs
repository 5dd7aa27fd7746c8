//! SPDX 2.3 JSON documents of an [`Inventory`] (SPDX 2.3 specification,
//! clauses 6 "Document creation information", 7 "Package information", 11
//! "Relationships"; the JSON schema `spdx-schema.json` of SPDX 2.3), and
//! reading one back, ours or one attached upstream (syft, trivy, ...).
//!
//! Shape: the document DESCRIBES one package for the image (purpose
//! `CONTAINER`, purl `pkg:oci/...@sha256:...`), which CONTAINS the
//! operating system (purpose `OPERATING-SYSTEM`: name `ID`, version
//! `VERSION_ID`, the whole `os-release` in its `comment`) and every
//! installed package (purpose `LIBRARY`, its purl as a `PACKAGE-MANAGER`
//! external reference, its source package in `sourceInfo`). Licenses are
//! `NOASSERTION`: package databases carry no SPDX expressions airlock can
//! vouch for (apk's `L:` goes to `licenseComments`).
//!
//! Deterministic: `created` is the image's own creation time and the
//! namespace is made of the manifest digest, so the same image always gives
//! the same bytes (and the same referrer digest, connected side or site).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::inventory::{Inventory, Package};
use super::purl;
use super::version::Packaging;
use crate::digest::Digest;

/// `artifactType` and layer media type of an SPDX referrer.
pub const MEDIA_TYPE: &str = "application/spdx+json";

/// What an SBOM describes.
#[derive(Debug, Clone)]
pub struct Subject {
    /// The repository (`stacks/bookworm`).
    pub name: String,
    /// The platform image manifest the SBOM is about.
    pub manifest: Digest,
    /// RFC 3339 creation time (the image config's `created`, else now).
    pub created: String,
}

/// `time` (RFC 3339) as SPDX 2.3 wants it: UTC, whole seconds
/// (`2026-11-28T10:00:00Z`); now when it does not parse.
pub fn spdx_time(time: &str) -> String {
    use time::format_description::well_known::Rfc3339;
    let t = time::OffsetDateTime::parse(time, &Rfc3339)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    let t = t.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// `SPDXRef-` plus `[A-Za-z0-9.-]` (other characters become `-`).
fn spdx_id(kind: &str, n: usize, name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!("SPDXRef-{kind}-{n}-{clean}")
}

fn os_comment(inv: &Inventory) -> String {
    let mut s = String::from("os-release:\n");
    for (k, v) in &inv.os {
        s.push_str(&format!("{k}={v}\n"));
    }
    s
}

/// The SPDX 2.3 JSON document of `inv` for `subject`.
pub fn document(inv: &Inventory, subject: &Subject) -> Value {
    let image_id = "SPDXRef-Image".to_string();
    let image_purl = purl::format(
        "oci",
        "",
        subject.name.rsplit('/').next().unwrap_or(&subject.name),
        &subject.manifest.to_string(),
        &[("repository_url", subject.name.clone())],
    );
    let mut packages = vec![json!({
        "name": subject.name,
        "SPDXID": image_id,
        "versionInfo": subject.manifest.to_string(),
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": false,
        "licenseConcluded": "NOASSERTION",
        "licenseDeclared": "NOASSERTION",
        "copyrightText": "NOASSERTION",
        "primaryPackagePurpose": "CONTAINER",
        "checksums": [{"algorithm": "SHA256", "checksumValue": subject.manifest.hex()}],
        "externalRefs": [{
            "referenceCategory": "PACKAGE-MANAGER",
            "referenceType": "purl",
            "referenceLocator": image_purl,
        }],
    })];
    let mut relationships = vec![json!({
        "spdxElementId": "SPDXRef-DOCUMENT",
        "relationshipType": "DESCRIBES",
        "relatedSpdxElement": image_id,
    })];
    let mut contains = |id: &str| {
        relationships.push(json!({
            "spdxElementId": "SPDXRef-Image",
            "relationshipType": "CONTAINS",
            "relatedSpdxElement": id,
        }))
    };
    if let Some(id) = inv.os_id() {
        let spdx = spdx_id("OperatingSystem", 0, id);
        let mut p = json!({
            "name": id,
            "SPDXID": spdx,
            "versionInfo": inv.os_version().unwrap_or(""),
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "primaryPackagePurpose": "OPERATING-SYSTEM",
            "description": inv.os_name(),
            "comment": os_comment(inv),
        });
        if inv.os_version().is_none() {
            p.as_object_mut().map(|o| o.remove("versionInfo"));
        }
        packages.push(p);
        contains(&spdx);
    }
    for (n, pkg) in inv.packages.iter().enumerate() {
        let id = spdx_id("Package", n + 1, &pkg.name);
        let mut p = json!({
            "name": pkg.name,
            "SPDXID": id,
            "versionInfo": pkg.version,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "supplier": "NOASSERTION",
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "primaryPackagePurpose": "LIBRARY",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "purl",
                "referenceLocator": inv.purl(pkg),
            }],
        });
        let o = p.as_object_mut().expect("an object");
        if pkg.source.is_some() || pkg.source_version.is_some() {
            o.insert(
                "sourceInfo".into(),
                format!(
                    "built from source package {} {}",
                    pkg.source_name(),
                    pkg.source_version()
                )
                .into(),
            );
        }
        if let Some(l) = &pkg.license {
            o.insert(
                "licenseComments".into(),
                format!("declared by the package database: {l}").into(),
            );
        }
        packages.push(p);
        contains(&id);
    }
    json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": format!("{}@{}", subject.name, subject.manifest),
        "documentNamespace": format!("https://airlock.invalid/spdx/{}/{}", subject.name, subject.manifest.hex()),
        "creationInfo": {
            "created": spdx_time(&subject.created),
            "creators": [format!("Tool: airlock-{}", env!("CARGO_PKG_VERSION"))],
        },
        "documentDescribes": ["SPDXRef-Image"],
        "packages": packages,
        "relationships": relationships,
    })
}

/// The document as compact JSON bytes (what is stored and attached).
pub fn to_bytes(doc: &Value) -> Vec<u8> {
    serde_json::to_vec(doc).unwrap_or_default()
}

fn purl_ref(p: &Value) -> Option<&str> {
    p["externalRefs"].as_array()?.iter().find_map(|r| {
        (r["referenceType"].as_str()? == "purl").then(|| r["referenceLocator"].as_str())?
    })
}

/// Reads the inventory back from an SPDX 2.x JSON document: every package
/// with a `deb` or `apk` purl, and the operating system from the
/// `OPERATING-SYSTEM` package (its `comment` when it holds `os-release`,
/// else its name and version). Errors: not JSON, or no `packages` array.
pub fn read(bytes: &[u8]) -> anyhow::Result<Inventory> {
    let doc: Value = serde_json::from_slice(bytes)?;
    let list = doc["packages"]
        .as_array()
        .ok_or_else(|| anyhow::anyhow!("SPDX document without a packages array"))?;
    let mut inv = Inventory::default();
    for p in list {
        if p["primaryPackagePurpose"].as_str() == Some("OPERATING-SYSTEM") {
            inv.os = os_of(p);
            continue;
        }
        let Some(u) = purl_ref(p).and_then(purl::parse) else {
            continue;
        };
        let packaging = match u.kind.as_str() {
            "deb" => Packaging::Deb,
            "apk" => Packaging::Apk,
            _ => continue,
        };
        let (source, source_version) = match u.qualifiers.get("upstream") {
            Some(up) => match up.split_once('@') {
                Some((n, v)) => (Some(n.to_string()), Some(v.to_string())),
                None => (Some(up.clone()), None),
            },
            None => (None, None),
        };
        let version = if u.version.is_empty() {
            p["versionInfo"].as_str().unwrap_or_default().to_string()
        } else {
            u.version
        };
        if inv.os.is_empty()
            && let Some((id, ver)) = u.qualifiers.get("distro").and_then(|d| d.split_once('-'))
        {
            inv.os = BTreeMap::from([("ID".into(), id.into()), ("VERSION_ID".into(), ver.into())]);
        }
        inv.packages.push(Package {
            packaging,
            name: u.name,
            version,
            arch: u.qualifiers.get("arch").cloned().unwrap_or_default(),
            source,
            source_version,
            license: None,
        });
    }
    inv.normalize();
    Ok(inv)
}

fn os_of(p: &Value) -> BTreeMap<String, String> {
    if let Some(text) = p["comment"]
        .as_str()
        .and_then(|c| c.strip_prefix("os-release:\n"))
    {
        return text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }
    let mut os = BTreeMap::new();
    for (key, field) in [
        ("ID", "name"),
        ("VERSION_ID", "versionInfo"),
        ("PRETTY_NAME", "description"),
    ] {
        if let Some(v) = p[field].as_str() {
            os.insert(key.to_string(), v.to_string());
        }
    }
    os
}
