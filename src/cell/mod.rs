//! The cell-side stack installer (`airlock cell sync`): keeps each
//! configured stack's rootfs on a Diego cell equal to what the stacks API
//! tells this cell to run.
//!
//! One pass, per stack: `GET /stacks/v1/<name>?cell=<id>` ([`client`]);
//! when the installed `rootfs.tar` is that rootfs (same manifest digest,
//! same published sha256, same trusted certs) nothing is downloaded; when
//! `rootfs.tar.previous` is, the two are swapped (a rollback costs no
//! download); otherwise, when the server made a patch from a rootfs the
//! cell holds as published, the patch is downloaded and applied
//! ([`patch`]); failing that, when the server publishes a chunk index and the
//! cell has a rootfs to seed from, only the chunks the cell lacks are
//! fetched and the rootfs is assembled from both ([`delta`], resumable,
//! each chunk verified by its id), falling back to downloading the whole
//! rootfs (streamed to a file, resumed with `Range`, 429 `Retry-After`
//! honoured) when there is no index, a chunk is missing or refused, or
//! the delta would not be smaller. Either way its size and sha256
//! checked against what the API published, the operator's trusted CA
//! certificates added ([`certs`], after the check), and the result
//! installed atomically at `<install-dir>/<name>/rootfs.tar` ([`install`]).
//! Then the cell reports what it runs (`PUT /stacks/v1/<name>/cells/<id>`)
//! and what getting it moved (`transfer`: method, bytes downloaded,
//! rootfs size; also in the `stack synced` log line) after every change
//! and at least every [`REPORT_EVERY`].
//!
//! Errors never touch the installed rootfs: a failed download or a sha256
//! mismatch removes only its temporary file.

pub mod certs;
pub mod client;
pub mod delta;
pub mod install;
pub mod patch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::digest::Digest;
use crate::stacks::cells::{Method, Transfer};
use client::{Assignment, StacksClient};
use install::{Installed, StackDir};

/// Longest time between two reports of an unchanged cell (well under the
/// server's default stale threshold of one hour).
pub const REPORT_EVERY: Duration = Duration::from_secs(600);

/// What `airlock cell sync` works on.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// Stack names (`[a-z0-9._-]`, 1 to 128 characters).
    pub stacks: Vec<String>,
    /// Where `<stack>/rootfs.tar` is kept.
    pub install_dir: PathBuf,
    /// This cell's id (`[A-Za-z0-9._:@/-]`, 1 to 253 characters).
    pub cell_id: String,
    /// PEM file of CA certificates to add to every rootfs.
    pub trusted_certs: Option<PathBuf>,
}

/// What one pass did for one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `rootfs.tar` already is the assigned rootfs.
    UpToDate,
    /// A new rootfs was downloaded and installed.
    Installed,
    /// `rootfs.tar.previous` was the assigned one: the two were swapped.
    Swapped,
}

/// The trusted certs to add: the PEM bytes and their sha256.
struct TrustedCerts {
    pem: Vec<u8>,
    digest: Digest,
}

/// One cell's installer: options, client, and when each stack was last reported.
pub struct CellSync {
    opts: SyncOptions,
    client: StacksClient,
    certs: Option<TrustedCerts>,
    reported: HashMap<String, Instant>,
}

impl CellSync {
    /// Checks the options (stack names, cell id, a trusted certs file with
    /// at least one PEM certificate) and keeps `client`.
    pub fn new(opts: SyncOptions, client: StacksClient) -> Result<CellSync> {
        if opts.stacks.is_empty() {
            bail!("no stack to sync: give --stack NAME");
        }
        for s in &opts.stacks {
            s.parse::<crate::stacks::table::StackName>()?;
        }
        crate::stacks::cells::check_cell_id(&opts.cell_id)?;
        let certs = match &opts.trusted_certs {
            None => None,
            Some(path) => {
                crate::http_client::pem_certificates(path, "trusted certs")?;
                let mut pem = std::fs::read(path)
                    .with_context(|| format!("reading trusted certs {}", path.display()))?;
                if !pem.ends_with(b"\n") {
                    pem.push(b'\n');
                }
                let digest = Digest::sha256_of(&pem);
                Some(TrustedCerts { pem, digest })
            }
        };
        Ok(CellSync {
            opts,
            client,
            certs,
            reported: HashMap::new(),
        })
    }

