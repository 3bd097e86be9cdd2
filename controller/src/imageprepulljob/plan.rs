//! What an ImagePrePullJob should do next, decided from a snapshot of the
//! Nodes, the NodeImages, the job (its status is the record of what it
//! decided before) and the clock. Pure.
//!
//! Rules:
//! - The job's nodes are fixed when it starts: `nodeNames` in their order,
//!   or the Nodes matching `labelSelector` sorted by name. They are listed in
//!   `status.status[]`, and later edits of the selection do not change them.
//! - A node that has not started is failed at once (event Init) when its
//!   Node does not exist ("not found"), is not Ready ("not ready"), gets no
//!   NodeImage (virtual), or the job's image secret is missing.
//! - At most `concurrency` nodes work at once (the shared budget); a node
//!   starts when its tag entries are written, works until the node reports
//!   every entry finished, and fails with event TimeOut when it has not
//!   finished `timeoutSeconds` after its entries' `createdAt`.
//! - A node's result, once in status, is final; a finished job is final.
//! - The job fails when `failed / total > failureTolerate` once every node
//!   has finished, and succeeds otherwise.

use crate::entries::EntryRequest;
use crate::rollout::{self, Entry, EntryState, NodeState};
pub use crate::rollout::{NodeInfo, cap, rfc3339};
use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::kruise::{ImageTagPullPolicy, NodeImage, ReferenceObject};
use nodeimage_api::kubeedge::{
    DEFAULT_TIMEOUT_SECONDS, ImagePrePullJob, ImagePrePullJobStatus, ImagePrePullStatus,
    PrePullImageStatus, TaskStatus,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// API version of the kind, in tag owner references.
pub const API_VERSION: &str = "operations.kubeedge.io/v1alpha1";
/// Kind name in tag owner references.
pub const KIND: &str = "ImagePrePullJob";

/// Job, node and image states, spelled as KubeEdge writes them (the guide
/// shows `"state":"Successful"`).
pub mod state {
    /// Not started yet.
    pub const INIT: &str = "Init";
    /// Checking and pulling.
    pub const PULLING: &str = "Pulling";
    /// Done; every image is on the node (job: within the failure tolerance).
    pub const SUCCESSFUL: &str = "Successful";
    /// Done with a failure (job: above the failure tolerance).
    pub const FAILED: &str = "Failed";
}

/// The step a state refers to.
pub mod event {
    /// Selecting nodes and preparing (node not found, not ready, secret missing).
    pub const INIT: &str = "Init";
    /// The node checks (checkItems).
    pub const CHECK: &str = "Check";
    /// Pulling the images.
    pub const PULL: &str = "Pull";
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

/// Checks run when the job does not say (KubeEdge's documented default).
pub const DEFAULT_CHECK_ITEMS: &[&str] = &["disk"];
/// Added to the node timeout to give a finished tag entry's lifetime, so
/// the job reads the result before the entry goes.
pub const ENTRY_TTL_GRACE_SECONDS: i64 = 300;
/// Serialised per-node status above which details are summarised, leaving
/// room in the 1 MiB object for the spec (5,000 node names), kubectl's
/// last-applied annotation (the spec again) and the managed fields (each
/// name of the `nodeNames` set once more).
pub const STATUS_BUDGET_BYTES: usize = 512 * 1024;
/// Longest reason kept in status (longer ones are cut with an ellipsis).
pub const MAX_REASON_CHARS: usize = 256;
/// Node-failure events published per reconcile; the rest are summed up.
pub const MAX_NODE_EVENTS: usize = 20;
/// How soon to look again while a node waits for its NodeImage.
pub const NODEIMAGE_WAIT: Duration = Duration::from_secs(2);
/// How often a running job looks again even if nothing woke it.
pub const RUNNING_RESYNC: Duration = Duration::from_secs(60);

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
    /// The job's image secret.
    pub secrets: Secrets,
    /// The time.
    pub now: DateTime<Utc>,
}

/// An event to publish on the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobEvent {
    /// Warning rather than Normal.
    pub warning: bool,
    /// Short CamelCase reason.
    pub reason: &'static str,
    /// Human text.
    pub note: String,
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
}

/// The node timeout: `timeoutSeconds`, where unset or 0 means 300.
pub fn node_timeout(job: &ImagePrePullJob) -> i64 {
    match job.spec.image_pre_pull_template.timeout_seconds {
        Some(s) if s > 0 => s,
        _ => DEFAULT_TIMEOUT_SECONDS,
    }
}

