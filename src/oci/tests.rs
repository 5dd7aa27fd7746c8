//! Inputs oci-spec reads differently from a plain walk, and the tolerant paths.

use super::*;

fn d() -> Digest {
    Digest::sha256_of(b"x")
}

#[test]
fn parses_index_and_manifest() {
    let d = d();
    let idx = format!(
        r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"{OCI_MANIFEST}","digest":"{d}","size":1,"platform":{{"os":"linux","architecture":"arm64"}}}}]}}"#
    );
    let m = Manifest::parse(idx.as_bytes()).unwrap();
    assert_eq!(m.effective_media_type(), Some(OCI_INDEX));
    assert_eq!(m.manifests[0].digest, d);
    assert_eq!(
        m.manifests[0].platform_parts(),
        Some(("linux".into(), "arm64".into(), None))
    );
    assert!(Manifest::parse(b"{\"schemaVersion\":1}").is_err());
    assert!(Manifest::parse(b"[]").is_err());
    let bad = r#"{"schemaVersion":2,"config":{"mediaType":"x","digest":"sha256:../x","size":1},"layers":[]}"#;
    assert!(Manifest::parse(bad.as_bytes()).is_err());
}

#[test]
fn constants_agree_with_oci_spec() {
    assert_eq!(OCI_MANIFEST, MediaType::ImageManifest.as_ref());
    assert_eq!(OCI_INDEX, MediaType::ImageIndex.as_ref());
    assert_eq!(
        Ok(DOCKER_MANIFEST),
        MediaType::ImageManifest.to_docker_v2s2()
    );
    assert_eq!(Ok(DOCKER_LIST), MediaType::ImageIndex.to_docker_v2s2());
    for t in [OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST] {
        assert!(is_manifest_type(t), "{t}");
    }
    assert!(is_index_type(DOCKER_LIST) && is_index_type(OCI_INDEX));
    assert!(!is_index_type(DOCKER_MANIFEST) && !is_manifest_type("application/json"));
}

#[test]
fn docker_schema2_manifest_and_list() {
    let d = d();
    let m = format!(
        r#"{{"schemaVersion":2,"mediaType":"{DOCKER_MANIFEST}",
        "config":{{"mediaType":"application/vnd.docker.container.image.v1+json","size":1,"digest":"{d}"}},
        "layers":[{{"mediaType":"application/vnd.docker.image.rootfs.diff.tar.gzip","size":1,"digest":"{d}"}},
                  {{"mediaType":"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip","size":1,"digest":"{d}","urls":["https://example.invalid/l"]}}]}}"#
    );
    let m = Manifest::parse(m.as_bytes()).unwrap();
    assert_eq!(m.effective_media_type(), Some(DOCKER_MANIFEST));
    assert_eq!(m.blobs().count(), 3);
    assert_eq!(
        m.layers[1].media_type,
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
    );
    assert_eq!(
        m.referrer_artifact_type().as_deref(),
        Some("application/vnd.docker.container.image.v1+json")
    );
    let list = format!(
        r#"{{"schemaVersion":2,"mediaType":"{DOCKER_LIST}","manifests":[
        {{"mediaType":"{DOCKER_MANIFEST}","size":1,"digest":"{d}","platform":{{"architecture":"arm","os":"linux","variant":"v7","features":["sse4"]}}}},
        {{"mediaType":"{DOCKER_MANIFEST}","size":1,"digest":"{d}","platform":{{"architecture":"amd64","os":"windows","os.version":"10.0.17763.1","os.features":["win32k"]}}}}]}}"#
    );
    let l = Manifest::parse(list.as_bytes()).unwrap();
    assert_eq!(l.effective_media_type(), Some(DOCKER_LIST));
    assert_eq!(
        l.manifests[0].platform_parts(),
        Some(("linux".into(), "arm".into(), Some("v7")))
    );
    assert_eq!(l.manifests[1].platform_parts().unwrap().0, "windows");
}

