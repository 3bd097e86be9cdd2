//! Seed, then fan out: per topology domain, `seeds` nodes pull first (from
//! the registry); once some node of the domain holds the image, each holder
//! lets `fan_out - 1` more pull at once, so the nodes pulling grow
//! geometrically and later ones fetch from peers. A seed that fails is
//! replaced by the next node; one that pulls longer than the seed deadline
//! no longer counts, so another node seeds beside it. Pure.

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
}

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
            NodeState::Failed(_) => {}
        }
    }
    let mut out = Waved::default();
    for (value, d) in &domains {
        if d.holders > 0 {
            out.holders.insert(value.clone(), d.holders);
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

/// Why the domain's held nodes wait.
fn reason(w: &Waves, value: &str, d: &Domain<'_>) -> String {
    let domain = if value.is_empty() {
        format!("nodes without {}", w.topology_key)
    } else {
        format!("{}={value}", w.topology_key)
    };
    if d.holders == 0 {
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
