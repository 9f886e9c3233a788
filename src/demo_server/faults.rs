//! The ways the demo server misbehaves on request (`--fault MODE [N]`), and the raw
//! servers that act out the faults rmcp would not let a server commit: hostile tool
//! lists, odd elicitations, floods, answers with their id last, a slow drip.

#![allow(deprecated)]

use super::*;

/// How the demo server misbehaves (`demiurge demo-server --fault MODE [N]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Exit with status 1 before speaking MCP.
    ExitAtStart,
    /// Never answer `initialize` or `server/discover`.
    HangInitialize,
    /// Never answer `tools/list`.
    HangList,
    /// Exit in the middle of any tool call.
    CrashOnCall,
    /// Never answer a tool call (and ignore cancellation).
    HangCall,
    /// Write non-JSON lines to stdout before serving.
    GarbageStdout,
    /// Serve N generated tools, 100 per page.
    HugeTools(usize),
    /// Answer every tool call with N bytes of text.
    HugeResult(usize),
    /// `huge-result` written as the TypeScript SDK writes: every message's `id` last.
    HugeResultIdLast(usize),
    /// Answer every tool call with about N bytes of `structuredContent`: records of 256
    /// bytes, each with a sensitive key (`api_token`) whose value its note repeats.
    HugeStructured(usize),
    /// Write N bytes to stderr before serving.
    StderrFlood(usize),
    /// Write every answer one byte at a time.
    SlowDrip,
    /// Start a grandchild (`sleep 300`) and leave it behind.
    ForkChild,
    /// Send `notifications/tools/list_changed` every millisecond once initialized.
    ListChangedStorm,
    /// List tools with control characters in names, 10,000-character descriptions and
    /// duplicate names (a raw JSON-RPC server, not rmcp).
    HostileTools,
    /// List a tool whose input schema is not an object (raw JSON-RPC).
    BadSchema,
    /// Answer tool calls with JSON nested 300 levels deep.
    NestedResult,
    /// After listing tools, stop reading stdin and write requests the client cannot read
    /// (an id and a method, but invalid params), as fast as the pipe takes them.
    FloodUnreadable,
    /// After listing tools, stop reading stdin and send valid `ping` requests without end.
    FloodPings,
    /// Write unreadable requests from the start, never answering `initialize`.
    FloodAtConnect,
    /// After listing tools, send log notifications without end while reading stdin: a
    /// flood that asks for nothing back.
    FloodNotifications,
    /// After listing tools, stop reading stdin and send `ping` requests that all reuse
    /// one id.
    FloodSameId,
    /// After listing tools, stop reading stdin and send each `ping` followed by its own
    /// `notifications/cancelled`.
    FloodCancelled,
    /// After listing tools, send `ping` requests whose ids are a megabyte long.
    FloodLongIds,
    /// Keep running after stdin closes (a server that ignores EOF).
    IgnoreEof,
    /// A raw JSON-RPC server whose tools ask the client for input with odd schemas:
    /// `ask_no_properties` (an object schema without `properties`), `ask_deep` (a
    /// property nested 300 levels deep) and `ask_plain`; each answers with the
    /// client's reply to its elicitation, as JSON text.
    OddElicitations,
    /// Refuse a legacy `initialize` with `-32022` and `2026-07-28` as the only
    /// supported version, as a modern-only server does, and stay up.
    ModernOnly,
    /// Refuse `server/discover` as a 2025-11-25 server does (method not found): it
    /// speaks only the legacy era.
    LegacyOnly,
    /// Answer every modern-era call with `input_required` rounds that break a bound.
    Asking(super::rounds::Asking),
}

