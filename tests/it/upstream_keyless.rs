//! Keyless signatures and sigstore bundle referrers (issue 41 §1–2), laid
//! out as cosign lays them out and checked offline against a
//! `trusted_root.json`:
//! - cosign v3's bundle referrer (cosign's `specs/BUNDLE_SPEC.md`): a
//!   manifest with `artifactType` `application/vnd.dev.sigstore.bundle.v0.3+json`
//!   whose subject is the image and whose layer is the bundle: a DSSE
//!   envelope of an in-toto statement (predicate type
//!   `https://sigstore.dev/cosign/sign/v1`, subject the image digest), the
//!   signer's certificate, and a Rekor `dsse` log entry with its signed
//!   entry timestamp and its inclusion proof with the log's checkpoint;
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
    create, create_with, import_with, openssl, push_blob, push_image, push_signature_annotated,
    put_manifest, sign,
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
pub(crate) struct Sigstore {
    dir: PathBuf,
    rekor_key: PathBuf,
    log_id: Vec<u8>,
    now: i64,
    /// `trusted_root.json` listing the CAs and the log.
    pub(crate) root: PathBuf,
}

impl Sigstore {
    pub(crate) fn new(dir: &Path) -> Sigstore {
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

    /// An inclusion proof of the entry `body` (base64) as the second of two
    /// entries of the log's tree, with its checkpoint signed by the log key
    /// (or by `forger`); RFC 6962 leaf and node hashes by `sha256sum`.
    fn proof(&self, body: &str, forger: Option<&Path>) -> serde_json::Value {
        let hash = |prefix: u8, parts: &[&[u8]]| {
            let mut v = vec![prefix];
            for p in parts {
                v.extend_from_slice(p);
            }
            hex::decode(sha256_hex(&self.dir, &v)).unwrap()
        };
        let ours = hash(0, &[&unb64(body)]);
        let other = hash(0, &[b"another entry"]);
        let root = hash(1, &[&other, &ours]);
        let note = format!("rekor.example.org - 1\n2\n{}\n", b64(&root));
        let mut sig = self.log_id[..4].to_vec();
        let key = forger.unwrap_or(&self.rekor_key);
        sig.extend(unb64(&sign(&self.dir, key, note.as_bytes(), false)));
        serde_json::json!({"logIndex": "1", "treeSize": "2", "rootHash": b64(&root),
            "hashes": [b64(&other)],
            "checkpoint": {"envelope": format!("{note}\n\u{2014} rekor.example.org {}\n", b64(&sig))}})
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
                    "inclusionProof": self.proof(&body, None),
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
    // A good bundle with its log entry changed by `f`.
    let changed = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&sig.dsse_bundle(&leaf, &good, SIGN_PREDICATE, t, false))
                .unwrap();
        f(&mut v["verificationMaterial"]["tlogEntries"][0]);
        serde_json::to_vec(&v).unwrap()
    };
    // Each way a keyless signature fails.
    let cases: [(&str, &str, Vec<u8>); 9] = [
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
            // The log entry's timestamp signed by the signer, not the log.
            changed(&|e| {
                let body: serde_json::Value =
                    serde_json::from_slice(&unb64(e["canonicalizedBody"].as_str().unwrap()))
                        .unwrap();
                e["inclusionPromise"]["signedEntryTimestamp"] =
                    sig.entry(&body, t, Some(&leaf.key)).1.into();
            }),
        ),
        (
            "app/unproven",
            "without an inclusion proof (a bundle v0.2 or later needs one)",
            changed(&|e| {
                e.as_object_mut().unwrap().remove("inclusionProof");
            }),
        ),
        (
            "app/offpath",
            "inclusion proof (index 1 of 2) does not lead to its root hash",
            changed(&|e| e["inclusionProof"]["hashes"][0] = b64(&[7u8; 32]).into()),
        ),
        (
            "app/checkpoint",
            "checkpoint the log's key does not sign",
            changed(&|e| {
                let body = e["canonicalizedBody"].as_str().unwrap().to_string();
                e["inclusionProof"] = sig.proof(&body, Some(&leaf.key));
            }),
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
    let served = served_bundle(&server.addr, "app/keyless", &good);
    assert_eq!(served, good_bundle);
}

/// The sigstore bundle `addr` serves for `repo@digest` where cosign looks
/// for it: the one referrer the referrers API lists with the bundle's
/// artifact type (filtered by the server, and checked here), its layer.
fn served_bundle(addr: &str, repo: &str, digest: &str) -> Vec<u8> {
    let get = |path: &str| {
        let (status, _, body) = http(addr, "GET", path, &[]).unwrap();
        assert_eq!(status, 200, "{path}");
        body
    };
    let artifact = BUNDLE_TYPE.replace('/', "%2F").replace('+', "%2B");
    let index = get(&format!(
        "/v2/{repo}/referrers/{digest}?artifactType={artifact}"
    ));
    let index: serde_json::Value = serde_json::from_slice(&index).unwrap();
    let listed = index["manifests"].as_array().unwrap();
    assert_eq!(listed.len(), 1, "{index}");
    assert_eq!(listed[0]["artifactType"], BUNDLE_TYPE, "{index}");
    let referrer = listed[0]["digest"].as_str().unwrap();
    let m = raw_manifest(addr, &format!("{repo}@{referrer}"));
    let m: serde_json::Value = serde_json::from_slice(&m).unwrap();
    get(&format!(
        "/v2/{repo}/blobs/{}",
        m["layers"][0]["digest"].as_str().unwrap()
    ))
}

/// `tests/fixtures/sigstore-keyless.py` run for `digest` in a new
/// directory `dir/name`: a keyless bundle as sigstore's public-good
/// instance makes it (Fulcio chain, embedded SCT, Rekor entry with its
/// signed entry timestamp and a 7-entry inclusion proof with a signed
/// checkpoint), the trusted root and the client trust config.
fn public_good(dir: &Path, name: &str, digest: &str) -> PathBuf {
    let out = dir.join(name);
    std::fs::create_dir_all(&out).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sigstore-keyless.py");
    let o = std::process::Command::new("python3")
        .arg(script)
        .args([s(&out).as_str(), digest, SUBJECT, ISSUER])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    out
}

/// `sigstore verify identity` (sigstore-python, offline, with the client
/// trust config `trust`) of `digest` by the bundle `bundle`: (success,
/// stdout + stderr).
fn sigstore_verify(trust: &Path, digest: &str, bundle: &Path) -> (bool, String) {
    let o = std::process::Command::new("python3")
        .args(["-m", "sigstore", "--trust-config"])
        .arg(trust)
        .args(["verify", "identity", digest, "--offline", "--bundle"])
        .arg(bundle)
        .args(["--cert-identity", SUBJECT, "--cert-oidc-issuer", ISSUER])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.success(), text)
}

