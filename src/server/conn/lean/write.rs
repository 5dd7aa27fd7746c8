//! Responses on the lean path: the head encoded into one reused buffer and
//! sent in the same `writev` as the first body chunk, the body framed by
//! its `Content-Length` or chunked (RFC 9112 §4, §6, §7.1), and `Date`
//! (RFC 9110 §6.6.1), as hyper writes them.
//!
//! Owns: [`response`]. Never changes a header the service set; body
//! chunks go to the socket as they are (slices of mapped store windows
//! reach [`super::super::sendfile`] unchanged).

use std::cell::RefCell;
use std::io::{self, IoSlice};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, Response, StatusCode, header};
use http_body_util::BodyExt as _;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::server::body::ResponseBody;

/// Writes `res` (the answer to a `HEAD` request when `head`) on `io`, with
/// `Connection: close` unless `keep_alive`. `out` is the connection's head
/// buffer (cleared first). Returns whether the connection may serve
/// another request: the body was framed and sent whole, and neither side
/// asked to close.
///
/// Errors: the socket's.
pub(super) async fn response<I: AsyncWrite + Unpin>(
    io: &mut I,
    out: &mut Vec<u8>,
    res: Response<ResponseBody>,
    head: bool,
    keep_alive: bool,
) -> io::Result<bool> {
    let (parts, mut body) = res.into_parts();
    let status = parts.status;
    let headers = &parts.headers;
    let bodiless = head
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let mut reuse = keep_alive && !has_token(headers, "close");
    out.clear();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        line(out, name.as_str().as_bytes(), value.as_bytes());
    }
    // Where hyper puts it: after the service's headers, before the framing.
    if !keep_alive && !headers.contains_key(header::CONNECTION) {
        line(out, b"connection", b"close");
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let hint = hyper::body::Body::size_hint(&body).exact();
    let mut length = declared;
    let mut chunked = false;
    if declared.is_none() && !headers.contains_key(header::TRANSFER_ENCODING) {
        // As hyper does (RFC 9110 §8.6): the body's exact length, also in
        // the answer to a HEAD (the GET's length, the body not sent) unless
        // it is 0; never on 1xx, 204 or 304.
        let counted = status != StatusCode::NO_CONTENT
            && status != StatusCode::NOT_MODIFIED
            && !status.is_informational();
        match hint {
            Some(n) if counted && (!head || n > 0) => {
                line(out, b"content-length", decimal(&mut [0; 20], n));
                length = Some(n);
            }
            _ if bodiless => {}
            _ => {
                line(out, b"transfer-encoding", b"chunked");
                chunked = true;
            }
        }
    } else if declared.is_none() {
        // The service's own Transfer-Encoding: chunked when it ends so,
        // else the body ends with the connection (RFC 9112 §6.3).
        chunked = has_token_in(headers, header::TRANSFER_ENCODING, "chunked");
        reuse &= chunked;
    }
    if !headers.contains_key(header::DATE) {
        DATE.with(|d| line(out, b"date", d.borrow_mut().now()));
    }
    out.extend_from_slice(b"\r\n");
    if bodiless {
        io.write_all(out).await?;
        io.flush().await?;
        return Ok(reuse);
    }
    let mut head_out = false;
    let mut sent = 0u64;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            // The body failed part way: what is out stays short, and the
            // connection ends.
            if head_out {
                io.flush().await?;
            }
            return Ok(false);
        };
        let Ok(mut data) = frame.into_data() else {
            continue; // trailers: not sent
        };
        if data.is_empty() {
            continue;
        }
        if let Some(n) = length {
            let room = n.saturating_sub(sent);
            if data.len() as u64 > room {
                data.truncate(room as usize);
                reuse = false;
            }
        }
        sent += data.len() as u64;
        let head_part: &[u8] = if head_out { b"" } else { out };
        if chunked {
            let mut prefix = [0u8; 18];
            let p = chunk_size(&mut prefix, data.len());
            let mut bufs = [
                IoSlice::new(head_part),
                IoSlice::new(p),
                IoSlice::new(&data),
                IoSlice::new(b"\r\n"),
            ];
            write_all(io, &mut bufs).await?;
        } else {
            write_all(io, &mut [IoSlice::new(head_part), IoSlice::new(&data)]).await?;
        }
        head_out = true;
    }
    let end: &[u8] = if chunked { b"0\r\n\r\n" } else { b"" };
    let head_part: &[u8] = if head_out { b"" } else { out };
    write_all(io, &mut [IoSlice::new(head_part), IoSlice::new(end)]).await?;
    io.flush().await?;
    if length.is_some_and(|n| n != sent) {
        // Fewer bytes than the head announced: the client must not take
        // the next response for the rest of this one.
        reuse = false;
    }
    Ok(reuse)
}