/// The job as an owner of tag entries (cluster-scoped: no namespace).
pub fn owner_ref(job: &ImagePrePullJob) -> ObjectReference {
    ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some(KIND.into()),
        name: Some(job.name_any()),
        uid: job.uid(),
        ..Default::default()
    }
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
        ttl_seconds_after_finished: Some(
            i32::try_from(timeout.saturating_add(ENTRY_TTL_GRACE_SECONDS)).unwrap_or(i32::MAX),
        ),
        active_deadline_seconds: Some(timeout),
    }
}

/// The checks each node runs: the job's `checkItems`, else `["disk"]`.
pub fn check_items(job: &ImagePrePullJob) -> Vec<String> {
    match &job.spec.image_pre_pull_template.check_items {
        Some(items) => items.clone(),
        None => DEFAULT_CHECK_ITEMS.iter().map(|s| s.to_string()).collect(),
    }
}

/// The nodes a new job selects: `nodeNames` in order (duplicates dropped),
/// or the Nodes matching `labelSelector`, sorted.
pub fn select_nodes(
    job: &ImagePrePullJob,
    nodes: &BTreeMap<String, NodeInfo>,
) -> Result<Vec<String>, String> {
    let t = &job.spec.image_pre_pull_template;
    rollout::select_nodes(t.node_names.as_deref(), t.label_selector.as_ref(), nodes)
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
    matches!(
        status.state.as_deref(),
        Some(state::SUCCESSFUL | state::FAILED)
    )
}

fn node_row_finished(row: &ImagePrePullStatus) -> bool {
    matches!(
        row.node_status.as_ref().and_then(|s| s.state.as_deref()),
        Some(state::SUCCESSFUL | state::FAILED)
    )
}

fn row_name(row: &ImagePrePullStatus) -> Option<&str> {
    row.node_status.as_ref()?.node_name.as_deref()
}

/// One node's situation in this plan.
#[derive(Clone, Debug)]
enum Row {
    /// Finished before: kept verbatim.
    Final(ImagePrePullStatus),
    /// Failed before starting (event Init).
    Rejected(String),
    /// Waiting for its NodeImage to exist.
    NoNodeImage,
    /// Known through its entries: state, and each image's entry state.
    Tracked {
        state: NodeState,
        entries: Vec<EntryState>,
        timed_out: bool,
    },
}

impl Row {
    fn node_state(&self) -> NodeState {
        match self {
            Row::Final(r) => {
                let ns = r.node_status.clone().unwrap_or_default();
                if ns.state.as_deref() == Some(state::SUCCESSFUL) {
                    NodeState::Succeeded
                } else {
                    NodeState::Failed(ns.reason.unwrap_or_default())
                }
            }
            Row::Rejected(reason) => NodeState::Failed(reason.clone()),
            Row::NoNodeImage => NodeState::NotStarted,
            Row::Tracked { state, .. } => state.clone(),
        }
    }
}

