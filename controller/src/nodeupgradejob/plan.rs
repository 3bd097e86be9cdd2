//! What a NodeUpgradeJob should do next, decided from a snapshot of the
//! Nodes (labels, readiness, the version in their kubeletVersion), the
//! NodeImages, the job (its status records what was decided before) and the
//! clock, by the KubeEdge node-task engine (`nodetasks`, which holds the
//! shared rules). Pure.
//!
//! What is NodeUpgradeJob's own:
//! - A node that has not started succeeds at once (event Check) when its
//!   Node reports the target version (`kubeletVersion` ending in
//!   `-kubeedge-<version>`): nothing is written.
//! - A node's tag entry `image:version` (owned by the job) carries
//!   `upgrade`; the node follows the daemon's `upgradeState` (Checking,
//!   BackingUp, Upgrading, RollingBack) and finishes with the tag:
//!   Successful only when the daemon reports `upgradeState: Successful`.
//! - A node's result, once in status, is final, and from then on the job
//!   takes its entry back from that node, so that no later pull of the same
//!   tag runs the upgrade again.
//! - `historicVersion` gathers the versions the nodes ran before (from the
//!   daemons' `fromVersion` and the Nodes' kubeletVersion), comma-separated;
//!   `currentVersion` is the target once a node runs it.
//! - Node events: NodeUpgraded, NodeRolledBack, NodeFailed.

use crate::entries::EntryRequest;
use crate::jobevents::JobEvent;
use crate::nodes::NodeInfo;
use crate::nodetasks::{self, Announce, Job, Node, NodeTask, Precheck, Working, action, v1alpha2};
use crate::rollout::{self, Entry, EntryState, NodeState, cap};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::kruise::{
    ImageTagPullPolicy, ImageTagStatus, NodeImage, TagUpgrade, UpgradeState,
};
use nodeimage_api::kubeedge::{
    CONFIRM_ANNOTATION, DEFAULT_UPGRADE_IMAGE, NodeUpgradeJob, NodeUpgradeJobStatus, TaskStatus,
    UpgradeNodeStatus, is_version,
};
use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use nodetasks::rows_size;
#[cfg(test)]
use rollout::rfc3339;

/// Kind name in tag owner references.
pub const KIND: &str = "NodeUpgradeJob";

/// Job and node states, as KubeEdge's upgrade FSM names them.
pub mod state {
    pub use crate::nodetasks::state::{FAILED, INIT, SUCCESSFUL};
    /// Checks, the version check and the pull of the image.
    pub const CHECKING: &str = "Checking";
    /// Checked and pulled; waiting for the job's confirmation.
    pub const WAITING_CONFIRMATION: &str = "WaitingConfirmation";
    /// Backing up the node agent.
    pub const BACKING_UP: &str = "BackingUp";
    /// Upgrading (job: nodes are being upgraded).
    pub const UPGRADING: &str = "Upgrading";
    /// Restoring the backup after a failed upgrade.
    pub const ROLLING_BACK: &str = "RollingBack";
}

/// The step a state refers to.
pub mod event {
    pub use crate::nodetasks::event::{INIT, TIMEOUT};
    /// The version check, the checks (checkItems) and the pull.
    pub const CHECK: &str = "Check";
    /// The backup.
    pub const BACKUP: &str = "BackUp";
    /// The upgrade.
    pub const UPGRADE: &str = "Upgrade";
    /// The rollback after a failed upgrade.
    pub const ROLLBACK: &str = "Rollback";
}

/// Retries of a failed pull of the upgrade image on a node.
pub const PULL_RETRIES: i32 = 2;
/// Longest reason kept in a node's status.
pub const MAX_REASON_CHARS: usize = 512;
/// Reason of a node whose daemon pulled the image but ran no upgrade.
pub const NO_UPGRADE_SUPPORT: &str = "the node's daemon pulled the image but ran no upgrade: it does not support NodeUpgradeJob (update nodeimage-daemon)";

