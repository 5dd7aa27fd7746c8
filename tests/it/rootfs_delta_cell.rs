//! `airlock cell sync` with rootfs deltas against a running `airlock
//! serve`: a cell holding v1 moves to v2 (one package rebuilt) by
//! fetching exactly the chunks that `casync make` (Debian `casync`) says
//! its installed rootfs lacks (counted at the server), also with the
//! site's CA certificates added to v1, and installs a tar byte-identical
//! to the published one (`sha256sum`); killed (`SIGKILL`) mid-download it
//! never installs a partial rootfs and the next run fetches only what it
//! had not; a chunk whose bytes are not its id (a proxy swaps one) is
//! refused and a chunk missing from the store makes the cell fall back to
//! the full download. The cells report what they moved (`stack status`,
//! `/metrics`). With the patch the promotion made (checked by the stock
//! `zstd -d --patch-from`), a cell holding v1 as published fetches no
//! chunk at all; the chunk tests delete it first (a store that lost it).

use crate::common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::backend::{Backend, Kind, settled};
use common::deltas::*;
use common::objects::{Objects, blob_key};
use common::*;

fn sync(url: &str, dir: &Path, cell: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "cell",
            "sync",
            "--once",
            "--log",
            "info",
            "--log-format",
            "json",
        ])
        .args(["--url", url, "--stack", STACK])
        .args(["--install-dir", dir.to_str().unwrap(), "--cell-id", cell])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn sync_ok(url: &str, dir: &Path, cell: &str, extra: &[&str]) -> String {
    let o = sync(url, dir, cell, extra, &[]);
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "cell sync: {log}");
    log
}

fn installed(dir: &Path) -> PathBuf {
    dir.join(STACK).join("rootfs.tar")
}

/// `installed.json`'s current `transfer`.
fn transfer(dir: &Path) -> serde_json::Value {
    let r: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join(STACK).join("installed.json")).unwrap())
            .unwrap();
    r["current"]["transfer"].clone()
}

fn tar_cat(tar: &Path, member: &str) -> Vec<u8> {
    let o = Command::new("tar")
        .arg("-xOf")
        .arg(tar)
        .arg(member)
        .output()
        .unwrap();
    assert!(o.status.success(), "tar -xOf {member}");
    o.stdout
}

/// Promotes v2 and waits until the server assigns it; returns its rootfs
/// and the tar it serves (saved under `dir`).
fn roll_to_v2(b: &Backend, addr: &str, dir: &Path) -> (serde_json::Value, PathBuf) {
    promote(b, "v2", &[]);
    let v2 = settled(b.refresh_bound(), &true, || {
        stack_json(addr)["promotions"].as_array().unwrap().len() == 2
    });
    assert!(v2);
    let r = rootfs_of(addr, 2);
    let tar = dir.join("v2.tar");
    download(
        addr,
        &format!(
            "/stacks/v1/{STACK}/rootfs.tar?digest={}",
            r["manifest"].as_str().unwrap()
        ),
        &tar,
    );
    (r, tar)
}

/// Deletes the patch `v2` names (a store that lost it): cells that could
/// apply it fall back to chunks.
fn drop_patch(b: &Backend, v2: &serde_json::Value) {
    let blob = v2["patch"]["blob"].as_str().expect("v2 has a patch");
    let objects = Objects::of(b);
    assert!(objects.exists(&blob_key(blob)));
    objects.delete(&blob_key(blob));
}

