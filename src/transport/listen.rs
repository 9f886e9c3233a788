//! A modern connection's `subscriptions/listen` (MCP 2026-07-28): where a 2025-era
//! server sends list changes and resource updates whenever it likes, a modern one sends
//! them only on a listen request the client holds open, filtered to what the client
//! asked for. A connection holds one: the list changes the server advertises from the
//! start, and the resources subscribed to so far; subscribing to another resource opens
//! a new listen with the wider filter and then drops the old one (no gap). What arrives
//! goes where its legacy form goes: list changes set the connection's bits, updates
//! become notices. Closing the connection cancels the subscription first: a server
//! holding an open listen may wait for it to end before it exits (rmcp's servers wait
//! up to 5 s at end of input for their requests in flight).

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{ServerNotification, SubscriptionFilter};
use rmcp::service::{Subscription, SubscriptionEnd};
use rmcp::{Peer, RoleClient};
use tokio::task::JoinHandle;

use super::failure::{CallFailure, classify};
use super::notices::Notice;
use super::signals::{PROMPTS, RESOURCES, ServerSignals, TOOLS, speaks_modern};

/// Most resources one connection may be subscribed to in the modern era (the client
/// holds the list and sends it whole with every new listen).
pub const MAX_RESOURCE_SUBSCRIPTIONS: usize = 256;

/// The longest the listen opened at connect waits for the server's acknowledgment (at
/// most a quarter of the connect timeout); a server silent that long sends this
/// connection no changes.
const LISTEN_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection's open `subscriptions/listen`, and what it asks for.
pub(crate) struct Listener {
    peer: Peer<RoleClient>,
    signals: Arc<ServerSignals>,
    held: tokio::sync::Mutex<Held>,
}

#[derive(Default)]
struct Held {
    uris: Vec<String>,
    /// Reads the open subscription; aborting it drops the subscription, which cancels
    /// the listen request on the server (a notice sent if the channel has room).
    pump: Option<JoinHandle<()>>,
    /// Tells the pump to cancel its subscription (the notice awaited) and end.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(pump) = self.pump.take() {
            pump.abort();
        }
    }
}

impl Listener {
    /// A listener for `peer`, when it speaks the 2026-07-28 era, with the list changes
    /// it advertises subscribed to. A server that refuses the listen, or does not
    /// acknowledge it within `wait` (at most [`LISTEN_TIMEOUT`]), sends no list
    /// changes, as a legacy server that never sends them; it is not a failed connect.
    pub(crate) async fn start(
        peer: Peer<RoleClient>,
        signals: Arc<ServerSignals>,
        wait: Duration,
    ) -> Option<Arc<Self>> {
        if !speaks_modern(&peer) {
            return None;
        }
        let listener = Listener {
            peer,
            signals,
            held: tokio::sync::Mutex::default(),
        };
        if listener.lists().is_some() {
            let mut held = listener.held.lock().await;
            let _ = listener.open(&mut held, wait.min(LISTEN_TIMEOUT)).await;
        }
        Some(Arc::new(listener))
    }

    /// The list changes the server advertises, as a filter; `None` when it advertises
    /// none.
    fn lists(&self) -> Option<SubscriptionFilter> {
        let info = self.peer.peer_info()?;
        let all = SubscriptionFilter::builder()
            .tools_list_changed()
            .prompts_list_changed()
            .resources_list_changed()
            .build();
        let lists = all.supported_by(&info.capabilities);
        (lists != SubscriptionFilter::default()).then_some(lists)
    }

