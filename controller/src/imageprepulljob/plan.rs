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

use crate::entries::EntryRequest;
use crate::jobevents::JobEvent;
pub use crate::nodes::NodeInfo;
use crate::nodetasks::{self, Announce, Job, NodeTask, Precheck, Working, action, v1alpha2};
use crate::rollout::{self, Entry, EntryState, NodeState};
pub use crate::rollout::{cap, rfc3339};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::kruise::{ImageTagPullPolicy, NodeImage, ReferenceObject};
use nodeimage_api::kubeedge::{
    ImagePrePullJob, ImagePrePullJobStatus, ImagePrePullNodeStatus, ImagePrePullStatus,
    PrePullImageStatus, PrePullNodeImageStatus, TaskStatus,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[cfg(test)]
use nodetasks::{API_VERSION, NODEIMAGE_WAIT};

/// Kind name in tag owner references.
pub const KIND: &str = "ImagePrePullJob";

/// Job, node and image states, spelled as KubeEdge writes them (the guide
/// shows `"state":"Successful"`).
pub mod state {
    pub use crate::nodetasks::state::{FAILED, SUCCESSFUL};
    /// Checking and pulling.
    pub const PULLING: &str = "Pulling";
}

/// The step a state refers to.
pub mod event {
    pub use crate::nodetasks::event::{INIT, TIMEOUT};
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
    /// The job's image secret.
    pub secrets: Secrets,
    /// The time.
    pub now: DateTime<Utc>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The job's new status.
    pub status: ImagePrePullJobStatus,
    /// The entries to write (the same on every node).
    pub requests: Vec<EntryRequest>,
    /// Nodes to write the entries to: newly started ones, and working ones
    /// whose entries may need to follow a spec edit.
    pub write_to: Vec<String>,
    /// Events to publish once the status is written.
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<Duration>,
    /// The job has finished (now or before).
    pub finished: bool,
    /// How much of the per-node detail was summarised to fit the budget.
    pub summarised: Summary,
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

/// The step a node's failure message belongs to: the daemon's checks say
/// `check …`, deadlines (the node timeout as the daemon or housekeeping
/// applies it) name activeDeadlineSeconds or a node that did not respond.
pub fn failure_event(message: &str) -> &'static str {
    if message.starts_with("check ") {
        event::CHECK
    } else if message.contains("activeDeadlineSeconds") || message.contains("did not respond") {
        event::TIMEOUT
    } else {
        event::PULL
    }
}

/// Whether a job status is final.
pub fn is_finished(status: &ImagePrePullJobStatus) -> bool {
    nodetasks::is_final(status.job.state.as_deref())
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
    let mut entries: Vec<Entry> = Vec::new();
    for (_, e) in images.iter().flatten() {
        if !entries.contains(e) {
            entries.push(e.clone());
        }
    }
    let kind = PrePull {
        job,
        images: images.clone().unwrap_or_default(),
        entries: entries.clone(),
        secrets: &inp.secrets,
    };
    let old_rows = old.status.clone().unwrap_or_default();
    let step = nodetasks::step(
        &kind,
        Job {
            uid: job.uid().unwrap_or_default(),
            old: v1alpha2::recorded(&old.job, old.phase.as_deref()),
            old_rows: &old_rows,
            entries: images.map(|_| entries.clone()),
            node_names: t.task.node_names.as_deref(),
            label_selector: t.task.label_selector.as_ref(),
            failure_tolerate: t.task.failure_tolerate.as_deref(),
            concurrency: t.task.concurrency,
            timeout_seconds: t.task.timeout_seconds,
            edge_only: inp.edge_only,
            status_budget: nodetasks::status_budget(nodetasks::spec_bytes(&job.spec)),
        },
        inp.nodes,
        inp.nodeimages,
        inp.now,
    );
    let mut status = with_phase(old, step.phase);
    if let Some(rows) = step.rows {
        status.node_status = Some(v1alpha2_rows(&rows, step.summarised));
        status.status = Some(rows);
    }
    let requests = if step.write_to.is_empty() {
        vec![]
    } else {
        kind.requests()
    };
    Plan {
        status,
        requests,
        write_to: step.write_to,
        events: step.events,
        requeue_after: step.requeue_after,
        finished: step.finished,
        summarised: step.summarised,
    }
}

fn with_phase(old: ImagePrePullJobStatus, p: nodetasks::Phase) -> ImagePrePullJobStatus {
    ImagePrePullJobStatus {
        phase: v1alpha2::job_phase(p.state.as_deref()).or(old.phase.clone()),
        job: p,
        ..old
    }
}

/// The actions of ImagePrePullJob's v1alpha2 flow.
const FLOW: &[v1alpha2::Step] = &[(event::CHECK, "Check"), (event::PULL, "Pull")];

/// The v1alpha2 `nodeStatus` for the v1alpha1 rows, cut as far as they were.
fn v1alpha2_rows(rows: &[ImagePrePullStatus], summary: Summary) -> Vec<ImagePrePullNodeStatus> {
    rows.iter()
        .filter_map(|r| {
            let t = r.node_status.as_ref()?;
            let flow = v1alpha2::action_flow(t, FLOW);
            Some(ImagePrePullNodeStatus {
                node_name: t.node_name.clone(),
                phase: Some(v1alpha2::node_phase(t)),
                action_flow: (summary < Summary::Minimal && !flow.is_empty()).then_some(flow),
                reason: t.phase.reason.clone(),
                image_status: r.image_status.as_ref().map(|images| {
                    images
                        .iter()
                        .map(|i| PrePullNodeImageStatus {
                            image: i.image.clone(),
                            status: Some(v1alpha2::condition_status(
                                i.state.as_deref() == Some(state::SUCCESSFUL),
                            )),
                            reason: i.reason.clone(),
                        })
                        .collect()
                }),
            })
        })
        .collect()
}

/// ImagePrePullJob as a node task.
struct PrePull<'a> {
    job: &'a ImagePrePullJob,
    /// Each image of the job with its entry.
    images: Vec<(String, Entry)>,
    /// The distinct entries.
    entries: Vec<Entry>,
    secrets: &'a Secrets,
}

