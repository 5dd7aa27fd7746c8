//! Reading a few files of an image's flattened file system without
//! flattening it: each layer is streamed once, bottom to top, and only the
//! chosen paths are kept, with the same changeset rules as [`flatten`]
//! (whiteouts, opaque directories, a non-directory replacing a directory
//! and all below it). Symbolic links among the kept paths are followed
//! (`etc/os-release` → `../usr/lib/os-release`). For package databases and
//! `os-release` ([`crate::sbom`]); never writes anything.

use std::collections::BTreeMap;

use super::*;

/// Which paths to keep: exact files, and every regular file directly
/// inside some directories (`var/lib/dpkg/status.d`). Paths are relative,
/// without a leading `/`.
#[derive(Debug, Clone, Copy)]
pub struct Wanted<'a> {
    /// Exact file paths.
    pub files: &'a [&'a str],
    /// Directories whose direct children are kept.
    pub dirs: &'a [&'a str],
}

impl Wanted<'_> {
    fn keeps(&self, p: &str) -> bool {
        self.files.contains(&p)
            || p.rsplit_once('/')
                .is_some_and(|(dir, _)| self.dirs.contains(&dir))
    }

    /// Whether `p` is a directory on the way to a kept path.
    fn above(&self, p: &str) -> bool {
        let under =
            |w: &&str| w.len() > p.len() && w.starts_with(p) && w.as_bytes()[p.len()] == b'/';
        self.files.iter().any(under) || self.dirs.iter().any(under) || self.dirs.contains(&p)
    }
}

/// What one layer left at a kept path.
#[derive(Debug, Clone)]
enum Found {
    File(Vec<u8>),
    Symlink(String),
    Hardlink(String),
}

/// What a layer removes from the layers below it.
enum Removal {
    /// The path and everything below it.
    At(String),
    /// Everything strictly below the path (opaque directory).
    Below(String),
}

fn removes(r: &Removal, key: &str) -> bool {
    let below = |p: &str| {
        p.is_empty()
            || (key.len() > p.len() && key.starts_with(p) && key.as_bytes()[p.len()] == b'/')
    };
    match r {
        Removal::At(p) => key == p || below(p),
        Removal::Below(p) => below(p),
    }
}

/// The regular files at the `wanted` paths of the file system `layers`
/// (bottom first) make, path → content. Each layer blob comes from
/// `open(layer)` and is verified (digest, size, diff_id) as it is read.
/// Symbolic and hard links among kept paths are resolved; a path whose link
/// leads outside them is left out.
///
/// Errors: a layer that does not read or verify, a kept file over
/// `max_file` bytes, a malformed tar.
pub fn pick_files<'a>(
    layers: &[Layer],
    open: &mut dyn FnMut(&Layer) -> Result<Box<dyn Read + 'a>>,
    wanted: Wanted<'_>,
    max_file: u64,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut kept: BTreeMap<String, Found> = BTreeMap::new();
    for layer in layers {
        let mut removals = Vec::new();
        let mut added = BTreeMap::new();
        read_layer(open(layer)?, layer, &mut |entry| {
            match name_of(&entry.path_bytes())? {
                Name::Root => {}
                Name::Opaque(d) => removals.push(Removal::Below(d)),
                Name::Whiteout(p) => removals.push(Removal::At(p)),
                Name::Path(p) => {
                    let kind = Kind::of(entry.header().entry_type())?;
                    if wanted.keeps(&p) {
                        let found = match kind {
                            Kind::Regular => {
                                let size = entry.size();
                                if size > max_file {
                                    bail!("{p}: {size} bytes, over the {max_file} byte limit");
                                }
                                let mut bytes = Vec::with_capacity(size as usize);
                                entry.read_to_end(&mut bytes)?;
                                Some(Found::File(bytes))
                            }
                            Kind::Symlink | Kind::Hardlink => {
                                let m = meta_of(entry)?;
                                let target = m.link.unwrap_or_default();
                                Some(if kind == Kind::Symlink {
                                    Found::Symlink(target)
                                } else {
                                    Found::Hardlink(target)
                                })
                            }
                            _ => None,
                        };
                        removals.push(Removal::At(p.clone()));
                        if let Some(f) = found {
                            added.insert(p, f);
                        }
                    } else if kind != Kind::Dir && wanted.above(&p) {
                        removals.push(Removal::At(p));
                    }
                }
            }
            Ok(())
        })?;
        kept.retain(|k, _| !removals.iter().any(|r| removes(r, k)));
        kept.extend(added);
    }
    let mut out = BTreeMap::new();
    for path in kept.keys() {
        if let Some(bytes) = resolve(&kept, path) {
            out.insert(path.clone(), bytes.clone());
        }
    }
    Ok(out)
}

