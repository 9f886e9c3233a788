//! With the `otel` feature: spans through the host's tracer, metrics through its meter.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use opentelemetry::global::{BoxedTracer, ObjectSafeTracerProvider};
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider};
use opentelemetry::trace::{Span as _, SpanBuilder, SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{Context, InstrumentationScope, KeyValue};

use super::{ERROR_KIND, Gauge, OUTCOME, SERVER, TraceHeader};
use crate::events::{Event, EventCounter, EventKind};
use crate::transport::{Stage, StageKind};

/// Where traces and metrics go: the host's OpenTelemetry providers, or nowhere
/// (`Telemetry::default()`).
#[derive(Clone, Default)]
pub struct Telemetry {
    inner: Option<Arc<Inner>>,
}

struct Inner {
    tracer: BoxedTracer,
    metrics: Metrics,
    /// The gauges' values, by [`Gauge`], read when the meter collects.
    levels: Arc<[AtomicI64; 3]>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("on", &self.inner.is_some())
            .finish()
    }
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("demiurge-mcp")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

impl Telemetry {
    /// Spans through `tracers` and metrics through `meters` (an SDK's providers, or
    /// the global ones: `opentelemetry::global::tracer_provider()`).
    pub fn new(
        tracers: &(impl ObjectSafeTracerProvider + ?Sized),
        meters: &(impl MeterProvider + ?Sized),
    ) -> Self {
        let levels = Arc::new([AtomicI64::new(0), AtomicI64::new(0), AtomicI64::new(0)]);
        let inner = Inner {
            tracer: BoxedTracer::new(tracers.boxed_tracer(scope())),
            metrics: Metrics::new(&meters.meter_with_scope(scope()), &levels),
            levels,
        };
        Telemetry {
            inner: Some(Arc::new(inner)),
        }
    }

    /// Whether anything is traced or measured.
    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    /// The host's current trace context (where a turn or call was asked for).
    pub(crate) fn trace(&self) -> Trace {
        Trace {
            cx: self.inner.as_ref().map(|_| Context::current()),
            inner: self.inner.clone(),
        }
    }

    /// A part of a gauge, at zero; it leaves the gauge when dropped.
    pub(crate) fn gauge(&self, which: Gauge) -> Level {
        Level {
            inner: self.inner.clone(),
            which: which as usize,
            value: 0,
        }
    }

    /// What counts events for the event hub, when there are metrics.
    pub(crate) fn counter(&self) -> Option<Arc<dyn EventCounter>> {
        let inner = Arc::clone(self.inner.as_ref()?);
        Some(Arc::new(Counted(inner)))
    }

    /// An approval answered, asked at `asked`: how long a person (or the deadline)
    /// took, when one was asked.
    pub(crate) fn approval_answered(
        &self,
        action: crate::authority::Action,
        source: crate::authority::ApprovalSource,
        asked: std::time::Instant,
    ) {
        use crate::authority::ApprovalSource;
        let someone = matches!(source, ApprovalSource::Approver | ApprovalSource::Deadline);
        if let (Some(inner), true) = (&self.inner, someone) {
            let millis = asked.elapsed().as_secs_f64() * 1000.0;
            let action = KeyValue::new("mcp.action", name_of(&action));
            inner.metrics.approval_ms.record(millis, &[action]);
        }
    }
}

/// The event hub's counter: every event (its event view) into the metrics.
struct Counted(Arc<Inner>);

impl EventCounter for Counted {
    fn count(&self, event: &Event) {
        self.0.metrics.observe(&event.kind);
    }

    fn dropped(&self) {
        self.0.metrics.dropped.add(1, &[]);
    }
}

/// A place in a trace: the context new spans are children of.
#[derive(Clone, Default)]
pub struct Trace {
    cx: Option<Context>,
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Trace")
    }
}

impl Trace {
    /// A span started now when `when`, else none.
    pub(crate) fn span_when(&self, when: bool, name: &'static str) -> Span {
        if when {
            self.span(name)
        } else {
            Span::default()
        }
    }

    /// A span started now under this place (a client span for what goes to a server).
    pub(crate) fn span(&self, name: &'static str) -> Span {
        self.started(name)
    }

