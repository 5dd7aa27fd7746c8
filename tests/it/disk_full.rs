//! A full disk (issue 13): an import or push that runs out of space fails
//! with a clear error (HTTP 507 INSUFFICIENT_STORAGE naming the cause),
//! leaves the root unchanged and no temporary files, what the import wrote
//! is reclaimed by `gc` at once, and reads keep working. Three ways: a
//! store wrapper failing writes after N bytes (in process), the free-space
//! floor (`--min-free-space`), and a real tmpfs when this machine can mount one.
//!
//! Filesystem only: running out of space, the free-space floor and the
//! tmpfs are properties of a local filesystem (an S3 server answers a
//! failed write with an error, which the S3 outage test covers).

use crate::common;
use crate::forwarding_store;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use airlock::store::{self, ObjectWriter, StoreError, fs::FsStore};
use common::{airlock, airlock_ok, http, import_bundle, root_of, serve, synth, test_key};

/// A filesystem store whose writes fail with ENOSPC once `budget` bytes are written.
struct Full {
    inner: FsStore,
    budget: Arc<AtomicU64>,
}

struct FullWriter {
    inner: Box<dyn ObjectWriter>,
    budget: Arc<AtomicU64>,
}

fn enospc() -> StoreError {
    StoreError::Io(std::io::Error::from_raw_os_error(libc::ENOSPC))
}

#[async_trait::async_trait]
impl ObjectWriter for FullWriter {
    async fn write(&mut self, chunk: Bytes) -> store::Result<()> {
        let n = chunk.len() as u64;
        let left = self.budget.load(Ordering::SeqCst);
        if n > left {
            self.budget.store(0, Ordering::SeqCst);
            return Err(enospc());
        }
        self.budget.fetch_sub(n, Ordering::SeqCst);
        self.inner.write(chunk).await
    }
    async fn commit(self: Box<Self>) -> store::Result<()> {
        self.inner.commit().await
    }
    async fn cancel(self: Box<Self>) -> store::Result<()> {
        self.inner.cancel().await
    }
}

forwarding_store!(Full {
    async fn writer(&self, key: &str) -> store::Result<Box<dyn ObjectWriter>> {
        Ok(Box::new(FullWriter {
            inner: self.inner.writer(key).await?,
            budget: self.budget.clone(),
        }))
    }
});

fn import_in_process(state: &airlock::state::StateStore, bundle: &Path) -> anyhow::Result<()> {
    let (_, keyring) = test_key();
    let keyring =
        airlock::bundle::trust::Verifier::keyring(airlock::bundle::sign::Keyring::load(&keyring)?);
    let reader = Box::new(std::fs::File::open(bundle)?);
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(airlock::bundle::import::import(
        state,
        keyring,
        reader,
        "test",
        indicatif::ProgressBar::hidden(),
        &Default::default(),
    ))?;
    Ok(())
}

