//! The controller's one memory of followed tags: per tag (and the
//! credentials it is looked up with), when it was last looked up and the
//! digest last found, so that every job following it shares one registry
//! request per interval. Rebuilt from nothing after a restart: the jobs'
//! annotations hold what each follows.

use super::rule;
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// A record is forgotten when no job has read it for this many of its
/// intervals (a following job reads it at least once per interval).
const FORGET_AFTER_INTERVALS: i32 = 3;

/// How soon a job that found another job's lookup of its tag under way
/// asks again for the answer (instead of a whole interval later).
const IN_FLIGHT_POLL: Duration = Duration::from_secs(1);

/// A lookup started this long ago without an answer recorded is taken as
/// lost (its reconcile was cancelled): the next job looks up again.
const IN_FLIGHT_LOST: Duration =
    Duration::from_secs(2 * super::registry::REQUEST_TIMEOUT.as_secs());

/// One followed tag.
#[derive(Clone, Debug)]
struct Record {
    /// When a lookup was last started.
    attempted: DateTime<Utc>,
    /// The digest last found.
    digest: Option<String>,
    /// Why the last lookup failed (None: it found the digest).
    failure: Option<String>,
    /// The lookup last started has recorded its answer (or none started).
    answered: bool,
    /// The shortest interval of the jobs that read it.
    interval: Duration,
    /// When a job last read it.
    read: DateTime<Utc>,
}

/// What [`Lookups::claim`] tells a job.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// This job looks the tag up now (and records what it finds).
    pub look_up: bool,
    /// The digest last found, by any job.
    pub digest: Option<String>,
    /// Why the last lookup failed, if it did (every job following the tag
    /// says so, not only the one that looked up).
    pub failure: Option<String>,
    /// When the next lookup is due for this job.
    pub next: Duration,
}

/// Followed tags, keyed by [`key`]. Bounded by the tags live jobs follow;
/// a record goes once unread for [`FORGET_AFTER_INTERVALS`] intervals.
#[derive(Debug, Default)]
pub struct Lookups {
    records: Mutex<HashMap<String, Record>>,
}

/// The key of a tag looked up with the pull secrets `secrets` of namespace
/// `ns`: anonymous lookups of one tag are shared by every job, lookups
/// with secrets by the jobs of one namespace naming the same secrets.
pub fn key(reference: &str, ns: &str, secrets: &[String]) -> String {
    if secrets.is_empty() {
        return reference.to_string();
    }
    let mut names = secrets.to_vec();
    names.sort();
    names.dedup();
    format!("{reference} {ns}/{}", names.join(","))
}

impl Lookups {
    /// For a job following `key` every `interval`: whether it looks up now
    /// (marking the lookup started, so no other job does meanwhile), and
    /// the digest last found. Forgets records nobody reads any more.
    pub fn claim(&self, key: &str, interval: Duration, now: DateTime<Utc>) -> Claim {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        records.retain(|_, r| !forgotten(r, now));
        let r = records.entry(key.to_string()).or_insert(Record {
            attempted: DateTime::<Utc>::MIN_UTC,
            digest: None,
            failure: None,
            answered: true,
            interval,
            read: now,
        });
        r.read = now;
        r.interval = r.interval.min(interval);
        let last = (r.attempted != DateTime::<Utc>::MIN_UTC).then_some(r.attempted);
        let lost = !r.answered && rule::due(last, IN_FLIGHT_LOST, now).is_ok();
        let due = if lost {
            Ok(())
        } else {
            rule::due(last, interval, now)
        };
        match due {
            Ok(()) => {
                r.attempted = now;
                r.answered = false;
                Claim {
                    look_up: true,
                    digest: r.digest.clone(),
                    failure: r.failure.clone(),
                    next: interval,
                }
            }
            // Another job's lookup is under way: ask again for its answer
            // soon, not an interval later.
            Err(wait) => Claim {
                look_up: false,
                digest: r.digest.clone(),
                failure: r.failure.clone(),
                next: if r.answered {
                    wait
                } else {
                    wait.min(IN_FLIGHT_POLL)
                },
            },
        }
    }

    /// Records the digest a lookup of `key` found.
    pub fn found(&self, key: &str, digest: &str) {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = records.get_mut(key) {
            r.digest = Some(digest.to_string());
            r.failure = None;
            r.answered = true;
        }
    }

    /// Records why a lookup of `key` failed (the digest found before stays).
    pub fn failed(&self, key: &str, why: &str) {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = records.get_mut(key) {
            r.failure = Some(why.to_string());
            r.answered = true;
        }
    }

    /// How many tags are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.records.lock().map(|r| r.len()).unwrap_or_default()
    }
}