/// Everything the plan reads.
pub struct Inputs<'a> {
    /// The job.
    pub job: &'a NodeUpgradeJob,
    /// Every Node, by name.
    pub nodes: &'a BTreeMap<String, NodeInfo>,
    /// The KubeEdge version each Node reports in its kubeletVersion, by name.
    pub versions: &'a BTreeMap<String, String>,
    /// Every NodeImage, by name.
    pub nodeimages: &'a BTreeMap<String, Arc<NodeImage>>,
    /// Only KubeEdge edge nodes take part.
    pub edge_only: bool,
    /// The time.
    pub now: DateTime<Utc>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The job's new status.
    pub status: NodeUpgradeJobStatus,
    /// The entry to write, with its upgrade (the same on every node).
    pub request: Option<(EntryRequest, TagUpgrade)>,
    /// Nodes to write the entry to: newly started ones, and working ones
    /// (whose entry follows a policy change).
    pub write_to: Vec<String>,
    /// Those of `write_to` whose entry asks them to wait for confirmation
    /// (`requireConfirmation` and not confirmed yet).
    pub awaiting: Vec<String>,
    /// Nodes to take the job's entry back from: their result was already
    /// recorded (or the job has finished).
    pub release_from: Vec<String>,
    /// Events to publish once the status is written.
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<Duration>,
    /// The job has finished (now or before).
    pub finished: bool,
}

/// Whether `node` must wait for confirmation before its backup: the job
/// asks for it (`requireConfirmation`) and its annotation
/// [`CONFIRM_ANNOTATION`] names neither the node nor `*`.
pub fn awaits_confirmation(job: &NodeUpgradeJob, node: &str) -> bool {
    if job.spec.require_confirmation != Some(true) {
        return false;
    }
    let confirmed = job
        .annotations()
        .get(CONFIRM_ANNOTATION)
        .is_some_and(|v| v.split(',').map(str::trim).any(|n| n == "*" || n == node));
    !confirmed
}

/// The node timeout: `timeoutSeconds`, where unset or 0 means 300.
pub fn node_timeout(job: &NodeUpgradeJob) -> i64 {
    nodetasks::node_timeout(job.spec.task.timeout_seconds)
}

/// The job as an owner of tag entries (cluster-scoped: no namespace).
pub fn owner_ref(job: &NodeUpgradeJob) -> ObjectReference {
    nodetasks::owner_ref(KIND, job.name_any(), job.uid())
}

/// The entry a job writes: `image` (default `kubeedge/installation-package`)
/// without its tag or digest, tagged with `version`.
pub fn upgrade_entry(job: &NodeUpgradeJob) -> Result<Entry, String> {
    let version = job.spec.version.as_deref().unwrap_or_default();
    if !is_version(version) {
        return Err(format!(
            "spec.version {version:?} must be of the form vX.Y.Z, such as v1.17.0"
        ));
    }
    let image = job
        .spec
        .image
        .as_deref()
        .filter(|i| !i.trim().is_empty())
        .unwrap_or(DEFAULT_UPGRADE_IMAGE);
    let r = ImageRef::parse(image).map_err(|e| format!("spec.image {image:?}: {e}"))?;
    Ok(Entry {
        image: r.familiar_name(),
        tag: version.to_string(),
    })
}

/// The entry's pull policy: each pull attempt and each step of the tool
/// limited to the node timeout, a few pull retries, no active deadline (a
/// running upgrade is never cut off; the job times the node out instead),
/// and the finished entry kept for the node timeout plus a grace period.
pub fn entry_pull_policy(job: &NodeUpgradeJob) -> ImageTagPullPolicy {
    let timeout = node_timeout(job);
    ImageTagPullPolicy {
        timeout_seconds: Some(i32::try_from(timeout).unwrap_or(i32::MAX)),
        backoff_limit: Some(PULL_RETRIES),
        ttl_seconds_after_finished: Some(nodetasks::entry_ttl(timeout)),
        active_deadline_seconds: None,
    }
}

/// Whether a job status is final.
pub fn is_finished(status: &NodeUpgradeJobStatus) -> bool {
    nodetasks::is_final(status.job.state.as_deref())
}