impl Fault {
    /// Parses `MODE` and its optional size argument.
    ///
    /// # Errors
    /// An unknown mode or a missing/invalid size, with the list of modes.
    pub fn parse(mode: &str, arg: Option<&str>) -> Result<Fault, String> {
        let size = || {
            arg.and_then(|a| a.parse::<usize>().ok()).ok_or_else(|| {
                format!("fault `{mode}` needs a size, for example `--fault {mode} 1000`")
            })
        };
        Ok(match mode {
            "exit-at-start" => Fault::ExitAtStart,
            "hang-initialize" => Fault::HangInitialize,
            "hang-list" => Fault::HangList,
            "crash-on-call" => Fault::CrashOnCall,
            "hang-call" => Fault::HangCall,
            "garbage-stdout" => Fault::GarbageStdout,
            "huge-tools" => Fault::HugeTools(size()?),
            "huge-result" => Fault::HugeResult(size()?),
            "huge-result-id-last" => Fault::HugeResultIdLast(size()?),
            "huge-structured" => Fault::HugeStructured(size()?),
            "stderr-flood" => Fault::StderrFlood(size()?),
            "slow-drip" => Fault::SlowDrip,
            "fork-child" => Fault::ForkChild,
            "list-changed-storm" => Fault::ListChangedStorm,
            "hostile-tools" => Fault::HostileTools,
            "bad-schema" => Fault::BadSchema,
            "nested-result" => Fault::NestedResult,
            "flood-unreadable" => Fault::FloodUnreadable,
            "flood-pings" => Fault::FloodPings,
            "flood-at-connect" => Fault::FloodAtConnect,
            "flood-notifications" => Fault::FloodNotifications,
            "flood-same-id" => Fault::FloodSameId,
            "flood-cancelled" => Fault::FloodCancelled,
            "flood-long-ids" => Fault::FloodLongIds,
            "ignore-eof" => Fault::IgnoreEof,
            "odd-elicitations" => Fault::OddElicitations,
            "modern-only" => Fault::ModernOnly,
            "legacy-only" => Fault::LegacyOnly,
            "asking" => Fault::Asking(super::rounds::Asking::parse(arg)?),
            other => {
                return Err(format!(
                    "unknown fault `{other}`; modes: exit-at-start, hang-initialize, hang-list, crash-on-call, hang-call, garbage-stdout, huge-tools N, huge-result BYTES, huge-result-id-last BYTES, huge-structured BYTES, stderr-flood BYTES, slow-drip, fork-child, list-changed-storm, hostile-tools, bad-schema, nested-result, flood-unreadable, flood-pings, flood-notifications, flood-same-id, flood-cancelled, flood-long-ids, flood-at-connect, ignore-eof, odd-elicitations, modern-only, legacy-only, asking MODE"
                ));
            }
        })
    }
}

/// Copies JSON lines from `from` to stdout with each message's `"id"` moved last.
pub(super) async fn id_last(from: impl tokio::io::AsyncRead + Unpin) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let mut lines = BufReader::new(from).lines();
    let mut out = tokio::io::stdout();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut text = line.clone();
        if let Ok(Value::Object(mut message)) = serde_json::from_str::<Value>(&line)
            && let Some(id) = message.remove("id")
        {
            text = Value::Object(message).to_string();
            text.pop();
            if text.len() > 1 {
                text.push(',');
            }
            text.push_str(&format!("\"id\":{id}}}"));
        }
        text.push('\n');
        if out.write_all(text.as_bytes()).await.is_err() || out.flush().await.is_err() {
            return;
        }
    }
}

/// A writer that passes one byte per write: every answer arrives in fragments.
pub(super) struct Drip<W>(pub(super) W);

