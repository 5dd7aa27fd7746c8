//! Pulling images from registries (distribution-spec v1.1 "Pull") into the cache.
//!
//! Owns: resolving a `docker://` source to its root manifest (by tag, or by
//! digest), walking index → manifests → config and layers, and downloading
//! every blob into the [`Cache`], streamed to disk in constant memory (1 MiB
//! buffer per download, up to [`CONCURRENCY`] at once) and hashed on the way;
//! a download that drops is resumed with `Range: bytes=N-` when the server
//! answers 206, else restarted. Nothing unverified reaches the cache.
//! Manifests are kept byte for byte as the registry sent them: a tag's
//! manifest digest is the sha256 of the body (checked against
//! `Docker-Content-Digest` when present), a digest reference must hash to
//! itself, and indexes are carried whole with every child.
//!
//! Referrers (signatures, attestations, SBOMs): for the root and every
//! manifest under it, and again for each referrer found (a signature on an
//! SBOM), the referrers API (`GET /v2/<name>/referrers/<digest>`, following
//! `Link: <...>; rel="next"`) is asked; where it answers 404, 405 or 400 the
//! referrers tag schema (`<alg>-<hex>` tag naming an index) is read instead.
//! Referrers whose media type is not an image manifest or index are left
//! out (they could not be served as manifests).
//! Never writes the bundle and never rewrites a manifest.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use anyhow::{Context, Result, anyhow, bail};
use futures_util::{StreamExt, TryStreamExt};
use hyper::StatusCode;
use hyper::header::CONTENT_TYPE;

use super::cache::Cache;
use super::http::{MAX_RETRIES, RegistryClient, Stats, read_limited};
use super::{Reference, RegistryConfig, parse_registry_ref};
use crate::bundle::format::BlobEntry;
use crate::digest::Digest;
use crate::http_client::download::Download;
use crate::oci::{self, Descriptor, Manifest};

/// Blob downloads in flight at once per image.
pub const CONCURRENCY: usize = 4;

/// The `Accept` header for manifests: the four types airlock carries.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// An image pulled into the cache: its root descriptor and every blob
/// (children first, root last), with the cache file it is in. Blobs left out
/// because the destination has them (`--have`) have no file.
pub struct Pulled {
    /// The root manifest or index.
    pub root: Descriptor,
    /// Every blob of the image, each once (referrers' included).
    pub blobs: Vec<(BlobEntry, PathBuf)>,
    /// The referrers found, each the root of its own walk.
    pub referrers: Vec<Descriptor>,
    /// Children of the root index left out by `platforms`.
    pub absent: Vec<Digest>,
}

/// A registry answered 404 to a manifest GET (a tag or digest it does not
/// hold); found in an error's chain by callers that treat absence apart
/// (a signature tag that is not there).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ManifestNotFound(pub String);

