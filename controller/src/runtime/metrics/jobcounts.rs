//! One job's node counts and phase, whatever its kind, read from its
//! status for the scrape-time gauges.

use kube::ResourceExt;
use nodeimage_api::kruise::ImagePullJob;
use nodeimage_api::kruise::nodeimage::contract::{TaskEnd, task_end};
use nodeimage_api::kubeedge::{ImagePrePullJob, NodeUpgradeJob};
use nodeimage_api::nodeimage_dev::ImageRemovalJob;

/// One job's counts and phase, whatever its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobCounts {
    /// Kind.
    pub kind: &'static str,
    /// Namespace, "" if cluster-scoped.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Nodes selected.
    pub desired: i64,
    /// Nodes working.
    pub active: i64,
    /// Nodes done.
    pub succeeded: i64,
    /// Nodes failed.
    pub failed: i64,
    /// Running, Succeeded or Failed.
    pub phase: &'static str,
}

/// Counts of an ImagePullJob, from its status.
pub fn image_pull_job_counts(j: &ImagePullJob) -> JobCounts {
    let s = j.status.clone().unwrap_or_default();
    let phase = match (s.completion_time.is_some(), s.failed > 0) {
        (false, _) => "Running",
        (true, false) => "Succeeded",
        (true, true) => "Failed",
    };
    JobCounts {
        kind: "ImagePullJob",
        namespace: j.namespace().unwrap_or_default(),
        name: j.name_any(),
        desired: s.desired.into(),
        active: s.active.into(),
        succeeded: s.succeeded.into(),
        failed: s.failed.into(),
        phase,
    }
}

/// Phase of a KubeEdge job from its `state`.
fn kubeedge_phase(state: Option<&str>) -> &'static str {
    match task_end(state) {
        Some(TaskEnd::Successful) => "Succeeded",
        Some(TaskEnd::Failed) => "Failed",
        None => "Running",
    }
}

/// Counts of node states from KubeEdge-style per-node states.
fn kubeedge_counts<'a>(states: impl Iterator<Item = Option<&'a str>>) -> (i64, i64, i64, i64) {
    let (mut desired, mut active, mut succeeded, mut failed) = (0, 0, 0, 0);
    for s in states {
        desired += 1;
        match task_end(s) {
            Some(TaskEnd::Successful) => succeeded += 1,
            Some(TaskEnd::Failed) => failed += 1,
            None => active += 1,
        }
    }
    (desired, active, succeeded, failed)
}

/// Counts of an ImagePrePullJob, from its per-node status.
pub fn image_pre_pull_job_counts(j: &ImagePrePullJob) -> JobCounts {
    let s = j.status.clone().unwrap_or_default();
    let nodes = s.status.clone().unwrap_or_default();
    let (desired, active, succeeded, failed) = kubeedge_counts(nodes.iter().map(|n| {
        n.node_status
            .as_ref()
            .and_then(|t| t.phase.state.as_deref())
    }));
    JobCounts {
        kind: "ImagePrePullJob",
        namespace: String::new(),
        name: j.name_any(),
        desired,
        active,
        succeeded,
        failed,
        phase: kubeedge_phase(s.job.state.as_deref()),
    }
}

/// Counts of a NodeUpgradeJob, from its per-node status.
pub fn node_upgrade_job_counts(j: &NodeUpgradeJob) -> JobCounts {
    let s = j.status.clone().unwrap_or_default();
    let nodes = s.node_status.clone().unwrap_or_default();
    let (desired, active, succeeded, failed) =
        kubeedge_counts(nodes.iter().map(|n| n.task.phase.state.as_deref()));
    JobCounts {
        kind: "NodeUpgradeJob",
        namespace: String::new(),
        name: j.name_any(),
        desired,
        active,
        succeeded,
        failed,
        phase: kubeedge_phase(s.job.state.as_deref()),
    }
}

/// Counts of an ImageRemovalJob, from its status (a node that kept an
/// image on purpose counts as succeeded).
pub fn image_removal_job_counts(j: &ImageRemovalJob) -> JobCounts {
    let s = j.status.clone().unwrap_or_default();
    let phase = match (s.completion_time.is_some(), s.failed > 0) {
        (false, _) => "Running",
        (true, false) => "Succeeded",
        (true, true) => "Failed",
    };
    JobCounts {
        kind: "ImageRemovalJob",
        namespace: String::new(),
        name: j.name_any(),
        desired: s.desired.into(),
        active: s.active.into(),
        succeeded: i64::from(s.succeeded) + i64::from(s.kept),
        failed: s.failed.into(),
        phase,
    }
}
