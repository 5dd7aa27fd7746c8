//! Interoperability of `airlock::bundle::sign` with GnuPG: keys and cleartext signatures go
//! both ways through the real `gpg` binary, each test in its own temporary GNUPGHOME.
//! A missing `gpg` fails the tests (install the Debian package `gnupg`); nothing is skipped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use airlock::bundle::sign::*;

/// JSON with a line starting with "-" (dash-escaped in the document), a line with trailing
/// spaces and one with a trailing tab, and a final newline.
const JSON_WITH_TRAILING_SPACES: &str = "{\n  \"name\": \"bundle\",   \n-1,\n\"tab\": true\t\n}\n";
/// The same text in canonical form: what verification returns.
const JSON_CANONICAL: &str = "{\n  \"name\": \"bundle\",\n-1,\n\"tab\": true\n}\n";
/// A text whose lines look like armor lines; dash-escaping must keep them inside the text.
const ARMOR_LOOKALIKE: &str = "-----BEGIN PGP SIGNATURE-----\n\n-----END PGP SIGNATURE-----\n";

/// A temporary GnuPG home; the agent it started is killed on drop.
struct Gpg {
    home: tempfile::TempDir,
}

impl Gpg {
    fn new() -> Gpg {
        match Command::new("gpg").arg("--version").output() {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!(
                "`gpg --version` failed ({}); install the Debian package `gnupg`",
                out.status
            ),
            Err(e) => panic!("cannot run `gpg` ({e}); install the Debian package `gnupg`"),
        }
        let home = tempfile::Builder::new()
            .prefix("gpg")
            .tempdir()
            .expect("temp GNUPGHOME");
        Gpg { home }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.home.path().join(name)
    }

