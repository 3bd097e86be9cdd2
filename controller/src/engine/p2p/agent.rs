//! The agent gate: a not-started node's entry waits until the node's P2P
//! agent Pod is Ready, at most the job's wait; then the node pulls directly
//! or fails, as the job says. Pure.

use super::settings::{AgentGate, AgentRef, Missing};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// One Pod as the gate reads it (the shell trims it from the Pod cache).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentPod {
    /// Its namespace.
    pub namespace: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The DaemonSet that controls it, if one does.
    pub daemonset: Option<String>,
    /// The node it is bound to.
    pub node: Option<String>,
    /// Its Ready condition is True.
    pub ready: bool,
    /// Not being deleted, not Succeeded or Failed.
    pub active: bool,
}

impl AgentPod {
    /// Whether the Pod is one of `agent`'s.
    pub fn is_of(&self, agent: &AgentRef) -> bool {
        self.namespace == agent.namespace()
            && match agent {
                AgentRef::DaemonSet { name, .. } => self.daemonset.as_deref() == Some(name),
                AgentRef::Pods { labels, .. } => {
                    labels.iter().all(|(k, v)| self.labels.get(k) == Some(v))
                }
            }
    }
}

/// For each node with an active Pod of `agent`: whether one is Ready.
pub fn agents_by_node<'a>(
    agent: &AgentRef,
    pods: impl IntoIterator<Item = &'a AgentPod>,
) -> BTreeMap<String, bool> {
    let mut out: BTreeMap<String, bool> = BTreeMap::new();
    for p in pods.into_iter().filter(|p| p.active && p.is_of(agent)) {
        if let Some(node) = &p.node {
            let ready = out.entry(node.clone()).or_default();
            *ready |= p.ready;
        }
    }
    out
}

/// What the gate says of a node that has not started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Its agent is Ready: it may start.
    Go,
    /// It waits, with why, at most until the given time.
    Wait {
        /// Why, for the job's status.
        why: String,
        /// When the wait ends.
        until: DateTime<Utc>,
    },
    /// Its agent was not Ready in time: it pulls from the registry.
    Direct(String),
    /// Its agent was not Ready in time: it fails with this reason.
    Skip(String),
}

/// The gate for one not-started node: `on_node` is whether the agent's Pod
/// there is Ready (`None`: no Pod), `since` when the node's wait began.
pub fn gate(
    g: &AgentGate,
    on_node: Option<bool>,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Gate {
    if on_node == Some(true) {
        return Gate::Go;
    }
    let agent = g.agent.describe();
    let state = match on_node {
        Some(_) => "its Pod on the node is not Ready",
        None => "it has no Pod on the node",
    };
    let until = crate::runtime::clock::after(since, g.wait);
    if now < until {
        return Gate::Wait {
            why: format!("waits for the P2P agent {agent}: {state}"),
            until,
        };
    }
    let waited = g.wait.num_seconds();
    match g.missing {
        Missing::Direct => Gate::Direct(format!(
            "pulls directly: the P2P agent {agent} was not Ready after {waited}s ({state})"
        )),
        Missing::Skip => Gate::Skip(format!(
            "skipped: the P2P agent {agent} was not Ready after {waited}s ({state})"
        )),
    }
}
