//! Keyless signatures and sigstore bundle referrers (issue 41 §1–2), laid
//! out as cosign lays them out and checked offline against a
//! `trusted_root.json`:
//! - cosign v3's bundle referrer (cosign's `specs/BUNDLE_SPEC.md`): a
//!   manifest with `artifactType` `application/vnd.dev.sigstore.bundle.v0.3+json`
//!   whose subject is the image and whose layer is the bundle: a DSSE
//!   envelope of an in-toto statement (predicate type
//!   `https://sigstore.dev/cosign/sign/v1`, subject the image digest), the
//!   signer's certificate, and a Rekor `dsse` log entry with its signed
//!   entry timestamp;
//! - cosign 2's keyless tag layout: the `sha256-<hex>.sig` image whose
//!   payload layer carries `dev.sigstore.cosign/certificate` and
//!   `dev.sigstore.cosign/bundle` (a `hashedrekord` entry).
//!
//! The sigstore services are played by `openssl`: a Fulcio-like root and
//! intermediate CA (the certificate's SAN URI is the CI workflow, extension
//! `1.3.6.1.4.1.57264.1.8` the OIDC issuer, code signing usage), a Rekor
//! key signing each entry's timestamp over Rekor's canonical JSON, and
//! every signature (`openssl dgst -sha256 -sign`, DER). The trusted root
//! lists the intermediate and root and the log key, as sigstore's does.

use crate::common;
use crate::upstream_signatures::{
    create, import_with, openssl, push_blob, push_image, push_signature_annotated, put_manifest,
    sign,
};

use std::path::{Path, PathBuf};

use base64::Engine as _;
use common::*;

const SUBJECT: &str =
    "https://github.com/example/base/.github/workflows/release.yml@refs/heads/main";
const ISSUER: &str = "https://token.actions.githubusercontent.com";
const BUNDLE_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .unwrap()
}

