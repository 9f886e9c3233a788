//! An answer read straight into its result type. rmcp reads every answer through an
//! untagged union of twenty result types: it buffers the whole result, then tries each
//! type in turn, copying every string of the one that fits and formatting an error for
//! each one that does not. For a tool call that was an eighth of a warm call's
//! instructions; for a first turn's `tools/list` answer, the largest message it reads,
//! more.
//!
//! The shortcut gives exactly what rmcp's reading gives or is not taken. The union's
//! types before the one taken each require a key (`ORDER`); a result is read as the
//! type of the first of those keys it has, and only when that type is one read here
//! (a tool call's result, or a page of tools, prompts, resources or resource
//! templates) and reads it. An earlier type cannot take it (it lacks the key that type
//! requires), and the type that reads it is the one rmcp would have reached and taken.
//! A listen result sits in the union before the tools and the call result and needs
//! only a subscription id in its `_meta`: a result with one is left to rmcp before
//! either. Anything else goes to rmcp's own reading, where the later types (input
//! required, task acknowledgment, empty, custom) catch what the shortcut refuses.

use memchr::memmem;
use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerResult};
use rmcp::service::RxJsonRpcMessage;
use serde::Deserialize;
use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The result types read here.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reading {
    Discover,
    Initialize,
    Complete,
    Prompt,
    Prompts,
    Resources,
    Templates,
    Resource,
    Tools,
    Call,
}

/// Where a type of rmcp's union stands in its order: by a key it requires, or, for the
/// listen result, by the subscription id in `_meta`.
#[derive(Clone, Copy)]
enum Mark {
    Key(&'static str),
    Listen,
}

/// rmcp's union in its order, each type by what it requires, with the reading taken
/// for it here (`None`: left to rmcp). The call result requires any one of its three
/// keys. Types after it require no key of their own and are never reached here.
const ORDER: [(Mark, Option<Reading>); 17] = [
    (Mark::Key("supportedVersions"), Some(Reading::Discover)),
    (Mark::Key("protocolVersion"), Some(Reading::Initialize)),
    (Mark::Key("completion"), Some(Reading::Complete)),
    (Mark::Key("messages"), Some(Reading::Prompt)),
    (Mark::Key("prompts"), Some(Reading::Prompts)),
    (Mark::Key("resources"), Some(Reading::Resources)),
    (Mark::Key("resourceTemplates"), Some(Reading::Templates)),
    (Mark::Key("contents"), Some(Reading::Resource)),
    (Mark::Listen, None),
    (Mark::Key("tools"), Some(Reading::Tools)),
    (Mark::Key("skills"), None),
    (Mark::Key("skill"), None),
    (Mark::Key("action"), None),
    (Mark::Key("taskId"), None),
    (Mark::Key("content"), Some(Reading::Call)),
    (Mark::Key("structuredContent"), Some(Reading::Call)),
    (Mark::Key("isError"), Some(Reading::Call)),
];

/// What makes a result with `resultType` and `_meta` a listen result.
const SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// The reading of a result carrying `marks`: the type of the first mark of `ORDER` it
/// carries, when that type is one read here.
fn reading_of(marks: &Marks) -> Option<Reading> {
    ORDER
        .iter()
        .enumerate()
        .find(|(index, (mark, _))| marks.has(*mark, *index))
        .and_then(|(_, (_, reading))| *reading)
}

/// A message with a result and nothing else: any other key (`method`, `error`, even
/// null) leaves the message to rmcp, which reads such messages otherwise or refuses them.
/// Read twice: first for the marks of its result (`Marks`), then as the type they
/// name. Read straight from the text, a type meets what it meets in rmcp's reading:
/// a repeated field refused, a map keeping its last value.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer<R> {
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    result: R,
}

/// The marks of `ORDER` an object carries, read without keeping its values: a bit for
/// each key, and whether its `_meta` holds a subscription id.
#[derive(Default)]
struct Marks {
    keys: u32,
    listen: bool,
}