#[test]
fn a_store_that_fills_up_fails_imports_and_pushes_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (small, _) = synth::bundle(dir.path(), "small", 1, 21);
    let (big, _) = synth::bundle(dir.path(), "big", 8, 22);
    let data = dir.path().join("data");
    import_bundle(&data, &keyring, &small);
    let root = root_of(&data);
    let blobs = synth::blob_files(&data);
    let budget = Arc::new(AtomicU64::new(3 << 20));
    let full = Full {
        inner: FsStore::open(&data).unwrap(),
        budget: budget.clone(),
    };
    let state = airlock::state::StateStore::new(Arc::new(full));
    let err = import_in_process(&state, &big).unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("No space left on device"), "{text}");
    assert_eq!(root_of(&data), root);
    assert_eq!(
        synth::files(&data.join("tmp")),
        Vec::<String>::new(),
        "temporary files left"
    );
    // The refused import removed what it wrote before it returned
    // (issue 23 §5); gc finds nothing more.
    assert_eq!(synth::blob_files(&data), blobs);
    airlock_ok(&["gc", "--data", data.to_str().unwrap()]);
    assert_eq!(synth::blob_files(&data), blobs);

    // A push into the full store: 507 with an OCI error body; reads still work.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let config = airlock::registry::RegistryConfig {
            allow_push: true,
            ..Default::default()
        };
        let app = airlock::server::App::with_config(state.clone(), config);
        let router = airlock::server::router(Arc::new(app));
        budget.store(10, Ordering::SeqCst);
        let body = vec![7u8; 4096];
        let digest = format!(
            "sha256:{}",
            hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&body))
        );
        let r = common::router::send_body(
            &router,
            "POST",
            &format!("/v2/small/img-00/blobs/uploads/?digest={digest}"),
            &[("content-type", "application/octet-stream")],
            body,
        )
        .await;
        r.error(507, "INSUFFICIENT_STORAGE");
        let detail = r.json()["errors"][0]["detail"]["reason"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(detail.contains("No space left"), "{detail}");
        common::router::get(&router, "/v2/small/img-00/manifests/latest")
            .await
            .status(200);
    });
    assert_eq!(root_of(&data), root);
}

#[test]
fn the_free_space_floor_refuses_writes_with_507() {
    let dir = tempfile::tempdir().unwrap();
    let (_, keyring) = test_key();
    let (small, _) = synth::bundle(dir.path(), "small", 1, 23);
    let (other, _) = synth::bundle(dir.path(), "other", 1, 24);
    let data = dir.path().join("data");
    import_bundle(&data, &keyring, &small);
    let root = root_of(&data);
    let d = data.to_str().unwrap();
    let o = airlock(&[
        "import",
        "--data",
        d,
        "--min-free-space",
        "99%",
        "--keyring",
        keyring.to_str().unwrap(),
        other.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("below the floor"), "{err}");
    assert_eq!(root_of(&data), root);
    let server = serve(&data, &["--allow-push", "--min-free-space", "99%"]);
    let (status, _, body) =
        http(&server.addr, "POST", "/v2/small/img-00/blobs/uploads/", &[]).unwrap();
    assert_eq!(status, 507, "{}", String::from_utf8_lossy(&body));
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["errors"][0]["code"], "INSUFFICIENT_STORAGE");
    let (status, _, _) = http(
        &server.addr,
        "GET",
        "/v2/small/img-00/manifests/latest",
        &[],
    )
    .unwrap();
    assert_eq!(status, 200);
}

#[test]
fn a_real_small_filesystem() {
    // tmpfs needs root (CI runs the tests as root).
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=12m", "tmpfs"])
        .arg(&mnt)
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        mounted,
        "this test mounts a 12 MiB tmpfs: run it as root (CI does)"
    );
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).output();
        }
    }
    let _guard = Unmount(mnt.clone());
    let (_, keyring) = test_key();
    let (big, _) = synth::bundle(dir.path(), "big", 16, 25);
    let (small, _) = synth::bundle(dir.path(), "small", 2, 26);
    let data = mnt.join("data");
    let d = data.to_str().unwrap();
    let k = keyring.to_str().unwrap();
    let o = airlock(&[
        "import",
        "--data",
        d,
        "--min-free-space",
        "0",
        "--keyring",
        k,
        big.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("No space left on device"), "{err}");
    assert_eq!(root_of(&data), "");
    assert_eq!(synth::files(&data.join("tmp")), Vec::<String>::new());
    // Nothing of the refused import is left, before any gc (issue 23 §5).
    assert_eq!(synth::blob_files(&data), Vec::<String>::new());
    airlock_ok(&["gc", "--data", d]);
    // What the failed import wrote is gone, so a smaller import fits.
    airlock_ok(&[
        "import",
        "--data",
        d,
        "--min-free-space",
        "0",
        "--keyring",
        k,
        small.to_str().unwrap(),
    ]);
    airlock_ok(&["fsck", "--data", d, "--deep"]);
}
