//! A server's other lists as a turn may use them: its identity and instructions,
//! resources, resource templates and prompts, filtered by the declaration's
//! `resources:` and `prompts:`, redacted and capped, entries whose URI or name carries
//! a secret hidden (they would be shown everywhere), duplicates dropped.

use std::collections::HashSet;

use rmcp::model::{Prompt, Resource, ResourceTemplate};

use super::{
    MAX_DESCRIPTION, MAX_INSTRUCTIONS, MAX_PROMPT_ARGUMENTS, MAX_TITLE, MAX_URI, Offered,
    PromptArgumentInfo, PromptInfo, ResourceInfo, ServerIdentity, TemplateInfo,
};
use crate::core::Declaration;
use crate::naming;
use crate::redact::{Redactor, View};
use crate::result::{cap, cap_chars};
use crate::transport::{MAX_TOOLS, Offer};

/// How one connection's entries are shaped: its server id, its redactor, and a count
/// of what was hidden for carrying a secret.
struct Shaper<'a> {
    server: &'a str,
    declaration: &'a Declaration,
    redactor: &'a Redactor,
    hidden: usize,
}

impl Shaper<'_> {
    /// `t` redacted (model view) and cut at `max` characters.
    fn text(&self, t: &str, max: usize) -> String {
        cap_chars(&self.redactor.text(t, View::Model), max)
    }

    fn described(&self, d: &Option<String>) -> Option<String> {
        d.as_deref().map(|d| self.text(d, MAX_DESCRIPTION))
    }

    /// Whether `s` holds no secret of the connection.
    fn clean(&self, s: &str) -> bool {
        self.redactor.text(s, View::Model) == s
    }

    /// `shown`, or counted as hidden.
    fn shown(&mut self, shown: bool) -> bool {
        if !shown {
            self.hidden += 1;
        }
        shown
    }

    fn resources(&mut self, listed: Vec<Resource>) -> Vec<ResourceInfo> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for r in listed {
            if !naming::filter_allows(&self.declaration.resources, &r.uri) {
                continue;
            }
            let shown = r.uri.len() <= MAX_URI && self.clean(&r.uri) && self.clean(&r.name);
            if !self.shown(shown) || !seen.insert(r.uri.clone()) {
                continue;
            }
            out.push(ResourceInfo {
                server: self.server.to_string(),
                name: cap_chars(&r.name, MAX_TITLE),
                title: r.title.as_deref().map(|t| self.text(t, MAX_TITLE)),
                description: self.described(&r.description),
                mime_type: r.mime_type.as_deref().map(|m| self.text(m, MAX_TITLE)),
                size: r.size,
                uri: r.uri.clone(),
            });
        }
        out
    }

    /// Templates; of two with one URI template, the first (a pin is kept per URI
    /// template, so a second one would reach the model under the first's approval).
    fn templates(&mut self, listed: Vec<ResourceTemplate>) -> Vec<TemplateInfo> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        for t in listed {
            if !naming::filter_allows(&self.declaration.resources, &t.uri_template) {
                continue;
            }
            let shown = t.uri_template.len() <= MAX_URI
                && self.clean(&t.uri_template)
                && self.clean(&t.name);
            if !self.shown(shown) || !seen.insert(t.uri_template.clone()) {
                continue;
            }
            out.push(TemplateInfo {
                server: self.server.to_string(),
                name: cap_chars(&t.name, MAX_TITLE),
                description: self.described(&t.description),
                mime_type: t.mime_type.as_deref().map(|m| self.text(m, MAX_TITLE)),
                uri_template: t.uri_template.clone(),
            });
        }
        out
    }

    /// Prompts, exposed as `server__prompt`. Of prompts whose exposed names collide,
    /// the first by raw name is kept, whatever order the server lists them in.
    fn prompts(&mut self, mut listed: Vec<Prompt>) -> Vec<PromptInfo> {
        let prefix = naming::normalize_fragment(self.server, "server");
        let mut exposed = HashSet::new();
        listed.sort_by(|a, b| a.name.cmp(&b.name));
        let mut out = Vec::new();
        for p in listed {
            if !naming::filter_allows(&self.declaration.prompts, &p.name) {
                continue;
            }
            let arguments_clean = p.arguments.iter().flatten().all(|a| self.clean(&a.name));
            // A prompt's name is exposed normalized, like a tool's.
            let name_clean = self.clean(&p.name) && !self.redactor.holds_secret_normalized(&p.name);
            let shown = p.name.chars().count() <= MAX_TITLE && name_clean && arguments_clean;
            if !self.shown(shown) {
                continue;
            }
            let name = format!(
                "{prefix}__{}",
                naming::normalize_fragment(&p.name, "prompt")
            );
            if exposed.insert(name.clone()) {
                out.push(self.prompt(name, p));
            }
        }
        out
    }

    fn prompt(&self, name: String, p: Prompt) -> PromptInfo {
        let arguments = p
            .arguments
            .unwrap_or_default()
            .into_iter()
            .take(MAX_PROMPT_ARGUMENTS)
            .map(|a| PromptArgumentInfo {
                description: self.described(&a.description),
                required: a.required.unwrap_or(false),
                name: cap_chars(&a.name, MAX_TITLE),
            })
            .collect();
        PromptInfo {
            name,
            server: self.server.to_string(),
            title: p.title.as_deref().map(|t| self.text(t, MAX_TITLE)),
            description: self.described(&p.description),
            arguments,
            prompt: p.name,
        }
    }

    fn identity(&self, identity: crate::transport::Identity) -> ServerIdentity {
        ServerIdentity {
            server: self.server.to_string(),
            name: self.text(&identity.name, MAX_TITLE),
            version: self.text(&identity.version, MAX_TITLE),
            title: identity.title.as_deref().map(|t| self.text(t, MAX_TITLE)),
            instructions: identity
                .instructions
                .as_deref()
                .map(|i| self.text(i, MAX_INSTRUCTIONS)),
            // Only a version's shape (YYYY-MM-DD) is kept: it is the server's word.
            protocol: Some(identity.protocol)
                .filter(|p| {
                    p.len() == 10
                        && p.bytes().enumerate().all(|(i, b)| match i {
                            4 | 7 => b == b'-',
                            _ => b.is_ascii_digit(),
                        })
                })
                .unwrap_or_default(),
        }
    }
}

