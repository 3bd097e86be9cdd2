//! ImageRemovalJob: take named images off the nodes a selector picks, a
//! bounded number of nodes at a time, through removal entries in the nodes'
//! NodeImages that each node's daemon serves and answers
//! (docs/api.md, "Removing images from nodes"). Decisions are in `plan`;
//! `reconcile` reads, calls the plan, and writes narrow patches.
//!
//! A job is woken when it changes, when a node answers one of its entries,
//! when a Node's labels, readiness or existence change (running and block
//! jobs), and when its plan's due time comes (the deadline, the TTL, the
//! periodic look).

pub mod plan;
mod reconcile;

use crate::engine::jobshell::NodeTaskWiring;
use nodeimage_api::nodeimage_dev::ImageRemovalJob;

/// How the controller is wired (run by `jobshell::run_node_tasks`).
pub const WIRING: NodeTaskWiring<ImageRemovalJob, crate::nodeimage::nodes::NodeInfo> =
    NodeTaskWiring {
        node_key: crate::nodeimage::nodes::node_info,
        is_finished: |j| !j.spec.blocks() && j.status.as_ref().is_some_and(plan::is_finished),
        owners: crate::cluster::wakeups::removal_owners,
    };
