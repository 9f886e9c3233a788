//! The secrets a redactor knows by value, and the automaton that finds them all in
//! one pass (Aho-Corasick); the secrets a connection learns while it runs.

use std::sync::Arc;

use super::RedactionFailed;
use super::{MIN_SECRET_LEN, plain_label};

/// One known secret value and the name it is shown under.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Secret {
    pub(super) name: Arc<str>,
    pub(super) value: String,
}

/// Secrets and the automaton that finds every one of them in a single pass over a text
/// (Aho-Corasick): the cost of a search grows with the text and its matches, not with
/// the text times the number of secrets, which a result with thousands of sensitive
/// keys would otherwise make minutes.
#[derive(Default)]
pub(super) struct Known {
    /// Longest first; an automaton pattern's index is its index here.
    pub(super) secrets: Vec<Secret>,
    pub(super) finder: Option<aho_corasick::AhoCorasick>,
    /// Characters of the longest secret (0 when there is none).
    pub(super) longest_chars: usize,
    /// The secrets are more than [`MAX_SECRET_BYTES`], or the automaton could not be
    /// built: nothing can be redacted (fail closed), never "no secret found".
    pub(super) broken: bool,
    /// Worked out when first asked once a key could be drawn ([`Known::fingerprint`]).
    fingerprint: std::sync::OnceLock<Fingerprint>,
}

/// What tells the secrets of one redactor from another's without holding or showing
/// them: a sha256, keyed by bytes drawn once per process, of every secret's name and
/// value. Redactors of equal fingerprints know the same secrets under the same names,
/// so they redact every text alike.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fingerprint([u8; 32]);

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fingerprint(..)")
    }
}

/// The key of every fingerprint, from the system's random source; `None` while that
/// cannot be read (no descriptor left, say: read again next time).
fn fingerprint_key() -> Option<[u8; 32]> {
    static KEY: std::sync::OnceLock<[u8; 32]> = std::sync::OnceLock::new();
    use std::io::Read;
    if let Some(key) = KEY.get() {
        return Some(*key);
    }
    let mut key = [0; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut key))
        .ok()?;
    Some(*KEY.get_or_init(|| key))
}

/// Most bytes of secret values one redactor searches for (a contiguous NFA holds some
/// tens of bytes per byte of pattern): a result revealing more fails closed.
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// Most bytes of secrets searched with a contiguous NFA; more use the one it is made
/// from (see [`Known::new`]).
pub(super) const CONTIGUOUS_BYTES: usize = 64 * 1024;

/// Most secret matches in one text, beyond one a byte: past it redaction fails closed
/// (secrets nested in one another, each occurrence matching many of them).
pub(super) const MAX_MATCHES_PER_BYTE: usize = 4;

impl Known {
    pub(super) fn new(mut secrets: Vec<Secret>) -> Known {
        secrets.sort_by(|a, b| b.value.len().cmp(&a.value.len()).then(a.name.cmp(&b.name)));
        if secrets.is_empty() {
            return Known::default();
        }
        let longest_chars = secrets
            .iter()
            .map(|s| s.value.chars().count())
            .max()
            .unwrap_or(0);
        let bytes = secrets.iter().map(|s| s.value.len()).sum::<usize>();
        if bytes > MAX_SECRET_BYTES {
            return Known {
                secrets,
                finder: None,
                longest_chars,
                broken: true,
                fingerprint: std::sync::OnceLock::new(),
            };
        }
        // Every match is reported, overlapping ones too, so each occurrence of every
        // secret is hidden whatever else overlaps it; an NFA, never a DFA, whose size
        // could be the patterns' times the alphabet. A contiguous one searches faster
        // but costs another pass to build: worth it for a connection's few secrets,
        // not for the thousands a large result reveals and a capped view searches
        // only the head of.
        let kind = if bytes <= CONTIGUOUS_BYTES {
            aho_corasick::AhoCorasickKind::ContiguousNFA
        } else {
            aho_corasick::AhoCorasickKind::NoncontiguousNFA
        };
        let finder = aho_corasick::AhoCorasick::builder()
            .kind(Some(kind))
            .match_kind(aho_corasick::MatchKind::Standard)
            .build(secrets.iter().map(|s| s.value.as_str()))
            .ok();
        let broken = finder.is_none();
        // A name is shown in every marker of its secret: one that holds any secret
        // value of the set (a declared `X_<value of Y>`) is shown as `secret`.
        if let Some(finder) = &finder {
            for secret in &mut secrets {
                if finder.is_match(secret.name.as_ref()) {
                    secret.name = "secret".into();
                }
            }
        }
        Known {
            secrets,
            finder,
            longest_chars,
            broken,
            fingerprint: std::sync::OnceLock::new(),
        }
    }