    /// Subscribes to updates of `uri`: a new listen with it added, acknowledged by the
    /// server within `timeout`, replaces the open one.
    ///
    /// # Errors
    /// A server that refused or did not acknowledge the URI, too many subscriptions,
    /// or the request's failure.
    pub(crate) async fn subscribe(&self, uri: &str, timeout: Duration) -> Result<(), CallFailure> {
        let asked = std::time::Instant::now();
        let mut held = tokio::time::timeout(timeout, self.held.lock())
            .await
            .map_err(|_| CallFailure::Timeout(timeout))?;
        // The lock's wait and the listen share the timeout.
        let left = timeout.saturating_sub(asked.elapsed());
        if held.uris.iter().any(|held| held == uri) {
            return Ok(());
        }
        if held.uris.len() >= MAX_RESOURCE_SUBSCRIPTIONS {
            return Err(CallFailure::Protocol(format!(
                "this connection already follows {MAX_RESOURCE_SUBSCRIPTIONS} resources, the most it may"
            )));
        }
        held.uris.push(uri.to_string());
        let opened = self.open(&mut held, left).await;
        let acknowledged = opened.map(|filter| {
            filter
                .resource_subscriptions
                .is_some_and(|uris| uris.iter().any(|held| held == uri))
        });
        match acknowledged {
            Ok(true) => Ok(()),
            failed => {
                held.uris.retain(|held| held != uri);
                Err(match failed {
                    Err(CallFailure::Timeout(_)) => CallFailure::Timeout(timeout),
                    Err(failure) => failure,
                    Ok(_) => CallFailure::Protocol(
                        "the server did not accept a subscription to this resource".into(),
                    ),
                })
            }
        }
    }

    /// Opens a listen for the advertised lists and `held.uris`, and once the server
    /// acknowledged it, replaces the open one with it. Returns what was acknowledged.
    async fn open(
        &self,
        held: &mut Held,
        timeout: Duration,
    ) -> Result<SubscriptionFilter, CallFailure> {
        let mut filter = self.lists().unwrap_or_default();
        if !held.uris.is_empty() {
            filter.resource_subscriptions = Some(held.uris.clone());
        }
        let subscription = tokio::time::timeout(timeout, self.peer.listen(filter))
            .await
            .map_err(|_| CallFailure::Timeout(timeout))?
            .map_err(|e| classify(&e, timeout))?;
        let acknowledged = subscription.acknowledged().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let pump = tokio::spawn(pump(subscription, Arc::clone(&self.signals), stopped));
        held.stop = Some(stop);
        if let Some(old) = held.pump.replace(pump) {
            old.abort();
        }
        Ok(acknowledged)
    }

    /// Cancels the open listen and waits, at most `wait`, for the cancellation to be
    /// sent; the connection closes next. Without it a server may hold its end of input
    /// until the listen it still answers ends.
    pub(crate) async fn close(&self, wait: Duration) {
        let Ok(mut held) = tokio::time::timeout(wait, self.held.lock()).await else {
            return;
        };
        let Some(pump) = held.pump.take() else {
            return;
        };
        if let Some(stop) = held.stop.take() {
            let _ = stop.send(());
        }
        let abort = pump.abort_handle();
        if tokio::time::timeout(wait, pump).await.is_err() {
            abort.abort();
        }
    }
}

/// Delivers what arrives on `subscription` until it ends. A subscription the runtime
/// could not drain fast enough (a flood) ends lagged: every list is then taken as
/// changed, so the next turn lists them again.
async fn pump(
    mut subscription: Subscription,
    signals: Arc<ServerSignals>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        let notification = tokio::select! {
            next = subscription.next() => match next {
                Ok(Some(notification)) => notification,
                _ => break,
            },
            _ = &mut stop => {
                let _ = subscription.cancel().await;
                return;
            }
        };
        match notification {
            ServerNotification::ToolListChangedNotification(_) => signals.list_changed(TOOLS),
            ServerNotification::PromptListChangedNotification(_) => signals.list_changed(PROMPTS),
            ServerNotification::ResourceListChangedNotification(_) => {
                signals.list_changed(RESOURCES)
            }
            ServerNotification::ResourceUpdatedNotification(update) => {
                signals.notices.deliver(Notice::ResourceUpdated {
                    uri: update.params.uri,
                })
            }
            _ => {}
        }
    }
    if let Some(SubscriptionEnd::Lagged { .. }) = subscription.end() {
        signals.list_changed(TOOLS | RESOURCES | PROMPTS);
    }
}
