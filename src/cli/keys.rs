//! `airlock keys`: OpenPGP signing keys, and signing and reading the
//! documents they sign (trust documents: `airlock::bundle::trust`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Subcommand;

use airlock::bundle::{sign, trust};

#[derive(Subcommand)]
pub enum KeysCmd {
    /// Generate a signing key (ed25519, or RSA for torcx remotes): writes
    /// PREFIX.sec.asc and PREFIX.pub.asc.
    Generate {
        /// User id, "NAME <EMAIL>".
        #[arg(long)]
        uid: String,
        /// Output prefix.
        #[arg(long)]
        out: PathBuf,
        /// Key algorithm: ed25519 (bundles), or rsa3072 / rsa4096 (torcx
        /// remotes: the torcx client verifies RSA signatures only).
        #[arg(long, value_parser = ["ed25519", "rsa3072", "rsa4096"], default_value = "ed25519")]
        algo: String,
    },
    /// Clearsign a text file (a trust document) with each of the keys, in
    /// one document; a trust document is checked before it is signed.
    Sign {
        /// Armored secret key; repeat for several signatures.
        #[arg(long = "key", required = true)]
        keys: Vec<PathBuf>,
        /// The text to sign (JSON of a trust document).
        file: PathBuf,
        /// Output file (replaced).
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Add a signature by KEY to a cleartext-signed document (a trust
    /// document another release engineer signed); the signatures there are kept.
    Cosign {
        /// Armored secret key.
        #[arg(long)]
        key: PathBuf,
        /// The signed document.
        file: PathBuf,
        /// Output file (replaced; may be FILE itself).
        #[arg(short, long)]
        out: PathBuf,
    },
    /// Show what a file holds: each key of a public key file (fingerprint,
    /// user id; with --json the `keys` object of a trust document), or a
    /// signed trust document (version, expiry, root, roles, and which of
    /// its own keys signed it).
    Inspect {
        /// A public key file or a signed trust document.
        file: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

pub fn run(cmd: KeysCmd) -> Result<()> {
    match cmd {
        KeysCmd::Generate { uid, out, algo } => {
            let (sec, public) = match algo.as_str() {
                "rsa3072" => sign::generate_rsa_key(&uid, 3072)?,
                "rsa4096" => sign::generate_rsa_key(&uid, 4096)?,
                _ => sign::generate_key(&uid)?,
            };
            let (sec_path, pub_path) =
                (with_suffix(&out, ".sec.asc"), with_suffix(&out, ".pub.asc"));
            if sec_path.exists() || pub_path.exists() {
                bail!(
                    "{} or {} already exists; refusing to overwrite a key",
                    sec_path.display(),
                    pub_path.display()
                );
            }
            super::write_private(&sec_path, &sec)?;
            std::fs::write(&pub_path, public)?;
            let fpr = sign::SigningKey::from_armored(&sec)?.fingerprint();
            println!(
                "key {fpr}: wrote {} and {}",
                sec_path.display(),
                pub_path.display()
            );
        }
        KeysCmd::Sign { keys, file, out } => {
            let text = read(&file)?;
            if looks_like_trust(&text) {
                trust::TrustDoc::parse(&text).with_context(|| file.display().to_string())?;
            }
            let keys = keys
                .iter()
                .map(|p| sign::SigningKey::load(p))
                .collect::<Result<Vec<_>, _>>()?;
            let signed = sign::clearsign_all(&keys.iter().collect::<Vec<_>>(), &text)?;
            replace(&out, &signed)?;
            let fprs: Vec<String> = keys.iter().map(|k| k.fingerprint()).collect();
            println!("{}: signed by {}", out.display(), fprs.join(", "));
        }
        KeysCmd::Cosign { key, file, out } => {
            let armored = read(&file)?;
            let key = sign::SigningKey::load(&key)?;
            let signed =
                sign::add_signature(&armored, &key).with_context(|| file.display().to_string())?;
            replace(&out, &signed)?;
            println!(
                "{}: signature by {} added",
                out.display(),
                key.fingerprint()
            );
        }
        KeysCmd::Inspect { file, json } => inspect(&file, json)?,
    }
    Ok(())
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| path.display().to_string())
}

/// Whether `text` says it is a trust document (so it is checked as one).
fn looks_like_trust(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .is_some_and(|v| v["format"] == trust::FORMAT)
}

/// Writes `text` to `path` through a temporary file beside it and a rename.
fn replace(path: &Path, text: &str) -> Result<()> {
    let tmp = with_suffix(path, ".tmp");
    std::fs::write(&tmp, text).with_context(|| tmp.display().to_string())?;
    std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
    Ok(())
}

/// `airlock keys inspect`.
fn inspect(file: &Path, json: bool) -> Result<()> {
    let text = read(file)?;
    let name = file.display();
    if text
        .trim_start()
        .starts_with("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    {
        let keys = sign::Keyring::from_armored(&text)
            .with_context(|| name.to_string())?
            .each_key()?;
        if json {
            let map: serde_json::Map<String, serde_json::Value> = keys
                .into_iter()
                .map(|(fpr, _, armored)| (fpr, armored.into()))
                .collect();
            println!("{}", serde_json::to_string_pretty(&map)?);
        } else {
            for (fpr, uid, _) in keys {
                println!("key {fpr} {uid}");
            }
        }
        return Ok(());
    }
    let signed = sign::unverified_text(&text).with_context(|| name.to_string())?;
    let doc = trust::TrustDoc::parse(&signed).with_context(|| name.to_string())?;
    let signers = doc
        .keyring()?
        .verify_cleartext(&text)
        .map(|v| v.signers)
        .unwrap_or_default();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "document": doc,
                "signed_by": signers,
            }))?
        );
        return Ok(());
    }
    println!(
        "trust document version {} (expires {})",
        doc.version,
        doc.expires.as_deref().unwrap_or("never")
    );
    let mark = |fpr: &String| {
        if signers.contains(fpr) {
            " (signed)"
        } else {
            ""
        }
    };
    let root_signed = doc.root.keys.iter().filter(|k| signers.contains(k)).count();
    println!(
        "root: {} of {} keys ({} signed this document: {})",
        doc.root.threshold,
        doc.root.keys.len(),
        root_signed,
        if root_signed >= doc.root.threshold {
            "threshold met"
        } else {
            "threshold NOT met"
        }
    );
    for k in &doc.root.keys {
        println!("  {k}{}", mark(k));
    }
    for r in &doc.roles {
        println!("role {}: {} of {} keys", r.name, r.threshold, r.keys.len());
        for (what, p) in [
            ("repositories", &r.repositories),
            ("stacks", &r.stacks),
            ("torcx", &r.torcx),
            ("feeds", &r.feeds),
        ] {
            if !p.is_empty() {
                println!("  {what}: {}", p.join(", "));
            }
        }
        for k in &r.keys {
            println!("  {k}{}", mark(k));
        }
    }
    Ok(())
}
