//! Traces and metrics (feature `otel`): spans for a turn's preparation, each server's
//! connect and its stages, each call, read and prompt, relists and evictions; counters
//! and histograms of what the runtime decided. Everything they carry comes from the
//! event view (server ids, exposed names, outcomes, error kinds, durations, sizes), so
//! no secret can reach an exporter.
//!
//! The host passes its OpenTelemetry providers (`Telemetry::new`, feature `otel`)
//! in [`crate::RuntimeConfig::telemetry`]; a turn's or call's span is a child of the
//! host's current context where it was asked for. The context of a request's span goes
//! to its server as W3C `traceparent` and `tracestate` in `_meta` (both protocol eras);
//! a server's own trace context is never read. Without the feature every type here is
//! empty and every method does nothing, so the runtime's code reads the same either way.
//!
//! Names: spans `mcp.turn`, `mcp.connect` (stages `mcp.connect.approval`,
//! `mcp.connect.capability`, `mcp.connect.permit`, `mcp.connect.start` with its own
//! `mcp.connect.spawn`, `mcp.connect.authorize`, `mcp.connect.initialize` and
//! `mcp.connect.list`, `mcp.connect.pinning`), `mcp.relist`,
//! `mcp.call` (stages `mcp.call.approval`, `mcp.call.server`), `mcp.read`, `mcp.prompt`,
//! `mcp.evict`; attributes [`SERVER`], [`TOOL`], [`OUTCOME`], [`ERROR_KIND`] and the
//! few named where they are set.

#[cfg(not(feature = "otel"))]
mod off;
#[cfg(feature = "otel")]
mod otel;

pub use crate::transport::TraceHeader;

#[cfg(not(feature = "otel"))]
pub(crate) use off::Level;
#[cfg(not(feature = "otel"))]
pub use off::{Span, Telemetry, Trace};
#[cfg(feature = "otel")]
pub(crate) use otel::Level;
#[cfg(feature = "otel")]
pub use otel::{Span, Telemetry, Trace};

/// What a gauge counts (`mcp.connections`, `mcp.server_processes`,
/// `mcp.discovery.queued`); each part of the runtime adds its own [`Level`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum Gauge {
    /// Live server connections.
    Connections,
    /// Live stdio server processes (the servers themselves, not their children).
    Processes,
    /// Connects waiting for a discovery permit.
    Queued,
}

/// The span of a connect's stage the transport ran.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
fn stage_name(kind: crate::transport::StageKind) -> &'static str {
    use crate::transport::StageKind;
    match kind {
        StageKind::Spawn => "mcp.connect.spawn",
        StageKind::Authorize => "mcp.connect.authorize",
        StageKind::Initialize => "mcp.connect.initialize",
        StageKind::List => "mcp.connect.list",
    }
}

/// The server id.
pub const SERVER: &str = "mcp.server";
/// The exposed tool, resource or prompt name.
pub const TOOL: &str = "mcp.tool";
/// How it ended: a call `ok`, `error` or `denied`; a connect `connected`, `denied`,
/// `skipped` or `failed`.
pub const OUTCOME: &str = "mcp.outcome";
/// The typed kind of an error (`timeout`, `approval_denied`, `spawn`, ...).
pub const ERROR_KIND: &str = "error.type";