/// [`pick_files`] over layers held in `store` (read on a blocking thread).
pub async fn pick_from_store(
    store: Arc<dyn Blobstore>,
    layers: Vec<Layer>,
    wanted: Wanted<'static>,
    max_file: u64,
) -> Result<BTreeMap<String, Vec<u8>>> {
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut open = |l: &Layer| -> Result<Box<dyn Read>> {
            Ok(Box::new(open_blob(&store, &handle, &l.digest)?))
        };
        pick_files(&layers, &mut open, wanted, max_file)
    })
    .await
    .map_err(|e| anyhow!("reading layers failed: {e}"))?
}

/// The content `path` leads to through at most 16 links, if kept.
fn resolve<'k>(kept: &'k BTreeMap<String, Found>, path: &str) -> Option<&'k Vec<u8>> {
    let mut at = path.to_string();
    for _ in 0..16 {
        match kept.get(&at)? {
            Found::File(b) => return Some(b),
            Found::Hardlink(t) => at = t.clone(),
            Found::Symlink(t) => {
                let joined = match (t.strip_prefix('/'), at.rsplit_once('/')) {
                    (Some(abs), _) => abs.to_string(),
                    (None, Some((dir, _))) => format!("{dir}/{t}"),
                    (None, None) => t.clone(),
                };
                at = normalize(&joined)?;
            }
        }
    }
    None
}

/// `a/b/../c` → `a/c`; `..` above the root stays at the root (as the kernel does).
fn normalize(p: &str) -> Option<String> {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_layer(entries: &[(&str, tar::EntryType, &str)]) -> (Layer, Vec<u8>) {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, text) in entries {
            let mut h = tar::Header::new_ustar();
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            let data = if *kind == tar::EntryType::Regular {
                text.as_bytes()
            } else {
                b""
            };
            h.set_size(data.len() as u64);
            if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
                h.set_link_name(text).unwrap();
            }
            b.append_data(&mut h, path, data).unwrap();
        }
        let bytes = b.into_inner().unwrap();
        let digest = Digest::sha256_of(&bytes);
        let layer = Layer {
            media_type: "application/vnd.oci.image.layer.v1.tar".into(),
            size: bytes.len() as u64,
            diff_id: Some(digest.clone()),
            digest,
        };
        (layer, bytes)
    }

    fn pick(layers: &[(Layer, Vec<u8>)]) -> Vec<(String, String)> {
        let wanted = Wanted {
            files: &[
                "var/lib/dpkg/status",
                "etc/os-release",
                "usr/lib/os-release",
            ],
            dirs: &["var/lib/dpkg/status.d"],
        };
        let blobs: HashMap<Digest, Vec<u8>> = layers
            .iter()
            .map(|(l, b)| (l.digest.clone(), b.clone()))
            .collect();
        let mut open = |l: &Layer| -> Result<Box<dyn Read>> {
            Ok(Box::new(std::io::Cursor::new(blobs[&l.digest].clone())))
        };
        let layers: Vec<Layer> = layers.iter().map(|(l, _)| l.clone()).collect();
        pick_files(&layers, &mut open, wanted, 1 << 20)
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
            .collect()
    }

    #[test]
    fn whiteouts_opaque_dirs_and_links() {
        use tar::EntryType::*;
        let base = tar_layer(&[
            ("var/lib/dpkg/status", Regular, "one"),
            ("var/lib/dpkg/status.d/a", Regular, "a1"),
            ("usr/lib/os-release", Regular, "ID=debian"),
            ("etc/os-release", Symlink, "../usr/lib/os-release"),
            ("etc/other", Regular, "x"),
        ]);
        let upper = tar_layer(&[
            ("var/lib/dpkg/.wh.status", Regular, ""),
            ("var/lib/dpkg/status.d/.wh..wh..opq", Regular, ""),
            ("var/lib/dpkg/status.d/b", Regular, "b2"),
        ]);
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            pick(&[base.clone(), upper]),
            [
                pair("etc/os-release", "ID=debian"),
                pair("usr/lib/os-release", "ID=debian"),
                pair("var/lib/dpkg/status.d/b", "b2"),
            ]
        );
        // A symlink over a directory hides everything below it.
        let link = tar_layer(&[("var/lib", Symlink, "/elsewhere")]);
        let got = pick(&[base, link]);
        assert_eq!(
            got.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["etc/os-release", "usr/lib/os-release"]
        );
    }
}