    /// Runs gpg in batch mode with an empty loopback passphrase; returns the raw output.
    fn run(&self, args: &[&str]) -> Output {
        Command::new("gpg")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--batch", "--yes", "--pinentry-mode", "loopback"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run gpg")
    }

    /// Runs gpg and panics with its stderr unless it exits 0; returns stdout as text.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "gpg {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("gpg output is UTF-8")
    }

    /// Generates a key without passphrase; returns its primary fingerprint.
    fn gen_key(&self, uid: &str, algo: &str, usage: &str) -> String {
        self.ok(&[
            "--passphrase",
            "",
            "--quick-gen-key",
            uid,
            algo,
            usage,
            "never",
        ]);
        self.fingerprint(uid)
    }

    fn fingerprint(&self, uid: &str) -> String {
        let colons = self.ok(&["--with-colons", "--list-keys", uid]);
        colons
            .lines()
            .find(|l| l.starts_with("fpr:"))
            .and_then(|l| l.split(':').nth(9))
            .expect("fingerprint in --with-colons output")
            .to_string()
    }

    fn write(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.path(name);
        std::fs::write(&path, contents).expect("write file");
        path
    }

    fn import(&self, armored: &str) {
        let path = self.write("import.asc", armored);
        self.ok(&["--import", path_str(&path)]);
    }

    /// `gpg --verify` of a file; returns (success, stderr, status-fd output).
    fn verify(&self, path: &Path) -> (bool, String, String) {
        let out = self.run(&["--status-fd", "1", "--verify", path_str(path)]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    /// `gpg --clearsign` of `text` with key `uid`; returns the armored document.
    fn clearsign(&self, uid: &str, text: &str) -> String {
        let input = self.write("to-sign.txt", text);
        let output = self.path("signed.asc");
        self.ok(&[
            "--passphrase",
            "",
            "--local-user",
            uid,
            "--output",
            path_str(&output),
            "--clearsign",
            path_str(&input),
        ]);
        std::fs::read_to_string(output).expect("read gpg output")
    }
}

impl Drop for Gpg {
    fn drop(&mut self) {
        let _ = Command::new("gpgconf")
            .arg("--homedir")
            .arg(self.home.path())
            .args(["--kill", "gpg-agent"])
            .output();
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

fn airlock_key(uid: &str) -> (SigningKey, String) {
    let (secret, public) = generate_key(uid).expect("generate key");
    assert!(secret.starts_with("-----BEGIN PGP PRIVATE KEY BLOCK-----"));
    assert!(public.starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----"));
    (
        SigningKey::from_armored(&secret).expect("load secret key"),
        public,
    )
}

#[test]
fn round_trip_returns_canonical_text_and_signer() {
    let (key, public) = airlock_key("Airlock Test <airlock@example.org>");
    let keyring = Keyring::from_armored(&public).expect("keyring");
    assert_eq!(keyring.fingerprints(), vec![key.fingerprint()]);
    assert_eq!(key.fingerprint().len(), 40);
    assert_eq!(key.fingerprint(), key.fingerprint().to_uppercase());

    let doc = key.clearsign(JSON_WITH_TRAILING_SPACES).expect("clearsign");
    assert!(doc.starts_with("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\n{\n"));
    assert!(doc.contains("\n- -1,\n"), "dash-escaped: {doc}");
    assert!(doc.ends_with("-----END PGP SIGNATURE-----\n"), "{doc}");
    // Trailing whitespace is removed before signing, so the document shows the signed bytes.
    assert!(!doc.contains(" \n") && !doc.contains("\t\n"), "{doc}");

    let verified = keyring.verify_cleartext(&doc).expect("verify");
    assert_eq!(verified.text, JSON_CANONICAL);
    assert_eq!(verified.signer, key.fingerprint());

    // Canonical text (no trailing whitespace) round-trips byte for byte, with or without a
    // final newline, and so does the empty text.
    for text in [JSON_CANONICAL, "{\"a\":1}", "-\n--\n", "", ARMOR_LOOKALIKE] {
        let doc = key.clearsign(text).expect("clearsign");
        let verified = keyring.verify_cleartext(&doc).expect("verify");
        assert_eq!(verified.text, text);
    }

    // CRLF input is signed as LF; a CRLF-transported document still verifies.
    let doc = key.clearsign("a\r\nb\r\n").expect("clearsign");
    assert_eq!(
        keyring.verify_cleartext(&doc).expect("verify").text,
        "a\nb\n"
    );
    let crlf = doc.replace('\n', "\r\n");
    assert_eq!(
        keyring.verify_cleartext(&crlf).expect("verify CRLF").text,
        "a\nb\n"
    );
}

#[test]
fn gpg_verifies_airlock_signature() {
    let gpg = Gpg::new();
    let (key, public) = airlock_key("Airlock Test <airlock@example.org>");
    gpg.import(&public);

    let doc = key.clearsign(JSON_WITH_TRAILING_SPACES).expect("clearsign");
    let signed = gpg.write("airlock.json.asc", &doc);
    let (ok, stderr, status) = gpg.verify(&signed);
    assert!(ok, "gpg --verify failed: {stderr}");
    assert!(stderr.contains("Good signature"), "{stderr}");
    assert!(
        status.contains(&format!("[GNUPG:] VALIDSIG {}", key.fingerprint())),
        "{status}"
    );

    // gpg recovers the same text (it adds the line ending before the signature block).
    let out = gpg.path("recovered.json");
    gpg.ok(&["--output", path_str(&out), "--decrypt", path_str(&signed)]);
    let recovered = std::fs::read_to_string(out).expect("read recovered");
    assert_eq!(
        recovered.trim_end_matches('\n'),
        JSON_CANONICAL.trim_end_matches('\n')
    );

    // Lines that look like armor are dash-escaped; gpg agrees on the signed text.
    let lookalike = key.clearsign(ARMOR_LOOKALIKE).expect("clearsign");
    let (ok, stderr, _) = gpg.verify(&gpg.write("lookalike.asc", &lookalike));
    assert!(ok, "gpg --verify failed: {stderr}");

    // And gpg rejects the document once the text is altered.
    let tampered = gpg.write("tampered.asc", &doc.replace("bundle", "bundlE"));
    let (ok, stderr, _) = gpg.verify(&tampered);
    assert!(!ok && stderr.contains("BAD signature"), "{stderr}");
}

/// The bytes of a cleartext document's signature block (its base64 lines,
/// without the CRC24 line).
fn signature_bytes(doc: &str) -> Vec<u8> {
    use base64::Engine;
    let block = doc
        .split("-----BEGIN PGP SIGNATURE-----\n")
        .nth(1)
        .expect("signature block");
    let b64: String = block
        .lines()
        .skip_while(|l| !l.is_empty())
        .skip(1)
        .take_while(|l| !l.starts_with('=') && !l.starts_with("-----"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64")
}

/// GnuPG 2.2 takes the END line of a checksum-less armor for data when the
/// base64 ends without `=` padding (signature bytes a multiple of 3). Two
/// Ed25519 signatures are 238 bytes, or 237 when one of the four MPIs has a
/// leading zero byte (about one document in 64). Documents signed by two
/// keys at once, and co-signed later, are made until both lengths modulo 3
/// have been seen twice; gpg verifies each with both signatures good.
#[test]
fn gpg_verifies_multi_signed_documents_of_every_length() {
    let gpg = Gpg::new();
    let (a, public_a) = airlock_key("A <a@example.org>");
    let (b, public_b) = airlock_key("B <b@example.org>");
    gpg.import(&public_a);
    gpg.import(&public_b);
    let mut seen = [0usize; 3];
    for round in 0..20_000 {
        // Ed25519 is deterministic: each round signs another text.
        let text = format!("{{\"round\": {round}}}\n");
        let doc = if round % 2 == 0 {
            clearsign_all(&[&a, &b], &text).expect("clearsign_all")
        } else {
            add_signature(&a.clearsign(&text).expect("clearsign"), &b).expect("add_signature")
        };
        let len = signature_bytes(&doc).len();
        if seen[len % 3] >= 2 {
            continue;
        }
        seen[len % 3] += 1;
        let (ok, stderr, status) = gpg.verify(&gpg.write("two.asc", &doc));
        assert!(ok, "gpg --verify of {len} signature bytes: {stderr}\n{doc}");
        assert_eq!(status.matches("[GNUPG:] GOODSIG").count(), 2, "{status}");
        if seen[0] >= 2 && seen[1] >= 2 {
            return;
        }
    }
    panic!("signature lengths modulo 3 seen: {seen:?}");
}

/// gpg makes the key and the signature; airlock verifies with gpg's exported public key.
fn airlock_verifies_gpg_clearsign(algo: &str, usage: &str) {
    let gpg = Gpg::new();
    let uid = "T <t@example.org>";
    let fpr = gpg.gen_key(uid, algo, usage);
    let public = gpg.ok(&["--export", "--armor", uid]);
    let keyring = Keyring::from_armored(&public).expect("keyring from gpg export");
    assert_eq!(keyring.fingerprints(), vec![fpr.clone()]);

    let doc = gpg.clearsign(uid, JSON_WITH_TRAILING_SPACES);
    let verified = keyring
        .verify_cleartext(&doc)
        .expect("verify gpg clearsign");
    // gpg keeps trailing whitespace in the document but does not sign it, and its document
    // has no blank line before the signature: the final newline of the input is not signed.
    assert_eq!(verified.text, JSON_CANONICAL.trim_end_matches('\n'));
    assert_eq!(verified.signer, fpr);

    let altered = doc.replace("bundle", "bundlE");
    assert!(matches!(
        keyring.verify_cleartext(&altered),
        Err(SignError::BadSignature(_))
    ));
}

#[test]
fn airlock_verifies_gpg_ed25519_clearsign() {
    airlock_verifies_gpg_clearsign("ed25519", "sign");
}

#[test]
fn airlock_verifies_gpg_default_rsa3072_clearsign() {
    let gpg = Gpg::new();
    // gpg 2.2's "default" is an rsa3072 sign+certify primary with an rsa3072 encryption subkey.
    let uid = "R <r@example.org>";
    let fpr = gpg.gen_key(uid, "default", "default");
    let colons = gpg.ok(&["--with-colons", "--list-keys", uid]);
    let pub_line = colons
        .lines()
        .find(|l| l.starts_with("pub:"))
        .expect("pub line");
    let fields: Vec<&str> = pub_line.split(':').collect();
    assert_eq!((fields[2], fields[3]), ("3072", "1"), "{pub_line}");

    let keyring = Keyring::from_armored(&gpg.ok(&["--export", "--armor", uid])).expect("keyring");
    let doc = gpg.clearsign(uid, "{\"rsa\": true}\n");
    let verified = keyring.verify_cleartext(&doc).expect("verify");
    assert_eq!(verified.text, "{\"rsa\": true}");
    assert_eq!(verified.signer, fpr);
}

#[test]
fn airlock_verifies_gpg_signing_subkey() {
    let gpg = Gpg::new();
    let uid = "S <s@example.org>";
    let fpr = gpg.gen_key(uid, "ed25519", "cert");
    gpg.ok(&[
        "--passphrase",
        "",
        "--quick-add-key",
        &fpr,
        "ed25519",
        "sign",
        "never",
    ]);
    let keyring = Keyring::from_armored(&gpg.ok(&["--export", "--armor", uid])).expect("keyring");

    let doc = gpg.clearsign(uid, "signed by a subkey\n");
    let verified = keyring
        .verify_cleartext(&doc)
        .expect("verify subkey signature");
    assert_eq!(verified.text, "signed by a subkey");
    assert_eq!(verified.signer, fpr, "signer is the primary fingerprint");

    // The exported secret key signs with its subkey; gpg and airlock both accept it.
    let secret = gpg.ok(&["--passphrase", "", "--export-secret-keys", "--armor", uid]);
    let key = SigningKey::from_armored(&secret).expect("load gpg secret key");
    assert_eq!(key.fingerprint(), fpr);
    let ours = key.clearsign("from airlock\n").expect("clearsign");
    let path = gpg.write("ours.asc", &ours);
    let (ok, stderr, _) = gpg.verify(&path);
    assert!(ok && stderr.contains("Good signature"), "{stderr}");
    assert_eq!(keyring.verify_cleartext(&ours).expect("verify").signer, fpr);
}

#[test]
fn gpg_exported_secret_key_signs_for_gpg() {
    let gpg = Gpg::new();
    let uid = "T <t@example.org>";
    let fpr = gpg.gen_key(uid, "ed25519", "sign");
    let secret = gpg.ok(&["--passphrase", "", "--export-secret-keys", "--armor", uid]);
    let key = SigningKey::from_armored(&secret).expect("load gpg secret key");
    assert_eq!(key.fingerprint(), fpr);

    let doc = key.clearsign(JSON_CANONICAL).expect("clearsign");
    let path = gpg.write("signed-by-gpg-key.asc", &doc);
    let (ok, stderr, status) = gpg.verify(&path);
    assert!(ok, "gpg --verify failed: {stderr}");
    assert!(stderr.contains("Good signature"), "{stderr}");
    assert!(status.contains(&format!("VALIDSIG {fpr}")), "{status}");

    // Same through files, as the appliance loads them.
    let key_path = gpg.write("secret.asc", &secret);
    let ring_path = gpg.write("public.asc", &gpg.ok(&["--export", "--armor", uid]));
    let key = SigningKey::load(&key_path).expect("load key file");
    let keyring = Keyring::load(&ring_path).expect("load keyring file");
    let verified = keyring
        .verify_cleartext(&key.clearsign("x\n").expect("clearsign"))
        .expect("verify");
    assert_eq!(
        (verified.text.as_str(), verified.signer.as_str()),
        ("x\n", fpr.as_str())
    );
}

#[test]
fn passphrase_protected_secret_key_is_refused() {
    let gpg = Gpg::new();
    let uid = "P <p@example.org>";
    gpg.ok(&[
        "--passphrase",
        "hunter2",
        "--quick-gen-key",
        uid,
        "ed25519",
        "sign",
        "never",
    ]);
    let secret = gpg.ok(&[
        "--passphrase",
        "hunter2",
        "--export-secret-keys",
        "--armor",
        uid,
    ]);
    match SigningKey::from_armored(&secret) {
        Err(SignError::Key(msg)) => assert!(msg.contains("passphrase"), "{msg}"),
        other => panic!("expected Key error, got {other:?}"),
    }
}

#[test]
fn altered_text_is_a_bad_signature() {
    let (key, public) = airlock_key("A <a@example.org>");
    let keyring = Keyring::from_armored(&public).expect("keyring");
    let doc = key.clearsign(JSON_CANONICAL).expect("clearsign");

    for altered in [
        doc.replace("bundle", "bundlE"),
        doc.replace("- -1,", "- -2,"),
        // An added line, and an un-escaped dash line (now "1," instead of "-1,").
        doc.replace(
            "}\n\n-----BEGIN PGP SIGNATURE",
            "}\nextra\n\n-----BEGIN PGP SIGNATURE",
        ),
        doc.replace("- -1,", "1,"),
    ] {
        assert_ne!(altered, doc);
        match keyring.verify_cleartext(&altered) {
            Err(SignError::BadSignature(_)) => {}
            other => panic!("expected BadSignature, got {other:?}"),
        }
    }

    // A Hash header that does not match the signature is refused (RFC 9580 §7.1).
    let lying = doc.replace("Hash: SHA256", "Hash: SHA512");
    assert!(matches!(
        keyring.verify_cleartext(&lying),
        Err(SignError::BadSignature(_))
    ));
}

#[test]
fn signature_by_unknown_key_is_untrusted() {
    let (signer, _) = airlock_key("Signer <s@example.org>");
    let (_, other_public) = airlock_key("Other <o@example.org>");
    let keyring = Keyring::from_armored(&other_public).expect("keyring");
    let doc = signer.clearsign("hello\n").expect("clearsign");
    match keyring.verify_cleartext(&doc) {
        Err(SignError::Untrusted { issuer }) => {
            assert_eq!(issuer, signer.fingerprint());
            let msg = SignError::Untrusted { issuer }.to_string();
            assert!(msg.contains(&signer.fingerprint()), "{msg}");
        }
        other => panic!("expected Untrusted, got {other:?}"),
    }
}

#[test]
fn garbage_and_empty_input_are_clear_errors() {
    let (key, public) = airlock_key("A <a@example.org>");
    let keyring = Keyring::from_armored(&public).expect("keyring");
    let doc = key.clearsign("text\n").expect("clearsign");

    let cases = [
        String::new(),
        "   \n".to_string(),
        "hello world".to_string(),
        public.clone(),
        format!("leading junk\n{doc}"),
        doc.replace("-----END PGP SIGNATURE-----\n", ""),
        doc.replace("Hash: SHA256", "Comment: hi"),
        // A corrupted signature block.
        doc.replace(
            "-----BEGIN PGP SIGNATURE-----\n\n",
            "-----BEGIN PGP SIGNATURE-----\n\n!!!!",
        ),
    ];
    for input in cases {
        match keyring.verify_cleartext(&input) {
            Err(SignError::NotCleartext(msg)) => {
                assert!(!msg.is_empty());
                assert!(!msg.contains('\n'), "one-line message: {msg}");
            }
            other => panic!("expected NotCleartext for {input:?}, got {other:?}"),
        }
    }

    // A signature block without any signature packet.
    let bare = "-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA256\n\ntext\n\
                -----BEGIN PGP SIGNATURE-----\n\n-----END PGP SIGNATURE-----\n";
    assert!(matches!(
        keyring.verify_cleartext(bare),
        Err(SignError::NoSignature)
    ));

    // Keys: empty, garbage, wrong kind of block.
    let (secret, _) = generate_key("B <b@example.org>").expect("generate");
    for (text, what) in [
        ("", "empty"),
        ("junk", "garbage"),
        (secret.as_str(), "private"),
    ] {
        assert!(
            matches!(Keyring::from_armored(text), Err(SignError::Key(_))),
            "keyring from {what}"
        );
    }
    assert!(matches!(
        SigningKey::from_armored(&public),
        Err(SignError::Key(_))
    ));
    assert!(matches!(
        SigningKey::from_armored(""),
        Err(SignError::Key(_))
    ));
    assert!(matches!(generate_key(""), Err(SignError::Key(_))));
    match Keyring::load(Path::new("/nonexistent/keyring.asc")) {
        Err(e @ SignError::Read { .. }) => assert!(e.to_string().contains("/nonexistent")),
        other => panic!("expected Read error, got {other:?}"),
    }
}

#[test]
fn trailing_data_after_signature_is_rejected() {
    let (key, public) = airlock_key("A <a@example.org>");
    let keyring = Keyring::from_armored(&public).expect("keyring");
    let doc = key.clearsign("text\n").expect("clearsign");
    let second = key.clearsign("other\n").expect("clearsign");

    for input in [
        format!("{doc}unsigned appendix\n"),
        format!("{doc}\n{second}"),
        format!("{doc}x"),
    ] {
        assert!(matches!(
            keyring.verify_cleartext(&input),
            Err(SignError::TrailingData)
        ));
    }
    // Whitespace after the block is tolerated, and so is a missing final newline.
    for input in [format!("{doc}\n \n"), doc.trim_end().to_string()] {
        assert_eq!(
            keyring.verify_cleartext(&input).expect("verify").text,
            "text\n"
        );
    }
}

#[test]
fn keyring_with_two_keys_verifies_either() {
    let (key_a, public_a) = airlock_key("A <a@example.org>");
    let (key_b, public_b) = airlock_key("B <b@example.org>");

    // Two concatenated armor blocks.
    let concatenated = Keyring::from_armored(&format!("{public_a}\n{public_b}")).expect("keyring");
    assert_eq!(
        concatenated.fingerprints(),
        vec![key_a.fingerprint(), key_b.fingerprint()]
    );

    // One armor block holding both keys, as `gpg --export --armor a b` writes it.
    let gpg = Gpg::new();
    gpg.import(&public_a);
    gpg.import(&public_b);
    let one_block = gpg.ok(&[
        "--export",
        "--armor",
        &key_a.fingerprint(),
        &key_b.fingerprint(),
    ]);
    assert_eq!(
        one_block
            .matches("-----BEGIN PGP PUBLIC KEY BLOCK-----")
            .count(),
        1
    );
    let exported = Keyring::from_armored(&one_block).expect("keyring from gpg export");
    let mut fprs = exported.fingerprints();
    fprs.sort();
    let mut expected = vec![key_a.fingerprint(), key_b.fingerprint()];
    expected.sort();
    assert_eq!(fprs, expected);

    for keyring in [&concatenated, &exported] {
        for key in [&key_a, &key_b] {
            let doc = key.clearsign("either\n").expect("clearsign");
            let verified = keyring.verify_cleartext(&doc).expect("verify");
            assert_eq!(verified.signer, key.fingerprint());
        }
    }
}

#[test]
fn revoked_key_is_unusable() {
    let gpg = Gpg::new();
    let uid = "V <v@example.org>";
    let fpr = gpg.gen_key(uid, "ed25519", "sign");
    let doc = gpg.clearsign(uid, "signed before revocation\n");

    // gpg stores a revocation certificate with its armor lines prefixed by ":".
    let rev = gpg
        .home
        .path()
        .join("openpgp-revocs.d")
        .join(format!("{fpr}.rev"));
    let rev = std::fs::read_to_string(rev).expect("revocation certificate");
    gpg.import(&rev.replace(":-----BEGIN", "-----BEGIN"));
    let keyring = Keyring::from_armored(&gpg.ok(&["--export", "--armor", uid])).expect("keyring");

    match keyring.verify_cleartext(&doc) {
        Err(SignError::KeyUnusable { key, reason }) => {
            assert_eq!(key, fpr);
            assert!(reason.contains("revoked"), "{reason}");
        }
        other => panic!("expected KeyUnusable, got {other:?}"),
    }
}
