//! Pass 2: writing the surviving entries as deterministic ustar with PAX records where a field
//! does not fit.

use super::*;

/// Writes the output tar.
pub(super) struct Out<W: Write> {
    pub(super) tar: tar::Builder<W>,
    /// Directories written: true with their final attributes, false when
    /// made up for a child that came first.
    pub(super) dirs: HashMap<String, bool>,
}

/// One PAX record: `"<len> key=value\n"`, where len counts the whole record.
pub(super) fn pax_record(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    let rest = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    out.extend_from_slice(format!("{len} {key}=").as_bytes());
    out.extend_from_slice(value);
    out.push(b'\n');
}

pub(super) const USTAR_ID_MAX: u64 = 0o7777777;

/// `name` as text when it is UTF-8 (else it goes into a PAX record).
pub(super) fn ustar_name(name: &[u8]) -> Option<&str> {
    std::str::from_utf8(name).ok()
}

pub(super) const USTAR_TIME_MAX: u64 = 0o77777777777;

impl<W: Write> Out<W> {
    pub(super) fn entry(
        &mut self,
        path: &str,
        m: &Meta,
        link: Option<&str>,
        size: u64,
        data: &mut dyn Read,
    ) -> Result<()> {
        let mut pax = Vec::new();
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(m.kind.entry_type());
        h.set_mode(m.mode & 0o7777);
        h.set_size(size);
        if m.uid > USTAR_ID_MAX {
            pax_record(&mut pax, "uid", m.uid.to_string().as_bytes());
            h.set_uid(0);
        } else {
            h.set_uid(m.uid);
        }
        if m.gid > USTAR_ID_MAX {
            pax_record(&mut pax, "gid", m.gid.to_string().as_bytes());
            h.set_gid(0);
        } else {
            h.set_gid(m.gid);
        }
        let precise_mtime = m.pax.iter().any(|(k, _)| k == "mtime");
        if m.mtime > USTAR_TIME_MAX && !precise_mtime {
            pax_record(&mut pax, "mtime", m.mtime.to_string().as_bytes());
        }
        h.set_mtime(m.mtime.min(USTAR_TIME_MAX));
        // A name that does not fit the ustar field (or is not UTF-8) goes into PAX.
        if ustar_name(&m.uname).is_none_or(|n| h.set_username(n).is_err()) {
            pax_record(&mut pax, "uname", &m.uname);
        }
        if ustar_name(&m.gname).is_none_or(|n| h.set_groupname(n).is_err()) {
            pax_record(&mut pax, "gname", &m.gname);
        }
        if matches!(m.kind, Kind::Char | Kind::Block) {
            h.set_device_major(m.dev.0)?;
            h.set_device_minor(m.dev.1)?;
        }
        if h.set_path(path).is_err() {
            pax_record(&mut pax, "path", path.as_bytes());
            let short: String = path
                .chars()
                .rev()
                .take(90)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            h.set_path(short.trim_start_matches('/'))
                .or_else(|_| h.set_path("long-name"))?;
        }
        if let Some(target) = link
            && h.set_link_name_literal(target).is_err()
        {
            pax_record(&mut pax, "linkpath", target.as_bytes());
            h.set_link_name_literal("long-link")?;
        }
        for (k, v) in &m.pax {
            pax_record(&mut pax, k, v);
        }
        if !pax.is_empty() {
            let mut x = tar::Header::new_ustar();
            x.set_entry_type(tar::EntryType::XHeader);
            x.set_mode(0o644);
            x.set_size(pax.len() as u64);
            x.set_path("PaxHeaders/entry")?;
            x.set_cksum();
            self.tar.append(&x, &pax[..])?;
        }
        h.set_cksum();
        self.tar.append(&h, data)?;
        Ok(())
    }

    /// Writes directory `path` with `m` unless already written with its final attributes.
    pub(super) fn dir(&mut self, path: &str, m: &Meta, fin: bool) -> Result<()> {
        if self.dirs.get(path).copied().unwrap_or(false) {
            return Ok(());
        }
        if !fin && self.dirs.contains_key(path) {
            return Ok(());
        }
        self.entry(path, m, None, 0, &mut std::io::empty())?;
        self.dirs.insert(path.to_string(), fin);
        Ok(())
    }

    /// Writes every ancestor of `path` not written yet: with the attributes
    /// an upper layer gives it, else made up.
    pub(super) fn parents(&mut self, plan: &Plan, path: &str) -> Result<()> {
        for a in ancestors(path) {
            if self.dirs.contains_key(a) {
                continue;
            }
            let known = plan.ops.get(a).and_then(|ops| {
                ops.iter()
                    .rev()
                    .find_map(|(k, op)| match (op, plan.fate(*k, a, true)) {
                        (Op::Dir(own), Fate::Alive(top)) => Some(top.unwrap_or(own).clone()),
                        _ => None,
                    })
            });
            match known {
                Some(m) => self.dir(a, &m, true)?,
                None => self.dir(a, &Meta::implicit_dir(), false)?,
            }
        }
        Ok(())
    }
}

/// A first-layer hard link outlived its target: pass 1 must cover the first layer.
#[derive(Debug)]
pub(super) struct NeedFullScan;

impl std::fmt::Display for NeedFullScan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("first-layer hard link outlives its target")
    }
}

impl std::error::Error for NeedFullScan {}

/// Pass 2: streams every layer, writing what survives, into `w`.
pub(super) fn write_all<W: Write>(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    layers: &[Layer],
    plan: &Plan,
    w: W,
) -> Result<W> {
    let mut out = Out {
        tar: tar::Builder::new(w),
        dirs: HashMap::new(),
    };
    for (j, layer) in layers.iter().enumerate() {
        let scanned = j >= plan.scanned_from;
        let mut seen: HashSet<String> = HashSet::new();
        with_layer(store, handle, layer, &mut |entry| {
            let Some((p, m)) = path_entry(entry, &mut seen)? else {
                return Ok(());
            };
            match m.kind {
                Kind::Dir => {
                    if let Fate::Alive(top) = plan.fate(j, &p, true) {
                        out.parents(plan, &p)?;
                        out.dir(&p, top.unwrap_or(&m), true)?;
                    }
                }
                Kind::Hardlink => {
                    let target = m.link.clone().unwrap_or_default();
                    if !plan.alive(j, &p) {
                        return Ok(());
                    }
                    let src = if scanned {
                        plan.links.get(&(j, p.clone())).cloned()
                    } else {
                        Some((0, target.clone()))
                    };
                    let to = match src.as_ref().and_then(|s| plan.canonical.get(s)) {
                        Some(name) => name.clone(),
                        None if !scanned && !plan.alive(0, &target) => {
                            return Err(NeedFullScan.into());
                        }
                        None => target,
                    };
                    if to != p {
                        out.parents(plan, &p)?;
                        out.entry(&p, &m, Some(&to), 0, &mut std::io::empty())?;
                    }
                }
                _ => {
                    let key = (j, p);
                    let name = match plan.canonical.get(&key) {
                        Some(name) => Some(name.as_str()),
                        None if plan.alive(j, &key.1) => Some(key.1.as_str()),
                        None => None,
                    };
                    if let Some(name) = name {
                        out.parents(plan, name)?;
                        let size = if m.kind == Kind::Regular {
                            entry.size()
                        } else {
                            0
                        };
                        let link = m.link.clone();
                        out.entry(name, &m, link.as_deref(), size, entry)?;
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok(out.tar.into_inner()?)
}
