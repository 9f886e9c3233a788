//! The wire under a pinned client: a TCP stream that acknowledges at once, the HTTP/1.1
//! handshake over it, and bodies read within their bounds (whole JSON, or SSE events one by
//! one).

use std::collections::HashMap;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use sse_stream::{Sse, SseStream};
use tokio::net::TcpStream;

use crate::net::policy::Target;

use super::{NetError, SESSION_HEADER};

/// A TCP stream that acknowledges what it reads at once. A server that leaves Nagle's
/// algorithm on (hyper's and axum's default) holds each small write until the previous
/// one is acknowledged; a client delaying its ACKs (Linux: up to 40 ms) would then wait
/// that long for every SSE event after the first. Linux clears the flag as it goes, so
/// it is set again after every read.
pub(super) struct QuickAck(TcpStream);

impl QuickAck {
    pub(super) fn new(stream: TcpStream) -> Self {
        Self(stream)
    }

    fn acknowledge_at_once(&self) {
        #[cfg(target_os = "linux")]
        let _ = socket2::SockRef::from(&self.0).set_tcp_quickack(true);
    }
}

impl tokio::io::AsyncRead for QuickAck {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.0).poll_read(cx, buf);
        if matches!(polled, std::task::Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.acknowledge_at_once();
        }
        polled
    }
}

impl tokio::io::AsyncWrite for QuickAck {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write(cx, data)
    }
    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0).poll_write_vectored(cx, data)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

pub(super) async fn handshake<S>(
    stream: S,
    target: &Target,
) -> Result<SendRequest<Full<Bytes>>, NetError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http_error(target, e))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

pub(super) fn http_error(target: &Target, e: impl std::fmt::Display) -> NetError {
    NetError::Http {
        target: target.origin(),
        message: e.to_string(),
    }
}

pub(super) fn header_map(
    custom: HashMap<HeaderName, HeaderValue>,
    session: Option<&str>,
    auth: Option<String>,
) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (k, v) in custom {
        headers.insert(k, v);
    }
    if let Some(sid) = session.and_then(|s| HeaderValue::from_str(s).ok()) {
        headers.insert(HeaderName::from_static(SESSION_HEADER), sid);
    }
    if let Some(token) = auth.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
        headers.insert(AUTHORIZATION, token);
    }
    headers
}

pub(super) fn is_media(value: Option<&HeaderValue>, media: &str) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case(media))
}

pub(super) async fn read_limited(body: Incoming, max: usize) -> Result<Bytes, NetError> {
    Limited::new(body, max)
        .collect()
        .await
        .map(|c| c.to_bytes())
        .map_err(|_| NetError::TooLarge(max))
}

/// The body as SSE events, none larger than `max` bytes.
pub(super) fn bounded_sse(
    body: Incoming,
    max: usize,
) -> BoxStream<'static, Result<Sse, sse_stream::Error>> {
    let mut since_boundary = 0usize;
    let mut last = 0u8;
    let bytes = body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(|e| NetError::Http {
            target: String::new(),
            message: e.to_string(),
        })?;
        for &b in chunk.iter() {
            // An event ends at a blank line; `\r` is ignored so CRLF works too.
            if b == b'\n' && last == b'\n' {
                since_boundary = 0;
            } else if b != b'\r' {
                since_boundary += 1;
                if since_boundary > max {
                    return Err(NetError::TooLarge(max));
                }
            }
            if b != b'\r' {
                last = b;
            }
        }
        Ok(chunk)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}
