//! `airlock keys`: OpenPGP signing keys.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::Subcommand;

use airlock::bundle::sign;

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
    }
    Ok(())
}
