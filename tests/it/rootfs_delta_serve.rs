//! Rootfs deltas on the server: the unmodified casync client (Debian
//! `casync`, its `casync-http` helper) extracts a promoted rootfs from
//! airlock's `rootfs.caibx` and `/stacks/v1/chunks/` store, with and
//! without a seed, byte-identical to the published rootfs (coreutils'
//! `sha256sum`), fetching with a seed exactly the chunks casync's own
//! `casync make` says the seed lacks; GC keeps chunks, indexes and the
//! patch a second promotion made while a kept generation reaches them
//! (on S3 too, where the patch is spooled out of the store) and sweeps
//! them (and orphans) otherwise;
//! fsck names a missing chunk, and `fsck --repair` makes a lost,
//! quarantined, short or rotten rootfs, chunk, index, map or patch again,
//! byte-identical (a lost map stops gc meanwhile); `max_in_flight` counts delta downloads;
//! the index follows the tar's cache rules. On every blobstore backend
//! where the store matters (`on_backends!`).

use crate::common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::backend::{Backend, Kind, on_backends, settled};
use common::deltas::*;
use common::objects::{Objects, blob_key};
use common::*;

fn casync_extract(addr: &str, seed: Option<&Path>, out: &Path) {
    let mut c = Command::new("casync");
    c.arg("extract")
        .arg(format!("--store=http://{addr}/stacks/v1/chunks/"));
    if let Some(s) = seed {
        c.arg(format!("--seed={}", s.display()));
    }
    run_ok(
        c.arg(format!("http://{addr}/stacks/v1/{STACK}/rootfs.caibx"))
            .arg(out),
    );
}

fn casync_extracts_from_airlock(b: Backend) {
    require_tool("casync", "casync");
    import_and_promote(&b, "v1", &[]);
    promote(&b, "v2", &[]);
    let server = b.serve(&[]);
    let addr = server.addr.as_str();
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (rootfs_of(addr, 1), rootfs_of(addr, 2));
    let (v1_tar, v2_tar) = (dir.path().join("v1.tar"), dir.path().join("v2.tar"));
    for (r, tar) in [(&v1, &v1_tar), (&v2, &v2_tar)] {
        let path = format!(
            "/stacks/v1/{STACK}/rootfs.tar?digest={}",
            r["manifest"].as_str().unwrap()
        );
        download(addr, &path, tar);
        assert_eq!(sha256sum(tar), r["sha256"].as_str().unwrap());
    }
    let (ids1, ids2) = (casync_ids(&v1_tar), casync_ids(&v2_tar));
    let new: Vec<_> = ids2.difference(&ids1).collect();
    assert!(
        !new.is_empty() && new.len() < ids2.len() / 2,
        "{} of {} chunks new",
        new.len(),
        ids2.len()
    );

    let before = chunks_served(addr);
    let whole = dir.path().join("whole.tar");
    casync_extract(addr, None, &whole);
    assert_eq!(sha256sum(&whole), v2["sha256"].as_str().unwrap());
    assert_eq!(chunks_served(addr) - before, ids2.len() as u64);

    let before = chunks_served(addr);
    let seeded = dir.path().join("seeded.tar");
    casync_extract(addr, Some(&v1_tar), &seeded);
    assert_eq!(sha256sum(&seeded), v2["sha256"].as_str().unwrap());
    assert_eq!(chunks_served(addr) - before, new.len() as u64);
}

on_backends!([fs, moto, s3s_fs] casync_extracts_from_airlock);

/// The blobs a rootfs's chunk map keeps: the map, the index, every `.cacnk`.
fn chunk_blobs(objects: &Objects, rootfs: &serde_json::Value) -> Vec<String> {
    let map = rootfs["chunks"]["map"].as_str().unwrap().to_string();
    let doc: serde_json::Value =
        serde_json::from_slice(&objects.get(&blob_key(&map)).unwrap()).unwrap();
    let mut out = vec![map, doc["index"].as_str().unwrap().to_string()];
    out.extend(
        doc["chunks"]
            .as_object()
            .unwrap()
            .values()
            .map(|d| d.as_str().unwrap().to_string()),
    );
    out
}