/// Registry sources of one `bundle create` run: settings, connections, cache.
pub struct Remote {
    registries: Vec<RegistryConfig>,
    base_dir: PathBuf,
    cache: Cache,
    clients: HashMap<(String, String), Arc<RegistryClient>>,
    stats: Arc<Stats>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl Remote {
    /// Registry access with the `[[registry]]` settings (paths relative to
    /// `base_dir`) and the cache at `cache_dir`.
    pub fn new(registries: &[RegistryConfig], base_dir: &Path, cache_dir: &Path) -> Result<Remote> {
        let runtime = match tokio::runtime::Handle::try_current() {
            Ok(_) => None,
            Err(_) => Some(
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()?,
            ),
        };
        Ok(Remote {
            registries: registries.to_vec(),
            base_dir: base_dir.to_path_buf(),
            cache: Cache::open(cache_dir)?,
            clients: HashMap::new(),
            stats: Arc::new(Stats::default()),
            runtime,
        })
    }

    /// Counters over every registry so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Resolves `source` (`docker://...`) and pulls every blob not in `skip`
    /// into the cache, counting bytes on `progress`; with `referrers`, the
    /// image's referrers too (see the module docs). Blocks (call it from a
    /// blocking context). Errors name the source and the cause.
    pub fn pull(
        &mut self,
        source: &str,
        referrers: bool,
        platforms: &[String],
        skip: &HashSet<&Digest>,
        progress: &indicatif::ProgressBar,
    ) -> Result<Pulled> {
        let handle = match &self.runtime {
            Some(rt) => rt.handle().clone(),
            None => tokio::runtime::Handle::current(),
        };
        let result = handle.block_on(self.pull_async(source, referrers, platforms, skip, progress));
        result.with_context(|| format!("source {source}"))
    }

    /// Every tag of the repository a `docker://` source names (distribution
    /// "Listing Tags", following `Link` pages). Blocks.
    pub fn list_tags(&mut self, source: &str) -> Result<Vec<String>> {
        let handle = match &self.runtime {
            Some(rt) => rt.handle().clone(),
            None => tokio::runtime::Handle::current(),
        };
        handle
            .block_on(self.list_tags_async(source))
            .with_context(|| format!("source {source}: listing tags"))
    }

    async fn list_tags_async(&mut self, source: &str) -> Result<Vec<String>> {
        let r = parse_registry_ref(source)?;
        let client = self.client(&r.host, r.endpoint(), &r.repository).await?;
        let scope = format!("repository:{}:pull", r.repository);
        let mut path = format!("/v2/{}/tags/list?n=1000", r.repository);
        let mut tags = Vec::new();
        for _ in 0..1000 {
            let resp = client
                .get(&path, &scope, Some("application/json"), None)
                .await?;
            let status = resp.status();
            if !status.is_success() {
                bail!("GET {path} on {}: {status}", client.host());
            }
            let next = resp
                .headers()
                .get(hyper::header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_link);
            let body = read_limited(resp, 16 << 20).await?;
            #[derive(serde::Deserialize)]
            struct TagList {
                tags: Option<Vec<String>>,
            }
            let list: TagList = serde_json::from_slice(&body)
                .with_context(|| format!("GET {path}: not a tag list"))?;
            tags.extend(list.tags.unwrap_or_default());
            match next {
                Some(n) => path = n,
                None => return Ok(tags),
            }
        }
        bail!("more than 1000 pages of tags")
    }

    async fn client(
        &mut self,
        host: &str,
        endpoint: &str,
        repository: &str,
    ) -> Result<Arc<RegistryClient>> {
        let key = (host.to_string(), repository.to_string());
        if let Some(c) = self.clients.get(&key) {
            return Ok(c.clone());
        }
        let cfg = self.registries.iter().find(|c| c.host == host);
        let c = Arc::new(
            RegistryClient::connect(
                host,
                endpoint,
                repository,
                cfg,
                &self.base_dir,
                self.stats.clone(),
            )
            .await?,
        );
        self.clients.insert(key, c.clone());
        Ok(c)
    }

    async fn pull_async(
        &mut self,
        source: &str,
        referrers: bool,
        platforms: &[String],
        skip: &HashSet<&Digest>,
        progress: &indicatif::ProgressBar,
    ) -> Result<Pulled> {
        let r = parse_registry_ref(source)?;
        progress.set_message(format!("pulling {source}"));
        let client = self.client(&r.host, r.endpoint(), &r.repository).await?;
        let puller = Puller {
            client: &client,
            cache: &self.cache,
            repo: &r.repository,
            scope: format!("repository:{}:pull", r.repository),
            manifests: std::sync::Mutex::new(HashSet::new()),
        };
        let root = puller.root(&r.reference).await?;
        let mut blobs = Vec::new();
        let mut downloads = Vec::new();
        let mut seen = HashSet::new();
        let mut absent = Vec::new();
        if !platforms.is_empty() && oci::is_index_type(&root.media_type) {
            // Only the wanted children; the index itself is carried as is.
            let bytes = puller.manifest_bytes(&root).await?;
            if let Ok(mut m) = puller.manifests.lock() {
                m.insert(root.digest.clone());
            }
            seen.insert(root.digest.clone());
            let index =
                Manifest::parse(&bytes).with_context(|| format!("index {}", root.digest))?;
            for child in &index.manifests {
                if platforms.iter().any(|p| platform_matches(p, child)) {
                    puller
                        .walk(child, &mut blobs, &mut downloads, &mut seen, skip)
                        .await?;
                } else {
                    absent.push(child.digest.clone());
                }
            }
            if absent.len() == index.manifests.len() {
                bail!(
                    "no child of index {} is for platforms {platforms:?}",
                    root.digest
                );
            }
            blobs.push((
                BlobEntry {
                    digest: root.digest.clone(),
                    size: root.size,
                },
                self.cache.blob_path(&root.digest),
            ));
        } else {
            puller
                .walk(&root, &mut blobs, &mut downloads, &mut seen, skip)
                .await?;
        }
        let mut found = Vec::new();
        if referrers {
            let mut queue: Vec<Digest> = blobs
                .iter()
                .filter(|(b, _)| seen_manifest(&puller, &b.digest))
                .map(|(b, _)| b.digest.clone())
                .collect();
            while let Some(subject) = queue.pop() {
                for desc in puller.referrers(&subject).await? {
                    if seen.contains(&desc.digest) || !oci::is_manifest_type(&desc.media_type) {
                        continue;
                    }
                    let mut more = Vec::new();
                    puller
                        .walk(&desc, &mut more, &mut downloads, &mut seen, skip)
                        .await?;
                    queue.extend(
                        more.iter()
                            .filter(|(b, _)| seen_manifest(&puller, &b.digest))
                            .map(|(b, _)| b.digest.clone()),
                    );
                    blobs.extend(more);
                    found.push(desc);
                }
            }
        }
        progress.inc_length(downloads.iter().map(|d: &Descriptor| d.size).sum());
        futures_util::stream::iter(downloads)
            .map(|d| puller.blob(d, progress))
            .buffer_unordered(CONCURRENCY)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(Pulled {
            root,
            blobs,
            referrers: found,
            absent,
        })
    }
}

/// Whether `desc` is a sigstore bundle a policy may read
/// ([`crate::signatures::sigstore::is_bundle_type`], small enough).
fn is_small_bundle(desc: &Descriptor) -> bool {
    crate::signatures::sigstore::is_bundle_type(&desc.media_type)
        && desc.size <= crate::signatures::sigstore::MAX_BUNDLE
}

/// True when an index entry's `platform` is `want` (`OS/ARCH[/VARIANT]`; a
/// variant in `want` must match, none matches any).
fn platform_matches(want: &str, desc: &Descriptor) -> bool {
    let Some((os, arch, variant)) = desc.platform_parts() else {
        return false;
    };
    let mut parts = want.split('/');
    let (w_os, w_arch, w_variant) = (parts.next(), parts.next(), parts.next());
    w_os == Some(os.as_str())
        && w_arch == Some(arch.as_str())
        && w_variant.is_none_or(|v| v == variant.unwrap_or(""))
}

/// True when `d` was read as a manifest during the walk (so it can have referrers).
fn seen_manifest(p: &Puller<'_>, d: &Digest) -> bool {
    p.manifests.lock().map(|m| m.contains(d)).unwrap_or(false)
}

struct Puller<'a> {
    client: &'a RegistryClient,
    cache: &'a Cache,
    repo: &'a str,
    scope: String,
    /// Digests read as manifests so far.
    manifests: std::sync::Mutex<HashSet<Digest>>,
}

