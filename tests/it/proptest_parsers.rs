//! Property tests (proptest, bounded: 256 cases per property) over the
//! parsers that read untrusted input: the bundle reader, the manifest
//! parser, repository names, references, digests, `Range` headers,
//! `Content-Range` of uploads, `/v2` paths, the serve config and
//! cleartext-signed documents with one character changed. Each
//! property states what must hold for every input: no panic, and a
//! round trip (parse ∘ print = identity) where the type prints itself.
//! An input that ever fails is added to `regressions()` below.

use std::str::FromStr;

use airlock::digest::Digest;
use airlock::names::{Reference, RepositoryName};
use airlock::oci::Manifest;
use airlock::registry::range::RangeOutcome;
use airlock::registry::routes::Route;
use airlock::registry::uploads::parse_content_range;
use axum::http::{HeaderMap, HeaderValue, header};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Strings close to the grammars: their alphabets plus separators.
fn near(alphabet: &'static str, max: usize) -> impl Strategy<Value = String> {
    let chars: Vec<char> = alphabet.chars().collect();
    proptest::collection::vec(proptest::sample::select(chars), 0..max)
        .prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn repository_names_round_trip(s in prop_oneof![
        near("abz09._-/", 40),
        any::<String>(),
    ]) {
        if let Ok(n) = RepositoryName::from_str(&s) {
            prop_assert_eq!(n.to_string(), s.clone());
            prop_assert!(s.len() <= 255 || n.as_str().len() == s.len());
            prop_assert!(!s.starts_with('/') && !s.ends_with('/') && !s.contains("//"));
        }
    }

    #[test]
    fn references_and_digests_round_trip(s in prop_oneof![
        near("sha256:0123456789abcdefAZ_.-", 80),
        "sha256:[0-9a-f]{64}",
        "sha512:[0-9a-f]{128}",
        any::<String>(),
    ]) {
        if let Ok(r) = Reference::from_str(&s) {
            prop_assert_eq!(r.to_string(), s.clone());
        }
        if let Ok(d) = Digest::from_str(&s) {
            prop_assert_eq!(d.to_string(), s.clone());
            prop_assert_eq!(d.hex().len(), d.algorithm().hex_len());
        }
    }

    #[test]
    fn v2_paths_never_panic(s in prop_oneof![
        near("/v2abmnifest_sblouptgrfz0-9:.", 80),
        "/v2/[a-z/]{1,20}/(manifests|blobs|tags|referrers|blobs/uploads)/[a-z0-9:]{0,70}",
        any::<String>(),
    ]) {
        if let Ok(route) = Route::parse(&s)
            && let Some(name) = route.repository()
        {
            prop_assert!(s.contains(name.as_str()));
        }
    }

    #[test]
    fn ranges_stay_inside_the_representation(
        spec in prop_oneof![
            "bytes=[0-9]{0,4}-[0-9]{0,4}",
            "bytes=-[0-9]{1,4}",
            near("bytes=0123456789-, ", 30),
            any::<String>(),
        ],
        size in 0u64..5000,
    ) {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&spec) {
            h.insert(header::RANGE, v);
        }
        match RangeOutcome::evaluate(&h, size, "\"e\"") {
            RangeOutcome::Partial { start, end } => {
                prop_assert!(start <= end && end < size, "{} of {}: {}-{}", spec, size, start, end);
            }
            RangeOutcome::Full | RangeOutcome::Unsatisfiable => {}
        }
    }

    #[test]
    fn content_ranges_parse_exactly(
        s in prop_oneof![near("0123456789- /*bytes", 30), any::<String>()],
        a in any::<u64>(),
        b in any::<u64>(),
    ) {
        // Syntax only (order is the upload's check): any input is safe,
        // and `a-b` is read back exactly.
        let _ = parse_content_range(&s);
        prop_assert_eq!(parse_content_range(&format!("{a}-{b}")), Some((a, b)));
        prop_assert_eq!(parse_content_range(&format!("bytes {a}-{b}/*")), Some((a, b)));
    }

    #[test]
    fn manifests_never_panic(bytes in prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        manifest_like().prop_map(String::into_bytes),
    ]) {
        if let Ok(m) = Manifest::parse(&bytes) {
            for d in m.blobs() {
                prop_assert!(!d.digest.hex().is_empty());
            }
        }
    }

    #[test]
    fn bundles_of_noise_are_refused(bytes in prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..4096),
        tar_of(proptest::collection::vec((near("abc./_-", 20), proptest::collection::vec(any::<u8>(), 0..256)), 0..4)),
    ]) {
        prop_assert!(airlock::bundle::import::inspect(&bytes[..]).is_err());
    }

    #[test]
    fn the_whole_bundle_reader_refuses_noise(bytes in prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048),
        tar_of(proptest::collection::vec((near("abc./_-", 20), proptest::collection::vec(any::<u8>(), 0..256)), 0..4)),
    ]) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let verified = rt.block_on(airlock::bundle::import::verify(
            airlock::bundle::trust::Verifier::keyring(keyring()),
            Box::new(std::io::Cursor::new(bytes)),
            indicatif::ProgressBar::hidden(),
        ));
        prop_assert!(verified.is_err());
    }

    #[test]
    fn tampered_signed_documents_are_refused_in_words(
        at in any::<proptest::sample::Index>(),
        with in proptest::sample::select(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=".chars().collect::<Vec<_>>()
        ),
    ) {
        let doc = signed_document();
        let mut chars: Vec<char> = doc.chars().collect();
        let i = at.index(chars.len());
        prop_assume!(chars[i] != with && chars[i] != '\n');
        chars[i] = with;
        let tampered: String = chars.into_iter().collect();
        match keyring().verify_cleartext(&tampered) {
            Ok(v) => prop_assert_eq!(v.text, "{\"id\": \"proptest\"}\n", "a change that is not one"),
            Err(e) => {
                let e = e.to_string();
                prop_assert!(!e.contains("assertion failed") && !e.contains("left:"), "{}", e);
            }
        }
    }

    #[test]
    fn configs_never_panic(s in prop_oneof![
        any::<String>(),
        config_like(),
    ]) {
        let _ = airlock::config::parse(&s, "proptest");
    }

    #[test]
    fn config_limits_round_trip(
        conns in 1u64..1_000_000,
        header in 1u64..100_000,
        size in 1u64..1024,
        unit in proptest::sample::select(vec!["", "K", "M", "G"]),
        push in any::<bool>(),
    ) {
        let text = format!(
            "[limits]\nmax_connections = {conns}\nheader_timeout_secs = {header}\nmax_blob_size = \"{size}{unit}\"\n[registry]\nallow_push = {push}\n"
        );
        let s = airlock::config::parse(&text, "proptest").unwrap();
        let shift = match unit { "K" => 10, "M" => 20, "G" => 30, _ => 0 };
        prop_assert_eq!(s.limits.max_connections.map(|n| n.get()), Some(conns));
        prop_assert_eq!(s.limits.header_timeout_secs.map(|n| n.get()), Some(header));
        prop_assert_eq!(s.limits.max_blob_size.map(|b| b.0), Some(size << shift));
        prop_assert_eq!(s.registry.allow_push, Some(push));
    }
}

