//! When and how long a tag's pull attempts run, as pure decisions over the
//! attempt number, the clock and the tag's deadline.
//!
//! The wait between attempts is 5 s, doubling, capped at 60 s (5, 10, 20,
//! 40, 60, 60, …), so that the default three retries span 35 s and outlast
//! a registry restart or a short outage (OpenKruise waits 1, 2 and 4 s and
//! fails the job), without hammering a flapping registry. No attempt starts
//! at or after the tag's deadline, and none runs past it; but when the full
//! wait would reach the deadline, a last attempt starts after
//! [`LAST_CHANCE`] and runs for the time left, as OpenKruise's daemon cuts
//! its last attempt to the deadline, so a job with `activeDeadlineSeconds`
//! is still trying when its deadline ends it.

use std::time::Duration;
use tokio::time::Instant;

/// First wait after a failed attempt.
pub const INITIAL: Duration = Duration::from_secs(5);
/// Longest wait between attempts.
pub const CAP: Duration = Duration::from_secs(60);
/// Wait before a last attempt squeezed in before the deadline (OpenKruise's
/// own first wait).
pub const LAST_CHANCE: Duration = Duration::from_secs(1);

/// Wait before attempt number `next_attempt` (1-based; the first attempt does not wait).
pub fn delay_before(next_attempt: u32) -> Duration {
    if next_attempt <= 1 {
        return Duration::ZERO;
    }
    let exp = (next_attempt - 2).min(16);
    INITIAL.saturating_mul(1u32 << exp).min(CAP)
}

/// Attempts a tag gets: the first and `backoffLimit` retries.
pub fn attempts(backoff_limit: u32) -> u32 {
    backoff_limit.saturating_add(1)
}

/// What to do before an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Wait this long, then run the attempt.
    Wait(Duration),
    /// The attempt would start at or after the deadline: give up now.
    PastDeadline,
}

/// Before attempt `attempt` at `now`: its wait; or, when that wait would
/// reach `deadline`, the shorter [`LAST_CHANCE`] wait for a last attempt;
/// or give up when even that attempt could only start at or after the
/// deadline (a time the clock cannot hold counts as past it).
pub fn before(attempt: u32, now: Instant, deadline: Option<Instant>) -> Next {
    let wait = delay_before(attempt);
    let Some(d) = deadline else {
        return Next::Wait(wait);
    };
    let in_time = |w: Duration| now.checked_add(w).is_some_and(|start| start < d);
    if in_time(wait) {
        Next::Wait(wait)
    } else if in_time(wait.min(LAST_CHANCE)) {
        Next::Wait(wait.min(LAST_CHANCE))
    } else {
        Next::PastDeadline
    }
}

/// How long one attempt starting at `now` may run: the per-attempt timeout,
/// cut short by the deadline.
pub fn attempt_limit(timeout: Duration, now: Instant, deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => timeout.min(d.saturating_duration_since(now)),
        None => timeout,
    }
}

/// Whether the deadline has passed at `now` (so the last failure is
/// reported as the deadline's, not the attempts').
pub fn deadline_passed(now: Instant, deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| now >= d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn doubles_from_five_seconds_to_a_minute() {
        let table = [
            (0, 0),
            (1, 0),
            (2, 5),
            (3, 10),
            (4, 20),
            (5, 40),
            (6, 60),
            (7, 60),
            (100, 60),
            (u32::MAX, 60),
        ];
        for (attempt, secs) in table {
            assert_eq!(delay_before(attempt), s(secs), "attempt {attempt}");
        }
    }

    #[test]
    fn the_default_retries_outlast_a_thirty_second_outage() {
        let total: Duration = (1..=attempts(3)).map(delay_before).sum();
        assert_eq!(total, s(35));
        assert_eq!(attempts(u32::MAX), u32::MAX);
    }

    #[test]
    fn before_an_attempt() {
        let now = Instant::now();
        // (attempt, deadline in seconds from now, expected)
        let table: [(u32, Option<u64>, Next); 11] = [
            (1, None, Next::Wait(s(0))),
            (2, None, Next::Wait(s(5))),
            (6, None, Next::Wait(s(60))),
            (1, Some(1), Next::Wait(s(0))),
            (2, Some(6), Next::Wait(s(5))),
            // The full wait would reach the deadline: a last attempt after
            // a second, for the time left (OpenKruise's last attempt).
            (2, Some(5), Next::Wait(s(1))),
            (3, Some(9), Next::Wait(s(1))),
            (6, Some(59), Next::Wait(s(1))),
            // Starting exactly at the deadline is too late.
            (2, Some(1), Next::PastDeadline),
            (1, Some(0), Next::PastDeadline),
            (7, Some(0), Next::PastDeadline),
        ];
        for (attempt, deadline, want) in table {
            let d = deadline.map(|secs| now + s(secs));
            assert_eq!(
                before(attempt, now, d),
                want,
                "attempt {attempt}, deadline {deadline:?}"
            );
        }
    }

    #[test]
    fn an_attempt_never_runs_past_the_deadline() {
        let now = Instant::now();
        let table = [
            (600, None, 600),
            (600, Some(30), 30),
            (10, Some(30), 10),
            (600, Some(0), 0),
        ];
        for (timeout, deadline, want) in table {
            let d = deadline.map(|secs| now + s(secs));
            assert_eq!(
                attempt_limit(s(timeout), now, d),
                s(want),
                "timeout {timeout}, deadline {deadline:?}"
            );
        }
        // A deadline already behind us leaves no time at all.
        assert_eq!(attempt_limit(s(600), now + s(5), Some(now)), Duration::ZERO);
    }

    #[test]
    fn deadline_passed_only_at_or_after_it() {
        let now = Instant::now();
        assert!(!deadline_passed(now, None));
        assert!(!deadline_passed(now, Some(now + s(1))));
        assert!(deadline_passed(now, Some(now)));
        assert!(deadline_passed(now + s(1), Some(now)));
    }
}
