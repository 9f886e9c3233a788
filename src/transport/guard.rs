//! What a server's output may make the host hold or spend, and the transport wrapper
//! that enforces it for stdio and streamable HTTP alike.
//!
//! Adversary: a server author (threat model 2). rmcp spawns a task for each request a
//! server sends and keeps it until its answer is produced, then a task per answer until
//! it is written; a server that sends requests and never reads its input would grow
//! both without end, and a server that sends as fast as it can would take the host's
//! threads. The bounds:
//!
//! - **Held**: requests open (received, not yet answered nor withdrawn) and answers
//!   still being written count together; past [`MAX_PENDING_SERVER_REQUESTS`] the
//!   transport ends with [`TransportEnd::Flooded`]. An id reused while its request is
//!   open, or longer than [`MAX_REQUEST_ID_BYTES`] (an answer echoes it), ends it with
//!   [`TransportEnd::Refused`]. Either fails the connection.
//! - **Paced**: what the server sends unasked (requests, notifications, answers to
//!   nothing we asked) is paced at [`MAX_MESSAGES_PER_SECOND`], and on stdio its bytes
//!   at [`MAX_BYTES_PER_SECOND`]: past that the next message is read later, so the
//!   server's own writes block. Answers to our own requests are never paced: their
//!   rate is ours.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, RequestId, ServerNotification};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::watch;

/// Why a transport ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TransportEnd {
    /// The server side ended (EOF, broken pipe, HTTP stream closed).
    Closed,
    /// The server sent more than `limit` of `what` that wait for an answer from us while
    /// not taking our answers: the connection was ended to keep the host bounded.
    Flooded {
        /// What piled up (requests from the server, or our answers it did not read).
        what: &'static str,
        /// How many may wait at once before the connection ends.
        limit: usize,
    },
    /// The server broke the protocol in a way that would make the host hold more than
    /// it should (an id reused while in flight, an id too long to echo).
    Refused {
        /// What it did, in words.
        reason: &'static str,
    },
    /// A message to the server could not be delivered (HTTP: the server refused a POST,
    /// for example a session it no longer knows answered with 400): the connection is
    /// failed at once instead of leaving the request to its timeout.
    Undeliverable {
        /// The HTTP status of the refusal when there was one (`HTTP 400`), never the
        /// server's words: its body may echo what a call sent, and the connection's
        /// end is reported where the call's secrets are not known.
        status: Option<String>,
    },
}

impl TransportEnd {
    /// Whether the runtime ended the transport itself (a flood, a refusal), which says
    /// more than anything that follows (the exit of a server whose pipes closed).
    pub fn on_purpose(&self) -> bool {
        // An undeliverable message is the server's refusal, not the runtime's: during a
        // start, rmcp's own error (a TLS failure, a 401) says more.
        matches!(
            self,
            TransportEnd::Flooded { .. } | TransportEnd::Refused { .. }
        )
    }
}

impl std::fmt::Display for TransportEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TransportEnd::Closed => f.write_str("the server closed its side of the connection"),
            TransportEnd::Flooded { what, limit } => write!(
                f,
                "the server sent more than {limit} {what} without taking the answers; the connection was closed to keep the host bounded"
            ),
            TransportEnd::Refused { reason } => {
                write!(f, "the server {reason}; the connection was closed")
            }
            TransportEnd::Undeliverable { status } => match status {
                Some(status) => write!(
                    f,
                    "the server refused a message ({status}); the connection was closed"
                ),
                None => f.write_str(
                    "a message to the server could not be delivered; the connection was closed",
                ),
            },
        }
    }
}

/// `HTTP <3 digits>` where an error's text names one, and nothing else of it.
fn http_status(error: &str) -> Option<String> {
    let at = error.find("HTTP ")?;
    let digits: String = error[at + 5..].chars().take(3).collect();
    (digits.len() == 3 && digits.chars().all(|c| c.is_ascii_digit()))
        .then(|| format!("HTTP {digits}"))
}

/// Most requests from a server waiting for our answer at once, answers still being
/// written included; a well-behaved server has one or two.
pub const MAX_PENDING_SERVER_REQUESTS: usize = 16;