#[test]
fn a_sigstore_client_verifies_keyless_images_inside_the_gap() {
    require_tool("skopeo", "skopeo");
    require_python("sigstore", "sigstore==4.5.1");
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let src = serve(&dir.join("src-data"), &["--allow-push"]);
    let a = src.addr.clone();
    let oci_manifest = "application/vnd.oci.image.manifest.v1+json";
    let good = push_image(dir, &a, "latest", "app/signed:v1");
    let pg = public_good(dir, "pg", &good);
    let bundle = std::fs::read(pg.join("bundle.json")).unwrap();
    push_bundle(dir, &a, "app/signed", &good, oci_manifest, &bundle);
    // The same signature, but the site's root lists another CT log (one
    // that never saw the certificate).
    let other = public_good(dir, "other", &good);
    let mut root: serde_json::Value =
        serde_json::from_slice(&std::fs::read(pg.join("trusted_root.json")).unwrap()).unwrap();
    let theirs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(other.join("trusted_root.json")).unwrap()).unwrap();
    root["ctlogs"] = theirs["ctlogs"].clone();
    let no_ct = dir.join("no-ct.json");
    std::fs::write(&no_ct, serde_json::to_vec(&root).unwrap()).unwrap();
    let trust = pg.join("trust_config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trust).unwrap()).unwrap();
    config["trustedRoot"] = root;
    let no_ct_trust = dir.join("no-ct-trust.json");
    std::fs::write(&no_ct_trust, serde_json::to_vec(&config).unwrap()).unwrap();

    let policy = |root: &Path| {
        format!(
            "policy = {{ trusted_root = {:?}, identities = [{{ subject = {SUBJECT:?}, issuer = {ISSUER:?} }}] }}",
            s(root)
        )
    };
    let img = |extra: &str| {
        image_toml(
            &format!("docker://{a}/app/signed:v1"),
            "app/signed",
            &["v1"],
            extra,
        )
    };
    let (ok, stderr, out) = create(dir, "no-ct", &a, &[img(&policy(&no_ct))]);
    assert!(!ok && !out.exists());
    assert!(
        stderr.contains("SCTs are by no CT log of the trusted root"),
        "{stderr}"
    );
    let (ok, stderr, out) = create(
        dir,
        "good",
        &a,
        &[img(&policy(&pg.join("trusted_root.json")))],
    );
    assert!(ok, "{stderr}");
    let data = dir.join("site");
    let site = site_config(
        dir,
        "site.toml",
        &["app/signed"],
        &pg.join("trusted_root.json"),
        SUBJECT,
    );
    let o = import_with(&data, &site, &out);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A delta made on a new machine (an empty cache) for a site that has
    // the bundle already: the bundle blob is left out of the delta, but
    // the policy still reads it upstream; the delta imports.
    let inv = dir.join("have.json");
    let o = airlock(&["inventory", "--data", &s(&data), "-o", &s(&inv)]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (ok, stderr, delta) = create_with(
        dir,
        "delta",
        &a,
        &[img(&policy(&pg.join("trusted_root.json")))],
        &dir.join("cold-cache"),
        &["--have", &s(&inv)],
    );
    assert!(ok, "{stderr}");
    let o = airlock(&["bundle", "inspect", "--json", &s(&delta)]);
    assert!(o.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let digests = |field: &str| -> Vec<String> {
        doc[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["digest"].as_str().unwrap().to_string())
            .collect()
    };
    let bundle_layer = sha256sum(&pg.join("bundle.json"));
    assert!(!digests("blobs").contains(&bundle_layer), "{doc}");
    assert!(digests("required").contains(&bundle_layer), "{doc}");
    let o = import_with(&data, &site, &delta);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // Inside the gap, sigstore-python verifies what airlock serves: the
    // bundle found through the referrers API, against the image digest
    // airlock reports for the tag.
    let server = serve(&data, &[]);
    let served = raw_manifest(&server.addr, "app/signed:v1");
    let f = dir.join("served-manifest.json");
    std::fs::write(&f, &served).unwrap();
    let digest = sha256sum(&f);
    assert_eq!(digest, good);
    let fetched = served_bundle(&server.addr, "app/signed", &digest);
    let fetched_path = dir.join("fetched.sigstore.json");
    std::fs::write(&fetched_path, &fetched).unwrap();
    let (ok, text) = sigstore_verify(&trust, &digest, &fetched_path);
    assert!(ok, "sigstore verify failed: {text}");
    assert!(
        text.contains(&format!(
            "OK: SHA2_256:{}",
            digest.strip_prefix("sha256:").unwrap()
        )),
        "{text}"
    );
    // The client's checks bite: the bundle does not vouch for another
    // digest, nor under a root whose CT log never saw the certificate.
    let (ok, text) = sigstore_verify(&trust, &unsigned_digest(), &fetched_path);
    assert!(!ok && text.contains("no subject for digest"), "{text}");
    let (ok, text) = sigstore_verify(&no_ct_trust, &digest, &fetched_path);
    assert!(!ok && text.contains("SCT"), "{text}");
}

/// A digest no bundle of the test signed.
fn unsigned_digest() -> String {
    format!("sha256:{}", "ab".repeat(32))
}