/// Appends the header line `name: value`.
fn line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.reserve(name.len() + value.len() + 4);
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// `n` in decimal, in `buf`.
fn decimal(buf: &mut [u8; 20], mut n: u64) -> &[u8] {
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// A chunk's size line (RFC 9112 §7.1: hexadecimal, CRLF), in `buf`.
fn chunk_size(buf: &mut [u8; 18], mut n: usize) -> &[u8] {
    let mut at = buf.len() - 2;
    buf[at..].copy_from_slice(b"\r\n");
    loop {
        at -= 1;
        buf[at] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            return &buf[at..];
        }
    }
}

/// Whether a `Connection` header of `headers` holds `token`.
fn has_token(headers: &HeaderMap, token: &str) -> bool {
    has_token_in(headers, header::CONNECTION, token)
}

/// Whether a `name` header of `headers` holds the comma-separated `token`.
fn has_token_in(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers.get_all(name).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
    })
}

/// Writes all of `bufs` (empty slices are skipped).
async fn write_all<I: AsyncWrite + Unpin>(io: &mut I, bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    let mut bufs = bufs;
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = io.write_vectored(bufs).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut bufs, n);
    }
    Ok(())
}

/// The `Date` of responses, formatted once per second per thread.
struct CachedDate {
    second: u64,
    text: [u8; 29],
}

impl CachedDate {
    /// Now as an IMF-fixdate (RFC 9110 §5.6.7).
    fn now(&mut self) -> &[u8] {
        let now = SystemTime::now();
        let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        if second != self.second {
            self.second = second;
            let text = httpdate::fmt_http_date(now);
            if text.len() == self.text.len() {
                self.text.copy_from_slice(text.as_bytes());
            }
        }
        &self.text
    }
}

