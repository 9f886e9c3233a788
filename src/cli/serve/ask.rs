//! Questions of `demiurge serve` go to the person behind the MCP client that caused
//! them: approvals (connect, call) and a downstream server's own requests for input.
//! A legacy client (2025-11-25, a connection) is sent `elicitation/create` in form mode
//! when it supports it; a modern client (2026-07-28, no connection) gets the question
//! as an `input_required` round of the call that caused it (`rounds.rs`). Otherwise the
//! terminal asks when `serve` has one that is not its protocol stream; otherwise the
//! question is refused (fail closed), and the refused call's error says how to approve.
//!
//! Adversary: the client (it answers for its own session only: a question is routed by
//! the session that asked it, never to another client), and whatever it sends back (an
//! answer outside the offered choices is a refusal; a downstream server's answer is
//! checked against that server's schema by the runtime).

// A server's log messages (deprecated in 2026-07-28, part of 2025-11-25) reach a
// legacy client.
#![allow(deprecated)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use demiurge_mcp::actors::Action;
use demiurge_mcp::authority::{ElicitationAnswer, ElicitationRequest, Elicitor};
use demiurge_mcp::events::{Event, EventKind, EventSink};
use demiurge_mcp::{ApprovalAnswer, ApprovalRequest, Approver};
use futures::future::BoxFuture;
use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitResult, ElicitationAction};
use rmcp::service::{Peer, SubscriptionSink};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// How long a client's person has to answer.
pub(crate) const ANSWER_WITHIN: Duration = Duration::from_secs(300);

/// The client of each session, by session id.
pub(crate) type Clients = Arc<Mutex<HashMap<String, Client>>>;

/// Where a session's questions and notices go.
#[derive(Clone)]
pub(crate) enum Client {
    /// A legacy client's connection, and the least log level it asked for.
    Connection {
        peer: Peer<RoleServer>,
        level: Arc<AtomicU8>,
    },
    /// A modern client (one identity's requests).
    Modern(Arc<Modern>),
}

/// A question put to a modern client in a round of one of its calls.
pub(crate) struct Asked {
    pub form: ElicitRequestParams,
    pub reply: oneshot::Sender<Option<ElicitResult>>,
}

/// What a modern client's session needs beyond the session: where its questions wait
/// for a call in rounds to carry them, and its open `subscriptions/listen` requests.
pub(crate) struct Modern {
    pub questions: mpsc::Sender<Asked>,
    pub waiting: tokio::sync::Mutex<mpsc::Receiver<Asked>>,
    /// Calls of this client now able to carry a question (in a round loop).
    pub carriers: AtomicUsize,
    /// Whether its last request said it answers form elicitations.
    pub elicits: std::sync::atomic::AtomicBool,
    /// Whether its last request said it answers URL elicitations.
    pub opens_urls: std::sync::atomic::AtomicBool,
    pub listeners: Mutex<Vec<SubscriptionSink>>,
    /// Servers whose connect question came while no call could carry it (a listing):
    /// refused then, asked when the client calls `connect_servers`.
    pub unasked: Mutex<std::collections::BTreeSet<String>>,
}

/// Most questions of one modern client waiting to be carried at once.
const MAX_WAITING: usize = 8;

impl Modern {
    pub(crate) fn new() -> Self {
        let (questions, waiting) = mpsc::channel(MAX_WAITING);
        Modern {
            questions,
            waiting: tokio::sync::Mutex::new(waiting),
            carriers: AtomicUsize::new(0),
            elicits: std::sync::atomic::AtomicBool::new(false),
            opens_urls: std::sync::atomic::AtomicBool::new(false),
            listeners: Mutex::default(),
            unasked: Mutex::default(),
        }
    }
}

impl Client {
    fn of(clients: &Clients, session: &str) -> Option<Client> {
        clients.lock().ok()?.get(session).cloned()
    }

    /// Whether a form question can reach the person behind it now.
    fn can_ask(&self) -> bool {
        self.can(rmcp::service::ElicitationMode::Form)
    }

    /// Whether a question of `mode` can reach the person behind it now.
    fn can(&self, mode: rmcp::service::ElicitationMode) -> bool {
        match self {
            Client::Connection { peer, .. } => peer.supported_elicitation_modes().contains(&mode),
            Client::Modern(modern) => {
                let said = match mode {
                    rmcp::service::ElicitationMode::Form => &modern.elicits,
                    rmcp::service::ElicitationMode::Url => &modern.opens_urls,
                    _ => return false,
                };
                said.load(Ordering::SeqCst) && modern.carriers.load(Ordering::SeqCst) > 0
            }
        }
    }

    /// Puts `form` to the person; `None` when nobody answered in time.
    async fn ask(self, form: ElicitRequestParams) -> Option<ElicitResult> {
        match self {
            Client::Connection { peer, .. } => peer
                .create_elicitation_with_timeout(form, Some(ANSWER_WITHIN))
                .await
                .ok(),
            Client::Modern(modern) => {
                let (reply, answer) = oneshot::channel();
                modern.questions.try_send(Asked { form, reply }).ok()?;
                tokio::time::timeout(ANSWER_WITHIN, answer)
                    .await
                    .ok()?
                    .ok()?
            }
        }
    }
}