impl Marks {
    fn has(&self, mark: Mark, index: usize) -> bool {
        match mark {
            Mark::Key(_) => self.keys & (1 << index) != 0,
            Mark::Listen => self.listen,
        }
    }
}

impl<'de> Deserialize<'de> for Marks {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(MarksVisitor)
    }
}

struct MarksVisitor;

impl<'de> Visitor<'de> for MarksVisitor {
    type Value = Marks;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Marks, A::Error> {
        let mut marks = Marks::default();
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Meta => marks.listen |= map.next_value::<Listens>()?.0,
                Key::Mark(index) => {
                    marks.keys |= 1 << index;
                    map.next_value::<IgnoredAny>()?;
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(marks)
    }
}

/// A key of a result: a mark's (its place in `ORDER`), `_meta`, or another.
enum Key {
    Mark(usize),
    Meta,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

struct KeyVisitor;

impl Visitor<'_> for KeyVisitor {
    type Value = Key;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E>(self, v: &str) -> Result<Key, E> {
        if v == "_meta" {
            return Ok(Key::Meta);
        }
        Ok(ORDER
            .iter()
            .position(|(mark, _)| matches!(mark, Mark::Key(key) if *key == v))
            .map_or(Key::Other, Key::Mark))
    }
}

/// Whether a `_meta` value is an object with a subscription id (of any value).
struct Listens(bool);

impl<'de> Deserialize<'de> for Listens {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ListensVisitor)
    }
}

struct ListensVisitor;

impl<'de> Visitor<'de> for ListensVisitor {
    type Value = Listens;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Listens, A::Error> {
        let mut listens = false;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            listens |= key == SUBSCRIPTION;
            map.next_value::<IgnoredAny>()?;
        }
        Ok(Listens(listens))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Listens, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Listens(false))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Listens, E> {
        Ok(Listens(false))
    }
    fn visit_i64<E>(self, _: i64) -> Result<Listens, E> {
        Ok(Listens(false))
    }
    fn visit_u64<E>(self, _: u64) -> Result<Listens, E> {
        Ok(Listens(false))
    }
    fn visit_f64<E>(self, _: f64) -> Result<Listens, E> {
        Ok(Listens(false))
    }
    fn visit_str<E>(self, _: &str) -> Result<Listens, E> {
        Ok(Listens(false))
    }
    fn visit_unit<E>(self) -> Result<Listens, E> {
        Ok(Listens(false))
    }
}

/// `text` as an answer read by its result type, or `None` for rmcp's own reading.
pub(super) fn typed_answer(text: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    // Most other messages have none of these keys: a search of the bytes spares them a
    // parse.
    const LOOKS: [&[u8]; 12] = [
        b"\"content\"",
        b"\"structuredContent\"",
        b"\"isError\"",
        b"\"tools\"",
        b"\"prompts\"",
        b"\"resources\"",
        b"\"resourceTemplates\"",
        b"\"contents\"",
        b"\"messages\"",
        b"\"completion\"",
        b"\"protocolVersion\"",
        b"\"supportedVersions\"",
    ];
    if !LOOKS.iter().any(|key| memmem::find(text, key).is_some()) {
        return None;
    }
    // An object only: a struct would also take the array form, which rmcp refuses.
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let marks: Answer<Marks> = serde_json::from_slice(text).ok()?;
    Some(match reading_of(&marks.result)? {
        Reading::Discover => read(text, ServerResult::DiscoverResult)?,
        Reading::Initialize => read(text, ServerResult::InitializeResult)?,
        Reading::Complete => read(text, ServerResult::CompleteResult)?,
        Reading::Prompt => read(text, ServerResult::GetPromptResult)?,
        Reading::Prompts => read(text, ServerResult::ListPromptsResult)?,
        Reading::Resources => read(text, ServerResult::ListResourcesResult)?,
        Reading::Templates => read(text, ServerResult::ListResourceTemplatesResult)?,
        Reading::Resource => read(text, ServerResult::ReadResourceResult)?,
        Reading::Tools => read(text, ServerResult::ListToolsResult)?,
        Reading::Call => read(text, ServerResult::CallToolResult)?,
    })
}

