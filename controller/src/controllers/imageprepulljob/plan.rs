//! What an ImagePrePullJob should do next, decided from a snapshot of the
//! Nodes, the NodeImages, the job (its status is the record of what it
//! decided before) and the clock, by the KubeEdge node-task engine
//! (`nodetasks`, which holds the shared rules). Pure.
//!
//! What is ImagePrePullJob's own:
//! - Every node gets one entry per image (`IfNotPresent`, the job's
//!   `checkItems`, the copy of `imageSecrets`); a node whose image secret is
//!   missing fails at once (event Init).
//! - A working node is `Pulling`; it finishes when it reports every image,
//!   and `imageStatus[]` lists each image it finished. A failed check is
//!   event `Check`, a deadline event `TimeOut`, any other failure `Pull`.
//! - Node events: one `NodeFailed` per failed node.

mod rows;
mod task;

use crate::engine::jobevents::JobEvent;
use crate::engine::nodetasks::{self, Job, Task, v1alpha2};
use crate::engine::p2p::observe::Observed;
use crate::engine::rollout::{self, Entry, Starts};
use crate::nodeimage::entries::EntryRequest;
pub use crate::nodeimage::nodes::NodeInfo;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::kruise::nodeimage::contract::{FailureCause, failure_cause};
use nodeimage_api::kruise::{ImageTagPullPolicy, NodeImage, ReferenceObject};
use nodeimage_api::kubeedge::{ImagePrePullJob, ImagePrePullJobStatus};
pub use rows::summarise;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use task::PrePull;

#[cfg(test)]
use crate::engine::rollout::rfc3339;
#[cfg(test)]
use nodeimage_api::kubeedge::{ImagePrePullStatus, TaskStatus};
#[cfg(test)]
use nodetasks::{API_VERSION, NODEIMAGE_WAIT};

/// Kind name in tag owner references.
pub const KIND: &str = "ImagePrePullJob";

/// Job, node and image states, spelled as KubeEdge writes them (the guide
/// shows `"state":"Successful"`).
pub mod state {
    pub use crate::engine::nodetasks::state::{FAILED, SUCCESSFUL};
    /// Checking and pulling.
    pub const PULLING: &str = "Pulling";
}

/// The step a state refers to.
pub mod event {
    pub use crate::engine::nodetasks::event::{INIT, TIMEOUT};
    /// The node checks (checkItems).
    pub const CHECK: &str = "Check";
    /// Pulling the images.
    pub const PULL: &str = "Pull";
}

/// Longest reason kept in status (longer ones are cut with an ellipsis).
pub const MAX_REASON_CHARS: usize = 256;

/// The job's image secret, as the shell found it.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Secrets {
    /// No imageSecrets.
    #[default]
    None,
    /// Copies the daemons may read.
    Copied(Vec<ReferenceObject>),
    /// The secret cannot be used; why.
    Missing(String),
}

/// Everything the plan reads.
pub struct Inputs<'a> {
    /// The job.
    pub job: &'a ImagePrePullJob,
    /// Every Node, by name.
    pub nodes: &'a BTreeMap<String, NodeInfo>,
    /// Every NodeImage, by name.
    pub nodeimages: &'a BTreeMap<String, Arc<NodeImage>>,
    /// Only KubeEdge edge nodes take part.
    pub edge_only: bool,
    /// Most nodes that may start now by the registries' free slots
    /// (`None`: none of its images is on a limited registry).
    pub registry_cap: Option<&'a crate::engine::rollout::Cap>,
    /// The job's image secret.
    pub secrets: Secrets,
    /// The job's P2P settings and what they read, or why they are invalid.
    pub p2p: &'a Result<Observed, String>,
    /// The time.
    pub now: DateTime<Utc>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The job's new status, its conditions at the plan's time.
    pub status: ImagePrePullJobStatus,
    /// The entries to write (the same on every node).
    pub requests: Vec<EntryRequest>,
    /// Nodes to write the entries to: newly started ones, and working ones
    /// whose entries may need to follow a spec edit.
    pub write_to: Vec<String>,
    /// The nodes that start now, and how many `concurrency` wanted.
    pub starts: Starts,
    /// What each node starting now records of its P2P start (its entries'
    /// `p2p`); empty without P2P settings.
    pub p2p: std::collections::BTreeMap<String, nodeimage_api::kruise::TagP2p>,
    /// Events to publish once the status is written.
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<Duration>,
    /// The job has finished (now or before).
    pub finished: bool,
    /// How much of the per-node detail was summarised to fit the budget.
    pub summarised: Summary,
    /// The status changed beyond its conditions (a status that changes
    /// only its conditions is written at once, not paced).
    pub status_changed: bool,
    /// The job's state or phase changed (such a write is not held back).
    pub state_changed: bool,
}

