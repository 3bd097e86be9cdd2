//! What `status` shows, computed from the objects alone: the job's own
//! status, and one row per node from the NodeImage tag entries the job owns
//! (an ImageListPullJob owns them through its child ImagePullJobs). Pure, so
//! the mapping is table-tested without a cluster. The rows are built in
//! `rows`, the job's own status in `summary`.

mod rows;
mod summary;

use crate::target::Kind;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use nodeimage_api::kruise::nodeimage::contract::{TaskEnd, task_end};
use nodeimage_api::kruise::{ImagePullPhase, NodeImage};
use nodeimage_api::{ImageListPullJob, ImagePrePullJob, ImagePullJob, NodeUpgradeJob};
use rows::{apply_task_statuses, mark_failed, rows_from_nodeimages};
use serde::Serialize;
use std::collections::BTreeSet;

/// A job of one of the four kinds.
#[derive(Clone, Debug)]
pub enum Job {
    /// An ImagePullJob.
    Pull(Box<ImagePullJob>),
    /// An ImageListPullJob.
    List(Box<ImageListPullJob>),
    /// An ImagePrePullJob.
    PrePull(Box<ImagePrePullJob>),
    /// A NodeUpgradeJob.
    Upgrade(Box<NodeUpgradeJob>),
}

impl Job {
    /// Its kind.
    pub fn kind(&self) -> Kind {
        match self {
            Job::Pull(_) => Kind::ImagePullJob,
            Job::List(_) => Kind::ImageListPullJob,
            Job::PrePull(_) => Kind::ImagePrePullJob,
            Job::Upgrade(_) => Kind::NodeUpgradeJob,
        }
    }

    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match self {
            Job::Pull(j) => &j.metadata,
            Job::List(j) => &j.metadata,
            Job::PrePull(j) => &j.metadata,
            Job::Upgrade(j) => &j.metadata,
        }
    }

    /// Its uid: what its tag entries (or its children) name as their owner.
    pub fn uid(&self) -> Option<&str> {
        self.meta().uid.as_deref()
    }
}

/// Where a node (or one of its images) stands for this job.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Phase {
    /// Selected, but the job has not given it work yet.
    Pending,
    /// The node has the work and queues it behind other pulls.
    Waiting,
    /// Being pulled (or, for an upgrade, being upgraded).
    Pulling,
    /// Done.
    Succeeded,
    /// Gave up; the message says why.
    Failed,
}

impl Phase {
    /// The name shown in tables.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Waiting => "Waiting",
            Phase::Pulling => "Pulling",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
        }
    }

    /// The node's phase this stands for; `None` for Pending (no work yet).
    fn pull_phase(self) -> Option<ImagePullPhase> {
        match self {
            Phase::Pending => None,
            Phase::Waiting => Some(ImagePullPhase::Waiting),
            Phase::Pulling => Some(ImagePullPhase::Pulling),
            Phase::Succeeded => Some(ImagePullPhase::Succeeded),
            Phase::Failed => Some(ImagePullPhase::Failed),
        }
    }

    /// Whether the node is done with it, as the contract says of its phase.
    fn finished(self) -> bool {
        self.pull_phase().is_some_and(ImagePullPhase::is_finished)
    }
}

impl From<ImagePullPhase> for Phase {
    fn from(p: ImagePullPhase) -> Self {
        match p {
            ImagePullPhase::Waiting => Phase::Waiting,
            ImagePullPhase::Pulling => Phase::Pulling,
            ImagePullPhase::Succeeded => Phase::Succeeded,
            ImagePullPhase::Failed => Phase::Failed,
        }
    }
}

/// One image of the job on one node.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageRow {
    /// `name:tag` or `name@digest`.
    pub image: String,
    /// Where it stands.
    pub phase: Phase,
    /// Percentage of its bytes on the node.
    pub progress: i32,
    /// What was pulled (`name@sha256:…`), once known.
    #[serde(rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The node's details, such as a failure's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// For a NodeUpgradeJob: the upgrade's step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upgrade_state: Option<String>,
    /// How the P2P rules started its pull (`seed zone=a`, `peers(2) zone=a`,
    /// `agent`, `direct`), when the job has P2P settings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p2p: Option<String>,
}

/// One node of the job.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRow {
    /// The node's name.
    pub node: String,
    /// Where the node stands: Failed once any image failed and all are
    /// finished, Succeeded once all succeeded, else the least advanced.
    pub phase: Phase,
    /// Mean progress of its images (a succeeded image counts 100).
    pub progress: i32,
    /// What was pulled, when the job has one image on the node.
    #[serde(rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// The first failure's reason, else the first message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Per image, when the node has the job's entries.
    pub images: Vec<ImageRow>,
    /// How the P2P rules started the node (its first image's start).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p2p: Option<String>,
}