impl<W: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Drip<W> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let one = &buf[..buf.len().min(1)];
        match std::pin::Pin::new(&mut self.0).poll_write(cx, one) {
            std::task::Poll::Ready(Ok(n)) => {
                // Flush each byte so it leaves as its own write.
                let _ = std::pin::Pin::new(&mut self.0).poll_flush(cx);
                std::task::Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// A hand-written JSON-RPC server over stdio for answers rmcp's types cannot express.
pub(super) async fn serve_raw(fault: Option<Fault>) -> Result<(), Error> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let tools = match fault {
        Some(Fault::BadSchema) => {
            json!([{ "name": "bad", "description": "schema is a string", "inputSchema": "not an object" }])
        }
        Some(Fault::OddElicitations) => json!([
            { "name": "ask_no_properties", "description": "asks with no properties", "inputSchema": {"type": "object"} },
            { "name": "ask_deep", "description": "asks with a deep schema", "inputSchema": {"type": "object"} },
            { "name": "ask_plain", "description": "asks for a name", "inputSchema": {"type": "object"} },
        ]),
        _ => json!([
            { "name": "bell\u{7}and\nnewline", "description": "control characters in the name", "inputSchema": {"type": "object"} },
            { "name": "long", "description": "d".repeat(10_000), "inputSchema": {"type": "object"} },
            { "name": "twin", "description": "first", "inputSchema": {"type": "object"} },
            { "name": "twin", "description": "second", "inputSchema": {"type": "object"} },
            { "name": "\u{0}", "description": "a NUL name", "inputSchema": {"type": "object"} },
        ]),
    };
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut out = tokio::io::stdout();
    if fault == Some(Fault::FloodAtConnect) {
        return flood(&mut out, Flood::Unreadable).await;
    }
    while let Some(line) = lines.next_line().await? {
        let Ok(request) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        let Some(id) = request.get("id").cloned() else {
            continue;
        };
        let result = match request.get("method").and_then(|m| m.as_str()) {
            Some("initialize") => json!({
                "protocolVersion": request["params"]["protocolVersion"].clone(),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "0"}
            }),
            Some("tools/list") => json!({ "tools": tools }),
            Some("tools/call") if fault == Some(Fault::OddElicitations) => {
                let tool = request["params"]["name"].as_str().unwrap_or_default();
                let reply = odd_elicitation(tool, &mut lines, &mut out).await?;
                json!({ "content": [{"type": "text", "text": reply.to_string()}] })
            }
            Some("tools/call") => {
                json!({ "content": [{"type": "text", "text": "hostile answer"}] })
            }
            Some("ping") => json!({}),
            // What a 2025-era server answers `server/discover` and anything else it
            // does not know.
            _ => {
                method_not_found(&mut out, id).await?;
                continue;
            }
        };
        let listed = request.get("method").and_then(|m| m.as_str()) == Some("tools/list");
        let answer = json!({"jsonrpc": "2.0", "id": id, "result": result});
        out.write_all(format!("{answer}\n").as_bytes()).await?;
        out.flush().await?;
        match fault {
            // stdin is never read again from here on.
            Some(Fault::FloodUnreadable) if listed => {
                return flood(&mut out, Flood::Unreadable).await;
            }
            Some(Fault::FloodPings) if listed => return flood(&mut out, Flood::Pings).await,
            Some(Fault::FloodSameId) if listed => return flood(&mut out, Flood::SameId).await,
            Some(Fault::FloodCancelled) if listed => {
                return flood(&mut out, Flood::Cancelled).await;
            }
            Some(Fault::FloodLongIds) if listed => return flood(&mut out, Flood::LongIds).await,
            Some(Fault::FloodNotifications) if listed => {
                tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
                return flood(&mut out, Flood::Notifications).await;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Answers request `id` as a server that does not know its method.
async fn method_not_found(out: &mut tokio::io::Stdout, id: Value) -> Result<(), Error> {
    use tokio::io::AsyncWriteExt;
    let error = json!({"code": -32601, "message": "Method not found"});
    let answer = json!({"jsonrpc": "2.0", "id": id, "error": error});
    out.write_all(format!("{answer}\n").as_bytes()).await?;
    out.flush().await?;
    Ok(())
}

/// Asks the client for input with the schema `tool` names, and returns its reply (the
/// `result` or `error` of the answer to that request).
async fn odd_elicitation(
    tool: &str,
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::io::Stdin>>,
    out: &mut tokio::io::Stdout,
) -> Result<Value, Error> {
    use tokio::io::AsyncWriteExt;
    let schema = match tool {
        "ask_no_properties" => json!({"type": "object"}),
        "ask_deep" => {
            let mut deep = json!({"type": "string"});
            for _ in 0..300 {
                deep = json!({"type": "object", "properties": {"x": deep}});
            }
            json!({"type": "object", "properties": {"nested": deep}})
        }
        _ => {
            json!({"type": "object", "properties": {"name": {"type": "string", "default": "ann"}}})
        }
    };
    let asked = json!({"jsonrpc": "2.0", "id": "ask-1", "method": "elicitation/create",
        "params": {"mode": "form", "message": "a question", "requestedSchema": schema}});
    out.write_all(format!("{asked}\n").as_bytes()).await?;
    out.flush().await?;
    while let Some(line) = lines.next_line().await? {
        let Ok(reply) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if reply.get("id") == Some(&json!("ask-1")) {
            return Ok(reply
                .get("result")
                .or_else(|| reply.get("error"))
                .cloned()
                .unwrap_or_default());
        }
    }
    Ok(json!("the client closed"))
}

/// What a flooding server writes.
#[derive(Clone, Copy)]
enum Flood {
    /// Requests with an id and a method but invalid params.
    Unreadable,
    /// Valid `ping` requests.
    Pings,
    /// Valid log notifications.
    Notifications,
    /// `ping` requests that all carry the same id.
    SameId,
    /// Each `ping` followed by its cancellation.
    Cancelled,
    /// `ping` requests with megabyte ids.
    LongIds,
}

/// Writes messages without end, as fast as the pipe takes them.
async fn flood(out: &mut tokio::io::Stdout, kind: Flood) -> Result<(), Error> {
    use tokio::io::AsyncWriteExt;
    for n in 0u64.. {
        let line = match kind {
            Flood::Pings => {
                json!({"jsonrpc": "2.0", "id": format!("flood-{n}"), "method": "ping"})
            }
            Flood::Unreadable => {
                json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": 5})
            }
            Flood::Notifications => json!({
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": format!("log line {n}")}
            }),
            Flood::SameId => json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
            Flood::Cancelled => {
                let id = format!("c-{n}");
                let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
                out.write_all(format!("{ping}\n").as_bytes()).await?;
                json!({
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": id}
                })
            }
            Flood::LongIds => {
                json!({"jsonrpc": "2.0", "id": format!("{n}-{}", "x".repeat(1 << 20)), "method": "ping"})
            }
        };
        out.write_all(format!("{line}\n").as_bytes()).await?;
    }
    Ok(())
}
