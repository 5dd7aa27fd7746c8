//! Pass 1: what the upper layers do to each path (the plan).

use super::*;

/// What an upper layer does at one path.
pub(super) enum Op {
    Whiteout,
    Opaque,
    Dir(Box<Meta>),
    /// A regular file, symlink or device.
    File,
    /// A hard link to this (cleaned) path.
    Link(String),
}

/// Pass 1's record: layer index → ops, per path.
#[derive(Default)]
pub(super) struct Plan {
    /// Layers below this index were not scanned (their ops are unknown).
    pub(super) scanned_from: usize,
    pub(super) ops: HashMap<String, Vec<(usize, Op)>>,
    /// Hard links of scanned layers that survive, → their inode's source.
    pub(super) links: HashMap<(usize, String), (usize, String)>,
    /// Inode source (layer, path) → the name it is written under.
    pub(super) canonical: HashMap<(usize, String), String>,
}

/// Whether the occurrence of a path in a layer survives all layers above.
pub(super) enum Fate<'a> {
    Dead,
    /// Survives; for a directory, the attributes of the top-most layer
    /// that declares it again (`None`: its own).
    Alive(Option<&'a Meta>),
}

impl Plan {
    pub(super) fn record(&mut self, layer: usize, path: String, op: Op) {
        self.ops.entry(path).or_default().push((layer, op));
    }

    /// The fate of `path` as written by layer `j` (a directory if `is_dir`).
    pub(super) fn fate(&self, j: usize, path: &str, is_dir: bool) -> Fate<'_> {
        // `.wh..wh..opq` at the top level hides every lower entry.
        if let Some(ops) = self.ops.get("")
            && ops.iter().any(|(k, op)| *k > j && matches!(op, Op::Opaque))
        {
            return Fate::Dead;
        }
        for a in ancestors(path) {
            if let Some(ops) = self.ops.get(a)
                && ops
                    .iter()
                    .any(|(k, op)| *k > j && !matches!(op, Op::Dir(_)))
            {
                return Fate::Dead;
            }
        }
        let mut top: Option<(usize, &Meta)> = None;
        if let Some(ops) = self.ops.get(path) {
            for (k, op) in ops.iter().filter(|(k, _)| *k > j) {
                match op {
                    Op::Opaque => {}
                    Op::Dir(m) if is_dir => {
                        if top.is_none_or(|(t, _)| *k > t) {
                            top = Some((*k, m));
                        }
                    }
                    _ => return Fate::Dead,
                }
            }
        }
        Fate::Alive(top.map(|(_, m)| m))
    }

    pub(super) fn alive(&self, j: usize, path: &str) -> bool {
        matches!(self.fate(j, path, false), Fate::Alive(_))
    }

    /// The inode a hard link written by layer `layer` to `target` names:
    /// (layer, path) of the entry that holds its content. `None`: dangling.
    pub(super) fn inode(&self, mut layer: usize, target: &str) -> Option<(usize, String)> {
        let mut target = target.to_string();
        for _ in 0..64 {
            let occ = self.ops.get(&target).and_then(|ops| {
                ops.iter()
                    .rev()
                    .find(|(i, op)| *i <= layer && !matches!(op, Op::Opaque))
            });
            match occ {
                Some((i, Op::File)) => return Some((*i, target)),
                Some((i, Op::Link(next))) => {
                    layer = *i;
                    target = next.clone();
                }
                Some(_) => return None,
                None if self.scanned_from > 0 => return Some((0, target)),
                None => return None,
            }
        }
        None
    }

    /// After pass 1: resolves every surviving hard link to its inode and
    /// picks the name each shared inode is written under (its own path if
    /// it survives, else the first surviving link).
    pub(super) fn resolve_links(&mut self) {
        let mut members: HashMap<(usize, String), Vec<(usize, String)>> = HashMap::new();
        for (path, ops) in &self.ops {
            for (k, op) in ops {
                if let Op::Link(target) = op
                    && self.alive(*k, path)
                    && let Some(src) = self.inode(*k, target)
                {
                    members
                        .entry(src.clone())
                        .or_default()
                        .push((*k, path.clone()));
                    self.links.insert((*k, path.clone()), src);
                }
            }
        }
        for (src, mut names) in members {
            let name = if self.alive(src.0, &src.1) {
                src.1.clone()
            } else {
                names.sort();
                names.swap_remove(0).1
            };
            self.canonical.insert(src, name);
        }
    }
}

/// Pass 1: what layers `from..` do, path by path.
pub(super) fn scan(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    layers: &[Layer],
    from: usize,
) -> Result<Plan> {
    let mut plan = Plan {
        scanned_from: from,
        ..Plan::default()
    };
    for (i, layer) in layers.iter().enumerate().skip(from) {
        with_layer(store, handle, layer, &mut |entry| {
            match name_of(&entry.path_bytes())? {
                Name::Root => {}
                Name::Opaque(d) => plan.record(i, d, Op::Opaque),
                Name::Whiteout(p) => plan.record(i, p, Op::Whiteout),
                Name::Path(p) => {
                    let m = meta_of(entry)?;
                    let op = match m.kind {
                        Kind::Dir => Op::Dir(Box::new(m)),
                        Kind::Hardlink => Op::Link(m.link.unwrap_or_default()),
                        _ => Op::File,
                    };
                    plan.record(i, p, op);
                }
            }
            Ok(())
        })?;
    }
    plan.resolve_links();
    Ok(plan)
}
