//! Zero-copy writes on a plain TCP connection: a slice that hyper hands
//! over and that lies in a registered mapped window of a store file
//! ([`crate::store::window`], the body chunks of blobs served as they are
//! on disk) goes out with `sendfile(2)` from the file, so the process never
//! touches those pages; everything else is written with `writev(2)`.
//!
//! hyper 1.x, given an IO whose `is_write_vectored()` is true (a
//! `TcpStream`'s is), queues a body's `Bytes` as they are (its `Queue`
//! write strategy; a `Content-Length` body is encoded without a copy) and
//! hands them to `poll_write_vectored` behind the response head, so the
//! slices seen here point into the windows the store made.
//!
//! Owns: [`poll_send`]. Never decides what is sent: a slice not found in
//! the window table is written as it is, and one found is the same bytes
//! (the file's page cache either way), so the bytes on the wire never
//! depend on the lookup. TLS and HTTP/2 never come here.

use std::fs::File;
use std::io::{self, IoSlice};
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncWrite, Interest};
use tokio::net::TcpStream;

use crate::store::window;

/// The most one `sendfile(2)` call sends (Linux's own limit).
const SENDFILE_MAX: usize = 0x7fff_f000;

/// Writes a prefix of `bufs` on `tcp`, like `poll_write_vectored`: when the
/// first non-empty slice is a registered window, up to its length with
/// `sendfile(2)` (counted in `airlock_sendfile_bytes_total`); when a later
/// one is, the slices before it with `MSG_MORE` (the response head then
/// leaves in one segment with the body); else all of them with `writev`.
/// Returns the bytes written; errors are the socket's.
pub(super) fn poll_send(
    tcp: &mut TcpStream,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    let found = bufs
        .iter()
        .enumerate()
        .find_map(|(i, b)| window::lookup(b).map(|at| (i, at)));
    let Some((i, (file, offset))) = found else {
        return Pin::new(tcp).poll_write_vectored(cx, bufs);
    };
    if bufs[..i].iter().any(|b| !b.is_empty()) {
        return poll_io(tcp, cx, |fd| send_more(fd, &bufs[..i]));
    }
    let len = bufs[i].len().min(SENDFILE_MAX);
    match ready!(poll_io(tcp, cx, |fd| send_file(fd, &file, offset, len))) {
        Ok(sent) => {
            crate::metrics::global().sendfile_bytes.inc_by(sent as u64);
            Poll::Ready(Ok(sent))
        }
        // A file system that cannot splice into a socket: the same bytes
        // from the mapping.
        Err(e) if unsupported(&e) => Pin::new(tcp).poll_write_vectored(cx, &bufs[i..=i]),
        Err(e) => Poll::Ready(Err(e)),
    }
}

/// Whether `sendfile(2)` failed because this file cannot be sent that way
/// (`EINVAL`, `ENOSYS`, `EOPNOTSUPP`), not because of the socket.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

/// Runs the non-blocking socket call `f` once the socket is writable,
/// again after `EAGAIN` or `EINTR`.
fn poll_io(
    tcp: &TcpStream,
    cx: &mut Context<'_>,
    mut f: impl FnMut(i32) -> io::Result<usize>,
) -> Poll<io::Result<usize>> {
    let fd = tcp.as_raw_fd();
    loop {
        ready!(tcp.poll_write_ready(cx))?;
        match tcp.try_io(Interest::WRITABLE, || f(fd)) {
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            other => return Poll::Ready(other),
        }
    }
}

/// `sendfile(2)` of `len` bytes of `file` from `offset` to the socket `fd`.
fn send_file(fd: i32, file: &File, offset: u64, len: usize) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(offset).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: both descriptors are open for the call (`fd` is the socket
    // the caller holds, `file` is borrowed); `off` is a valid off_t the
    // kernel updates; no memory of ours is read or written otherwise.
    let n = unsafe { libc::sendfile(fd, file.as_raw_fd(), &mut off, len) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// `sendmsg(2)` of `bufs` to the socket `fd` with `MSG_MORE` (more data
/// follows at once: do not send a partial segment now).
fn send_more(fd: i32, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: an all-zero msghdr is valid (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // IoSlice is ABI-compatible with iovec on Unix (std guarantees it);
    // the kernel only reads the slices, which outlive the call.
    msg.msg_iov = bufs.as_ptr() as *mut libc::iovec;
    msg.msg_iovlen = bufs.len() as _;
    // SAFETY: `msg` points at `bufs.len()` valid iovecs for the call.
    let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_MORE | libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}
