//! Modern clients (MCP 2026-07-28) of `demiurge serve`: they have no connection and no
//! session id, so their requests are grouped by the identity they give (the client's
//! name and version in `_meta`): one runtime session per identity, kept while it is
//! used and evicted after [`IDLE`] without a request. A question (an approval, a
//! downstream server's request for input) is carried to the person as an
//! `input_required` round of the call that caused it: the call waits here, bound to a
//! random `requestState`, until the client sends the same call again with the answer.
//!
//! Adversary: the client. A `requestState` is 128 random bits, known only to the
//! identity it was given to, answered once, for the same tool, within
//! [`ANSWER_WITHIN`]; a wrong, stale or replayed one is refused and the call is not
//! run. Waiting calls and identities are bounded.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use rmcp::ErrorData;
use rmcp::model::{CallToolRequestParams, CallToolResponse, ElicitResult, InputRequiredResult};
use serde_json::{Value, json};

use super::ask::{ANSWER_WITHIN, Modern, random_hex};

/// How long a modern client's session outlives its last request.
pub(crate) const IDLE: Duration = Duration::from_secs(600);

/// The key of the one input request of each round.
const KEY: &str = "demiurge-approval";

/// Most calls of one identity waiting for an answer at once.
const MAX_WAITING_CALLS: usize = 16;

/// A call's course, to its result in MCP's shape.
pub(crate) type Call = BoxFuture<'static, Value>;

/// A call waiting for its person's answer.
struct Waiting {
    tool: String,
    call: Call,
    reply: tokio::sync::oneshot::Sender<Option<ElicitResult>>,
    since: Instant,
}

/// One modern identity's questions and waiting calls.
pub(crate) struct Rounds {
    pub modern: Arc<Modern>,
    waiting: Mutex<HashMap<String, Waiting>>,
}

impl Rounds {
    pub(crate) fn new() -> Self {
        Rounds {
            modern: Arc::new(Modern::new()),
            waiting: Mutex::default(),
        }
    }
}

/// How a call in rounds went this time.
pub(crate) enum Round {
    /// It ended with this result.
    Done(Value),
    /// It waits for an answer: this is the round the client is sent.
    Asked(CallToolResponse),
}

/// Counts a call able to carry a question while it lives.
struct Carrying(Arc<Modern>);

impl Carrying {
    fn new(modern: &Arc<Modern>) -> Self {
        modern.carriers.fetch_add(1, Ordering::SeqCst);
        Carrying(Arc::clone(modern))
    }
}

