//! The socket of one connection: every read and write is activity (until
//! the connection turns out to speak HTTP/2); on plain TCP, writes go
//! through [`super::sendfile`] (zero-copy for mapped store windows).
//!
//! Owns: [`TrackedIo`]. Never looks at the bytes.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::server::activity::Activity;

/// A socket that records the time of every successful read and write as
/// activity, until the connection turns out to speak HTTP/2.
pub(super) struct TrackedIo {
    inner: TcpStream,
    activity: Arc<Activity>,
    /// Vectored writes go through [`super::sendfile::poll_send`] (plain
    /// TCP: what hyper writes is what goes on the wire).
    zero_copy: bool,
}

impl TrackedIo {
    /// `zero_copy`: the connection is plain TCP (no TLS above it), so
    /// slices of mapped store windows may be sent with `sendfile(2)`.
    pub(super) fn new(inner: TcpStream, activity: Arc<Activity>, zero_copy: bool) -> TrackedIo {
        TrackedIo {
            inner,
            activity,
            zero_copy,
        }
    }
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch_io();
        }
        res
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch_io();
        }
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let res = if this.zero_copy {
            super::sendfile::poll_send(&mut this.inner, cx, bufs)
        } else {
            Pin::new(&mut this.inner).poll_write_vectored(cx, bufs)
        };
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch_io();
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
