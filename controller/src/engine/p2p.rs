//! Peer-to-peer distribution, the rules in one place: a node's entry waits
//! for the node's P2P agent to be Ready (`agent`), and nodes start in waves,
//! seeds first per topology domain, then as many more as the nodes holding
//! the image can serve (`waves`). Both only narrow which not-started nodes
//! may start; the job's parallelism and registry pacing
//! (`rollout::to_start_capped`) still decide how many do, except that a
//! node the waves start from peers takes no registry slot (the bytes do
//! not come from the registry). Pure.

pub mod agent;
pub mod observe;
pub mod settings;
pub mod waves;

use crate::engine::rollout::NodeState;
use chrono::{DateTime, Utc};
use nodeimage_api::kruise::{AgentUse, TagP2p, WaveRole};
use settings::Settings;
use std::collections::{BTreeMap, BTreeSet};

pub use agent::{AgentPod, Gate, agents_by_node};

/// What the P2P rules make of a job's nodes in one step.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdict {
    /// Every node with its state; a node its agent's absence skips is failed
    /// with the reason.
    pub nodes: Vec<(String, NodeState)>,
    /// The nodes the job's budget may start from: `nodes` without the
    /// not-started ones held back.
    pub startable: Vec<(String, NodeState)>,
    /// Held-back nodes with why, in node order.
    pub held: Vec<(String, String)>,
    /// Nodes whose agent was not Ready in time that pull from the registry.
    pub direct: Vec<String>,
    /// Startable nodes that would fetch from peers (a node of their domain
    /// holds the image): registry pacing gives them no slot.
    pub from_peers: BTreeSet<String>,
    /// Nodes holding the image per domain (with waves; domains with none
    /// left out).
    pub holders: BTreeMap<String, usize>,
    /// When a held node's wait for its agent ends (the job looks again then).
    pub wake_at: Option<DateTime<Utc>>,
}

impl Verdict {
    /// Everything may start as it would without P2P settings.
    fn open(nodes: Vec<(String, NodeState)>) -> Self {
        Verdict {
            startable: nodes.clone(),
            nodes,
            ..Default::default()
        }
    }

    /// One line for the job's status: how many nodes are held and why
    /// (the first reason), and how many pull directly.
    pub fn summary(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some((node, why)) = self.held.first() {
            parts.push(format!(
                "{} node(s) held back (e.g. {node}: {why})",
                self.held.len()
            ));
        }
        if let Some(node) = self.direct.first() {
            parts.push(format!(
                "{} node(s) pull directly without a Ready P2P agent (e.g. {node})",
                self.direct.len()
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// What the rules read of the cluster besides the nodes' states.
pub struct World<'a> {
    /// Whether the agent's Pod on each node is Ready (absent: no Pod).
    pub agents: &'a BTreeMap<String, bool>,
    /// When each node's wait for its agent began: the job's start or the
    /// node's creation, whichever is later.
    pub since: &'a dyn Fn(&str) -> DateTime<Utc>,
    /// Each node's topology domain (its value of the waves' key, "" without).
    pub domain: &'a dyn Fn(&str) -> String,
    /// Failed nodes that never pulled (refused before they started: not
    /// Ready, not found, skipped by the agent gate or by the waves): not
    /// failed seeds.
    pub never_pulled: &'a BTreeSet<String>,
    /// The time.
    pub now: DateTime<Utc>,
}

/// Applies the agent gate, then the waves, to the job's nodes.
pub fn apply(s: &Settings, nodes: Vec<(String, NodeState)>, w: &World<'_>) -> Verdict {
    if s.agent.is_none() && s.waves.is_none() {
        return Verdict::open(nodes);
    }
    let mut v = Verdict::default();
    let mut blocked: BTreeSet<String> = BTreeSet::new();
    // Nodes that never pulled, those the agent gate skips now among them:
    // not failed seeds.
    let mut skipped: BTreeSet<String> = w.never_pulled.clone();
    let mut out = Vec::with_capacity(nodes.len());
    for (name, state) in nodes {
        let gate = match (&s.agent, &state) {
            (Some(g), NodeState::NotStarted) => {
                let on_node = w.agents.get(&name).copied();
                agent::gate(g, on_node, (w.since)(&name), w.now)
            }
            _ => Gate::Go,
        };
        match gate {
            Gate::Go => out.push((name, state)),
            Gate::Direct(_) => {
                v.direct.push(name.clone());
                out.push((name, state));
            }
            Gate::Skip(why) => {
                skipped.insert(name.clone());
                out.push((name, NodeState::Failed(why)));
            }
            Gate::Wait { why, until } => {
                v.wake_at = Some(v.wake_at.map_or(until, |w| w.min(until)));
                v.held.push((name.clone(), why));
                blocked.insert(name.clone());
                out.push((name, state));
            }
        }
    }
    if let Some(waves) = &s.waves {
        let open: Vec<(String, NodeState)> = out
            .iter()
            .filter(|(n, _)| !blocked.contains(n) && !skipped.contains(n))
            .cloned()
            .collect();
        let waved = waves::apply(waves, &open, w.domain, w.now);
        let given_up: BTreeMap<String, String> = waved.given_up.into_iter().collect();
        for (name, state) in out.iter_mut() {
            if let Some(why) = given_up.get(name) {
                *state = NodeState::Failed(why.clone());
            }
        }
        for (name, why) in waved.held {
            blocked.insert(name.clone());
            v.held.push((name, why));
        }
        v.from_peers = waved.from_peers.into_iter().collect();
        v.holders = waved.holders;
        let order: BTreeMap<&String, usize> =
            out.iter().enumerate().map(|(i, (n, _))| (n, i)).collect();
        v.held.sort_by_key(|(n, _)| order.get(n).copied());
    }
    v.startable = out
        .iter()
        .filter(|(n, _)| !blocked.contains(n))
        .cloned()
        .collect();
    v.nodes = out;
    v
}

/// What each node of `started` records of its start (its tag entry's
/// `p2p`): with waves, a seed of its domain or from peers (and how many
/// held the image); with an agent gate, Ready or pulling directly. None
/// without P2P settings. `domain` names a node's domain.
pub fn notes(
    s: &Settings,
    v: &Verdict,
    started: &[String],
    domain: &dyn Fn(&str) -> String,
) -> BTreeMap<String, TagP2p> {
    if s.agent.is_none() && s.waves.is_none() {
        return BTreeMap::new();
    }
    let note = |node: &String| {
        let mut n = TagP2p::default();
        if s.agent.is_some() {
            let direct = v.direct.contains(node);
            n.agent = Some(if direct {
                AgentUse::Direct
            } else {
                AgentUse::Ready
            });
        }
        if let Some(w) = &s.waves {
            let value = domain(node);
            let peers = v.from_peers.contains(node);
            n.wave = Some(if peers {
                WaveRole::Peers
            } else {
                WaveRole::Seed
            });
            if peers {
                let held = v.holders.get(&value).copied().unwrap_or(0);
                n.holders = Some(i32::try_from(held).unwrap_or(i32::MAX));
            }
            n.domain = Some(format!("{}={value}", w.topology_key));
        }
        (node.clone(), n)
    };
    started.iter().map(note).collect()
}

#[cfg(test)]
mod model;
#[cfg(test)]
mod tests;
