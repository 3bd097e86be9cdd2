//! What one step of the node-task engine produces: each node's situation
//! and the step's decision. Read by every phase (`step`, `track`, `rows`,
//! `verdict`), so it sits beside them rather than in any one of them.

use super::{NodeTask, Phase, state};
use crate::engine::jobevents::JobEvent;
use crate::engine::rollout::{NodeState, Starts};
use nodeimage_api::kruise::TagP2p;
use std::collections::BTreeMap;
use std::time::Duration;

/// One node's situation in this step.
pub enum Node<K: NodeTask> {
    /// Finished before: kept verbatim.
    Final(K::Row),
    /// Failed before starting (event Init).
    Rejected(String),
    /// Needs nothing (the kind's precheck): succeeded at once.
    Skipped,
    /// Waiting for its NodeImage to exist.
    NoNodeImage,
    /// Held back by the P2P rules (`engine::p2p`), with why.
    Held(String),
    /// Known through its entries.
    Tracked {
        /// Where the node stands.
        state: NodeState,
        /// What its NodeImage reports.
        detail: K::Detail,
        /// It failed in this step by running out of time.
        timed_out: bool,
    },
}

impl<K: NodeTask> Node<K> {
    pub(super) fn node_state(&self) -> NodeState {
        match self {
            Node::Final(r) => {
                let t = K::task(r).cloned().unwrap_or_default();
                if t.phase.state.as_deref() == Some(state::SUCCESSFUL) {
                    NodeState::Succeeded
                } else {
                    NodeState::Failed(t.phase.reason.unwrap_or_default())
                }
            }
            Node::Rejected(reason) => NodeState::Failed(reason.clone()),
            Node::Skipped => NodeState::Succeeded,
            Node::NoNodeImage | Node::Held(_) => NodeState::NotStarted,
            Node::Tracked { state, .. } => state.clone(),
        }
    }
}

/// What the engine decided.
pub struct Planned<K: NodeTask> {
    /// The job had finished before: nothing changes.
    pub was_finished: bool,
    /// The job's new phase.
    pub phase: Phase,
    /// The per-node rows, summarised to fit; None: as they were (the job
    /// finished before, or fails before any node starts).
    pub rows: Option<Vec<K::Row>>,
    /// Each node's situation, in row order.
    pub nodes: Vec<(String, Node<K>)>,
    /// Nodes to write the entries to: newly started ones, and working ones
    /// whose entries may need to follow a spec edit.
    pub write_to: Vec<String>,
    /// The nodes that start in this step, and how many `concurrency` wanted.
    pub starts: Starts,
    /// What each node starting now records of its P2P start (its entries'
    /// `p2p`); empty without P2P settings.
    pub p2p: BTreeMap<String, TagP2p>,
    /// Events to publish once the status is written.
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<Duration>,
    /// Every node has finished (now or before).
    pub finished: bool,
    /// How far the rows were summarised.
    pub summarised: K::Summary,
}

impl<K: NodeTask> Planned<K> {
    /// A final step: the phase, no rows to change, nothing to write.
    pub(super) fn done(was_finished: bool, phase: Phase, events: Vec<JobEvent>) -> Self {
        Planned {
            was_finished,
            phase,
            rows: None,
            nodes: vec![],
            write_to: vec![],
            starts: Starts::default(),
            p2p: BTreeMap::new(),
            events,
            requeue_after: None,
            finished: true,
            summarised: K::Summary::default(),
        }
    }
}
