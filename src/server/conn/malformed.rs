//! Requests hyper refuses before the router sees them (issue 23 §8): a
//! request head it cannot parse (a header line without a colon, a NUL in a
//! header, raw bytes outside a URI in the path), a negative, duplicate or
//! overflowing `Content-Length` (400), a URI over its limit (414) or a head
//! over `max_request_head` (431). hyper answers these itself, with an empty
//! body. [`Answering`] replaces that answer with one like the router's: an
//! OCI error body (distribution-spec "Error Codes": `SIZE_INVALID` for a
//! bad length, `NAME_INVALID` for a bad request target, `UNSUPPORTED` for
//! the rest), `X-Request-Id`, and a request log line.
//!
//! How it knows: hyper writes its own answer only when no response of ours
//! is being written (no request in flight, no response body alive), as a
//! short head with `content-length: 0` and `connection: close` and status
//! 400, 414 or 431, and then closes the connection. The service never
//! answers that way (every error it sends has a body), so such a write is
//! hyper's. The first request head of a connection is kept (at most
//! [`HEAD_KEPT`] bytes) to name the cause; a later one gets a cause from
//! its status alone.
//!
//! Owns: the wrapper and the answer. Never parses a request that hyper
//! accepted.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::registry::errors::ErrorCode;
use crate::server::activity::Activity;

/// Bytes of a connection's first request head kept to name a refusal.
pub(super) const HEAD_KEPT: usize = 8 << 10;

/// The longest answer hyper writes for a parse error (status line, `date`,
/// `content-length`, `connection`).
const HYPER_ANSWER_MAX: usize = 256;

/// The plaintext stream hyper reads and writes (over TCP or TLS), which
/// replaces hyper's empty answer to a malformed request.
pub(super) struct Answering<I> {
    inner: I,
    activity: Arc<Activity>,
    peer: SocketAddr,
    /// The first request head read on this connection (until hyper hands
    /// a request to the service).
    head: Vec<u8>,
    /// Our answer, being written in place of hyper's, and how much of it is out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<I> Answering<I> {
    pub(super) fn new(inner: I, activity: Arc<Activity>, peer: SocketAddr) -> Answering<I> {
        Answering {
            inner,
            activity,
            peer,
            head: Vec::new(),
            pending: None,
        }
    }

    /// Whether nothing of ours can be on its way out: no request in
    /// flight, no response body alive.
    fn idle(&self) -> bool {
        self.activity.idle()
    }
}

/// The status of hyper's own answer to a malformed request, when `bytes`
/// (one whole write) is one.
fn hyper_answer(bytes: &[u8]) -> Option<u16> {
    if bytes.len() > HYPER_ANSWER_MAX || !bytes.ends_with(b"\r\n\r\n") {
        return None;
    }
    let status = match bytes.get(..13)? {
        b"HTTP/1.1 400 " => 400,
        b"HTTP/1.1 414 " => 414,
        b"HTTP/1.1 431 " => 431,
        _ => return None,
    };
    let text = String::from_utf8_lossy(bytes).to_ascii_lowercase();
    (text.contains("\r\ncontent-length: 0\r\n") && text.contains("\r\nconnection: close\r\n"))
        .then_some(status)
}

/// Why a request head was refused: the error code and a one-line cause.
pub(super) fn classify(status: u16, head: &[u8]) -> (ErrorCode, String) {
    match status {
        431 => {
            return (
                ErrorCode::Unsupported,
                "request head too large (limits.max_request_head)".into(),
            );
        }
        414 => return (ErrorCode::NameInvalid, "request target too long".into()),
        _ => {}
    }
    let generic = (ErrorCode::Unsupported, "malformed HTTP request".to_string());
    if head.is_empty() {
        return generic;
    }
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut headers);
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let target_bad = head[..line_end]
        .split(|&b| b == b' ')
        .nth(1)
        .is_some_and(|t| t.iter().any(|&b| !b.is_ascii_graphic()));
    match req.parse(head) {
        Err(_) | Ok(_) if target_bad => (
            ErrorCode::NameInvalid,
            "the request target holds bytes a URI cannot (not percent-encoded ASCII)".into(),
        ),
        Err(httparse::Error::HeaderName) => (
            ErrorCode::Unsupported,
            "a header line without a colon, or with an invalid name".into(),
        ),
        Err(httparse::Error::HeaderValue) => (
            ErrorCode::Unsupported,
            "a header value with a NUL or another control byte".into(),
        ),
        Err(httparse::Error::Token) => (
            ErrorCode::Unsupported,
            "an invalid method or request target".into(),
        ),
        Err(httparse::Error::Version) => (ErrorCode::Unsupported, "not HTTP/1.x".into()),
        Err(httparse::Error::TooManyHeaders) => {
            (ErrorCode::Unsupported, "too many header lines".into())
        }
        Err(_) => generic,
        Ok(_) => content_length(req.headers).unwrap_or(generic),
    }
}

