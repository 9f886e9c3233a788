//! After a listing (a new connection or a relisting): what the server serves, compared
//! with what a person approved (`crate::pins`). The first listing after a declaration's
//! connect approval is pinned as it is, unless the same server (path, principal,
//! workspace) was pinned under an earlier declaration, whose approvals it is compared
//! with. A later listing with changed or new definitions asks the approver once per
//! change set under `pinning: strict` and holds them back from the turn until approved,
//! or uses them under `warn`; each change is an `mcp.definition_changed` event with its
//! diff. A pin file that cannot be read trusts nothing: everything waits for a person.

use std::sync::Arc;

use crate::authority::{Action, ApprovalRequest, ApprovalSource, ChangeReview, ConnectPreview};
use crate::core::{ApprovalPolicy, Declaration, Pinning};
use crate::events::EventKind;
use crate::offer::{Shaped, all_approved, pins_of, withhold};
use crate::pins::{self, Change, Held, Loaded, Pin, PinFile, Watch};
use crate::redact::{Redactor, View};

use super::Pipeline;

/// Changes of one listing whose diff is rendered, reported and named in diagnostics;
/// the rest are counted.
const MAX_SHOWN_CHANGES: usize = 20;

/// Where a listing came from.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(in crate::actors::catalog) enum Listing {
    /// A new connection, just approved.
    Connect,
    /// A live connection's relisting.
    Relist,
}

/// What asking about a change set left: the pin file as reloaded after the question,
/// the changes still waiting, and what a yes approved.
struct Asked {
    file: Option<Arc<PinFile>>,
    waiting: Vec<Change>,
    approved: Vec<Pin>,
}

/// What became of a change set.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A person approved it: pinned, used.
    Approved,
    /// `pinning: warn`: used, and reported every turn until approved.
    Allowed,
    /// Held back until a person approves it.
    Quarantined,
}

impl Verdict {
    fn as_str(self) -> &'static str {
        match self {
            Verdict::Approved => "approved",
            Verdict::Allowed => "allowed",
            Verdict::Quarantined => "quarantined",
        }
    }
}

impl Pipeline {
    /// `shaped` checked against the pins of `declaration` for this principal and
    /// workspace (see the module documentation).
    pub(super) async fn pin(
        &self,
        declaration: &Arc<Declaration>,
        redactor: &Redactor,
        mut shaped: Shaped,
        listing: Listing,
    ) -> Shaped {
        let policy = self.shared.config.pinning.of(declaration);
        if policy == Pinning::Off {
            return shaped;
        }
        let key = self.pin_key(declaration);
        // The usual listing: everything served as approved, nothing waiting. Decided
        // from digests alone; what follows would find no change and write nothing.
        let loaded = self.shared.pins.load(&key);
        if let Loaded::Found(file) = &loaded
            && file.pending.is_empty()
            && all_approved(
                &self.shared.tools,
                &file.approved,
                &shaped.tools,
                &shaped.offer,
                declaration,
            )
        {
            return shaped;
        }
        let served = pins_of(&shaped.tools, &shaped.offer, declaration);
        let Some((mut file, mut dirty)) =
            self.baseline(declaration, &key, loaded, &served, listing, &mut shaped)
        else {
            return shaped;
        };
        let mut changes = pins::compare(&file.approved, &served);
        let mut approved_now: Vec<Pin> = Vec::new();
        let verdict = match policy {
            _ if changes.is_empty() => Verdict::Approved,
            Pinning::Warn => {
                let diffs = render(&changes, redactor);
                self.report_changes(declaration, &changes, diffs, Verdict::Allowed);
                Verdict::Allowed
            }
            _ => {
                let asked = self
                    .ask_once(declaration, redactor, &key, &served, changes)
                    .await;
                if let Some(now) = asked.file {
                    (file, dirty) = (now, false);
                }
                (changes, approved_now) = (asked.waiting, asked.approved);
                if changes.is_empty() {
                    Verdict::Approved
                } else {
                    Verdict::Quarantined
                }
            }
        };
        // The file as loaded is shared with the store's memory: changed, it is copied.
        if !approved_now.is_empty() {
            Arc::make_mut(&mut file).take(approved_now);
            dirty = true;
        }
        let waiting: Vec<Pin> = changes.iter().map(|c| c.after.clone()).collect();
        if verdict == Verdict::Approved {
            if !file.pending.is_empty() {
                Arc::make_mut(&mut file).pending.clear();
                dirty = true;
            }
        } else if file.pending != waiting {
            Arc::make_mut(&mut file).pending = waiting;
            dirty = true;
        }
        if dirty {
            self.store_pins(&key, Arc::make_mut(&mut file), &mut shaped);
        }
        if verdict != Verdict::Approved {
            self.note_changes(declaration, &changes, verdict, &mut shaped);
        }
        if verdict == Verdict::Quarantined {
            let watch = Watch {
                store: self.shared.pins.clone(),
                stamp: std::sync::Mutex::new(self.shared.pins.stamp(&key)),
                approved: file.approved_digest(),
                key,
            };
            hold(&changes, watch, &mut shaped);
        }
        shaped
    }