/// `text` read as an answer whose result is a `T`, made a [`ServerResult`] by `into`.
fn read<'a, T: Deserialize<'a>>(
    text: &'a [u8],
    into: fn(T) -> ServerResult,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let answer: Answer<T> = serde_json::from_slice(text).ok()?;
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: answer.jsonrpc,
        id: answer.id,
        result: into(answer.result),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// rmcp's own reading of `line`, as JSON, or `None` when rmcp refuses it.
    fn rmcp(line: &str) -> Option<Value> {
        let message: RxJsonRpcMessage<RoleClient> = serde_json::from_str(line).ok()?;
        Some(serde_json::to_value(message).unwrap())
    }

    /// The reading the shortcut took for `line`, checked against rmcp's: the same
    /// message, or no shortcut at all.
    fn taken(line: &str) -> Option<Reading> {
        let fast = typed_answer(line.as_bytes())?;
        assert_eq!(
            Some(serde_json::to_value(&fast).unwrap()),
            rmcp(line),
            "read otherwise than rmcp reads it: {line}"
        );
        let JsonRpcMessage::Response(response) = fast else {
            panic!("not an answer: {line}");
        };
        Some(match response.result {
            ServerResult::DiscoverResult(_) => Reading::Discover,
            ServerResult::InitializeResult(_) => Reading::Initialize,
            ServerResult::CompleteResult(_) => Reading::Complete,
            ServerResult::GetPromptResult(_) => Reading::Prompt,
            ServerResult::ListPromptsResult(_) => Reading::Prompts,
            ServerResult::ListResourcesResult(_) => Reading::Resources,
            ServerResult::ListResourceTemplatesResult(_) => Reading::Templates,
            ServerResult::ReadResourceResult(_) => Reading::Resource,
            ServerResult::ListToolsResult(_) => Reading::Tools,
            ServerResult::CallToolResult(_) => Reading::Call,
            other => panic!("a result not read here: {other:?}"),
        })
    }

    fn answer(result: &str) -> String {
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{result}}}"#)
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
            assert_eq!(taken(line), Some(Reading::Call), "{line}");
        }
    }

    /// Pages of tools, prompts, resources and templates as servers of both eras send
    /// them: every optional field, numbers of every kind in schemas, escapes, keys
    /// rmcp does not know, a key of a later type beside the list's own.
    #[test]
    fn list_answers_read_as_rmcp_reads_them() {
        let schema = r#"{"type":"object","properties":{"n":{"type":"integer","minimum":-9007199254740993,"maximum":18446744073709551615,"multipleOf":0.5},"s":{"type":"string","default":"\u00e9\n\"q\"","enum":["a",null,true,[],{}]}},"required":["n"],"additionalProperties":false}"#;
        let tool = format!(
            r#"{{"name":"t\u00e9","title":"T","description":"d","inputSchema":{schema},"outputSchema":{{"type":"object"}},"annotations":{{"title":"a","readOnlyHint":true,"destructiveHint":false,"idempotentHint":true,"openWorldHint":false}},"icons":[{{"src":"https://example.test/i.png","mimeType":"image/png","sizes":["16x16"]}}],"_meta":{{"k":[1,2]}},"execution":{{"taskSupport":"optional"}},"unknown":{{"x":1}}}}"#
        );
        let cases = [
            (format!(r#"{{"tools":[{tool},{{"name":"b","inputSchema":{{}}}}]}}"#), Reading::Tools),
            (r#"{"tools":[]}"#.to_string(), Reading::Tools),
            (
                r#"{"tools":[],"nextCursor":"c","resultType":"complete","ttlMs":-5,"cacheScope":"","_meta":{"m":1}}"#.into(),
                Reading::Tools,
            ),
            (r#"{"tools":[],"ttlMs":60000,"cacheScope":"private"}"#.into(), Reading::Tools),
            // A key of a later type: the list comes first in rmcp's order.
            (r#"{"tools":[],"content":[],"isError":true}"#.into(), Reading::Tools),
            (r#"{"prompts":[],"tools":[]}"#.into(), Reading::Prompts),
            (
                r#"{"prompts":[{"name":"p","description":"d","arguments":[{"name":"a","required":true}]}]}"#.into(),
                Reading::Prompts,
            ),
            (
                r#"{"resources":[{"uri":"file:///a","name":"a","mimeType":"text/plain","size":3,"annotations":{"audience":["user"],"priority":0.5}}],"nextCursor":"n"}"#.into(),
                Reading::Resources,
            ),
            (
                r#"{"resourceTemplates":[{"uriTemplate":"file:///{p}","name":"t"}]}"#.into(),
                Reading::Templates,
            ),
            (r#"{"resources":[],"resourceTemplates":[]}"#.into(), Reading::Resources),
            // The answers a connect, a prompt, a read and a completion get.
            (
                r#"{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true},"resources":{"subscribe":true},"logging":{},"experimental":{"x":{"y":1}}},"serverInfo":{"name":"s","version":"1","title":"S","websiteUrl":"https://example.test"},"instructions":"use it"}"#.into(),
                Reading::Initialize,
            ),
            (
                r#"{"resultType":"complete","supportedVersions":["2026-07-28","2025-11-25"],"capabilities":{"tools":{}},"ttlMs":60000,"cacheScope":"public","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}}}"#.into(),
                Reading::Discover,
            ),
            (
                r#"{"description":"d","messages":[{"role":"user","content":{"type":"text","text":"hi"}},{"role":"assistant","content":{"type":"resource","resource":{"uri":"file:///a","text":"t"}}}]}"#.into(),
                Reading::Prompt,
            ),
            (
                r#"{"contents":[{"uri":"file:///a","mimeType":"text/plain","text":"t"},{"uri":"file:///b","blob":"AAEC"}]}"#.into(),
                Reading::Resource,
            ),
            (
                r#"{"completion":{"values":["a","b"],"total":2,"hasMore":false}}"#.into(),
                Reading::Complete,
            ),
            // A key of an earlier type: read as that type, as rmcp reads it.
            (r#"{"isError":true,"contents":[]}"#.into(), Reading::Resource),
            (r#"{"content":[],"messages":[]}"#.into(), Reading::Prompt),
            (r#"{"tools":[],"contents":[]}"#.into(), Reading::Resource),
            (r#"{"prompts":[],"messages":[]}"#.into(), Reading::Prompt),
            (
                r#"{"resources":[],"completion":{"values":[]}}"#.into(),
                Reading::Complete,
            ),
            // A key repeated in a map (a schema): rmcp keeps the last value, as here.
            (
                r#"{"tools":[{"name":"a","inputSchema":{"k":1,"k":2}}]}"#.into(),
                Reading::Tools,
            ),
            // `_meta` of any kind but a listen result's.
            (r#"{"tools":[],"_meta":null}"#.into(), Reading::Tools),
            (
                r#"{"content":[],"_meta":{"io.modelcontextprotocol/other":"s"}}"#.into(),
                Reading::Call,
            ),
            // A key written with escapes is the same key.
            (r#"{"tools":[],"\u0063ontent":[]}"#.into(), Reading::Tools),
            (r#"{"\u0070rompts":[],"tools":[]}"#.into(), Reading::Prompts),
        ];
        for (result, reading) in cases {
            let line = answer(&result);
            assert_eq!(taken(&line), Some(reading), "{line}");
        }
    }

    /// What rmcp reads as something else, or the type in view refuses, is left to it.
    #[test]
    fn anything_rmcp_may_read_otherwise_is_left_to_it() {
        let others = [
            // A listen result: `resultType` and a subscription id are all it needs, and
            // it comes before the tools and the call result.
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":"s"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":"s"}}}"#,
            // A key an earlier type not read here requires, or one read here that
            // refuses the rest.
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"action":"accept"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"taskId":"t"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"skill":{"name":"s"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"protocolVersion":"2025-11-25"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resourceTemplates":[],"supportedVersions":[]}}"#,
            // Refused by the type in view: input required, a wrong content, no call
            // key, a list that is not one, an item its type refuses.
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"input_required","requestState":"s"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":"not a list"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"_meta":{"content":1}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":"not a list"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"no schema"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":1,"inputSchema":{}}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"prompts":[{"description":"no name"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"resources":[{"name":"no uri"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"ttlMs":1.5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"cacheScope":"everyone"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"_meta":[1,{"a":2}]}}"#,
            // No key of a type read here as the bytes spell it: not searched further.
            r#"{"jsonrpc":"2.0","id":1,"result":{"\u0074ools":[]}}"#,
            // Not an answer, or not one rmcp takes.
            r#"{"jsonrpc":"2.0","id":1,"method":"ping","result":{"content":[]}}"#,
            r#"{"jsonrpc":"1.0","id":1,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":[{"content":[]}]}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"result":{"tools":[]}}"#,
            // Read otherwise or refused by rmcp: another key beside the result (even
            // null), the array form, a key repeated at any depth.
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]},"error":{"code":1,"message":"m"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":null,"result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]},"x":1}"#,
            r#"["2.0",1,{"content":[]}]"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"a","text":"b"}]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"tools":[]}}"#,
            // A listen result's `_meta` under an escaped key, or named with escapes.
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[],"resultType":"complete","\u005fmeta":{"io.modelcontextprotocol/subscriptionId":"s"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"resultType":"complete","_meta":{"io.modelcontextprotocol\/subscriptionId":1}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"tools":[]}}"#,
        ];
        for line in others {
            assert_eq!(taken(line), None, "{line}");
        }
    }

    /// Every key of `ORDER`, alone and in every pair with a key of a list or a call, in
    /// both orders: whatever the shortcut reads, rmcp reads the same
    /// (`taken` compares), and it reads by the earlier key of the pair.
    #[test]
    fn pairs_of_keys_are_read_by_the_earlier_one_as_rmcp_reads_them() {
        let value = |key: &str| match key {
            "supportedVersions" => r#"["2026-07-28"]"#,
            "protocolVersion" => r#""2025-11-25""#,
            "completion" => r#"{"values":[]}"#,
            "action" => r#""accept""#,
            "taskId" => r#""t""#,
            "isError" => "true",
            "structuredContent" => r#"{"a":1}"#,
            "skill" => r#"{"name":"s"}"#,
            _ => "[]",
        };
        let keys: Vec<&str> = ORDER
            .iter()
            .filter_map(|(mark, _)| match mark {
                Mark::Key(key) => Some(*key),
                Mark::Listen => None,
            })
            .collect();
        for (i, first) in keys.iter().enumerate() {
            let alone = answer(&format!(r#"{{"{first}":{}}}"#, value(first)));
            let expected = ORDER
                .iter()
                .find(|(m, _)| matches!(m, Mark::Key(k) if k == first));
            let reading = taken(&alone);
            assert!(
                reading.is_none() || reading == expected.and_then(|(_, r)| *r),
                "{alone}"
            );
            for second in &keys[i + 1..] {
                for (a, b) in [(first, second), (second, first)] {
                    let line = answer(&format!(r#"{{"{a}":{},"{b}":{}}}"#, value(a), value(b)));
                    // `taken` checks the reading against rmcp's.
                    let reading = taken(&line);
                    let by_first = ORDER
                        .iter()
                        .find(|(m, _)| matches!(m, Mark::Key(k) if k == first))
                        .and_then(|(_, r)| *r);
                    assert!(reading.is_none() || reading == by_first, "{line}");
                }
            }
        }
    }
}
