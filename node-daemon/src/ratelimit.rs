//! How long a node leaves a registry alone after it answered HTTP 429 (or
//! the registry error code `toomanyrequests`), as pure decisions; the
//! node's memory of such registries is [`registries::Registries`].
//!
//! A rate-limited pull spends no attempt: it waits and asks again. The
//! wait is the registry's `Retry-After` when the runtime's error carries
//! one (containerd's do not), else 5 s doubling to 5 min (5, 10, 20, 40,
//! 80, 160, 300, 300, …). The first wait equals the retry schedule's first
//! (`retry::INITIAL`), so a short burst limit (seconds) costs little; the cap
//! keeps a node that is over a long-window quota (Docker Hub counts per six
//! hours) to twelve tries an hour, each of which containerd itself repeats
//! up to six times at once. Each node shortens its own wait by up to a
//! fifth, the share fixed by its name, the registry and the round, so nodes
//! limited together do not come back in the same instant.

pub mod registries;

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

/// First wait after a registry rate-limited this node.
pub const INITIAL: Duration = Duration::from_secs(5);
/// Longest wait of the growing schedule.
pub const CAP: Duration = Duration::from_secs(300);
/// Longest `Retry-After` honoured: a registry asking for more is asked again
/// after this (the tag's deadline ends the wait sooner where it has one).
pub const LONGEST_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// Shortest wait, whatever `Retry-After` says: the runtime already asked a
/// few times before answering.
pub const SHORTEST: Duration = Duration::from_secs(1);
/// Share of a wait that jitter may take off (schedule) or add (`Retry-After`).
const SPREAD: f64 = 0.2;
/// Longest excerpt of a registry's words kept for a message, in bytes.
pub const SAID_MAX: usize = 240;

/// The wait after the `round`-th 429 in a row (1-based) with `jitter` in
/// [0, 1): `Retry-After` (bounded, plus up to a fifth so nodes spread out
/// and none comes back early) when the registry said it, else the growing
/// schedule less up to a fifth (so the cap stays a cap).
pub fn wait_after(round: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
    let jitter = jitter.clamp(0.0, 1.0);
    match retry_after {
        Some(r) => {
            let asked = r.clamp(SHORTEST, LONGEST_RETRY_AFTER);
            asked + share(asked, SPREAD * jitter)
        }
        None => {
            let exp = round.saturating_sub(1).min(16);
            let full = INITIAL.saturating_mul(1u32 << exp).min(CAP);
            full - share(full, SPREAD * jitter)
        }
    }
}

/// `fraction` of `d`, to the millisecond.
fn share(d: Duration, fraction: f64) -> Duration {
    Duration::from_millis((d.as_millis() as f64 * fraction).round() as u64)
}