/// Decides the job's next step.
pub fn plan(inp: Inputs<'_>) -> Plan {
    let job = inp.job;
    let old = job.status.clone().unwrap_or_default();
    let now = inp.now;
    if is_finished(&old) {
        return Plan {
            status: old,
            requests: vec![],
            write_to: vec![],
            events: vec![],
            requeue_after: None,
            finished: true,
            summarised: Summary::Full,
        };
    }
    let t = &job.spec.image_pre_pull_template;
    let mut events = Vec::new();
    if old.state.as_deref().unwrap_or_default().is_empty() {
        events.push(JobEvent {
            warning: false,
            reason: "Started",
            note: format!("Started pre-pulling {}", t.images.join(", ")),
        });
    }

    // Images → entries (distinct), and each image's entry.
    let mut images: Vec<(String, Entry)> = Vec::new();
    for image in &t.images {
        match crate::imagepulljob::plan::entry_for(image) {
            Ok(e) => images.push((image.clone(), e)),
            Err(e) => return fail_at_init(old, events, format!("cannot pull {image}: {e}"), now),
        }
    }
    let mut entries: Vec<Entry> = Vec::new();
    for (_, e) in &images {
        if !entries.contains(e) {
            entries.push(e.clone());
        }
    }
    let tolerance = match rollout::parse_tolerance(t.failure_tolerate.as_deref()) {
        Ok(v) => v,
        Err(e) => return fail_at_init(old, events, e, now),
    };
    let timeout = crate::clock::seconds(node_timeout(job));
    let concurrency = usize::try_from(t.concurrency.unwrap_or(1).max(1)).unwrap_or(1);

    // The node set: as recorded, else selected now.
    let recorded: Vec<String> = old
        .status
        .iter()
        .flatten()
        .filter_map(|r| row_name(r).map(str::to_string))
        .collect();
    let names = if recorded.is_empty() {
        match select_nodes(job, inp.nodes) {
            Ok(n) => n,
            Err(e) => return fail_at_init(old, events, e, now),
        }
    } else {
        recorded
    };
    if names.is_empty() {
        return fail_at_init(old, events, "no node matches labelSelector".into(), now);
    }
    let old_rows: HashMap<&str, &ImagePrePullStatus> = old
        .status
        .iter()
        .flatten()
        .filter_map(|r| row_name(r).map(|n| (n, r)))
        .collect();

    let uid = job.uid().unwrap_or_default();
    let mut rows: Vec<(String, Row)> = names
        .iter()
        .map(|name| {
            let row = match old_rows.get(name.as_str()) {
                Some(r) if node_row_finished(r) => Row::Final((*r).clone()),
                _ => track(name, &inp, &entries, &uid, timeout),
            };
            (name.clone(), row)
        })
        .collect();

    // The budget: nodes without a NodeImage cannot start yet.
    let budget: Vec<(String, NodeState)> = rows
        .iter()
        .filter(|(_, r)| !matches!(r, Row::NoNodeImage))
        .map(|(n, r)| (n.clone(), r.node_state()))
        .collect();
    let start: BTreeSet<String> = rollout::to_start(&budget, concurrency)
        .into_iter()
        .collect();
    for (name, row) in rows.iter_mut() {
        if start.contains(name) {
            *row = Row::Tracked {
                state: NodeState::Active(Some(now)),
                entries: vec![EntryState::Active(Some(now)); entries.len()],
                timed_out: false,
            };
        }
    }
    let states: Vec<(String, NodeState)> = rows
        .iter()
        .map(|(n, r)| (n.clone(), r.node_state()))
        .collect();
    let tally = rollout::tally(&states);
    let finished = tally.finished();

    // Per-node status.
    let mut node_rows: Vec<ImagePrePullStatus> = rows
        .iter()
        .map(|(name, row)| node_row(name, row, &images, &entries))
        .map(|r| keep_time(r, &old_rows, now))
        .collect();
    let summarised = summarise(&mut node_rows);

    // Job status.
    let total = tally.desired;
    let failed = tally.failed.len();
    let started = states.iter().any(|(_, s)| *s != NodeState::NotStarted);
    let tolerate_text = t.failure_tolerate.clone().unwrap_or_else(|| "0.1".into());
    let (job_state, job_event, job_action, reason) = if finished {
        let ratio = format!(
            "{failed} of {total} nodes failed ({:.1}%)",
            failed as f64 * 100.0 / total as f64
        );
        if rollout::exceeds_tolerance(failed, total, tolerance) {
            (
                state::FAILED,
                failed_job_event(&node_rows),
                Some(action::FAILURE),
                Some(format!("{ratio}, above failureTolerate {tolerate_text}")),
            )
        } else {
            (
                state::SUCCESSFUL,
                event::PULL,
                Some(action::SUCCESS),
                (failed > 0).then(|| format!("{ratio}, within failureTolerate {tolerate_text}")),
            )
        }
    } else if started {
        (
            state::PULLING,
            event::PULL,
            None,
            Some(format!(
                "{} of {total} nodes finished ({failed} failed), {} pulling",
                tally.succeeded + failed,
                tally.active
            )),
        )
    } else {
        (
            state::INIT,
            event::INIT,
            None,
            Some("waiting for the nodes' NodeImages".to_string()),
        )
    };
    let same_phase = old.state.as_deref() == Some(job_state)
        && old.event.as_deref() == Some(job_event)
        && old.action.as_deref() == job_action;
    let status = ImagePrePullJobStatus {
        state: Some(job_state.into()),
        event: Some(job_event.into()),
        action: job_action.map(str::to_string),
        reason,
        time: if same_phase {
            old.time.clone()
        } else {
            Some(rfc3339(now))
        },
        status: Some(node_rows),
    };

    // Events: nodes newly failed, and the end.
    let newly_failed: Vec<&ImagePrePullStatus> = status
        .status
        .iter()
        .flatten()
        .filter(|r| {
            r.node_status.as_ref().and_then(|s| s.state.as_deref()) == Some(state::FAILED)
                && !row_name(r)
                    .and_then(|n| old_rows.get(n))
                    .is_some_and(|o| node_row_finished(o))
        })
        .collect();
    for r in newly_failed.iter().take(MAX_NODE_EVENTS) {
        let ns = r.node_status.clone().unwrap_or_default();
        events.push(JobEvent {
            warning: true,
            reason: "NodeFailed",
            note: format!(
                "Node {} failed ({}): {}",
                ns.node_name.unwrap_or_default(),
                ns.event.unwrap_or_default(),
                ns.reason.unwrap_or_default()
            ),
        });
    }
    if newly_failed.len() > MAX_NODE_EVENTS {
        events.push(JobEvent {
            warning: true,
            reason: "NodeFailed",
            note: format!(
                "{} more nodes failed; see status",
                newly_failed.len() - MAX_NODE_EVENTS
            ),
        });
    }
    if finished {
        events.push(JobEvent {
            warning: job_state == state::FAILED,
            reason: "Finished",
            note: match &status.reason {
                Some(r) => format!("Finished {job_state}: {r}"),
                None => format!("Finished {job_state}: all {total} nodes pulled"),
            },
        });
    }

    let write_to: Vec<String> = rows
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                Row::Tracked {
                    state: NodeState::Active(_),
                    ..
                }
            )
        })
        .map(|(n, _)| n.clone())
        .collect();
    let requests = if write_to.is_empty() {
        vec![]
    } else {
        let owner = owner_ref(job);
        let policy = entry_pull_policy(job);
        let checks = Some(check_items(job)).filter(|c| !c.is_empty());
        let secrets = match &inp.secrets {
            Secrets::Copied(s) => s.clone(),
            _ => vec![],
        };
        entries
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
    };
    let requeue_after = (!finished).then(|| {
        let mut wait = RUNNING_RESYNC;
        for (_, s) in &states {
            if let Some(at) = rollout::node_timeout_at(s, timeout) {
                let d = (at - now).to_std().unwrap_or(Duration::from_secs(1));
                wait = wait.min(d.max(Duration::from_secs(1)));
            }
        }
        if rows.iter().any(|(_, r)| matches!(r, Row::NoNodeImage)) {
            wait = wait.min(NODEIMAGE_WAIT);
        }
        wait
    });
    Plan {
        status,
        requests,
        write_to,
        events,
        requeue_after,
        finished,
        summarised,
    }
}