/// The approver of `serve`.
pub(crate) struct ClientApprover {
    pub clients: Clients,
    /// The terminal's approver, when `serve` has a terminal of its own.
    pub terminal: Option<Arc<dyn Approver>>,
}

impl Approver for ClientApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalAnswer> {
        // A changed definition is approved by a person with `demiurge pins approve` (or
        // at `serve`'s terminal), never by a client that may be the model's own.
        let change = request.action == Action::Change;
        let client = Client::of(&self.clients, &request.session);
        if let Some(Client::Modern(modern)) = &client
            && request.action == Action::Connect
            && modern.elicits.load(Ordering::SeqCst)
            && !client.as_ref().is_some_and(Client::can_ask)
            && let Ok(mut unasked) = modern.unasked.lock()
        {
            unasked.insert(request.server.clone());
        }
        let client = client.filter(|c| c.can_ask());
        match (client, &self.terminal) {
            (Some(client), _) if !change => Box::pin(ask_approval(client, request)),
            (_, Some(terminal)) => terminal.decide(request),
            _ => Box::pin(async { ApprovalAnswer::Deny }),
        }
    }
}

/// The choices a client is offered: an "always" outlives the session and is a person's
/// to give at a terminal (`demiurge call`, `approvals`), not a client's.
const CHOICES: &[&str] = &["once", "session", "no"];

fn form(message: String, schema: Value) -> Option<ElicitRequestParams> {
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: serde_json::from_value(schema).ok()?,
    })
}

async fn ask_approval(client: Client, request: ApprovalRequest) -> ApprovalAnswer {
    // What cannot be shown whole cannot be approved (as at the terminal).
    if !request.arguments_fit() {
        return ApprovalAnswer::Deny;
    }
    let schema = json!({
        "type": "object",
        "properties": {
            "answer": {
                "type": "string",
                "title": "Allow?",
                "enum": CHOICES,
                "description": "once: this time; session: for the rest of this session (a call: with any arguments); no: refuse",
            }
        },
        "required": ["answer"],
    });
    let Some(form) = form(request.render(), schema) else {
        return ApprovalAnswer::Deny;
    };
    let Some(answer) = client.ask(form).await else {
        return ApprovalAnswer::Deny;
    };
    if answer.action != ElicitationAction::Accept {
        return ApprovalAnswer::Deny;
    }
    let chosen = answer
        .content
        .as_ref()
        .and_then(|c| c.get("answer"))
        .and_then(Value::as_str)
        .filter(|a| CHOICES.contains(a));
    match chosen {
        Some("once") => ApprovalAnswer::AllowOnce,
        Some("session") => ApprovalAnswer::AllowSession,
        _ => ApprovalAnswer::Deny,
    }
}

/// The elicitor of `serve`: a downstream server's request for input goes to the person
/// behind the client whose session it is in, as the same form (the server's message
/// and schema as a person may see them, redacted), saying which server asks.
pub(crate) struct ClientElicitor {
    pub clients: Clients,
    /// The terminal's elicitor, when `serve` has a terminal of its own.
    pub terminal: Option<Arc<dyn Elicitor>>,
}

impl Elicitor for ClientElicitor {
    fn elicit(&self, request: ElicitationRequest) -> BoxFuture<'static, ElicitationAnswer> {
        let client = Client::of(&self.clients, &request.session).filter(|c| c.can_ask());
        match (client, &self.terminal) {
            (Some(client), _) => Box::pin(relay_elicitation(client, request)),
            (None, Some(terminal)) => terminal.elicit(request),
            (None, None) => Box::pin(async { ElicitationAnswer::Decline }),
        }
    }
}

async fn relay_elicitation(client: Client, request: ElicitationRequest) -> ElicitationAnswer {
    let message = format!(
        "The MCP server {} asks: {}",
        request.server, request.message
    );
    let Some(form) = form(message, request.schema) else {
        return ElicitationAnswer::Decline;
    };
    match client.ask(form).await {
        Some(ElicitResult {
            action: ElicitationAction::Accept,
            content,
            ..
        }) => match content {
            Some(Value::Object(fields)) => ElicitationAnswer::Accept(fields),
            None => ElicitationAnswer::Accept(serde_json::Map::new()),
            Some(_) => ElicitationAnswer::Decline,
        },
        Some(ElicitResult {
            action: ElicitationAction::Cancel,
            ..
        }) => ElicitationAnswer::Cancel,
        _ => ElicitationAnswer::Decline,
    }
}

