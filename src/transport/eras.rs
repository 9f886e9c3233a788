//! Which era each `protocol: auto` server answered in, by a key the connect step makes
//! of its declaration's fingerprint, the principal and the workspace: its next
//! connection speaks that era at once instead of probing again (a legacy server that
//! ignores `server/discover` would otherwise cost every connect the probe's 10 s). A
//! changed declaration is a new key and probes anew; a failed connect forgets; one
//! session's servers never decide another workspace's probe.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::core::{Fingerprint, Protocol};

/// Most servers whose era is remembered; past it the memory starts over.
pub const MAX_REMEMBERED_ERAS: usize = 4096;

/// The remembered eras of one runtime.
#[derive(Debug, Default)]
pub struct Eras {
    known: Mutex<HashMap<Fingerprint, Protocol>>,
}

impl Eras {
    /// The era a connection of a server declared `declared` starts in: the declared
    /// one, or for `auto` the one its last connection spoke, when known.
    pub fn choose(&self, declared: Protocol, server: Fingerprint) -> Protocol {
        if declared != Protocol::Auto {
            return declared;
        }
        self.known
            .lock()
            .ok()
            .and_then(|known| known.get(&server).copied())
            .unwrap_or(Protocol::Auto)
    }

    /// Records that `server`'s connection speaks `spoken` (the version it answered).
    pub fn learned(&self, server: Fingerprint, spoken: &str) {
        let era = match spoken {
            "2026-07-28" => Protocol::V2026_07_28,
            "2025-11-25" => Protocol::V2025_11_25,
            // An older legacy version: `initialize` found it, `initialize` it stays.
            _ if !spoken.is_empty() => Protocol::V2025_11_25,
            _ => return,
        };
        if let Ok(mut known) = self.known.lock() {
            if known.len() >= MAX_REMEMBERED_ERAS && !known.contains_key(&server) {
                known.clear();
            }
            known.insert(server, era);
        }
    }

    /// Forgets `server`'s era: its next connection probes again.
    pub fn forget(&self, server: Fingerprint) {
        if let Ok(mut known) = self.known.lock() {
            known.remove(&server);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_remembers_what_was_spoken_and_a_declared_era_is_kept() {
        let eras = Eras::default();
        let server = Fingerprint::of(b"a server");
        assert_eq!(eras.choose(Protocol::Auto, server), Protocol::Auto);
        eras.learned(server, "2025-11-25");
        assert_eq!(eras.choose(Protocol::Auto, server), Protocol::V2025_11_25);
        assert_eq!(
            eras.choose(Protocol::V2026_07_28, server),
            Protocol::V2026_07_28
        );
        eras.learned(server, "2026-07-28");
        assert_eq!(eras.choose(Protocol::Auto, server), Protocol::V2026_07_28);
        eras.forget(server);
        assert_eq!(eras.choose(Protocol::Auto, server), Protocol::Auto);
        // A version's absence teaches nothing.
        eras.learned(server, "");
        assert_eq!(eras.choose(Protocol::Auto, server), Protocol::Auto);
    }

    #[test]
    fn the_memory_is_bounded() {
        let eras = Eras::default();
        for n in 0..MAX_REMEMBERED_ERAS + 10 {
            eras.learned(Fingerprint::of(n.to_string().as_bytes()), "2026-07-28");
        }
        assert!(eras.known.lock().unwrap().len() <= MAX_REMEMBERED_ERAS);
    }
}
