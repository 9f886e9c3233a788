//! A client's W3C trace context (`traceparent`, `tracestate` in its request's `_meta`)
//! as the parent of the call it asks for, when the command exports telemetry (feature
//! `otel-otlp`). A client speaks for its own traces only: a context that is not exactly
//! the W3C form (version 00, 32 and 16 lowercase hex digits, not all zero), or a
//! `tracestate` over 512 bytes, is ignored, never an error. Servers' contexts are never
//! read (`demiurge_mcp::telemetry`); this is the client's side of the gateway.

use std::future::Future;

/// Where a client's call hangs in its trace.
#[cfg(feature = "otel-otlp")]
pub(crate) type Parent = opentelemetry::Context;
/// Where a client's call hangs in its trace: nowhere without the feature.
#[cfg(not(feature = "otel-otlp"))]
pub(crate) struct Parent(());

/// The longest `tracestate` taken.
#[cfg(feature = "otel-otlp")]
const MAX_STATE: usize = 512;

/// The parent a request's `_meta` names, or the current context.
#[cfg(feature = "otel-otlp")]
pub(crate) fn parent_of(meta: &rmcp::model::RequestMetaObject) -> Parent {
    use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId};
    let text = |key: &str| meta.0.get(key).and_then(serde_json::Value::as_str);
    // 2 + 1 + 32 + 1 + 16 + 1 + 2: nothing longer is split.
    let Some(parent) = text("traceparent").filter(|p| p.len() == 55) else {
        return opentelemetry::Context::current();
    };
    let parts: Vec<&str> = parent.split('-').collect();
    let lower_hex = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let well_formed = parts.len() == 4
        && parts[0] == "00"
        && [(parts[1], 32), (parts[2], 16), (parts[3], 2)]
            .iter()
            .all(|(part, len)| part.len() == *len && lower_hex(part));
    let ids = well_formed
        .then(|| {
            let trace = TraceId::from_hex(parts[1]).ok()?;
            let span = SpanId::from_hex(parts[2]).ok()?;
            let flags = u8::from_str_radix(parts[3], 16).ok()?;
            Some((trace, span, TraceFlags::new(flags & 1)))
        })
        .flatten()
        .filter(|(trace, span, _)| *trace != TraceId::INVALID && *span != SpanId::INVALID);
    let Some((trace, span, flags)) = ids else {
        return opentelemetry::Context::current();
    };
    let state = text("tracestate")
        .filter(|s| s.len() <= MAX_STATE)
        .and_then(|s| s.parse().ok())
        .unwrap_or_default();
    let remote = SpanContext::new(trace, span, flags, true, state);
    opentelemetry::Context::current().with_remote_span_context(remote)
}

/// The parent a request's `_meta` names: nothing without the feature.
#[cfg(not(feature = "otel-otlp"))]
pub(crate) fn parent_of(_meta: &rmcp::model::RequestMetaObject) -> Parent {
    Parent(())
}

/// `call`, run under `parent`.
#[cfg(feature = "otel-otlp")]
pub(crate) fn within<F: Future>(parent: Parent, call: F) -> impl Future<Output = F::Output> {
    opentelemetry::context::FutureExt::with_context(call, parent)
}

/// `call`, as it is.
#[cfg(not(feature = "otel-otlp"))]
pub(crate) fn within<F: Future>(_parent: Parent, call: F) -> F {
    call
}