#[test]
fn a_cell_moves_to_v2_fetching_only_the_chunks_it_lacks() {
    let b = Backend::start(Kind::Fs);
    import_and_promote(&b, "v1", &[]);
    let server = b.serve(&[]);
    let (addr, url) = (server.addr.as_str(), format!("http://{}", server.addr));
    let tmp = tempfile::tempdir().unwrap();
    let (plain, with_certs) = (tmp.path().join("plain"), tmp.path().join("certs"));
    let (cert, _) = self_signed_cert(tmp.path(), "site-ca", "site CA");
    let certs = ["--trusted-certs", cert.to_str().unwrap()];
    sync_ok(&url, &plain, "cell-1", &[]);
    sync_ok(&url, &with_certs, "cell-2", &certs);
    assert_eq!(
        transfer(&plain)["method"],
        "full",
        "no rootfs to seed from: the tar"
    );
    assert_eq!(
        sha256sum(&installed(&plain)),
        rootfs_of(addr, 1)["sha256"].as_str().unwrap()
    );

    let (v2, v2_tar) = roll_to_v2(&b, addr, tmp.path());
    drop_patch(&b, &v2);
    let new_ids = casync_ids(&v2_tar);
    for (dir, cell, extra) in [
        (&plain, "cell-1", &[][..]),
        (&with_certs, "cell-2", &certs[..]),
    ] {
        let lacks = new_ids.difference(&casync_ids(&installed(dir))).count() as u64;
        let before = chunks_served(addr);
        let log = sync_ok(&url, dir, cell, extra);
        let why = match cell {
            "cell-1" => "patch download",
            _ => "does not hold the patch's base",
        };
        assert!(log.contains(why), "{cell}: {log}");
        assert_eq!(
            chunks_served(addr) - before,
            lacks,
            "{cell}: chunks fetched; log: {log}"
        );
        assert!(log.contains("\"method\":\"delta\""), "{log}");
        let t = transfer(dir);
        assert_eq!(t["method"], "delta");
        assert!(
            t["bytes"].as_u64().unwrap() < v2["size"].as_u64().unwrap() / 2,
            "{t}"
        );
        assert!(!dir.join(STACK).join(".chunks").exists());
    }
    assert_eq!(
        sha256sum(&installed(&plain)),
        v2["sha256"].as_str().unwrap()
    );
    let member = format!("{CHANGED}/lib0.so");
    assert_eq!(
        tar_cat(&installed(&with_certs), &member),
        tar_cat(&v2_tar, &member)
    );
    let bundle = tar_cat(&installed(&with_certs), "etc/ssl/certs/ca-certificates.crt");
    let pem = std::fs::read(&cert).unwrap();
    assert!(
        bundle.windows(pem.len()).any(|w| w == pem.as_slice()),
        "certs added"
    );

    let status: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "status"], &[STACK, "--json"])).unwrap();
    let moved: u64 = [&plain, &with_certs]
        .iter()
        .map(|d| transfer(d)["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(status["delta_cells"], 2);
    assert_eq!(status["bytes_moved"].as_u64().unwrap(), moved);
    assert_eq!(
        status["bytes_saved"].as_u64().unwrap(),
        2 * v2["size"].as_u64().unwrap() - moved
    );
    let gauges = b.airlock_ok(&["stack", "status"], &[STACK, "--prometheus"]);
    let line = format!(
        "airlock_stack_rollout_bytes_saved{{stack=\"{STACK}\"}} {}",
        status["bytes_saved"]
    );
    assert!(gauges.contains(&line), "no {line} in {gauges}");
}

/// Killed mid-delta (kill -9 after 3 chunks), the cell keeps v1; the next
/// sync resumes from the chunk cache (one cached chunk torn, as a power
/// loss may leave it: fetched again) and installs v2.
#[test]
fn killed_mid_delta_it_never_installs_a_partial_rootfs_and_resumes() {
    let b = Backend::start(Kind::Fs);
    import_and_promote(&b, "v1", &[]);
    let server = b.serve(&[]);
    let (addr, url) = (server.addr.as_str(), format!("http://{}", server.addr));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cell");
    sync_ok(&url, &dir, "cell-1", &[]);
    let v1_sha = sha256sum(&installed(&dir));
    let (v2, v2_tar) = roll_to_v2(&b, addr, tmp.path());
    drop_patch(&b, &v2);
    let lacks = casync_ids(&v2_tar)
        .difference(&casync_ids(&installed(&dir)))
        .count() as u64;
    assert!(lacks > 4, "only {lacks} chunks differ");

    let o = sync(
        &url,
        &dir,
        "cell-1",
        &[],
        &[("AIRLOCK_FAILPOINT", "cell:after_chunks=3")],
    );
    assert_eq!(
        o.status.signal(),
        Some(9),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        sha256sum(&installed(&dir)),
        v1_sha,
        "a killed delta changed rootfs.tar"
    );
    let cached: Vec<PathBuf> = std::fs::read_dir(dir.join(STACK).join(".chunks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "cacnk"))
        .collect();
    assert_eq!(cached.len(), 3);
    // The cache is not fsynced: a power loss may leave a chunk torn. Half
    // of one is refused by its id at the resume and fetched again.
    let torn = std::fs::read(&cached[0]).unwrap();
    std::fs::write(&cached[0], &torn[..torn.len() / 2]).unwrap();

    let before = chunks_served(addr);
    sync_ok(&url, &dir, "cell-1", &[]);
    assert_eq!(
        chunks_served(addr) - before,
        lacks - 2,
        "resumed: fetched again what it had (all but the 2 whole cached chunks)"
    );
    assert_eq!(sha256sum(&installed(&dir)), v2["sha256"].as_str().unwrap());
    assert_eq!(transfer(&dir)["method"], "delta");
}

/// An HTTP proxy to `upstream`, one request per connection, that answers
/// a request for the path `from` (any query) with what `upstream` sends
/// for the path `to`.
fn swapping_proxy(upstream: String, from: String, to: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut client) = conn else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && client.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).into_owned();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            let _ = client.read_exact(&mut body);
            let mut req: Vec<u8> = head
                .split("\r\n")
                .filter(|l| !l.is_empty() && !l.to_ascii_lowercase().starts_with("connection:"))
                .map(|l| match l.split_once(' ') {
                    Some((m, rest)) if rest.starts_with(&from) => format!("{m} {to} HTTP/1.1"),
                    _ => l.to_string(),
                })
                .flat_map(|l| format!("{l}\r\n").into_bytes())
                .collect();
            req.extend_from_slice(b"Connection: close\r\n\r\n");
            req.extend_from_slice(&body);
            let Ok(mut up) = TcpStream::connect(&upstream) else {
                continue;
            };
            let mut resp = Vec::new();
            if up.write_all(&req).is_ok() && up.read_to_end(&mut resp).is_ok() {
                let _ = client.write_all(&resp);
            }
        }
    });
    url
}

