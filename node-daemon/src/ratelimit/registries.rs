//! The node's one memory of registries that rate-limited it, shared by all
//! its pulls (owner: `Deps::rate_limits`): until when each such registry
//! is left alone, how many 429 rounds in a row it gave, and what it said.
//!
//! A round is the 429s of one wait: answers that come while a wait is
//! already set (pulls that asked at about the same time) extend it to a
//! longer `Retry-After` at most, and do not make the next wait longer. A
//! pull from the registry that succeeds forgets it (the next 429 waits
//! [`super::INITIAL`] again); so does [`FORGET_AFTER`] without a new 429
//! after a wait ended. So the map holds only registries that rate-limited
//! this node in the last few minutes.

use super::{jitter, wait_after};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tokio::time::Instant;

/// How long after its wait ended a registry that gave no new 429 is forgotten.
pub const FORGET_AFTER: Duration = super::CAP;

/// Registries that rate-limited this node recently.
#[derive(Debug, Default)]
pub struct Registries {
    /// This node's name: it fixes the node's jitter.
    node: String,
    limited: Mutex<HashMap<String, Limited>>,
}

/// One registry's wait.
#[derive(Debug, Clone)]
struct Limited {
    /// 429 rounds in a row (1 after the first).
    round: u32,
    /// No pull from the registry starts before this.
    until: Instant,
    /// What it said last, short.
    said: String,
}

/// What a pull from a rate-limited registry waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// When the next pull from it may start.
    pub until: Instant,
    /// What it said last, short.
    pub said: String,
}

impl Registries {
    /// The memory of node `node`.
    pub fn new(node: impl Into<String>) -> Self {
        Registries {
            node: node.into(),
            limited: Mutex::default(),
        }
    }

    fn map(&self) -> MutexGuard<'_, HashMap<String, Limited>> {
        self.limited.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `registry` rate-limited a pull at `now` (saying `said`,
    /// with `Retry-After` if known); when the next pull from it may start.
    pub fn limited(
        &self,
        registry: &str,
        said: &str,
        retry_after: Option<Duration>,
        now: Instant,
    ) -> Instant {
        let mut map = self.map();
        forget_idle(&mut map, now);
        let e = map.entry(registry.to_string()).or_insert(Limited {
            round: 0,
            until: now,
            said: String::new(),
        });
        let waits = |round| wait_after(round, retry_after, jitter(&self.node, registry, round));
        if now >= e.until {
            e.round = e.round.saturating_add(1);
            e.until = now + waits(e.round);
        } else if retry_after.is_some() {
            e.until = e.until.max(now + waits(e.round));
        }
        e.said = said.to_string();
        e.until
    }

    /// What a pull from `registry` waits for at `now`; None when it may start.
    pub fn hold(&self, registry: &str, now: Instant) -> Option<Hold> {
        let mut map = self.map();
        forget_idle(&mut map, now);
        map.get(registry).filter(|e| now < e.until).map(|e| Hold {
            until: e.until,
            said: e.said.clone(),
        })
    }

    /// A pull from `registry` succeeded: its next 429 starts the schedule over.
    pub fn succeeded(&self, registry: &str) {
        self.map().remove(registry);
    }

    /// How many registries are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether no registry is remembered.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Drops registries whose wait ended [`FORGET_AFTER`] ago or more.
fn forget_idle(map: &mut HashMap<String, Limited>, now: Instant) {
    map.retain(|_, e| now < e.until + FORGET_AFTER);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// The wait of round `round` for node n1 and `registry`.
    fn wait_for(registry: &str, round: u32) -> Duration {
        wait_after(round, None, jitter("n1", registry, round))
    }

    fn wait(round: u32) -> Duration {
        wait_for("docker.io", round)
    }

    #[test]
    fn rounds_grow_and_a_success_starts_over() {
        let r = Registries::new("n1");
        let t0 = Instant::now();
        let first = r.limited("docker.io", "429 Too Many Requests", None, t0);
        assert_eq!(first, t0 + wait(1));
        // Another pull limited in the same round does not lengthen the wait.
        assert_eq!(r.limited("docker.io", "again", None, t0 + s(1)), first);
        assert_eq!(
            r.hold("docker.io", t0 + s(1)),
            Some(Hold {
                until: first,
                said: "again".into()
            })
        );
        // Limited again after the wait: the next round waits longer.
        let second = r.limited("docker.io", "429", None, first);
        assert_eq!(second, first + wait(2));
        assert!(wait(2) > wait(1));
        assert_eq!(r.hold("docker.io", second), None, "free once it passed");
        // A success starts the schedule over.
        r.succeeded("docker.io");
        assert!(r.is_empty());
        let t1 = second + s(1);
        assert_eq!(r.limited("docker.io", "429", None, t1), t1 + wait(1));
    }

    #[test]
    fn other_registries_are_not_held() {
        let r = Registries::new("n1");
        let t0 = Instant::now();
        r.limited("docker.io", "429", None, t0);
        assert!(r.hold("docker.io", t0).is_some());
        assert_eq!(r.hold("quay.io", t0), None);
        r.succeeded("quay.io");
        assert!(r.hold("docker.io", t0).is_some(), "another's success");
    }

    #[test]
    fn retry_after_extends_the_round() {
        let r = Registries::new("n1");
        let t0 = Instant::now();
        let first = r.limited("h", "429", None, t0);
        let asked = r.limited("h", "429", Some(s(60)), t0 + s(1));
        assert!(asked >= t0 + s(61), "Retry-After 60 from the second answer");
        assert!(asked > first);
        // A shorter Retry-After never shortens a wait already set.
        assert_eq!(r.limited("h", "429", Some(s(1)), t0 + s(2)), asked);
    }

    #[test]
    fn an_idle_registry_is_forgotten() {
        let r = Registries::new("n1");
        let t0 = Instant::now();
        let until = r.limited("h", "429", None, t0);
        // Just before the forget time a new 429 is the next round.
        assert!(r.hold("h", until + FORGET_AFTER - s(1)).is_none());
        assert_eq!(r.len(), 1);
        assert_eq!(r.hold("h", until + FORGET_AFTER), None);
        assert!(r.is_empty(), "forgotten");
        let t1 = until + FORGET_AFTER;
        assert_eq!(r.limited("h", "429", None, t1), t1 + wait_for("h", 1));
    }
}
