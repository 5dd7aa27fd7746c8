//! The lean HTTP/1.1 path (issue 40): the requests most of a registry's
//! traffic is made of, `GET` and `HEAD` without a body, read, answered and
//! written by a small loop instead of hyper's connection machinery (which
//! cost more instructions per small request than nginx's whole request).
//!
//! Every connection starts here. A request the lean path takes
//! ([`head::take`]) goes through [`super::handle::respond`], the same
//! function hyper's requests go through: the same access control (who may
//! do what is declared per route and checked there, never here), request
//! log, metrics, handlers and response budget. Anything else, a request
//! with a body (pushes), an upgrade, HTTP/1.0, HTTP/2, a head that does not
//! parse or is over the limits, is handed to hyper with every byte read so
//! far ([`Rewind`]), and hyper serves the rest of the connection, with its
//! own answers to malformed heads.
//!
//! What hyper's HTTP/1 server promised and this loop keeps: keep-alive
//! and pipelining (a request's head is read only after the previous
//! response is out), `Connection: close` from either side, the header
//! timeout (a head must be complete within `header_timeout` of the end of
//! the previous response, else the connection closes; never a response
//! body: the connection's one timeout rule, [`crate::server::activity`],
//! shared with hyper's connections, so no timer is armed per request),
//! graceful stop (an idle connection is closed by its
//! task at once, a busy one here after its response), `Date`, and
//! `Content-Length` or chunked framing ([`write`]).
//!
//! Owns: the loop. Never routes, authorizes or answers a request itself.

mod head;
mod write;

use std::future::poll_fn;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::http::Method;
use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use self::head::Take;
use super::handle::respond;
use super::rewind::Rewind;
use super::{MIN_HEAD, Shared};
use crate::server::activity::Activity;
use crate::server::tls::ClientCertNames;

/// Bytes read at a time (and the smallest room left before a read).
const READ_CHUNK: usize = 8 << 10;

/// Serves requests on `io` until the connection ends (`None`) or a request
/// the lean path does not take arrives (`Some`: `io` with the unread
/// bytes, for hyper).
pub(super) async fn serve<I>(
    mut io: I,
    peer: SocketAddr,
    names: &Option<ClientCertNames>,
    shared: &Arc<Shared>,
    activity: &Arc<Activity>,
) -> Option<Rewind<I>>
where
    I: AsyncRead + AsyncWrite + Unpin,
{
    let max_head = shared.limits().max_request_head.max(MIN_HEAD);
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut out = Vec::with_capacity(512);
    loop {
        match head::take(&mut buf) {
            Take::Request { req, close } => {
                let is_head = req.method() == Method::HEAD;
                let guard = activity.begin_request();
                let res = respond(
                    req,
                    guard,
                    None,
                    false,
                    peer,
                    names.clone(),
                    shared,
                    activity,
                )
                .await;
                let keep_alive = !close && !activity.stopping();
                match write::response(&mut io, &mut out, res, is_head, keep_alive).await {
                    Ok(true) => {}
                    Ok(false) | Err(_) => {
                        let _ = io.shutdown().await;
                        return None;
                    }
                }
            }
            Take::Refer => return hand_off(io, buf),
            // hyper answers 431 to a head this long.
            Take::Partial if buf.len() >= max_head => return hand_off(io, buf),
            Take::Partial => {
                if buf.capacity() - buf.len() < READ_CHUNK / 2 {
                    buf.reserve(READ_CHUNK);
                }
                let read =
                    poll_fn(|cx| tokio_util::io::poll_read_buf(Pin::new(&mut io), cx, &mut buf))
                        .await;
                if !matches!(read, Ok(n) if n > 0) {
                    return None; // the client closed, or the socket failed
                }
            }
        }
    }
}

/// `io` with the unread bytes `buf`, for hyper (the head wait goes on
/// under the same rule until hyper starts the request).
fn hand_off<I>(io: I, buf: BytesMut) -> Option<Rewind<I>> {
    Some(Rewind::new(io, buf.freeze()))
}