fn gc_keeps_chunks_while_reachable_and_sweeps_them_after(b: Backend) {
    b.import(&test_key().1, bundle());
    let imported = b.history()[0].0;
    promote(&b, "v1", &[]);
    promote(&b, "v2", &[]);
    let show: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "show"], &[STACK, "--json"])).unwrap();
    let objects = Objects::of(&b);
    let mut blobs = chunk_blobs(&objects, &show["promotions"][0]["rootfs"][0]);
    let v2 = &show["promotions"][1]["rootfs"][0];
    blobs.extend(chunk_blobs(&objects, v2));
    // v2's patch from v1 is kept with it.
    blobs.push(v2["patch"]["blob"].as_str().unwrap().to_string());
    blobs.sort();
    blobs.dedup();
    assert!(blobs.len() > 10, "{} chunk blobs", blobs.len());
    let orphan = airlock::chunks::cacnk::compress(b"a chunk no rootfs names").unwrap();
    let orphan_digest = format!(
        "sha256:{}",
        airlock::digest::Digest::sha256_of(&orphan).hex()
    );
    objects.put(&blob_key(&orphan_digest), &orphan);
    std::thread::sleep(Duration::from_millis(2100));
    b.airlock_ok(&["gc"], &["--grace", "1s"]);
    for d in &blobs {
        assert!(
            objects.exists(&blob_key(d)),
            "gc removed {d}, which the promotion keeps"
        );
    }
    assert!(
        !objects.exists(&blob_key(&orphan_digest)),
        "gc kept an unreferenced chunk"
    );

    // fsck knows chunks: one gone is a problem naming it.
    let gone = &blobs[blobs.len() / 2];
    let kept = objects.get(&blob_key(gone)).unwrap();
    objects.delete(&blob_key(gone));
    let o = b.airlock(&["fsck"], &["--json"]);
    let report = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success() && report.contains(gone.as_str()),
        "fsck: {report}"
    );
    objects.put(&blob_key(gone), &kept);

    // Once no kept generation has the promotion, its chunks go.
    b.airlock_ok(
        &["rollback"],
        &["--to", &imported.to_string(), "--reason", "test"],
    );
    std::thread::sleep(Duration::from_millis(2100));
    b.airlock_ok(
        &["gc"],
        &[
            "--grace",
            "1s",
            "--keep-generations",
            "1",
            "--keep-days",
            "0",
        ],
    );
    for d in &blobs {
        assert!(
            !objects.exists(&blob_key(d)),
            "gc kept {d}, which no kept generation reaches"
        );
    }
}

on_backends!([fs, s3s_fs] gc_keeps_chunks_while_reachable_and_sweeps_them_after);

/// sha256 of the stored blob `digest` by coreutils' `sha256sum`.
fn stored_sha256(objects: &Objects, digest: &str) -> String {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), objects.get(&blob_key(digest)).unwrap()).unwrap();
    sha256sum(f.path())
}

/// `fsck --repair --json`: one JSON object, and whether it exited 0.
fn repair_json(b: &Backend, extra: &[&str]) -> (bool, serde_json::Value) {
    let mut args = vec!["--repair", "--json"];
    args.extend_from_slice(extra);
    let o = b.airlock(&["fsck"], &args);
    let text = String::from_utf8_lossy(&o.stdout);
    let v =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not one JSON object ({e}): {text}"));
    (o.status.success(), v)
}