/// How far per-node detail was cut to keep the status within budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Summary {
    /// Everything listed.
    #[default]
    Full,
    /// Successful nodes list no imageStatus (every image succeeded).
    NoSuccessfulImages,
    /// No node lists imageStatus; the node reason names the failures.
    NoImages,
    /// Nodes list only name, state, event and action.
    Minimal,
    /// Nodes list only name and state (v1alpha2: name and phase).
    Tiny,
}

/// The node timeout: `timeoutSeconds`, where unset or 0 means 300.
pub fn node_timeout(job: &ImagePrePullJob) -> i64 {
    nodetasks::node_timeout(job.spec.image_pre_pull_template.task.timeout_seconds)
}

/// The job as an owner of tag entries (cluster-scoped: no namespace).
pub fn owner_ref(job: &ImagePrePullJob) -> ObjectReference {
    nodetasks::owner_ref(KIND, job.name_any(), job.uid())
}

/// The tag entry's pull policy: attempts of `timeoutSeconds` each,
/// `retryTimes` retries, the whole pull bounded by the node timeout, and
/// the finished entry kept for the node timeout plus a grace period.
pub fn entry_pull_policy(job: &ImagePrePullJob) -> ImageTagPullPolicy {
    let timeout = node_timeout(job);
    let retries = job
        .spec
        .image_pre_pull_template
        .retry_times
        .unwrap_or(0)
        .max(0);
    ImageTagPullPolicy {
        timeout_seconds: Some(i32::try_from(timeout).unwrap_or(i32::MAX)),
        backoff_limit: Some(retries),
        ttl_seconds_after_finished: Some(nodetasks::entry_ttl(timeout)),
        active_deadline_seconds: Some(timeout),
    }
}

/// The checks each node runs: the job's `checkItems` (KubeEdge documents
/// `disk` as the default but runs none when unset, and neither do we).
pub fn check_items(job: &ImagePrePullJob) -> Vec<String> {
    job.spec
        .image_pre_pull_template
        .task
        .check_items
        .clone()
        .unwrap_or_default()
}

/// The nodes a new job selects: `nodeNames` in order (duplicates dropped),
/// or the Nodes matching `labelSelector`, sorted (as the engine selects them).
#[cfg(test)]
fn select_nodes(
    job: &ImagePrePullJob,
    nodes: &BTreeMap<String, NodeInfo>,
) -> Result<Vec<String>, String> {
    let t = &job.spec.image_pre_pull_template;
    rollout::select_nodes(
        t.task.node_names.as_deref(),
        t.task.label_selector.as_ref(),
        nodes,
        true,
    )
}

/// The step a node's failure message belongs to (the contract's
/// `failure_cause`).
pub fn failure_event(message: &str) -> &'static str {
    match failure_cause(message) {
        FailureCause::Check => event::CHECK,
        FailureCause::Timeout => event::TIMEOUT,
        FailureCause::Pull => event::PULL,
    }
}

/// Whether a job status is final.
pub fn is_finished(status: &ImagePrePullJobStatus) -> bool {
    nodetasks::is_final(status.job.state.as_deref())
}

/// Whether an unfinished job works on node `name` (`info`: its Node), by
/// the engine's rule (`nodetasks::job_nodes`) and the edge-node rule; read
/// by the start-up gate.
pub fn works_on(job: &ImagePrePullJob, name: &str, info: &NodeInfo, edge_only: bool) -> bool {
    if job.status.as_ref().is_some_and(is_finished) || (edge_only && !rollout::is_edge_node(info)) {
        return false;
    }
    let recorded: Vec<String> = job
        .status
        .iter()
        .flat_map(|s| s.status.iter().flatten())
        .filter_map(|r| r.node_status.as_ref()?.node_name.clone())
        .collect();
    let nodes = BTreeMap::from([(name.to_string(), info.clone())]);
    let task = Task::of(&job.spec.image_pre_pull_template.task);
    nodetasks::job_nodes(recorded, &task, &nodes, edge_only)
        .is_ok_and(|n| n.iter().any(|n| n == name))
}

