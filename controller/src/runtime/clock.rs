//! Conversions between the API's timestamps and the `chrono` instants the
//! pure decision code works with, and Go-style duration text for messages.
//!
//! k8s-openapi serialises `Time` with whole seconds, so instants written back
//! to the API are truncated to the second; that keeps a plan idempotent
//! across a write and the re-read that follows it.

use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// The instant an API timestamp denotes.
pub fn instant(t: &Time) -> DateTime<Utc> {
    let nanos = u32::try_from(t.0.subsec_nanosecond()).unwrap_or(0);
    DateTime::from_timestamp(t.0.as_second(), nanos).unwrap_or_default()
}

/// An API timestamp for `at`, truncated to whole seconds as the API stores it.
pub fn api_time(at: DateTime<Utc>) -> Time {
    let secs = at.timestamp();
    let ts = Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    });
    Time(ts)
}

/// `secs` seconds, saturating at the longest span chrono holds instead of
/// panicking: API values are bounded, but planning must never trust that.
pub fn seconds(secs: i64) -> TimeDelta {
    TimeDelta::try_seconds(secs).unwrap_or(if secs < 0 {
        TimeDelta::MIN
    } else {
        TimeDelta::MAX
    })
}

/// `at + delta`, saturating at the ends of time instead of panicking.
pub fn after(at: DateTime<Utc>, delta: TimeDelta) -> DateTime<Utc> {
    at.checked_add_signed(delta)
        .unwrap_or(if delta < TimeDelta::zero() {
            DateTime::<Utc>::MIN_UTC
        } else {
            DateTime::<Utc>::MAX_UTC
        })
}

/// `delta` as Go prints a `time.Duration` (`10m0s`, `1h0m5s`, `45s`), the
/// form Kubernetes users know from other controllers' messages.
pub fn go_duration(delta: TimeDelta) -> String {
    let total = delta.num_seconds();
    let sign = if total < 0 { "-" } else { "" };
    let total = total.unsigned_abs();
    let (h, m, s) = (total / 3600, (total / 60) % 60, total % 60);
    if h > 0 {
        format!("{sign}{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{sign}{m}m{s}s")
    } else {
        format!("{sign}{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_truncates_to_seconds() {
        let at = DateTime::from_timestamp(1_700_000_000, 750_000_000).unwrap();
        let t = api_time(at);
        assert_eq!(
            instant(&t),
            DateTime::from_timestamp(1_700_000_000, 0).unwrap()
        );
    }

    #[test]
    fn arithmetic_saturates_instead_of_panicking() {
        let now = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let cases = [
            ("ordinary", 600, Some(1_700_000_600)),
            ("negative", -600, Some(1_699_999_400)),
            ("i64::MAX seconds", i64::MAX, None),
            ("i64::MIN seconds", i64::MIN, None),
            (
                "largest int64 API bound",
                i64::from(i32::MAX),
                Some(1_700_000_000 + i64::from(i32::MAX)),
            ),
        ];
        for (name, secs, want) in cases {
            let at = after(now, seconds(secs));
            match want {
                Some(t) => assert_eq!(at.timestamp(), t, "{name}"),
                None if secs > 0 => assert_eq!(at, DateTime::<Utc>::MAX_UTC, "{name}"),
                None => assert_eq!(at, DateTime::<Utc>::MIN_UTC, "{name}"),
            }
        }
        // Far-future instants still convert to API timestamps and back.
        let _ = api_time(after(now, seconds(i64::MAX)));
    }

    #[test]
    fn go_durations() {
        for (secs, want) in [
            (0, "0s"),
            (45, "45s"),
            (600, "10m0s"),
            (90, "1m30s"),
            (3605, "1h0m5s"),
            (-5, "-5s"),
        ] {
            assert_eq!(go_duration(TimeDelta::seconds(secs)), want, "{secs}");
        }
    }
}
