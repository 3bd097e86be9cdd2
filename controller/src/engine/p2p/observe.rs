//! What the P2P rules read of the cluster for one job, taken from the
//! shared Pod and Node caches by a job's shell: whether the agent's Pod on
//! each node is Ready, when each node was created, each node's domain.

use super::settings::Settings;
use super::{AgentPod, World, agents_by_node};
use crate::runtime::clock::instant;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A job's settings and what the rules read of the cluster for them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Observed {
    /// The job's settings.
    pub settings: Settings,
    /// Nodes with an active agent Pod: whether one is Ready.
    pub agents: BTreeMap<String, bool>,
    /// When each node was created (read only with an agent gate).
    pub created: BTreeMap<String, DateTime<Utc>>,
    /// Each node's domain (read only with waves).
    pub domains: BTreeMap<String, String>,
}

impl Observed {
    /// Applies the rules to the job's nodes (`started`: the job's start;
    /// `never_pulled`: failed nodes that never pulled).
    pub fn verdict(
        &self,
        nodes: Vec<(String, crate::engine::rollout::NodeState)>,
        started: DateTime<Utc>,
        never_pulled: &std::collections::BTreeSet<String>,
        now: DateTime<Utc>,
    ) -> super::Verdict {
        let since = |n: &str| self.created.get(n).map_or(started, |c| (*c).max(started));
        let domain = |n: &str| self.domains.get(n).cloned().unwrap_or_default();
        let world = World {
            agents: &self.agents,
            since: &since,
            domain: &domain,
            never_pulled,
            now,
        };
        super::apply(&self.settings, nodes, &world)
    }

    /// What each node of `started` records of its start under `v`
    /// ([`super::notes`]).
    pub fn notes(
        &self,
        v: &super::Verdict,
        started: &[String],
    ) -> BTreeMap<String, nodeimage_api::kruise::TagP2p> {
        let domain = |n: &str| self.domains.get(n).cloned().unwrap_or_default();
        super::notes(&self.settings, v, started, &domain)
    }
}

/// The agent's view of one Pod of the cache (trimmed by
/// `podimages::trim_pod`, which keeps a DaemonSet controller's name).
pub fn agent_pod(p: &Pod) -> AgentPod {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    let ready = p
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let daemonset = p
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        .map(|o| o.name.clone());
    AgentPod {
        namespace: p.namespace().unwrap_or_default(),
        labels: p.labels().clone(),
        daemonset,
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        ready,
        active: p.metadata.deletion_timestamp.is_none()
            && !matches!(phase, Some("Succeeded" | "Failed")),
    }
}

/// Reads what `settings` need from the caches (nothing without P2P settings).
pub fn observe(settings: Settings, pods: &[Arc<Pod>], nodes: &[Arc<Node>]) -> Observed {
    let mut o = Observed::default();
    if let Some(g) = &settings.agent {
        let ns = g.agent.namespace();
        let in_ns = pods
            .iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(ns))
            .map(|p| agent_pod(p))
            .collect::<Vec<_>>();
        o.agents = agents_by_node(&g.agent, &in_ns);
        o.created = nodes
            .iter()
            .filter_map(|n| {
                Some((
                    n.name_any(),
                    instant(n.metadata.creation_timestamp.as_ref()?),
                ))
            })
            .collect();
    }
    if let Some(w) = &settings.waves {
        o.domains = nodes
            .iter()
            .map(|n| {
                let d = n.labels().get(&w.topology_key).cloned();
                (n.name_any(), d.unwrap_or_default())
            })
            .collect();
    }
    o.settings = settings;
    o
}

/// Whether `pod` is the P2P agent of a job with these annotations (a
/// change of it may let the job's nodes start).
pub fn is_agent_for(
    annotations: &BTreeMap<String, String>,
    default_agent: Option<&str>,
    pod: &AgentPod,
) -> bool {
    // Only the agent is read: this runs for every job on every Pod change.
    let named = annotations
        .get(nodeimage_api::p2p::AGENT)
        .map(String::as_str);
    let agent = named
        .or(default_agent)
        .map(super::settings::AgentRef::parse);
    agent.is_some_and(|a| a.ok().flatten().is_some_and(|a| pod.is_of(&a)))
}

/// A job's settings from its annotations, and what they read of the Pod
/// and Node caches (each read only if the settings need it).
pub fn for_job(
    annotations: &BTreeMap<String, String>,
    default_agent: Option<&str>,
    pods: Option<&Store<Pod>>,
    nodes: &Store<Node>,
) -> Result<Observed, String> {
    let settings = super::settings::read(annotations, default_agent)?;
    let pods = match (&settings.agent, pods) {
        (Some(_), Some(p)) => p.state(),
        _ => vec![],
    };
    let nodes = match settings.agent.is_some() || settings.waves.is_some() {
        true => nodes.state(),
        false => vec![],
    };
    Ok(observe(settings, &pods, &nodes))
}
