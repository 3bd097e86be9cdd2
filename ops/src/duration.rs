//! Durations as Kubernetes configuration writes them (Go's syntax: `90s`,
//! `10m`, `1h30m`, `1.5h`, `500ms`), plus a bare number meaning seconds, so
//! that flags and config files of both binaries read them the same way.

use std::time::Duration;

/// Why a duration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?} is not a duration such as 90s, 10m or 1h30m: {reason}")]
pub struct DurationError {
    /// What was given.
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

const NANOS_PER: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Parses `s`; negative values and values beyond `u64` seconds are refused.
pub fn parse(s: &str) -> Result<Duration, DurationError> {
    let input = s.trim();
    let err = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    if input.is_empty() {
        return Err(err("empty"));
    }
    if input.starts_with('-') {
        return Err(err("negative"));
    }
    let body = input.strip_prefix('+').unwrap_or(input);
    if body.bytes().all(|b| b.is_ascii_digit()) {
        let secs: u64 = body.parse().map_err(|_| err("too large"))?;
        return Ok(Duration::from_secs(secs));
    }
    if body == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = body;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| err("a number needs a unit (ns, us, ms, s, m or h)"))?;
        let (num, after) = rest.split_at(num_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let (unit, next) = after.split_at(unit_len);
        let per = NANOS_PER
            .iter()
            .find(|(u, _)| *u == unit)
            .map(|(_, n)| *n)
            .ok_or_else(|| err("unknown unit (use ns, us, ms, s, m or h)"))?;
        let (whole, frac) = match num.split_once('.') {
            Some((w, f)) => (w, f),
            None => (num, ""),
        };
        if whole.is_empty() && frac.is_empty() {
            return Err(err("a unit needs a number"));
        }
        if frac.contains('.') {
            return Err(err("more than one decimal point"));
        }
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("too large"))?
        };
        let mut part = whole.checked_mul(per).ok_or_else(|| err("too large"))?;
        // The fraction, to nanosecond precision (further digits are dropped).
        let mut scale = per;
        for d in frac.bytes().take(30) {
            scale /= 10;
            part = part
                .checked_add(u128::from(d - b'0') * scale)
                .ok_or_else(|| err("too large"))?;
        }
        total = total.checked_add(part).ok_or_else(|| err("too large"))?;
        rest = next;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| err("too large"))?;
    // The remainder is below 10^9, so it always fits.
    let nanos = u32::try_from(total % 1_000_000_000).unwrap_or(0);
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_and_bare_seconds() {
        let ok = [
            ("90", Duration::from_secs(90)),
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("90s", Duration::from_secs(90)),
            ("10m", Duration::from_secs(600)),
            ("1h", Duration::from_secs(3600)),
            ("1h30m", Duration::from_secs(5400)),
            ("1.5h", Duration::from_secs(5400)),
            ("500ms", Duration::from_millis(500)),
            ("1m0.5s", Duration::from_millis(60_500)),
            ("2us", Duration::from_micros(2)),
            ("3µs", Duration::from_micros(3)),
            ("7ns", Duration::from_nanos(7)),
            (".5s", Duration::from_millis(500)),
            (" 12h ", Duration::from_secs(43_200)),
            ("+5s", Duration::from_secs(5)),
        ];
        for (s, want) in ok {
            assert_eq!(parse(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn refuses_what_is_not_a_duration() {
        let bad = [
            ("", "empty"),
            ("-5s", "negative"),
            ("1d", "unknown unit"),
            ("m", "a unit needs a number"),
            ("5.5", "a number needs a unit"),
            ("1.2.3s", "more than one decimal point"),
            (".s", "a unit needs a number"),
            ("10x", "unknown unit"),
            ("99999999999999999999999999h", "too large"),
            ("18446744073709551616", "too large"),
            ("6000000000000000h", "too large"),
        ];
        for (s, why) in bad {
            let e = parse(s).expect_err(s);
            assert!(e.reason.starts_with(why), "{s}: {e}");
        }
    }
}