    /// Under `strict`: asks about `changes` unless this session refused this server
    /// before, then compares again with the pin file as it is now (a person may have
    /// taken minutes). Returns the file as reloaded, the changes still waiting, and the
    /// definitions a yes approved (exactly those the question showed).
    async fn ask_once(
        &self,
        declaration: &Arc<Declaration>,
        redactor: &Redactor,
        key: &str,
        served: &[Pin],
        mut changes: Vec<Change>,
    ) -> Asked {
        let server = declaration.fingerprint.hex();
        let shown = match self.shared.refused_changes.contains(&self.session, &server) {
            true => None,
            false => self.ask_change(declaration, redactor, &changes).await,
        };
        let now = match self.shared.pins.load(key) {
            Loaded::Found(now) => Some(now),
            _ => None,
        };
        if let Some(now) = &now {
            changes = pins::compare(&now.approved, served);
        }
        let mut approved = Vec::new();
        if let Some(shown) = shown {
            let (yes, rest): (Vec<Change>, Vec<Change>) =
                changes.into_iter().partition(|c| shown.contains(&c.after));
            approved = yes.into_iter().map(|c| c.after).collect();
            changes = rest;
        }
        Asked {
            file: now,
            waiting: changes,
            approved,
        }
    }

    /// What `served` is compared with, and whether the file must be written: the pin
    /// file of `key` (`loaded`: read once for this listing); for a declaration pinned
    /// under an earlier fingerprint, its
    /// approvals; nothing for a file that cannot be read or a relisting after the pins
    /// were reset. `None` when the listing is the first and is pinned as it is.
    fn baseline(
        &self,
        declaration: &Declaration,
        key: &str,
        loaded: Loaded,
        served: &[Pin],
        listing: Listing,
        shaped: &mut Shaped,
    ) -> Option<(Arc<PinFile>, bool)> {
        let store = &self.shared.pins;
        let fresh = self.pin_file(declaration);
        match loaded {
            Loaded::Found(file) => Some((file, false)),
            Loaded::Unusable => {
                self.unreadable(declaration, shaped);
                Some((Arc::new(fresh), true))
            }
            Loaded::Absent => {
                match store.predecessor(key) {
                    Loaded::Found(before) => {
                        let approved = Arc::unwrap_or_clone(before).approved;
                        return Some((Arc::new(PinFile { approved, ..fresh }), true));
                    }
                    Loaded::Unusable => {
                        self.unreadable(declaration, shaped);
                        return Some((Arc::new(fresh), true));
                    }
                    Loaded::Absent => {}
                }
                if listing == Listing::Relist {
                    // The pins were reset under a live connection: what it serves now
                    // was never approved.
                    return Some((Arc::new(fresh), true));
                }
                let mut first = PinFile {
                    approved: served.iter().map(|p| p.clone().flagged()).collect(),
                    ..fresh
                };
                match store.create(key, &mut first) {
                    Ok(true) => None,
                    // Another session pinned this server first: compared with its pins.
                    Ok(false) => match store.load(key) {
                        Loaded::Found(file) => Some((file, false)),
                        _ => Some((Arc::new(self.pin_file(declaration)), true)),
                    },
                    Err(e) => {
                        self.cannot_store(&e, shaped);
                        None
                    }
                }
            }
        }
    }