#[test]
fn a_refused_or_missing_chunk_falls_back_to_the_full_download() {
    let b = Backend::start(Kind::Fs);
    import_and_promote(&b, "v1", &[]);
    let server = b.serve(&[]);
    let (addr, url) = (server.addr.as_str(), format!("http://{}", server.addr));
    let tmp = tempfile::tempdir().unwrap();
    let (swapped, missing) = (tmp.path().join("swapped"), tmp.path().join("missing"));
    sync_ok(&url, &swapped, "cell-1", &[]);
    sync_ok(&url, &missing, "cell-2", &[]);
    let v1_ids = casync_ids(&installed(&swapped));
    let (v2, v2_tar) = roll_to_v2(&b, addr, tmp.path());
    drop_patch(&b, &v2);
    let new: Vec<String> = casync_ids(&v2_tar).difference(&v1_ids).cloned().collect();
    let path = |id: &str| format!("/stacks/v1/chunks/{}/{id}.cacnk", &id[..4]);

    // A chunk whose bytes are another chunk's: refused by its id.
    let proxy = swapping_proxy(
        addr.to_string(),
        path(&new[0]),
        path(v1_ids.first().unwrap()),
    );
    let log = sync_ok(&proxy, &swapped, "cell-1", &[]);
    assert!(log.contains("not the id it was asked by"), "{log}");
    assert_eq!(transfer(&swapped)["method"], "full");
    assert_eq!(
        sha256sum(&installed(&swapped)),
        v2["sha256"].as_str().unwrap()
    );

    // A chunk the store lost: 404, the full download.
    let objects = Objects::of(&b);
    let map = v2["chunks"]["map"].as_str().unwrap();
    let doc: serde_json::Value =
        serde_json::from_slice(&objects.get(&blob_key(map)).unwrap()).unwrap();
    objects.delete(&blob_key(doc["chunks"][&new[0]].as_str().unwrap()));
    let log = sync_ok(&url, &missing, "cell-2", &[]);
    assert!(log.contains("missing from the chunk store"), "{log}");
    assert_eq!(transfer(&missing)["method"], "full");
    assert_eq!(
        sha256sum(&installed(&missing)),
        v2["sha256"].as_str().unwrap()
    );
    assert!(!missing.join(STACK).join(".chunks").exists());
}

