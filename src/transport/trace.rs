//! What the transport keeps for traces, without tracing (it stands below
//! `crate::telemetry`): a request's W3C trace context, as it goes to its server in
//! `_meta` (both eras; the runtime's own context only, which `crate::telemetry` makes;
//! a server's is never read), and the times of a connect's stages, which the connect
//! pipeline (`actors/catalog/connect.rs`) reads once the connect is over and turns
//! into spans.

/// A request's W3C trace context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceHeader {
    /// `00-<trace id>-<span id>-<flags>`.
    pub traceparent: String,
    /// The host's vendor entries, when it has any.
    pub tracestate: Option<String>,
}

impl TraceHeader {
    /// The two entries in a request's `_meta` object.
    pub fn into_meta(self, meta: &mut serde_json::Map<String, serde_json::Value>) {
        meta.insert("traceparent".into(), self.traceparent.into());
        if let Some(state) = self.tracestate {
            meta.insert("tracestate".into(), state.into());
        }
    }
}

/// A stage of a connect the transport runs (the catalog names the rest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageKind {
    /// Starting the server's process.
    Spawn,
    /// The OAuth flow after a server asked for authorization.
    Authorize,
    /// `initialize` (2025-11-25) or `server/discover` (2026-07-28).
    Initialize,
    /// Every page of `tools/list`.
    List,
}

/// When one stage began and ended, and whether it succeeded (read by the telemetry of
/// feature `otel`).
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub struct Stage {
    /// Which stage.
    pub kind: StageKind,
    /// When it began.
    pub began: std::time::SystemTime,
    /// When it ended.
    pub ended: std::time::SystemTime,
    /// Whether it succeeded.
    pub ok: bool,
}

/// The most stages one connect records: two attempts of initialize and list around an
/// authorization, and the spawn, with room to spare.
const MOST_STAGES: usize = 8;

/// The stages of a connect, marked as they end and read once it is over: the transport
/// stands below telemetry, so it keeps times and the catalog turns them into spans. A
/// stage cut short by the connect timeout is not marked (its connect's span says so).
#[derive(Debug, Default)]
pub struct Stages(std::sync::Mutex<Vec<Stage>>);

impl Stages {
    /// Runs `step` as stage `kind`, marking it when it ends.
    pub(crate) async fn timed<T, E>(
        &self,
        kind: StageKind,
        step: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let began = std::time::SystemTime::now();
        let out = step.await;
        let stage = Stage {
            kind,
            began,
            ended: std::time::SystemTime::now(),
            ok: out.is_ok(),
        };
        let mut stages = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if stages.len() < MOST_STAGES {
            stages.push(stage);
        }
        out
    }

    /// The stages marked so far, in the order they ended; leaves none.
    pub fn take(&self) -> Vec<Stage> {
        let mut stages = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        std::mem::take(&mut *stages)
    }
}