/// Where a node without a final result stands.
fn track(name: &str, inp: &Inputs<'_>, entries: &[Entry], uid: &str, timeout: TimeDelta) -> Row {
    let states = inp
        .nodeimages
        .get(name)
        .map(|ni| rollout::entry_states(ni, entries, uid));
    let started = states
        .as_ref()
        .is_some_and(|s| s.iter().any(|e| *e != EntryState::Missing));
    if !started {
        if let Some(why) = rollout::unstartable(inp.nodes.get(name)) {
            return Row::Rejected(why);
        }
        if let Secrets::Missing(why) = &inp.secrets {
            return Row::Rejected(why.clone());
        }
    }
    let Some(states) = states else {
        return Row::NoNodeImage;
    };
    let pairs: Vec<(Entry, EntryState)> = entries.iter().cloned().zip(states.clone()).collect();
    let before = rollout::node_state(&pairs);
    let after = rollout::apply_node_timeout(before.clone(), timeout, inp.now);
    let timed_out = before != after;
    Row::Tracked {
        state: after,
        entries: states,
        timed_out,
    }
}

/// The status entry of one node.
fn node_row(
    name: &str,
    row: &Row,
    images: &[(String, Entry)],
    entries: &[Entry],
) -> ImagePrePullStatus {
    let status =
        |state: &str, ev: Option<&str>, act: Option<&str>, reason: Option<String>| TaskStatus {
            node_name: Some(name.to_string()),
            state: Some(state.to_string()),
            event: ev.map(str::to_string),
            action: act.map(str::to_string),
            reason: reason.map(|r| cap(&r, MAX_REASON_CHARS)),
            time: None,
        };
    match row {
        Row::Final(r) => r.clone(),
        Row::Rejected(reason) => ImagePrePullStatus {
            node_status: Some(status(
                state::FAILED,
                Some(event::INIT),
                Some(action::FAILURE),
                Some(reason.clone()),
            )),
            image_status: None,
        },
        Row::NoNodeImage
        | Row::Tracked {
            state: NodeState::NotStarted,
            ..
        } => ImagePrePullStatus {
            node_status: Some(status(state::INIT, None, None, None)),
            image_status: None,
        },
        Row::Tracked {
            state: node_state,
            entries: states,
            timed_out,
        } => {
            let by_entry: BTreeMap<&Entry, &EntryState> = entries.iter().zip(states).collect();
            let image_status: Vec<PrePullImageStatus> = images
                .iter()
                .filter_map(|(image, e)| {
                    let (st, reason) = match by_entry.get(e) {
                        Some(EntryState::Succeeded) => (state::SUCCESSFUL, None),
                        Some(EntryState::Failed(m)) => (state::FAILED, Some(m.clone())),
                        _ if *timed_out => (
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
                    let mut s = status(state::PULLING, Some(event::PULL), None, None);
                    s.time = since.map(rfc3339);
                    s
                }
                NodeState::Succeeded => status(
                    state::SUCCESSFUL,
                    Some(event::PULL),
                    Some(action::SUCCESS),
                    None,
                ),
                NodeState::Failed(timeout_reason) if *timed_out => status(
                    state::FAILED,
                    Some(event::TIMEOUT),
                    Some(action::FAILURE),
                    Some(timeout_reason.clone()),
                ),
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
                    status(
                        state::FAILED,
                        Some(ev),
                        Some(action::FAILURE),
                        Some(distinct(&failures).join("; ")),
                    )
                }
            };
            ImagePrePullStatus {
                node_status: Some(node_status),
                image_status: (!image_status.is_empty()).then_some(image_status),
            }
        }
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

/// A node's `time` stays as it was while its state, event and action do
/// not change; a node entering a new phase gets its own time, or now.
fn keep_time(
    mut row: ImagePrePullStatus,
    old_rows: &HashMap<&str, &ImagePrePullStatus>,
    now: DateTime<Utc>,
) -> ImagePrePullStatus {
    let Some(ns) = row.node_status.as_mut() else {
        return row;
    };
    if ns.state.as_deref() == Some(state::INIT) {
        return row;
    }
    let old = ns
        .node_name
        .as_deref()
        .and_then(|n| old_rows.get(n))
        .and_then(|r| r.node_status.as_ref());
    match old {
        Some(o) if o.state == ns.state && o.event == ns.event && o.action == ns.action => {
            ns.time = o.time.clone().or(ns.time.take());
        }
        _ => {
            if ns.time.is_none() {
                ns.time = Some(rfc3339(now));
            }
        }
    }
    row
}

/// The event of a failed job: the one its failed nodes share, else Pull.
fn failed_job_event(rows: &[ImagePrePullStatus]) -> &'static str {
    let events: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| r.node_status.as_ref())
        .filter(|s| s.state.as_deref() == Some(state::FAILED))
        .filter_map(|s| s.event.as_deref())
        .collect();
    match events.into_iter().collect::<Vec<_>>().as_slice() {
        [one] => [event::INIT, event::CHECK, event::TIMEOUT]
            .into_iter()
            .find(|e| e == one)
            .unwrap_or(event::PULL),
        _ => event::PULL,
    }
}

/// Serialised size of the node rows.
pub fn rows_size(rows: &[ImagePrePullStatus]) -> usize {
    serde_json::to_vec(rows)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// Cuts per-node detail, step by step, until the rows fit
/// [`STATUS_BUDGET_BYTES`]; returns how far it went.
pub fn summarise(rows: &mut [ImagePrePullStatus]) -> Summary {
    if rows_size(rows) <= STATUS_BUDGET_BYTES {
        return Summary::Full;
    }
    for r in rows.iter_mut() {
        if r.node_status.as_ref().and_then(|s| s.state.as_deref()) == Some(state::SUCCESSFUL) {
            r.image_status = None;
        }
    }
    if rows_size(rows) <= STATUS_BUDGET_BYTES {
        return Summary::NoSuccessfulImages;
    }
    for r in rows.iter_mut() {
        r.image_status = None;
    }
    if rows_size(rows) <= STATUS_BUDGET_BYTES {
        return Summary::NoImages;
    }
    for r in rows.iter_mut() {
        if let Some(s) = r.node_status.as_mut() {
            s.reason = None;
            s.time = None;
        }
    }
    Summary::Minimal
}

/// The job fails before any node starts.
fn fail_at_init(
    old: ImagePrePullJobStatus,
    mut events: Vec<JobEvent>,
    reason: String,
    now: DateTime<Utc>,
) -> Plan {
    events.push(JobEvent {
        warning: true,
        reason: "Finished",
        note: format!("Finished {}: {reason}", state::FAILED),
    });
    Plan {
        status: ImagePrePullJobStatus {
            state: Some(state::FAILED.into()),
            event: Some(event::INIT.into()),
            action: Some(action::FAILURE.into()),
            reason: Some(reason),
            time: Some(rfc3339(now)),
            status: old.status,
        },
        requests: vec![],
        write_to: vec![],
        events,
        requeue_after: None,
        finished: true,
        summarised: Summary::Full,
    }
}

#[cfg(test)]
mod tests;
