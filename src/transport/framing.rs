//! Newline-delimited JSON-RPC over a child's stdin and stdout, holding nothing between
//! messages.
//!
//! rmcp's own stdio transport keeps an 8 KiB read buffer, an 8 KiB write buffer and a
//! line buffer as large as the largest message seen, for the whole life of the
//! connection, and drops an over-long line silently, which leaves the request it
//! answered waiting for its timeout. [`StdioTransport`] reads each line into a buffer
//! that leaves with the message and writes each message from a buffer freed once it is
//! sent, so an idle connection holds no message memory. A line longer than
//! [`MAX_MESSAGE_BYTES`] is discarded as it streams (never held in memory) and, when it
//! answered a request, becomes a JSON-RPC error for that request, so the call fails at
//! once with a clear message. The answer's id is found by [`IdScanner`] wherever it is
//! in the message (the TypeScript SDK writes it after the `result`), reading the bytes
//! as they pass and keeping a few bytes of state; only the top-level `"id"` counts, so
//! an `"id"` inside the result cannot be taken for the answer's own. An answer that is not valid JSON (cut, broken, nested too
//! deep) or not a valid MCP response fails its request the same way.
//!
//! A request the client cannot read is answered with an error on a task of its own
//! (half a line on the server's stdin would break the stream). At most
//! [`MAX_PENDING_SERVER_REQUESTS`] such answers are in flight: a server that sends
//! them faster than it reads them (or never reads) ends the stream, and the
//! connection fails with [`TransportEnd::Flooded`], instead of growing one task per
//! line (seen: 900 MB in 16 seconds).

use std::collections::VecDeque;
use std::future::{Future, poll_fn};
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::Mutex;

mod answer;
mod scan;

use super::guard::{
    EndCause, MAX_PENDING_SERVER_REQUESTS, MAX_REQUEST_ID_BYTES, Traffic, TransportEnd,
};
use scan::{IdScanner, envelope};

/// Most bytes of one message from a stdio server.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// Bytes read from the pipe at once (on the stack of the poll, never kept).
const READ_CHUNK: usize = 8 * 1024;

/// The JSON-RPC error code of an answer the transport refused (too long, or not MCP).
const REFUSED_ANSWER: i64 = -32001;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What the top level of a JSON-RPC message says about where it belongs.
#[derive(Debug, Clone, PartialEq, Default)]
struct Envelope {
    /// The top-level `"id"` (a string or an integer), when there is one.
    id: Option<Value>,
    /// Whether the top level has a `"method"` (a request or notification, not an
    /// answer).
    method: bool,
}

/// One line from the server.
#[derive(Debug, PartialEq)]
enum Line {
    /// A whole line within the limit, without its newline.
    Text(Vec<u8>),
    /// A line over the limit, discarded as it streamed; what its top level said.
    Oversized(Envelope),
}

/// Splits a byte stream into lines, holding at most the line in progress.
struct LineReader<R> {
    inner: R,
    limit: usize,
    /// The line in progress while it is within the limit.
    line: Vec<u8>,
    /// Set while skipping an over-long line: what its top level said so far.
    discarding: Option<IdScanner>,
    /// Lines completed by the last read and not yet taken.
    complete: VecDeque<Line>,
    eof: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    fn new(inner: R, limit: usize) -> Self {
        LineReader {
            inner,
            limit,
            line: Vec::new(),
            discarding: None,
            complete: VecDeque::new(),
            eof: false,
        }
    }

    /// The next line; `None` at the end of the stream, where a last line without a
    /// newline is dropped (it cannot be a whole message). Cancel-safe: every byte read
    /// is in `self` before this returns.
    fn poll_line(&mut self, cx: &mut Context<'_>) -> Poll<Option<std::io::Result<Line>>> {
        loop {
            if let Some(line) = self.complete.pop_front() {
                return Poll::Ready(Some(Ok(line)));
            }
            if self.eof {
                return Poll::Ready(None);
            }
            let mut chunk = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
            let mut read = ReadBuf::uninit(&mut chunk);
            match ready!(Pin::new(&mut self.inner).poll_read(cx, &mut read)) {
                Ok(()) if read.filled().is_empty() => self.eof = true,
                Ok(()) => self.take(read.filled()),
                Err(e) => return Poll::Ready(Some(Err(e))),
            }
        }
    }