/// Unread for [`FORGET_AFTER_INTERVALS`] of its intervals.
fn forgotten(r: &Record, now: DateTime<Utc>) -> bool {
    let interval = TimeDelta::from_std(r.interval).unwrap_or(TimeDelta::MAX);
    let bound = interval
        .checked_mul(FORGET_AFTER_INTERVALS)
        .unwrap_or(TimeDelta::MAX);
    crate::runtime::clock::after(r.read, bound) < now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap_or_default()
    }

    const MIN: Duration = Duration::from_secs(60);

    #[test]
    fn one_lookup_per_interval_shared_by_every_job_of_a_tag() {
        let l = Lookups::default();
        let k = key("r/app:stable", "a", &[]);
        // (time, interval of the job asking, looks up?, next)
        let steps = [
            (0, MIN, true, 60),
            (1, MIN, false, 59),
            (30, 2 * MIN, false, 90),
            (59, MIN, false, 1),
            (60, MIN, true, 60),
            (61, MIN, false, 59),
            (150, 2 * MIN, false, 30),
            (180, 2 * MIN, true, 120),
        ];
        for (t, interval, look_up, next) in steps {
            let c = l.claim(&k, interval, at(t));
            assert_eq!(
                (c.look_up, c.next),
                (look_up, Duration::from_secs(next)),
                "at {t}s"
            );
            if c.look_up {
                l.found(&k, "sha256:1");
            }
        }
    }

    #[test]
    fn a_job_that_finds_a_lookup_under_way_asks_again_soon() {
        let l = Lookups::default();
        let k = key("r/app:stable", "a", &[]);
        assert!(l.claim(&k, MIN, at(0)).look_up);
        l.found(&k, "sha256:1");
        // At 60 one job starts the lookup; the other, a moment later, is
        // told to come back in a second, not an interval, until the answer
        // is recorded, and then gets it.
        assert!(l.claim(&k, MIN, at(60)).look_up);
        let waiting = l.claim(&k, MIN, at(60));
        assert_eq!(
            (waiting.look_up, waiting.next),
            (false, Duration::from_secs(1))
        );
        l.failed(&k, "connection refused");
        let told = l.claim(&k, MIN, at(61));
        assert_eq!(
            (told.look_up, told.next, told.failure.as_deref()),
            (false, Duration::from_secs(59), Some("connection refused"))
        );
        // A lookup never answered (its reconcile cancelled) is lost after
        // twice the request timeout: the next job looks up again.
        assert!(l.claim(&k, MIN, at(120)).look_up);
        assert!(!l.claim(&k, MIN, at(149)).look_up);
        assert!(l.claim(&k, MIN, at(150)).look_up);
    }

    #[test]
    fn the_found_digest_answers_the_other_jobs() {
        let l = Lookups::default();
        let k = key("r/app:stable", "a", &[]);
        assert_eq!(l.claim(&k, MIN, at(0)).digest, None);
        l.found(&k, "sha256:1");
        let other = l.claim(&k, MIN, at(5));
        assert_eq!(
            (other.look_up, other.digest.as_deref()),
            (false, Some("sha256:1"))
        );
        // A failure is told to every job, the digest kept; a success clears it.
        assert!(l.claim(&k, MIN, at(60)).look_up);
        l.failed(&k, "HTTP 429");
        let other = l.claim(&k, MIN, at(61));
        assert_eq!(
            (other.digest.as_deref(), other.failure.as_deref()),
            (Some("sha256:1"), Some("HTTP 429"))
        );
        assert!(l.claim(&k, MIN, at(120)).look_up);
        l.found(&k, "sha256:2");
        assert_eq!(l.claim(&k, MIN, at(121)).failure, None);
    }

    #[test]
    fn keys_share_anonymous_lookups_and_split_by_credentials() {
        assert_eq!(key("r/a:t", "x", &[]), key("r/a:t", "y", &[]));
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            key("r/a:t", "x", &s(&["b", "a"])),
            key("r/a:t", "x", &s(&["a", "b", "a"]))
        );
        assert_ne!(key("r/a:t", "x", &s(&["a"])), key("r/a:t", "y", &s(&["a"])));
        assert_ne!(key("r/a:t", "x", &s(&["a"])), key("r/a:t", "x", &[]));
    }

    #[test]
    fn unread_records_are_forgotten_after_three_intervals() {
        let l = Lookups::default();
        l.claim("one", MIN, at(0));
        l.claim("two", MIN, at(0));
        l.claim("two", MIN, at(150));
        assert_eq!(l.len(), 2);
        // "one" was last read at 0: gone after 180 s; "two" read at 150 stays.
        l.claim("two", MIN, at(181));
        assert_eq!(l.len(), 1);
        // A forgotten tag is looked up at once when a job reads it again.
        assert!(l.claim("one", MIN, at(182)).look_up);
    }
}
