//! What the demo server does differently for a modern client (MCP 2026-07-28): where a
//! legacy client is sent a request of the server's own (`elicitation/create`,
//! `roots/list`), a modern one gets an `input_required` result and sends its call again
//! with the answers; where a legacy client is sent a notification of a change, a modern
//! one hears it on its open `subscriptions/listen` requests. Every
//! round carries a `requestState` with bytes a careless client would mangle (a quote, a
//! backslash, a newline, a non-ASCII character), checked when it comes back. The
//! `asking MODE` fault breaks the rounds' bounds on purpose.

use rmcp::model::{InputRequest, InputRequests, InputRequiredResult, SubscriptionFilter};
use rmcp::service::{SubscriptionContext, SubscriptionSink};

use super::*;

/// The state of every round, which must come back exactly as sent.
const STATE: &str = "demo-state \"quoted\" back\\slash\nnew line \u{00e9}\u{1F512}";

/// How the `asking MODE` fault breaks the rounds' bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asking {
    /// Answer every round with state only, without end.
    Forever,
    /// A `requestState` of a megabyte.
    HugeState,
    /// A hundred elicitations in one round.
    Many,
    /// A model sample (`sampling/createMessage`).
    Sampling,
    /// An input request whose key is a kilobyte long.
    LongKey,
}

impl Asking {
    /// Parses the fault's argument.
    ///
    /// # Errors
    /// An unknown or missing mode, with the modes.
    pub fn parse(arg: Option<&str>) -> Result<Self, String> {
        Ok(match arg {
            Some("forever") => Asking::Forever,
            Some("huge-state") => Asking::HugeState,
            Some("many") => Asking::Many,
            Some("sampling") => Asking::Sampling,
            Some("long-key") => Asking::LongKey,
            _ => {
                return Err(
                    "fault `asking` needs a mode: forever, huge-state, many, sampling, long-key"
                        .into(),
                );
            }
        })
    }
}

/// Whether the request being answered speaks the 2026-07-28 era.
pub(super) fn modern(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|version| !version.has_initialize())
}

fn input(value: Value) -> Option<InputRequest> {
    serde_json::from_value(value).ok()
}

fn asked(requests: Vec<(String, InputRequest)>, state: Option<String>) -> CallToolResponse {
    let requests: InputRequests = requests.into_iter().collect();
    CallToolResponse::InputRequired(InputRequiredResult::new(
        (!requests.is_empty()).then_some(requests),
        state,
    ))
}

fn text(text: String) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::success(vec![ContentBlock::text(text)]))
}

/// The `asking MODE` fault's answer to any call, and its round count on stderr.
pub(super) fn hostile(mode: Asking, request: &CallToolRequestParams) -> Option<CallToolResponse> {
    static ROUNDS: AtomicUsize = AtomicUsize::new(0);
    let round = ROUNDS.fetch_add(1, Ordering::Relaxed) + 1;
    eprintln!("demo server: input round {round}");
    let elicit = |n: usize| {
        input(json!({"method": "elicitation/create", "params": {
            "mode": "form", "message": format!("question {n}"),
            "requestedSchema": {"type": "object", "properties": {}}}}))
    };
    Some(match mode {
        Asking::Forever => asked(Vec::new(), Some(format!("round {round}"))),
        Asking::HugeState => asked(vec![("ask".into(), elicit(0)?)], Some("s".repeat(1 << 20))),
        Asking::Many => asked(
            (0..100)
                .map(|n| Some((format!("ask-{n}"), elicit(n)?)))
                .collect::<Option<_>>()?,
            None,
        ),
        Asking::Sampling => {
            let sample = input(json!({"method": "sampling/createMessage", "params": {
                "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
                "maxTokens": 10}}))?;
            asked(vec![("sample".into(), sample)], None)
        }
        Asking::LongKey if request.input_responses.is_none() => {
            asked(vec![("k".repeat(1024), elicit(0)?)], None)
        }
        Asking::LongKey => text("answered".into()),
    })
}

