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

use gix::ObjectId;
use serde::Serialize;

use crate::core::{self, CoreTree, Declaration, Fingerprint};

mod live;
mod review;
mod tree;

pub use live::{LiveCores, LiveRevisions, live_revision};
pub use review::{Change, ChangeEntry, Review};
use review::{diff, token};
use tree::GitTree;

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