thread_local! {
    static DATE: RefCell<CachedDate> = const {
        RefCell::new(CachedDate { second: 0, text: *b"Thu, 01 Jan 1970 00:00:00 GMT" })
    };
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;

    use super::*;
    use crate::server::activity::Activity;
    use crate::server::budget::ResponseBudget;

    /// What [`response`] writes for `res`, and whether the connection may
    /// serve another request.
    async fn written(res: Response<Body>, head: bool, keep_alive: bool) -> (String, bool) {
        let activity = Arc::new(Activity::new());
        let res = res.map(|b| ResponseBody::new(b, &activity, ResponseBudget::new(1 << 20)));
        let mut wire = Vec::new();
        let reuse = response(&mut wire, &mut Vec::new(), res, head, keep_alive)
            .await
            .unwrap();
        // The date changes; everything else is exact.
        let text = String::from_utf8(wire).unwrap();
        let date = text.find("date: ").unwrap();
        let text = format!("{}date: D{}", &text[..date], &text[date + 35..]);
        (text, reuse)
    }

    #[tokio::test]
    async fn a_sized_body_goes_out_after_its_length() {
        let res = Response::builder()
            .header("content-type", "text/plain")
            .body(Body::from("hello"))
            .unwrap();
        let (text, reuse) = written(res, false, true).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 5\r\ndate: D\r\n\r\nhello"
        );
        assert!(reuse);
    }

    #[tokio::test]
    async fn a_body_of_unknown_length_is_chunked() {
        let chunks = futures_util::stream::iter(
            ["abc", "", "0123456789abcdef"].map(|c| Ok::<_, std::io::Error>(c.to_string())),
        );
        let res = Response::new(Body::from_stream(chunks));
        let (text, reuse) = written(res, false, true).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ndate: D\r\n\r\n\
             3\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n"
        );
        assert!(reuse);
    }

    #[tokio::test]
    async fn a_head_answer_has_the_length_and_no_body() {
        let res = Response::builder()
            .status(StatusCode::NOT_FOUND)
            .header("content-length", "42")
            .body(Body::empty())
            .unwrap();
        let (text, reuse) = written(res, true, false).await;
        assert_eq!(
            text,
            "HTTP/1.1 404 Not Found\r\ncontent-length: 42\r\nconnection: close\r\ndate: D\r\n\r\n"
        );
        assert!(!reuse);
    }

    /// A HEAD answered with the GET's body (a 404 of the access layer):
    /// its length goes out, its bytes do not, as hyper writes it; an empty
    /// body gets no length.
    #[tokio::test]
    async fn a_head_answer_carries_the_length_of_the_body_it_drops() {
        let res = Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Body::from("{\"code\":\"NOT_FOUND\"}"))
            .unwrap();
        let (text, reuse) = written(res, true, true).await;
        assert_eq!(
            text,
            "HTTP/1.1 404 Not Found\r\ncontent-length: 20\r\ndate: D\r\n\r\n"
        );
        assert!(reuse);
        let res = Response::builder().body(Body::empty()).unwrap();
        let (text, _) = written(res, true, true).await;
        assert_eq!(text, "HTTP/1.1 200 OK\r\ndate: D\r\n\r\n");
    }

    #[tokio::test]
    async fn a_body_shorter_than_its_length_ends_the_connection() {
        let res = Response::builder()
            .header("content-length", "10")
            .body(Body::from("short"))
            .unwrap();
        let (text, reuse) = written(res, false, true).await;
        assert!(text.ends_with("\r\n\r\nshort"), "{text}");
        assert!(
            !reuse,
            "the client would read the next response as the rest"
        );
        let res = Response::builder()
            .header("content-length", "2")
            .body(Body::from("longer"))
            .unwrap();
        let (text, reuse) = written(res, false, true).await;
        assert!(text.ends_with("\r\n\r\nlo"), "{text}");
        assert!(!reuse);
    }

    #[tokio::test]
    async fn the_service_asking_to_close_is_honoured() {
        let res = Response::builder()
            .header("connection", "close")
            .body(Body::empty())
            .unwrap();
        let (text, reuse) = written(res, false, true).await;
        assert_eq!(
            text,
            "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\ndate: D\r\n\r\n"
        );
        assert!(!reuse);
    }

    #[test]
    fn numbers_are_written_as_http_writes_them() {
        for n in [0u64, 7, 10, 4096, u64::MAX] {
            assert_eq!(decimal(&mut [0; 20], n), n.to_string().as_bytes());
        }
        for n in [0usize, 9, 10, 255, 4096, 0x7fff_f000] {
            assert_eq!(chunk_size(&mut [0; 18], n), format!("{n:x}\r\n").as_bytes());
        }
    }

    #[test]
    fn the_date_is_an_imf_fixdate_of_now() {
        let text = DATE.with(|d| String::from_utf8(d.borrow_mut().now().to_vec()).unwrap());
        let parsed = httpdate::parse_http_date(&text).unwrap();
        let age = SystemTime::now().duration_since(parsed).unwrap();
        assert!(age.as_secs() < 2, "{text}");
    }

    #[test]
    fn connection_tokens_are_found_in_lists() {
        let mut h = HeaderMap::new();
        h.append(header::CONNECTION, "keep-alive, Close".parse().unwrap());
        assert!(has_token(&h, "close"));
        assert!(!has_token(&h, "upgrade"));
    }
}
