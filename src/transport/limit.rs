//! A bound on what a stdio server may send in one message.
//!
//! rmcp drops an over-long line silently, which would leave the request it answered
//! waiting for its timeout. [`LineLimit`] sits between the child's stdout and rmcp: a
//! line longer than [`MAX_MESSAGE_BYTES`] is discarded as it streams (never held in
//! memory) and, when it answered a request, replaced by a JSON-RPC error for that
//! request, so the call fails at once with a clear message.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Most bytes of one message from a stdio server.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// How much of a line is kept to find its JSON-RPC id.
const HEAD: usize = 256;

/// Wraps a reader of newline-delimited JSON-RPC messages.
pub struct LineLimit<R> {
    inner: R,
    limit: usize,
    /// The current line while it is within the limit.
    line: Vec<u8>,
    /// Bytes ready to hand to the reader, and how many were handed already.
    ready: Vec<u8>,
    handed: usize,
    /// Set while skipping an over-long line; holds the start of that line.
    discarding: Option<Vec<u8>>,
    buf: Box<[u8]>,
    eof: bool,
}

impl<R> LineLimit<R> {
    /// A limiter at [`MAX_MESSAGE_BYTES`].
    pub fn new(inner: R) -> Self {
        Self::with_limit(inner, MAX_MESSAGE_BYTES)
    }

    /// A limiter at `limit` bytes per line.
    pub fn with_limit(inner: R, limit: usize) -> Self {
        LineLimit {
            inner,
            limit,
            line: Vec::new(),
            ready: Vec::new(),
            handed: 0,
            discarding: None,
            // Small: one lives per connection; rmcp buffers behind it anyway.
            buf: vec![0u8; 1024].into_boxed_slice(),
            eof: false,
        }
    }

    fn take_bytes(&mut self, n: usize) {
        let mut rest = &self.buf[..n];
        while !rest.is_empty() {
            let (segment, newline) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..i], true),
                None => (rest, false),
            };
            if let Some(head) = &mut self.discarding {
                if head.len() < HEAD {
                    head.extend_from_slice(&segment[..segment.len().min(HEAD - head.len())]);
                }
            } else if self.line.len() + segment.len() > self.limit {
                let mut head = std::mem::take(&mut self.line);
                head.truncate(HEAD);
                head.extend_from_slice(
                    &segment[..segment.len().min(HEAD.saturating_sub(head.len()))],
                );
                self.discarding = Some(head);
            } else {
                self.line.extend_from_slice(segment);
            }
            if newline {
                match self.discarding.take() {
                    Some(head) => {
                        if let Some(id) = request_id(&head) {
                            let error = format!(
                                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":-32001,\"message\":\"the server's answer exceeded the {} MiB message limit and was dropped\"}}}}\n",
                                self.limit / (1024 * 1024)
                            );
                            self.ready.extend_from_slice(error.as_bytes());
                        }
                    }
                    None => {
                        self.ready.append(&mut self.line);
                        self.ready.push(b'\n');
                    }
                }
                rest = &rest[segment.len() + 1..];
            } else {
                rest = &rest[segment.len()..];
            }
        }
    }
}

/// The `"id"` of a JSON-RPC message from the start of its text, as JSON.
fn request_id(head: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(head);
    let at = text.find("\"id\"")?;
    let rest = text[at + 4..].trim_start().strip_prefix(':')?.trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        let end = s.find('"')?;
        return serde_json::to_string(&s[..end]).ok();
    }
    let digits: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    (!digits.is_empty()).then_some(digits)
}

impl<R: AsyncRead + Unpin> AsyncRead for LineLimit<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.handed < this.ready.len() {
                let n = (this.ready.len() - this.handed).min(out.remaining());
                out.put_slice(&this.ready[this.handed..this.handed + n]);
                this.handed += n;
                if this.handed == this.ready.len() {
                    this.ready.clear();
                    this.handed = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                // A trailing line without newline is passed on as it is (rmcp ignores it).
                if !this.line.is_empty() {
                    this.ready = std::mem::take(&mut this.line);
                    continue;
                }
                return Poll::Ready(Ok(()));
            }
            let mut read = ReadBuf::new(&mut this.buf);
            match Pin::new(&mut this.inner).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        this.eof = true;
                    } else {
                        this.take_bytes(n);
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn through(input: Vec<u8>, limit: usize) -> String {
        let mut out = String::new();
        LineLimit::with_limit(&input[..], limit)
            .read_to_string(&mut out)
            .await
            .unwrap();
        out
    }

    #[tokio::test]
    async fn lines_within_the_limit_pass_unchanged() {
        let input = b"{\"a\":1}\n{\"b\":2}\npartial".to_vec();
        assert_eq!(
            through(input.clone(), 64).await,
            String::from_utf8(input).unwrap()
        );
    }

    #[tokio::test]
    async fn an_over_long_answer_becomes_an_error_for_its_request() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'x', 10_000));
        input.extend(b"\"}\n{\"ok\":true}\n");
        let out = through(input, 1024).await;
        let mut lines = out.lines();
        let error: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
        assert_eq!(error["id"], 42);
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("message limit")
        );
        assert_eq!(lines.next(), Some("{\"ok\":true}"));
        assert!(out.len() < 400);
    }

    #[tokio::test]
    async fn an_over_long_notification_is_dropped() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'y', 5_000));
        input.extend(b"\"}\n");
        assert_eq!(through(input, 1024).await, "");
    }

    #[test]
    fn ids_are_found_as_json() {
        assert_eq!(
            request_id(br#"{"jsonrpc":"2.0","id": "a-1","result""#).as_deref(),
            Some("\"a-1\"")
        );
        assert_eq!(request_id(br#"{"id":7,"#).as_deref(), Some("7"));
        assert_eq!(request_id(br#"{"method":"x"}"#), None);
    }
}