impl DemoServer {
    /// How a modern call is answered differently: as a task, in rounds, or (under the
    /// `asking` fault) in rounds that break a bound. `None`: as in the legacy era.
    pub(super) fn modern_answer(
        &self,
        request: &CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Option<CallToolResponse> {
        if let Some(task) = self.as_task(request, context) {
            return Some(task);
        }
        if !modern(context) {
            return None;
        }
        match self.options.fault {
            Some(super::Fault::Asking(mode)) => hostile(mode, request),
            _ => self.rounds(request),
        }
    }

    /// A modern call's rounds, where its legacy form would send a request of its own:
    /// `roots` asks for the roots, a tools-file tool with `elicit` asks that. `None`
    /// for every other call.
    pub(super) fn rounds(&self, request: &CallToolRequestParams) -> Option<CallToolResponse> {
        let question = if request.name == "roots" {
            input(json!({"method": "roots/list"}))?
        } else {
            let elicitation = self.file_elicitation(&request.name)?;
            input(json!({"method": "elicitation/create", "params": elicitation}))?
        };
        let Some(answers) = &request.input_responses else {
            return Some(asked(
                vec![("ask".into(), question)],
                Some(STATE.to_string()),
            ));
        };
        if request.request_state.as_deref() != Some(STATE) {
            return Some(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text("the requestState came back altered"),
            ])));
        }
        let answer = answers.get("ask").cloned().unwrap_or(Value::Null);
        Some(text(if request.name == "roots" {
            let roots = answer.get("roots").and_then(Value::as_array);
            let uris = roots.into_iter().flatten();
            let uris: Vec<&str> = uris.filter_map(|r| r.get("uri")?.as_str()).collect();
            uris.join("\n")
        } else {
            serde_json::to_string(&answer).unwrap_or_default()
        }))
    }
}

/// The open `subscriptions/listen` requests of this server's modern clients.
pub(super) type Listeners = Arc<std::sync::Mutex<Vec<SubscriptionSink>>>;

/// A change the demo server announces.
pub(super) enum Change {
    /// Its tool list changed.
    Tools,
    /// Its resource list changed.
    Resources,
    /// The resource at this URI changed.
    Updated(String),
}

impl DemoServer {
    /// Tells the client of `context` about `change`: a legacy client by notification,
    /// a modern one on every open subscription that asked for it.
    pub(super) async fn announce(&self, context: &RequestContext<RoleServer>, change: Change) {
        if !modern(context) {
            let _ = match change {
                Change::Tools => context.peer.notify_tool_list_changed().await,
                Change::Resources => context.peer.notify_resource_list_changed().await,
                Change::Updated(uri) => {
                    let note = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                    context.peer.notify_resource_updated(note).await
                }
            };
            return;
        }
        // rmcp acknowledges a listen before it hands the subscription to `hold`: a
        // client that subscribed and at once made a change could be ahead of it. Wait
        // a moment (a second at most) for a listener that asked for this change.
        let wanted = |sink: &SubscriptionSink| {
            let accepted = sink.accepted();
            match &change {
                Change::Tools => accepted.tools_list_changed == Some(true),
                Change::Resources => accepted.resources_list_changed == Some(true),
                Change::Updated(uri) => accepted
                    .resource_subscriptions
                    .as_ref()
                    .is_some_and(|uris| uris.contains(uri)),
            }
        };
        let mut sinks = Vec::new();
        for _ in 0..100 {
            sinks = self.listeners.lock().map(|l| l.clone()).unwrap_or_default();
            if sinks.iter().any(wanted) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for sink in sinks {
            // A subscription that did not ask for this change refuses it: that is its
            // filter working, not an error.
            let _ = match &change {
                Change::Tools => sink.notify_tool_list_changed().await,
                Change::Resources => sink.notify_resource_list_changed().await,
                Change::Updated(uri) => sink.notify_resource_updated(uri.clone()).await,
            };
        }
    }

    /// Every category asked for is accepted.
    pub(super) fn accepted(requested: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    /// Holds a subscription open until the client cancels it or goes away.
    pub(super) async fn hold(&self, subscription: SubscriptionContext) {
        let sink = subscription.sink().clone();
        let id = sink.id().clone();
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push(sink);
        }
        subscription.cancelled().await;
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.retain(|sink| *sink.id() != id);
        }
    }
}