    /// A span of `server` (and the exposed `name` of what it serves) started now. The
    /// names are set once the span exists, and only when it records: a tracer that
    /// records nothing (the global one with no exporter) costs no copies of them.
    pub(crate) fn span_of(&self, span: &'static str, server: &str, name: Option<&str>) -> Span {
        let span = self.started(span);
        if span.recording() {
            span.set_str(SERVER, server);
            if let Some(name) = name {
                span.set_str(super::TOOL, name);
            }
        }
        span
    }

    /// Spans of stages that already ran (a connect's, marked by the transport), with
    /// the times they began and ended.
    pub(crate) fn stages(&self, stages: &[Stage]) {
        let (Some(cx), Some(inner)) = (&self.cx, &self.inner) else {
            return;
        };
        for stage in stages {
            let kind = match stage.kind {
                StageKind::Spawn => SpanKind::Internal,
                _ => SpanKind::Client,
            };
            let builder = SpanBuilder::from_name(super::stage_name(stage.kind))
                .with_kind(kind)
                .with_start_time(stage.began);
            let mut span = inner.tracer.build_with_context(builder, cx);
            if !stage.ok {
                span.set_status(Status::error("failed"));
            }
            span.end_with_timestamp(stage.ended);
        }
    }

    fn started(&self, name: &'static str) -> Span {
        let (Some(cx), Some(inner)) = (&self.cx, &self.inner) else {
            return Span::default();
        };
        let kind = if matches!(name, "mcp.call.server" | "mcp.connect.start") {
            SpanKind::Client
        } else {
            SpanKind::Internal
        };
        let builder = SpanBuilder::from_name(name).with_kind(kind);
        let span = inner.tracer.build_with_context(builder, cx);
        Span {
            cx: Some(cx.with_span(span)),
            inner: Some(Arc::clone(inner)),
        }
    }
}

/// A span, ended when dropped.
#[derive(Default)]
pub struct Span {
    cx: Option<Context>,
    inner: Option<Arc<Inner>>,
}

impl std::fmt::Debug for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Span")
    }
}

impl Span {
    /// Whether its tracer records it (attributes are made only then).
    fn recording(&self) -> bool {
        self.cx.as_ref().is_some_and(|cx| cx.span().is_recording())
    }

    /// Sets a text attribute.
    pub(crate) fn set_str(&self, key: &'static str, value: &str) {
        if let (Some(cx), true) = (&self.cx, self.recording()) {
            cx.span()
                .set_attribute(KeyValue::new(key, value.to_string()));
        }
    }

    /// Sets a number attribute.
    pub(crate) fn set_u64(&self, key: &'static str, value: u64) {
        if let (Some(cx), true) = (&self.cx, self.recording()) {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            cx.span().set_attribute(KeyValue::new(key, value));
        }
    }

    /// Sets a text's length in characters (counted only when recorded).
    pub(crate) fn set_chars(&self, key: &'static str, text: &str) {
        if self.recording() {
            self.set_u64(key, text.chars().count() as u64);
        }
    }

    /// Marks the span failed with an error kind (its status says only the kind).
    pub(crate) fn fail(&self, kind: &str) {
        if let (Some(cx), true) = (&self.cx, self.recording()) {
            cx.span()
                .set_attribute(KeyValue::new(ERROR_KIND, kind.to_string()));
            cx.span().set_status(Status::error(kind.to_string()));
        }
    }

    /// The place of this span, for its children.
    pub(crate) fn trace(&self) -> Trace {
        Trace {
            cx: self.cx.clone(),
            inner: self.inner.clone(),
        }
    }

    /// Ends it now (it ends when dropped, too).
    pub(crate) fn end(self) {
        drop(self);
    }

    /// Ends it now, failed with `kind` when there is one.
    pub(crate) fn end_as(self, kind: Option<&str>) {
        if let Some(kind) = kind {
            self.fail(kind);
        }
    }

    /// Ends it now with its outcome: `ok`, or `error` and failed with `kind`.
    pub(crate) fn end_outcome(self, kind: Option<&str>) {
        self.set_str(OUTCOME, if kind.is_some() { "error" } else { "ok" });
        self.end_as(kind);
    }