/// With the patch the promotion made (`zstd --patch-from` of v2 against
/// v1, checked here by the stock `zstd -d --patch-from`), a cell holding
/// v1 as published moves by the patch alone (no chunk fetched); a cell
/// with the site's CA certificates added does not hold the patch's base
/// and uses chunks; a patch that is not what the assignment says (a
/// proxy sends the index in its place) is refused by its digest and the
/// cell uses chunks. Every cell installs v2 byte for byte. A symlink and
/// a FIFO planted where the cell writes are replaced, not written through
/// or waited on, and an up-to-date pass removes leftovers.
#[test]
fn a_cell_holding_v1_as_published_moves_by_the_promotion_patch() {
    require_tool("zstd", "zstd");
    let b = Backend::start(Kind::Fs);
    import_and_promote(&b, "v1", &[]);
    let server = b.serve(&[]);
    let (addr, url) = (server.addr.as_str(), format!("http://{}", server.addr));
    let tmp = tempfile::tempdir().unwrap();
    let (plain, with_certs, proxied) = (
        tmp.path().join("plain"),
        tmp.path().join("certs"),
        tmp.path().join("proxied"),
    );
    let (cert, _) = self_signed_cert(tmp.path(), "site-ca", "site CA");
    let certs = ["--trusted-certs", cert.to_str().unwrap()];
    sync_ok(&url, &plain, "cell-1", &[]);
    sync_ok(&url, &with_certs, "cell-2", &certs);
    sync_ok(&url, &proxied, "cell-3", &[]);
    let v1 = rootfs_of(addr, 1);
    let v1_tar = tmp.path().join("v1.tar");
    std::fs::copy(installed(&plain), &v1_tar).unwrap();
    let (v2, _) = roll_to_v2(&b, addr, tmp.path());
    let v2_sha = v2["sha256"].as_str().unwrap();

    // What the server made is a zstd patch the stock tool applies to v1.
    let patch = &v2["patch"];
    assert_eq!(patch["from"], v1["sha256"]);
    assert_eq!(patch["from_size"], v1["size"]);
    let patch_file = tmp.path().join("v2.patch");
    download(
        addr,
        &format!(
            "/stacks/v1/{STACK}/rootfs.patch?digest={}",
            v2["manifest"].as_str().unwrap()
        ),
        &patch_file,
    );
    assert_eq!(sha256sum(&patch_file), patch["blob"].as_str().unwrap());
    let size = std::fs::metadata(&patch_file).unwrap().len();
    assert_eq!(patch["size"].as_u64().unwrap(), size);
    assert!(
        size < v2["size"].as_u64().unwrap() / 20,
        "patch of {size} bytes"
    );
    let out = tmp.path().join("zstd-v2.tar");
    run_ok(
        Command::new("zstd")
            .args(["-q", "-d", "--long=31", "--patch-from"])
            .arg(&v1_tar)
            .arg(&patch_file)
            .arg("-o")
            .arg(&out),
    );
    assert_eq!(sha256sum(&out), v2_sha);
    let (status, _, body) =
        http(addr, "GET", &format!("/stacks/v1/{STACK}?cell=cell-1"), &[]).unwrap();
    assert_eq!(status, 200);
    let assignment: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(assignment["rootfs_patch"]["digest"], patch["blob"]);
    assert_eq!(assignment["rootfs_patch"]["from"], v1["sha256"]);

    // What a crash or an attack may leave where the cell writes: a
    // symlink at the patch's path, a FIFO at the download's. Neither is
    // written through nor waited on.
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, b"keep").unwrap();
    std::os::unix::fs::symlink(&victim, plain.join(STACK).join(".rootfs.patch")).unwrap();
    run_ok(Command::new("mkfifo").arg(plain.join(STACK).join(".rootfs.tar.download")));
    let before = chunks_served(addr);
    let log = sync_ok(&url, &plain, "cell-1", &[]);
    assert!(log.contains("rootfs patched"), "{log}");
    assert_eq!(
        chunks_served(addr),
        before,
        "a patched cell fetches no chunk"
    );
    assert_eq!(sha256sum(&installed(&plain)), v2_sha);
    let t = transfer(&plain);
    assert_eq!(t["method"], "delta");
    assert_eq!(t["bytes"].as_u64().unwrap(), size);
    assert!(!plain.join(STACK).join(".rootfs.patch").exists());
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    // An up-to-date pass removes what an interrupted one left.
    std::fs::create_dir_all(plain.join(STACK).join(".chunks/ab12")).unwrap();
    std::fs::write(plain.join(STACK).join(".rootfs.tar.download"), b"partial").unwrap();
    let log = sync_ok(&url, &plain, "cell-1", &[]);
    assert!(
        log.contains("removed what an interrupted download left"),
        "{log}"
    );
    assert!(!plain.join(STACK).join(".chunks").exists());
    assert!(!plain.join(STACK).join(".rootfs.tar.download").exists());
    assert_eq!(sha256sum(&installed(&plain)), v2_sha);

    let before = chunks_served(addr);
    let log = sync_ok(&url, &with_certs, "cell-2", &certs);
    assert!(log.contains("does not hold the patch's base"), "{log}");
    assert!(
        chunks_served(addr) > before,
        "the cell with certs uses chunks"
    );
    assert_eq!(transfer(&with_certs)["method"], "delta");

    let proxy = swapping_proxy(
        addr.to_string(),
        format!("/stacks/v1/{STACK}/rootfs.patch"),
        format!("/stacks/v1/{STACK}/rootfs.caibx"),
    );
    let before = chunks_served(addr);
    let log = sync_ok(&proxy, &proxied, "cell-3", &[]);
    assert!(log.contains("patch download"), "{log}");
    assert!(chunks_served(addr) > before, "a refused patch: chunks");
    assert_eq!(transfer(&proxied)["method"], "delta");
    assert_eq!(sha256sum(&installed(&proxied)), v2_sha);
}
