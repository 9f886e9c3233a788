//! Multi round-trip requests (MCP 2026-07-28, SEP-2322) under the runtime's authority.
//!
//! A modern server that needs something from the client to finish a `tools/call`,
//! `resources/read` or `prompts/get` answers `input_required`: requests for the client
//! (an elicitation, the roots, a model sample) and an opaque `requestState`; the client
//! answers them and sends the original request again with both. The server is the
//! adversary here: it decides how many rounds, how many requests, how large the state.
//! So every round is bounded ([`MAX_INPUT_ROUNDS`], [`MAX_INPUT_REQUESTS`],
//! [`MAX_INPUT_KEY_BYTES`], [`MAX_REQUEST_STATE_BYTES`]), the rounds share the request's
//! timeout (the time a person spends answering is not counted against it), the requests
//! go where their legacy forms go (elicitation to the host's elicitor through the
//! connection's route, roots from the declaration), a model sample is declined (this
//! runtime has no model), and `requestState` is echoed byte for byte, never read,
//! logged or quoted.

// Roots are deprecated by SEP-2577 in 2026-07-28 but still answered there.
#![allow(deprecated)]

use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, ClientRequest, GetPromptRequestParams, InputRequest,
    InputRequiredResult, InputResponses, LoggingLevel, ReadResourceRequestParams, Request,
    ServerResult,
};

use super::failure::CallFailure;
use super::signals::ServerSignals;

/// Most `input_required` answers one request may get before it fails: rmcp's own cap.
pub const MAX_INPUT_ROUNDS: usize = rmcp::model::DEFAULT_MRTR_MAX_ROUNDS;
/// Most input requests one round may carry.
pub const MAX_INPUT_REQUESTS: usize = 8;
/// Longest key a server may give an input request.
pub const MAX_INPUT_KEY_BYTES: usize = 256;
/// Largest `requestState` echoed back.
pub const MAX_REQUEST_STATE_BYTES: usize = 64 * 1024;

/// A request that can be sent again with the answers to its `input_required` result.
pub(crate) trait Retried: Clone {
    /// The request as sent, with the log level in its `_meta` when there is one.
    fn request(self, level: Option<LoggingLevel>) -> ClientRequest;
    /// Carries a round's answers and the server's state into the next send.
    fn carry(&mut self, answers: Option<InputResponses>, state: Option<String>);
}

macro_rules! retried {
    ($params:ty, $variant:ident) => {
        impl Retried for $params {
            fn request(mut self, level: Option<LoggingLevel>) -> ClientRequest {
                if let Some(level) = level {
                    self.meta
                        .get_or_insert_with(Default::default)
                        .set_log_level(level);
                }
                ClientRequest::$variant(Request::new(self))
            }
            fn carry(&mut self, answers: Option<InputResponses>, state: Option<String>) {
                self.input_responses = answers;
                self.request_state = state;
            }
        }
    };
}

retried!(CallToolRequestParams, CallToolRequest);
retried!(ReadResourceRequestParams, ReadResourceRequest);
retried!(GetPromptRequestParams, GetPromptRequest);

/// Sends `params` and answers its `input_required` results until the server gives
/// another answer, within `budget` of the server's time, and returns it with the time
/// left. `send` sends one round with the time it has left.
///
/// # Errors
/// The round's [`CallFailure`]; a timeout of the whole `budget`; a server that broke a
/// bound, asked too many rounds, or asked for a model sample.
pub(crate) async fn with_rounds<P, F, Fut>(
    signals: &ServerSignals,
    mut params: P,
    budget: Duration,
    mut send: F,
) -> Result<(ServerResult, Duration), CallFailure>
where
    P: Retried,
    F: FnMut(ClientRequest, Duration) -> Fut,
    Fut: std::future::Future<Output = Result<ServerResult, CallFailure>>,
{
    let mut spent = Duration::ZERO;
    let mut state_only = 0u32;
    for round in 0..=MAX_INPUT_ROUNDS {
        let left = budget
            .checked_sub(spent)
            .filter(|left| !left.is_zero())
            .ok_or(CallFailure::Timeout(budget))?;
        let sent = Instant::now();
        let answer = send(
            params.clone().request(signals.log_level.get().copied()),
            left,
        )
        .await;
        spent += sent.elapsed();
        let asked = match answer {
            Ok(ServerResult::InputRequiredResult(asked)) => asked,
            Err(CallFailure::Timeout(_)) => return Err(CallFailure::Timeout(budget)),
            other => return other.map(|answer| (answer, budget.saturating_sub(spent))),
        };
        if round == MAX_INPUT_ROUNDS {
            return Err(refused(format!(
                "the server asked for input more than {MAX_INPUT_ROUNDS} times for one request"
            )));
        }
        let requests_asked = asked.input_requests.as_ref().is_some_and(|r| !r.is_empty());
        let (answers, state) = answered(asked, signals).await?;
        if requests_asked {
            state_only = 0;
        } else {
            // Only state, nothing to answer: the server is polling through us. Pace it.
            let pause = Duration::from_millis((50u64 << state_only.min(3)).min(250));
            tokio::time::sleep(pause).await;
            spent += pause;
            state_only += 1;
        }
        params.carry(answers, state);
    }
    Err(CallFailure::Timeout(budget))
}

fn refused(why: String) -> CallFailure {
    CallFailure::Protocol(format!("{why}; the request was not sent again"))
}

/// The answers to one `input_required` result and the state to echo, after its bounds
/// are checked. Requests are answered one after another: a person answers one question
/// at a time.
pub(super) async fn answered(
    asked: InputRequiredResult,
    signals: &ServerSignals,
) -> Result<(Option<InputResponses>, Option<String>), CallFailure> {
    let InputRequiredResult {
        input_requests,
        request_state,
        ..
    } = asked;
    let requests = input_requests.unwrap_or_default();
    if requests.is_empty() && request_state.is_none() {
        return Err(refused(
            "the server asked for input but named no request and no state".into(),
        ));
    }
    if requests.len() > MAX_INPUT_REQUESTS {
        return Err(refused(format!(
            "the server asked for {} inputs in one round; at most {MAX_INPUT_REQUESTS} are answered",
            requests.len()
        )));
    }
    if requests.keys().any(|key| key.len() > MAX_INPUT_KEY_BYTES) {
        return Err(refused(format!(
            "the server named an input request with a key over {MAX_INPUT_KEY_BYTES} bytes"
        )));
    }
    if let Some(state) = &request_state
        && state.len() > MAX_REQUEST_STATE_BYTES
    {
        return Err(refused(format!(
            "the server's requestState is {} bytes; at most {MAX_REQUEST_STATE_BYTES} are echoed",
            state.len()
        )));
    }
    let mut answers = InputResponses::new();
    for (key, request) in requests {
        let answer = match request {
            InputRequest::Elicitation(request) => {
                serde_json::to_value(signals.elicited(request.params).await)
            }
            InputRequest::ListRoots(_) => serde_json::to_value(signals.roots_listed()),
            InputRequest::CreateMessage(_) => {
                return Err(refused(
                    "the server asked for a model sample (sampling/createMessage), which this host does not offer".into(),
                ));
            }
            _ => {
                return Err(refused(
                    "the server asked for an input of a kind this client does not answer".into(),
                ));
            }
        }
        .map_err(|e| CallFailure::Protocol(e.to_string()))?;
        answers.insert(key, answer);
    }
    Ok(((!answers.is_empty()).then_some(answers), request_state))
}
