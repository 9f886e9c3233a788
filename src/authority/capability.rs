//! Capability grants and how a grant matches a required capability.

use std::collections::BTreeSet;

use crate::core::Fingerprint;

/// A snapshot of granted capability names.
///
/// A grant matches exactly itself, or, when it ends in `:*`, every capability below that
/// colon boundary (`mcp.call:*` matches `mcp.call:docs`). A bare `*` grants nothing.
///
/// ```
/// use demiurge_mcp::authority::CapabilitySet;
/// let grants = CapabilitySet::new(["mcp.call:*".to_string()]);
/// assert!(grants.allows("mcp.call:docs"));
/// assert!(!grants.allows("mcp.connect:docs"));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct CapabilitySet {
    grants: BTreeSet<String>,
}

impl CapabilitySet {
    /// A snapshot of these grants.
    pub fn new(grants: impl IntoIterator<Item = String>) -> Self {
        CapabilitySet {
            grants: grants.into_iter().collect(),
        }
    }

    /// Whether `capability` is granted.
    pub fn allows(&self, capability: &str) -> bool {
        if self.grants.contains(capability) {
            return true;
        }
        // Walk the colon boundaries of the capability: `a:b:c` checks `a:*` and `a:b:*`.
        capability
            .match_indices(':')
            .any(|(i, _)| self.grants.contains(&format!("{}:*", &capability[..i])))
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.grants.iter().map(String::as_str)
    }

    /// Keeps only what `scope` also allows: a delegated child can narrow, never widen.
    pub fn narrowed_by(&self, scope: &CapabilitySet) -> CapabilitySet {
        let mut out = BTreeSet::new();
        for grant in &scope.grants {
            if let Some(prefix) = grant.strip_suffix(":*") {
                // A wildcard in the scope keeps the parent's grants under it, and itself if
                // the parent had it (or a wider one).
                if self.allows(&format!("{prefix}:\u{0}")) {
                    out.insert(grant.clone());
                }
                out.extend(
                    self.grants
                        .iter()
                        .filter(|g| g.starts_with(&format!("{prefix}:")))
                        .cloned(),
                );
            } else if self.allows(grant) {
                out.insert(grant.clone());
            }
        }
        CapabilitySet { grants: out }
    }

    /// A digest of the snapshot, part of catalog identity.
    pub fn fingerprint(&self) -> Fingerprint {
        let joined: Vec<&str> = self.names().collect();
        Fingerprint::of(joined.join("\n").as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> CapabilitySet {
        CapabilitySet::new(names.iter().map(|s| s.to_string()))
    }

    #[test]
    fn exact_and_colon_wildcards() {
        let s = set(&["mcp.connect:docs", "mcp.call:*"]);
        assert!(s.allows("mcp.connect:docs"));
        assert!(!s.allows("mcp.connect:docs2"));
        assert!(!s.allows("mcp.connect:do"));
        assert!(s.allows("mcp.call:anything"));
        assert!(s.allows("mcp.call:a:b"));
        assert!(!s.allows("mcp.call"));
        assert!(!s.allows("mcp.callx:a"));
    }

    #[test]
    fn bare_star_grants_nothing() {
        let s = set(&["*"]);
        assert!(!s.allows("mcp.call:docs"));
        assert!(!s.allows("x"));
    }

    #[test]
    fn narrowing_never_widens() {
        let parent = set(&["mcp.connect:a", "mcp.call:*"]);
        let scope = set(&["mcp.connect:a", "mcp.connect:b", "mcp.call:a"]);
        let child = parent.narrowed_by(&scope);
        assert!(child.allows("mcp.connect:a"));
        assert!(!child.allows("mcp.connect:b"));
        assert!(child.allows("mcp.call:a"));
        assert!(!child.allows("mcp.call:z"));

        let parent = set(&["mcp.call:a"]);
        let child = parent.narrowed_by(&set(&["mcp.call:*"]));
        assert!(child.allows("mcp.call:a"));
        assert!(!child.allows("mcp.call:b"));
    }
}
