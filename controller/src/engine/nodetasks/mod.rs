//! The KubeEdge node-task engine: the one rollout of ImagePrePullJob and
//! NodeUpgradeJob. Both kinds run a task on a fixed set of nodes, a budget
//! of them at once, each node timed out on its own, the job judged by its
//! failure tolerance, with a v1alpha1 status of state/event/action per node.
//! A kind configures the engine: what it reads of a node ([`NodeReader`]:
//! whether it runs, how its NodeImage report reads) and how a node's row and
//! the job's events look ([`NodeTask`]). Pure.
//!
//! Rules (the shared ones; each kind's module lists its own):
//! - The nodes are fixed when the job starts: `nodeNames` in their order, or
//!   the Nodes matching `labelSelector` sorted by name; they are listed in
//!   the status, and later edits of the selection do not change them.
//! - A node that has not started fails at once (event Init) when its Node
//!   does not exist, is not Ready or gets no NodeImage, or the kind rejects
//!   it (a missing secret); the kind may also skip it as done.
//! - At most `concurrency` nodes work at once, and no more start than the
//!   job's registries have free slots for (`registrypace`); a node starts
//!   when its entries are written and fails with event TimeOut when it has
//!   not finished `timeoutSeconds` (0 or unset: 300) after its entries'
//!   `createdAt`.
//! - A node's result, once in status, is final; a finished job is final.
//! - With `edge_only` (KubeEdge's rule, the default), a label selector
//!   selects only edge nodes (label `node-role.kubernetes.io/edge`) and a
//!   named node without the label fails at once (event Init).
//! - Once `failed >= total × failureTolerate` (KubeEdge v1alpha1's
//!   boundary; "0" with no failure does not count), no further node
//!   starts, and the job fails when its working nodes have finished.
//!   Otherwise it succeeds when every node has finished.

#[cfg(test)]
pub mod fixtures;
mod outcome;
mod rows;
mod step;
mod track;
pub mod v1alpha2;
mod verdict;

pub use outcome::{Node, Planned};
pub use rows::{succeeded, task, timed_out};
pub use step::{job_nodes, step};
#[cfg(test)]
pub use track::NOT_EDGE;

use crate::engine::jobevents::JobEvent;
use crate::engine::rollout::{Entry, EntryState, NodeState};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::kubeedge::{NodeTaskSpec, TaskStatus};
use serde::Serialize;
use std::time::Duration;

/// API version of the KubeEdge kinds, in tag owner references.
pub const API_VERSION: &str = "operations.kubeedge.io/v1alpha1";
/// API group of the KubeEdge kinds.
pub const GROUP: &str = "operations.kubeedge.io";
/// Serialised size the whole job object is kept under, well inside the
/// API server's 1.5 MiB request limit: per-node status past what the spec
/// leaves of it is summarised.
pub const OBJECT_BUDGET_BYTES: usize = 900 * 1024;
/// Least room per-node status gets, however large the spec.
pub const STATUS_BUDGET_MIN_BYTES: usize = 256 * 1024;

/// Room for per-node status in a job whose spec serialises to
/// `spec_bytes`: the object budget less the spec three times (the spec,
/// kubectl's last-applied annotation, the managed fields listing it).
pub fn status_budget(spec_bytes: usize) -> usize {
    OBJECT_BUDGET_BYTES
        .saturating_sub(spec_bytes.saturating_mul(3))
        .max(STATUS_BUDGET_MIN_BYTES)
}

/// Serialised size of a spec.
pub fn spec_bytes<S: Serialize>(spec: &S) -> usize {
    serde_json::to_vec(spec)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}
/// Node events published per reconcile; the rest are summed up.
pub const MAX_NODE_EVENTS: usize = 20;
/// How soon to look again while a node waits for its NodeImage.
pub const NODEIMAGE_WAIT: Duration = Duration::from_secs(2);
/// How often a running job looks again even if nothing woke it.
pub const RUNNING_RESYNC: Duration = Duration::from_secs(60);

/// States both kinds spell alike (the API's constants).
pub use nodeimage_api::kubeedge::state;

