//! Blocking reads of blobs for the synchronous parsers (feeds, matching);
//! blobs written from blocking code go through
//! [`crate::stacks::flatten::write_blocking`].

use std::sync::Arc;

use anyhow::{Result, anyhow};

use crate::digest::Digest;
use crate::store::{Blobstore, blob_key};

pub use crate::stacks::flatten::write_blocking as write_blob;

/// The blob `digest` as a blocking, buffered reader (call inside `spawn_blocking`).
pub fn reader(
    store: &Arc<dyn Blobstore>,
    handle: &tokio::runtime::Handle,
    digest: &Digest,
) -> Result<impl std::io::BufRead + use<>> {
    let r = handle
        .block_on(store.read(&blob_key(digest), None))
        .map_err(|e| anyhow!("blob {digest}: {e}"))?;
    Ok(std::io::BufReader::with_capacity(
        1 << 20,
        tokio_util::io::SyncIoBridge::new_with_handle(r, handle.clone()),
    ))
}
