//! Signatures made as cosign makes them (ECDSA P-256 over SHA-256, DER;
//! Ed25519) with the RustCrypto signers, checked by [`check`].

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use p256::pkcs8::EncodePublicKey;

use super::*;

fn p256_key(seed: u8) -> (p256::ecdsa::SigningKey, PublicKey) {
    let sk = p256::ecdsa::SigningKey::from_slice(&[seed; 32]).unwrap();
    let pem = sk
        .verifying_key()
        .to_public_key_pem(p256::pkcs8::LineEnding::LF)
        .unwrap();
    (sk, PublicKey::parse(&pem, Path::new("p256.pub")).unwrap())
}

fn payload(digest: &Digest) -> Vec<u8> {
    format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"example.org/app"}},"image":{{"docker-manifest-digest":"{digest}"}},"type":"cosign container image signature"}},"optional":null}}"#
    )
    .into_bytes()
}

/// The signature image for `payload` signed as `sig` (raw bytes).
fn signatures(payload: &[u8], sig: &[u8]) -> Signatures {
    let pd = Digest::sha256_of(payload);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": Digest::sha256_of(b"{}").to_string(), "size": 2},
        "layers": [{"mediaType": SIMPLE_SIGNING, "digest": pd.to_string(), "size": payload.len(),
                    "annotations": {SIGNATURE_ANNOTATION:
                        base64::engine::general_purpose::STANDARD.encode(sig)}}]
    });
    Signatures {
        manifest: serde_json::to_vec(&manifest).unwrap(),
        payloads: BTreeMap::from([(pd, payload.to_vec())]),
    }
}

fn keys(k: &[PublicKey]) -> Signers {
    Signers {
        keys: k.to_vec(),
        keyless: None,
    }
}

fn simple(s: Signatures) -> Found {
    Found {
        simple: Some(s),
        bundles: Vec::new(),
    }
}

fn p256_sign(sk: &p256::ecdsa::SigningKey, msg: &[u8]) -> Vec<u8> {
    use p256::ecdsa::signature::Signer;
    let s: p256::ecdsa::DerSignature = sk.sign(msg);
    s.as_bytes().to_vec()
}

#[test]
fn a_signature_by_a_trusted_key_over_the_digest_counts() {
    let d = Digest::sha256_of(b"image");
    let (sk, pk) = p256_key(7);
    let p = payload(&d);
    let got = check(
        &d,
        &keys(std::slice::from_ref(&pk)),
        &simple(signatures(&p, &p256_sign(&sk, &p))),
    );
    assert_eq!(got, Ok(pk.id.clone()));
    assert!(pk.id.starts_with("sha256:") && pk.id.len() == 23);
}

#[test]
fn ed25519_keys_sign_the_payload_itself() {
    use ed25519_dalek::Signer as _;
    use ed25519_dalek::pkcs8::EncodePublicKey as _;
    let d = Digest::sha256_of(b"image");
    let sk = ed25519_dalek::SigningKey::from_bytes(&[3; 32]);
    let pem = sk
        .verifying_key()
        .to_public_key_pem(ed25519_dalek::pkcs8::spki::der::pem::LineEnding::LF)
        .unwrap();
    let pk = PublicKey::parse(&pem, Path::new("ed.pub")).unwrap();
    let p = payload(&d);
    let sig = sk.sign(&p).to_bytes();
    assert!(check(&d, &keys(&[pk]), &simple(signatures(&p, &sig))).is_ok());
}

#[test]
fn each_way_of_failing_names_what_was_found() {
    let d = Digest::sha256_of(b"image");
    let (sk, pk) = p256_key(7);
    let (other_sk, _) = p256_key(9);
    let p = payload(&d);
    let signers = keys(&[pk]);
    let err = |found: Option<&Signatures>| {
        let found = Found {
            simple: found.cloned(),
            bundles: Vec::new(),
        };
        check(&d, &signers, &found).unwrap_err().0
    };
    assert!(err(None).contains(&signature_tag(&d)), "{}", err(None));
    let wrong_key = signatures(&p, &p256_sign(&other_sk, &p));
    assert!(err(Some(&wrong_key)).contains("no trusted key verifies"));
    let other = payload(&Digest::sha256_of(b"other"));
    let over_other = signatures(&other, &p256_sign(&sk, &other));
    assert!(err(Some(&over_other)).contains("over another digest"));
    // The payload changed after signing (its descriptor follows it).
    let mut tampered = p.clone();
    tampered[10] ^= 1;
    let t = signatures(&tampered, &p256_sign(&sk, &p));
    assert!(err(Some(&t)).contains("no trusted key verifies"));
    // The payload bytes do not match the layer's digest.
    let mut swapped = signatures(&p, &p256_sign(&sk, &p));
    for v in swapped.payloads.values_mut() {
        v.push(b' ');
    }
    assert!(err(Some(&swapped)).contains("does not match its descriptor"));
}