/// The job's own status, as its kind records it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// OpenKruise: nodes (ImagePullJob) or images (ImageListPullJob) selected.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desired: Option<i32>,
    /// OpenKruise: nodes pulling now (or child jobs running).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<i32>,
    /// OpenKruise: nodes (or images) done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// OpenKruise: nodes (or images) that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// ImageListPullJob: child jobs finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<i32>,
    /// KubeEdge: the job's state (Init, Pulling, Successful, Failed, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// KubeEdge: the step the state refers to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// KubeEdge: the step's outcome.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The job's message (OpenKruise) or reason (KubeEdge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the job started (OpenKruise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Timestamp>,
    /// When it finished (OpenKruise), or when the state last changed (KubeEdge).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Timestamp>,
}

/// The job, summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobSummary {
    /// Its kind.
    pub kind: Kind,
    /// Its namespace (OpenKruise kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// The images it pulls.
    pub images: Vec<String>,
    /// Whether it has finished: completionTime set, or a final KubeEdge state.
    pub finished: bool,
    /// Its status fields.
    pub status: JobStatus,
    /// Its P2P settings (`nodeimage.dev/p2p-*` annotations, without the
    /// prefix), which decide which nodes wait for their agent or a wave.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p2p: Option<String>,
}

/// Node counts by phase.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Rows in the table.
    pub nodes: usize,
    /// Nodes the job has not given work yet.
    pub pending: usize,
    /// Nodes queueing.
    pub waiting: usize,
    /// Nodes pulling.
    pub pulling: usize,
    /// Nodes done.
    pub succeeded: usize,
    /// Nodes that failed.
    pub failed: usize,
    /// Nodes the job counts that have no row: not started yet, or their
    /// entries already left the NodeImages.
    pub not_shown: usize,
}

/// Everything `status` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct View {
    /// The job.
    pub job: JobSummary,
    /// Nodes by phase.
    pub counts: Counts,
    /// One row per node, by node name.
    pub nodes: Vec<NodeRow>,
}

impl View {
    /// Whether the job reports failures or any node failed: what makes
    /// `--watch` and `pull --wait` exit non-zero.
    pub fn has_failures(&self) -> bool {
        self.counts.failed > 0
            || self.job.status.failed.unwrap_or(0) > 0
            || task_end(self.job.status.state.as_deref()) == Some(TaskEnd::Failed)
    }
}

/// The objects a view is computed from.
pub struct Inputs<'a> {
    /// The job.
    pub job: &'a Job,
    /// ImagePullJobs of the job's namespace (used for an ImageListPullJob,
    /// whose children they may be).
    pub children: &'a [ImagePullJob],
    /// Every NodeImage.
    pub nodeimages: &'a [NodeImage],
}

/// Computes the view of `inp.job`.
pub fn view(inp: &Inputs<'_>) -> View {
    let job = inp.job;
    let uid = job.uid().unwrap_or_default().to_string();
    let children: Vec<&ImagePullJob> = match job {
        Job::List(_) => inp
            .children
            .iter()
            .filter(|c| c.owner_references().iter().any(|o| o.uid == uid))
            .collect(),
        _ => Vec::new(),
    };
    let owners: BTreeSet<String> = match job {
        Job::List(_) => children.iter().filter_map(|c| c.uid()).collect(),
        _ => BTreeSet::from([uid.clone()]),
    };
    let mut rows = rows_from_nodeimages(inp.nodeimages, &owners);

    // The job's own record of its nodes wins over entries: it holds results
    // the entries no longer show (timeouts, deadlines, nodes that never got
    // entries, entries that expired).
    match job {
        Job::Pull(j) => {
            let failed = j.status.as_ref().and_then(|s| s.failed_nodes.clone());
            mark_failed(&mut rows, failed.iter().flatten());
        }
        Job::List(_) => {
            let failed = children
                .iter()
                .filter_map(|c| c.status.as_ref()?.failed_nodes.as_ref())
                .flatten();
            mark_failed(&mut rows, failed);
        }
        Job::PrePull(j) => {
            let nodes = j.status.iter().flat_map(|s| s.status.iter().flatten());
            apply_task_statuses(&mut rows, nodes.filter_map(|n| n.node_status.as_ref()));
        }
        Job::Upgrade(j) => {
            let nodes = j
                .status
                .iter()
                .flat_map(|s| s.node_status.iter().flatten())
                .map(|n| &n.task);
            apply_task_statuses(&mut rows, nodes);
        }
    }

    let summary = summary::summary(job, &uid);
    let mut counts = Counts {
        nodes: rows.len(),
        ..Counts::default()
    };
    for r in rows.values() {
        match r.phase {
            Phase::Pending => counts.pending += 1,
            Phase::Waiting => counts.waiting += 1,
            Phase::Pulling => counts.pulling += 1,
            Phase::Succeeded => counts.succeeded += 1,
            Phase::Failed => counts.failed += 1,
        }
    }
    if let Job::Pull(_) = job {
        let desired = usize::try_from(summary.status.desired.unwrap_or(0)).unwrap_or(0);
        counts.not_shown = desired.saturating_sub(rows.len());
    }
    View {
        job: summary,
        counts,
        nodes: rows.into_values().collect(),
    }
}

#[cfg(test)]
mod tests;
