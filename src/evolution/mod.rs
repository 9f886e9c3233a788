//! Evolution review and promotion: a secret-safe security diff of the MCP surface
//! between the live revision of an Agent Core and a candidate commit, a content-bound
//! review token, and promotion that moves `refs/demiurge/live` and
//! `refs/demiurge/previous` together, atomically, with compare-and-swap.
//!
//! # The review token
//! `mcp-review:` followed by the lowercase hex sha256 of this UTF-8 text:
//! ```text
//! demiurge-mcp-review/v2\n
//! ["<path>","<change>","<before>","<after>"]\n   (one JSON array per change, sorted by path)
//! ```
//! Each line is a JSON array, so no path or grant name (which may hold tabs or newlines)
//! can run into the next field. Paths are relative to the core (`agent/mcp/docs.yaml`);
//! MCP root changes use the path `agent.yaml#slots.mcp` and grant changes
//! `agent.yaml#capabilities.defaults.<name>`. `<before>` and `<after>` are `-` when
//! absent, else a kind and a sha256: `valid:` and the server fingerprint (over server
//! id, path and the canonical declaration, secrets included), `invalid:` and the
//! broken file's digest (of its bytes, domain-separated), `root:` or `grant:` and the
//! sha256 of the value. The kind is part of what is bound: a file that does not load
//! can never share a token with one that does. The same change gives the same token on
//! any machine; any change to reviewed content, a secret included, gives another.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use gix::ObjectId;
use serde::Serialize;
use serde_json::{Value, json};

use crate::authority::{ConnectPreview, HostPolicy};
use crate::core::{self, CoreTree, Declaration, Endpoint, Fingerprint};

/// The live revision.
pub const LIVE_REF: &str = "refs/demiurge/live";
/// The revision before the live one.
pub const PREVIOUS_REF: &str = "refs/demiurge/previous";

/// What went wrong; every message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvolutionError {
    /// The core is not inside a git work tree.
    #[error("{0} is not inside a git repository; evolution review needs the Agent Core under git")]
    NotARepository(String),
    /// A revision did not resolve to a commit.
    #[error("cannot resolve `{0}` to a commit; pass a commit id, branch or tag")]
    BadRevision(String),
    /// Reading the repository failed.
    #[error("git error: {0}")]
    Git(String),
    /// Changes were found but no token was given.
    #[error(
        "promotion refused: the MCP surface changes and no review token was given; run `demiurge review {0}` and pass its token with --review-token"
    )]
    MissingToken(String),
    /// The token does not match the current review.
    #[error(
        "promotion refused: the review token does not match the current changes (stale or wrong); run `demiurge review {0}` again and pass the new token"
    )]
    StaleToken(String),
    /// The approver said no.
    #[error("promotion refused: approval denied")]
    Denied,
    /// A ref moved between reading and updating.
    #[error("promotion refused: {0} changed concurrently; review again and retry")]
    Moved(String),
}

fn git(e: impl std::fmt::Display) -> EvolutionError {
    EvolutionError::Git(e.to_string())
}

/// One declaration as found at a revision.
#[derive(Debug, Clone)]
enum Found {
    Valid {
        declaration: Box<Declaration>,
    },
    Invalid {
        errors: Vec<String>,
        digest: Fingerprint,
    },
}

/// The MCP surface of a core at one revision.
#[derive(Debug, Clone, Default)]
struct Snapshot {
    mcp_root: String,
    grants: BTreeSet<String>,
    declarations: BTreeMap<String, Found>,
}

/// An Agent Core inside a git repository.
pub struct CoreRepo {
    repo: gix::Repository,
    /// The core directory relative to the work tree (`""` at the root).
    core_rel: PathBuf,
}

impl CoreRepo {
    /// Opens the repository containing `core`.
    ///
    /// # Errors
    /// [`EvolutionError::NotARepository`].
    pub fn open(core: &Path) -> Result<Self, EvolutionError> {
        let not_repo = || EvolutionError::NotARepository(core.display().to_string());
        let core = core.canonicalize().map_err(|_| not_repo())?;
        let repo = gix::discover(&core).map_err(|_| not_repo())?;
        let workdir = repo
            .workdir()
            .ok_or_else(not_repo)?
            .canonicalize()
            .map_err(|_| not_repo())?;
        let core_rel = core
            .strip_prefix(&workdir)
            .map_err(|_| not_repo())?
            .to_path_buf();
        Ok(CoreRepo { repo, core_rel })
    }