    fn take(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let (segment, newline) = match memchr::memchr(b'\n', bytes) {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            if let Some(scanner) = &mut self.discarding {
                scanner.feed(segment);
            } else if self.line.len() + segment.len() > self.limit {
                // From here the line is only scanned for its id, never kept.
                let mut scanner = IdScanner::new();
                scanner.feed(&std::mem::take(&mut self.line));
                scanner.feed(segment);
                self.discarding = Some(scanner);
            } else {
                self.line.extend_from_slice(segment);
            }
            if newline {
                // The finished line leaves with its buffer: nothing stays allocated.
                let line = match self.discarding.take() {
                    Some(scanner) => Line::Oversized(scanner.finish()),
                    None => Line::Text(std::mem::take(&mut self.line)),
                };
                self.complete.push_back(line);
                bytes = &bytes[segment.len() + 1..];
            } else {
                bytes = &bytes[segment.len()..];
            }
        }
    }
}

/// What a line from the server turns into.
#[derive(Debug)]
enum Decoded {
    /// A message for rmcp (possibly an error standing in for a refused answer).
    Message(Box<RxJsonRpcMessage<RoleClient>>),
    /// A request the client cannot read: this error answer goes back to the server.
    Reply(Vec<u8>),
    /// Nothing to pass on (an empty line, text that is not JSON, an unknown
    /// notification, an over-long notification).
    Skip,
}

fn decode(line: Line, limit: usize) -> Decoded {
    let text = match line {
        Line::Oversized(envelope) => return oversized(envelope, limit),
        Line::Text(text) => text,
    };
    let text = text.strip_prefix(UTF8_BOM).unwrap_or(&text);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    if text.iter().all(u8::is_ascii_whitespace) {
        return Decoded::Skip;
    }
    if let Some(message) = answer::typed_answer(text) {
        return Decoded::Message(Box::new(message));
    }
    let error = match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(text) {
        Ok(message) => return Decoded::Message(Box::new(message)),
        Err(e) => e,
    };
    // Never log or repeat the line itself: it may carry anything. (A syntax error's
    // message names a position, never the text; a data error's may quote it.)
    let value = match serde_json::from_slice::<Value>(text) {
        Ok(value) => value,
        // Any text parses as a `Value` but for a syntax error or excessive depth.
        Err(syntax) => return unreadable(text, &syntax),
    };
    let id = value
        .get("id")
        .filter(|id| id.is_string() || id.is_i64())
        .cloned();
    match (id, value.get("method").is_some()) {
        (Some(id), false) => refused(
            id,
            &format!(
                "the server's answer is not a valid MCP response (at line {} column {})",
                error.line(),
                error.column()
            ),
        ),
        (Some(id), true) => reply_error(id, -32600, "invalid request"),
        (None, _) => {
            tracing::debug!("ignored a notification the client does not know");
            Decoded::Skip
        }
    }
}

/// A line over the message limit: an over-long request of the server is answered,
/// never waited on; an over-long answer fails its request at once.
fn oversized(envelope: Envelope, limit: usize) -> Decoded {
    let mib = limit / (1024 * 1024);
    match envelope {
        Envelope {
            id: Some(id),
            method: true,
        } => reply_error(id, -32600, &format!("request over the {mib} MiB limit")),
        Envelope {
            id: Some(id),
            method: false,
        } => refused(
            id,
            &format!("the server's answer exceeded the {mib} MiB message limit and was dropped"),
        ),
        Envelope { id: None, .. } => {
            tracing::debug!("dropped an over-long message without an id");
            Decoded::Skip
        }
    }
}