fn s(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

/// The DER form of the PEM certificate `crt`, by openssl.
fn cert_der(dir: &Path, crt: &str) -> Vec<u8> {
    let out = dir.join(format!("{crt}.der"));
    openssl(&[
        "x509",
        "-in",
        &s(&dir.join(crt)),
        "-outform",
        "DER",
        "-out",
        &s(&out),
    ]);
    std::fs::read(out).unwrap()
}

/// The sha256 of `bytes` in hex, by `sha256sum`.
fn sha256_hex(dir: &Path, bytes: &[u8]) -> String {
    let f = dir.join("hash.in");
    std::fs::write(&f, bytes).unwrap();
    sha256sum(&f).strip_prefix("sha256:").unwrap().to_string()
}

/// A signer's certificate: its key, PEM and DER.
struct Leaf {
    key: PathBuf,
    pem: String,
    der: Vec<u8>,
}

/// The Fulcio-like CAs and the Rekor-like log of one test.
struct Sigstore {
    dir: PathBuf,
    rekor_key: PathBuf,
    log_id: Vec<u8>,
    now: i64,
    root: PathBuf,
}

impl Sigstore {
    fn new(dir: &Path) -> Sigstore {
        ca::make_ca(dir, "fulcio-root");
        ca::issue(
            dir,
            "fulcio-root",
            "fulcio-inter",
            "sigstore-intermediate",
            "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign\n",
        );
        ca::make_ca(dir, "rogue-root");
        ca::ec_key(dir, "rekor.key");
        let rekor_der = dir.join("rekor.pub.der");
        openssl(&[
            "ec",
            "-in",
            &s(&dir.join("rekor.key")),
            "-pubout",
            "-outform",
            "DER",
            "-out",
            &s(&rekor_der),
        ]);
        let rekor_der = std::fs::read(rekor_der).unwrap();
        let log_id = hex::decode(sha256_hex(dir, &rekor_der)).unwrap();
        let root = dir.join("trusted_root.json");
        let doc = serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{"baseUrl": "https://rekor.example.org", "hashAlgorithm": "SHA2_256",
                "publicKey": {"rawBytes": b64(&rekor_der), "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                              "validFor": {"start": "2021-01-12T11:53:27.000Z"}},
                "logId": {"keyId": b64(&log_id)}}],
            "certificateAuthorities": [{"subject": {"organization": "example", "commonName": "sigstore"},
                "uri": "https://fulcio.example.org",
                "certChain": {"certificates": [
                    {"rawBytes": b64(&cert_der(dir, "fulcio-inter.crt"))},
                    {"rawBytes": b64(&cert_der(dir, "fulcio-root.crt"))}]},
                "validFor": {"start": "2022-04-13T20:06:15.000Z"}}],
            "ctlogs": [], "timestampAuthorities": []
        });
        std::fs::write(&root, serde_json::to_vec_pretty(&doc).unwrap()).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        Sigstore {
            dir: dir.to_path_buf(),
            rekor_key: dir.join("rekor.key"),
            log_id,
            now,
            root,
        }
    }

    /// A certificate for `subject` from `issuer` by the CA `ca`, as Fulcio
    /// issues them (SAN URI, OIDC issuer extension, code signing).
    fn leaf(&self, ca: &str, name: &str, subject: &str, issuer: &str) -> Leaf {
        let ext = format!(
            "subjectAltName=critical,URI:{subject}\nextendedKeyUsage=codeSigning\nkeyUsage=critical,digitalSignature\n1.3.6.1.4.1.57264.1.8=ASN1:UTF8String:{issuer}\n"
        );
        ca::issue(&self.dir, ca, name, "sigstore", &ext);
        Leaf {
            key: self.dir.join(format!("{name}.key")),
            pem: std::fs::read_to_string(self.dir.join(format!("{name}.crt"))).unwrap(),
            der: cert_der(&self.dir, &format!("{name}.crt")),
        }
    }

    /// A Rekor entry for `body` integrated at `time`, its signed entry
    /// timestamp by the log key (or by `forger`): (body b64, SET b64).
    fn entry(
        &self,
        body: &serde_json::Value,
        time: i64,
        forger: Option<&Path>,
    ) -> (String, String) {
        let body = b64(&serde_json::to_vec(body).unwrap());
        let canonical = format!(
            r#"{{"body":"{body}","integratedTime":{time},"logID":"{}","logIndex":42}}"#,
            hex::encode(&self.log_id)
        );
        let set = sign(
            &self.dir,
            forger.unwrap_or(&self.rekor_key),
            canonical.as_bytes(),
            false,
        );
        (body, set)
    }

    /// cosign v3's bundle: `leaf` signs an in-toto statement over
    /// `subject` (a digest `sha256:…`) with `predicate`; logged at `time`.
    /// `tamper` changes the payload after signing.
    fn dsse_bundle(
        &self,
        leaf: &Leaf,
        subject: &str,
        predicate: &str,
        time: i64,
        tamper: bool,
    ) -> Vec<u8> {
        let statement = serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "registry.example.org/app",
                         "digest": {"sha256": subject.strip_prefix("sha256:").unwrap()}}],
            "predicateType": predicate, "predicate": {}
        });
        let mut payload = serde_json::to_vec(&statement).unwrap();
        let t = "application/vnd.in-toto+json";
        let mut pae = format!("DSSEv1 {} {t} {} ", t.len(), payload.len()).into_bytes();
        pae.extend_from_slice(&payload);
        let sig = sign(&self.dir, &leaf.key, &pae, false);
        let envelope = serde_json::json!({"payload": b64(&payload), "payloadType": t,
                                          "signatures": [{"sig": sig, "keyid": ""}]});
        let body = serde_json::json!({"apiVersion": "0.0.1", "kind": "dsse", "spec": {
            "envelopeHash": {"algorithm": "sha256",
                             "value": sha256_hex(&self.dir, &serde_json::to_vec(&envelope).unwrap())},
            "payloadHash": {"algorithm": "sha256", "value": sha256_hex(&self.dir, &payload)},
            "signatures": [{"signature": sig, "verifier": b64(leaf.pem.as_bytes())}]}});
        let (body, set) = self.entry(&body, time, None);
        if tamper {
            payload.extend_from_slice(b" ");
        }
        serde_json::to_vec(&serde_json::json!({
            "mediaType": BUNDLE_TYPE,
            "verificationMaterial": {
                "certificate": {"rawBytes": b64(&leaf.der)},
                "tlogEntries": [{"logIndex": "42", "logId": {"keyId": b64(&self.log_id)},
                    "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                    "integratedTime": time.to_string(),
                    "inclusionPromise": {"signedEntryTimestamp": set},
                    "canonicalizedBody": body}]},
            "dsseEnvelope": {"payload": b64(&payload), "payloadType": t,
                             "signatures": [{"sig": envelope["signatures"][0]["sig"], "keyid": ""}]}
        }))
        .unwrap()
    }

    /// `[[image]]`'s keyless policy for `subject` from [`ISSUER`].
    fn policy(&self, subject: &str, each_platform: bool) -> String {
        format!(
            "policy = {{ trusted_root = {:?}, identities = [{{ subject = {subject:?}, issuer = {ISSUER:?} }}], each_platform = {each_platform} }}",
            s(&self.root)
        )
    }
}