fn fsck_repair_makes_a_stacks_derived_blobs_again(b: Backend) {
    b.import(&test_key().1, bundle());
    promote(&b, "v1", &[]);
    promote(&b, "v2", &[]);
    let show: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "show"], &[STACK, "--json"])).unwrap();
    let (r1, r2) = (
        &show["promotions"][0]["rootfs"][0],
        &show["promotions"][1]["rootfs"][0],
    );
    let d = |v: &serde_json::Value| v.as_str().unwrap().to_string();
    let objects = Objects::of(&b);
    let (tar1, tar2) = (d(&r1["sha256"]), d(&r2["sha256"]));
    let (index2, map2, patch2) = (
        d(&r2["chunks"]["index"]),
        d(&r2["chunks"]["map"]),
        d(&r2["patch"]["blob"]),
    );
    let chunk1 = chunk_blobs(&objects, r1)[2].clone();
    let flip = |digest: &str| {
        let mut bytes = objects.get(&blob_key(digest)).unwrap();
        bytes[4096] ^= 1;
        objects.put(&blob_key(digest), &bytes);
    };
    // Damage: v1's tar rots (the scrub quarantines it); v2's tar, index
    // and one of v1's chunks are lost; v2's patch is cut short (present,
    // but not the size its record names).
    flip(&tar1);
    assert!(!b.airlock(&["scrub"], &[]).status.success());
    for x in [&tar2, &index2, &chunk1] {
        objects.delete(&blob_key(x));
    }
    let patch_bytes = objects.get(&blob_key(&patch2)).unwrap();
    objects.put(&blob_key(&patch2), &patch_bytes[..patch_bytes.len() / 2]);
    let damaged = [&tar1, &tar2, &index2, &patch2, &chunk1];
    let generations = b.history().len();
    let o = b.airlock(&["fsck"], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{text}");
    for x in damaged {
        assert!(
            text.lines()
                .any(|l| l.contains(x.as_str())
                    && l.contains("airlock fsck --repair makes it again")),
            "fsck names {x} as a derived blob: {text}"
        );
    }
    assert!(
        text.contains(&format!("its record says {}", patch_bytes.len())),
        "{text}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("makes the stacks' derived blobs again"),
        "{err}"
    );

    // A dry run names what it would make, makes nothing, and exits 0: it
    // would repair everything found.
    let o = b.airlock(&["fsck"], &["--repair", "--dry-run"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    for line in [
        format!("would make again: rootfs {tar1}"),
        format!("would make again: rootfs {tar2}"),
        format!("would make again: chunks {index2} of rootfs {tar2}"),
        format!("would make again: patch {patch2} of rootfs {tar2}"),
    ] {
        assert!(text.contains(&line), "{line}: {text}");
    }
    let (ok, dry) = repair_json(&b, &["--dry-run"]);
    assert!(ok);
    assert!(dry["rederived"].as_array().unwrap().len() >= 4, "{dry}");
    for x in [&tar1, &tar2, &index2, &chunk1] {
        assert!(!objects.exists(&blob_key(x)), "a dry run made {x}");
    }

    // The repair makes each again, byte for byte what its name says; its
    // --json is one object.
    let (ok, made) = repair_json(&b, &[]);
    assert!(ok, "{made}");
    let entries = made["rederived"].as_array().unwrap();
    assert!(entries.iter().all(|e| e["error"].is_null()), "{made}");
    assert!(
        entries
            .iter()
            .any(|e| e["what"] == "patch" && e["blob"] == patch2.as_str()),
        "{made}"
    );
    assert_eq!(made["after"]["problems"], serde_json::json!([]), "{made}");
    for x in damaged {
        assert_eq!(&stored_sha256(&objects, x), x, "made again");
    }
    b.airlock_ok(&["fsck"], &["--deep"]);
    assert_eq!(b.history().len(), generations, "the state is not changed");

    // A base rotten in place (no scrub ran) is found while the patch is
    // made from it, and made again by the same run.
    flip(&tar1);
    objects.delete(&blob_key(&patch2));
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    assert!(out.contains(&format!("made again: rootfs {tar1}")), "{out}");
    assert!(
        out.contains(&format!("made again: patch {patch2}")),
        "{out}"
    );
    assert_eq!(stored_sha256(&objects, &tar1), tar1);
    assert_eq!(stored_sha256(&objects, &patch2), patch2);

    // A map lost stops gc (its chunks cannot be told from garbage) instead
    // of sweeping v2's own chunks; the repair makes it again.
    objects.delete(&blob_key(&map2));
    std::thread::sleep(Duration::from_millis(1100));
    let o = b.airlock(&["gc"], &["--grace", "1s"]);
    assert!(!o.status.success(), "gc swept with a chunk map missing");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(map2.as_str()) && err.contains("fsck --repair"),
        "{err}"
    );
    for c in chunk_blobs(&objects, r1).iter().skip(1) {
        assert!(objects.exists(&blob_key(c)), "gc removed {c}");
    }
    b.airlock_ok(&["fsck"], &["--repair"]);
    assert_eq!(stored_sha256(&objects, &map2), map2);
    b.airlock_ok(&["gc"], &["--grace", "1s"]);
    b.airlock_ok(&["fsck"], &["--deep"]);

    // What cannot be made (a layer of v2's image lost too) is named, and
    // the repair fails without changing the state.
    let manifest: serde_json::Value =
        serde_json::from_slice(&objects.get(&blob_key(&d(&r2["manifest"]))).unwrap()).unwrap();
    let layer = d(&manifest["layers"][manifest["layers"].as_array().unwrap().len() - 1]["digest"]);
    let layer_bytes = objects.get(&blob_key(&layer)).unwrap();
    objects.delete(&blob_key(&layer));
    objects.delete(&blob_key(&tar2));
    let o = b.airlock(&["fsck"], &["--repair"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(!o.status.success(), "{text}");
    assert!(
        text.contains(&format!("cannot make again: rootfs {tar2}"))
            && text.contains("re-import a bundle that carries the image"),
        "{text}"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot be made again"), "{err}");
    assert!(!objects.exists(&blob_key(&tar2)));
    assert_eq!(b.history().len(), generations, "the state is not changed");
    objects.put(&blob_key(&layer), &layer_bytes);
    b.airlock_ok(&["fsck"], &["--repair"]);
    assert_eq!(stored_sha256(&objects, &tar2), tar2);

    // A damaged current generation and a lost rootfs of the version it
    // restores: one run sets the stacks document back (recovery at the
    // grain of the damage, issue 61) and makes that rootfs again.
    let current = b.history()[0].1.clone();
    let doc: serde_json::Value =
        serde_json::from_slice(&objects.get(&blob_key(&current)).unwrap()).unwrap();
    let stacks_doc = d(&doc["documents"]["stacks"]);
    let mut bytes = objects.get(&blob_key(&stacks_doc)).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x20;
    objects.put(&blob_key(&stacks_doc), &bytes);
    // And its second copies, where the store keeps them (the filesystem's
    // default): damage no copy repairs.
    objects.damage_copies(&stacks_doc);
    objects.delete(&blob_key(&tar1));
    let out = b.airlock_ok(&["fsck"], &["--repair"]);
    assert!(
        out.contains("damaged: document stacks: set back to generation"),
        "{out}"
    );
    assert!(out.contains(&format!("made again: rootfs {tar1}")), "{out}");
    b.airlock_ok(&["fsck"], &[]);
    assert_eq!(stored_sha256(&objects, &tar1), tar1);
}

on_backends!([fs, s3s_fs] fsck_repair_makes_a_stacks_derived_blobs_again);

fn curl_put_report(addr: &str, cell: &str, digest: &str) -> String {
    let o = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-X", "PUT"])
        .args(["-H", "Content-Type: application/json", "-d"])
        .arg(format!("{{\"digest\":\"{digest}\"}}"))
        .arg(format!("http://{addr}/stacks/v1/{STACK}/cells/{cell}"))
        .output()
        .expect("curl (apt-get install curl)");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn max_in_flight_counts_delta_downloads_and_the_index_follows_the_tars_cache_rules() {
    let b = Backend::start(Kind::Fs);
    import_and_promote(&b, "v1", &["--max-in-flight", "1"]);
    let server = b.serve(&[]);
    let addr = server.addr.as_str();
    let get = |path: &str| http(addr, "GET", path, &[]).unwrap();
    let index = |cell: &str| get(&format!("/stacks/v1/{STACK}/rootfs.caibx?cell={cell}"));
    let tar = format!("/stacks/v1/{STACK}/rootfs.tar");
    assert_eq!(index("a").0, 200);
    assert_eq!(
        index("a").0,
        200,
        "a cell's second index GET renews its own lease"
    );
    let busy = index("b");
    assert_eq!(busy.0, 429);
    assert!(header(&busy.1, "retry-after").is_some());
    assert_eq!(get(&tar).0, 429, "a delta download holds the only slot");
    assert_eq!(
        get(&format!("{tar}?cell=a")).0,
        200,
        "a's lease becomes its tar download"
    );
    // Its slot is given back when the server drops the sent body.
    let status = settled(Duration::from_secs(2), &200, || index("b").0);
    assert_eq!(status, 200);
    let digest = rootfs_of(addr, 1)["manifest"].as_str().unwrap().to_string();
    assert_eq!(curl_put_report(addr, "b", &digest), "204");
    assert_eq!(get(&tar).0, 200, "b's report gave its lease back");

    // Cache rules, the tar's and the index's alike: a digest-addressed URL
    // is immutable; one that resolves may change (no-cache, with an ETag).
    for file in ["rootfs.tar", "rootfs.caibx"] {
        let (s, h, _) = http(addr, "HEAD", &format!("/stacks/v1/{STACK}/{file}"), &[]).unwrap();
        assert_eq!(
            (s, header(&h, "cache-control")),
            (200, Some("no-cache")),
            "{file}"
        );
        assert!(header(&h, "etag").is_some(), "{file}");
        let path = format!("/stacks/v1/{STACK}/{file}?digest={digest}");
        let (s, h, _) = http(addr, "HEAD", &path, &[]).unwrap();
        assert_eq!(
            (s, header(&h, "cache-control")),
            (200, Some("public, max-age=31536000, immutable")),
            "{file}"
        );
    }
}

/// Two `stack promote` processes at once (issue 36): both succeed, one
/// after the other, and the one that lands second has the patch and the
/// diff made against the promotion it actually replaces, as a sequential
/// promotion has.
#[test]
fn concurrent_promotions_make_their_patch_against_what_they_replace() {
    let b = Backend::start(Kind::Fs);
    b.import(&test_key().1, bundle());
    std::thread::scope(|s| {
        let runs: Vec<_> = ["v1", "v2"]
            .into_iter()
            .map(|tag| {
                let b = &b;
                s.spawn(move || promote(b, tag, &[]))
            })
            .collect();
        for r in runs {
            r.join().unwrap();
        }
    });
    let show: serde_json::Value =
        serde_json::from_str(&b.airlock_ok(&["stack", "show"], &[STACK, "--json"])).unwrap();
    let promotions = show["promotions"].as_array().unwrap();
    assert_eq!(promotions.len(), 2, "{show:#}");
    let (first, second) = (&promotions[0], &promotions[1]);
    assert_eq!(second["replaces"], first["id"], "{show:#}");
    let patch = &second["rootfs"][0]["patch"];
    assert_eq!(
        patch["from"], first["rootfs"][0]["sha256"],
        "the second promotion's patch: {show:#}"
    );
    assert!(
        !second["diff"].is_null(),
        "the second promotion's diff: {show:#}"
    );
}