/// Longest request id echoed back: an answer repeats the id, so a server could make
/// each pending answer megabytes long.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// Most messages a server may send unasked per second, sustained (bursts of as many
/// pass at once).
pub const MAX_MESSAGES_PER_SECOND: f64 = 1000.0;

/// Bytes a stdio server may send unasked per second, sustained (a burst of as much
/// passes at once): parsing is the cost a server controls.
pub const MAX_BYTES_PER_SECOND: f64 = 32.0 * 1024.0 * 1024.0;

/// Whether a request id is short enough to echo (see [`MAX_REQUEST_ID_BYTES`]).
pub(crate) fn id_fits(id: &RequestId) -> bool {
    match id {
        rmcp::model::NumberOrString::String(s) => s.len() <= MAX_REQUEST_ID_BYTES,
        rmcp::model::NumberOrString::Number(_) => true,
    }
}

/// The first reason a transport gave for ending, shared between the layer that saw it
/// (the stdio framing, [`Guarded`]) and whoever reports it.
pub(crate) type EndCause = Arc<OnceLock<TransportEnd>>;

/// A token bucket: `rate` per second, at most `burst` saved up.
#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Self {
        Bucket {
            rate,
            burst: rate,
            tokens: rate,
            last: Instant::now(),
        }
    }

    /// How long from `now` until a token is there (zero when one is).
    fn delay(&mut self, now: Instant) -> Duration {
        let earned = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }
}

/// What a server's requests hold on our side.
#[derive(Debug, Default)]
struct Held {
    /// Requests received and not yet answered (nor withdrawn by the server).
    open: HashSet<RequestId>,
    /// Answers handed to the transport and not yet written.
    sending: usize,
}

/// The two buckets unasked traffic is paced by, under one lock.
#[derive(Debug)]
struct Pacing {
    messages: Bucket,
    bytes: Bucket,
}

/// The traffic of one connection, shared by [`Guarded`] and the stdio framing.
#[derive(Debug)]
pub(crate) struct Traffic {
    /// Our requests in flight: answers to them are not paced.
    awaiting: Mutex<HashSet<RequestId>>,
    held: Mutex<Held>,
    pacing: Mutex<Pacing>,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            awaiting: Mutex::default(),
            held: Mutex::default(),
            pacing: Mutex::new(Pacing {
                messages: Bucket::new(MAX_MESSAGES_PER_SECOND),
                bytes: Bucket::new(MAX_BYTES_PER_SECOND),
            }),
        }
    }
}

