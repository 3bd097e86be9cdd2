//! NodeUpgradeJob: KubeEdge's rolling upgrade of the node agent, run through
//! NodeImage tag entries. Per selected node (concurrency budget, node
//! timeout, failure tolerance, as for ImagePrePullJob) the job writes the
//! entry `image:version` carrying an `upgrade` extension; the node daemon
//! (started with `--enable-upgrades`) checks, pulls, takes the upgrade tool
//! out of the image, backs up, upgrades and rolls back on failure, and
//! reports each step in the tag status, which the plan maps into the job's
//! `nodeStatus`. Decisions are in `plan`; `reconcile` reads, calls the plan,
//! and writes narrow patches.
//!
//! A job is woken when it changes, when a NodeImage holding its tag changes,
//! when a Node's labels, readiness, existence or kubelet version change
//! (running jobs only), and when its plan's due time comes.

pub mod plan;
mod reconcile;

use crate::engine::jobshell::NodeTaskWiring;
use crate::nodeimage::nodes;
use k8s_openapi::api::core::v1::Node;
use nodeimage_api::NodeUpgradeJob;

/// What of a Node matters to a job, to pass on only its changes: labels,
/// readiness, whether it gets a NodeImage, and its KubeEdge version.
fn node_key(n: &Node) -> (nodes::NodeInfo, Option<String>) {
    (nodes::node_info(n), nodes::kubeedge_version(n))
}

/// How the controller is wired (run by `jobshell::run_node_tasks`).
pub const WIRING: NodeTaskWiring<NodeUpgradeJob, (nodes::NodeInfo, Option<String>)> =
    NodeTaskWiring {
        node_key,
        is_finished: |j| j.status.as_ref().is_some_and(plan::is_finished),
        owners: crate::engine::jobshell::tag_owners::<NodeUpgradeJob>,
    };
