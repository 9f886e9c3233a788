//! A request's W3C trace context, as it goes to its server in `_meta` (both eras). The
//! runtime's own context only (`crate::telemetry` makes it); a server's is never read.

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