/// Decides the job's next step.
pub fn plan(inp: Inputs<'_>) -> Plan {
    let job = inp.job;
    let old = job.status.clone().unwrap_or_default();
    let uid = job.uid().unwrap_or_default();
    let spec = &job.spec;
    let version = spec.version.clone().unwrap_or_default();
    let entry = upgrade_entry(job);
    let kind = Upgrade {
        job,
        versions: inp.versions,
        image_ref: format!(
            "{}:{version}",
            entry.as_ref().map(|e| e.image.as_str()).unwrap_or_default()
        ),
        entry: entry.clone().unwrap_or(Entry {
            image: String::new(),
            tag: String::new(),
        }),
        version,
    };
    let old_rows: Vec<TaskStatus> = old
        .node_status
        .iter()
        .flatten()
        .map(|r| r.task.clone())
        .collect();
    let p = nodetasks::step(
        &kind,
        Job {
            uid: uid.clone(),
            old: v1alpha2::recorded(&old.job, old.phase.as_deref()),
            old_rows: &old_rows,
            entries: entry.map(|e| vec![e]),
            node_names: spec.task.node_names.as_deref(),
            label_selector: spec.task.label_selector.as_ref(),
            failure_tolerate: spec.task.failure_tolerate.as_deref(),
            concurrency: spec.task.concurrency,
            timeout_seconds: spec.task.timeout_seconds,
            edge_only: inp.edge_only,
            status_budget: nodetasks::status_budget(nodetasks::spec_bytes(spec)),
        },
        inp.nodes,
        inp.nodeimages,
        inp.now,
    );
    let (current_version, historic_version) = match &p.rows {
        Some(_) => kind.versions(&old, &p),
        None => (old.current_version.clone(), old.historic_version.clone()),
    };
    let request = (!p.write_to.is_empty()).then(|| kind.request());
    let awaiting: Vec<String> = p
        .write_to
        .iter()
        .filter(|n| awaits_confirmation(job, n))
        .cloned()
        .collect();
    // Only results already recorded (in the status we read) release entries;
    // a job that had finished releases every entry.
    let recorded: BTreeSet<&str> = old_rows
        .iter()
        .filter(|t| nodetasks::is_final(t.phase.state.as_deref()))
        .filter_map(|t| t.node_name.as_deref())
        .collect();
    let release_from: Vec<String> = owning_nodes(inp.nodeimages, &uid)
        .into_iter()
        .filter(|n| p.was_finished || (p.rows.is_some() && recorded.contains(n.as_str())))
        .collect();
    let node_status = match p.rows {
        Some(rows) => Some(v1alpha2_rows(
            rows,
            &kind.version,
            historic_version.as_deref(),
        )),
        None => old.node_status.clone(),
    };
    let status = NodeUpgradeJobStatus {
        phase: v1alpha2::job_phase(p.phase.state.as_deref()).or(old.phase.clone()),
        current_version,
        historic_version,
        node_status,
        ..with_phase(old, p.phase)
    };
    Plan {
        status,
        request,
        write_to: p.write_to,
        awaiting,
        release_from,
        events: p.events,
        requeue_after: p.requeue_after,
        finished: p.finished,
    }
}

fn with_phase(old: NodeUpgradeJobStatus, p: nodetasks::Phase) -> NodeUpgradeJobStatus {
    NodeUpgradeJobStatus { job: p, ..old }
}

/// Nodes whose NodeImage holds an entry owned by `uid`.
fn owning_nodes(nodeimages: &BTreeMap<String, Arc<NodeImage>>, uid: &str) -> Vec<String> {
    nodeimages
        .iter()
        .filter(|(_, ni)| {
            ni.spec
                .images
                .as_ref()
                .is_some_and(|m| crate::entries::owns_any(m, uid))
        })
        .map(|(n, _)| n.clone())
        .collect()
}

/// NodeUpgradeJob as a node task.
struct Upgrade<'a> {
    job: &'a NodeUpgradeJob,
    versions: &'a BTreeMap<String, String>,
    entry: Entry,
    version: String,
    image_ref: String,
}

