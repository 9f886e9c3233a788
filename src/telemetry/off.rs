//! Without the `otel` feature: nothing is traced or measured, at no cost.

use std::sync::Arc;

use super::TraceHeader;
use crate::events::EventCounter;

/// Where traces and metrics go: nowhere (the `otel` feature is off).
#[derive(Debug, Clone, Default)]
pub struct Telemetry(());

impl Telemetry {
    /// Whether anything is traced or measured: never without the feature.
    pub fn is_on(&self) -> bool {
        false
    }

    /// The host's current trace context.
    pub(crate) fn trace(&self) -> Trace {
        Trace(())
    }

    /// A part of a gauge, at zero.
    pub(crate) fn gauge(&self, _which: super::Gauge) -> Level {
        Level(())
    }

    /// What counts events for the event hub: nothing.
    pub(crate) fn counter(&self) -> Option<Arc<dyn EventCounter>> {
        None
    }

    /// An approval answered, asked at `asked`.
    pub(crate) fn approval_answered(
        &self,
        _action: crate::authority::Action,
        _source: crate::authority::ApprovalSource,
        _asked: std::time::Instant,
    ) {
    }
}

/// A place in a trace: nothing.
#[derive(Debug, Clone, Default)]
pub struct Trace(());

impl Trace {
    /// A span started now under this place.
    pub(crate) fn span(&self, _name: &'static str) -> Span {
        Span(())
    }

    /// A span of `server` (and the exposed `name` of what it serves) started now.
    pub(crate) fn span_of(&self, _span: &'static str, _server: &str, _name: Option<&str>) -> Span {
        Span(())
    }

    /// A span started now when `when`, else none.
    pub(crate) fn span_when(&self, _when: bool, _name: &'static str) -> Span {
        Span(())
    }

    /// Spans of stages that already ran.
    pub(crate) fn stages(&self, _stages: &[crate::transport::Stage]) {}
}

/// A span: nothing.
#[derive(Debug, Default)]
pub struct Span(());

impl Span {
    /// Sets a text attribute.
    pub(crate) fn set_str(&self, _key: &'static str, _value: &str) {}
    /// Sets a number attribute.
    pub(crate) fn set_u64(&self, _key: &'static str, _value: u64) {}
    /// Sets a text's length in characters (counted only when traced).
    pub(crate) fn set_chars(&self, _key: &'static str, _text: &str) {}
    /// Marks the span failed with an error kind.
    pub(crate) fn fail(&self, _kind: &str) {}
    /// The place of this span, for its children.
    pub(crate) fn trace(&self) -> Trace {
        Trace(())
    }
    /// Ends it now (it ends when dropped, too).
    pub(crate) fn end(self) {}
    /// Ends it now, failed with `kind` when there is one.
    pub(crate) fn end_as(self, _kind: Option<&str>) {}
    /// Ends it now with its outcome.
    pub(crate) fn end_outcome(self, _kind: Option<&str>) {}
    /// Its W3C context for a server: none.
    pub(crate) fn header(&self) -> Option<TraceHeader> {
        None
    }
}

/// A part of a gauge: nothing.
#[derive(Debug, Default)]
pub(crate) struct Level(());

impl Level {
    /// Sets this part's value.
    pub(crate) fn set(&mut self, _value: usize) {}
}
