//! A blob written from synchronous code: the producer runs on a blocking
//! thread with a `Write` whose bytes go, 1 MiB at a time, to a store
//! writer on the async side, hashed on the way; the blob lands under its
//! digest only when both sides succeed.

use super::*;

/// A `Write` that sends 1 MiB chunks to the async side.
struct ChannelWriter {
    buf: Vec<u8>,
    tx: mpsc::Sender<Bytes>,
}

const OUT_CHUNK: usize = 1 << 20;

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= OUT_CHUNK {
            self.flush()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(OUT_CHUNK));
        self.tx
            .blocking_send(Bytes::from(chunk))
            .map_err(|_| std::io::Error::other("blob writer stopped"))
    }
}

/// Runs `f` on a blocking thread with a writer whose bytes become a blob
/// (at most 5 MiB in flight); returns `f`'s value and the blob's sha256
/// digest and size. The bytes go to a scratch key under `stacks/scratch/`
/// (which `gc` sweeps) and are renamed to their blob key at the end (or
/// dropped when that blob is already stored). Errors: `f`'s, or the
/// store's; nothing is left under `blobs/` then.
pub async fn write_blocking<T: Send + 'static>(
    store: Arc<dyn Blobstore>,
    f: impl FnOnce(&mut dyn Write) -> Result<T> + Send + 'static,
) -> Result<(T, Digest, u64)> {
    let (tx, mut rx) = mpsc::channel::<Bytes>(4);
    let producer = tokio::task::spawn_blocking(move || -> Result<T> {
        let mut w = ChannelWriter {
            buf: Vec::with_capacity(OUT_CHUNK),
            tx,
        };
        let value = f(&mut w)?;
        w.flush()?;
        Ok(value)
    });
    let scratch = format!("stacks/scratch/{}", uuid::Uuid::new_v4());
    let mut writer = store.writer(&scratch).await?;
    let mut hasher = Hasher::new(Algorithm::Sha256);
    let mut size = 0u64;
    let mut failed = None;
    while let Some(chunk) = rx.recv().await {
        size += chunk.len() as u64;
        let (written, ()) =
            tokio::join!(writer.write(chunk.clone()), async { hasher.update(&chunk) });
        if let Err(e) = written {
            failed = Some(anyhow::Error::from(e));
            break;
        }
    }
    drop(rx);
    let produced = producer
        .await
        .map_err(|e| anyhow!("blob producer failed: {e}"))?;
    let value = match (failed, produced) {
        (Some(e), _) | (None, Err(e)) => {
            let _ = writer.cancel().await;
            return Err(e);
        }
        (None, Ok(v)) => v,
    };
    writer.commit().await?;
    let digest = hasher.finish();
    let key = blob_key(&digest);
    if store.stat(&key).await? == Some(size) {
        store.delete(&scratch).await?;
    } else {
        store.rename(&scratch, &key).await?;
    }
    Ok((value, digest, size))
}