/// Pushes `bundle` to `repo` as cosign v3 does: the bundle blob, the
/// empty config, and a manifest whose subject is `subject` (a manifest of
/// media type `subject_type`), PUT by digest. Returns its digest.
fn push_bundle(
    dir: &Path,
    addr: &str,
    repo: &str,
    subject: &str,
    subject_type: &str,
    bundle: &[u8],
) -> String {
    let layer = push_blob(dir, addr, repo, bundle);
    let empty = push_blob(dir, addr, repo, b"{}");
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": BUNDLE_TYPE,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
        "layers": [{"mediaType": BUNDLE_TYPE, "digest": layer, "size": bundle.len(),
                    "annotations": {"org.opencontainers.image.title": "bundle.sigstore.json"}}],
        "subject": {"mediaType": subject_type, "digest": subject,
                    "size": raw_manifest(addr, &format!("{repo}@{subject}")).len()},
        "annotations": {"dev.sigstore.bundle.content": "dsse-envelope",
                        "dev.sigstore.bundle.predicateType": SIGN_PREDICATE}
    }))
    .unwrap();
    let f = dir.join("referrer.json");
    std::fs::write(&f, &manifest).unwrap();
    let digest = sha256sum(&f);
    put_manifest(addr, repo, &digest, &manifest);
    digest
}

/// A site config with one keyless `[[import.policy]]` rule.
fn site_config(
    dir: &Path,
    name: &str,
    repositories: &[&str],
    root: &Path,
    subject: &str,
) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(
        &p,
        format!(
            "[[import.policy]]\nrepositories = {repositories:?}\ntrusted_root = {:?}\nidentities = [{{ subject_regex = {:?}, issuer = {ISSUER:?} }}]\n",
            s(root),
            format!("^{}$", regex::escape(subject))
        ),
    )
    .unwrap();
    p
}

