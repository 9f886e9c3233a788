//! An answer read straight into its result type. rmcp reads every answer through an
//! untagged union of twenty result types: it buffers the whole result, then tries each
//! type in turn, copying every string of the one that fits and formatting an error for
//! each one that does not. For a tool call that was an eighth of a warm call's
//! instructions; for a first turn's `tools/list` answer, the largest message it reads,
//! more.
//!
//! The shortcut gives exactly what rmcp's reading gives or is not taken. Each of the
//! union's types up to the call result requires a key (`ORDER`, in the union's order;
//! the listen result, a subscription id in its `_meta`). A first reading finds the
//! marks a result carries, keeping no value but checking every one as rmcp's buffering
//! does (`Checked`). The result is then read from the text as the type of the first
//! mark it carries, when that type is one read here: discovery, initialize, a
//! completion, a prompt, the four lists, a read, a tool call. No earlier type could
//! take it (each lacks what it requires), so that type is the one rmcp would reach and
//! take; read straight from the text, it meets a repeated key as it does in rmcp's
//! reading (a field refused, a map keeping the last). Anything else, and whatever
//! that type refuses, goes to rmcp's own reading, where the later types (input
//! required, task acknowledgment, empty, custom) have their turn. This holds while
//! serde_json's `arbitrary_precision` is off, as in this build: with it, a number
//! reads as a map in a buffer; the tests, which compare both readings, would say so.

use memchr::memmem;
use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0, RequestId, ServerResult};
use rmcp::service::RxJsonRpcMessage;
use serde::Deserialize;
use serde::de::{MapAccess, SeqAccess, Visitor};

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
                Key::Meta => marks.listen |= map.next_value::<Meta>()?.0,
                Key::Mark(index) => {
                    marks.keys |= 1 << index;
                    map.next_value::<Checked>()?;
                }
                Key::Subscription | Key::Other => {
                    map.next_value::<Checked>()?;
                }
            }
        }
        Ok(marks)
    }
}

/// A key of a result: a mark's (its place in `ORDER`), `_meta`, a subscription id's
/// (in `_meta`), or another.
enum Key {
    Mark(usize),
    Meta,
    Subscription,
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
        match v {
            "_meta" => return Ok(Key::Meta),
            SUBSCRIPTION => return Ok(Key::Subscription),
            _ => {}
        }
        Ok(ORDER
            .iter()
            .position(|(mark, _)| matches!(mark, Mark::Key(key) if *key == v))
            .map_or(Key::Other, Key::Mark))
    }
}

/// A `_meta` value, checked as any value, and whether it is an object with a
/// subscription id (of any value).
struct Meta(bool);

impl<'de> Deserialize<'de> for Meta {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor { meta: true })
            .map(|checked| Meta(checked.listens))
    }
}

/// Any JSON value, read as rmcp's buffering reads it and kept nowhere. Skipping a value
/// (`IgnoredAny`) checks less: not its strings' escapes, not whether a number fits a
/// float, not how deep it nests (UTF-8 is checked for the whole line before either
/// reading). Every value of a result is read this way in the first reading, so what the
/// second skips (keys its type does not know) was checked, and an answer rmcp refuses
/// is refused here too. Read as a `_meta`
/// (`CheckedVisitor::meta`), an object says whether it holds a subscription id.
struct Checked {
    listens: bool,
}

const CHECKED: Checked = Checked { listens: false };

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(CheckedVisitor { meta: false })
    }
}

struct CheckedVisitor {
    meta: bool,
}

impl<'de> Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        let mut listens = false;
        if self.meta {
            while let Some(key) = map.next_key::<Key>()? {
                listens |= matches!(key, Key::Subscription);
                map.next_value::<Checked>()?;
            }
        } else {
            while map.next_entry::<Checked, Checked>()?.is_some() {}
        }
        Ok(Checked { listens })
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(CHECKED)
    }
    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(CHECKED)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(CHECKED)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(CHECKED)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(CHECKED)
    }
    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(CHECKED)
    }
    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(CHECKED)
    }
}

/// What every answer's bytes hold (a key spelled with escapes aside, which rmcp's
/// reading then takes): a message without it is no answer, and a search of the bytes
/// spares it a parse. One search, stopping where the key is: near the start in most
/// answers.
static RESULT: std::sync::LazyLock<memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memmem::Finder::new(b"\"result\""));