/// What is wrong with the `Content-Length` headers of an otherwise
/// well-formed head (RFC 9110 §8.6: one non-negative decimal number).
fn content_length(headers: &[httparse::Header<'_>]) -> Option<(ErrorCode, String)> {
    let values: Vec<String> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| String::from_utf8_lossy(h.value).trim().to_string())
        .collect();
    let bad = |m: String| Some((ErrorCode::SizeInvalid, m));
    for v in &values {
        if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
            return bad(format!("Content-Length {v:?} is not a number of bytes"));
        }
        if v.parse::<u64>().is_err() {
            return bad(format!("Content-Length {v} does not fit in 64 bits"));
        }
    }
    if values.windows(2).any(|w| w[0] != w[1]) {
        return bad(format!(
            "conflicting Content-Length headers: {}",
            values.join(", ")
        ));
    }
    None
}

/// Whether `head` begins with a TLS handshake record (a ClientHello:
/// content type 22, version 3.x), what crane, podman, skopeo and docker
/// send first to a registry they may reach over HTTPS.
pub(super) fn is_tls_hello(head: &[u8]) -> bool {
    matches!(head, [0x16, 0x03, ..])
}

/// Most client addresses remembered for [`tls_probe_first_in_a_minute`].
const TLS_PROBES_KEPT: usize = 4096;

/// True for the first TLS probe from `ip` in a minute (one log line per
/// address per minute, however many probes a client session makes).
fn tls_probe_first_in_a_minute(ip: std::net::IpAddr, now: std::time::Instant) -> bool {
    use std::collections::HashMap;
    use std::sync::Mutex;
    static SEEN: Mutex<Option<HashMap<std::net::IpAddr, std::time::Instant>>> = Mutex::new(None);
    let minute = std::time::Duration::from_secs(60);
    let Ok(mut seen) = SEEN.lock() else {
        return true;
    };
    let seen = seen.get_or_insert_with(HashMap::new);
    if seen
        .get(&ip)
        .is_some_and(|t| now.duration_since(*t) < minute)
    {
        return false;
    }
    if seen.len() >= TLS_PROBES_KEPT {
        seen.retain(|_, t| now.duration_since(*t) < minute);
        if seen.len() >= TLS_PROBES_KEPT {
            seen.clear();
        }
    }
    seen.insert(ip, now);
    true
}

/// The answer that replaces hyper's: `status` with an OCI error body,
/// hyper's `date`, `X-Request-Id` and `connection: close`.
fn answer(status: u16, hyper: &[u8], head: &[u8], peer: SocketAddr) -> Vec<u8> {
    let (code, cause) = classify(status, head);
    let id = crate::server::trace::next_request_id();
    let line_end = head.iter().position(|&b| b == b'\n').unwrap_or(head.len());
    let mut words = head[..line_end].split(|&b| b == b' ');
    let method = String::from_utf8_lossy(words.next().unwrap_or_default()).into_owned();
    let path = String::from_utf8_lossy(words.next().unwrap_or_default()).into_owned();
    let body = json!({ "errors": [{
        "code": code.info().code,
        "message": code.info().message,
        "detail": { "reason": cause },
    }]})
    .to_string();
    if is_tls_hello(head) {
        if tls_probe_first_in_a_minute(peer.ip(), std::time::Instant::now()) {
            tracing::info!(
                client = %peer,
                "TLS handshake on a plain-HTTP listener from {} (a client trying HTTPS first; configure it for http://, or serve TLS)",
                peer.ip()
            );
        }
    } else {
        tracing::info!(
        method = %method.escape_default(),
        path = %path.escape_default(),
        status,
        code = code.info().code,
        client = %peer,
        request_id = %id,
        reason = %cause,
        "request refused before routing"
        );
    }
    let reason = match status {
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        _ => "Bad Request",
    };
    let date = String::from_utf8_lossy(hyper)
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("date:"))
        .map(str::to_string);
    let mut out = format!("HTTP/1.1 {status} {reason}\r\n");
    out.push_str("content-type: application/json\r\n");
    out.push_str(&format!("content-length: {}\r\n", body.len()));
    out.push_str("docker-distribution-api-version: registry/2.0\r\n");
    out.push_str(&format!("x-request-id: {id}\r\n"));
    if let Some(d) = date {
        out.push_str(&d);
        out.push_str("\r\n");
    }
    out.push_str("connection: close\r\n\r\n");
    out.push_str(&body);
    out.into_bytes()
}

