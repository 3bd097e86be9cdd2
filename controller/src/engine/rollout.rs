//! The rollout rules every job kind shares: which nodes a selector picks, how
//! far each node is with a job's tag entries, which nodes may start now under
//! the job's budget, node timeouts and job deadlines, the failure tolerance.
//! Pure: decisions over snapshots and an explicit `now`.

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use nodeimage_api::kruise::{
    CompletionPolicy, CompletionPolicyType, ImagePullJobTemplate, ImagePullPhase, ImageTagSpec,
    ImageTagStatus, NodeImage, Purpose,
};
use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet};

use crate::nodeimage::nodes::NodeInfo;
use crate::runtime::clock::instant;

/// Added to a finished tag entry's lifetime, so the job reads the result
/// before the entry goes.
pub const ENTRY_TTL_GRACE_SECONDS: i64 = 300;
/// Reason of a named node that does not exist.
pub const NOT_FOUND: &str = "not found";
/// Reason of a node whose Ready condition is not True.
pub const NOT_READY: &str = "not ready";

/// The nodes a job names or selects: `names` in their order (duplicates
/// dropped), else the nodes whose labels match `selector` (with
/// `edge_only`, only edge nodes), sorted by name.
pub fn select_nodes(
    names: Option<&[String]>,
    label_selector: Option<&LabelSelector>,
    nodes: &BTreeMap<String, NodeInfo>,
    edge_only: bool,
) -> Result<Vec<String>, String> {
    if let Some(names) = names.filter(|n| !n.is_empty()) {
        let mut seen = BTreeSet::new();
        return Ok(names
            .iter()
            .filter(|n| seen.insert(n.as_str()))
            .cloned()
            .collect());
    }
    let Some(ls) = label_selector else {
        return Err("set one of nodeNames and labelSelector".into());
    };
    let sel = selector(ls.clone()).map_err(|e| format!("invalid labelSelector: {e}"))?;
    Ok(nodes
        .iter()
        .filter(|(_, node)| sel.matches(&node.labels))
        .filter(|(_, node)| !edge_only || is_edge_node(node))
        .map(|(name, _)| name.clone())
        .collect())
}

/// Why a node cannot start a job's work, if it cannot: its Node does not
/// exist, is not Ready, or gets no NodeImage (virtual or being deleted).
pub fn unstartable(node: Option<&NodeInfo>) -> Option<String> {
    match node {
        None => Some(NOT_FOUND.into()),
        Some(n) if !n.ready => Some(NOT_READY.into()),
        Some(n) if !n.wants_nodeimage => {
            Some("not ready: the node is virtual or being deleted and pulls no images".into())
        }
        Some(_) => None,
    }
}

/// RFC 3339 with whole seconds, as KubeEdge writes `time`.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// A label selector as kube's `Selector` (an empty one matches every label set).
pub fn selector(ls: LabelSelector) -> Result<Selector, String> {
    Selector::try_from(ls).map_err(|e| e.to_string())
}

/// A tag entry a job writes: the NodeImage image key, tag and purpose (a
/// NodeUpgradeJob's is an upgrade, every other kind's a pull).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Entry {
    /// Key in `spec.images`.
    pub image: String,
    /// The tag (or digest).
    pub tag: String,
    /// Which of the tag's entries: the job kind's (`contract::purpose_of`).
    pub purpose: Purpose,
}

/// The NodeImage pull entry (image key, tag) for a job's image, or why it has none.
pub fn entry_for(image: &str) -> Result<Entry, String> {
    let r = ImageRef::parse(image).map_err(|e| e.to_string())?;
    let tag = r
        .digest
        .clone()
        .or_else(|| r.tag.clone())
        .unwrap_or_else(|| "latest".into());
    Ok(Entry {
        image: r.familiar_name(),
        tag,
        purpose: Purpose::Pull,
    })
}

/// Where one entry of a job stands on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// Not written for this job.
    Missing,
    /// Written; the node has not finished it (since the entry's createdAt).
    Active(Option<DateTime<Utc>>),
    /// Pulled.
    Succeeded,
    /// Failed, with the node's reason.
    Failed(String),
}

