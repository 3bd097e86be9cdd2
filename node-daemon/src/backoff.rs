//! The wait between pull attempts: 1 s, doubling, capped at 30 s (as kubelet
//! and OpenKruise's daemon do), so a flapping registry is not hammered.

use std::time::Duration;

/// First wait after a failed attempt.
pub const INITIAL: Duration = Duration::from_secs(1);
/// Longest wait between attempts.
pub const CAP: Duration = Duration::from_secs(30);

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
    fn doubles_from_one_second_to_a_thirty_second_cap() {
        let table = [
            (0, 0),
            (1, 0),
            (2, 1),
            (3, 2),
            (4, 4),
            (5, 8),
            (6, 16),
            (7, 30),
            (8, 30),
            (100, 30),
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