/// This node's jitter for `registry` in `round`: a fixed share in [0, 1)
/// from the three, so a node's waits are reproducible and different nodes'
/// differ.
pub fn jitter(node: &str, registry: &str, round: u32) -> f64 {
    let mut h = DefaultHasher::new();
    (node, registry, round).hash(&mut h);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether a runtime's error says the registry rate-limited the pull: the
/// HTTP status (containerd 1.6, 1.7 and 2.x all print `429 Too Many
/// Requests`) or the registry's error code (`toomanyrequests: …`, which
/// containerd adds when the registry sent a body).
pub fn says_rate_limited(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower.contains("429 too many requests") || lower.contains("toomanyrequests")
}

/// `Retry-After` in whole seconds if the runtime's error quotes it
/// (`Retry-After: 30`, any case); an HTTP date is not read.
pub fn retry_after(message: &str) -> Option<Duration> {
    let lower = message.to_ascii_lowercase();
    let at = lower.find("retry-after")? + "retry-after".len();
    let rest = lower[at..].trim_start_matches([':', '=', ' ']);
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok().map(Duration::from_secs)
}

/// What the registry said, for a tag's message and the log: from its error
/// code on (`toomanyrequests: …`, first line) when the runtime quotes it,
/// else the HTTP status. Never the request URL (it may carry a token).
pub fn what_it_said(message: &str) -> &str {
    let lower = message.to_ascii_lowercase();
    match lower.find("toomanyrequests") {
        Some(at) => message[at..].lines().next().unwrap_or_default().trim(),
        None => "429 Too Many Requests",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_wait_grows_and_is_capped() {
        // (round, Retry-After, jitter, wait)
        let table: [(u32, Option<u64>, f64, Duration); 17] = [
            (1, None, 0.0, s(5)),
            (2, None, 0.0, s(10)),
            (3, None, 0.0, s(20)),
            (4, None, 0.0, s(40)),
            (5, None, 0.0, s(80)),
            (6, None, 0.0, s(160)),
            (7, None, 0.0, s(300)),
            (8, None, 0.0, s(300)),
            (u32::MAX, None, 0.0, s(300)),
            // Round 0 cannot happen; it reads as the first.
            (0, None, 0.0, s(5)),
            // Jitter takes off up to a fifth, so the cap stays a cap.
            (1, None, 0.5, ms(4_500)),
            (7, None, 0.5, s(270)),
            (7, None, 1.0, s(240)),
            // Retry-After wins, plus up to a fifth, within its bounds.
            (1, Some(30), 0.0, s(30)),
            (9, Some(30), 0.5, s(33)),
            (1, Some(0), 0.0, s(1)),
            (1, Some(86_400), 0.0, s(3600)),
        ];
        for (round, retry_after, jitter, want) in table {
            assert_eq!(
                wait_after(round, retry_after.map(s), jitter),
                want,
                "round {round}, Retry-After {retry_after:?}, jitter {jitter}"
            );
        }
    }

    #[test]
    fn jitter_is_a_fixed_share_per_node() {
        let a = jitter("node-a", "docker.io", 1);
        assert!((0.0..1.0).contains(&a), "{a}");
        assert_eq!(a, jitter("node-a", "docker.io", 1), "reproducible");
        let others: Vec<f64> = (0..20)
            .map(|i| jitter(&format!("node-{i}"), "docker.io", 1))
            .collect();
        assert!(
            others.iter().any(|j| (j - a).abs() > 0.01),
            "nodes spread out: {others:?}"
        );
        for j in others {
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn recognises_what_runtimes_print_for_a_429() {
        // (runtime's message, rate limited)
        let table = [
            // containerd 1.6, 1.7 and 2.x resolving a tag (HEAD, no body).
            (
                "failed to pull and unpack image \"h/x:v1\": failed to resolve reference \"h/x:v1\": unexpected status from HEAD request to http://h/v2/x/manifests/v1: 429 Too Many Requests",
                true,
            ),
            // containerd 1.6 before its errors were typed.
            (
                "failed to resolve reference \"h/x:v1\": pulling from host h failed with status code [manifests v1]: 429 Too Many Requests",
                true,
            ),
            // containerd 1.6 and 1.7 fetching a blob, with the registry's body.
            (
                "failed to copy: httpReadSeeker: failed open: unexpected status code https://h/v2/x/blobs/sha256:1: 429 Too Many Requests - Server message: toomanyrequests: You have reached your pull rate limit.",
                true,
            ),
            // containerd 2.x fetching a blob: the status, then the body's errors.
            (
                "failed to copy: httpReadSeeker: failed open: unexpected status from GET request to https://h/v2/x/blobs/sha256:1: 429 Too Many Requests\ntoomanyrequests: slow down",
                true,
            ),
            ("toomanyrequests: too many requests", true),
            (
                "unexpected status from HEAD request to http://h/v2/x/manifests/v1: 503 Service Unavailable",
                false,
            ),
            ("h/x:v1: not found", false),
            (
                "pulling from host h failed with status code [manifests v1]: 401 Unauthorized",
                false,
            ),
        ];
        for (message, want) in table {
            assert_eq!(says_rate_limited(message), want, "{message}");
        }
    }

    #[test]
    fn reads_retry_after_when_quoted() {
        let table = [
            ("429 Too Many Requests", None),
            ("429 Too Many Requests (Retry-After: 30)", Some(s(30))),
            ("retry-after=7; toomanyrequests", Some(s(7))),
            ("Retry-After: Wed, 21 Oct 2015 07:28:00 GMT", None),
            ("retry-after", None),
        ];
        for (message, want) in table {
            assert_eq!(retry_after(message), want, "{message}");
        }
    }

    #[test]
    fn keeps_the_registrys_words_without_the_url() {
        let table = [
            (
                "unexpected status from HEAD request to http://h/v2/x/manifests/v1?token=secret: 429 Too Many Requests",
                "429 Too Many Requests",
            ),
            (
                "unexpected status from GET request to https://h/v2/x/blobs/sha256:1: 429 Too Many Requests\ntoomanyrequests: You have reached your pull rate limit.\nmore",
                "toomanyrequests: You have reached your pull rate limit.",
            ),
            (
                "unexpected status code https://h/v2/x/blobs/sha256:1: 429 Too Many Requests - Server message: TOOMANYREQUESTS: slow down",
                "TOOMANYREQUESTS: slow down",
            ),
        ];
        for (message, want) in table {
            assert_eq!(what_it_said(message), want, "{message}");
        }
    }
}