    /// What the server served when last pinned whose text may hide something, for the
    /// connect preview: `kind `name`: flags`, escaped, at most 20.
    pub(super) fn flagged(&self, declaration: &Declaration) -> Vec<String> {
        if self.shared.config.pinning.of(declaration) == Pinning::Off {
            return Vec::new();
        }
        let key = self.pin_key(declaration);
        let Loaded::Found(file) = self.shared.pins.load(&key) else {
            return Vec::new();
        };
        file.approved
            .iter()
            .chain(&file.pending)
            .filter(|p| !p.flags.is_empty())
            .take(MAX_SHOWN_CHANGES)
            .map(|p| {
                format!(
                    "{} `{}`: {}",
                    p.kind.as_str(),
                    crate::text::escape(&p.name),
                    p.flags_in_words()
                )
            })
            .collect()
    }

    /// The pin file of `declaration` for this principal and workspace.
    pub(in crate::actors::catalog) fn pin_key(&self, declaration: &Declaration) -> String {
        pins::pin_key(
            &self.principal,
            &declaration.server_id,
            &declaration.path,
            &declaration.fingerprint,
            &self.workspace,
        )
    }

    /// An empty pin file of `declaration`.
    fn pin_file(&self, declaration: &Declaration) -> PinFile {
        PinFile {
            server: declaration.server_id.clone(),
            path: declaration.path.clone(),
            principal: self.principal.clone(),
            workspace: self.workspace.to_string_lossy().into_owned(),
            fingerprint: declaration.fingerprint.hex(),
            ..PinFile::default()
        }
    }

    /// Writes `file`; a failure is a diagnostic (the next listing compares with what
    /// the file still says).
    fn store_pins(&self, key: &str, file: &mut PinFile, shaped: &mut Shaped) {
        if let Err(e) = self.shared.pins.save(key, file) {
            self.cannot_store(&e, shaped);
        }
    }

    /// A pin file of this server that cannot be read: nothing it may have approved is
    /// trusted, and the file is replaced by one in which everything waits.
    fn unreadable(&self, declaration: &Declaration, shaped: &mut Shaped) {
        let server = &declaration.server_id;
        shaped.notes.push(format!(
            "a pin file of this server cannot be read (malformed or too large), so nothing it served before is trusted: every definition waits for review (`demiurge pins show {server}`, then `demiurge pins approve {server}`)"
        ));
    }

    fn cannot_store(&self, e: &std::io::Error, shaped: &mut Shaped) {
        shaped.notes.push(format!(
            "cannot store what the server serves under {}: {}",
            self.shared.config.home.join("pins").display(),
            e.kind()
        ));
    }

    /// The diagnostics of changes used under `warn` or held back: the first few by
    /// name, the rest counted.
    fn note_changes(
        &self,
        declaration: &Declaration,
        changes: &[Change],
        verdict: Verdict,
        shaped: &mut Shaped,
    ) {
        let server = &declaration.server_id;
        let what = match verdict {
            Verdict::Allowed => {
                format!("used under `pinning: warn`; review it with `demiurge pins show {server}`")
            }
            _ => format!(
                "held back until a person reviews it: `demiurge pins show {server}`, then `demiurge pins approve {server}` (or one: `... KIND:NAME --digest HEX`)"
            ),
        };
        shaped
            .notes
            .extend(changes.iter().take(MAX_SHOWN_CHANGES).map(|c| {
                format!(
                    "{} `{}` {} since it was approved and is {what}",
                    c.after.kind.as_str(),
                    crate::text::escape(&c.after.name),
                    c.how(),
                )
            }));
        if changes.len() > MAX_SHOWN_CHANGES {
            shaped.notes.push(format!(
                "and {} more changed or new definitions, each {what}",
                changes.len() - MAX_SHOWN_CHANGES
            ));
        }
    }

