//! What a server offers, shaped once per listing: its tools (`tools.rs`), its identity
//! and instructions, resources, resource templates and prompts (`lists.rs`), and a
//! prompt's messages when one is got (`prompts.rs`). Everything here is pure: a raw
//! listing and the connection's redactor in, what a turn may show and use out
//! (secret-bearing names hidden, duplicates dropped, text redacted and capped, schemas
//! shared), with notes of what was cut or hidden, never which.
//!
//! Adversary: the server author (threat model 2): names, descriptions, schemas, URIs
//! and prompt messages of any size and content. Bounds: the constants below, re-exported
//! in [`crate::limits`].

use serde::Serialize;
use serde_json::Value;

mod cached;
mod lists;
mod memo;
mod pinned;
mod prompts;
mod tools;

pub use cached::MAX_LISTING_FILE;
pub(crate) use cached::{CachedListing, expired, forget, recall, remember};
pub(crate) use lists::shape_offer;
pub(crate) use memo::ToolMemo;
pub(crate) use pinned::{all_approved, pins_of, withhold};
pub(crate) use prompts::{offers_uri, prompt_result};
pub(crate) use tools::{SchemaPool, shape_listing};

/// Longest tool (and resource, template, prompt) description kept (a hostile server
/// could send megabytes).
pub const MAX_DESCRIPTION: usize = 4_096;
/// Longest tool title (and name, MIME type) kept.
pub const MAX_TITLE: usize = 200;
/// Longest `instructions` kept.
pub const MAX_INSTRUCTIONS: usize = 16_384;
/// Longest string kept in a prompt message (text, data, blob).
pub const MAX_PROMPT_TEXT: usize = 65_536;
/// Most messages of one prompt kept.
pub const MAX_PROMPT_MESSAGES: usize = 100;
/// Longest resource URI or URI template listed; a longer one is hidden.
pub const MAX_URI: usize = 2_048;
/// Most arguments of one prompt kept.
pub const MAX_PROMPT_ARGUMENTS: usize = 64;

/// Who a server says it is (redacted, capped).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ServerIdentity {
    /// Server id (the declaration's).
    pub server: String,
    /// `serverInfo.name`.
    pub name: String,
    /// `serverInfo.version`.
    pub version: String,
    /// `serverInfo.title`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// `instructions`: what the server asks of its client, for a host's system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The MCP protocol version the connection speaks (`2025-11-25`, `2026-07-28`).
    pub protocol: String,
}

/// One resource a server listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ResourceInfo {
    /// Server id.
    pub server: String,
    /// The resource's URI: what `TurnCatalog::read_resource` takes.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Its size in bytes, when the server says.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

/// One resource template (RFC 6570) a server listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct TemplateInfo {
    /// Server id.
    pub server: String,
    /// The URI template.
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The MIME type of what it names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// One prompt a server listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct PromptInfo {
    /// Exposed name (`server__prompt`): what `TurnCatalog::get_prompt` takes.
    pub name: String,
    /// Server id.
    pub server: String,
    /// The server's own prompt name.
    pub prompt: String,
    /// Its title.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments.
    pub arguments: Vec<PromptArgumentInfo>,
}

/// One argument of a prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct PromptArgumentInfo {
    /// Its name.
    pub name: String,
    /// Its description (redacted, capped).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether the prompt needs it.
    pub required: bool,
}

/// A prompt's messages, redacted like results (model view).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PromptResult {
    /// The exposed prompt name.
    pub prompt: String,
    /// Server id.
    pub server: String,
    /// The server's description of this rendering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages: `role` and one content block each.
    pub messages: Vec<PromptMessageView>,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct PromptMessageView {
    /// `user` or `assistant`.
    pub role: String,
    /// The content block, redacted, its text capped.
    pub content: Value,
}

/// Everything a connection offers beside tools, shaped.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    /// Identity and instructions.
    pub identity: ServerIdentity,
    /// Visible resources.
    pub resources: Vec<ResourceInfo>,
    /// Visible resource templates.
    pub templates: Vec<TemplateInfo>,
    /// Visible prompts.
    pub prompts: Vec<PromptInfo>,
    /// Definitions the server changed or added since a person approved what it served,
    /// held back from the model until one approves them (`pinning: strict`).
    pub held: Vec<crate::pins::Held>,
}

/// One listing as a turn may use it: its tools and other offers shaped, what the
/// shaping found wrong, and where its pins are watched when something is held back.
#[derive(Default)]
pub(crate) struct Shaped {
    pub tools: Vec<rmcp::model::Tool>,
    pub offer: Offered,
    /// Diagnostics of every turn while this listing stands.
    pub notes: Vec<String>,
    /// Tools the server listed, before bounds and filters.
    pub listed: usize,
    /// Set while definitions are held back: the pin file whose change may release them.
    pub held: Option<crate::pins::Watch>,
}

/// A declaration of `yaml` for this module's tests (`x`, at `agent/mcp/x.yaml`).
#[cfg(test)]
pub(crate) fn test_declaration(yaml: &str) -> crate::core::Declaration {
    let path = std::path::Path::new("agent/mcp/x.yaml");
    crate::core::parse_declaration_text(yaml, "x".into(), "agent/mcp/x.yaml".into(), path)
        .expect("a test declaration loads")
}