/// `text` as an answer read by its result type, or `None` for rmcp's own reading.
pub(super) fn typed_answer(text: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    RESULT.find(text)?;
    // An object only: a struct would also take the array form, which rmcp refuses.
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    // Text that is not UTF-8 is refused by rmcp's reading as well, which buffers every
    // string of a message, keys included (a byte that is not UTF-8 outside a string
    // is a syntax error). Known to be UTF-8 as a whole, it is read as text by both
    // readings below, and serde_json does not check each string again.
    let text = std::str::from_utf8(text).ok()?;
    let marks: Answer<Marks> = serde_json::from_str(text).ok()?;
    match reading_of(&marks.result)? {
        Reading::Discover => read(text, ServerResult::DiscoverResult),
        Reading::Initialize => read(text, ServerResult::InitializeResult),
        Reading::Complete => read(text, ServerResult::CompleteResult),
        Reading::Prompt => read(text, ServerResult::GetPromptResult),
        Reading::Prompts => read(text, ServerResult::ListPromptsResult),
        Reading::Resources => read(text, ServerResult::ListResourcesResult),
        Reading::Templates => read(text, ServerResult::ListResourceTemplatesResult),
        Reading::Resource => read(text, ServerResult::ReadResourceResult),
        Reading::Tools => read(text, ServerResult::ListToolsResult),
        Reading::Call => read(text, ServerResult::CallToolResult),
    }
}