impl Upgrade<'_> {
    /// The entry every working node gets.
    fn request(&self) -> (EntryRequest, TagUpgrade) {
        let checks = self
            .job
            .spec
            .task
            .check_items
            .clone()
            .filter(|c| !c.is_empty());
        (
            EntryRequest {
                image: self.entry.image.clone(),
                tag: self.entry.tag.clone(),
                owner: owner_ref(self.job),
                pull_policy: entry_pull_policy(self.job),
                image_pull_policy: Some("IfNotPresent".into()),
                secrets: vec![],
                sandbox: None,
                check_items: checks,
            },
            TagUpgrade {
                version: self.version.clone(),
                job: self.job.name_any(),
                await_confirmation: false,
            },
        )
    }

    /// `currentVersion` and `historicVersion` after this step.
    fn versions(
        &self,
        old: &NodeUpgradeJobStatus,
        p: &nodetasks::Planned<Self>,
    ) -> (Option<String>, Option<String>) {
        let version = &self.version;
        let mut historic: BTreeSet<String> = old
            .historic_version
            .iter()
            .flat_map(|h| h.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        for (name, row) in &p.nodes {
            let from = match row {
                Node::Tracked {
                    detail: Some(t), ..
                } => t.from_version().map(str::to_string),
                _ => None,
            };
            let node_version = match row {
                Node::Final(_) | Node::Skipped => None,
                _ => self.versions.get(name).cloned(),
            };
            historic.extend(
                from.into_iter()
                    .chain(node_version)
                    .filter(|v| v != version),
            );
        }
        let any_successful = p
            .rows
            .iter()
            .flatten()
            .any(|t| t.phase.state.as_deref() == Some(state::SUCCESSFUL));
        let current = if any_successful {
            Some(version.clone())
        } else {
            old.current_version.clone()
        };
        let historic =
            (!historic.is_empty()).then(|| historic.into_iter().collect::<Vec<_>>().join(","));
        (current, historic)
    }
}

fn task(
    name: &str,
    state: &str,
    event: Option<&str>,
    action: Option<&str>,
    reason: Option<String>,
) -> TaskStatus {
    let reason = reason.filter(|r| !r.is_empty());
    nodetasks::task(name, state, event, action, reason, MAX_REASON_CHARS)
}

/// The actions of NodeUpgradeJob's v1alpha2 flow, by the v1alpha1 event
/// that reports each (nodeimage asks for no confirmation in between).
const FLOW: &[v1alpha2::Step] = &[
    (event::CHECK, "Check"),
    (event::BACKUP, "BackUp"),
    (event::UPGRADE, "Upgrade"),
    (event::ROLLBACK, "RollBack"),
];

/// The rows with their v1alpha2 fields: phase, action flow (a rollback
/// follows a failed upgrade) and, on a node that upgraded, its versions.
fn v1alpha2_rows(
    rows: Vec<TaskStatus>,
    version: &str,
    historic: Option<&str>,
) -> Vec<UpgradeNodeStatus> {
    rows.into_iter()
        .map(|task| {
            let mut flow = v1alpha2::action_flow(&task, FLOW);
            let rolled_back = task.phase.event.as_deref() == Some(event::ROLLBACK);
            if let Some(upgrade) = flow
                .iter_mut()
                .find(|a| rolled_back && a.action.as_deref() == Some("Upgrade"))
            {
                upgrade.status = Some(v1alpha2::condition_status(false));
            }
            let upgraded = task.phase.state.as_deref() == Some(state::SUCCESSFUL);
            UpgradeNodeStatus {
                phase: Some(v1alpha2::node_phase(&task)),
                action_flow: (!flow.is_empty()).then_some(flow),
                current_version: upgraded.then(|| version.to_string()),
                historic_version: historic.filter(|_| upgraded).map(str::to_string),
                task,
            }
        })
        .collect()
}