/// How far one node is with all of a job's entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeState {
    /// Nothing written yet: the node waits for the job's budget.
    NotStarted,
    /// Working, since the earliest entry's createdAt.
    Active(Option<DateTime<Utc>>),
    /// Every entry pulled.
    Succeeded,
    /// Some entry failed (or the node timed out), with the reason.
    Failed(String),
}

impl NodeState {
    /// Whether the node is done with the job.
    pub fn is_finished(&self) -> bool {
        matches!(self, NodeState::Succeeded | NodeState::Failed(_))
    }
}

/// Where each of `entries` stands in `ni` for the owner with `uid`. An entry
/// counts only once it carries the owner and a status for its version.
pub fn entry_states(ni: &NodeImage, entries: &[Entry], uid: &str) -> Vec<EntryState> {
    entries
        .iter()
        .map(|e| {
            let Some(tag) = owned_tag(ni, e, uid) else {
                return EntryState::Missing;
            };
            let status = ni.status.as_ref().and_then(|s| s.entry_for(&e.image, tag));
            match status.map(|s| (s.phase, s.message.as_deref().map(str::to_string))) {
                Some((ImagePullPhase::Succeeded, _)) => EntryState::Succeeded,
                Some((ImagePullPhase::Failed, msg)) => {
                    EntryState::Failed(msg.unwrap_or_else(|| "pull failed".into()))
                }
                _ => EntryState::Active(tag.created_at.as_ref().map(instant)),
            }
        })
        .collect()
}

/// The node's status of `entry` when the tag is owned by `uid` and the
/// status answers the tag's current version (what [`entry_states`] reads).
pub fn entry_status<'a>(ni: &'a NodeImage, entry: &Entry, uid: &str) -> Option<&'a ImageTagStatus> {
    let tag = owned_tag(ni, entry, uid)?;
    ni.status.as_ref()?.entry_for(&entry.image, tag)
}

/// The spec entry of `entry` in `ni`, if the owner with `uid` holds it.
fn owned_tag<'a>(ni: &'a NodeImage, entry: &Entry, uid: &str) -> Option<&'a ImageTagSpec> {
    ni.spec
        .images
        .as_ref()?
        .get(entry.image.as_str())?
        .entry(&entry.tag, entry.purpose)
        .filter(|t| {
            t.owner_references
                .iter()
                .flatten()
                .any(|o| o.uid.as_deref() == Some(uid))
        })
}

/// Combines a node's entry states: any missing → not started; any unfinished
/// → active; any failed → failed (reasons joined); else succeeded.
pub fn node_state(entries: &[(Entry, EntryState)]) -> NodeState {
    if entries.is_empty() || entries.iter().any(|(_, s)| *s == EntryState::Missing) {
        return NodeState::NotStarted;
    }
    let active: Vec<Option<DateTime<Utc>>> = entries
        .iter()
        .filter_map(|(_, s)| match s {
            EntryState::Active(since) => Some(*since),
            _ => None,
        })
        .collect();
    if !active.is_empty() {
        return NodeState::Active(active.into_iter().flatten().min());
    }
    let failures: Vec<String> = entries
        .iter()
        .filter_map(|(e, s)| match s {
            EntryState::Failed(m) => Some(if entries.len() > 1 {
                format!("{}:{}: {m}", e.image, e.tag)
            } else {
                m.clone()
            }),
            _ => None,
        })
        .collect();
    if failures.is_empty() {
        NodeState::Succeeded
    } else {
        NodeState::Failed(failures.join("; "))
    }
}

/// Fails active nodes that have worked longer than `timeout` (KubeEdge's
/// per-node timeoutSeconds), so a silent node frees its slot.
pub fn apply_node_timeout(state: NodeState, timeout: TimeDelta, now: DateTime<Utc>) -> NodeState {
    match state {
        NodeState::Active(Some(since)) if now >= crate::runtime::clock::after(since, timeout) => {
            NodeState::Failed(format!(
                "timed out: the node did not finish within {}s",
                timeout.num_seconds()
            ))
        }
        other => other,
    }
}

