//! Generated test content: OCI layouts of random blobs
//! (`scripts/bench/gen-import-layout.py`), signed bundles of them, and
//! deterministic bytes (random-looking, or text-like and compressible).

use std::path::{Path, PathBuf};
use std::process::Command;

/// A layout of `mib` MiB of random layers under `dir/<name>-layout`; returns
/// it and its refs (`img-00`, ...).
pub fn layout(dir: &Path, name: &str, mib: u32, seed: u32) -> (PathBuf, Vec<String>) {
    let out = dir.join(format!("{name}-layout"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench/gen-import-layout.py");
    let o = Command::new("python3")
        .arg(&script)
        .arg(&out)
        .arg(mib.to_string())
        .args(["--seed", &seed.to_string()])
        .output()
        .expect("python3 (apt-get install python3)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let refs = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    (out, refs)
}

/// A signed bundle `dir/<name>.tar` of a generated layout: every image
/// as `<name>/<ref>:latest`. Returns the bundle and the layout.
pub fn bundle(dir: &Path, name: &str, mib: u32, seed: u32) -> (PathBuf, PathBuf) {
    let (layout, refs) = layout(dir, name, mib, seed);
    let cfg_dir = dir.join(format!("{name}-cfg"));
    std::fs::create_dir_all(&cfg_dir).unwrap();
    let repos: Vec<String> = refs.iter().map(|r| format!("{name}/{r}")).collect();
    let images: Vec<(&str, &str, &[&str])> = refs
        .iter()
        .zip(&repos)
        .map(|(r, repo)| (r.as_str(), repo.as_str(), &["latest"][..]))
        .collect();
    let config = super::write_config(&cfg_dir, &layout, &images);
    let out = dir.join(format!("{name}.tar"));
    super::create_bundle(&config, &out, &[]);
    (out, layout)
}

/// Every file below `dir` (relative paths, sorted).
pub fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// The blob files of a data directory (`blobs/...`).
pub fn blob_files(data: &Path) -> Vec<String> {
    files(&data.join("blobs"))
}

/// Deterministic bytes: xorshift64*, `n` of them from `seed`.
pub fn noise(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545F4914F6CDD1D) >> 56) as u8
        })
        .collect()
}

/// Text-like bytes (words from a small vocabulary), compressible as most
/// of a root file system is.
pub fn text(seed: u64, n: usize) -> Vec<u8> {
    const WORDS: [&str; 12] = [
        "usr",
        "lib",
        "x86_64-linux-gnu",
        "libc.so.6",
        "Package:",
        "Version:",
        "2.36-9",
        "Depends:",
        "\n",
        "/etc/ssl/certs",
        "amd64",
        "bookworm",
    ];
    let r = noise(seed, n / 3 + 1);
    let mut out = Vec::with_capacity(n + 32);
    for b in r {
        out.extend_from_slice(WORDS[b as usize % WORDS.len()].as_bytes());
        out.push(b' ');
        if out.len() >= n {
            break;
        }
    }
    out.truncate(n);
    out
}
