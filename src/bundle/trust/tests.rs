use std::sync::OnceLock;

use super::*;
use crate::bundle::sign::{SigningKey, add_signature, clearsign_all, generate_key};

/// Six keys, made once: (secret, fingerprint, armored public key).
fn keys() -> &'static Vec<(SigningKey, String, String)> {
    static KEYS: OnceLock<Vec<(SigningKey, String, String)>> = OnceLock::new();
    KEYS.get_or_init(|| {
        (0..6)
            .map(|i| {
                let (sec, public) = generate_key(&format!("k{i} <k{i}@example.org>")).unwrap();
                let key = SigningKey::from_armored(&sec).unwrap();
                let fpr = key.fingerprint();
                (key, fpr, public)
            })
            .collect()
    })
}

fn fpr(i: usize) -> String {
    keys()[i].1.clone()
}

/// A trust document: root = keys `root` (threshold `t`), role `apps`
/// (key 3, 1 of 1, `apps/**`), role `release` (keys 4, 5; 2 of 2;
/// `stacks/**`, every stack).
fn doc(version: u64, root: &[usize], t: usize) -> serde_json::Value {
    let mut key_map = serde_json::Map::new();
    for i in root.iter().chain(&[3, 4, 5]) {
        key_map.insert(fpr(*i), keys()[*i].2.clone().into());
    }
    serde_json::json!({
        "format": FORMAT,
        "version": version,
        "keys": key_map,
        "root": {"keys": root.iter().map(|i| fpr(*i)).collect::<Vec<_>>(), "threshold": t},
        "roles": [
            {"name": "apps", "keys": [fpr(3)], "threshold": 1, "repositories": ["apps/**"]},
            {"name": "release", "keys": [fpr(4), fpr(5)], "threshold": 2,
             "repositories": ["stacks/**"], "stacks": ["*"]}
        ]
    })
}

fn signed(v: &serde_json::Value, by: &[usize]) -> String {
    let text = serde_json::to_string_pretty(v).unwrap() + "\n";
    let ks: Vec<&SigningKey> = by.iter().map(|i| &keys()[*i].0).collect();
    clearsign_all(&ks, &text).unwrap()
}

fn bundle(repos: &[&str], stacks: &[&str]) -> BundleDoc {
    let images: Vec<serde_json::Value> = repos
        .iter()
        .map(|r| {
            serde_json::json!({"repository": r, "tags": ["v1"],
                "digest": crate::digest::Digest::sha256_of(r.as_bytes()).to_string(),
                "mediaType": "application/vnd.oci.image.manifest.v1+json", "size": 2})
        })
        .collect();
    let stacks: Vec<serde_json::Value> = stacks
        .iter()
        .map(|s| {
            serde_json::json!({"name": s, "image": format!("stacks/{s}@{}",
                crate::digest::Digest::sha256_of(s.as_bytes()))})
        })
        .collect();
    let empty = crate::digest::Digest::sha256_of(b"").to_string();
    serde_json::from_value(serde_json::json!({
        "format": crate::bundle::format::FORMAT_V1, "id": "b1",
        "created": "2026-12-05T10:00:00Z", "creator": "",
        "images": images, "layout": {"oci-layout": empty, "index.json": empty},
        "blobs": [], "required": [], "stacks": stacks
    }))
    .unwrap()
}

#[test]
fn several_signatures_in_one_document_each_count_once() {
    let v = doc(1, &[0, 1, 2], 2);
    let armored = signed(&v, &[0, 1]);
    let t = TrustDoc::parse(&crate::bundle::sign::unverified_text(&armored).unwrap()).unwrap();
    let ring = t.keyring().unwrap();
    assert_eq!(
        ring.verify_cleartext(&armored).unwrap().signers,
        vec![fpr(0), fpr(1)]
    );
    // A co-signature keeps the others; the same key twice counts once.
    let more = add_signature(&armored, &keys()[2].0).unwrap();
    let again = add_signature(&more, &keys()[2].0).unwrap();
    assert_eq!(
        ring.verify_cleartext(&again).unwrap().signers,
        vec![fpr(0), fpr(1), fpr(2)]
    );
}

#[test]
fn a_first_document_needs_its_own_root_threshold() {
    let v = doc(1, &[0, 1, 2], 2);
    let err = TrustDoc::check_successor(None, &signed(&v, &[0])).unwrap_err();
    assert!(
        matches!(&err, TrustError::Threshold(m) if m.contains("needs 2 signatures") && m.contains("it has 1")),
        "{err}"
    );
    // Keys outside the root (a role's key) do not count toward it.
    assert!(TrustDoc::check_successor(None, &signed(&v, &[0, 3])).is_err());
    let (t, signers) = TrustDoc::check_successor(None, &signed(&v, &[0, 2])).unwrap();
    assert_eq!(t.version, 1);
    assert_eq!(signers, vec![fpr(0), fpr(2)]);
}

