//! Where a node without a final result stands in this step: rejected
//! before it starts, skipped, waiting for its NodeImage, or tracked through
//! its entries (timed out when past the node timeout). Pure.

use super::outcome::Node;
use super::{NodeTask, Precheck};
use crate::engine::rollout::{self, Entry, EntryState};
use crate::nodeimage::nodes::NodeInfo;
use chrono::{DateTime, TimeDelta, Utc};
use nodeimage_api::kruise::NodeImage;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why a named node that is no edge node does not run a KubeEdge task.
pub const NOT_EDGE: &str =
    "not an edge node: KubeEdge node tasks run only on nodes labelled node-role.kubernetes.io/edge";

/// What tracking a node reads.
pub struct Tracker<'a, K> {
    /// The kind, for its precheck and its reading of a NodeImage.
    pub kind: &'a K,
    /// Only edge nodes take part.
    pub edge_only: bool,
    /// Every Node, by name.
    pub nodes: &'a BTreeMap<String, NodeInfo>,
    /// Every NodeImage, by name.
    pub nodeimages: &'a BTreeMap<String, Arc<NodeImage>>,
    /// The entries every node gets.
    pub entries: &'a [Entry],
    /// The job's uid, the owner of its entries.
    pub uid: &'a str,
    /// The node timeout.
    pub timeout: TimeDelta,
    /// The time.
    pub now: DateTime<Utc>,
}

impl<K: NodeTask> Tracker<'_, K> {
    /// Where a node without a final result stands.
    pub fn node(&self, name: &str) -> Node<K> {
        let ni = self.nodeimages.get(name);
        let states = ni.map(|ni| rollout::entry_states(ni, self.entries, self.uid));
        let started = states
            .as_ref()
            .is_some_and(|s| s.iter().any(|e| *e != EntryState::Missing));
        if !started && let Some(unstarted) = self.before_start(name) {
            return unstarted;
        }
        let (Some(ni), Some(states)) = (ni, states) else {
            return Node::NoNodeImage;
        };
        let detail = self.kind.detail(ni, self.entries, self.uid, &states);
        let pairs: Vec<(Entry, EntryState)> = self.entries.iter().cloned().zip(states).collect();
        let before = self.kind.settle(rollout::node_state(&pairs), &detail);
        let after = rollout::apply_node_timeout(before.clone(), self.timeout, self.now);
        let timed_out = before != after;
        Node::Tracked {
            state: after,
            detail,
            timed_out,
        }
    }

    /// Whether a node that has not started fails or is skipped before it
    /// does: its Node cannot start it, it is no edge node, or the kind says so.
    fn before_start(&self, name: &str) -> Option<Node<K>> {
        let node = self.nodes.get(name);
        if let Some(why) = rollout::unstartable(node) {
            return Some(Node::Rejected(why));
        }
        if self.edge_only && node.is_some_and(|n| !rollout::is_edge_node(n)) {
            return Some(Node::Rejected(NOT_EDGE.into()));
        }
        match self.kind.precheck(name)? {
            Precheck::Reject(why) => Some(Node::Rejected(why)),
            Precheck::Skip => Some(Node::Skipped),
        }
    }
}