#[test]
fn keys_other_than_p256_and_ed25519_are_refused_by_name() {
    let rsa_like = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----\n";
    let e = PublicKey::parse(rsa_like, Path::new("bad.pub")).unwrap_err();
    assert!(e.to_string().contains("bad.pub"), "{e}");
    let e = PublicKey::parse("hello", Path::new("x.pub")).unwrap_err();
    assert!(e.to_string().contains("x.pub"), "{e}");
}

#[test]
fn site_rules_cover_repositories_by_glob() {
    let dir = tempfile::tempdir().unwrap();
    let sk = p256::ecdsa::SigningKey::from_slice(&[5; 32]).unwrap();
    let pem = sk
        .verifying_key()
        .to_public_key_pem(p256::pkcs8::LineEnding::LF)
        .unwrap();
    let path = dir.path().join("k.pub");
    std::fs::write(&path, pem).unwrap();
    let rules = [SiteRule {
        repositories: vec!["stacks/**".into()],
        keys: vec![path],
        each_platform: false,
        ..Default::default()
    }];
    let policy = SitePolicy::load(&rules).unwrap();
    assert_eq!(policy.rules_for("stacks/cflinuxfs4").count(), 1);
    assert_eq!(policy.rules_for("apps/web").count(), 0);
    let missing = [SiteRule {
        repositories: vec!["**".into()],
        keys: vec![dir.path().join("absent.pub")],
        each_platform: false,
        ..Default::default()
    }];
    let e = format!("{:#}", SitePolicy::load(&missing).unwrap_err());
    assert!(
        e.contains("import.policy[0]") && e.contains("absent.pub"),
        "{e}"
    );
}

/// A cosign v3 bundle (DSSE, in-toto statement of predicate type
/// [`sigstore::SIGN_PREDICATE`] over `subject`), signed by `sk`, with a
/// public key hint as `cosign sign --key` writes it.
fn dsse_bundle(sk: &p256::ecdsa::SigningKey, subject: &Digest, predicate: &str) -> Vec<u8> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let statement = serde_json::json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "example.org/app", "digest": {"sha256": subject.hex()}}],
        "predicateType": predicate, "predicate": {}
    });
    let payload = serde_json::to_vec(&statement).unwrap();
    let t = "application/vnd.in-toto+json";
    let mut pae = format!("DSSEv1 {} {t} {} ", t.len(), payload.len()).into_bytes();
    pae.extend_from_slice(&payload);
    serde_json::to_vec(&serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {"publicKey": {"hint": "k"}, "tlogEntries": []},
        "dsseEnvelope": {"payload": b64(&payload), "payloadType": t,
                         "signatures": [{"sig": b64(&p256_sign(sk, &pae)), "keyid": ""}]}
    }))
    .unwrap()
}

fn bundles(b: Vec<u8>) -> Found {
    Found {
        simple: None,
        bundles: vec![b],
    }
}

#[test]
fn a_sigstore_bundle_signed_by_a_trusted_key_counts_and_others_name_what_they_are() {
    use sha2::Digest as _;
    let d = Digest::sha256_of(b"image");
    let (sk, pk) = p256_key(7);
    let (other, _) = p256_key(9);
    let signers = keys(std::slice::from_ref(&pk));
    let ok = dsse_bundle(&sk, &d, sigstore::SIGN_PREDICATE);
    assert_eq!(check(&d, &signers, &bundles(ok.clone())), Ok(pk.id.clone()));
    let err = |b: Vec<u8>| check(&d, &signers, &bundles(b)).unwrap_err().0;
    assert!(err(dsse_bundle(&other, &d, sigstore::SIGN_PREDICATE)).contains("no trusted key"));
    let e = err(dsse_bundle(
        &sk,
        &Digest::sha256_of(b"x"),
        sigstore::SIGN_PREDICATE,
    ));
    assert!(e.contains("over another digest"), "{e}");
    let e = err(dsse_bundle(&sk, &d, "https://slsa.dev/provenance/v1"));
    assert!(
        e.contains("an attestation (https://slsa.dev/provenance/v1)"),
        "{e}"
    );
    // The payload changed after signing: the envelope's signature fails.
    let mut v: serde_json::Value = serde_json::from_slice(&ok).unwrap();
    let p = v["dsseEnvelope"]["payload"].as_str().unwrap().to_string();
    let mut raw = base64::engine::general_purpose::STANDARD.decode(p).unwrap();
    raw.push(b' ');
    v["dsseEnvelope"]["payload"] = base64::engine::general_purpose::STANDARD
        .encode(&raw)
        .into();
    assert!(err(serde_json::to_vec(&v).unwrap()).contains("no trusted key"));
    // A message signature over the digest (ECDSA over the prehash).
    use p256::ecdsa::signature::hazmat::PrehashSigner;
    let prehash = sha2::Sha256::digest(b"image");
    let sig: p256::ecdsa::Signature = sk.sign_prehash(&prehash).unwrap();
    let ms = serde_json::json!({
        "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.2",
        "verificationMaterial": {"publicKey": {"hint": "k"}},
        "messageSignature": {"messageDigest": {"algorithm": "SHA2_256",
            "digest": base64::engine::general_purpose::STANDARD.encode(prehash)},
            "signature": base64::engine::general_purpose::STANDARD.encode(sig.to_der().as_bytes())}
    });
    assert_eq!(
        check(&d, &signers, &bundles(serde_json::to_vec(&ms).unwrap())),
        Ok(pk.id.clone())
    );
    // A keyless bundle where the policy names only keys.
    let mut keyless = ok.clone();
    let mut v: serde_json::Value = serde_json::from_slice(&keyless).unwrap();
    v["verificationMaterial"] = serde_json::json!({"certificate": {"rawBytes": "AAAA"}});
    keyless = serde_json::to_vec(&v).unwrap();
    assert!(err(keyless).contains("where the policy names only keys"));
    assert!(err(b"{".to_vec()).contains("does not parse"));
}