#[test]
fn a_rotation_needs_the_old_and_the_new_root_and_a_higher_version() {
    let v1 = doc(1, &[0, 1, 2], 2);
    let (cur, _) = TrustDoc::check_successor(None, &signed(&v1, &[0, 1])).unwrap();
    // Version 2 drops key 0 for key 4... root [1, 2, 4], 2 of 3.
    let v2 = doc(2, &[1, 2, 4], 2);
    // Signed by the new root only (2 and 4): 1 of the old root's 3.
    let err = TrustDoc::check_successor(Some(&cur), &signed(&v2, &[2, 4])).unwrap_err();
    assert!(
        matches!(&err, TrustError::Threshold(m) if m.contains("root keys of version 1")),
        "{err}"
    );
    // Signed by 1 and 2: the old root's threshold and the new one's.
    let (next, _) = TrustDoc::check_successor(Some(&cur), &signed(&v2, &[1, 2])).unwrap();
    assert_eq!(next.version, 2);
    // The same version again, or an older one, is refused.
    let err = TrustDoc::check_successor(Some(&next), &signed(&v2, &[1, 2])).unwrap_err();
    assert!(matches!(err, TrustError::Version(_)), "{err}");
    let err = TrustDoc::check_successor(Some(&next), &signed(&v1, &[0, 1])).unwrap_err();
    assert!(matches!(err, TrustError::Version(_)), "{err}");
    // A key version 2 removed (0) no longer signs anything it lets in.
    let ring = next.keyring().unwrap();
    assert!(
        ring.verify_cleartext(&signed(&v2, &[0]))
            .unwrap_err()
            .to_string()
            .contains("not in the trusted keyring")
    );
}

/// An edit of a trust document's JSON.
type Change = Box<dyn Fn(&mut serde_json::Value)>;

#[test]
fn invalid_documents_name_the_field() {
    let cases: Vec<(Change, &str)> = vec![
        (
            Box::new(|v| v["root"]["threshold"] = 0.into()),
            "root: threshold 0",
        ),
        (
            Box::new(|v| v["root"]["threshold"] = 4.into()),
            "root: threshold 4",
        ),
        (Box::new(|v| v["version"] = 0.into()), "version must be 1"),
        (Box::new(|v| v["format"] = "x".into()), "format \"x\""),
        (
            Box::new(|v| v["roles"][1]["name"] = "apps".into()),
            "roles.apps: the name is used twice",
        ),
        (
            Box::new(|v| v["roles"][0]["keys"] = serde_json::json!(["ABCD"])),
            "roles.apps: key ABCD is not in keys",
        ),
        (
            Box::new(|v| {
                v["roles"][0]["repositories"] = serde_json::json!([]);
            }),
            "roles.apps: names no repositories",
        ),
        (
            Box::new(|v| v["expires"] = "tomorrow".into()),
            "expires \"tomorrow\"",
        ),
        (Box::new(|v| v["extra"] = 1.into()), "unknown field `extra`"),
        (
            Box::new(|v| {
                let k3 = v["keys"][fpr(3)].clone();
                v["keys"][fpr(4)] = k3;
            }),
            "expected exactly the key named",
        ),
    ];
    for (change, want) in cases {
        let mut v = doc(1, &[0, 1, 2], 2);
        change(&mut v);
        let err = TrustDoc::parse(&v.to_string()).unwrap_err().to_string();
        assert!(err.contains(want), "{want}: {err}");
    }
}

#[test]
fn a_bundle_is_let_in_only_within_its_signers_roles() {
    let v = doc(1, &[0, 1, 2], 2);
    let t = TrustDoc::parse(&v.to_string()).unwrap();
    let (apps, rel_a, rel_b) = (fpr(3), fpr(4), fpr(5));
    t.authorize(
        &bundle(&["apps/web", "apps/team/api"], &[]),
        std::slice::from_ref(&apps),
    )
    .unwrap();
    // Outside the apps role: named, and no role at all covers `other/x`.
    let err = t
        .authorize(
            &bundle(&["apps/web", "other/x"], &[]),
            std::slice::from_ref(&apps),
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("repository other/x, which no role"), "{err}");
    // A repository the release role covers, signed by the apps key.
    let err = t
        .authorize(&bundle(&["stacks/bb"], &[]), std::slice::from_ref(&apps))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("repository stacks/bb: role release needs 2 of"),
        "{err}"
    );
    // A stack candidate: one release key is not enough, two are.
    let one = t.authorize(
        &bundle(&["stacks/bb"], &["bb"]),
        std::slice::from_ref(&rel_a),
    );
    assert!(
        one.unwrap_err()
            .to_string()
            .contains("role release needs 2")
    );
    t.authorize(
        &bundle(&["stacks/bb"], &["bb"]),
        &[rel_a.clone(), rel_b.clone()],
    )
    .unwrap();
    // A root key signs trust documents, not bundles.
    assert!(t.authorize(&bundle(&["apps/web"], &[]), &[fpr(0)]).is_err());
    // An empty bundle touches nothing.
    t.authorize(&bundle(&[], &[]), &[fpr(0)]).unwrap();
}

#[test]
fn an_expired_document_refuses_imports() {
    let mut v = doc(1, &[0, 1, 2], 2);
    v["expires"] = "2026-01-01T00:00:00Z".into();
    let t = TrustDoc::parse(&v.to_string()).unwrap();
    let at = |s: &str| OffsetDateTime::parse(s, &Rfc3339).unwrap();
    t.check_expiry(at("2025-12-31T23:59:59Z")).unwrap();
    let err = t.check_expiry(at("2026-01-01T00:00:00Z")).unwrap_err();
    assert!(
        err.to_string().contains("expired at 2026-01-01T00:00:00Z"),
        "{err}"
    );
}