impl PrePull<'_> {
    /// The entries every working node gets.
    fn requests(&self) -> Vec<EntryRequest> {
        let owner = owner_ref(self.job);
        let policy = entry_pull_policy(self.job);
        let checks = Some(check_items(self.job)).filter(|c| !c.is_empty());
        let secrets = match self.secrets {
            Secrets::Copied(s) => s.clone(),
            _ => vec![],
        };
        self.entries
            .iter()
            .map(|e| EntryRequest {
                image: e.image.clone(),
                tag: e.tag.clone(),
                owner: owner.clone(),
                pull_policy: policy.clone(),
                image_pull_policy: Some("IfNotPresent".into()),
                secrets: secrets.clone(),
                sandbox: None,
                check_items: checks.clone(),
            })
            .collect()
    }
}

impl NodeTask for PrePull<'_> {
    type Row = ImagePrePullStatus;
    type Detail = Vec<EntryState>;
    type Summary = Summary;
    const WORKING: Working = Working {
        state: state::PULLING,
        event: event::PULL,
        verb: "pulling",
    };
    const FAILURE_EVENTS: &'static [&'static str] = &[event::INIT, event::CHECK, event::TIMEOUT];
    const MAX_REASON_CHARS: usize = MAX_REASON_CHARS;
    const ANNOUNCE: Announce = Announce::AtFirstLook;

    fn task(row: &ImagePrePullStatus) -> Option<&TaskStatus> {
        row.node_status.as_ref()
    }

    fn task_mut(row: &mut ImagePrePullStatus) -> Option<&mut TaskStatus> {
        row.node_status.as_mut()
    }

    fn row(task: TaskStatus) -> ImagePrePullStatus {
        ImagePrePullStatus {
            node_status: Some(task),
            image_status: None,
        }
    }

    fn started(&self, _: Option<usize>) -> String {
        format!(
            "Started pre-pulling {}",
            self.job.spec.image_pre_pull_template.images.join(", ")
        )
    }

    fn precheck(&self, _: &str) -> Option<Precheck> {
        match self.secrets {
            Secrets::Missing(why) => Some(Precheck::Reject(why.clone())),
            _ => None,
        }
    }

    fn detail(&self, _: &NodeImage, _: &[Entry], _: &str, states: &[EntryState]) -> Self::Detail {
        states.to_vec()
    }

    fn fresh(&self, entries: usize, now: DateTime<Utc>) -> Self::Detail {
        vec![EntryState::Active(Some(now)); entries]
    }

    fn render(
        &self,
        name: &str,
        node_state: &NodeState,
        states: &Vec<EntryState>,
        timed_out: bool,
    ) -> ImagePrePullStatus {
        let by_entry: BTreeMap<&Entry, &EntryState> = self.entries.iter().zip(states).collect();
        let image_status: Vec<PrePullImageStatus> = self
            .images
            .iter()
            .filter_map(|(image, e)| {
                let (st, reason) = match by_entry.get(e) {
                    Some(EntryState::Succeeded) => (state::SUCCESSFUL, None),
                    Some(EntryState::Failed(m)) => (state::FAILED, Some(m.clone())),
                    _ if timed_out => (
                        state::FAILED,
                        Some("timed out before this image was pulled".to_string()),
                    ),
                    _ => return None,
                };
                Some(PrePullImageStatus {
                    image: Some(image.clone()),
                    state: Some(st.into()),
                    reason: reason.map(|r| cap(&r, MAX_REASON_CHARS)),
                })
            })
            .collect();
        let node_status = match node_state {
            NodeState::Active(since) => {
                let mut s = nodetasks::task(name, state::PULLING, Some(event::PULL), None, None, 0);
                s.phase.time = since.map(rfc3339);
                s
            }
            NodeState::Succeeded => nodetasks::succeeded(name, event::PULL, None, 0),
            NodeState::Failed(reason) if timed_out => {
                nodetasks::timed_out(name, reason, MAX_REASON_CHARS)
            }
            NodeState::Failed(_) | NodeState::NotStarted => {
                let failures: Vec<&str> = states
                    .iter()
                    .filter_map(|s| match s {
                        EntryState::Failed(m) => Some(m.as_str()),
                        _ => None,
                    })
                    .collect();
                let ev = failures
                    .iter()
                    .map(|m| failure_event(m))
                    .find(|e| *e != event::PULL)
                    .unwrap_or(event::PULL);
                let reason = Some(distinct(&failures).join("; "));
                let (st, act) = (state::FAILED, Some(action::FAILURE));
                nodetasks::task(name, st, Some(ev), act, reason, MAX_REASON_CHARS)
            }
        };
        ImagePrePullStatus {
            node_status: Some(node_status),
            image_status: (!image_status.is_empty()).then_some(image_status),
        }
    }

    fn summarise(rows: &mut [ImagePrePullStatus], budget: usize) -> Summary {
        summarise(rows, budget)
    }

    fn node_event(&self, t: &TaskStatus) -> Option<JobEvent> {
        (t.phase.state.as_deref() == Some(state::FAILED)).then(|| {
            JobEvent::warning(
                "NodeFailed",
                format!(
                    "Node {} failed ({}): {}",
                    t.node_name.as_deref().unwrap_or_default(),
                    t.phase.event.as_deref().unwrap_or_default(),
                    t.phase.reason.as_deref().unwrap_or_default()
                ),
            )
        })
    }

    fn more_nodes(n: usize) -> JobEvent {
        JobEvent::warning("NodeFailed", format!("{n} more nodes failed; see status"))
    }

    fn all_done(&self, total: usize) -> String {
        format!("all {total} nodes pulled")
    }
}