/// A line that is not JSON (cut, broken, or nested deeper than the parser goes). An
/// answer whose id shows still fails its request at once; a request is answered,
/// never left waiting: an elicitation (a schema nested deeper than the parser goes) is
/// declined, as any elicitation the client cannot show; anything else is an error.
fn unreadable(text: &[u8], syntax: &serde_json::Error) -> Decoded {
    match envelope(text) {
        Envelope {
            id: Some(id),
            method: false,
        } => refused(
            id,
            &format!("the server's answer is not valid JSON: {syntax}"),
        ),
        Envelope {
            id: Some(id),
            method: true,
        } => {
            if contains(text, b"\"elicitation/create\"") {
                reply_result(id, json!({"action": "decline"}))
            } else {
                reply_error(id, -32600, "request that cannot be read")
            }
        }
        Envelope { id: None, .. } => {
            tracing::debug!("ignored a line that is not JSON from a stdio server");
            Decoded::Skip
        }
    }
}

/// A JSON-RPC error for request `id`, as if the server had sent it.
fn refused(id: Value, message: &str) -> Decoded {
    let error = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": REFUSED_ANSWER, "message": message},
    });
    match serde_json::from_value(error) {
        Ok(message) => Decoded::Message(Box::new(message)),
        Err(_) => Decoded::Skip,
    }
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A result answering a request of the server's that the client cannot read.
fn reply_result(id: Value, result: Value) -> Decoded {
    let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
    let mut bytes = answer.to_string().into_bytes();
    bytes.push(b'\n');
    Decoded::Reply(bytes)
}

/// An error answer to a request of the server's that the client cannot read.
fn reply_error(id: Value, code: i64, message: &str) -> Decoded {
    let answer = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    let mut bytes = answer.to_string().into_bytes();
    bytes.push(b'\n');
    Decoded::Reply(bytes)
}

/// The client side of a stdio server's MCP stream (see the module documentation).
pub(crate) struct StdioTransport<R, W> {
    lines: LineReader<R>,
    /// Pacing of what the server sends unasked, shared with the guard above.
    traffic: Arc<Traffic>,
    write: Arc<Mutex<Option<W>>>,
    /// Error answers to unreadable requests not yet written.
    replies: Arc<AtomicUsize>,
    /// Where the reason is left when the stream is ended on purpose.
    cause: EndCause,
}

impl<R, W> StdioTransport<R, W>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    pub(crate) fn new(read: R, write: W, traffic: Arc<Traffic>, cause: EndCause) -> Self {
        StdioTransport {
            lines: LineReader::new(read, MAX_MESSAGE_BYTES),
            traffic,
            write: Arc::new(Mutex::new(Some(write))),
            replies: Arc::default(),
            cause,
        }
    }
}

/// Writes one whole line under the lock, so lines never interleave.
async fn write_line<W: AsyncWrite + Unpin>(
    write: &Mutex<Option<W>>,
    bytes: &[u8],
) -> std::io::Result<()> {
    let mut guard = write.lock().await;
    let Some(writer) = guard.as_mut() else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            "the server's stdin is closed",
        ));
    };
    writer.write_all(bytes).await?;
    writer.flush().await
}

