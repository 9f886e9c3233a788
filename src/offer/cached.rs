//! A server's last listing, kept on disk so a later session can offer its tools without
//! starting it (`start: lazy`): `<home>/listings/<pin key>.json`, one per principal,
//! declaration fingerprint and workspace (the key of its pin file), written 0600
//! through a temporary file. It holds what a turn offers as shaped, so no secret: the
//! shaping redacted every text before it was kept.
//!
//! Adversary: whoever can write the home (threat model: the operator's own account, or
//! a local process under it). A file that is too large, not a regular file, or does not
//! parse is not used: the server is started as if there were none. Bounds:
//! [`MAX_LISTING_FILE`].

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::{Offered, PromptInfo, ResourceInfo, ServerIdentity, Shaped, TemplateInfo};

/// Largest listing file read (a server's tools at their bounds fit well within it).
pub const MAX_LISTING_FILE: u64 = 32 * 1024 * 1024;

/// What the file format is; a file of another is not used.
const FORMAT: u32 = 1;

/// A listing as kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CachedListing {
    format: u32,
    /// When it was listed (seconds since the Unix epoch).
    pub written: u64,
    pub tools: Vec<rmcp::model::Tool>,
    pub identity: ServerIdentity,
    pub resources: Vec<ResourceInfo>,
    pub templates: Vec<TemplateInfo>,
    pub prompts: Vec<PromptInfo>,
    /// Tools the server listed, before bounds and filters.
    pub listed: usize,
    /// What the shaping found wrong: a diagnostic of every turn, as when it is live.
    pub notes: Vec<String>,
}

impl CachedListing {
    /// What `shaped` keeps, listed now. `None` while it holds something back: only a
    /// listing a person approved whole is offered without its server.
    pub(crate) fn of(shaped: &Shaped) -> Option<Self> {
        if !shaped.offer.held.is_empty() || shaped.held.is_some() {
            return None;
        }
        Some(CachedListing {
            format: FORMAT,
            written: seconds(SystemTime::now()),
            tools: shaped.tools.clone(),
            identity: shaped.offer.identity.clone(),
            resources: shaped.offer.resources.clone(),
            templates: shaped.offer.templates.clone(),
            prompts: shaped.offer.prompts.clone(),
            listed: shaped.listed,
            notes: shaped.notes.clone(),
        })
    }

    /// Its offer beside tools, as a turn holds it.
    pub(crate) fn offered(&self) -> Offered {
        Offered {
            identity: self.identity.clone(),
            resources: self.resources.clone(),
            templates: self.templates.clone(),
            prompts: self.prompts.clone(),
            held: Vec::new(),
        }
    }
}

/// Whether a listing made at `written` (seconds since the epoch) is `ttl` old or older
/// at `now`, or made in the future (a clock that moved back trusts nothing). A `ttl` of
/// zero expires every listing.
pub(crate) fn expired(written: u64, ttl: Duration, now: SystemTime) -> bool {
    let now = seconds(now);
    now < written || now - written >= ttl.as_secs()
}

fn seconds(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Where the listing of `key` is kept.
pub(crate) fn listing_path(home: &Path, key: &str) -> PathBuf {
    home.join("listings").join(format!("{key}.json"))
}

/// Keeps `listing` as the listing of `key`.
///
/// # Errors
/// IO errors.
pub(crate) fn remember(home: &Path, key: &str, listing: &CachedListing) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(listing).map_err(std::io::Error::other)?;
    crate::process::write_private(&listing_path(home, key), &bytes)
}

/// Forgets the listing of `key` (a start that failed, a listing that holds something).
pub(crate) fn forget(home: &Path, key: &str) {
    let _ = std::fs::remove_file(listing_path(home, key));
}

/// The listing of `key`, when there is a usable one: a regular file of its format,
/// within the bounds a listing is shaped to (whoever wrote it).
pub(crate) fn recall(home: &Path, key: &str) -> Option<CachedListing> {
    let bytes = crate::process::read_regular(&listing_path(home, key), MAX_LISTING_FILE)?;
    let listing: CachedListing = serde_json::from_slice(&bytes).ok()?;
    (listing.format == FORMAT && listing.within_bounds()).then_some(listing)
}

