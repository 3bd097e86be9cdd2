//! The wait between pull attempts: 5 s, doubling, capped at 60 s (5, 10, 20,
//! 40, 60, 60, …), so that the default three retries span 35 s and outlast a
//! registry restart or a short outage (OpenKruise waits 1, 2 and 4 s and
//! fails the job), without hammering a flapping registry. The worker never
//! starts a retry that would begin after the tag's deadline.

use std::time::Duration;

/// First wait after a failed attempt.
pub const INITIAL: Duration = Duration::from_secs(5);
/// Longest wait between attempts.
pub const CAP: Duration = Duration::from_secs(60);

/// Wait before attempt number `next_attempt` (1-based; the first attempt does not wait).
pub fn delay_before(next_attempt: u32) -> Duration {
    if next_attempt <= 1 {
        return Duration::ZERO;
    }
    let exp = (next_attempt - 2).min(16);
    INITIAL.saturating_mul(1u32 << exp).min(CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(
                delay_before(attempt),
                Duration::from_secs(secs),
                "attempt {attempt}"
            );
        }
    }
}