/// Shapes what `offer` lists for `declaration`'s connection. Notes say what was cut or
/// hidden, never which.
pub(crate) fn shape_offer(
    offer: Offer,
    declaration: &Declaration,
    redactor: &Redactor,
) -> (Offered, Vec<String>) {
    let mut notes: Vec<String> = offer
        .failed
        .iter()
        .map(|f| cap(&redactor.text(f, View::Durable)))
        .collect();
    if offer.truncated {
        notes.push(format!(
            "a resource or prompt list was cut at {MAX_TOOLS} entries"
        ));
    }
    let mut shaper = Shaper {
        server: &declaration.server_id,
        declaration,
        redactor,
        hidden: 0,
    };
    let offered = Offered {
        resources: shaper.resources(offer.resources),
        templates: shaper.templates(offer.templates),
        prompts: shaper.prompts(offer.prompts),
        identity: shaper.identity(offer.identity),
        held: Vec::new(),
    };
    if shaper.hidden > 0 {
        notes.push(format!(
            "{} resource(s), template(s) or prompt(s) hidden: the URI or name contains a secret value",
            shaper.hidden
        ));
    }
    (offered, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pin is kept per URI template: a second template with the same one (another
    /// name, another description) is dropped, never shown under the first's approval.
    #[test]
    fn of_two_templates_with_one_uri_template_the_first_is_kept() {
        let declaration = crate::offer::test_declaration("command: x\n");
        let template = |name: &str, uri: &str| {
            let mut t = ResourceTemplate::new(uri, name);
            t.description = Some(format!("{name} things"));
            t
        };
        let offer = Offer {
            templates: vec![
                template("notes", "file:///{path}"),
                template("keys", "file:///{path}"),
                template("logs", "log:///{day}"),
            ],
            ..Offer::default()
        };
        let (offered, _) = shape_offer(offer, &declaration, &Redactor::new());
        let kept: Vec<(&str, &str)> = offered
            .templates
            .iter()
            .map(|t| (t.name.as_str(), t.uri_template.as_str()))
            .collect();
        assert_eq!(
            kept,
            [("notes", "file:///{path}"), ("logs", "log:///{day}")]
        );
    }
}