    /// A commit id for `rev` (id, branch, tag, `HEAD`).
    ///
    /// # Errors
    /// [`EvolutionError::BadRevision`].
    pub fn resolve(&self, rev: &str) -> Result<ObjectId, EvolutionError> {
        let id = self
            .repo
            .rev_parse_single(rev)
            .map_err(|_| EvolutionError::BadRevision(rev.to_string()))?;
        let commit = id
            .object()
            .map_err(git)?
            .peel_to_commit()
            .map_err(|_| EvolutionError::BadRevision(rev.to_string()))?;
        Ok(commit.id)
    }

    /// The commit a ref points to, if the ref exists.
    ///
    /// # Errors
    /// [`EvolutionError`] when the repository cannot be read.
    pub fn read_ref(&self, name: &str) -> Result<Option<ObjectId>, EvolutionError> {
        match self.repo.try_find_reference(name).map_err(git)? {
            Some(mut r) => Ok(Some(r.peel_to_id().map_err(git)?.detach())),
            None => Ok(None),
        }
    }

    fn snapshot(&self, commit: Option<ObjectId>) -> Result<Snapshot, EvolutionError> {
        let Some(commit) = commit else {
            return Ok(Snapshot {
                mcp_root: core::DEFAULT_MCP_ROOT.into(),
                ..Snapshot::default()
            });
        };
        let tree = self
            .repo
            .find_commit(commit)
            .map_err(git)?
            .tree()
            .map_err(git)?;
        let files = GitTree {
            repo: &self.repo,
            tree,
            core_rel: &self.core_rel,
            shown: PathBuf::new(),
        };
        // The very function the loader uses on a checkout: one definition of what a
        // revision declares.
        let report = core::read_revision(&files, Path::new(""), None);
        let mut declarations = BTreeMap::new();
        if !report.manifest_errors.is_empty() {
            // A broken agent.yaml stops the core: the runtime loads no server at all, so
            // the review shows none, only what is wrong with agent.yaml.
            let digest = match files.read("agent.yaml", core::MAX_FILE_BYTES) {
                Ok(bytes) => core::broken_digest(&bytes),
                Err(_) => core::broken_digest(files.kind("agent.yaml").describe().as_bytes()),
            };
            let errors = report
                .manifest_errors
                .iter()
                .map(ToString::to_string)
                .collect();
            declarations.insert("agent.yaml".to_string(), Found::Invalid { errors, digest });
            return Ok(Snapshot {
                mcp_root: report.core.mcp_root,
                grants: BTreeSet::new(),
                declarations,
            });
        }
        for d in &report.core.declarations {
            declarations.insert(
                d.path.clone(),
                Found::Valid {
                    declaration: Box::new(d.as_ref().clone()),
                },
            );
        }
        for b in &report.core.broken {
            declarations.insert(
                b.path.clone(),
                Found::Invalid {
                    errors: b.errors.iter().map(ToString::to_string).collect(),
                    digest: b.digest,
                },
            );
        }
        let grants = report
            .core
            .grants
            .iter()
            .filter(|g| g.starts_with("mcp."))
            .cloned()
            .collect();
        Ok(Snapshot {
            mcp_root: report.core.mcp_root,
            grants,
            declarations,
        })
    }

    /// The core as it is in commit `id`, read exactly as a review reads it: what a
    /// session following the live revision runs, whatever the working tree holds
    /// (untracked, ignored or edited files included). Paths in errors start at `root`.
    ///
    /// # Errors
    /// Git errors; a commit whose `agent.yaml` does not load gives [`core::CoreErrors`]
    /// in the `Ok` side's `Err`.
    pub fn load_commit(
        &self,
        id: ObjectId,
        root: &Path,
    ) -> Result<Result<core::AgentCore, core::CoreErrors>, EvolutionError> {
        let tree = self
            .repo
            .find_commit(id)
            .map_err(git)?
            .tree()
            .map_err(git)?;
        let files = GitTree {
            repo: &self.repo,
            tree,
            core_rel: &self.core_rel,
            shown: root.to_path_buf(),
        };
        let report = core::read_revision(&files, root, None);
        Ok(if report.manifest_errors.is_empty() {
            Ok(report.core)
        } else {
            Err(core::CoreErrors(report.errors))
        })
    }

