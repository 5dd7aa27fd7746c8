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
        std::slice::from_ref(&pk),
        Some(&signatures(&p, &p256_sign(&sk, &p))),
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
    assert!(check(&d, &[pk], Some(&signatures(&p, &sig))).is_ok());
}

#[test]
fn each_way_of_failing_names_what_was_found() {
    let d = Digest::sha256_of(b"image");
    let (sk, pk) = p256_key(7);
    let (other_sk, _) = p256_key(9);
    let p = payload(&d);
    let keys = [pk];
    let err = |found: Option<&Signatures>| check(&d, &keys, found).unwrap_err().0;
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
    }];
    let policy = SitePolicy::load(&rules).unwrap();
    assert_eq!(policy.rules_for("stacks/cflinuxfs4").count(), 1);
    assert_eq!(policy.rules_for("apps/web").count(), 0);
    let missing = [SiteRule {
        repositories: vec!["**".into()],
        keys: vec![dir.path().join("absent.pub")],
        each_platform: false,
    }];
    let e = format!("{:#}", SitePolicy::load(&missing).unwrap_err());
    assert!(
        e.contains("import.policy[0]") && e.contains("absent.pub"),
        "{e}"
    );
}
