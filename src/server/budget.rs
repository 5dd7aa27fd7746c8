//! [`ResponseBudget`]: the bytes of response bodies held in memory at once,
//! over all connections (`max_response_buffer`). Shared by every
//! connection; [`super::body::ResponseBody`] takes room from it chunk by
//! chunk. Imports nothing of the connection room above it.

use std::sync::Arc;

use tokio::sync::Semaphore;

/// Bytes of response bodies held in memory at once, over all connections.
pub(super) struct ResponseBudget {
    pub(super) semaphore: Arc<Semaphore>,
    max: usize,
}

impl ResponseBudget {
    /// A budget of `max` bytes (at least 64 KiB).
    pub(super) fn new(max: u64) -> Arc<ResponseBudget> {
        let max = (max.max(64 << 10) as usize).min(Semaphore::MAX_PERMITS);
        Arc::new(ResponseBudget {
            semaphore: Arc::new(Semaphore::new(max)),
            max,
        })
    }

    /// Permits a chunk of `len` bytes needs (a chunk above the whole budget
    /// takes all of it).
    pub(super) fn permits(&self, len: usize) -> u32 {
        len.min(self.max).min(u32::MAX as usize) as u32
    }
}