    /// The options.
    pub fn options(&self) -> &SyncOptions {
        &self.opts
    }

    /// One pass over every stack: (stack, outcome or error), in order.
    pub async fn pass(
        &mut self,
        progress: &indicatif::ProgressBar,
    ) -> Vec<(String, Result<Outcome>)> {
        let mut out = Vec::new();
        for stack in self.opts.stacks.clone() {
            let r = self.sync_stack(&stack, progress).await;
            out.push((stack, r));
        }
        out
    }

    /// Syncs one stack (see the module docs).
    pub async fn sync_stack(
        &mut self,
        stack: &str,
        progress: &indicatif::ProgressBar,
    ) -> Result<Outcome> {
        let a = self.client.resolve(stack, &self.opts.cell_id).await?;
        let dir = StackDir::open(&self.opts.install_dir, stack)?;
        let _lock = dir.lock()?;
        let record = dir.record();
        let certs = self.certs.as_ref().map(|c| &c.digest);
        let matches = |i: &Option<Installed>| {
            i.as_ref()
                .is_some_and(|i| i.is(&a.digest, &a.rootfs_digest, certs))
        };
        if matches(&record.current) || matches(&record.previous) {
            let gone = dir.remove_leftovers();
            if !gone.is_empty() {
                tracing::info!(stack, removed = ?gone, "removed what an interrupted download left");
            }
        }
        let outcome = if matches(&record.current) {
            Outcome::UpToDate
        } else if matches(&record.previous) {
            dir.swap()?;
            let mut r = dir.record();
            if let Some(c) = r.current.as_mut() {
                c.transfer = Some(Transfer {
                    method: Method::Swap,
                    bytes: 0,
                    rootfs_size: a.rootfs_size,
                });
            }
            dir.write_record(&r)?;
            Outcome::Swapped
        } else {
            self.download_and_install(stack, &dir, &a, progress).await?;
            Outcome::Installed
        };
        let due = self
            .reported
            .get(stack)
            .is_none_or(|t| t.elapsed() >= REPORT_EVERY);
        let transfer = dir.record().current.and_then(|c| c.transfer);
        if outcome != Outcome::UpToDate || due {
            match self
                .client
                .report(stack, &self.opts.cell_id, &a, transfer)
                .await
            {
                Ok(()) => {
                    self.reported.insert(stack.to_string(), Instant::now());
                }
                Err(e) => tracing::warn!(stack, error = %e, "report failed"),
            }
        }
        tracing::info!(
            stack,
            outcome = ?outcome,
            digest = %a.digest,
            promotion = a.promotion,
            rootfs = %dir.rootfs().display(),
            method = transfer.map_or("-", |t| method_name(t.method)),
            downloaded = transfer.map_or(0, |t| t.bytes),
            rootfs_size = a.rootfs_size,
            "stack synced"
        );
        Ok(outcome)
    }

    async fn download_and_install(
        &self,
        stack: &str,
        dir: &StackDir,
        a: &Assignment,
        progress: &indicatif::ProgressBar,
    ) -> Result<()> {
        let download = dir.download_path();
        let cell = self.opts.cell_id.as_str();
        let moved = match patch::try_patch(&self.client, stack, cell, dir, a, progress).await {
            patch::Patched::Applied(s) => {
                tracing::info!(
                    stack,
                    downloaded = s.bytes,
                    rootfs_size = a.rootfs_size,
                    fetch_s = format!("{:.2}", s.fetch_seconds),
                    apply_s = format!("{:.2}", s.apply_seconds),
                    "rootfs patched"
                );
                let transfer = Transfer {
                    method: Method::Delta,
                    bytes: s.bytes,
                    rootfs_size: a.rootfs_size,
                };
                return self.install(stack, dir, a, transfer).await;
            }
            patch::Patched::Skipped(why, n) => {
                if a.rootfs_patch.is_some() {
                    tracing::info!(stack, reason = %why, "rootfs patch not used");
                }
                n
            }
        };
        let d = delta::try_delta(&self.client, stack, cell, dir, a, progress).await;
        let transfer = match d {
            Ok(delta::Delta::Assembled(s)) => {
                tracing::info!(
                    stack,
                    downloaded = s.bytes,
                    rootfs_size = a.rootfs_size,
                    chunks = s.fetched,
                    seeded_bytes = s.seeded,
                    resumed_bytes = s.cached,
                    seed_s = format!("{:.2}", s.seed_seconds),
                    fetch_s = format!("{:.2}", s.fetch_seconds),
                    assemble_s = format!("{:.2}", s.assemble_seconds),
                    "rootfs assembled from a delta"
                );
                Transfer {
                    method: Method::Delta,
                    bytes: moved + s.bytes,
                    rootfs_size: a.rootfs_size,
                }
            }
            Ok(delta::Delta::Fallback(why, n)) => {
                tracing::info!(stack, reason = %why, "downloading the whole rootfs");
                self.full_download(stack, a, &download, progress).await?;
                Transfer {
                    method: Method::Full,
                    bytes: moved + n + a.rootfs_size,
                    rootfs_size: a.rootfs_size,
                }
            }
            Err(e) => {
                let _ = std::fs::remove_file(&download);
                return Err(e.context(format!(
                    "stack {stack}: delta of rootfs {}",
                    a.rootfs_digest
                )));
            }
        };
        self.install(stack, dir, a, transfer).await
    }