#[test]
fn keyless_policies_need_a_trusted_root_and_one_subject_and_one_issuer() {
    let dir = tempfile::tempdir().unwrap();
    let id = |subject: Option<&str>, subject_regex: Option<&str>| Identity {
        subject: subject.map(str::to_string),
        subject_regex: subject_regex.map(str::to_string),
        issuer: Some("https://issuer.example.org".into()),
        issuer_regex: None,
    };
    let err = |p: Policy| format!("{:#}", p.load(dir.path()).unwrap_err());
    let no_root = Policy {
        identities: vec![id(Some("a@example.org"), None)],
        ..Default::default()
    };
    assert!(err(no_root).contains("no trusted_root"));
    let root = dir.path().join("trusted_root.json");
    std::fs::write(&root, r#"{"mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1", "tlogs": [], "certificateAuthorities": []}"#).unwrap();
    let empty_root = Policy {
        identities: vec![id(Some("a@example.org"), None)],
        trusted_root: Some(root.clone()),
        ..Default::default()
    };
    let e = err(empty_root);
    assert!(
        e.contains("trusted_root.json") && e.contains("at least one"),
        "{e}"
    );
    let both = Policy {
        identities: vec![id(Some("a@example.org"), Some("^a"))],
        trusted_root: Some(root.clone()),
        ..Default::default()
    };
    assert!(err(both).contains("identities[0]: give exactly one of subject and subject_regex"));
    let bad_regex = id(None, Some("(")).compile().unwrap_err();
    assert!(
        bad_regex.to_string().contains("subject_regex"),
        "{bad_regex}"
    );
    assert!(err(Policy::default()).contains("no keys and no identities"));
}

/// RFC 6962 §2.1's recursive definitions: the tree hash of leaf hashes
/// and the audit path of leaf `m`, to check [`tlog::root_from_path`]
/// (RFC 9162's iterative verification) against.
fn mth(leaves: &[[u8; 32]]) -> [u8; 32] {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let k = leaves.len().next_power_of_two() / 2;
    let mut h = <sha2::Sha256 as sha2::Digest>::new();
    sha2::Digest::update(&mut h, [1u8]);
    sha2::Digest::update(&mut h, mth(&leaves[..k]));
    sha2::Digest::update(&mut h, mth(&leaves[k..]));
    sha2::Digest::finalize(h).into()
}

fn audit_path(m: usize, leaves: &[[u8; 32]]) -> Vec<Vec<u8>> {
    if leaves.len() == 1 {
        return vec![];
    }
    let k = leaves.len().next_power_of_two() / 2;
    if m < k {
        let mut p = audit_path(m, &leaves[..k]);
        p.push(mth(&leaves[k..]).to_vec());
        p
    } else {
        let mut p = audit_path(m - k, &leaves[k..]);
        p.push(mth(&leaves[..k]).to_vec());
        p
    }
}

#[test]
fn inclusion_proofs_lead_to_the_root_for_every_leaf_of_every_small_tree() {
    use sha2::Digest as _;
    for size in 1..=17usize {
        let leaves: Vec<[u8; 32]> = (0..size)
            .map(|i| tlog::leaf_hash(format!("entry {i}").as_bytes()))
            .collect();
        let root = mth(&leaves);
        for m in 0..size {
            let path = audit_path(m, &leaves);
            let (i, n) = (m as u64, size as u64);
            assert_eq!(
                tlog::root_from_path(i, n, leaves[m], &path),
                Some(root),
                "{m} of {size}"
            );
            // Another leaf, index, size or a path one hash short or long does not.
            let other = sha2::Sha256::digest(b"other").into();
            assert_ne!(tlog::root_from_path(i, n, other, &path), Some(root));
            assert_eq!(tlog::root_from_path(n, n, leaves[m], &path), None);
            if !path.is_empty() {
                assert_ne!(
                    tlog::root_from_path(i, n, leaves[m], &path[1..]),
                    Some(root)
                );
            }
            let mut long = path.clone();
            long.push(root.to_vec());
            assert_ne!(tlog::root_from_path(i, n, leaves[m], &long), Some(root));
            if size > 1 && m + 1 < size {
                assert_ne!(
                    tlog::root_from_path(i + 1, n, leaves[m], &path),
                    Some(root),
                    "{m}+1 of {size}"
                );
            }
        }
    }
}