/// Events both kinds spell alike.
pub mod event {
    /// Selecting nodes and preparing (node not found, not ready, secret missing).
    pub const INIT: &str = "Init";
    /// The node did not finish within timeoutSeconds.
    pub const TIMEOUT: &str = "TimeOut";
}

/// The outcome of a step.
pub mod action {
    /// The step succeeded.
    pub const SUCCESS: &str = "Success";
    /// The step failed.
    pub const FAILURE: &str = "Failure";
}

/// The job-level `state`, `event`, `action`, `reason` and `time` both
/// KubeEdge statuses carry (the API's type).
pub use nodeimage_api::kubeedge::JobState as Phase;

/// When the kind announces its start (event Started).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Announce {
    /// At the job's first look, before anything can fail.
    AtFirstLook,
    /// Once its nodes are selected (the note counts them).
    OnceSelected,
}

/// The job is working: its state, its event, the verb of its progress.
#[derive(Clone, Copy, Debug)]
pub struct Working {
    /// Job state while nodes work (and its event, also of a success).
    pub state: &'static str,
    /// Job event while nodes work, and of a successful job.
    pub event: &'static str,
    /// What working nodes are doing, in the progress reason.
    pub verb: &'static str,
}

/// Why a node that has not started does not run the task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Precheck {
    /// It fails at once (event Init), with the reason.
    Reject(String),
    /// It needs nothing: it succeeds at once.
    Skip,
}

/// What the job says about its own run: the spec fields the engine reads,
/// its entries, and its status so far.
pub struct Job<'a, R> {
    /// The job's uid, the owner of its entries.
    pub uid: String,
    /// The job-level status so far.
    pub old: Phase,
    /// The per-node rows so far.
    pub old_rows: &'a [R],
    /// The entries every node gets, or why the job cannot have any.
    pub entries: Result<Vec<Entry>, String>,
    /// The node selection and rollout settings of the job's spec.
    pub task: Task<'a>,
    /// Room for the per-node rows ([`status_budget`]).
    pub status_budget: usize,
    /// Only KubeEdge edge nodes take part (the controller's default).
    pub edge_only: bool,
    /// Most nodes that may start now by the registries' free slots
    /// (`None`: none of the job's images is on a limited registry).
    pub registry_cap: Option<&'a crate::engine::rollout::Cap>,
    /// The job's P2P rules and what they read, and the job's start
    /// (`engine::p2p`; `None`: the kind or the job has none).
    pub p2p: Option<(&'a crate::engine::p2p::observe::Observed, DateTime<Utc>)>,
}

/// The fields of a kind's `NodeTaskSpec` the engine reads, so that both
/// kinds hand their spec over the same way.
#[derive(Clone, Copy, Debug, Default)]
pub struct Task<'a> {
    /// `nodeNames`.
    pub node_names: Option<&'a [String]>,
    /// `labelSelector`.
    pub label_selector: Option<&'a LabelSelector>,
    /// `failureTolerate`, as written.
    pub failure_tolerate: Option<&'a str>,
    /// `concurrency`.
    pub concurrency: Option<i32>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i64>,
}

impl<'a> Task<'a> {
    /// The engine's reading of a kind's task spec.
    pub fn of<P>(spec: &'a NodeTaskSpec<P>) -> Self {
        Task {
            node_names: spec.node_names.as_deref(),
            label_selector: spec.label_selector.as_ref(),
            failure_tolerate: spec.failure_tolerate.as_deref(),
            concurrency: spec.concurrency,
            timeout_seconds: spec.timeout_seconds,
        }
    }
}

/// What a KubeEdge kind reads of a node without a result: whether it runs
/// the task at all, and what its NodeImage tells of the job's entries.
pub trait NodeReader {
    /// What the node's NodeImage tells of a working node, for its row.
    type Detail: Clone;

    /// Whether a node that has not started is rejected or skipped.
    fn precheck(&self, node: &str) -> Option<Precheck>;
    /// What a node's NodeImage tells of the job's entries.
    fn detail(
        &self,
        ni: &NodeImage,
        entries: &[Entry],
        uid: &str,
        states: &[EntryState],
    ) -> Self::Detail;
    /// The detail of a node started in this plan.
    fn fresh(&self, entries: usize, now: DateTime<Utc>) -> Self::Detail;
    /// A working node's state as the kind reads it (default: as the entries say).
    fn settle(&self, state: NodeState, _detail: &Self::Detail) -> NodeState {
        state
    }
}