impl NodeTask for Upgrade<'_> {
    type Row = TaskStatus;
    type Detail = Option<ImageTagStatus>;
    type Summary = ();
    const WORKING: Working = Working {
        state: state::UPGRADING,
        event: event::UPGRADE,
        verb: "upgrading",
    };
    const FAILURE_EVENTS: &'static [&'static str] = &[
        event::INIT,
        event::CHECK,
        event::BACKUP,
        event::ROLLBACK,
        event::TIMEOUT,
    ];
    const MAX_REASON_CHARS: usize = MAX_REASON_CHARS;
    const ANNOUNCE: Announce = Announce::OnceSelected;

    fn task(row: &TaskStatus) -> Option<&TaskStatus> {
        Some(row)
    }

    fn task_mut(row: &mut TaskStatus) -> Option<&mut TaskStatus> {
        Some(row)
    }

    fn row(task: TaskStatus) -> TaskStatus {
        task
    }

    fn started(&self, nodes: Option<usize>) -> String {
        format!(
            "Started upgrading {} node(s) to {v} with {}:{v}",
            nodes.unwrap_or_default(),
            self.entry.image,
            v = self.version
        )
    }

    fn precheck(&self, node: &str) -> Option<Precheck> {
        (self.versions.get(node) == Some(&self.version)).then_some(Precheck::Skip)
    }

    fn detail(
        &self,
        ni: &NodeImage,
        entries: &[Entry],
        uid: &str,
        _: &[EntryState],
    ) -> Option<ImageTagStatus> {
        entries
            .first()
            .and_then(|e| rollout::entry_status(ni, e, uid))
            .cloned()
    }

    fn fresh(&self, _: usize, _: DateTime<Utc>) -> Option<ImageTagStatus> {
        None
    }

    /// A pull is not an upgrade: success needs the daemon's word.
    fn settle(&self, state: NodeState, tag: &Option<ImageTagStatus>) -> NodeState {
        if state == NodeState::Succeeded
            && tag.as_ref().and_then(|t| t.upgrade_state()) != Some(UpgradeState::Successful)
        {
            NodeState::Failed(NO_UPGRADE_SUPPORT.into())
        } else {
            state
        }
    }

    fn render(
        &self,
        name: &str,
        node_state: &NodeState,
        tag: &Option<ImageTagStatus>,
        timed_out: bool,
    ) -> TaskStatus {
        let upgrade = tag.as_ref().and_then(|t| t.upgrade_state());
        let message = tag
            .as_ref()
            .and_then(|t| t.message.as_deref().map(str::to_string));
        match node_state {
            NodeState::Active(_) => active_row(name, upgrade, tag.as_ref(), &self.image_ref),
            NodeState::Succeeded => {
                let t = tag.as_ref();
                let reason = message.or_else(|| {
                    match (
                        t.and_then(|t| t.from_version()),
                        t.and_then(|t| t.to_version()),
                    ) {
                        (Some(f), Some(to)) => Some(format!("upgraded from {f} to {to}")),
                        (_, Some(to)) => Some(format!("upgraded to {to}")),
                        _ => Some(format!("upgraded to {}", self.version)),
                    }
                });
                let reason = reason.filter(|r| !r.is_empty());
                nodetasks::succeeded(name, event::UPGRADE, reason, MAX_REASON_CHARS)
            }
            NodeState::Failed(reason) if timed_out => {
                nodetasks::timed_out(name, reason, MAX_REASON_CHARS)
            }
            NodeState::Failed(reason) => {
                let (ev, act) = failed_step(upgrade, reason);
                task(
                    name,
                    state::FAILED,
                    Some(ev),
                    Some(act),
                    Some(reason.clone()),
                )
            }
            NodeState::NotStarted => task(name, state::INIT, None, None, None),
        }
    }

    fn render_skipped(&self, name: &str) -> TaskStatus {
        task(
            name,
            state::SUCCESSFUL,
            Some(event::CHECK),
            Some(action::SUCCESS),
            Some(format!(
                "already at {} (the Node's kubeletVersion); nothing to do",
                self.version
            )),
        )
    }

    fn summarise(rows: &mut [TaskStatus], budget: usize) {
        summarise(rows, budget)
    }

    fn node_event(&self, t: &TaskStatus) -> Option<JobEvent> {
        let name = t.node_name.clone().unwrap_or_default();
        let reason = t.phase.reason.clone().unwrap_or_default();
        Some(if t.phase.state.as_deref() == Some(state::SUCCESSFUL) {
            JobEvent::normal("NodeUpgraded", format!("Node {name}: {reason}"))
        } else if t.phase.event.as_deref() == Some(event::ROLLBACK)
            && t.phase.action.as_deref() == Some(action::SUCCESS)
        {
            JobEvent::warning(
                "NodeRolledBack",
                format!("Node {name} rolled back: {reason}"),
            )
        } else {
            JobEvent::warning(
                "NodeFailed",
                format!(
                    "Node {name} failed ({}): {reason}",
                    t.phase.event.as_deref().unwrap_or_default()
                ),
            )
        })
    }

    fn more_nodes(n: usize) -> JobEvent {
        JobEvent::normal(
            "NodesFinished",
            format!("{n} more nodes finished; see status"),
        )
    }

    fn all_done(&self, total: usize) -> String {
        format!("all {total} nodes run {}", self.version)
    }
}