    /// The security review between the live revision (empty when absent) and `candidate`.
    ///
    /// # Errors
    /// Unresolvable revisions, git errors.
    pub fn review(&self, candidate: &str) -> Result<Review, EvolutionError> {
        let live = self.read_ref(LIVE_REF)?;
        let candidate_id = self.resolve(candidate)?;
        self.review_between(live, candidate_id)
    }

    fn review_between(
        &self,
        live: Option<ObjectId>,
        candidate: ObjectId,
    ) -> Result<Review, EvolutionError> {
        let before = self.snapshot(live)?;
        let after = self.snapshot(Some(candidate))?;
        let changes = diff(&before, &after);
        let token = token(&changes);
        Ok(Review {
            live: live.map(|l| l.to_string()),
            candidate: candidate.to_string(),
            changes,
            token,
        })
    }

    /// Promotes `candidate`: needs `approve` and, when the review finds changes, the
    /// exact current `token`. On success previous <- old live and live <- candidate in
    /// one transaction that checks both refs still hold what was read; on any refusal
    /// or error both refs are left exactly as they were.
    ///
    /// # Errors
    /// [`EvolutionError`] saying why and what to run.
    pub fn promote(
        &self,
        candidate: &str,
        token: Option<&str>,
        approve: impl FnOnce(&Review) -> bool,
    ) -> Result<Promotion, EvolutionError> {
        use gix::refs::Target;
        use gix::refs::transaction::{Change, LogChange, PreviousValue, RefEdit, RefLog};

        let live = self.read_ref(LIVE_REF)?;
        let previous = self.read_ref(PREVIOUS_REF)?;
        let candidate_id = self.resolve(candidate)?;
        let review = self.review_between(live, candidate_id)?;
        if !review.changes.is_empty() {
            match token {
                None => return Err(EvolutionError::MissingToken(candidate.to_string())),
                Some(t) if t.trim() != review.token => {
                    return Err(EvolutionError::StaleToken(candidate.to_string()));
                }
                Some(_) => {}
            }
        }
        if !approve(&review) {
            return Err(EvolutionError::Denied);
        }
        let expect = |id: Option<ObjectId>| match id {
            Some(id) => PreviousValue::MustExistAndMatch(Target::Object(id)),
            None => PreviousValue::MustNotExist,
        };
        let log = |message: String| LogChange {
            mode: RefLog::AndReference,
            force_create_reflog: false,
            message: message.into(),
        };
        let name = |n: &str| n.try_into().map_err(git);
        let mut edits = vec![RefEdit {
            change: Change::Update {
                log: log(format!("demiurge promote {candidate_id}")),
                expected: expect(live),
                new: Target::Object(candidate_id),
            },
            name: name(LIVE_REF)?,
            deref: false,
        }];
        if let Some(old_live) = live {
            edits.push(RefEdit {
                change: Change::Update {
                    log: log(format!("demiurge promote: previous live {old_live}")),
                    expected: expect(previous),
                    new: Target::Object(old_live),
                },
                name: name(PREVIOUS_REF)?,
                deref: false,
            });
        }
        let time = format!(
            "{} +0000",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        );
        let committer = gix::actor::SignatureRef {
            name: "demiurge".into(),
            email: "demiurge@localhost".into(),
            time: &time,
        };
        self.repo
            .edit_references_as(edits, Some(committer))
            .map_err(|e| EvolutionError::Moved(format!("{LIVE_REF} or {PREVIOUS_REF} ({e})")))?;
        Ok(Promotion {
            live: candidate_id.to_string(),
            previous: live.map(|l| l.to_string()),
            review,
        })
    }
}

/// One commit of the core's repository, read like a checkout (see
/// [`core::read_revision`]). Tree entries carry their kind: a symlink is a `120000`
/// entry (never followed), a submodule a commit entry.
struct GitTree<'r> {
    repo: &'r gix::Repository,
    tree: gix::Tree<'r>,
    core_rel: &'r Path,
    /// What error messages name paths from (empty in a review: paths stay relative).
    shown: PathBuf,
}

impl GitTree<'_> {
    fn kind_of(&self, mode: gix::object::tree::EntryMode, id: ObjectId) -> core::EntryKind {
        if mode.is_blob() {
            let len = self.repo.find_header(id).map_or(u64::MAX, |h| h.size());
            core::EntryKind::File { len, stamp: None }
        } else if mode.is_tree() {
            core::EntryKind::Dir
        } else if mode.is_link() {
            core::EntryKind::Symlink
        } else {
            core::EntryKind::Other("a git submodule")
        }
    }

    fn lookup(&self, rel: &str) -> Option<gix::object::tree::Entry<'_>> {
        self.tree
            .lookup_entry_by_path(self.core_rel.join(rel))
            .ok()
            .flatten()
    }
}