/// When an active node times out, if it has a start time.
pub fn node_timeout_at(state: &NodeState, timeout: TimeDelta) -> Option<DateTime<Utc>> {
    match state {
        NodeState::Active(Some(since)) => Some(crate::runtime::clock::after(*since, timeout)),
        _ => None,
    }
}

/// The nodes to start now: the first not-started ones, in the given order,
/// up to `limit` minus the active ones.
pub fn to_start(nodes: &[(String, NodeState)], limit: usize) -> Vec<String> {
    let active = nodes
        .iter()
        .filter(|(_, s)| matches!(s, NodeState::Active(_)))
        .count();
    nodes
        .iter()
        .filter(|(_, s)| *s == NodeState::NotStarted)
        .take(limit.saturating_sub(active))
        .map(|(n, _)| n.clone())
        .collect()
}

/// The nodes a job starts in one step, and how many its own budget would
/// have started: the difference waits for a registry's free slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Starts {
    /// Nodes the job's own budget would start now.
    pub wanted: usize,
    /// Nodes that start: the first of those, up to the registry cap.
    pub nodes: Vec<String>,
    /// Those of `nodes` that fetch from peers, not the registry (P2P
    /// waves): registry pacing neither reserves nor counts them.
    pub from_peers: BTreeSet<String>,
}

/// What registry pacing lets a job start: `slots` nodes not yet pulling
/// from its limited registries, and any number of `riding` nodes, which
/// already pull from every one of them (they count once however many
/// entries they pull, so taking them costs no slot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cap {
    /// Nodes not yet pulling from the registries that may start.
    pub slots: usize,
    /// Nodes already pulling from every limited registry of the job.
    pub riding: BTreeSet<String>,
}

#[cfg(test)]
impl Cap {
    /// `slots` new nodes and no node to ride.
    pub fn new(slots: usize) -> Self {
        Cap {
            slots,
            riding: BTreeSet::new(),
        }
    }
}

/// [`to_start`] within `cap` (`None`: no registry limit applies): nodes
/// already pulling from the job's registries first (free), then up to
/// `cap.slots` others, in the given order, all within the job's budget.
pub fn to_start_capped(nodes: &[(String, NodeState)], limit: usize, cap: Option<&Cap>) -> Starts {
    let Some(cap) = cap else {
        let start = to_start(nodes, limit);
        return Starts {
            wanted: start.len(),
            nodes: start,
            ..Starts::default()
        };
    };
    let wanted = to_start(nodes, limit).len();
    let not_started = || {
        nodes
            .iter()
            .filter(|(_, s)| *s == NodeState::NotStarted)
            .map(|(n, _)| n)
    };
    let riding = not_started().filter(|n| cap.riding.contains(*n));
    let others = not_started().filter(|n| !cap.riding.contains(*n));
    let mut start: Vec<String> = riding.take(wanted).cloned().collect();
    let room = wanted.saturating_sub(start.len()).min(cap.slots);
    start.extend(others.take(room).cloned());
    Starts {
        wanted,
        nodes: start,
        ..Starts::default()
    }
}

/// [`to_start_capped`], where the `from_peers` nodes (P2P waves) need no
/// free registry slot, as nodes riding on a pull already under way.
pub fn to_start_paced(
    nodes: &[(String, NodeState)],
    limit: usize,
    cap: Option<&Cap>,
    from_peers: &BTreeSet<String>,
) -> Starts {
    let widened;
    let cap = match cap {
        Some(c) if !from_peers.is_empty() => {
            widened = Cap {
                slots: c.slots,
                riding: c.riding.union(from_peers).cloned().collect(),
            };
            Some(&widened)
        }
        other => other,
    };
    let mut start = to_start_capped(nodes, limit, cap);
    start.from_peers = start
        .nodes
        .iter()
        .filter(|n| from_peers.contains(*n))
        .cloned()
        .collect();
    start
}