/// A working node's state, event and reason from the daemon's upgradeState.
fn active_row(
    name: &str,
    upgrade: Option<UpgradeState>,
    tag: Option<&ImageTagStatus>,
    image_ref: &str,
) -> TaskStatus {
    let message = tag.and_then(|t| t.message.as_deref().map(str::to_string));
    let (st, ev, reason) = match upgrade {
        None | Some(UpgradeState::Checking) => (state::CHECKING, event::CHECK, message),
        Some(UpgradeState::Pulling) => {
            let progress = tag
                .and_then(|t| t.progress)
                .filter(|p| *p > 0)
                .map(|p| format!(" ({p}%)"))
                .unwrap_or_default();
            let pulling = format!("pulling {image_ref}{progress}");
            (
                state::CHECKING,
                event::CHECK,
                Some(match message {
                    Some(m) => format!("{pulling}: {m}"),
                    None => pulling,
                }),
            )
        }
        Some(UpgradeState::WaitingConfirmation) => (
            state::WAITING_CONFIRMATION,
            event::CHECK,
            Some(format!(
                "checked and pulled; waiting for confirmation (annotate the job {CONFIRM_ANNOTATION}={name} or '*')"
            )),
        ),
        Some(UpgradeState::BackingUp) => (state::BACKING_UP, event::BACKUP, message),
        Some(UpgradeState::Upgrading) => (state::UPGRADING, event::UPGRADE, message),
        Some(UpgradeState::RollingBack | UpgradeState::RolledBack) => {
            (state::ROLLING_BACK, event::ROLLBACK, message)
        }
        Some(UpgradeState::Successful) => (state::UPGRADING, event::UPGRADE, message),
    };
    task(name, st, Some(ev), None, reason)
}

/// The event and action of a failed node, from the step its upgrade ended in.
fn failed_step(upgrade: Option<UpgradeState>, reason: &str) -> (&'static str, &'static str) {
    match upgrade {
        Some(UpgradeState::RolledBack) => (event::ROLLBACK, action::SUCCESS),
        Some(UpgradeState::RollingBack) => (event::ROLLBACK, action::FAILURE),
        Some(UpgradeState::Upgrading | UpgradeState::Successful) => {
            (event::UPGRADE, action::FAILURE)
        }
        Some(UpgradeState::BackingUp) => (event::BACKUP, action::FAILURE),
        Some(
            UpgradeState::Checking | UpgradeState::Pulling | UpgradeState::WaitingConfirmation,
        ) => (event::CHECK, action::FAILURE),
        None => {
            let ev =
                if reason.contains("did not respond") || reason.contains("activeDeadlineSeconds") {
                    event::TIMEOUT
                } else {
                    event::CHECK
                };
            (ev, action::FAILURE)
        }
    }
}

/// Shortens reasons until the rows fit `budget` bytes: successful
/// nodes lose theirs, then failure reasons are cut to 64 characters, then
/// every reason and time goes.
pub fn summarise(rows: &mut [TaskStatus], budget: usize) {
    let steps: [fn(&mut TaskStatus); 3] = [
        |r| {
            if r.phase.state.as_deref() == Some(state::SUCCESSFUL) {
                r.phase.reason = None;
            }
        },
        |r| r.phase.reason = r.phase.reason.as_deref().map(|s| cap(s, 64)),
        |r| {
            r.phase.reason = None;
            r.phase.time = None;
        },
    ];
    // The v1alpha2 fields ride on the same rows, about doubling them.
    nodetasks::fit(rows, &steps, budget, |r, _| 2 * rows_size(r));
}

#[cfg(test)]
mod tests;
