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
use serde::de::{MapAccess, SeqAccess, Visitor};
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

/// A message with a result and nothing else: any other key (`method`, `error`, even
/// null) leaves the message to rmcp, which reads such messages otherwise or refuses them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    result: Unique,
}

/// A JSON value read refusing a key repeated in any object: rmcp's reading refuses a
/// repeated field where a map keeps the last, so such a result is left to it.
struct Unique(Value);

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            out.push(item);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some((key, Unique(value))) = map.next_entry::<String, Unique>()? {
            if out.insert(key, value).is_some() {
                return Err(serde::de::Error::custom("a repeated key"));
            }
        }
        Ok(Value::Object(out))
    }
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
    // An object only: a struct would also take the array form, which rmcp refuses.
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let answer: Answer = serde_json::from_slice(text).ok()?;
    let Value::Object(mut result) = answer.result.0 else {
        return None;
    };
    let reads_as_call = ["content", "structuredContent", "isError"]
        .iter()
        .any(|key| result.contains_key(*key));
    let earlier = EARLIER.iter().any(|key| result.contains_key(*key));
    let listen = result
        .get("_meta")
        .and_then(Value::as_object)
        .is_some_and(|meta| meta.contains_key(SUBSCRIPTION));
    if !reads_as_call || earlier || listen {
        return None;
    }
    // Structured content is any JSON value, kept as it is: read through a placeholder
    // (a present `null`, which counts as present as any value does) and moved in after,
    // instead of rebuilt node by node from one tree into another.
    let structured = result.get_mut("structuredContent").map(Value::take);
    let mut call = CallToolResult::deserialize(Value::Object(result)).ok()?;
    if structured.is_some() {
        call.structured_content = structured;
    }
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
            // Structured content of every kind, moved in whole: null, a list, a string.
            r#"{"jsonrpc":"2.0","id":6,"result":{"structuredContent":null}}"#,
            r#"{"jsonrpc":"2.0","id":7,"result":{"structuredContent":[1,{"a":[null]}],"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":8,"result":{"isError":true,"structuredContent":"s"}}"#,
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
            // Read otherwise or refused by rmcp: another key beside the result (even
            // null), the array form, a key repeated at any depth.
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":null,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]},"x":1}"#,
            r#"["2.0",1,{"content":[]}]"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a","text":"b"}]}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"content":[]}}"#,
        ];
        for line in others {
            assert!(call_answer(line.as_bytes()).is_none(), "{line}");
        }
    }
}