/// Counts of a job's nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Nodes selected.
    pub desired: usize,
    /// Nodes working.
    pub active: usize,
    /// Nodes waiting for the budget.
    pub not_started: usize,
    /// Nodes done.
    pub succeeded: usize,
    /// Nodes failed, with reasons, in node order.
    pub failed: Vec<(String, String)>,
}

impl Tally {
    /// Whether every node has finished.
    pub fn finished(&self) -> bool {
        self.active == 0 && self.not_started == 0
    }

    /// Percentage of nodes finished.
    pub fn percent_done(&self) -> f64 {
        if self.desired == 0 {
            100.0
        } else {
            (self.succeeded + self.failed.len()) as f64 * 100.0 / self.desired as f64
        }
    }
}

/// Counts the nodes by state.
pub fn tally(nodes: &[(String, NodeState)]) -> Tally {
    let mut t = Tally {
        desired: nodes.len(),
        ..Default::default()
    };
    for (n, s) in nodes {
        match s {
            NodeState::NotStarted => t.not_started += 1,
            NodeState::Active(_) => t.active += 1,
            NodeState::Succeeded => t.succeeded += 1,
            NodeState::Failed(m) => t.failed.push((n.clone(), m.clone())),
        }
    }
    t
}

/// Past the job's deadline, every unfinished node counts as failed with `reason`.
pub fn apply_deadline(nodes: Vec<(String, NodeState)>, reason: &str) -> Vec<(String, NodeState)> {
    nodes
        .into_iter()
        .map(|(n, s)| {
            if s.is_finished() {
                (n, s)
            } else {
                (n, NodeState::Failed(reason.to_string()))
            }
        })
        .collect()
}

/// An OpenKruise job's completion policy, and whether it completes at all
/// (type `Always`, the default).
pub fn completion(t: &ImagePullJobTemplate) -> (CompletionPolicy, bool) {
    let cp = t.completion_policy.clone().unwrap_or_default();
    let always = cp.type_.unwrap_or_default() == CompletionPolicyType::Always;
    (cp, always)
}

/// A completed job's `ttlSecondsAfterFinished`: whether the job is due for
/// deletion, and how long until it is.
pub fn ttl_due(
    done: DateTime<Utc>,
    ttl: Option<i32>,
    now: DateTime<Utc>,
) -> (bool, Option<std::time::Duration>) {
    match ttl {
        Some(ttl) => {
            let due =
                crate::runtime::clock::after(done, crate::runtime::clock::seconds(i64::from(ttl)));
            (now >= due, (due - now).to_std().ok())
        }
        None => (false, None),
    }
}

/// KubeEdge's failure tolerance: parses `"0.1"`-style text (unset means 0.1).
pub fn parse_tolerance(s: Option<&str>) -> Result<f64, String> {
    match s.map(str::trim) {
        None | Some("") => Ok(nodeimage_api::defaults::FAILURE_TOLERATE),
        Some(t) => match t.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
            _ => Err(format!(
                "failureTolerate {t:?} is not a decimal between 0 and 1"
            )),
        },
    }
}

/// Whether `failed` of `total` nodes reach the tolerance, KubeEdge
/// v1alpha1's rule (`failed >= total × tolerance`): the job starts no more
/// nodes and fails. "0" tolerates no failure but does not fail a job
/// without failures (upstream fails every job with "0").
pub fn tolerance_reached(failed: usize, total: usize, tolerance: f64) -> bool {
    total > 0 && failed > 0 && (failed as f64) + 1e-9 >= (total as f64) * tolerance
}

/// The label KubeEdge's edge nodes carry; its node tasks select only them.
pub const EDGE_NODE_LABEL: &str = "node-role.kubernetes.io/edge";

/// Whether a Node is a KubeEdge edge node.
pub fn is_edge_node(node: &NodeInfo) -> bool {
    node.labels.contains_key(EDGE_NODE_LABEL)
}

#[cfg(test)]
mod tests;