    /// Installs the rootfs at `dir`'s download path (sha256 checked) as
    /// what `a` assigns, adding the trusted certs first.
    async fn install(
        &self,
        stack: &str,
        dir: &StackDir,
        a: &Assignment,
        transfer: Transfer,
    ) -> Result<()> {
        let download = dir.download_path();
        let new = match &self.certs {
            None => download.clone(),
            Some(c) => {
                let new = dir.new_path();
                let (src, dst, pem) = (download.clone(), new.clone(), c.pem.clone());
                let added =
                    tokio::task::spawn_blocking(move || certs::add_trusted_certs(&src, &dst, &pem))
                        .await?;
                let _ = std::fs::remove_file(&download);
                if let Err(e) = added {
                    let _ = std::fs::remove_file(&new);
                    return Err(e.context(format!("stack {stack}: adding trusted certs")));
                }
                new
            }
        };
        let what = Installed {
            digest: a.digest.clone(),
            rootfs_digest: a.rootfs_digest.clone(),
            trusted_certs: self.certs.as_ref().map(|c| c.digest.clone()),
            promotion: a.promotion,
            image: a.image.clone(),
            installed_at: crate::state::now_rfc3339(),
            transfer: Some(transfer),
        };
        let r = dir.install(&new, what);
        if r.is_err() {
            let _ = std::fs::remove_file(&new);
        }
        r
    }

    async fn full_download(
        &self,
        stack: &str,
        a: &Assignment,
        download: &Path,
        progress: &indicatif::ProgressBar,
    ) -> Result<()> {
        // `cell=` lets the server turn this cell's delta lease (if any) into
        // the download's slot (`max_in_flight`).
        let mut a = a.clone();
        a.rootfs_url = client::with_cell(&a.rootfs_url, &self.opts.cell_id);
        let fetched = self.client.download(&a, download, progress).await;
        if let Err(e) = fetched {
            let _ = std::fs::remove_file(download);
            return Err(e.context(format!("stack {stack}: rootfs {}", a.rootfs_digest)));
        }
        Ok(())
    }

    /// Passes forever, `interval` apart; errors are logged and retried at
    /// the next pass.
    pub async fn run(&mut self, interval: Duration, progress: &indicatif::ProgressBar) -> ! {
        loop {
            for (stack, r) in self.pass(progress).await {
                if let Err(e) = r {
                    tracing::warn!(
                        stack,
                        error = format!("{e:#}"),
                        "sync failed; next try in {} s",
                        interval.as_secs()
                    );
                }
            }
            tokio::time::sleep(interval).await;
        }
    }
}

fn method_name(m: Method) -> &'static str {
    match m {
        Method::Delta => "delta",
        Method::Full => "full",
        Method::Swap => "swap",
    }
}

/// This cell's id: the BOSH instance id in `instance_id_file` (normally
/// `/var/vcap/instance/id`) when it exists and is not empty, else the host name.
pub fn default_cell_id(instance_id_file: &Path) -> Result<String> {
    if let Ok(id) = std::fs::read_to_string(instance_id_file)
        && !id.trim().is_empty()
    {
        return Ok(id.trim().to_string());
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .context("no --cell-id, no BOSH instance id and no host name")?;
    Ok(host.trim().to_string())
}