    /// Its W3C context, for the server the request goes to.
    pub(crate) fn header(&self) -> Option<TraceHeader> {
        let cx = self.cx.as_ref()?;
        let span = cx.span();
        let context = span.span_context();
        if !context.is_valid() {
            return None;
        }
        let state = context.trace_state().header();
        let id = context.trace_id().to_bytes();
        let span_id = context.span_id().to_bytes();
        let flags = [context.trace_flags().to_u8()];
        Some(TraceHeader {
            traceparent: traceparent(&id, &span_id, flags),
            tracestate: (!state.is_empty()).then_some(state),
        })
    }
}

/// `00-<trace id>-<span id>-<flags>` in lowercase hex, written byte by byte: this runs
/// for every request, and `format!` of the ids cost about as much as building a span.
fn traceparent(trace: &[u8; 16], span: &[u8; 8], flags: [u8; 1]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(55);
    out.push_str("00");
    for part in [&trace[..], &span[..], &flags[..]] {
        out.push('-');
        for byte in part {
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        }
    }
    out
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some(cx) = &self.cx {
            cx.span().end();
        }
    }
}

/// A part of a gauge (one connection, one limiter's queue).
pub(crate) struct Level {
    inner: Option<Arc<Inner>>,
    which: usize,
    value: i64,
}

impl Level {
    /// Sets this part's value.
    pub(crate) fn set(&mut self, value: usize) {
        if let Some(inner) = &self.inner {
            let value = i64::try_from(value).unwrap_or(i64::MAX);
            inner.levels[self.which].fetch_add(value - self.value, Ordering::Relaxed);
            self.value = value;
        }
    }
}

impl Drop for Level {
    fn drop(&mut self) {
        self.set(0);
    }
}

impl std::fmt::Debug for Level {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Level").field("value", &self.value).finish()
    }
}

/// The instruments, all counted from the event view.
struct Metrics {
    connects: Counter<u64>,
    calls: Counter<u64>,
    call_ms: Histogram<f64>,
    reads: Counter<u64>,
    approvals: Counter<u64>,
    approval_ms: Histogram<f64>,
    denials: Counter<u64>,
    url_decisions: Counter<u64>,
    sandbox_denials: Counter<u64>,
    quarantined: Counter<u64>,
    dropped: Counter<u64>,
    /// Kept so that their callbacks stay registered.
    _gauges: Vec<opentelemetry::metrics::ObservableGauge<i64>>,
}