impl<I: AsyncWrite + Unpin> Answering<I> {
    /// Writes what is left of our answer; `Ready(Ok)` once it is all out.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, done)) = &mut self.pending {
            if *done == bytes.len() {
                self.pending = None;
                break;
            }
            match Pin::new(&mut self.inner).poll_write(cx, &bytes[*done..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => *done += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Takes hyper's write `bytes` in place of our answer when it is
    /// hyper's own answer to a malformed request; `None` otherwise.
    fn replace(&mut self, bytes: &[u8]) -> Option<usize> {
        if !self.idle() {
            return None;
        }
        let status = hyper_answer(bytes)?;
        self.pending = Some((answer(status, bytes, &self.head, self.peer), 0));
        Some(bytes.len())
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Answering<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if self.head.len() < HEAD_KEPT && !self.activity.has_requests() {
            let room = HEAD_KEPT - self.head.len();
            let new = &buf.filled()[before..];
            let take = new.len().min(room);
            self.head.extend_from_slice(&new[..take]);
        }
        res
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Answering<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        if let Some(n) = self.replace(buf) {
            // Claimed as written; ours goes out now or on the next call.
            let _ = self.poll_pending(cx)?;
            return Poll::Ready(Ok(n));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total <= HYPER_ANSWER_MAX && self.idle() {
            let joined: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            if let Some(n) = self.replace(&joined) {
                let _ = self.poll_pending(cx)?;
                return Poll::Ready(Ok(n));
            }
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_probes_are_logged_once_per_address_per_minute() {
        assert!(is_tls_hello(&[0x16, 0x03, 0x01, 0x02, 0x00]));
        assert!(!is_tls_hello(b"GET / HTTP/1.1\r\n"));
        let ip: std::net::IpAddr = "127.0.0.99".parse().unwrap();
        let other: std::net::IpAddr = "127.0.0.98".parse().unwrap();
        let t = std::time::Instant::now();
        assert!(tls_probe_first_in_a_minute(ip, t));
        for s in [1, 10, 59] {
            assert!(!tls_probe_first_in_a_minute(
                ip,
                t + std::time::Duration::from_secs(s)
            ));
        }
        assert!(tls_probe_first_in_a_minute(other, t));
        assert!(tls_probe_first_in_a_minute(
            ip,
            t + std::time::Duration::from_secs(61)
        ));
    }

    #[test]
    fn hyper_answers_are_recognised() {
        let hyper = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\ndate: Tue, 01 Dec 2026 13:00:00 GMT\r\n\r\n";
        assert_eq!(hyper_answer(hyper), Some(400));
        let ours = b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 20\r\n\r\n";
        assert_eq!(hyper_answer(ours), None);
        let keep_alive = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(hyper_answer(keep_alive), None);
        assert_eq!(
            hyper_answer(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
            None
        );
    }

    #[test]
    fn causes_are_named() {
        let c = |head: &[u8]| classify(400, head).0.info().code;
        assert_eq!(
            c(b"GET /v2/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
            "SIZE_INVALID"
        );
        assert_eq!(
            c(b"PUT /v2/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"),
            "SIZE_INVALID"
        );
        assert_eq!(
            c(b"PUT /v2/ HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n"),
            "SIZE_INVALID"
        );
        assert_eq!(
            c(b"GET /v2/\xff\xfe/tags/list HTTP/1.1\r\n\r\n"),
            "NAME_INVALID"
        );
        assert_eq!(
            c(b"GET /v2/ HTTP/1.1\r\nno colon here\r\n\r\n"),
            "UNSUPPORTED"
        );
        assert_eq!(c(b"GET /v2/ HTTP/1.1\r\nX-A: a\0b\r\n\r\n"), "UNSUPPORTED");
        assert_eq!(classify(431, b"").0.info().code, "UNSUPPORTED");
        assert_eq!(classify(414, b"").0.info().code, "NAME_INVALID");
        assert_eq!(c(b""), "UNSUPPORTED");
    }
}