#[cfg(test)]
fn row_name(row: &ImagePrePullStatus) -> Option<&str> {
    row.node_status.as_ref()?.node_name.as_deref()
}

/// Decides the job's next step.
pub fn plan(inp: Inputs<'_>) -> Plan {
    let job = inp.job;
    let old = job.status.clone().unwrap_or_default();
    let t = &job.spec.image_pre_pull_template;
    // Images → entries (distinct), and each image's entry.
    let images: Result<Vec<(String, Entry)>, String> = t
        .images
        .iter()
        .map(|image| {
            rollout::entry_for(image)
                .map(|e| (image.clone(), e))
                .map_err(|e| format!("cannot pull {image}: {e}"))
        })
        .collect();
    let entries = distinct(images.iter().flatten().map(|(_, e)| e.clone()));
    let kind = PrePull {
        job,
        images: images.clone().unwrap_or_default(),
        entries: entries.clone(),
        secrets: &inp.secrets,
    };
    let old_rows = old.status.clone().unwrap_or_default();
    // The P2P settings (`engine::p2p`): an invalid one fails the job before
    // any node starts, as an invalid image does.
    let p2p = inp.p2p;
    let created = job.metadata.creation_timestamp.as_ref();
    let started = created.map_or(inp.now, crate::runtime::clock::instant);
    let step = nodetasks::step(
        &kind,
        Job {
            uid: job.uid().unwrap_or_default(),
            old: v1alpha2::recorded(&old.job, old.phase.as_deref()),
            old_rows: &old_rows,
            entries: images
                .and_then(|_| p2p.as_ref().map(|_| entries.clone()).map_err(Clone::clone)),
            task: Task::of(&t.task),
            edge_only: inp.edge_only,
            registry_cap: inp.registry_cap,
            status_budget: nodetasks::status_budget(nodetasks::spec_bytes(&job.spec)),
            p2p: p2p.as_ref().ok().map(|o| (o, started)),
        },
        inp.nodes,
        inp.nodeimages,
        inp.now,
    );
    let mut status = with_phase(old, step.phase);
    if let Some(node_rows) = step.rows {
        status.node_status = Some(rows::v1alpha2_rows(&node_rows, step.summarised));
        status.status = Some(node_rows);
    }
    let requests = if step.write_to.is_empty() {
        vec![]
    } else {
        kind.requests()
    };
    let state = |s: &ImagePrePullJobStatus| (s.job.state.clone(), s.phase.clone());
    let status_changed = job.status.as_ref() != Some(&status);
    let state_changed = job.status.as_ref().map(state) != Some(state(&status));
    crate::engine::conditions::apply(
        job.status.as_ref(),
        &mut status,
        job.metadata.generation,
        &crate::runtime::clock::api_time(inp.now),
    );
    Plan {
        status_changed,
        state_changed,
        status,
        requests,
        write_to: step.write_to,
        starts: step.starts,
        p2p: step.p2p,
        events: step.events,
        requeue_after: step.requeue_after,
        finished: step.finished,
        summarised: step.summarised,
    }
}

/// The job's distinct tag entries (of the images that parse), for
/// registry pacing.
pub fn entries(job: &ImagePrePullJob) -> Vec<Entry> {
    let images = job.spec.image_pre_pull_template.images.iter();
    distinct(images.filter_map(|i| rollout::entry_for(i).ok()))
}

/// `entries` without repeats, in their order.
fn distinct(entries: impl Iterator<Item = Entry>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for e in entries {
        if !out.contains(&e) {
            out.push(e);
        }
    }
    out
}

fn with_phase(old: ImagePrePullJobStatus, p: nodetasks::Phase) -> ImagePrePullJobStatus {
    ImagePrePullJobStatus {
        phase: v1alpha2::job_phase(p.state.as_deref()).or(old.phase.clone()),
        job: p,
        ..old
    }
}

impl crate::engine::registrypace::Starting for Plan {
    fn starts(&self) -> &Starts {
        &self.starts
    }
}

#[cfg(test)]
mod tests;
