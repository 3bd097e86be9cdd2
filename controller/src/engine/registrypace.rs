//! Registry pacing: at most a set number of nodes pull from one registry
//! host at once, across every job kind. Hand-written NodeImage entries
//! count towards the limit but are not held back (holding them would cost
//! an API write per pull). Free slots go round-robin between namespaces
//! (oldest job first within one); a node already pulling from a registry
//! takes more entries on it without a new slot; a freed slot wakes the
//! jobs it goes to at once. A registry whose tags say it rate-limited them
//! (HTTP 429) gets no new pulls until none says so.
//!
//! `rule` decides (pure: the one home of the rule), `load` reads what the
//! NodeImages show of each registry (pure), `ledger` remembers what the
//! cache does not show yet (entries being written, jobs waiting) and runs a
//! plan under the rule, `handoff` wakes the jobs a freed slot goes to.

mod handoff;
mod ledger;
mod load;
mod rule;

pub use ledger::{Paced, PacedJob, RegistryPacing, Starting};

use nodeimage_api::reference::canonical_registry;
use std::collections::BTreeMap;

/// How many nodes may pull from each registry at once (0: no limit).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// The limit of a registry not named in `per_host`.
    pub default: usize,
    /// Limits of named registry hosts (canonical names), overriding `default`.
    pub per_host: BTreeMap<String, usize>,
}

impl Limits {
    /// The limits of the flags: `default`, and `HOST=N` pairs (Docker Hub's
    /// aliases taken as `docker.io`).
    pub fn new(default: usize, per_host: &[(String, usize)]) -> Self {
        let per_host = per_host
            .iter()
            .map(|(h, n)| (canonical_registry(h).to_string(), *n))
            .collect();
        Limits { default, per_host }
    }

    /// The limit of `registry` (0: none).
    pub fn of(&self, registry: &str) -> usize {
        let registry = canonical_registry(registry);
        self.per_host.get(registry).copied().unwrap_or(self.default)
    }

    /// Whether any registry is limited (else pacing does nothing at all).
    pub fn any(&self) -> bool {
        self.default > 0 || self.per_host.values().any(|n| *n > 0)
    }
}

#[cfg(test)]
mod tests;