/// The distinct messages, in order.
fn distinct<'a>(messages: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for m in messages {
        if !out.contains(m) {
            out.push(m);
        }
    }
    out
}

/// How far `taken` summarising steps go.
fn summary_of(taken: usize) -> Summary {
    match taken {
        0 => Summary::Full,
        1 => Summary::NoSuccessfulImages,
        2 => Summary::NoImages,
        3 => Summary::Minimal,
        _ => Summary::Tiny,
    }
}

/// Cuts per-node detail, step by step, until the rows fit
/// `budget` bytes; returns how far it went.
pub fn summarise(rows: &mut [ImagePrePullStatus], budget: usize) -> Summary {
    let steps: [fn(&mut ImagePrePullStatus); 4] = [
        |r| {
            if r.node_status
                .as_ref()
                .and_then(|s| s.phase.state.as_deref())
                == Some(state::SUCCESSFUL)
            {
                r.image_status = None;
            }
        },
        |r| r.image_status = None,
        |r| {
            if let Some(s) = r.node_status.as_mut() {
                s.phase.reason = None;
                s.phase.time = None;
            }
        },
        |r| {
            if let Some(s) = r.node_status.as_mut() {
                s.phase.event = None;
                s.phase.action = None;
            }
        },
    ];
    // Both shapes count: the v1alpha1 rows and the v1alpha2 rows made from them.
    let size = |r: &[ImagePrePullStatus], taken: usize| {
        nodetasks::rows_size(r) + nodetasks::rows_size(&v1alpha2_rows(r, summary_of(taken)))
    };
    summary_of(nodetasks::fit(rows, &steps, budget, size))
}

#[cfg(test)]
mod tests;
