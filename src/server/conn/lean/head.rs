//! Request heads on the lean path: one `httparse` pass over the bytes read
//! so far decides whether the next request is one the lean path serves,
//! and builds its [`Request`] from slices of the head (no copy of the
//! target or of a header value).
//!
//! Owns: [`take`] and the rules of what the lean path takes (see
//! [`Take::Refer`]). Never answers: a head it does not take is left in the
//! buffer, byte for byte, for hyper.

use std::mem::MaybeUninit;
use std::ops::Range;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};
use bytes::{Bytes, BytesMut};

/// Header lines a head taken by the lean path may have; a head with more
/// goes to hyper (which takes up to 100).
const MAX_HEADERS: usize = 32;

/// What [`take`] found at the start of the buffer.
// The request is moved once, to its service; a box would cost an
// allocation per request.
#[allow(clippy::large_enum_variant)]
pub(super) enum Take {
    /// No complete head yet: read more.
    Partial,
    /// A head the lean path does not serve, left in the buffer: one that
    /// `httparse` refuses, HTTP/1.0 (or not 1.x), a method other than
    /// `GET` and `HEAD`, a request target not in origin form, a request
    /// with a body (`Content-Length`, `Transfer-Encoding`), `Expect`,
    /// `Upgrade`, a `Connection` header other than `keep-alive` or
    /// `close`, more than [`MAX_HEADERS`] header lines, a target or a
    /// header that `http` refuses. hyper serves it and the rest of the
    /// connection.
    Refer,
    /// A request, its head removed from the buffer; `close`: the client
    /// sent `Connection: close`.
    Request { req: Request<Body>, close: bool },
}

/// A header line's name and value, as ranges of the head.
#[derive(Clone, Copy, Default)]
struct Line {
    name: (u32, u32),
    value: (u32, u32),
}

/// Takes the request whose head starts `buf` (RFC 9112 §2.1, §3, §5),
/// when the lean path serves it ([`Take`]).
pub(super) fn take(buf: &mut BytesMut) -> Take {
    let mut raw = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut lines = [Line::default(); MAX_HEADERS];
    let (len, method, target, count, close) = {
        let mut req = httparse::Request::new(&mut []);
        let len = match req.parse_with_uninit_headers(buf, &mut raw) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Take::Partial,
            Err(_) => return Take::Refer,
        };
        let method = match req.method {
            Some("GET") => Method::GET,
            Some("HEAD") => Method::HEAD,
            _ => return Take::Refer,
        };
        let Some(path) = req.path.filter(|p| p.starts_with('/')) else {
            return Take::Refer;
        };
        if req.version != Some(1) {
            return Take::Refer;
        }
        let base = buf.as_ptr() as usize;
        // Every part httparse returns is a slice of `buf`; an empty one
        // is taken as empty wherever it points.
        let at = |s: &[u8]| {
            if s.is_empty() {
                return (0, 0);
            }
            let start = (s.as_ptr() as usize - base) as u32;
            (start, start + s.len() as u32)
        };
        let mut close = false;
        for (line, h) in lines.iter_mut().zip(req.headers.iter()) {
            match refers(h) {
                Some(true) => return Take::Refer,
                Some(false) => close |= h.value.eq_ignore_ascii_case(b"close"),
                None => {}
            }
            *line = Line {
                name: at(h.name.as_bytes()),
                value: at(h.value),
            };
        }
        (len, method, at(path.as_bytes()), req.headers.len(), close)
    };
    let head = buf.split_to(len).freeze();
    match build(&head, method, target, &lines[..count]) {
        Some(req) => Take::Request { req, close },
        None => {
            // Put the head back for hyper (rare: `http` refused a part).
            let mut all = BytesMut::with_capacity(head.len() + buf.len());
            all.extend_from_slice(&head);
            all.extend_from_slice(buf);
            *buf = all;
            Take::Refer
        }
    }
}

/// For a header that matters here: `Some(true)` when it sends the request
/// to hyper, `Some(false)` for `Connection: keep-alive` or `close`; `None`
/// for any other header.
fn refers(h: &httparse::Header<'_>) -> Option<bool> {
    let name = h.name.as_bytes();
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    if is("content-length") || is("transfer-encoding") || is("expect") || is("upgrade") {
        return Some(true);
    }
    if is("connection") {
        let v = h.value;
        return Some(!(v.eq_ignore_ascii_case(b"keep-alive") || v.eq_ignore_ascii_case(b"close")));
    }
    None
}