/// `text` read as an answer whose result is a `T`, made a [`ServerResult`] by `into`.
fn read<'a, T: Deserialize<'a>>(
    text: &'a str,
    into: fn(T) -> ServerResult,
) -> Option<RxJsonRpcMessage<RoleClient>> {
    let answer: Answer<T> = serde_json::from_str(text).ok()?;
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

    /// rmcp's own reading of `line`, or `None` when rmcp refuses it.
    fn rmcp(line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
        serde_json::from_slice(line).ok()
    }

    /// The result of an answer.
    fn result_of(message: &RxJsonRpcMessage<RoleClient>) -> &ServerResult {
        match message {
            JsonRpcMessage::Response(response) => &response.result,
            _ => panic!("not an answer"),
        }
    }

    /// The reading the shortcut took for `line`, checked against rmcp's: the same
    /// type and the same message, or no shortcut at all.
    fn taken(line: &str) -> Option<Reading> {
        taken_bytes(line.as_bytes())
    }

    fn taken_bytes(line: &[u8]) -> Option<Reading> {
        let shown = String::from_utf8_lossy(line);
        let fast = typed_answer(line)?;
        let theirs = rmcp(line).unwrap_or_else(|| panic!("rmcp refuses what was read: {shown}"));
        assert_eq!(
            std::mem::discriminant(result_of(&fast)),
            std::mem::discriminant(result_of(&theirs)),
            "read as another type than rmcp reads it: {shown}"
        );
        assert_eq!(
            serde_json::to_value(&fast).unwrap(),
            serde_json::to_value(&theirs).unwrap(),
            "read otherwise than rmcp reads it: {shown}"
        );
        Some(match result_of(&fast) {
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

    /// The byte search passes over what is no answer, and only that.
    #[test]
    fn messages_that_are_no_answers_are_left_to_rmcp_unparsed_and_read_as_before() {
        // Keys of the types read here, but no result: requests and notifications.
        for line in [
            r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":{"content":[],"tools":[]}}}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
        ] {
            assert!(RESULT.find(line.as_bytes()).is_none());
            assert!(taken(line).is_none(), "{line}");
            assert!(rmcp(line.as_bytes()).is_some(), "rmcp reads {line}");
        }
        // A key of the result spelled with escapes is read as rmcp reads it.
        let line = r#"{"jsonrpc":"2.0","id":1,"result":{"\u0074ools":[]}}"#;
        assert_eq!(taken(line), Some(Reading::Tools));
        // The result's own key spelled with an escape: left to rmcp, which reads it.
        let escaped = r#"{"jsonrpc":"2.0","id":1,"res\u0075lt":{"tools":[]}}"#;
        assert!(taken(escaped).is_none());
        assert!(matches!(
            rmcp(escaped.as_bytes()),
            Some(JsonRpcMessage::Response(JsonRpcResponse {
                result: ServerResult::ListToolsResult(_),
                ..
            }))
        ));
    }

    /// A whole result of the type each key of `ORDER` marks, as rmcp takes it.
    fn sample(key: &str) -> Value {
        let text = match key {
            "supportedVersions" => {
                r#"{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{},"ttlMs":0,"cacheScope":"public"}"#
            }
            "protocolVersion" => {
                r#"{"protocolVersion":"2025-11-25","capabilities":{},"serverInfo":{"name":"s","version":"1"}}"#
            }
            "completion" => r#"{"completion":{"values":["a"]}}"#,
            "skill" => {
                r#"{"skill":{"uri":"skill://s","frontmatter":{"name":"s","description":"d"},"resources":"dynamic"}}"#
            }
            "action" => r#"{"action":"accept"}"#,
            "taskId" => {
                r#"{"resultType":"task","taskId":"t","status":"working","createdAt":"2026-01-01T00:00:00Z","lastUpdatedAt":"2026-01-01T00:00:00Z","ttlMs":null}"#
            }
            "isError" => r#"{"isError":true}"#,
            "structuredContent" => r#"{"structuredContent":{"a":1}}"#,
            key => return serde_json::json!({ key: [] }),
        };
        serde_json::from_str(text).unwrap()
    }

    /// Every key of `ORDER` with a whole result of its type, alone and beside every
    /// other's (the earlier type's fields kept where both have one), in both orders
    /// of the text: rmcp reads each as the earlier type, and so does the shortcut when
    /// it reads that type at all (`taken` compares type and message).
    #[test]
    fn pairs_of_results_are_read_as_the_earlier_type_as_rmcp_reads_them() {
        let keys: Vec<(usize, &str, Option<Reading>)> = ORDER
            .iter()
            .enumerate()
            .filter_map(|(index, (mark, reading))| match mark {
                Mark::Key(key) => Some((index, *key, *reading)),
                Mark::Listen => None,
            })
            .collect();
        let mut read = 0;
        for &(i, first, reading) in &keys {
            let alone = answer(&sample(first).to_string());
            assert_eq!(taken(&alone), reading, "{alone}");
            let alone_theirs = rmcp(alone.as_bytes()).unwrap();
            let first_type = std::mem::discriminant(result_of(&alone_theirs));
            for &(j, second, _) in &keys {
                if j <= i {
                    continue;
                }
                let Value::Object(mut merged) = sample(first) else {
                    unreachable!()
                };
                let Value::Object(later) = sample(second) else {
                    unreachable!()
                };
                for (key, value) in later {
                    merged.entry(key).or_insert(value);
                }
                // Both orders of the keys in the text.
                let forward = Value::Object(merged.clone()).to_string();
                let mut reversed: Vec<(String, Value)> = merged.into_iter().collect();
                reversed.reverse();
                let backward = Value::Object(reversed.into_iter().collect()).to_string();
                for result in [forward, backward] {
                    let line = answer(&result);
                    let theirs = rmcp(line.as_bytes()).expect(&line);
                    assert_eq!(
                        std::mem::discriminant(result_of(&theirs)),
                        first_type,
                        "rmcp reads {line} as another type than {first}'s"
                    );
                    assert_eq!(taken(&line), reading, "{line}");
                    read += usize::from(reading.is_some());
                }
            }
        }
        assert!(read > 100, "the shortcut read {read} pairs");
    }

    /// Whatever rmcp's buffering refuses in a value the types skip (an unknown key, a
    /// `_meta`, a key itself): an unpaired surrogate, a number no float holds, bytes
    /// that are not UTF-8, nesting past serde_json's limit. The shortcut refuses it too,
    /// and rmcp's reading refuses it.
    #[test]
    fn what_rmcp_refuses_in_a_skipped_value_is_refused() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let results = [
            r#"{"content":[],"x":"\ud800"}"#.to_string(),
            r#"{"tools":[],"x":1e999}"#.into(),
            r#"{"tools":[],"x":-1e999}"#.into(),
            r#"{"tools":[{"name":"a","inputSchema":{},"x":"\ud800"}]}"#.into(),
            r#"{"tools":[{"name":"a","inputSchema":{},"x":[1e400]}]}"#.into(),
            r#"{"tools":[],"_meta":{"x":"\udc00"}}"#.into(),
            r#"{"tools":[],"_meta":["\ud800"]}"#.into(),
            r#"{"tools":[],"_meta":1e999}"#.into(),
            r#"{"tools":[],"\ud800":1}"#.into(),
            r#"{"prompts":[],"_meta":{"\ud800":1}}"#.into(),
            format!(r#"{{"content":[],"x":{deep}}}"#),
            format!(r#"{{"tools":[{{"name":"a","inputSchema":{{}},"x":{deep}}}]}}"#),
        ];
        for result in results {
            let line = answer(&result);
            assert!(rmcp(line.as_bytes()).is_none(), "rmcp takes {line}");
            assert_eq!(taken(&line), None, "{line}");
        }
        for bad in [&b"\xff"[..], b"\xc3\x28", b"\xed\xa0\x80"] {
            for template in [
                &b"{\"content\":[],\"x\":\"#\"}"[..],
                b"{\"tools\":[],\"#\":1}",
            ] {
                let mut result = Vec::new();
                for &b in template {
                    if b == b'#' {
                        result.extend_from_slice(bad);
                    } else {
                        result.push(b);
                    }
                }
                let mut line = br#"{"jsonrpc":"2.0","id":1,"result":"#.to_vec();
                line.extend_from_slice(&result);
                line.push(b'}');
                assert!(rmcp(&line).is_none());
                assert_eq!(taken_bytes(&line), None);
            }
        }
    }
}
