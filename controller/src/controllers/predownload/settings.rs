//! A workload's pre-download settings from its annotations, with
//! OpenKruise's defaults; a value that does not parse falls back to the
//! default and is reported by name (OpenKruise ignores it silently).

use nodeimage_api::predownload as names;
use std::collections::BTreeMap;

/// Nodes pulling at once when the workload does not say: half of the
/// job's nodes (OpenKruise's 1 lets any rollout outrun its pre-download;
/// docs/api.md says why half keeps ahead of a default rolling update).
pub const DEFAULT_PARALLELISM: Parallelism = Parallelism::Percent(50);
/// Seconds one pull may take when the workload does not say (OpenKruise's).
pub const DEFAULT_TIMEOUT_SECONDS: i32 = 300;
/// Attempts after the first on a node (OpenKruise's workload jobs use 1).
pub const BACKOFF_LIMIT: i32 = 1;

/// Whether a workload asks for pre-download.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Switch {
    /// `"true"`.
    On,
    /// Absent or `"false"`.
    Off,
    /// Any other value: off, and reported.
    Odd(String),
}

/// How a workload's pre-download runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Whether it is on.
    pub switch: Switch,
    /// Nodes pulling at once.
    pub parallelism: Parallelism,
    /// Seconds one pull may take.
    pub timeout_seconds: i32,
    /// Ready Pods of the new template needed before it starts.
    pub min_updated_ready: MinReady,
    /// Annotations that did not parse, with why (their defaults apply).
    pub problems: Vec<String>,
}

/// `image-predownload-parallelism`: a count of nodes, or a percentage of
/// the nodes the job selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parallelism {
    /// This many nodes.
    Count(i32),
    /// This percentage of the job's nodes, rounded up, at least 1.
    Percent(i32),
}

impl Parallelism {
    /// The number of nodes pulling at once, for a job of `nodes` nodes.
    pub fn of(self, nodes: usize) -> i32 {
        match self {
            Parallelism::Count(n) => n,
            Parallelism::Percent(p) => {
                let n = i64::try_from(nodes).unwrap_or(i64::MAX);
                let scaled = n.saturating_mul(i64::from(p)).saturating_add(99) / 100;
                i32::try_from(scaled).unwrap_or(i32::MAX).max(1)
            }
        }
    }
}

/// `min-updated-ready-pods`: a count or a percentage of the desired Pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MinReady {
    /// This many Pods.
    Count(i32),
    /// This percentage of the desired Pods, rounded up.
    Percent(i32),
}

impl MinReady {
    /// The number of Pods, for a workload that wants `desired`.
    pub fn of(self, desired: i32) -> i32 {
        match self {
            MinReady::Count(n) => n,
            MinReady::Percent(p) => {
                let d = i64::from(desired.max(0)) * i64::from(p);
                i32::try_from((d + 99) / 100).unwrap_or(i32::MAX)
            }
        }
    }
}

/// Reads the settings from `annotations`.
pub fn read(annotations: &BTreeMap<String, String>) -> Settings {
    let mut problems = Vec::new();
    let switch = match annotations.get(names::ENABLED).map(|v| v.trim()) {
        None => Switch::Off,
        Some(v) if v.eq_ignore_ascii_case("true") => Switch::On,
        Some(v) if v.eq_ignore_ascii_case("false") => Switch::Off,
        Some(v) => Switch::Odd(v.to_string()),
    };
    let mut positive = |key: &str, default: i32| match annotations.get(key) {
        None => default,
        Some(v) => match v.trim().parse::<i32>() {
            Ok(n) if n >= 1 => n,
            _ => {
                problems.push(format!(
                    "{key}: {v:?} is not a whole number of at least 1; using {default}"
                ));
                default
            }
        },
    };
    let timeout_seconds = positive(names::TIMEOUT_SECONDS, DEFAULT_TIMEOUT_SECONDS);
    let parallelism = match annotations.get(names::PARALLELISM) {
        None => DEFAULT_PARALLELISM,
        Some(v) => parse_parallelism(v).unwrap_or_else(|| {
            problems.push(format!(
                "{}: {v:?} is neither a whole number of at least 1 nor a percentage from 1% to 100%; using 50%",
                names::PARALLELISM
            ));
            DEFAULT_PARALLELISM
        }),
    };
    let min_updated_ready = match annotations.get(names::MIN_UPDATED_READY_PODS) {
        None => MinReady::Count(0),
        Some(v) => parse_min_ready(v).unwrap_or_else(|| {
            problems.push(format!(
                "{}: {v:?} is neither a count nor a percentage from 0% to 100%; using 0",
                names::MIN_UPDATED_READY_PODS
            ));
            MinReady::Count(0)
        }),
    };
    Settings {
        switch,
        parallelism,
        timeout_seconds,
        min_updated_ready,
        problems,
    }
}

fn parse_parallelism(v: &str) -> Option<Parallelism> {
    let v = v.trim();
    match v.strip_suffix('%') {
        Some(p) => p
            .trim()
            .parse::<i32>()
            .ok()
            .filter(|p| (1..=100).contains(p))
            .map(Parallelism::Percent),
        None => v
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 1)
            .map(Parallelism::Count),
    }
}

fn parse_min_ready(v: &str) -> Option<MinReady> {
    let v = v.trim();
    match v.strip_suffix('%') {
        Some(p) => p
            .parse::<i32>()
            .ok()
            .filter(|p| (0..=100).contains(p))
            .map(MinReady::Percent),
        None => v
            .parse::<i32>()
            .ok()
            .filter(|n| *n >= 0)
            .map(MinReady::Count),
    }
}