    /// Asks whether the model may see `changes`: `Some` of the definitions the
    /// question showed when a person approved (a declaration's `approval: auto` never
    /// answers it; the broker neither caches nor remembers it; a refusal is remembered
    /// for this session and server). Reports each shown change.
    async fn ask_change(
        &self,
        declaration: &Arc<Declaration>,
        redactor: &Redactor,
        changes: &[Change],
    ) -> Option<Vec<Pin>> {
        let diffs = render(changes, redactor);
        let shown: Vec<Change> = changes.iter().take(MAX_SHOWN_CHANGES).cloned().collect();
        let set = pins::change_set_digest(&shown);
        let request = ApprovalRequest {
            session: self.session.clone(),
            action: Action::Change,
            server: declaration.server_id.clone(),
            tool: Some(format!("changes#sha256:{set}")),
            arguments: None,
            preview: ConnectPreview::new(declaration, ApprovalPolicy::Prompt, None, &[]),
            call: None,
            change: Some(ChangeReview {
                set,
                changes: shown.clone(),
                diff: diffs.concat(),
            }),
        };
        let identity = declaration.approval_identity(&self.workspace, None);
        let asked = self
            .shared
            .broker
            .decide(request, identity, ApprovalPolicy::Prompt)
            .await;
        let approved = asked.as_ref().is_ok_and(|a| a.allowed);
        if !approved && asked.is_ok_and(|a| a.source != ApprovalSource::Deadline) {
            let server = declaration.fingerprint.hex();
            self.shared.refused_changes.insert(&self.session, &server);
        }
        let verdict = if approved {
            Verdict::Approved
        } else {
            Verdict::Quarantined
        };
        self.report_changes(declaration, &shown, diffs, verdict);
        approved.then(|| shown.into_iter().map(|c| c.after).collect())
    }

    /// One `mcp.definition_changed` event per shown change.
    fn report_changes(
        &self,
        declaration: &Declaration,
        changes: &[Change],
        diffs: Vec<String>,
        verdict: Verdict,
    ) {
        for (change, diff) in changes.iter().zip(diffs) {
            self.emit(EventKind::DefinitionChanged {
                server: declaration.server_id.clone(),
                kind: change.after.kind,
                name: change.after.name.clone(),
                change: change.how().into(),
                before: change.before.as_ref().map(|b| b.digest.clone()),
                after: change.after.digest.clone(),
                action: verdict.as_str().into(),
                flags: change.after.flags.clone(),
                diff,
            });
        }
    }
}

/// Leaves `changes` out of `shaped` until a person approves them, watching `watch`.
fn hold(changes: &[Change], watch: Watch, shaped: &mut Shaped) {
    let held: Vec<Held> = changes
        .iter()
        .map(|c| Held {
            kind: c.after.kind,
            name: c.after.name.clone(),
        })
        .collect();
    withhold(&mut shaped.tools, &mut shaped.offer, &held);
    shaped.offer.held = held;
    shaped.held = Some(watch);
}

/// The diffs of the first changes, redacted with the connection's secrets; the rest
/// counted in a last line.
fn render(changes: &[Change], redactor: &Redactor) -> Vec<String> {
    let mut diffs: Vec<String> = changes
        .iter()
        .take(MAX_SHOWN_CHANGES)
        .map(|c| redactor.text(&pins::render_change(c), View::Durable))
        .collect();
    if changes.len() > MAX_SHOWN_CHANGES
        && let Some(last) = diffs.last_mut()
    {
        last.push_str(&format!(
            "... and {} more changed or new definitions (`demiurge pins show` lists them)\n",
            changes.len() - MAX_SHOWN_CHANGES
        ));
    }
    diffs
}