impl core::CoreTree for GitTree<'_> {
    fn kind(&self, rel: &str) -> core::EntryKind {
        match self.lookup(rel) {
            Some(entry) => self.kind_of(entry.mode(), entry.object_id()),
            None => core::EntryKind::Missing,
        }
    }

    fn list(&self, rel: &str) -> Result<Vec<(Result<String, String>, core::EntryKind)>, String> {
        let entry = self.lookup(rel).ok_or("not in this commit")?;
        if !entry.mode().is_tree() {
            return Err("not a directory".into());
        }
        let dir = entry.object().map_err(|e| e.to_string())?.into_tree();
        let mut out = Vec::new();
        for item in dir.iter() {
            let item = item.map_err(|e| e.to_string())?;
            let name = std::str::from_utf8(item.filename())
                .map(str::to_string)
                .map_err(|_| String::from_utf8_lossy(item.filename()).into_owned());
            out.push((name, self.kind_of(item.mode(), item.oid().to_owned())));
        }
        Ok(out)
    }

    fn read(&self, rel: &str, max: u64) -> Result<Vec<u8>, core::ReadRefusal> {
        let entry = self
            .lookup(rel)
            .ok_or(core::ReadRefusal::NotAFile(core::EntryKind::Missing))?;
        match self.kind_of(entry.mode(), entry.object_id()) {
            core::EntryKind::File { len, .. } if len > max => {
                Err(core::ReadRefusal::TooLarge { max })
            }
            core::EntryKind::File { .. } => entry
                .object()
                .map(|o| o.detach().data)
                .map_err(|e| core::ReadRefusal::Io(e.to_string())),
            other => Err(core::ReadRefusal::NotAFile(other)),
        }
    }

    fn display(&self, rel: &str) -> PathBuf {
        self.shown.join(rel)
    }
}

/// The current live revision of the repository holding `core`, if any (for catalog
/// identity: a promotion changes it, which reauthorizes catalogs).
pub fn live_revision(core: &Path) -> Option<String> {
    let repo = CoreRepo::open(core).ok()?;
    repo.read_ref(LIVE_REF)
        .ok()
        .flatten()
        .map(|id| id.to_string())
}

/// Live revisions by core, each kept while the two files git reads the live ref from
/// (its loose file and `packed-refs`, in the common git directory) keep their metadata:
/// a warm turn of a core that follows its live ref stats two files instead of opening
/// the repository (about a millisecond). A promotion writes the loose ref through a
/// lock file and a rename, `git pack-refs` removes it and rewrites `packed-refs`: both
/// change a stamp. Refs written within the last second are not cached (see
/// `Stamp::settled`).
#[derive(Debug, Default)]
pub struct LiveRevisions {
    known: std::sync::Mutex<std::collections::HashMap<PathBuf, KnownLive>>,
}

#[derive(Debug)]
struct KnownLive {
    files: [PathBuf; 2],
    stamps: [Option<core::Stamp>; 2],
    revision: Option<String>,
}

impl LiveRevisions {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a revision of `core` is held (it is read from git otherwise).
    pub fn holds(&self, core: &Path) -> bool {
        self.known.lock().is_ok_and(|k| k.contains_key(core))
    }

    /// [`live_revision`] of `core`, from the cache while its ref files are unchanged.
    /// A directory that is not in a repository is not cached (it may become one).
    pub fn get(&self, core: &Path) -> Option<String> {
        if let Ok(known) = self.known.lock()
            && let Some(k) = known.get(core)
            && k.files
                .iter()
                .map(|f| core::Stamp::of(f))
                .eq(k.stamps.iter().cloned())
        {
            return k.revision.clone();
        }
        let repo = CoreRepo::open(core).ok()?;
        let common = repo.repo.common_dir();
        let files = [common.join(LIVE_REF), common.join("packed-refs")];
        // Stamped before reading: a write in between shows as a change next time.
        let stamps = [core::Stamp::of(&files[0]), core::Stamp::of(&files[1])];
        let (revision, direct) = match repo.repo.try_find_reference(LIVE_REF) {
            Ok(Some(mut r)) => {
                let direct = matches!(r.target(), gix::refs::TargetRef::Object(_));
                (r.peel_to_id().ok().map(|id| id.to_string()), direct)
            }
            Ok(None) => (None, true),
            Err(_) => return None,
        };
        // A symbolic live ref depends on another ref's file, and a file changed within
        // the last second may change again without a new stamp: read those every time.
        let settled = stamps.iter().flatten().all(core::Stamp::settled);
        if let Ok(mut known) = self.known.lock() {
            if direct && settled {
                let revision = revision.clone();
                let entry = KnownLive {
                    files,
                    stamps,
                    revision,
                };
                known.insert(core.to_path_buf(), entry);
            } else {
                known.remove(core);
            }
        }
        revision
    }
}