impl<R, W> Transport<RoleClient> for StdioTransport<R, W>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let write = self.write.clone();
        // Most messages are a few hundred bytes: one allocation, not a doubling series.
        let mut bytes = Vec::with_capacity(512);
        let bytes = serde_json::to_writer(&mut bytes, &item).map(|()| {
            bytes.push(b'\n');
            bytes
        });
        async move { write_line(&write, &bytes?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            // Before taking a line: a receive cancelled while waiting loses none.
            self.traffic.ready().await;
            let line = match poll_fn(|cx| self.lines.poll_line(cx)).await? {
                Ok(line) => line,
                Err(e) => {
                    tracing::debug!("reading a stdio server's stdout failed: {e}");
                    return None;
                }
            };
            let bytes = match &line {
                Line::Text(text) => text.len(),
                Line::Oversized(_) => MAX_MESSAGE_BYTES,
            };
            let decoded = decode(line, self.lines.limit);
            // Answers to our own requests are ours to pace; the rest costs the server.
            if !matches!(&decoded, Decoded::Message(m) if self.traffic.answers_us(m)) {
                self.traffic.spend_bytes(bytes);
            }
            match decoded {
                Decoded::Message(message) => return Some(*message),
                Decoded::Reply(bytes) => {
                    // The answer repeats the id: one that is too long would make each
                    // pending answer that long.
                    if bytes.len() > MAX_REQUEST_ID_BYTES + 128 {
                        let _ = self.cause.set(TransportEnd::Refused {
                            reason: "sent a request id longer than 128 bytes",
                        });
                        return None;
                    }
                    if self.replies.load(Ordering::Acquire) >= MAX_PENDING_SERVER_REQUESTS {
                        let _ = self.cause.set(TransportEnd::Flooded {
                            what: "unreadable requests",
                            limit: MAX_PENDING_SERVER_REQUESTS,
                        });
                        return None;
                    }
                    // Written on its own task: `receive` may be cancelled at any await,
                    // and half a line on the server's stdin would break the stream.
                    let (write, replies) = (self.write.clone(), Arc::clone(&self.replies));
                    replies.fetch_add(1, Ordering::AcqRel);
                    tokio::spawn(async move {
                        let _ = write_line(&write, &bytes).await;
                        replies.fetch_sub(1, Ordering::AcqRel);
                    });
                }
                Decoded::Skip => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // Dropping the writer closes the server's stdin, its signal to exit.
        self.write.lock().await.take();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::JsonRpcMessage;

    /// Every line of `input`, read through a reader at `limit`.
    async fn lines(input: &[u8], limit: usize) -> Vec<Line> {
        let mut reader = LineReader::new(input, limit);
        let mut out = Vec::new();
        while let Some(line) = poll_fn(|cx| reader.poll_line(cx)).await {
            out.push(line.unwrap());
        }
        out
    }

    /// A reader that hands out one byte per read, like a server that drips.
    struct Drip<'a>(&'a [u8]);

    impl AsyncRead for Drip<'_> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            out: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            if let Some((first, rest)) = self.0.split_first() {
                out.put_slice(&[*first]);
                self.0 = rest;
            }
            Poll::Ready(Ok(()))
        }
    }

    fn error_of(decoded: Decoded) -> (Value, String) {
        let Decoded::Message(message) = decoded else {
            panic!("expected a message, got {decoded:?}");
        };
        let JsonRpcMessage::Error(error) = *message else {
            panic!("expected an error");
        };
        (
            serde_json::to_value(&error.id).unwrap(),
            error.error.message.to_string(),
        )
    }

    #[tokio::test]
    async fn lines_are_split_and_a_last_partial_line_is_dropped() {
        let got = lines(b"{\"a\":1}\n\n{\"b\":2}\npartial", 64).await;
        assert_eq!(
            got,
            vec![
                Line::Text(b"{\"a\":1}".to_vec()),
                Line::Text(Vec::new()),
                Line::Text(b"{\"b\":2}".to_vec()),
            ]
        );
    }

    #[tokio::test]
    async fn a_line_dripped_a_byte_at_a_time_arrives_whole() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        let mut reader = LineReader::new(Drip(input), 1024);
        let line = poll_fn(|cx| reader.poll_line(cx)).await.unwrap().unwrap();
        assert_eq!(line, Line::Text(input[..input.len() - 1].to_vec()));
        assert!(poll_fn(|cx| reader.poll_line(cx)).await.is_none());
    }

    #[tokio::test]
    async fn nothing_stays_allocated_between_messages() {
        let mut input = vec![b'x'; 200_000];
        input.push(b'\n');
        let mut reader = LineReader::new(&input[..], MAX_MESSAGE_BYTES);
        let line = poll_fn(|cx| reader.poll_line(cx)).await.unwrap().unwrap();
        assert!(matches!(line, Line::Text(ref t) if t.len() == 200_000));
        assert_eq!(reader.line.capacity(), 0);
        assert!(reader.discarding.is_none());
    }

    #[tokio::test]
    async fn an_over_long_answer_becomes_an_error_for_its_request() {
        // The id before the result (rmcp, Python) and after it (the TypeScript SDK).
        for (before, after) in [
            ("{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":", "}"),
            ("{\"jsonrpc\":\"2.0\",\"result\":", ",\"id\":42}"),
        ] {
            let mut input = before.as_bytes().to_vec();
            input.extend(b"{\"content\":[{\"type\":\"text\",\"text\":\"");
            input.extend(std::iter::repeat_n(b'x', 10_000));
            input.extend(b"\"}]}");
            input.extend(after.as_bytes());
            input.extend(b"\n{\"ok\":true}\n");
            let mut got = lines(&input, 1024).await.into_iter();
            let Some(Line::Oversized(envelope)) = got.next() else {
                panic!("the long line should be refused");
            };
            let (id, message) = error_of(decode(Line::Oversized(envelope), 1024 * 1024));
            assert_eq!(id, json!(42), "{before}...{after}");
            assert!(message.contains("1 MiB message limit"), "{message}");
            assert_eq!(got.next(), Some(Line::Text(b"{\"ok\":true}".to_vec())));
        }
    }

    #[tokio::test]
    async fn an_over_long_request_of_the_server_is_answered() {
        let mut input = b"{\"jsonrpc\":\"2.0\",\"params\":{\"x\":\"".to_vec();
        input.extend(std::iter::repeat_n(b'y', 5_000));
        input.extend(b"\"},\"method\":\"sampling/createMessage\",\"id\":\"r-9\"}\n");
        let got = lines(&input, 1024).await;
        let Some(Line::Oversized(envelope)) = got.into_iter().next() else {
            panic!("the long line should be refused");
        };
        let Decoded::Reply(bytes) = decode(Line::Oversized(envelope), 1024 * 1024) else {
            panic!("an over-long request must be answered");
        };
        let reply: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(reply["id"], "r-9");
        assert_eq!(reply["error"]["code"], -32600);
    }

    #[test]
    fn an_over_long_notification_is_dropped() {
        let envelope = envelope(b"{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":\"yyyy\"}");
        assert_eq!(envelope.id, None);
        assert!(matches!(
            decode(Line::Oversized(envelope), 1024),
            Decoded::Skip
        ));
    }

    #[test]
    fn messages_with_a_byte_order_mark_or_crlf_are_read() {
        let line = b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{}}\r".to_vec();
        assert!(matches!(
            decode(Line::Text(line), 1024),
            Decoded::Message(_)
        ));
    }

    #[test]
    fn text_that_is_not_json_and_unknown_notifications_are_skipped() {
        for line in [
            &b"hello from a debug print"[..],
            b"   ",
            b"{\"jsonrpc\":\"2.0\",\"method\":1}",
        ] {
            assert!(
                matches!(decode(Line::Text(line.to_vec()), 1024), Decoded::Skip),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
    }

    #[test]
    fn an_answer_that_is_not_mcp_fails_its_request_without_repeating_it() {
        let line = br#"{"jsonrpc":"2.0","id":7,"result":{"secret":"s3cr3t"},"error":5}"#;
        let (id, message) = error_of(decode(Line::Text(line.to_vec()), 1024));
        assert_eq!(id, json!(7));
        assert!(message.contains("not a valid MCP response"), "{message}");
        assert!(!message.contains("s3cr3t"));
    }

    #[test]
    fn an_answer_too_deep_to_parse_fails_its_request() {
        let mut line = br#"{"jsonrpc":"2.0","id":9,"result":"#.to_vec();
        line.extend(std::iter::repeat_n(b'[', 3000));
        line.extend(std::iter::repeat_n(b']', 3000));
        line.push(b'}');
        let (id, message) = error_of(decode(Line::Text(line), 1024));
        assert_eq!(id, json!(9));
        assert!(
            message.contains("not valid JSON: recursion limit"),
            "{message}"
        );
    }

    #[test]
    fn a_cut_answer_fails_its_request_without_repeating_it() {
        let line = br#"{"jsonrpc":"2.0","id":4,"result":{"token":"s3cr3t""#;
        let (id, message) = error_of(decode(Line::Text(line.to_vec()), 1024));
        assert_eq!(id, json!(4));
        assert!(
            message.starts_with("the server's answer is not valid JSON"),
            "{message}"
        );
        assert!(!message.contains("s3cr3t"), "{message}");
    }

    #[test]
    fn a_request_the_client_cannot_read_is_answered_with_an_error() {
        let line = br#"{"jsonrpc":"2.0","id":"q","method":"ping","params":5}"#;
        let Decoded::Reply(bytes) = decode(Line::Text(line.to_vec()), 1024) else {
            panic!("expected a reply");
        };
        let reply: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(reply["id"], "q");
        assert_eq!(reply["error"]["code"], -32600);
        assert!(bytes.ends_with(b"\n"));
    }

    #[test]
    fn only_the_top_level_id_is_the_answers_own() {
        let cases: &[(&[u8], Option<Value>, bool)] = &[
            (
                br#"{"jsonrpc":"2.0","id": "a-1","result":{}}"#,
                Some(json!("a-1")),
                false,
            ),
            (br#"{"id":7,"result":1}"#, Some(json!(7)), false),
            (br#"{"id":-3}"#, Some(json!(-3)), false),
            (br#"{"method":"x"}"#, None, true),
            // Ids inside the result, in strings, in arrays and in nested objects.
            (
                br#"{"result":{"id":1,"items":[{"id":2}]},"id":3}"#,
                Some(json!(3)),
                false,
            ),
            (br#"{"result":"\"id\":5,","id":6}"#, Some(json!(6)), false),
            (
                br#"{"result":{"a":"}\"","id":8},"id":9}"#,
                Some(json!(9)),
                false,
            ),
            (
                br#"{"result":[[["id",1]]],"id":"z"}"#,
                Some(json!("z")),
                false,
            ),
            (br#"{"result":{"content":[{"id":4}]}}"#, None, false),
            // Ids JSON-RPC does not allow, or longer than the runtime accepts.
            (br#"{"result":{},"id":1.5}"#, None, false),
            (br#"{"result":{},"id":null}"#, None, false),
            (br#"{"result":{},"id":{"id":1}}"#, None, false),
            (br#"{"result":{},"id":"a\"b"}"#, Some(json!("a\"b")), false),
            // A method further down makes it a request.
            (
                br#"{"id":11,"params":{"method":"no"},"method":"ping"}"#,
                Some(json!(11)),
                true,
            ),
            (
                br#"{"id":11,"params":{"method":"no"}}"#,
                Some(json!(11)),
                false,
            ),
            // Not an object at all.
            (br#"[{"id":1}]"#, None, false),
            (br#""id":1"#, None, false),
        ];
        for (text, id, method) in cases {
            let found = envelope(text);
            assert_eq!(&found.id, id, "{}", String::from_utf8_lossy(text));
            assert_eq!(found.method, *method, "{}", String::from_utf8_lossy(text));
        }
        let long = format!(r#"{{"result":{{}},"id":"{}"}}"#, "x".repeat(200));
        assert_eq!(envelope(long.as_bytes()).id, None);
        // An id cut just after a backslash: its escaped quote does not end the string.
        let cut = format!(
            r#"{{"id":"{}\",\"x\":1","method":"ping"}}"#,
            "a".repeat(128)
        );
        let found = envelope(cut.as_bytes());
        assert_eq!((found.id, found.method), (None, true));
        // A byte order mark before an over-long answer.
        let mut bom = UTF8_BOM.to_vec();
        bom.extend(br#"{"result":{},"id":12}"#);
        assert_eq!(envelope(&bom).id, Some(json!(12)));
        // Fed a byte at a time, the same answers.
        let text = br#"{"result":{"id":1,"s":"\"id\":2"},"id":3}"#;
        let mut scanner = IdScanner::new();
        for b in text.iter() {
            scanner.feed(std::slice::from_ref(b));
        }
        assert_eq!(scanner.finish().id, Some(json!(3)));
    }

    #[tokio::test]
    async fn messages_are_written_as_lines_and_closing_closes_stdin() {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let mut transport = StdioTransport::new(
            tokio::io::empty(),
            ours,
            Arc::default(),
            EndCause::default(),
        );
        let ping = |id: i64| -> TxJsonRpcMessage<RoleClient> {
            serde_json::from_value(json!({"jsonrpc": "2.0", "id": id, "method": "ping"})).unwrap()
        };
        transport.send(ping(1)).await.unwrap();
        transport.send(ping(2)).await.unwrap();
        transport.close().await.unwrap();
        let mut written = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut theirs, &mut written)
            .await
            .unwrap();
        let ids: Vec<Value> = written
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap()["id"].clone())
            .collect();
        assert_eq!(ids, vec![json!(1), json!(2)]);
        assert!(transport.send(ping(3)).await.is_err());
    }
}