#[test]
fn keyless_signatures_and_bundle_referrers_are_checked_offline_at_create_and_at_import() {
    require_tool("skopeo", "skopeo");
    require_tool("openssl", "openssl");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let sig = Sigstore::new(dir);
    let src = serve(&dir.join("src-data"), &["--allow-push"]);
    let a = src.addr.clone();
    let leaf = sig.leaf("fulcio-inter", "leaf", SUBJECT, ISSUER);
    let rogue = sig.leaf("rogue-root", "rogue-leaf", SUBJECT, ISSUER);
    let t = sig.now + 60;
    let oci_manifest = "application/vnd.oci.image.manifest.v1+json";
    let push = |repo: &str, r: &str| push_image(dir, &a, r, &format!("{repo}:v1"));

    // Signed as cosign v3 signs, by the trusted workflow.
    let good = push("app/keyless", "latest");
    let good_bundle = sig.dsse_bundle(&leaf, &good, SIGN_PREDICATE, t, false);
    push_bundle(dir, &a, "app/keyless", &good, oci_manifest, &good_bundle);
    // An index signed at the top only.
    let index = push("app/index", "multi");
    let index_type = "application/vnd.oci.image.index.v1+json";
    let ib = sig.dsse_bundle(&leaf, &index, SIGN_PREDICATE, t, false);
    push_bundle(dir, &a, "app/index", &index, index_type, &ib);
    // Each way a keyless signature fails.
    let cases: [(&str, &str, Vec<u8>); 6] = [
        (
            "app/rogue",
            "no certificate authority of the trusted root issued",
            sig.dsse_bundle(&rogue, &good, SIGN_PREDICATE, t, false),
        ),
        (
            "app/late",
            "outside its validity",
            sig.dsse_bundle(&leaf, &good, SIGN_PREDICATE, sig.now + 4 * 86400, false),
        ),
        (
            "app/other",
            "over another digest",
            sig.dsse_bundle(&leaf, &index, SIGN_PREDICATE, t, false),
        ),
        (
            "app/tampered",
            "does not verify",
            sig.dsse_bundle(&leaf, &good, SIGN_PREDICATE, t, true),
        ),
        (
            "app/attested",
            "an attestation (https://slsa.dev/provenance/v1), not a signature",
            sig.dsse_bundle(&leaf, &good, "https://slsa.dev/provenance/v1", t, false),
        ),
        (
            "app/forged",
            "signed entry timestamp the log's key does not verify",
            {
                // The log entry's timestamp signed by the signer, not the log.
                let mut v: serde_json::Value = serde_json::from_slice(&sig.dsse_bundle(
                    &leaf,
                    &good,
                    SIGN_PREDICATE,
                    t,
                    false,
                ))
                .unwrap();
                let e = &mut v["verificationMaterial"]["tlogEntries"][0];
                let body: serde_json::Value =
                    serde_json::from_slice(&unb64(e["canonicalizedBody"].as_str().unwrap()))
                        .unwrap();
                e["inclusionPromise"]["signedEntryTimestamp"] =
                    sig.entry(&body, t, Some(&leaf.key)).1.into();
                serde_json::to_vec(&v).unwrap()
            },
        ),
    ];
    for (repo, _, bundle) in &cases {
        let d = push(repo, "latest");
        push_bundle(dir, &a, repo, &d, oci_manifest, bundle);
    }
    let unsigned = push("app/unsigned", "latest");

    let img = |repo: &str, extra: &str| {
        image_toml(&format!("docker://{a}/{repo}:v1"), repo, &["v1"], extra)
    };
    let trusted = sig.policy(SUBJECT, false);
    let mut refusals: Vec<(String, String, String)> = cases
        .iter()
        .map(|(repo, want, _)| (repo.to_string(), img(repo, &trusted), want.to_string()))
        .collect();
    refusals.push((
        "app/unsigned".into(),
        img("app/unsigned", &trusted),
        format!("app/unsigned:v1 ({unsigned}): no cosign signature"),
    ));
    refusals.push((
        "wrong identity".into(),
        img(
            "app/keyless",
            &sig.policy(
                "https://github.com/example/other/.github/workflows/x.yml@refs/heads/main",
                false,
            ),
        ),
        format!("a signature by {SUBJECT} from {ISSUER}"),
    ));
    refusals.push((
        "platforms".into(),
        img("app/index", &sig.policy(SUBJECT, true)),
        "platform manifest".into(),
    ));
    // A [[stack]]'s policy covers its images, on top of their own.
    refusals.push((
        "stack".into(),
        format!(
            "{}\n[[stack]]\nname = \"fs\"\nimage = \"app/unsigned:v1\"\n{trusted}\n",
            img("app/unsigned", "")
        ),
        format!("app/unsigned:v1 ({unsigned}): no cosign signature"),
    ));
    for (i, (name, image, want)) in refusals.iter().enumerate() {
        let (ok, stderr, out) = create(
            dir,
            &format!("refused-{i}"),
            &a,
            std::slice::from_ref(image),
        );
        assert!(!ok, "{name}: bundle create succeeded");
        assert!(stderr.contains(want.as_str()), "{name}: {stderr}");
        assert!(
            stderr.trim().lines().count() == 1,
            "{name}: not one line: {stderr}"
        );
        assert!(!out.exists(), "{name}: {} written", out.display());
    }

    // cosign 2's keyless tag layout: certificate and hashedrekord entry as
    // annotations of the simple-signing payload layer.
    let legacy = push("app/legacy", "latest");
    let payload = crate::upstream_signatures::payload(&legacy);
    let psig = sign(dir, &leaf.key, &payload, false);
    let body = serde_json::json!({"apiVersion": "0.0.1", "kind": "hashedrekord", "spec": {
        "data": {"hash": {"algorithm": "sha256", "value": sha256_hex(dir, &payload)}},
        "signature": {"content": psig, "publicKey": {"content": b64(leaf.pem.as_bytes())}}}});
    let (body_b64, set) = sig.entry(&body, t, None);
    let rekor_bundle = serde_json::json!({"SignedEntryTimestamp": set, "Payload": {
        "body": body_b64, "integratedTime": t, "logIndex": 42, "logID": hex::encode(&sig.log_id)}});
    push_signature_annotated(
        dir,
        &a,
        "app/legacy",
        &legacy,
        &[(
            payload,
            serde_json::json!({
        "dev.cosignproject.cosign/signature": psig,
        "dev.sigstore.cosign/certificate": leaf.pem,
        "dev.sigstore.cosign/bundle": rekor_bundle.to_string()}),
        )],
    );

    // Passing: the bundle referrer, the index at the top, the tag layout;
    // a regex identity as cosign's --certificate-identity-regexp.
    let regex_policy = format!(
        "policy = {{ trusted_root = {:?}, identities = [{{ subject_regex = \"^https://github.com/example/base/\", issuer = {ISSUER:?} }}] }}",
        s(&sig.root)
    );
    let (ok, stderr, bundle) = create(
        dir,
        "good",
        &a,
        &[
            img("app/keyless", &trusted),
            img("app/index", &regex_policy),
            img("app/legacy", &trusted),
            img("app/unsigned", ""),
            format!("[[stack]]\nname = \"fs\"\nimage = \"app/keyless:v1\"\n{trusted}\n"),
        ],
    );
    assert!(ok, "{stderr}");

    // The site checks again with its own rules: a site trusting another
    // workflow refuses the whole bundle; its own workflow passes.
    let data = dir.join("site");
    let other = site_config(
        dir,
        "other.toml",
        &["app/keyless"],
        &sig.root,
        "https://github.com/example/other/x",
    );
    let o = import_with(&data, &other, &bundle);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains(&format!("app/keyless:v1 ({good})"))
            && err.contains("site's signature policy")
            && err.contains(&format!("a signature by {SUBJECT} from {ISSUER}")),
        "{err}"
    );
    let repos = ["app/keyless", "app/index", "app/legacy"];
    let site = site_config(dir, "site.toml", &repos, &sig.root, SUBJECT);
    let o = import_with(&data, &site, &bundle);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Inside the gap the referrer is where cosign looks: the referrers API
    // of the image lists it with its artifact type, and its layer is the
    // bundle byte for byte.
    let server = serve(&data, &[]);
    let (status, _, body) = http(
        &server.addr,
        "GET",
        &format!("/v2/app/keyless/referrers/{good}"),
        &[],
    )
    .unwrap();
    assert_eq!(status, 200);
    let index: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let listed: Vec<&serde_json::Value> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["artifactType"] == BUNDLE_TYPE)
        .collect();
    assert_eq!(listed.len(), 1, "{index}");
    let m = raw_manifest(
        &server.addr,
        &format!("app/keyless@{}", listed[0]["digest"].as_str().unwrap()),
    );
    let m: serde_json::Value = serde_json::from_slice(&m).unwrap();
    let layer = m["layers"][0]["digest"].as_str().unwrap();
    let (status, _, served) = http(
        &server.addr,
        "GET",
        &format!("/v2/app/keyless/blobs/{layer}"),
        &[],
    )
    .unwrap();
    assert_eq!(status, 200);
    assert_eq!(served, good_bundle);
}