impl Metrics {
    fn new(meter: &Meter, levels: &Arc<[AtomicI64; 3]>) -> Self {
        let gauge = |name: &'static str, about: &'static str, which: Gauge| {
            let levels = Arc::clone(levels);
            meter
                .i64_observable_gauge(name)
                .with_description(about)
                .with_callback(move |seen| {
                    seen.observe(levels[which as usize].load(Ordering::Relaxed), &[]);
                })
                .build()
        };
        let counter = |name: &'static str, about: &'static str| {
            meter.u64_counter(name).with_description(about).build()
        };
        let millis = |name: &'static str, about: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("ms")
                .with_description(about)
                .build()
        };
        Metrics {
            connects: counter("mcp.connects", "Server connects, by outcome"),
            calls: counter("mcp.calls", "Tool calls, by server and outcome"),
            call_ms: millis("mcp.call.duration", "Tool call wall time"),
            reads: counter("mcp.reads", "Resource reads, by server and outcome"),
            approvals: counter("mcp.approvals", "Approvals, by action and answer"),
            approval_ms: millis("mcp.approval.wait", "Time an approval question waited"),
            denials: counter("mcp.denials", "Connects and calls refused by authority"),
            url_decisions: counter("mcp.url_decisions", "URL policy verdicts"),
            sandbox_denials: counter("mcp.sandbox_denials", "What the sandbox refused"),
            quarantined: counter(
                "mcp.definitions_quarantined",
                "Definitions held back from the model (pins)",
            ),
            dropped: counter("mcp.events_dropped", "Events the host's sink never got"),
            _gauges: vec![
                gauge(
                    "mcp.connections",
                    "Live server connections",
                    Gauge::Connections,
                ),
                gauge(
                    "mcp.server_processes",
                    "Live stdio server processes",
                    Gauge::Processes,
                ),
                gauge(
                    "mcp.discovery.queued",
                    "Connects waiting for a discovery permit",
                    Gauge::Queued,
                ),
            ],
        }
    }

    fn observe(&self, kind: &EventKind) {
        let server = |s: &str| KeyValue::new(SERVER, s.to_string());
        let outcome = |o: &'static str| KeyValue::new(OUTCOME, o);
        match kind {
            EventKind::ServerConnected { server: s, .. } => {
                self.connects.add(1, &[server(s), outcome("connected")]);
            }
            EventKind::ServerFailed {
                server: s, kind, ..
            } => {
                let error = KeyValue::new(ERROR_KIND, kind.map_or("other", |k| k.name()));
                self.connects.add(1, &[server(s), outcome("failed"), error]);
            }
            EventKind::ServerSkipped { server: s, .. } => {
                self.connects.add(1, &[server(s), outcome("skipped")]);
            }
            EventKind::ServerDenied { server: s, .. } => {
                self.connects.add(1, &[server(s), outcome("denied")]);
                let what = KeyValue::new("mcp.action", "connect");
                self.denials.add(1, &[server(s), what]);
            }
            EventKind::ToolCalled {
                server: s,
                is_error,
                duration_ms,
                ..
            } => {
                let attributes = [server(s), outcome(if *is_error { "error" } else { "ok" })];
                self.calls.add(1, &attributes);
                #[allow(clippy::cast_precision_loss)]
                self.call_ms.record(*duration_ms as f64, &attributes);
            }
            EventKind::CallDenied { server: s, .. } => {
                self.calls.add(1, &[server(s), outcome("denied")]);
                let what = KeyValue::new("mcp.action", "call");
                self.denials.add(1, &[server(s), what]);
            }
            EventKind::ResourceRead {
                server: s,
                is_error,
                ..
            } => {
                let attributes = [server(s), outcome(if *is_error { "error" } else { "ok" })];
                self.reads.add(1, &attributes);
            }
            other => self.observe_decisions(other),
        }
    }

    fn observe_decisions(&self, kind: &EventKind) {
        let server = |s: &str| KeyValue::new(SERVER, s.to_string());
        match kind {
            EventKind::ApprovalDecided {
                action,
                decision,
                source,
                ..
            } => self.approvals.add(
                1,
                &[
                    KeyValue::new("mcp.action", name_of(action)),
                    KeyValue::new("mcp.answer", name_of(decision)),
                    KeyValue::new("mcp.source", name_of(source)),
                ],
            ),
            EventKind::UrlDecision {
                phase,
                server: s,
                decision,
            } => self.url_decisions.add(
                1,
                &[
                    server(s),
                    KeyValue::new("mcp.phase", name_of(phase)),
                    KeyValue::new("mcp.allowed", decision.allowed),
                    KeyValue::new("mcp.reason", decision.reason),
                ],
            ),
            EventKind::SandboxDenied {
                server: s, kind, ..
            } => {
                let kind = KeyValue::new("mcp.kind", name_of(kind));
                self.sandbox_denials.add(1, &[server(s), kind]);
            }
            EventKind::DefinitionChanged {
                server: s,
                kind,
                action,
                ..
            } if action == "quarantined" => {
                let kind = KeyValue::new("mcp.kind", name_of(kind));
                self.quarantined.add(1, &[server(s), kind]);
            }
            _ => {}
        }
    }
}

/// The name a value has in the event log (its serde form), for a metric's attribute.
fn name_of(value: &impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "other".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparent_is_the_w3c_form_of_the_ids() {
        let trace = [
            0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
            0x47, 0x36,
        ];
        let span = [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7];
        let header = traceparent(&trace, &span, [1]);
        assert_eq!(
            header,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        let expected = format!(
            "00-{}-{}-{:02x}",
            opentelemetry::trace::TraceId::from_bytes(trace),
            opentelemetry::trace::SpanId::from_bytes(span),
            0
        );
        assert_eq!(traceparent(&trace, &span, [0]), expected);
    }
}