    /// See [`Fingerprint`]; `None` when these secrets cannot be redacted (`broken`) or
    /// no key could be drawn yet.
    pub(super) fn fingerprint(&self) -> Option<Fingerprint> {
        use sha2::Digest;
        if self.broken {
            return None;
        }
        if let Some(known) = self.fingerprint.get() {
            return Some(*known);
        }
        let mut hasher = sha2::Sha256::new();
        hasher.update(b"demiurge redactor secrets 1\0");
        hasher.update(fingerprint_key()?);
        for secret in &self.secrets {
            for part in [secret.name.as_bytes(), secret.value.as_bytes()] {
                hasher.update((part.len() as u64).to_le_bytes());
                hasher.update(part);
            }
        }
        let worked = Fingerprint(hasher.finalize().into());
        Some(*self.fingerprint.get_or_init(|| worked))
    }

    /// Every occurrence of every secret in `text`, overlapping ones included (in no
    /// particular order; [`merged`] makes them hits).
    pub(super) fn find(&self, text: &str, hits: &mut Vec<Hit>) -> Result<(), RedactionFailed> {
        if self.broken {
            return Err(RedactionFailed);
        }
        let Some(finder) = &self.finder else {
            return Ok(());
        };
        let bound = text.len().saturating_mul(MAX_MATCHES_PER_BYTE).max(1024);
        for (n, m) in finder.find_overlapping_iter(text).enumerate() {
            if n >= bound {
                return Err(RedactionFailed);
            }
            hits.push(Hit {
                start: m.start(),
                end: m.end(),
                name: Arc::clone(&self.secrets[m.pattern().as_usize()].name),
                longest: m.len(),
            });
        }
        Ok(())
    }
}

/// Occurrences merged into hits in order, none overlapping: every run of overlapping
/// occurrences is one hit spanning them, named by its longest secret.
pub(super) fn merged(mut found: Vec<Hit>) -> Vec<Hit> {
    found.sort_unstable_by_key(|h| h.start);
    let mut hits: Vec<Hit> = Vec::with_capacity(found.len());
    for hit in found {
        match hits.last_mut() {
            Some(run) if hit.start < run.end => {
                if hit.longest > run.longest {
                    (run.name, run.longest) = (hit.name, hit.longest);
                }
                run.end = run.end.max(hit.end);
            }
            _ => hits.push(hit),
        }
    }
    hits
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.secrets).finish()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({})", self.name)
    }
}

/// Most secrets one connection learns while it runs (tokens of refreshes and step-ups,
/// the credentials of its OAuth flows); past it its redaction fails closed.
pub const MAX_LEARNED: usize = 1024;

/// Secrets a connection learns once it runs (OAuth tokens from a refresh or a step-up),
/// shared by every redactor of that connection: what one learns, all hide at once.
#[derive(Debug, Default)]
pub struct Learned(pub(super) std::sync::RwLock<Arc<Known>>);

impl Learned {
    /// Adds a secret (ignored when shorter than [`MIN_SECRET_LEN`] or already known).
    pub fn learn(&self, name: &str, value: &str) {
        self.learn_all(std::iter::once((name, value)));
    }

    /// Adds several secrets with one rebuild of the automaton (each ignored when shorter
    /// than [`MIN_SECRET_LEN`] or already known).
    pub fn learn_all<'a>(&self, found: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let Ok(mut known) = self.0.write() else {
            return;
        };
        let mut secrets = known.secrets.clone();
        let before = secrets.len();
        for (name, value) in found {
            if value.chars().count() >= MIN_SECRET_LEN && !secrets.iter().any(|s| s.value == value)
            {
                secrets.push(Secret {
                    name: plain_label(name),
                    value: value.to_string(),
                });
            }
        }
        if secrets.len() > before {
            let mut next = Known::new(secrets);
            // Past the bound nothing of the connection can be shown any more (fail
            // closed), never a connection that learns without end.
            next.broken |= next.secrets.len() > MAX_LEARNED;
            *known = Arc::new(next);
        }
    }
}

/// What of one text a search of a longer, joined text found (see
/// [`Redactor::crossing_spans`]): a byte range and its label.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    pub(super) range: std::ops::Range<usize>,
    pub(super) label: Arc<str>,
}

/// A secret found in a text: its byte range and the name it is shown under. The value
/// is the text's own bytes at that range.
pub(super) struct Hit {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) name: Arc<str>,
    /// Length of the longest secret in the hit (what names it).
    pub(super) longest: usize,
}
