//! The checks of a declaration's other sections: tool, resource and prompt filters, roots,
//! the call capability, timeouts, the sandbox section, and the fingerprint of what was
//! declared.

use std::collections::BTreeMap;
use std::path::Path;

use crate::core::Fingerprint;
use crate::core::declaration::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, Endpoint, ToolFilter, TransportKind, fingerprint,
};
use crate::sandbox::Sandbox;
use crate::text::plain_name;

use super::{Problems, RawToolFilter, Timeouts};

/// One of `tools:`, `resources:`, `prompts:`: no empty pattern.
pub(super) fn tool_filter(
    p: &mut Problems,
    section: &str,
    filter: Option<RawToolFilter>,
) -> ToolFilter {
    let filter = filter.unwrap_or_default();
    for (list, globs) in [("include", &filter.include), ("exclude", &filter.exclude)] {
        for (i, glob) in globs.iter().enumerate() {
            if glob.is_empty() {
                p.push(
                    &format!("{section}.{list}[{i}]"),
                    "empty pattern; remove it or write `*`",
                );
            }
        }
    }
    ToolFilter {
        include: filter.include,
        exclude: filter.exclude,
    }
}

/// `roots:`: paths relative to the workspace, never climbing out of it.
pub(super) fn check_roots(p: &mut Problems, roots: Option<&[String]>) {
    for (i, root) in roots.iter().copied().flatten().enumerate() {
        let path = Path::new(root);
        let climbs = path
            .components()
            .any(|c| c == std::path::Component::ParentDir);
        if root.trim().is_empty() || path.is_absolute() || climbs {
            p.push(
                &format!("roots[{i}]"),
                "a root is a path relative to the workspace; write `.` for the workspace itself",
            );
        }
    }
}

/// `capability:`, or `mcp.call:<server_id>`.
pub(super) fn call_capability(
    p: &mut Problems,
    capability: Option<String>,
    server_id: &str,
) -> String {
    match capability {
        Some(c) if c.trim().is_empty() || c.contains(char::is_whitespace) => {
            p.push(
                "capability",
                "capability names contain no spaces; omit the field to use `mcp.call:<server_id>`",
            );
            String::new()
        }
        Some(c) => c,
        None => format!("mcp.call:{server_id}"),
    }
}

impl Timeouts {
    pub(super) fn of(
        p: &mut Problems,
        connect: Option<f64>,
        call: Option<f64>,
        max: Option<f64>,
        per_tool: Option<BTreeMap<String, f64>>,
    ) -> Timeouts {
        let connect = p.seconds(connect, DEFAULT_CONNECT_TIMEOUT, "connect_timeout_seconds");
        let call = p.seconds(call, DEFAULT_CALL_TIMEOUT, "timeout_seconds");
        let per_tool = per_tool
            .unwrap_or_default()
            .into_iter()
            .map(|(tool, secs)| {
                let field = format!("tool_timeouts.{}", plain_name(&tool, "<tool>"));
                (tool, p.seconds(Some(secs), call, &field))
            })
            .collect();
        let max_call = max.map(|max| p.seconds(Some(max), call, "max_timeout_seconds"));
        if max_call.is_some_and(|max| max < call) {
            p.push(
                "max_timeout_seconds",
                "is less than `timeout_seconds`; progress can only extend a call",
            );
        }
        Timeouts {
            connect,
            call,
            per_tool,
            max_call,
        }
    }
}

/// `sandbox:`, for a stdio server only (the URL policy governs HTTP servers).
pub(super) fn sandbox_of(
    p: &mut Problems,
    sandbox: Option<&serde_yaml::Value>,
    transport: TransportKind,
) -> Option<Sandbox> {
    match (sandbox, transport) {
        (None, _) => None,
        (Some(_), TransportKind::StreamableHttp) => {
            p.push(
                "sandbox",
                "is only for `transport: stdio` (the URL policy governs HTTP servers); remove it",
            );
            None
        }
        (Some(value), TransportKind::Stdio) => match Sandbox::parse(value) {
            Ok(sandbox) => Some(sandbox),
            Err((field, message)) => {
                p.push(&field, message);
                None
            }
        },
    }
}

/// The declaration's fingerprint. `${NAME}` in arguments is interpolated since
/// 2026-12-02 (it was passed as text): such a declaration is a new server, so no
/// earlier approval covers what it now sends.
pub(super) fn declaration_fingerprint(
    endpoint: &Endpoint,
    server_id: &str,
    path: &str,
    canonical: &serde_json::Value,
) -> Fingerprint {
    let interpolates_args = matches!(endpoint, Endpoint::Stdio { args, .. }
        if args.iter().any(|a| a.contains("${")));
    if interpolates_args {
        let marked = serde_json::json!({"args_interpolated": true, "declaration": canonical});
        fingerprint(server_id, path, &marked)
    } else {
        fingerprint(server_id, path, canonical)
    }
}