impl Drop for Carrying {
    fn drop(&mut self) {
        self.0.carriers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs a modern client's call, or goes on with the one its `requestState` names,
/// until it ends or asks a question (then the call waits, and the round is returned).
/// `start` makes the call when the request names no waiting one.
pub(crate) async fn drive(
    rounds: &Rounds,
    request: &CallToolRequestParams,
    start: impl FnOnce() -> Call,
    cancelled: impl std::future::Future<Output = ()>,
) -> Result<Round, ErrorData> {
    let mut cancelled = std::pin::pin!(cancelled);
    let carrying = Carrying::new(&rounds.modern);
    let tool = request.name.to_string();
    let mut call: Call = match request.request_state.as_deref() {
        None => start(),
        Some(state) => resume(rounds, &tool, state, request.input_responses.as_ref())?,
    };
    loop {
        let asked = tokio::select! {
            done = &mut call => return Ok(Round::Done(done)),
            asked = async { rounds.modern.waiting.lock().await.recv().await } => asked,
            () = &mut cancelled => {
                return Err(ErrorData::internal_error("cancelled by the client", None));
            }
        };
        let Some(asked) = asked else {
            continue;
        };
        let Ok(mut waiting) = rounds.waiting.lock() else {
            let _ = asked.reply.send(None);
            continue;
        };
        waiting.retain(|_, w| w.since.elapsed() < ANSWER_WITHIN);
        let input =
            serde_json::from_value(json!({"method": "elicitation/create", "params": asked.form}));
        let (true, Ok(input), Ok(state)) =
            (waiting.len() < MAX_WAITING_CALLS, input, random_hex(16))
        else {
            // Too many waiting, or a question that cannot be put: refused.
            let _ = asked.reply.send(None);
            continue;
        };
        let since = Instant::now();
        let (reply, tool) = (asked.reply, tool.clone());
        waiting.insert(
            state.clone(),
            Waiting {
                tool,
                call,
                reply,
                since,
            },
        );
        drop(carrying);
        let requests = [(KEY.to_string(), input)].into_iter().collect();
        let round = InputRequiredResult::new(Some(requests), Some(state));
        return Ok(Round::Asked(CallToolResponse::InputRequired(round)));
    }
}

/// The waiting call `state` names, given its answer.
fn resume(
    rounds: &Rounds,
    tool: &str,
    state: &str,
    answers: Option<&rmcp::model::InputResponses>,
) -> Result<Call, ErrorData> {
    let waiting = rounds.waiting.lock().ok().and_then(|mut w| w.remove(state));
    let Some(waiting) = waiting.filter(|w| w.since.elapsed() < ANSWER_WITHIN) else {
        return Err(ErrorData::invalid_params(
            "the requestState names no call waiting for an answer (answered already, or over 5 minutes old); call the tool again without it",
            None,
        ));
    };
    if waiting.tool != tool {
        // The answer was for another tool: that call is dropped (cancelled).
        return Err(ErrorData::invalid_params(
            "the requestState belongs to a call of another tool; that call is cancelled",
            None,
        ));
    }
    let answer = answers
        .and_then(|a| a.get(KEY))
        .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok());
    let _ = waiting.reply.send(answer);
    Ok(waiting.call)
}

/// Whether the request being answered speaks the 2026-07-28 era.
pub(crate) fn modern(context: &rmcp::service::RequestContext<rmcp::RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

/// A modern client's identity: its name and version (hashed); one without them is one
/// anonymous identity.
pub(crate) fn identity(meta: &rmcp::model::RequestMetaObject) -> String {
    use sha2::Digest;
    let info = meta.client_info();
    let said = info.map_or_else(String::new, |i| format!("{}\0{}", i.name, i.version));
    let digest = sha2::Sha256::digest(said.as_bytes());
    digest.iter().take(16).map(|b| format!("{b:02x}")).collect()
}

/// The tool a modern client is offered when a listing could not ask it about a
/// server's connect (only a call carries questions): calling it asks, in rounds.
pub(crate) const CONNECT_TOOL: &str = "connect_servers";

/// The `connect_servers` tool as a client lists it, naming the servers it asks about.
pub(crate) fn connect_tool(servers: &[String]) -> Value {
    json!({
        "name": CONNECT_TOOL,
        "description": format!(
            "Connects the MCP servers {} that need the user's approval first (the user is asked now); list the tools again afterwards to see theirs.",
            servers.join(", ")
        ),
        "inputSchema": {"type": "object", "properties": {}},
    })
}

/// Prepares a turn of `session` inside a call's rounds, so that the connect questions
/// a listing could not ask are asked now; then tells the client's open subscriptions
/// that the tool list changed.
pub(crate) fn connect_servers(session: demiurge_mcp::Session, modern: Arc<Modern>) -> Call {
    let asked: Vec<String> = modern
        .unasked
        .lock()
        .map(|mut u| std::mem::take(&mut *u).into_iter().collect())
        .unwrap_or_default();
    Box::pin(async move {
        let text = match session.prepare_turn().await {
            Ok(turn) => {
                let said: Vec<String> = asked
                    .iter()
                    .map(|server| {
                        let tools = turn.tools().iter().filter(|t| &t.server == server);
                        match tools.count() {
                            0 => format!("{server}: not connected (serve's log says why)"),
                            n => format!("{server}: connected, {n} tools"),
                        }
                    })
                    .collect();
                super::ask::tools_changed(&modern).await;
                format!("{}. List the tools again to see them.", said.join("; "))
            }
            Err(e) => {
                eprintln!(
                    "serve: no turn: {}",
                    demiurge_mcp::text::escape(&e.to_string())
                );
                "the runtime could not prepare a turn; serve's log says why".into()
            }
        };
        json!({"content": [{"type": "text", "text": text}], "isError": false})
    })
}
