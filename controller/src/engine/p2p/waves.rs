//! Seed, then fan out: per topology domain, `seeds` nodes pull first (from
//! the registry); once some node of the domain holds the image, each holder
//! lets `fan_out - 1` more pull at once, so the nodes pulling grow
//! geometrically and later ones fetch from peers. A seed that fails is
//! replaced by the next node; one that pulls longer than the seed deadline
//! no longer counts, so another node seeds beside it. A domain whose seeds
//! keep failing, none holding the image, stops: its other nodes fail with
//! the seeds' last reason rather than try the registry one at a time.
//! Pure.

use super::settings::Waves;
use crate::engine::rollout::NodeState;
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// How one domain stands.
#[derive(Default)]
struct Domain<'a> {
    /// Nodes that hold the image.
    holders: usize,
    /// Nodes pulling, and of those the ones within the seed deadline.
    active: usize,
    fresh: usize,
    /// Not-started nodes, in the job's order.
    waiting: Vec<&'a str>,
    /// Nodes that failed, and the last of them (in the job's order) with
    /// its reason.
    failed: usize,
    last_failure: Option<(&'a str, &'a str)>,
}

/// What the waves make of the not-started nodes in one step.
#[derive(Debug, Default, PartialEq)]
pub struct Waved {
    /// Nodes held back now, each with why.
    pub held: Vec<(String, String)>,
    /// Nodes that may start and would fetch from peers: their domain has a
    /// node holding the image (registry pacing gives them no slot).
    pub from_peers: Vec<String>,
    /// Nodes holding the image, per domain (value of the topology key).
    pub holders: BTreeMap<String, usize>,
    /// Not-started nodes of a domain whose seeds failed too often: they
    /// fail now, each with why.
    pub given_up: Vec<(String, String)>,
}

/// Seeds of a domain that may fail, none holding the image and none
/// pulling, before the domain's other nodes fail instead of seeding one
/// after another: this many per seed asked (a registry that refuses every
/// seed would walk the whole job through it one node at a time).
pub const FAILED_SEEDS_PER_SEED: usize = 3;

/// The not-started nodes of `nodes` that the waves hold back now, with
/// why, and those that may start from peers; `domain` names a node's
/// domain.
pub fn apply(
    w: &Waves,
    nodes: &[(String, NodeState)],
    domain: &dyn Fn(&str) -> String,
    now: DateTime<Utc>,
) -> Waved {
    let mut domains: BTreeMap<String, Domain<'_>> = BTreeMap::new();
    for (name, state) in nodes {
        let d = domains.entry(domain(name)).or_default();
        match state {
            NodeState::Succeeded => d.holders += 1,
            NodeState::Active(since) => {
                d.active += 1;
                let stale = since.is_some_and(|s| now - s >= w.seed_deadline);
                d.fresh += usize::from(!stale);
            }
            NodeState::NotStarted => d.waiting.push(name),
            NodeState::Failed(why) => {
                d.failed += 1;
                d.last_failure = Some((name, why));
            }
        }
    }
    let mut out = Waved::default();
    for (value, d) in &domains {
        if d.holders > 0 {
            out.holders.insert(value.clone(), d.holders);
        }
        let limit = w.seeds.saturating_mul(FAILED_SEEDS_PER_SEED);
        if d.holders == 0 && d.active == 0 && d.failed >= limit {
            let why = gave_up(w, value, d);
            out.given_up
                .extend(d.waiting.iter().map(|n| (n.to_string(), why.clone())));
            continue;
        }
        let allowance = allowance(w, d);
        let why = reason(w, value, d);
        if d.holders > 0 {
            out.from_peers
                .extend(d.waiting.iter().take(allowance).map(|n| n.to_string()));
        }
        out.held.extend(
            d.waiting
                .iter()
                .skip(allowance)
                .map(|n| (n.to_string(), why.clone())),
        );
    }
    out
}

/// How many more of the domain's nodes may start now.
fn allowance(w: &Waves, d: &Domain<'_>) -> usize {
    if d.holders == 0 {
        w.seeds.saturating_sub(d.fresh)
    } else {
        d.holders
            .saturating_mul(w.fan_out.saturating_sub(1).max(1))
            .saturating_sub(d.active)
    }
}

/// The domain in words.
fn domain_name(w: &Waves, value: &str) -> String {
    if value.is_empty() {
        format!("nodes without {}", w.topology_key)
    } else {
        format!("{}={value}", w.topology_key)
    }
}

/// One of the domain's failures (the last in the job's node order),
/// `, e.g. NODE: WHY` (cut to 200 characters).
fn last_failure(d: &Domain<'_>) -> String {
    d.last_failure.map_or_else(String::new, |(node, why)| {
        let why: String = why.chars().take(200).collect();
        format!(", e.g. {node}: {why}")
    })
}

/// Why a domain whose seeds failed too often stops.
fn gave_up(w: &Waves, value: &str, d: &Domain<'_>) -> String {
    format!(
        "not pulled: {} seed(s) of {} failed and none holds the image{}",
        d.failed,
        domain_name(w, value),
        last_failure(d)
    )
}

/// Why the domain's held nodes wait.
fn reason(w: &Waves, value: &str, d: &Domain<'_>) -> String {
    let domain = domain_name(w, value);
    if d.holders == 0 && d.failed > 0 {
        format!(
            "waits for a seed of {domain} to hold the image ({} seed(s) pulling, {} failed{})",
            d.active,
            d.failed,
            last_failure(d)
        )
    } else if d.holders == 0 {
        format!(
            "waits for a seed of {domain} to hold the image ({} seed(s) pulling)",
            d.active
        )
    } else {
        format!(
            "waits for the next wave of {domain}: {} node(s) hold the image, {} pull",
            d.holders, d.active
        )
    }
}
