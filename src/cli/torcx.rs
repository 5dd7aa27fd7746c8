//! `airlock torcx`: the host's `remote.json`, profile checks before an OS
//! update, listing the `torcx` document, and deprecating addon versions.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, anyhow, bail};
use clap::Subcommand;

use airlock::bundle::sign::{Keyring, unverified_text};
use airlock::state::{DocumentChange, Op, user_at_host};
use airlock::torcx::format::{
    CONTENTS_FILE, Envelope, REMOTE_CONTENTS_V1, RemoteContents, check_token,
};
use airlock::torcx::profile::{self, RemoteView};
use airlock::torcx::table::{self, Deprecation, Target, TorcxDoc};
use airlock::torcx::{DOCUMENT, contents, remote};

use super::DataArg;

#[derive(Subcommand)]
pub enum TorcxCmd {
    /// Write DIR/REMOTE/remote.json and the keyring beside it, for a host's
    /// /etc/torcx/remotes/.
    RemoteConfig {
        /// Remote name (reverse DNS by convention).
        #[arg(long)]
        remote: String,
        /// Base URL, e.g. http://HOST:5000/torcx/REMOTE/${COREOS_BOARD}/${VERSION_ID}/
        /// (a missing trailing slash is added).
        #[arg(long)]
        url: String,
        /// The remote's armored public key (RSA), e.g. KEY.pub.asc.
        #[arg(long)]
        key: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
    },
    /// Profiles.
    #[command(subcommand)]
    Profile(ProfileCmd),
    /// Show remotes, addons, versions, boards, OS versions, defaults and deprecations.
    List {
        #[command(flatten)]
        data: DataArg,
        /// Print the stored document as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Withdraw an addon version from the contents of an OS version and every later one.
    Deprecate {
        #[command(flatten)]
        data: DataArg,
        /// Remote.
        #[arg(long)]
        remote: String,
        /// Addon name.
        #[arg(long)]
        name: String,
        /// Addon version.
        #[arg(long)]
        version: String,
        /// First OS version whose contents leave it out.
        #[arg(long)]
        from_os_version: String,
        /// Why (shown by `profile check` and `list`).
        #[arg(long, default_value = "no longer supported")]
        reason: String,
    },
}

#[derive(Subcommand)]
pub enum ProfileCmd {
    /// Merge PROFILEs as torcx does (lowest first: vendor, oem, user) and
    /// report every image the remotes cannot provide for BOARD and OS
    /// VERSION; exit 1 if any.
    Check {
        /// Board (`${COREOS_BOARD}`).
        #[arg(long)]
        board: String,
        /// OS version (`${VERSION_ID}`), e.g. the one an update moves to.
        #[arg(long)]
        os_version: String,
        /// Ask a running airlock (http://HOST:PORT) instead of the data directory.
        /// (Its own id: the store's `--store` is the field `url` of `data`.)
        #[arg(long = "url", id = "server_url")]
        url: Option<String>,
        /// With --url: verify each contents document with this armored
        /// keyring, as a host does (without it the signature is not checked).
        #[arg(long, requires = "server_url")]
        keyring: Option<PathBuf>,
        #[command(flatten)]
        data: DataArg,
        /// Profile files (profile-manifest-v0 or -v1).
        #[arg(required = true)]
        profiles: Vec<PathBuf>,
    },
}

pub async fn run(cmd: TorcxCmd) -> Result<()> {
    match cmd {
        TorcxCmd::RemoteConfig {
            remote,
            url,
            key,
            out,
        } => remote_config(&remote, &url, &key, &out),
        TorcxCmd::Profile(ProfileCmd::Check {
            board,
            os_version,
            url,
            keyring,
            data,
            profiles,
        }) => {
            let keyring = keyring
                .map(|k| Keyring::load(&k).with_context(|| k.display().to_string()))
                .transpose()?;
            let source = match url.as_deref() {
                Some(u) => Source::Url(u, keyring.as_ref()),
                None => Source::Data(&data),
            };
            check(&board, &os_version, source, &profiles).await
        }
        TorcxCmd::List { data, json } => list(&data, json).await,
        TorcxCmd::Deprecate {
            data,
            remote,
            name,
            version,
            from_os_version,
            reason,
        } => {
            check_token("OS version", &from_os_version).map_err(anyhow::Error::msg)?;
            let state = data.existing_state()?;
            let dep = Deprecation {
                name: name.clone(),
                version: version.clone(),
                from_os_version: from_os_version.clone(),
                reason,
            };
            let r = remote.clone();
            let op = Op::Document {
                name: DOCUMENT.into(),
                change: DocumentChange::json(move |cur: Option<TorcxDoc>| {
                    let mut doc = cur.unwrap_or_default();
                    table::deprecate(&mut doc, &r, dep.clone())
                        .map_err(airlock::state::StateError::NotFound)?;
                    Ok(Some(doc))
                }),
            };
            let c = state
                .commit(
                    &format!("torcx deprecate {remote} {name}:{version} from {from_os_version}"),
                    &user_at_host(),
                    &[op],
                )
                .await?;
            println!(
                "deprecated {name}:{version} of {remote} from OS version {from_os_version} on, generation {}",
                c.generation
            );
            Ok(())
        }
    }
}

fn remote_config(
    name: &str,
    url: &str,
    key: &std::path::Path,
    out: &std::path::Path,
) -> Result<()> {
    check_token("remote", name).map_err(anyhow::Error::msg)?;
    let base = remote::base_url(url).map_err(anyhow::Error::msg)?;
    let text =
        std::fs::read_to_string(key).with_context(|| format!("reading {}", key.display()))?;
    let keyring = Keyring::from_armored(&text).with_context(|| key.display().to_string())?;
    for (fpr, algos) in keyring.signing_algorithms() {
        if !algos.iter().any(|a| a.starts_with("RSA")) {
            bail!(
                "{}: key {fpr} signs with {}; torcx hosts verify RSA signatures only (airlock keys generate --algo rsa3072)",
                key.display(),
                if algos.is_empty() {
                    "no usable key".to_string()
                } else {
                    algos.join(", ")
                }
            );
        }
    }
    let dir = out.join(name);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::write(dir.join(remote::KEYRING_FILE), &text)?;
    std::fs::write(dir.join("remote.json"), remote::remote_json(&base))?;
    println!(
        "wrote {}/remote.json (base_url {base}) and {} (keys {}); copy {} to a host's /etc/torcx/remotes/",
        dir.display(),
        remote::KEYRING_FILE,
        keyring.fingerprints().join(", "),
        dir.display()
    );
    Ok(())
}

/// Parses a served or carried contents document without checking its signature.
fn parse_contents(text: &str) -> Result<RemoteContents> {
    let inner = unverified_text(text)?;
    let env: Envelope<RemoteContents> = serde_json::from_str(&inner)?;
    if env.kind != REMOTE_CONTENTS_V1 {
        bail!("contents document has kind {:?}", env.kind);
    }
    Ok(env.value)
}

/// The views of `remotes` for `target` from the data directory.
async fn views_from_data(
    data: &DataArg,
    target: &Target,
    remotes: &[String],
) -> Result<BTreeMap<String, RemoteView>> {
    let state = data.existing_state()?;
    let snap = state.snapshot().await?;
    let doc: TorcxDoc = state.document(&snap, DOCUMENT).await?.unwrap_or_default();
    let mut out = BTreeMap::new();
    for r in remotes {
        let Some(t) = doc.remotes.get(r) else {
            continue;
        };
        let contents = match t.vendor_for(target) {
            Some(v) => {
                let bytes = airlock::store::get_verified(&**state.blobstore(), &v.digest).await?;
                Some(parse_contents(&String::from_utf8_lossy(&bytes))?)
            }
            None => contents::site_contents(t, target),
        };
        out.insert(
            r.clone(),
            RemoteView {
                contents,
                deprecations: t.deprecations.clone(),
            },
        );
    }
    Ok(out)
}

/// Where `profile check` reads what remotes offer.
enum Source<'a> {
    /// The data directory.
    Data(&'a DataArg),
    /// A running airlock, and optionally the keyring to verify contents with.
    Url(&'a str, Option<&'a Keyring>),
}

/// The views of `remotes` for `target` from a running airlock (`http://` only).
async fn views_from_url(
    url: &str,
    keyring: Option<&Keyring>,
    target: &Target,
    remotes: &[String],
) -> Result<BTreeMap<String, RemoteView>> {
    use http_body_util::BodyExt;
    let base = url.trim_end_matches('/');
    if !base.starts_with("http://") {
        bail!("--url {url:?}: only http:// is supported");
    }
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let mut out = BTreeMap::new();
    for r in remotes {
        let uri = format!(
            "{base}/torcx/{r}/{}/{}/{CONTENTS_FILE}",
            target.board, target.os_version
        );
        let res = client
            .get(uri.parse().with_context(|| format!("bad URL {uri}"))?)
            .await
            .with_context(|| format!("GET {uri}"))?;
        let status = res.status();
        let body = res.into_body().collect().await?.to_bytes();
        let text = String::from_utf8_lossy(&body);
        if status.as_u16() == 404 && text.contains("is not known") {
            continue;
        }
        let contents = if status.is_success() {
            if let Some(k) = keyring {
                k.verify_cleartext(&text)
                    .with_context(|| format!("GET {uri}: contents signature"))?;
            }
            Some(parse_contents(&text).with_context(|| format!("GET {uri}"))?)
        } else if status.as_u16() == 404 {
            None
        } else {
            bail!("GET {uri}: {status}: {}", text.trim());
        };
        out.insert(
            r.clone(),
            RemoteView {
                contents,
                deprecations: Vec::new(),
            },
        );
    }
    Ok(out)
}

async fn check(board: &str, os_version: &str, source: Source<'_>, files: &[PathBuf]) -> Result<()> {
    check_token("board", board).map_err(anyhow::Error::msg)?;
    check_token("OS version", os_version).map_err(anyhow::Error::msg)?;
    let mut profiles = Vec::new();
    for f in files {
        let bytes = std::fs::read(f).with_context(|| format!("reading {}", f.display()))?;
        profiles.push(profile::parse(&bytes).map_err(|e| anyhow!("{}: {e}", f.display()))?);
    }
    let merged = profile::merge(&profiles);
    let mut remotes: Vec<String> = merged.iter().filter_map(|i| i.remote.clone()).collect();
    remotes.sort();
    remotes.dedup();
    let target = Target {
        board: board.into(),
        os_version: os_version.into(),
    };
    let views = match source {
        Source::Url(u, keyring) => views_from_url(u, keyring, &target, &remotes).await?,
        Source::Data(data) => views_from_data(data, &target, &remotes).await?,
    };
    let verdicts = profile::check(&merged, os_version, |r| views.get(r).cloned());
    for v in &verdicts {
        println!(
            "{} {}:{} {}",
            if v.ok { "ok  " } else { "FAIL" },
            v.image.name,
            if v.image.reference.is_empty() {
                "-"
            } else {
                &v.image.reference
            },
            v.message
        );
    }
    let failed = verdicts.iter().filter(|v| !v.ok).count();
    if failed > 0 {
        bail!(
            "{failed} of {} images cannot be provided for board {board}, OS version {os_version}",
            verdicts.len()
        );
    }
    println!(
        "all {} images can be provided for board {board}, OS version {os_version}",
        verdicts.len()
    );
    Ok(())
}

async fn list(data: &DataArg, json: bool) -> Result<()> {
    let state = data.existing_state()?;
    let snap = state.snapshot().await?;
    let doc: TorcxDoc = state.document(&snap, DOCUMENT).await?.unwrap_or_default();
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if doc.remotes.is_empty() {
        println!("no torcx remotes");
    }
    for (name, t) in &doc.remotes {
        println!("remote {name}");
        for b in &t.builds {
            println!(
                "  {}:{} {} {} bytes sha512-{}",
                b.name,
                b.version,
                b.format,
                b.size,
                &b.sha512[..16.min(b.sha512.len())]
            );
            let mut boards: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for tg in &b.targets {
                let d = if b.default_for.contains(tg) {
                    " (default)"
                } else {
                    ""
                };
                let dep = t
                    .deprecation(&b.name, &b.version, &tg.os_version)
                    .map(|_| " (deprecated)")
                    .unwrap_or("");
                boards
                    .entry(&tg.board)
                    .or_default()
                    .push(format!("{}{d}{dep}", tg.os_version));
            }
            for (board, versions) in boards {
                println!("    {board}: {}", versions.join(", "));
            }
        }
        for d in &t.deprecations {
            println!(
                "  deprecated {}:{} from OS version {}: {}",
                d.name, d.version, d.from_os_version, d.reason
            );
        }
        for v in &t.vendor {
            println!(
                "  vendor contents {}/{} {}",
                v.target.board, v.target.os_version, v.digest
            );
        }
    }
    Ok(())
}
