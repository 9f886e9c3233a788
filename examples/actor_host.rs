//! A host that is itself a ractor application: its `Host` actor supervises the
//! runtime's root, drives sessions with the runtime's messages (`RuntimeMsg`), and
//! starts a new runtime when the root dies, resuming its sessions by id.
//!
//! `cargo run --example actor_host` builds a temporary Agent Core whose server is this
//! very example run as `actor_host demo-server` (the built-in demo MCP server). The run
//! kills the runtime's root halfway through to show the restart.

#[path = "support/demo_core.rs"]
mod demo_core;

use std::collections::BTreeMap;

use demiurge_mcp::redact::View;
use demiurge_mcp::{
    ApprovalAnswer, FixedApprover, Runtime, RuntimeConfig, RuntimeMsg, SessionSpec,
};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent, call};

/// What the host's own callers ask of it.
enum HostMsg {
    /// Run one turn of the agent `name`: its session (started once, then resumed),
    /// a fresh turn, one call. Answers what the model saw.
    Turn(String, RpcReplyPort<Result<String, String>>),
    /// How many times the runtime was started.
    Starts(RpcReplyPort<usize>),
    /// Crash the runtime's root (for the demonstration).
    KillRuntime,
}

struct Host;

struct HostState {
    config: Box<dyn Fn() -> RuntimeConfig + Send + Sync>,
    core: std::path::PathBuf,
    runtime: Runtime,
    /// The session of each agent, by name: resumed by id after a restart.
    sessions: BTreeMap<String, String>,
    starts: usize,
}

/// Why a turn did not happen.
enum Failure {
    /// The root did not take the message: it is gone (the host learns why from its
    /// supervision event, which may come after this message).
    RootGone,
    /// The runtime answered with an error.
    Refused(String),
}

fn gone<E>(_: E) -> Failure {
    Failure::RootGone
}

fn refused(e: impl std::fmt::Display) -> Failure {
    Failure::Refused(e.to_string())
}

impl HostState {
    /// A turn of agent `name`, driven by messages to the runtime's root.
    async fn turn(&mut self, name: &str) -> Result<String, Failure> {
        let root = self.runtime.actor().clone();
        let opened = match self.sessions.get(name) {
            Some(id) => call!(root, RuntimeMsg::ResumeSession, id.clone()),
            None => {
                let mut spec = SessionSpec::new(&self.core);
                spec.lane = name.to_string();
                call!(root, RuntimeMsg::StartSession, spec)
            }
        };
        let opened = match opened.map_err(gone)? {
            Ok(opened) => opened,
            // A new runtime has not seen the session: start it again under its id.
            Err(demiurge_mcp::RuntimeError::UnknownSession(id)) => {
                let mut spec = SessionSpec::new(&self.core);
                (spec.id, spec.lane) = (Some(id), name.to_string());
                call!(root, RuntimeMsg::StartSession, spec)
                    .map_err(gone)?
                    .map_err(refused)?
            }
            Err(e) => return Err(refused(e)),
        };
        let id = opened.session.id().to_string();
        self.sessions.insert(name.to_string(), id.clone());
        let turn = call!(root, RuntimeMsg::PrepareTurn, id)
            .map_err(gone)?
            .map_err(refused)?;
        let message = format!("hello from {name}");
        let result = turn
            .call("demo__echo", serde_json::json!({ "message": message }))
            .await
            .map_err(refused)?;
        Ok(result.view(View::Model).content.clone())
    }

    /// A new runtime on the same home, linked under the host; the old one's handle
    /// finishes whatever its root left.
    async fn restart(&mut self, host: &ActorRef<HostMsg>) -> Result<(), ActorProcessingErr> {
        println!("host: the runtime's root ended; starting a new one");
        self.runtime.shutdown().await;
        self.runtime = Runtime::start_linked((self.config)(), host.get_cell()).await?;
        self.starts += 1;
        Ok(())
    }
}

impl Actor for Host {
    type Msg = HostMsg;
    type State = HostState;
    type Arguments = (
        Box<dyn Fn() -> RuntimeConfig + Send + Sync>,
        std::path::PathBuf,
    );

    async fn pre_start(
        &self,
        myself: ActorRef<HostMsg>,
        (config, core): Self::Arguments,
    ) -> Result<HostState, ActorProcessingErr> {
        let runtime = Runtime::start_linked(config(), myself.get_cell()).await?;
        Ok(HostState {
            config,
            core,
            runtime,
            sessions: BTreeMap::new(),
            starts: 1,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<HostMsg>,
        message: HostMsg,
        state: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            HostMsg::Turn(name, reply) => {
                let mut answer = state.turn(&name).await;
                if matches!(answer, Err(Failure::RootGone)) {
                    state.restart(&myself).await?;
                    answer = state.turn(&name).await;
                }
                let _ = reply.send(answer.map_err(|failure| match failure {
                    Failure::RootGone => "the runtime is gone".to_string(),
                    Failure::Refused(why) => why,
                }));
            }
            HostMsg::Starts(reply) => {
                let _ = reply.send(state.starts);
            }
            HostMsg::KillRuntime => state.runtime.actor().kill(),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<HostMsg>,
        event: SupervisionEvent,
        state: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, reason) = match &event {
            SupervisionEvent::ActorTerminated(cell, _, reason) => (cell, reason.as_deref()),
            SupervisionEvent::ActorFailed(cell, _) => (cell, None),
            _ => return Ok(()),
        };
        // A runtime shut down on purpose is not restarted.
        if cell.get_id() == state.runtime.actor().get_id() && reason != Some("shutdown") {
            // The root took its sessions and their servers with it; a new runtime on the
            // same home serves the same session ids again. (A root that ended before a
            // message reached it was replaced then: this event is of the old one.)
            state.restart(&myself).await?;
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<HostMsg>,
        state: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        state.runtime.shutdown().await;
        Ok(())
    }
}

fn main() -> Result<std::process::ExitCode, Box<dyn std::error::Error + Send + Sync>> {
    // Its stdio server runs confined, and this binary is the launcher that confines
    // it (before any thread exists): see examples/embed.rs.
    if let Some(code) = demiurge_mcp::sandbox::launcher::run_if_invoked() {
        return Ok(code);
    }
    tokio::runtime::Runtime::new()?.block_on(host())?;
    Ok(std::process::ExitCode::SUCCESS)
}

async fn host() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if std::env::args().nth(1).as_deref() == Some("demo-server") {
        return demiurge_mcp::demo_server::serve_stdio(Default::default()).await;
    }
    let scratch = tempfile::tempdir()?;
    let core = demo_core::write(scratch.path())?;
    let home = scratch.path().join("home");
    let launcher = std::env::current_exe()?;
    let config = move || {
        let mut config =
            RuntimeConfig::new(&home).with_approver(FixedApprover(ApprovalAnswer::AllowSession));
        config.sandbox_launcher = Some(launcher.clone());
        config
    };
    let (host, handle) = Actor::spawn(None, Host, (Box::new(config) as Box<_>, core)).await?;

    for round in 1..=2 {
        for agent in ["planner", "coder"] {
            let seen = call!(host, HostMsg::Turn, agent.to_string())?;
            println!("round {round}, {agent}: the model saw {:?}", seen?);
        }
        if round == 1 {
            host.cast(HostMsg::KillRuntime)?;
        }
    }
    let starts = call!(host, HostMsg::Starts)?;
    println!("the runtime was started {starts} times; every turn was served");
    if starts != 2 {
        return Err("the host did not restart the runtime".into());
    }
    host.stop(None);
    handle.await?;
    Ok(())
}