/// How one KubeEdge kind shapes its job's status and events from what
/// its [`NodeReader`] read of the nodes.
pub trait NodeTask: NodeReader {
    /// One node's row in the job's status.
    type Row: Clone + Serialize;
    /// How far the rows were summarised to fit the status budget.
    type Summary: Clone + Copy + std::fmt::Debug + Default + PartialEq;

    /// The working job's state, event and verb.
    const WORKING: Working;
    /// Events a failed job reports when all its failed nodes share one
    /// (otherwise it reports [`Working::event`]).
    const FAILURE_EVENTS: &'static [&'static str];
    /// Longest reason kept in a node's row.
    const MAX_REASON_CHARS: usize;
    /// When Started is published.
    const ANNOUNCE: Announce;

    /// The row's node status.
    fn task(row: &Self::Row) -> Option<&TaskStatus>;
    /// The row's node status, to change.
    fn task_mut(row: &mut Self::Row) -> Option<&mut TaskStatus>;
    /// A row of only a node status.
    fn row(task: TaskStatus) -> Self::Row;

    /// Note of the Started event (`nodes`: how many, once selected).
    fn started(&self, nodes: Option<usize>) -> String;
    /// The row of a node the job tracks through its entries (working or done).
    fn render(
        &self,
        name: &str,
        state: &NodeState,
        detail: &Self::Detail,
        timed_out: bool,
    ) -> Self::Row;
    /// The row of a node skipped by [`NodeReader::precheck`].
    fn render_skipped(&self, name: &str) -> Self::Row {
        Self::row(rows::task(name, state::SUCCESSFUL, None, None, None, 0))
    }
    /// Cuts per-node detail until the rows fit `budget` bytes.
    fn summarise(rows: &mut [Self::Row], budget: usize) -> Self::Summary;
    /// The event of a node that finished in this plan, if it gets one.
    fn node_event(&self, t: &TaskStatus) -> Option<JobEvent>;
    /// The event summing up node events past [`MAX_NODE_EVENTS`].
    fn more_nodes(n: usize) -> JobEvent;
    /// The Finished note of a job without failures.
    fn all_done(&self, total: usize) -> String;
}

/// The node timeout: `timeoutSeconds`, where unset or 0 means the default.
pub fn node_timeout(timeout_seconds: Option<i64>) -> i64 {
    match timeout_seconds {
        Some(s) if s > 0 => s,
        _ => nodeimage_api::defaults::KUBEEDGE_TIMEOUT_SECONDS,
    }
}

/// A KubeEdge job as an owner of tag entries (cluster-scoped: no namespace).
pub fn owner_ref(kind: &str, name: String, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some(kind.into()),
        name: Some(name),
        uid,
        ..Default::default()
    }
}

/// A finished entry's lifetime: the node timeout plus a grace period.
pub fn entry_ttl(timeout: i64) -> i32 {
    i32::try_from(timeout.saturating_add(crate::engine::rollout::ENTRY_TTL_GRACE_SECONDS))
        .unwrap_or(i32::MAX)
}

/// Whether a job or node state is final (the NodeImage contract decides).
pub use nodeimage_api::kruise::nodeimage::contract::task_is_final as is_final;

/// Serialised size of the node rows.
pub fn rows_size<R: Serialize>(rows: &[R]) -> usize {
    serde_json::to_vec(rows)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// Applies `steps` to every row, one step at a time, until `size` of the
/// rows fits `budget`; returns how many steps it took.
pub fn fit<R>(
    rows: &mut [R],
    steps: &[fn(&mut R)],
    budget: usize,
    size: impl Fn(&[R], usize) -> usize,
) -> usize {
    for (taken, step) in steps.iter().enumerate() {
        if size(rows, taken) <= budget {
            return taken;
        }
        rows.iter_mut().for_each(step);
    }
    steps.len()
}