/// A downstream server's OAuth authorization, put to the person behind the client of
/// its session as a URL-mode elicitation (the authorization endpoint's URL, which
/// carries no secret): `None` when that client cannot open URLs; else whether the
/// person agreed to open it. The flow completes when their browser comes back to the
/// loopback redirect `serve` listens on.
pub(crate) fn authorization(
    clients: &Clients,
    prompt: &demiurge_mcp::authority::AuthorizationPrompt,
) -> Option<BoxFuture<'static, bool>> {
    let client = Client::of(clients, &prompt.session)
        .filter(|c| c.can(rmcp::service::ElicitationMode::Url))?;
    let message = format!(
        "The MCP server {} needs you to sign in with {} (issuer {}) so that it can be used: open the link to authorize it.",
        prompt.server, prompt.authorization_server, prompt.issuer
    );
    let form = ElicitRequestParams::UrlElicitationParams {
        meta: None,
        message,
        url: prompt.url.clone(),
        elicitation_id: random_hex(16).ok()?,
    };
    Some(Box::pin(async move {
        client
            .ask(form)
            .await
            .is_some_and(|answer| answer.action == ElicitationAction::Accept)
    }))
}

/// The events of `serve`: each goes to the CLI's sink; what a client hears of is also
/// told to the client whose session it is in: a server's changed tool, resource or
/// prompt list (the client lists again; the change is applied at its next turn), a
/// subscribed resource's update, and (to a legacy client, at or above the level it
/// set) a server's log message in the event view (redacted).
pub(crate) struct Relay {
    pub clients: Clients,
    pub inner: Arc<dyn EventSink>,
    /// Where notices are sent from (events are delivered on a thread of their own).
    pub runtime: tokio::runtime::Handle,
}

/// A notice a client is told.
#[derive(Clone)]
enum Notice {
    Tools,
    Resources,
    Prompts,
    Updated(String),
    Log(rmcp::model::LoggingMessageNotificationParam),
}

fn notice_of(kind: &EventKind) -> Option<Notice> {
    use demiurge_mcp::events::ListKind;
    Some(match kind {
        EventKind::ToolsChanged { .. } => Notice::Tools,
        EventKind::ListChanged { list, .. } => match list {
            ListKind::Resources => Notice::Resources,
            ListKind::Prompts => Notice::Prompts,
        },
        EventKind::ResourceUpdated { uri, .. } => Notice::Updated(uri.clone()),
        EventKind::ServerLog {
            server,
            level,
            logger,
            data,
            ..
        } => {
            // The logger names the server it came from.
            let logger = match logger {
                Some(logger) => format!("{server}/{logger}"),
                None => server.clone(),
            };
            let message = json!({"level": level, "logger": logger, "data": data});
            Notice::Log(serde_json::from_value(message).ok()?)
        }
        _ => return None,
    })
}

impl EventSink for Relay {
    fn emit(&self, event: &Event) {
        if let Some(notice) = notice_of(&event.kind)
            && let Some(client) = Client::of(&self.clients, &event.session)
        {
            self.runtime.spawn(tell(client, notice));
        }
        self.inner.emit(event);
    }
}

/// Tells a modern client's open subscriptions that its tool list changed.
pub(crate) async fn tools_changed(modern: &Arc<Modern>) {
    tell(Client::Modern(Arc::clone(modern)), Notice::Tools).await;
}

/// The numeric rank of a log level (`debug` 0 .. `emergency` 7).
pub(crate) fn rank(level: rmcp::model::LoggingLevel) -> u8 {
    use rmcp::model::LoggingLevel as L;
    match level {
        L::Debug => 0,
        L::Info => 1,
        L::Notice => 2,
        L::Warning => 3,
        L::Error => 4,
        L::Critical => 5,
        L::Alert => 6,
        L::Emergency => 7,
    }
}

async fn tell(client: Client, notice: Notice) {
    match client {
        Client::Connection { peer, level } => {
            let _ = match notice {
                Notice::Tools => peer.notify_tool_list_changed().await,
                Notice::Resources => peer.notify_resource_list_changed().await,
                Notice::Prompts => peer.notify_prompt_list_changed().await,
                Notice::Updated(uri) => {
                    let note = rmcp::model::ResourceUpdatedNotificationParam::new(uri);
                    peer.notify_resource_updated(note).await
                }
                Notice::Log(message) if rank(message.level) >= level.load(Ordering::SeqCst) =>
                {
                    #[allow(deprecated)]
                    peer.notify_logging_message(message).await
                }
                Notice::Log(_) => Ok(()),
            };
        }
        Client::Modern(modern) => {
            let sinks = modern
                .listeners
                .lock()
                .map(|l| l.clone())
                .unwrap_or_default();
            for sink in sinks {
                // A subscription that did not ask for this change refuses it: its
                // filter working, not an error.
                let _ = match &notice {
                    Notice::Tools => sink.notify_tool_list_changed().await,
                    Notice::Resources => sink.notify_resource_list_changed().await,
                    Notice::Prompts => sink.notify_prompt_list_changed().await,
                    Notice::Updated(uri) => sink.notify_resource_updated(uri.clone()).await,
                    // Logging is gone from the modern era.
                    Notice::Log(_) => Ok(()),
                };
            }
        }
    }
}

/// `n` random bytes in hex.
pub(crate) fn random_hex(n: usize) -> std::io::Result<String> {
    let mut raw = vec![0u8; n];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut raw)?;
    Ok(raw.iter().map(|b| format!("{b:02x}")).collect())
}