impl CachedListing {
    /// Whether every list and text is within what shaping a listing keeps: a file
    /// that holds more was not written by this runtime, and is not used.
    fn within_bounds(&self) -> bool {
        use super::{MAX_DESCRIPTION, MAX_INSTRUCTIONS, MAX_PROMPT_ARGUMENTS, MAX_TITLE, MAX_URI};
        let max = crate::transport::MAX_TOOLS;
        let fits = |text: &str, bound: usize| text.chars().count() <= bound + 1;
        let short = |text: &Option<String>| text.as_deref().is_none_or(|t| fits(t, MAX_TITLE));
        let said = |text: &Option<String>| text.as_deref().is_none_or(|t| fits(t, MAX_DESCRIPTION));
        let lists = self.tools.len() <= max
            && self.resources.len() <= max
            && self.templates.len() <= max
            && self.prompts.len() <= max
            && self.notes.len() <= 64;
        let tools = self.tools.iter().all(|t| {
            fits(&t.name, MAX_TITLE)
                && t.title.as_deref().is_none_or(|x| fits(x, MAX_TITLE))
                && t.description
                    .as_deref()
                    .is_none_or(|d| fits(d, MAX_DESCRIPTION))
        });
        let resources = self.resources.iter().all(|r| {
            fits(&r.uri, MAX_URI)
                && fits(&r.name, MAX_TITLE)
                && short(&r.title)
                && said(&r.description)
        });
        let templates = self.templates.iter().all(|t| {
            fits(&t.uri_template, MAX_URI) && fits(&t.name, MAX_TITLE) && said(&t.description)
        });
        let prompts = self.prompts.iter().all(|p| {
            fits(&p.name, MAX_TITLE * 2)
                && short(&p.title)
                && said(&p.description)
                && p.arguments.len() <= MAX_PROMPT_ARGUMENTS
                && p.arguments
                    .iter()
                    .all(|a| fits(&a.name, MAX_TITLE) && said(&a.description))
        });
        let identity = fits(&self.identity.name, MAX_TITLE)
            && fits(&self.identity.version, MAX_TITLE)
            && short(&self.identity.title)
            && self
                .identity
                .instructions
                .as_deref()
                .is_none_or(|i| fits(i, MAX_INSTRUCTIONS));
        let notes = self.notes.iter().all(|n| fits(n, MAX_DESCRIPTION));
        lists && tools && resources && templates && prompts && identity && notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_is_kept_recalled_and_refused_when_broken() {
        let home = tempfile::tempdir().unwrap();
        let mut shaped = Shaped {
            listed: 1,
            ..Shaped::default()
        };
        shaped.offer.identity.server = "docs".into();
        let listing = CachedListing::of(&shaped).unwrap();
        remember(home.path(), "k", &listing).unwrap();
        let back = recall(home.path(), "k").unwrap();
        assert_eq!(back.identity.server, "docs");
        let ttl = Duration::from_secs(60);
        assert!(!expired(back.written, ttl, SystemTime::now()));
        let later = SystemTime::now() + Duration::from_secs(120);
        assert!(expired(back.written, ttl, later));
        let earlier = SystemTime::now() - Duration::from_secs(3600);
        assert!(expired(back.written, ttl, earlier));
        assert!(expired(back.written, Duration::ZERO, SystemTime::now()));
        std::fs::write(listing_path(home.path(), "k"), b"{not json").unwrap();
        assert!(recall(home.path(), "k").is_none());
        assert!(recall(home.path(), "absent").is_none());
        // A file past the bounds a listing is shaped to is not one this runtime wrote.
        let mut long = listing.clone();
        long.identity.instructions = Some("x".repeat(crate::offer::MAX_INSTRUCTIONS + 10));
        remember(home.path(), "long", &long).unwrap();
        assert!(recall(home.path(), "long").is_none());
        // Nor is anything but a regular file: a FIFO is refused, not waited on.
        let fifo = listing_path(home.path(), "fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(recall(home.path(), "fifo").is_none());
        shaped.offer.held.push(crate::pins::Held {
            kind: crate::pins::DefinitionKind::Tool,
            name: "x".into(),
        });
        assert!(CachedListing::of(&shaped).is_none());
    }
}
