//! How often a job's status may be written while the job's state stays the
//! same. A KubeEdge job over thousands of nodes changes one node row every
//! few milliseconds, and each write carries its whole node list; writing at
//! most once per interval (and at once when the job's state changes) bounds
//! that cost without hiding a start, a failure or the end.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Least time between two status writes of one job whose state is unchanged.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// How many jobs are remembered before the stale ones are dropped.
const REMEMBERED: usize = 256;

/// How long to hold a status write back: `None` writes now. A change of the
/// job's state is never held; otherwise a write waits until `interval`
/// after the last one.
pub fn hold(
    last: Option<Instant>,
    now: Instant,
    state_changed: bool,
    interval: Duration,
) -> Option<Duration> {
    if state_changed {
        return None;
    }
    let next = last?.checked_add(interval)?;
    (next > now).then(|| next - now)
}

/// When each job's status was last written (per controller process).
#[derive(Debug, Default)]
pub struct StatusPace {
    last: Mutex<HashMap<String, Instant>>,
}

impl StatusPace {
    /// How long `job`'s status write should wait ([`hold`] with [`STATUS_INTERVAL`]).
    pub fn hold(&self, job: &str, state_changed: bool) -> Option<Duration> {
        let last = self.lock().get(job).copied();
        hold(last, Instant::now(), state_changed, STATUS_INTERVAL)
    }

    /// Records a write of `job`'s status now.
    pub fn wrote(&self, job: &str) {
        self.wrote_at(job, Instant::now());
    }

    fn wrote_at(&self, job: &str, now: Instant) {
        let mut last = self.lock();
        if last.len() >= REMEMBERED {
            last.retain(|_, t| now.saturating_duration_since(*t) < STATUS_INTERVAL);
        }
        last.insert(job.to_string(), now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_table() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // (last write, now, state changed, expected hold)
        let cases: [(Option<Instant>, Instant, bool, Option<Duration>); 6] = [
            (None, t0, false, None),
            (Some(t0), t0, true, None),
            (Some(t0), t0 + ms(300), false, Some(ms(700))),
            (Some(t0), t0 + ms(300), true, None),
            (Some(t0), t0 + s(1), false, None),
            (Some(t0), t0 + s(5), false, None),
        ];
        for (i, (last, now, changed, want)) in cases.into_iter().enumerate() {
            assert_eq!(hold(last, now, changed, s(1)), want, "case {i}");
        }
    }

    #[test]
    fn remembers_writes_and_forgets_stale_jobs() {
        let p = StatusPace::default();
        assert_eq!(p.hold("a", false), None, "never written");
        p.wrote("a");
        assert!(p.hold("a", false).is_some(), "just written");
        assert_eq!(p.hold("a", true), None, "a state change is not held");
        let t0 = Instant::now();
        for i in 0..REMEMBERED {
            p.wrote_at(&format!("j{i}"), t0);
        }
        assert_eq!(p.lock().len(), REMEMBERED + 1);
        // Past the interval, the held-back writes no longer matter: dropped.
        p.wrote_at("late", t0 + 2 * STATUS_INTERVAL);
        assert_eq!(p.lock().keys().collect::<Vec<_>>(), vec!["late"]);
    }
}