/// The path of a `Link: <PATH>; rel="next"` value (RFC 8288), if it names one.
fn next_link(v: &str) -> Option<String> {
    v.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        if !params.replace(' ', "").contains("rel=\"next\"") {
            return None;
        }
        let url = url.trim().strip_prefix('<')?.strip_suffix('>')?;
        url.find("/v2/").map(|i| url[i..].to_string())
    })
}

/// The media type of a `Content-Type` value, parameters dropped.
fn media_type_of(v: &str) -> String {
    v.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

impl Puller<'_> {
    fn stats(&self) -> &Stats {
        self.client.stats()
    }

    /// GETs a manifest: (bytes, Content-Type without parameters).
    async fn get_manifest(&self, reference: &str) -> Result<(Vec<u8>, String)> {
        let path = format!("/v2/{}/manifests/{reference}", self.repo);
        let resp = self
            .client
            .get(&path, &self.scope, Some(MANIFEST_ACCEPT), None)
            .await?;
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Err(ManifestNotFound(format!(
                "manifest {reference} not found in {} on {}",
                self.repo,
                self.client.host()
            ))
            .into());
        }
        if !status.is_success() {
            bail!("GET {path} on {}: {status}", self.client.host());
        }
        let ct = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(media_type_of)
            .unwrap_or_default();
        let dcd = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = read_limited(resp, oci::MAX_MANIFEST_SIZE as usize)
            .await
            .with_context(|| format!("manifest {reference}"))?;
        self.stats()
            .bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        if let Some(d) = dcd.and_then(|d| d.parse::<Digest>().ok()) {
            let got = d.same_alg_of(&bytes);
            if got != d {
                bail!("manifest {reference}: body hashes to {got}, Docker-Content-Digest says {d}");
            }
        }
        Ok((bytes, ct))
    }

    /// The root descriptor of a tag or digest reference; its bytes go into the cache.
    async fn root(&self, reference: &Reference) -> Result<Descriptor> {
        let (bytes, ct) = self.get_manifest(&reference.as_path()).await?;
        let digest = match reference {
            Reference::Digest(d) => {
                let got = d.same_alg_of(&bytes);
                if &got != d {
                    bail!("manifest {d}: body hashes to {got}");
                }
                d.clone()
            }
            Reference::Tag(_) => Digest::sha256_of(&bytes),
        };
        let parsed = Manifest::parse(&bytes).with_context(|| format!("manifest {digest}"))?;
        let media_type = if oci::is_manifest_type(&ct) {
            ct
        } else {
            parsed
                .effective_media_type()
                .filter(|m| oci::is_manifest_type(m))
                .map(str::to_string)
                .ok_or_else(|| {
                    anyhow!(
                        "manifest {digest}: media type {ct:?} is not an image manifest or index"
                    )
                })?
        };
        self.cache.put_small(&digest, &bytes)?;
        Ok(Descriptor::new(media_type, digest, bytes.len() as u64))
    }

    /// A child manifest's bytes: from the cache, else pulled by digest; verified either way.
    async fn manifest_bytes(&self, desc: &Descriptor) -> Result<Vec<u8>> {
        if desc.size > oci::MAX_MANIFEST_SIZE {
            bail!(
                "manifest {} is {} bytes, over the 4 MiB limit",
                desc.digest,
                desc.size
            );
        }
        let cached = self.cache.blob_path(&desc.digest);
        let bytes = if self.cache.has(&desc.digest, desc.size) {
            self.stats().cache_hits.fetch_add(1, Ordering::Relaxed);
            std::fs::read(&cached).with_context(|| format!("reading {}", cached.display()))?
        } else {
            self.get_manifest(&desc.digest.to_string()).await?.0
        };
        let got = desc.digest.same_alg_of(&bytes);
        if got != desc.digest || bytes.len() as u64 != desc.size {
            bail!(
                "manifest {}: got {} bytes hashing to {got}, descriptor says {} bytes",
                desc.digest,
                bytes.len(),
                desc.size
            );
        }
        self.cache.put_small(&desc.digest, &bytes)?;
        Ok(bytes)
    }

    /// Walks from `desc` (children first, each once): manifests are read now,
    /// other blobs are queued in `downloads` unless in `skip`; a sigstore
    /// bundle layer (at most [`crate::signatures::sigstore::MAX_BUNDLE`]
    /// bytes) is queued even then, since a signature policy reads it
    /// whether or not the other side has it (a delta made on a cold cache).
    async fn walk(
        &self,
        desc: &Descriptor,
        out: &mut Vec<(BlobEntry, PathBuf)>,
        downloads: &mut Vec<Descriptor>,
        seen: &mut HashSet<Digest>,
        skip: &HashSet<&Digest>,
    ) -> Result<()> {
        if !seen.insert(desc.digest.clone()) {
            return Ok(());
        }
        if oci::is_manifest_type(&desc.media_type) {
            let bytes = self.manifest_bytes(desc).await?;
            if let Ok(mut m) = self.manifests.lock() {
                m.insert(desc.digest.clone());
            }
            // The one manifest rule (what import checks it by, with this type).
            let m = Manifest::read(&bytes, Some(&desc.media_type))
                .with_context(|| format!("manifest {} ({})", desc.digest, desc.media_type))?;
            for child in m.manifests.iter().chain(m.blobs()) {
                Box::pin(self.walk(child, out, downloads, seen, skip)).await?;
            }
        } else if !skip.contains(&desc.digest) || is_small_bundle(desc) {
            downloads.push(desc.clone());
        }
        out.push((
            BlobEntry {
                digest: desc.digest.clone(),
                size: desc.size,
            },
            self.cache.blob_path(&desc.digest),
        ));
        Ok(())
    }

    /// The referrers of `subject`: the referrers API, else the tag schema.
    async fn referrers(&self, subject: &Digest) -> Result<Vec<Descriptor>> {
        let mut path = format!("/v2/{}/referrers/{subject}", self.repo);
        let mut out = Vec::new();
        for page in 0.. {
            if page > 100 {
                bail!("referrers of {subject}: more than 100 pages");
            }
            let resp = self
                .client
                .get(&path, &self.scope, Some(oci::OCI_INDEX), None)
                .await?;
            let status = resp.status();
            if page == 0
                && matches!(
                    status,
                    StatusCode::NOT_FOUND
                        | StatusCode::METHOD_NOT_ALLOWED
                        | StatusCode::BAD_REQUEST
                )
            {
                return self.referrers_by_tag(subject).await;
            }
            if !status.is_success() {
                bail!("referrers of {subject}: {status}");
            }
            let next = resp
                .headers()
                .get(hyper::header::LINK)
                .and_then(|v| v.to_str().ok())
                .and_then(next_link);
            let body = read_limited(resp, oci::MAX_MANIFEST_SIZE as usize).await?;
            let index =
                Manifest::parse(&body).with_context(|| format!("referrers of {subject}"))?;
            out.extend(index.manifests);
            match next {
                Some(n) => path = n,
                None => break,
            }
        }
        Ok(out)
    }

    /// The referrers tag schema (distribution-spec "Referrers Tag Schema"):
    /// tag `<alg>-<hex>` names an index of referrers; none when it is absent.
    async fn referrers_by_tag(&self, subject: &Digest) -> Result<Vec<Descriptor>> {
        let path = format!("/v2/{}/manifests/{}", self.repo, subject.tag_form());
        let resp = self
            .client
            .get(&path, &self.scope, Some(MANIFEST_ACCEPT), None)
            .await?;
        match resp.status() {
            StatusCode::NOT_FOUND => Ok(Vec::new()),
            s if s.is_success() => {
                let body = read_limited(resp, oci::MAX_MANIFEST_SIZE as usize).await?;
                let index = Manifest::parse(&body)
                    .with_context(|| format!("referrers tag {}", subject.tag_form()))?;
                Ok(index.manifests)
            }
            s => bail!("referrers tag {}: {s}", subject.tag_form()),
        }
    }

    /// Downloads one blob into the cache unless it is there already.
    async fn blob(&self, desc: Descriptor, progress: &indicatif::ProgressBar) -> Result<()> {
        if self.cache.has(&desc.digest, desc.size) {
            self.stats().cache_hits.fetch_add(1, Ordering::Relaxed);
            progress.inc(desc.size);
            return Ok(());
        }
        let tmp = self.cache.tmp_path(&desc.digest);
        let result = self.download(&desc, &tmp, progress).await;
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.with_context(|| format!("blob {}", desc.digest))
    }

    async fn download(
        &self,
        desc: &Descriptor,
        tmp: &Path,
        progress: &indicatif::ProgressBar,
    ) -> Result<()> {
        let path = format!("/v2/{}/blobs/{}", self.repo, desc.digest);
        let path = path.as_str();
        let download = Download {
            expected: &desc.digest,
            size: desc.size,
            file: tmp,
            progress,
            counters: &self.stats().http,
            bytes: Some(&self.stats().bytes),
            max_retries: MAX_RETRIES,
        };
        download
            .run(move |from| async move {
                let resp = self.client.get(path, &self.scope, None, from).await?;
                if resp.status() == StatusCode::NOT_FOUND {
                    bail!("not found in {} on {}", self.repo, self.client.host());
                }
                Ok(resp)
            })
            .await?;
        self.cache.commit(tmp, &desc.digest)?;
        Ok(())
    }
}