/// Cores as loaded from a commit, by core root and commit id: a commit never changes,
/// so a turn of a session that follows its live revision reads no object twice.
#[derive(Debug, Default)]
pub struct LiveCores {
    cores: std::sync::Mutex<std::collections::HashMap<(PathBuf, String), Arc<core::AgentCore>>>,
}

/// Most (core, commit) pairs kept; a long-lived host that sees many promotions starts
/// over instead of growing.
const MAX_LIVE_CORES: usize = 64;

impl LiveCores {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The core at `root` as committed in `commit` (see [`CoreRepo::load_commit`]).
    ///
    /// # Errors
    /// [`core::CoreErrors`]: the commit's `agent.yaml` does not load, or git failed.
    pub fn load(
        &self,
        root: &Path,
        commit: &str,
    ) -> Result<Arc<core::AgentCore>, core::CoreErrors> {
        let key = (root.to_path_buf(), commit.to_string());
        if let Some(known) = self.cores.lock().ok().and_then(|c| c.get(&key).cloned()) {
            return Ok(known);
        }
        let failed = |message: String| {
            core::CoreErrors(vec![core::LoadError::new(
                &root.join("agent.yaml"),
                None,
                None,
                message,
            )])
        };
        let id = ObjectId::from_hex(commit.as_bytes())
            .map_err(|_| failed("the live revision is not a commit id".into()))?;
        let loaded = CoreRepo::open(root)
            .and_then(|repo| repo.load_commit(id, root))
            .map_err(|e| failed(format!("cannot read the live revision ({e})")))??;
        let loaded = Arc::new(loaded);
        if let Ok(mut cores) = self.cores.lock() {
            if cores.len() >= MAX_LIVE_CORES {
                cores.clear();
            }
            cores.insert(key, Arc::clone(&loaded));
        }
        Ok(loaded)
    }
}

/// A successful promotion.
#[derive(Debug, Clone, Serialize)]
pub struct Promotion {
    /// The new live commit.
    pub live: String,
    /// The new previous commit (the old live), if there was one.
    pub previous: Option<String>,
    /// The review it was based on.
    pub review: Review,
}

/// The security review of a candidate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Review {
    /// Live commit, if any.
    pub live: Option<String>,
    /// Candidate commit.
    pub candidate: String,
    /// Changes, sorted by path.
    pub changes: Vec<ChangeEntry>,
    /// `mcp-review:<sha256>`.
    pub token: String,
}

/// How a path changed between the live and the candidate revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// Present in the candidate only.
    Added,
    /// Present in the live revision only.
    Removed,
    /// Present in both, with different content.
    Modified,
}

impl Change {
    /// The spelling in output and in the token's canonical lines.
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Added => "added",
            Change::Removed => "removed",
            Change::Modified => "modified",
        }
    }
}