/// One fresh ed25519 key pair, armored (secret, public), made once.
fn key_pair() -> &'static (String, String) {
    static KEYS: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    KEYS.get_or_init(|| airlock::bundle::sign::generate_key("Proptest <p@example.org>").unwrap())
}

/// A keyring of [`key_pair`]'s public key.
fn keyring() -> airlock::bundle::sign::Keyring {
    airlock::bundle::sign::Keyring::from_armored(&key_pair().1).unwrap()
}

/// A small JSON document cleartext-signed with [`key_pair`] (made once).
fn signed_document() -> &'static str {
    static DOC: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DOC.get_or_init(|| {
        airlock::bundle::sign::SigningKey::from_armored(&key_pair().0)
            .unwrap()
            .clearsign("{\"id\": \"proptest\"}\n")
            .unwrap()
    })
}

fn manifest_like() -> impl Strategy<Value = String> {
    (
        proptest::sample::select(vec![
            "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.oci.image.index.v1+json",
            "application/vnd.docker.distribution.manifest.v2+json",
            "x",
        ]),
        "sha256:[0-9a-f]{0,64}",
        0u64..u64::MAX,
        0usize..3,
    )
        .prop_map(|(mt, d, size, layers)| {
            let desc = format!(r#"{{"mediaType":"{mt}","digest":"{d}","size":{size}}}"#);
            let layers = vec![desc.clone(); layers].join(",");
            format!(
                r#"{{"schemaVersion":2,"mediaType":"{mt}","config":{desc},"layers":[{layers}],"manifests":[{layers}]}}"#
            )
        })
}

fn config_like() -> impl Strategy<Value = String> {
    (
        proptest::sample::select(vec![
            "listen",
            "plain_http",
            "[tls]",
            "[[user]]",
            "[limits]",
            "[auth]",
            "name",
            "roles",
            "cert",
            "max_blob_size",
            "x",
        ]),
        proptest::sample::select(vec![
            "= 1",
            "= \"a\"",
            "= [\"admin\"]",
            "= true",
            "= \"0\"",
            "= -1",
            "= { a = 1 }",
            "",
        ]),
    )
        .prop_map(|(k, v)| format!("{k} {v}\n"))
}

fn tar_of(
    entries: impl Strategy<Value = Vec<(String, Vec<u8>)>>,
) -> impl Strategy<Value = Vec<u8>> {
    entries.prop_map(|entries| {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            let name = if name.is_empty() {
                "x".to_string()
            } else {
                name
            };
            let _ = b.append_data(&mut h, name, &data[..]);
        }
        b.into_inner().unwrap_or_default()
    })
}

/// Inputs that once failed a property, kept as fixed cases.
#[test]
fn regressions() {
    // `Basic Og==`-style empty parts and lone separators.
    for s in ["", "/", "a//b", "a/", "-a", "A"] {
        assert!(RepositoryName::from_str(s).is_err(), "{s:?}");
    }
    assert!(Digest::from_str("sha256:").is_err());
    assert!(airlock::config::parse("[limits]\nmax_connections = 0\n", "t").is_err());
    assert!(airlock::config::parse("[limits]\nmax_blob_size = \"0K\"\n", "t").is_err());
    assert!(airlock::config::parse("listen = []\n", "t").is_ok());
}
