//! The chunk buffers the reader thread fills and the writer hands back
//! (issue 26 §5): an import allocates at most [`IN_FLIGHT`] + 2 chunk
//! buffers once and reuses them for every blob, instead of one fresh
//! [`CHUNK`]-byte allocation per chunk, so its resident memory is what is
//! in flight, not what the allocator keeps of what was freed.
//!
//! A buffer still shared when the writer is done with it (a store writer
//! that keeps the bytes, e.g. buffering an S3 part) is simply dropped; the
//! reader then allocates a new one.

use bytes::{Bytes, BytesMut};

use super::{CHUNK, IN_FLIGHT};

/// The reader's side: buffers to fill.
pub(super) struct Buffers {
    back: std::sync::mpsc::Receiver<BytesMut>,
    /// One the reader used itself (a blob already stored, hashed here).
    spare: Option<BytesMut>,
}

/// The writer's side: hands buffers back once written and hashed.
#[derive(Clone)]
pub(super) struct Recycler {
    back: std::sync::mpsc::SyncSender<BytesMut>,
}

/// A connected pair.
pub(super) fn pool() -> (Buffers, Recycler) {
    let (tx, rx) = std::sync::mpsc::sync_channel(IN_FLIGHT + 2);
    (
        Buffers {
            back: rx,
            spare: None,
        },
        Recycler { back: tx },
    )
}

impl Buffers {
    /// A buffer of exactly `len` bytes (at most [`CHUNK`]) to read into: a
    /// handed-back one when there is one, else a new one.
    pub(super) fn take(&mut self, len: usize) -> BytesMut {
        let mut b = self
            .spare
            .take()
            .or_else(|| self.back.try_recv().ok())
            .unwrap_or_else(|| BytesMut::with_capacity(CHUNK));
        b.clear();
        b.resize(len, 0);
        b
    }

    /// Keeps `b`, which the reader used itself, for its next [`Buffers::take`].
    pub(super) fn keep(&mut self, b: BytesMut) {
        self.spare = Some(b);
    }
}

impl Recycler {
    /// Gives `b` back for reuse if no one else holds it.
    pub(super) fn give(&self, b: Bytes) {
        if let Ok(m) = b.try_into_mut()
            && m.capacity() >= CHUNK
        {
            let _ = self.back.try_send(m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_given_back_is_taken_again() {
        let (mut buffers, recycler) = pool();
        let kept = buffers.take(3);
        let ptr = kept.as_ptr();
        buffers.keep(kept);
        assert_eq!(
            buffers.take(3).as_ptr(),
            ptr,
            "a kept buffer was not reused"
        );
        let mut a = buffers.take(10);
        a[0] = 7;
        let ptr = a.as_ptr();
        recycler.give(a.freeze());
        let b = buffers.take(CHUNK);
        assert_eq!(b.as_ptr(), ptr, "the buffer was not reused");
        assert_eq!(b.len(), CHUNK);
        assert_eq!(b[0], 0, "a reused buffer starts zeroed");
        // A shared buffer is not taken back.
        let shared = b.freeze();
        let other = shared.clone();
        recycler.give(shared);
        assert_ne!(buffers.take(1).as_ptr(), other.as_ptr());
    }
}
