//! Since when each NodeImage's status has held entries of tags its spec no
//! longer has: housekeeping leaves those to the node's daemon and drops them
//! itself only once they have stayed the response timeout (`plan`). Kept in
//! memory: after a restart the wait starts again, which only delays the
//! drop for a node whose daemon does not answer.

use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Mutex;

/// First sighting of orphaned status entries, by NodeImage name.
#[derive(Default)]
pub struct OrphansSeen(Mutex<HashMap<String, DateTime<Utc>>>);

impl OrphansSeen {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, DateTime<Utc>>> {
        // Plain data: a panic elsewhere cannot leave it half-written.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When `name`'s orphaned entries were first seen, if they were.
    pub fn since(&self, name: &str) -> Option<DateTime<Utc>> {
        self.lock().get(name).copied()
    }

    /// Records what a plan made at `now` left: orphaned entries (first seen
    /// now unless seen before) or none. A first sighting also forgets the
    /// NodeImages `exists` no longer finds: housekeeping is not called for a
    /// deleted one, so the map holds the live ones and those deleted since
    /// the last first sighting.
    pub fn record(
        &self,
        name: &str,
        orphaned: bool,
        now: DateTime<Utc>,
        exists: impl Fn(&str) -> bool,
    ) {
        let mut seen = self.lock();
        if !orphaned {
            seen.remove(name);
        } else if !seen.contains_key(name) {
            seen.retain(|n, _| exists(n));
            seen.insert(name.to_string(), now);
        }
    }

    /// Forgets a deleted NodeImage.
    pub fn forget(&self, name: &str) {
        self.lock().remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_sighting_is_kept_until_none_are_left() {
        let seen = OrphansSeen::default();
        let t = |s| DateTime::from_timestamp(s, 0).expect("valid");
        let all = |_: &str| true;
        assert_eq!(seen.since("a"), None);
        seen.record("a", true, t(10), all);
        seen.record("a", true, t(20), all);
        assert_eq!(seen.since("a"), Some(t(10)));
        seen.record("a", false, t(30), all);
        assert_eq!(seen.since("a"), None);
        seen.record("b", true, t(40), all);
        seen.forget("b");
        assert_eq!(seen.since("b"), None);
    }

    #[test]
    fn a_first_sighting_forgets_nodeimages_that_are_gone() {
        let seen = OrphansSeen::default();
        let t = |s| DateTime::from_timestamp(s, 0).expect("valid");
        seen.record("gone", true, t(10), |_| true);
        seen.record("kept", true, t(10), |_| true);
        // Seen again: nothing else is looked up.
        seen.record("kept", true, t(20), |_| panic!("no lookup"));
        seen.record("new", true, t(30), |n| n != "gone");
        assert_eq!(seen.since("gone"), None);
        assert_eq!(seen.since("kept"), Some(t(10)));
        assert_eq!(seen.since("new"), Some(t(30)));
    }
}