#[test]
fn v1_1_fields_and_unknown_fields() {
    let d = d();
    let m = format!(
        r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","artifactType":"application/vnd.example.sbom",
        "config":{{"mediaType":"application/vnd.oci.empty.v1+json","size":2,"digest":"{d}","data":"e30="}},
        "layers":[{{"mediaType":"text/plain","size":1,"digest":"{d}","x-unknown":{{"deep":[1,2]}}}}],
        "subject":{{"mediaType":"{OCI_MANIFEST}","size":7,"digest":"{d}"}},
        "annotations":{{"b":"2","a":"1"}},"futureField":true}}"#
    );
    let m = Manifest::parse(m.as_bytes()).unwrap();
    assert_eq!(
        m.referrer_artifact_type().as_deref(),
        Some("application/vnd.example.sbom")
    );
    assert_eq!(m.subject.as_ref().map(|s| s.size), Some(7));
    let keys: Vec<_> = m.annotations.unwrap().into_keys().collect();
    assert_eq!(keys, ["a", "b"]);
    // An index with an artifactType and subject, no mediaType field, and
    // an empty manifests list is still an index.
    let i = format!(
        r#"{{"schemaVersion":2,"artifactType":"a/b","manifests":[],"subject":{{"mediaType":"{OCI_MANIFEST}","size":7,"digest":"{d}"}}}}"#
    );
    let i = Manifest::parse(i.as_bytes()).unwrap();
    assert_eq!(i.effective_media_type(), Some(OCI_INDEX));
    assert_eq!(i.artifact_type.as_deref(), Some("a/b"));
    assert!(i.subject.is_some());
}

#[test]
fn required_fields_follow_the_spec() {
    let d = d();
    // image-spec: `layers` and `config` are REQUIRED in an image manifest,
    // `manifests` in an index, mediaType/digest/size in a descriptor.
    for body in [
        format!(
            r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","config":{{"mediaType":"a","size":1,"digest":"{d}"}}}}"#
        ),
        format!(r#"{{"schemaVersion":2,"mediaType":"{OCI_MANIFEST}","layers":[]}}"#),
        format!(r#"{{"schemaVersion":2,"mediaType":"{DOCKER_LIST}"}}"#),
        format!(r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"a","digest":"{d}"}}]}}"#),
        format!(
            r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"a","size":-1,"digest":"{d}"}}]}}"#
        ),
    ] {
        assert!(Manifest::parse(body.as_bytes()).is_err(), "{body}");
    }
    // oci-spec accepts any well-formed algorithm; airlock stores sha256 and
    // sha512 only, so another one is refused with its digest named.
    let md5 = r#"{"schemaVersion":2,"manifests":[{"mediaType":"a","size":1,"digest":"md5:d41d8cd98f00b204e9800998ecf8427e"}]}"#;
    let e = Manifest::parse(md5.as_bytes()).unwrap_err();
    assert!(e.0.contains("md5:d41d8cd98f00b204e9800998ecf8427e"), "{e}");
}

#[test]
fn other_manifest_types_are_read_tolerantly() {
    let d = d();
    // The withdrawn OCI artifact manifest: `blobs`, no `config`/`layers`.
    let a = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.artifact.manifest.v1+json","artifactType":"x/y",
        "blobs":[{{"mediaType":"a","size":1,"digest":"{d}"}}],"subject":{{"mediaType":"{OCI_MANIFEST}","size":3,"digest":"{d}"}}}}"#
    );
    let m = Manifest::parse(a.as_bytes()).unwrap();
    assert_eq!(m.artifact_type.as_deref(), Some("x/y"));
    assert_eq!(m.subject.as_ref().map(|s| s.size), Some(3));
    assert_eq!(m.blobs().count(), 0);
    // A custom type shaped like an image manifest but missing `layers`.
    let c = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/x-custom","config":{{"mediaType":"a","size":1,"digest":"{d}"}}}}"#
    );
    let m = Manifest::parse(c.as_bytes()).unwrap();
    assert_eq!(m.effective_media_type(), Some("application/x-custom"));
    // Neither a mediaType nor a shape: nothing to infer.
    let m = Manifest::parse(br#"{"schemaVersion":2}"#).unwrap();
    assert_eq!(m.effective_media_type(), None);
}

#[test]
fn image_layout_files() {
    assert_eq!(layout_header(), br#"{"imageLayoutVersion":"1.0.0"}"#);
    let mut desc = Descriptor::new(OCI_MANIFEST, d(), 9);
    desc.annotations = Some(BTreeMap::from([(REF_NAME.into(), "r:t".into())]));
    let bytes = layout_index(std::slice::from_ref(&desc));
    let back = Manifest::parse(&bytes).unwrap();
    assert_eq!(back.media_type.as_deref(), Some(OCI_INDEX));
    assert_eq!(back.manifests, vec![desc]);
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["manifests"][0]["annotations"][REF_NAME], "r:t");
}
