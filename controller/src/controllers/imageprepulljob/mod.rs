//! ImagePrePullJob: KubeEdge's batch pre-pull of a list of images onto named
//! or selected nodes, with node checks, a concurrency budget, per-node
//! timeouts, retries and a failure tolerance, through tag entries in the
//! nodes' NodeImages. Decisions are in `plan`; `reconcile` reads, calls the
//! plan, and writes narrow patches.
//!
//! A job is woken when it changes, when a NodeImage holding one of its tags
//! changes, when a Node's labels, readiness or existence change (running
//! jobs only), and when its plan's due time comes (a node timeout, or the
//! periodic look of a running job).

pub mod plan;
mod reconcile;

use crate::engine::jobshell::NodeTaskWiring;
use nodeimage_api::ImagePrePullJob;

/// How the controller is wired (run by `jobshell::run_node_tasks`).
pub const WIRING: NodeTaskWiring<ImagePrePullJob, crate::nodeimage::nodes::NodeInfo> =
    NodeTaskWiring {
        node_key: crate::nodeimage::nodes::node_info,
        is_finished: |j| j.status.as_ref().is_some_and(plan::is_finished),
        owners: crate::engine::jobshell::tag_owners::<ImagePrePullJob>,
    };