/// The request of a taken head; `None` when `http` refuses its target or
/// a header.
fn build(
    head: &Bytes,
    method: Method,
    target: (u32, u32),
    lines: &[Line],
) -> Option<Request<Body>> {
    let slice = |(a, b): (u32, u32)| {
        head.slice(Range {
            start: a as usize,
            end: b as usize,
        })
    };
    let uri = Uri::from_maybe_shared(slice(target)).ok()?;
    let mut headers = HeaderMap::with_capacity(lines.len());
    for line in lines {
        let name =
            HeaderName::from_bytes(&head[line.name.0 as usize..line.name.1 as usize]).ok()?;
        // SAFETY: httparse took the value (RFC 9110 §5.5 field-content:
        // HTAB, SP, VCHAR, obs-text; no CR, LF, NUL or DEL), which are the
        // bytes `HeaderValue` allows; hyper builds its values the same way.
        let value = unsafe { HeaderValue::from_maybe_shared_unchecked(slice(line.value)) };
        headers.append(name, value);
    }
    let mut req = Request::new(Body::empty());
    *req.method_mut() = method;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = headers;
    Some(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take_str(s: &str) -> (Take, BytesMut) {
        let mut buf = BytesMut::from(s);
        (take(&mut buf), buf)
    }

    #[test]
    fn a_get_is_taken_and_the_next_request_stays() {
        let (t, rest) = take_str(
            "GET /v2/a/manifests/v1?x=1 HTTP/1.1\r\nHost: h\r\nAccept: a\r\nAccept: b\r\n\r\nHEAD /v2/ HTTP/1.1\r\n",
        );
        let Take::Request { req, close } = t else {
            panic!("not taken")
        };
        assert!(!close);
        assert_eq!(req.method(), Method::GET);
        assert_eq!(req.uri().path(), "/v2/a/manifests/v1");
        assert_eq!(req.uri().query(), Some("x=1"));
        assert_eq!(req.version(), Version::HTTP_11);
        assert_eq!(req.headers()["host"], "h");
        let accept: Vec<_> = req.headers().get_all("accept").iter().collect();
        assert_eq!(accept, ["a", "b"]);
        assert_eq!(&rest[..], b"HEAD /v2/ HTTP/1.1\r\n");
        let mut rest = rest;
        assert!(matches!(take(&mut rest), Take::Partial));
    }

    #[test]
    fn empty_header_values_are_kept() {
        let (t, rest) = take_str("GET / HTTP/1.1\r\nX-Empty:\r\nY: \r\n\r\n");
        let Take::Request { req, .. } = t else {
            panic!("not taken")
        };
        assert_eq!(req.headers()["x-empty"], "");
        assert_eq!(req.headers()["y"], "");
        assert!(rest.is_empty());
    }

    #[test]
    fn connection_close_is_noted() {
        let (t, _) = take_str("HEAD / HTTP/1.1\r\nConnection: Close\r\n\r\n");
        assert!(matches!(t, Take::Request { close: true, .. }));
    }

    #[test]
    fn what_the_lean_path_does_not_serve_is_left_for_hyper_byte_for_byte() {
        let many: String = (0..40).map(|i| format!("X-{i}: v\r\n")).collect();
        for head in [
            "POST /v2/a/blobs/uploads/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "GET /v2/ HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            "GET /v2/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "GET /v2/ HTTP/1.0\r\n\r\n",
            "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            "GET /v2/ HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            "GET http://h/v2/ HTTP/1.1\r\n\r\n",
            "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            "GET /v2/ HTTP/1.1\r\nBad Header\r\n\r\n",
            "\u{16}\u{3}\u{1}binary",
            &format!("GET /v2/ HTTP/1.1\r\n{many}\r\n"),
        ] {
            let (t, rest) = take_str(head);
            assert!(matches!(t, Take::Refer), "{head:?} taken");
            assert_eq!(&rest[..], head.as_bytes(), "{head:?} changed");
        }
    }

    #[test]
    fn a_target_http_refuses_goes_back_whole() {
        // httparse takes bytes 0x80-0xff in a target; `http` does not.
        let head = b"GET /v2/\xff HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n";
        let mut buf = BytesMut::from(&head[..]);
        match take(&mut buf) {
            Take::Refer | Take::Partial => {}
            Take::Request { req, .. } => panic!("taken: {}", req.uri()),
        }
        assert_eq!(&buf[..], &head[..]);
    }
}
