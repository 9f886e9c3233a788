//! A tool call's answer read straight into its type. rmcp reads every answer through
//! an untagged union of fifteen result types before `CallToolResult`, formatting an
//! error for each one that does not fit: an eighth of a warm call's instructions.
//!
//! The shortcut gives exactly what rmcp's reading gives or is not taken: only for an
//! answer (no `method`) whose result has a key a call result is read by (`content`,
//! `structuredContent`, `isError`), none of the keys an earlier type requires, and no
//! subscription id in its `_meta` (a listen result needs nothing else, so rmcp would
//! read it as one). A result a call result refuses goes to rmcp's own reading, where
//! the later types (input required, task acknowledgment, empty, custom) catch it.

use memchr::memmem;
use rmcp::RoleClient;
use rmcp::model::{
    CallToolResult, JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerResult,
};
use rmcp::service::RxJsonRpcMessage;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Map, Value};

/// Keys one of the result types rmcp tries before `CallToolResult` requires.
const EARLIER: [&str; 13] = [
    "supportedVersions",
    "protocolVersion",
    "completion",
    "messages",
    "prompts",
    "resources",
    "resourceTemplates",
    "contents",
    "tools",
    "skills",
    "skill",
    "action",
    "taskId",
];

/// What makes a result with `resultType` and `_meta` a listen result.
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// A message with a result, whatever else it has.
#[derive(Deserialize)]
struct Answer {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    result: Map<String, Value>,
    method: Option<IgnoredAny>,
}

/// `text` as a tool call's answer, or `None` for rmcp's own reading.
pub(super) fn call_answer(text: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    // Most messages are not call answers: a search of the bytes spares them a parse.
    let looks = [
        &b"\"content\""[..],
        b"\"structuredContent\"",
        b"\"isError\"",
    ]
    .iter()
    .any(|key| memmem::find(text, key).is_some());
    if !looks {
        return None;
    }
    let answer: Answer = serde_json::from_slice(text).ok()?;
    let result = answer.result;
    let reads_as_call = ["content", "structuredContent", "isError"]
        .iter()
        .any(|key| result.contains_key(*key));
    let earlier = EARLIER.iter().any(|key| result.contains_key(*key));
    let listen = result
        .get("_meta")
        .and_then(Value::as_object)
        .is_some_and(|meta| meta.contains_key(SUBSCRIPTION));
    if answer.method.is_some() || !reads_as_call || earlier || listen {
        return None;
    }
    let call = CallToolResult::deserialize(Value::Object(result)).ok()?;
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: answer.jsonrpc,
        id: answer.id,
        result: ServerResult::CallToolResult(call),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// rmcp's own reading of `line`, as JSON.
    fn rmcp(line: &str) -> Value {
        let message: RxJsonRpcMessage<RoleClient> = serde_json::from_str(line).unwrap();
        serde_json::to_value(message).unwrap()
    }

    #[test]
    fn call_answers_read_as_rmcp_reads_them() {
        let answers = [
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"pong"}]}}"#,
            r#"{"result":{"content":[{"type":"text","text":"x"}],"isError":true},"jsonrpc":"2.0","id":"a"}"#,
            r#"{"jsonrpc":"2.0","id":2,"result":{"structuredContent":{"method":"m","n":1}}}"#,
            r#"{"jsonrpc":"2.0","id":3,"result":{"isError":false}}"#,
            r#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"resultType":"complete"}}"#,
            r#"{"jsonrpc":"2.0","id":5,"result":{"content":[],"_meta":{"k":"v"},"extra":7}}"#,
        ];
        for line in answers {
            let fast = call_answer(line.as_bytes()).expect(line);
            assert!(
                matches!(&fast, JsonRpcMessage::Response(r) if matches!(r.result, ServerResult::CallToolResult(_))),
                "{line}"
            );
            assert_eq!(serde_json::to_value(fast).unwrap(), rmcp(line), "{line}");
        }
    }

    /// What rmcp reads as something else, or a call result refuses, is left to rmcp.
    #[test]
    fn anything_rmcp_may_read_otherwise_is_left_to_it() {
        let others = [
            // A listen result: `resultType` and a subscription id are all it needs.
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":"s"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"tools":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"isError":true,"contents":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"messages":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"action":"accept"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"taskId":"t"}}"#,
            // Refused by a call result: input required, a wrong content, no call key.
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"input_required","requestState":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":"not a list"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"content":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            // Not an answer, or not one rmcp takes.
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{"content":[]}}"#,
            r#"{"jsonrpc":"1.0","id":1,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[{"content":[]}]}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"content":[]}}"#,
        ];
        for line in others {
            assert!(call_answer(line.as_bytes()).is_none(), "{line}");
        }
    }
}