impl Traffic {
    /// Waits until unasked messages and bytes have tokens again. Cancel-safe: nothing
    /// is taken by waiting, so call it before reading the next message.
    pub(crate) async fn ready(&self) {
        let wait = self.pacing.lock().map_or(Duration::ZERO, |mut p| {
            let now = Instant::now();
            p.messages.delay(now).max(p.bytes.delay(now))
        });
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Whether `message` answers a request of ours still in flight.
    pub(crate) fn answers_us(&self, message: &RxJsonRpcMessage<RoleClient>) -> bool {
        let id = match message {
            JsonRpcMessage::Response(r) => Some(&r.id),
            JsonRpcMessage::Error(e) => e.id.as_ref(),
            _ => None,
        };
        id.is_some_and(|id| self.awaiting.lock().is_ok_and(|a| a.contains(id)))
    }

    /// Charges `bytes` of an unasked message (stdio).
    pub(crate) fn spend_bytes(&self, bytes: usize) {
        if let Ok(mut p) = self.pacing.lock() {
            p.bytes.tokens -= bytes as f64;
        }
    }

    fn spend_message(&self) {
        if let Ok(mut p) = self.pacing.lock() {
            p.messages.tokens -= 1.0;
        }
    }

    /// What a message from the server does to what we hold; `Some` when the transport
    /// must end.
    fn admit(&self, message: &RxJsonRpcMessage<RoleClient>) -> Option<TransportEnd> {
        match message {
            JsonRpcMessage::Response(r) => {
                if let Ok(mut a) = self.awaiting.lock() {
                    a.remove(&r.id);
                }
                None
            }
            JsonRpcMessage::Error(e) => {
                if let (Some(id), Ok(mut a)) = (&e.id, self.awaiting.lock()) {
                    a.remove(id);
                }
                None
            }
            JsonRpcMessage::Request(request) => {
                if !id_fits(&request.id) {
                    return Some(TransportEnd::Refused {
                        reason: "sent a request id longer than 128 bytes",
                    });
                }
                let mut held = self.held.lock().ok()?;
                if !held.open.insert(request.id.clone()) {
                    return Some(TransportEnd::Refused {
                        reason: "reused the id of a request still in flight",
                    });
                }
                (held.open.len() + held.sending > MAX_PENDING_SERVER_REQUESTS).then_some(
                    TransportEnd::Flooded {
                        what: "requests",
                        limit: MAX_PENDING_SERVER_REQUESTS,
                    },
                )
            }
            JsonRpcMessage::Notification(n) => {
                // A request the server withdrew gets no answer from rmcp (an answer
                // already handed over still counts until written).
                if let ServerNotification::CancelledNotification(c) = &n.notification
                    && let (Some(id), Ok(mut held)) = (&c.params.request_id, self.held.lock())
                {
                    held.open.remove(id);
                }
                None
            }
        }
    }
}

/// Wraps a transport to bound what the server's input can make the host hold and
/// spend (see the module documentation), and to report when the server side ends:
/// rmcp's service loop stops quietly on EOF, and a supervisor must know at once, not at
/// the next call.
pub(crate) struct Guarded<T> {
    inner: T,
    traffic: Arc<Traffic>,
    cause: EndCause,
    closed: watch::Sender<Option<TransportEnd>>,
    /// Whether a failed send ends the transport (HTTP, where nothing else would tell;
    /// a stdio server's broken pipe shows as its exit).
    end_on_send_error: bool,
    /// Whether `inner` waits for [`Traffic::ready`] itself (the stdio framing, before
    /// each line), so that waiting here again would only cost time.
    paced_inside: bool,
}

impl<T> Guarded<T> {
    pub(crate) fn new(
        inner: T,
        traffic: Arc<Traffic>,
        cause: EndCause,
    ) -> (Self, watch::Receiver<Option<TransportEnd>>) {
        let (closed, rx) = watch::channel(None);
        let guarded = Guarded {
            inner,
            traffic,
            cause,
            closed,
            end_on_send_error: false,
            paced_inside: false,
        };
        (guarded, rx)
    }

    /// For an inner transport that waits for [`Traffic::ready`] before each message.
    pub(crate) fn paced_inside(mut self) -> Self {
        self.paced_inside = true;
        self
    }

    /// Makes a failed send end the transport (see [`TransportEnd::Undeliverable`]).
    pub(crate) fn ending_on_send_error(mut self) -> Self {
        self.end_on_send_error = true;
        self
    }

    fn end(&self) {
        let cause = self.cause.get().cloned().unwrap_or(TransportEnd::Closed);
        let _ = self.closed.send(Some(cause));
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Guarded<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answer = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            JsonRpcMessage::Request(r) => {
                if let Ok(mut a) = self.traffic.awaiting.lock() {
                    a.insert(r.id.clone());
                }
                None
            }
            JsonRpcMessage::Notification(_) => None,
        };
        let traffic = Arc::clone(&self.traffic);
        if let Some(id) = &answer
            && let Ok(mut h) = traffic.held.lock()
        {
            h.open.remove(id);
            h.sending += 1;
        }
        let sent = self.inner.send(item);
        let ending = self
            .end_on_send_error
            .then(|| (Arc::clone(&self.cause), self.closed.clone()));
        async move {
            let result = sent.await;
            if answer.is_some()
                && let Ok(mut h) = traffic.held.lock()
            {
                h.sending = h.sending.saturating_sub(1);
            }
            if let (Err(e), Some((cause, closed))) = (&result, ending) {
                let _ = cause.set(TransportEnd::Undeliverable {
                    status: http_status(&e.to_string()),
                });
                let _ = closed.send(cause.get().cloned());
            }
            result
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        // Before taking a message: a receive cancelled while waiting loses none.
        if !self.paced_inside {
            self.traffic.ready().await;
        }
        let Some(message) = self.inner.receive().await else {
            self.end();
            return None;
        };
        if !self.traffic.answers_us(&message) {
            self.traffic.spend_message();
        }
        if let Some(end) = self.traffic.admit(&message) {
            let _ = self.cause.set(end);
            self.end();
            return None;
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