impl std::fmt::Display for Change {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangeEntry {
    /// Path relative to the core (or `agent.yaml#...`).
    pub path: String,
    /// How it changed.
    pub change: Change,
    /// Secret-safe preview before (absent for `added`).
    pub before: Option<Value>,
    /// Secret-safe preview after (absent for `removed`).
    pub after: Option<Value>,
    /// What changed, in words (a changed secret is named, never shown).
    pub details: Vec<String>,
    #[serde(skip)]
    before_fingerprint: Option<String>,
    #[serde(skip)]
    after_fingerprint: Option<String>,
}

fn preview(found: &Found) -> Value {
    match found {
        Found::Invalid { errors, .. } => json!({ "invalid": errors }),
        Found::Valid { declaration: d, .. } => {
            let policy = HostPolicy::default().connect_policy(d);
            let mut p =
                serde_json::to_value(ConnectPreview::new(d, policy, None, &[])).unwrap_or_default();
            if let (Some(map), Endpoint::Stdio { cwd, .. }) = (p.as_object_mut(), &d.endpoint) {
                map.insert(
                    "cwd".into(),
                    json!(cwd.clone().unwrap_or_else(|| "<workspace>".into())),
                );
            }
            if let Some(map) = p.as_object_mut() {
                map.insert("enabled".into(), json!(d.enabled));
                for (name, filter) in [
                    ("tools", &d.tools),
                    ("resources", &d.resources),
                    ("prompts", &d.prompts),
                ] {
                    map.insert(
                        name.into(),
                        json!({"include": filter.include, "exclude": filter.exclude}),
                    );
                }
                map.insert("log_level".into(), json!(d.log_level));
                map.insert(
                    "max_timeout_seconds".into(),
                    json!(d.max_call_timeout.map(|t| t.as_secs_f64())),
                );
                map.insert(
                    "connect_timeout_seconds".into(),
                    json!(d.connect_timeout.as_secs_f64()),
                );
                map.insert(
                    "timeout_seconds".into(),
                    json!(d.call_timeout.as_secs_f64()),
                );
                map.insert(
                    "supports_parallel_tool_calls".into(),
                    json!(d.supports_parallel_tool_calls),
                );
            }
            p
        }
    }
}

fn fingerprint_of(found: &Found) -> String {
    match found {
        Found::Valid { declaration, .. } => format!("valid:{}", declaration.fingerprint.hex()),
        Found::Invalid { digest, .. } => format!("invalid:{}", digest.hex()),
    }
}

/// What changed between two valid declarations, in secret-safe words.
fn details(before: &Found, after: &Found) -> Vec<String> {
    let (bp, ap) = (preview(before), preview(after));
    let mut out = Vec::new();
    if let (Some(b), Some(a)) = (bp.as_object(), ap.as_object()) {
        let keys: BTreeSet<&String> = b.keys().chain(a.keys()).collect();
        for k in keys {
            let (x, y) = (
                b.get(k).unwrap_or(&Value::Null),
                a.get(k).unwrap_or(&Value::Null),
            );
            if x != y {
                out.push(format!("{k}: {x} -> {y}"));
            }
        }
    }
    if let (Found::Valid { declaration: b, .. }, Found::Valid { declaration: a, .. }) =
        (before, after)
    {
        match (&b.endpoint, &a.endpoint) {
            (
                Endpoint::Stdio {
                    env: be, args: ba, ..
                },
                Endpoint::Stdio {
                    env: ae, args: aa, ..
                },
            ) => {
                out.extend(changed_values("env", be, ae));
                let (bs, as_): (BTreeMap<_, _>, BTreeMap<_, _>) = (
                    crate::authority::preview::secret_arg_values(ba)
                        .into_iter()
                        .collect(),
                    crate::authority::preview::secret_arg_values(aa)
                        .into_iter()
                        .collect(),
                );
                for (name, v) in &as_ {
                    if bs.get(name).is_some_and(|old| old != v) {
                        out.push(format!("args: the value of secret option `{name}` changed"));
                    }
                }
            }
            (
                Endpoint::StreamableHttp {
                    url: bu,
                    headers: bh,
                    oauth: bo,
                },
                Endpoint::StreamableHttp {
                    url: au,
                    headers: ah,
                    oauth: ao,
                },
            ) => {
                out.extend(changed_values("header", bh, ah));
                if bo != ao {
                    // A changed client or scope changes the token the runtime obtains.
                    out.push(
                        "oauth: the client, its credentials, grant, method, issuer or scopes changed (see the previews)".into(),
                    );
                }
                if bu != au && bu.origin() == au.origin() {
                    out.push("url: path, query or credentials changed (not shown)".into());
                }
            }
            _ => {}
        }
    }
    if out.is_empty() {
        out.push("formatting or comments only".into());
    }
    out
}

fn changed_values(
    kind: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    after
        .iter()
        .filter(|(k, v)| before.get(*k).is_some_and(|old| old != *v))
        .map(|(k, _)| format!("{kind} {k}: value changed (not shown)"))
        .collect()
}

fn entry(
    path: String,
    change: Change,
    before: Option<&Found>,
    after: Option<&Found>,
) -> ChangeEntry {
    let details = match (before, after) {
        (Some(b), Some(a)) => details(b, a),
        (None, Some(_)) => vec!["new MCP server declaration".into()],
        (Some(_), None) => vec!["MCP server declaration removed".into()],
        (None, None) => Vec::new(),
    };
    ChangeEntry {
        path,
        change,
        before: before.map(preview),
        after: after.map(preview),
        details,
        before_fingerprint: before.map(fingerprint_of),
        after_fingerprint: after.map(fingerprint_of),
    }
}

fn diff(before: &Snapshot, after: &Snapshot) -> Vec<ChangeEntry> {
    let mut changes = Vec::new();
    let paths: BTreeSet<&String> = before
        .declarations
        .keys()
        .chain(after.declarations.keys())
        .collect();
    for path in paths {
        match (before.declarations.get(path), after.declarations.get(path)) {
            (None, Some(a)) => changes.push(entry(path.clone(), Change::Added, None, Some(a))),
            (Some(b), None) => changes.push(entry(path.clone(), Change::Removed, Some(b), None)),
            (Some(b), Some(a)) if fingerprint_of(b) != fingerprint_of(a) => {
                changes.push(entry(path.clone(), Change::Modified, Some(b), Some(a)));
            }
            _ => {}
        }
    }
    if before.mcp_root != after.mcp_root {
        let digest = |s: &str| format!("root:{}", Fingerprint::of(s.as_bytes()).hex());
        changes.push(ChangeEntry {
            path: "agent.yaml#slots.mcp".into(),
            change: Change::Modified,
            before: Some(json!({"mcp_root": before.mcp_root})),
            after: Some(json!({"mcp_root": after.mcp_root})),
            details: vec![format!(
                "MCP root: {} -> {}",
                before.mcp_root, after.mcp_root
            )],
            before_fingerprint: Some(digest(&before.mcp_root)),
            after_fingerprint: Some(digest(&after.mcp_root)),
        });
    }
    for grant in before.grants.symmetric_difference(&after.grants) {
        let added = after.grants.contains(grant);
        let change = if added {
            Change::Added
        } else {
            Change::Removed
        };
        let digest = Some(format!("grant:{}", Fingerprint::of(grant.as_bytes()).hex()));
        changes.push(ChangeEntry {
            path: format!("agent.yaml#capabilities.defaults.{grant}"),
            change,
            before: (!added).then(|| json!({"grant": grant})),
            after: added.then(|| json!({"grant": grant})),
            details: vec![format!("capability grant {grant} {change}")],
            before_fingerprint: if added { None } else { digest.clone() },
            after_fingerprint: if added { digest } else { None },
        });
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    changes
}

/// The token over the canonical serialization documented in the module docs.
fn token(changes: &[ChangeEntry]) -> String {
    let mut text = String::from("demiurge-mcp-review/v2\n");
    for c in changes {
        let line = json!([
            c.path,
            c.change.as_str(),
            c.before_fingerprint.as_deref().unwrap_or("-"),
            c.after_fingerprint.as_deref().unwrap_or("-")
        ]);
        text.push_str(&line.to_string());
        text.push('\n');
    }
    format!("mcp-review:{}", Fingerprint::of(text.as_bytes()).hex())
}

impl Review {
    /// Readable text for a terminal; the last line is the token.
    pub fn render(&self) -> String {
        let mut out = format!(
            "MCP security review: {} -> {}\n",
            self.live
                .as_deref()
                .map_or("(no live revision)", |l| &l[..l.len().min(12)]),
            &self.candidate[..self.candidate.len().min(12)]
        );
        if self.changes.is_empty() {
            out.push_str("no MCP changes\n");
        }
        // Paths, details and previews carry what the core's author wrote: each is
        // escaped so no file name or command can rewrite what the reviewer reads.
        use crate::text::escape as e;
        for c in &self.changes {
            out.push_str(&format!("\n{} {}\n", c.change, e(&c.path)));
            for d in &c.details {
                out.push_str(&format!("  - {}\n", e(d)));
            }
            if let Some(a) = c.after.as_ref().or(c.before.as_ref()) {
                out.push_str(&format!(
                    "  {}: {}\n",
                    if c.after.is_some() { "after" } else { "before" },
                    e(&a.to_string())
                ));
            }
        }
        out.push_str(&format!("\n{}\n", self.token));
        out
    }
}
