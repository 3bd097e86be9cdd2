//! What a NodeUpgradeJob should do next, decided from a snapshot of the
//! Nodes (labels, readiness, the version in their kubeletVersion), the
//! NodeImages, the job (its status records what was decided before) and the
//! clock. Pure.
//!
//! Rules:
//! - The nodes are fixed when the job starts: `nodeNames` in their order, or
//!   the Nodes matching `labelSelector` sorted by name; they are listed in
//!   `status.nodeStatus[]`.
//! - A node that has not started fails at once (event Init) when its Node
//!   does not exist, is not Ready, or gets no NodeImage; it succeeds at once
//!   (event Check) when its Node reports the target version
//!   (`kubeletVersion` ending in `-kubeedge-<version>`): nothing is written.
//! - At most `concurrency` nodes work at once. A node starts when its tag
//!   entry `image:version` (owned by the job, carrying `upgrade`) is written,
//!   follows the daemon's `upgradeState` (Checking, BackingUp, Upgrading,
//!   RollingBack) and finishes with the tag: Successful only when the daemon
//!   reports `upgradeState: Successful`. A node that has not finished
//!   `timeoutSeconds` after its entry's `createdAt` fails (event TimeOut).
//! - A node's result, once in status, is final, and from then on the job
//!   takes its entry back from that node, so that no later pull of the same
//!   tag runs the upgrade again. A finished job is final.
//! - The job fails when `failed / total > failureTolerate` once every node
//!   has finished, and succeeds otherwise.
//! - `historicVersion` gathers the versions the nodes ran before (from the
//!   daemons' `fromVersion` and the Nodes' kubeletVersion), comma-separated;
//!   `currentVersion` is the target once a node runs it.

use crate::entries::EntryRequest;
use crate::imageprepulljob::plan::JobEvent;
use crate::rollout::{self, Entry, EntryState, NodeInfo, NodeState, cap, rfc3339};
use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::kruise::{
    ImageTagPullPolicy, ImageTagStatus, NodeImage, TagUpgrade, UpgradeState,
};
use nodeimage_api::kubeedge::{
    DEFAULT_TIMEOUT_SECONDS, DEFAULT_UPGRADE_IMAGE, NodeUpgradeJob, NodeUpgradeJobStatus,
    TaskStatus, is_version,
};
use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// API version of the kind, in tag owner references.
pub const API_VERSION: &str = "operations.kubeedge.io/v1alpha1";
/// Kind name in tag owner references.
pub const KIND: &str = "NodeUpgradeJob";
/// API group of the kind.
pub const GROUP: &str = "operations.kubeedge.io";

/// Job and node states, as KubeEdge's upgrade FSM names them.
pub mod state {
    /// Not started yet.
    pub const INIT: &str = "Init";
    /// Checks, the version check and the pull of the image.
    pub const CHECKING: &str = "Checking";
    /// Backing up the node agent.
    pub const BACKING_UP: &str = "BackingUp";
    /// Upgrading (job: nodes are being upgraded).
    pub const UPGRADING: &str = "Upgrading";
    /// Restoring the backup after a failed upgrade.
    pub const ROLLING_BACK: &str = "RollingBack";
    /// Done: the node runs the version (job: within the failure tolerance).
    pub const SUCCESSFUL: &str = "Successful";
    /// Done with a failure (job: above the failure tolerance).
    pub const FAILED: &str = "Failed";
}

/// The step a state refers to.
pub mod event {
    /// Selecting nodes and preparing.
    pub const INIT: &str = "Init";
    /// The version check, the checks (checkItems) and the pull.
    pub const CHECK: &str = "Check";
    /// The backup.
    pub const BACKUP: &str = "BackUp";
    /// The upgrade.
    pub const UPGRADE: &str = "Upgrade";
    /// The rollback after a failed upgrade.
    pub const ROLLBACK: &str = "Rollback";
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

/// Added to the node timeout to give a finished tag entry's lifetime, a
/// backstop: the job takes its entries back as soon as a node's result is
/// recorded.
pub const ENTRY_TTL_GRACE_SECONDS: i64 = 300;
/// Retries of a failed pull of the upgrade image on a node.
pub const PULL_RETRIES: i32 = 2;
/// Longest reason kept in a node's status.
pub const MAX_REASON_CHARS: usize = 512;
/// Serialised per-node status above which reasons are shortened, then dropped.
pub const STATUS_BUDGET_BYTES: usize = 512 * 1024;
/// Node events published per reconcile; the rest are summed up.
pub const MAX_NODE_EVENTS: usize = 20;
/// How soon to look again while a node waits for its NodeImage.
pub const NODEIMAGE_WAIT: Duration = Duration::from_secs(2);
/// How often a running job looks again even if nothing woke it.
pub const RUNNING_RESYNC: Duration = Duration::from_secs(60);
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

/// The node timeout: `timeoutSeconds`, where unset or 0 means 300.
pub fn node_timeout(job: &NodeUpgradeJob) -> i64 {
    match job.spec.timeout_seconds {
        Some(s) if s > 0 => s,
        _ => DEFAULT_TIMEOUT_SECONDS,
    }
}

/// The job as an owner of tag entries (cluster-scoped: no namespace).
pub fn owner_ref(job: &NodeUpgradeJob) -> ObjectReference {
    ObjectReference {
        api_version: Some(API_VERSION.into()),
        kind: Some(KIND.into()),
        name: Some(job.name_any()),
        uid: job.uid(),
        ..Default::default()
    }
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
        ttl_seconds_after_finished: Some(
            i32::try_from(timeout.saturating_add(ENTRY_TTL_GRACE_SECONDS)).unwrap_or(i32::MAX),
        ),
        active_deadline_seconds: None,
    }
}

/// Whether a job status is final.
pub fn is_finished(status: &NodeUpgradeJobStatus) -> bool {
    matches!(
        status.state.as_deref(),
        Some(state::SUCCESSFUL | state::FAILED)
    )
}

fn row_finished(t: &TaskStatus) -> bool {
    matches!(t.state.as_deref(), Some(state::SUCCESSFUL | state::FAILED))
}

/// One node's situation in this plan.
#[derive(Clone, Debug)]
enum Row {
    /// Finished before: kept verbatim.
    Final(TaskStatus),
    /// Failed before starting (event Init).
    Rejected(String),
    /// Its Node reports the target version already.
    AtVersion,
    /// Waiting for its NodeImage to exist.
    NoNodeImage,
    /// Known through its entry.
    Tracked {
        state: NodeState,
        tag: Option<ImageTagStatus>,
        timed_out: bool,
    },
}

impl Row {
    fn node_state(&self) -> NodeState {
        match self {
            Row::Final(t) => {
                if t.state.as_deref() == Some(state::SUCCESSFUL) {
                    NodeState::Succeeded
                } else {
                    NodeState::Failed(t.reason.clone().unwrap_or_default())
                }
            }
            Row::Rejected(reason) => NodeState::Failed(reason.clone()),
            Row::AtVersion => NodeState::Succeeded,
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
    let uid = job.uid().unwrap_or_default();
    if is_finished(&old) {
        return Plan {
            status: old,
            request: None,
            write_to: vec![],
            release_from: owning_nodes(inp.nodeimages, &uid),
            events: vec![],
            requeue_after: None,
            finished: true,
        };
    }
    let spec = &job.spec;
    let version = spec.version.clone().unwrap_or_default();
    let mut events = Vec::new();
    let first_look = old.state.as_deref().unwrap_or_default().is_empty();

    let entry = match upgrade_entry(job) {
        Ok(e) => e,
        Err(e) => return fail_at_init(old, events, e, now),
    };
    let tolerance = match rollout::parse_tolerance(spec.failure_tolerate.as_deref()) {
        Ok(v) => v,
        Err(e) => return fail_at_init(old, events, e, now),
    };
    let timeout = crate::clock::seconds(node_timeout(job));
    let concurrency = usize::try_from(spec.concurrency.unwrap_or(1).max(1)).unwrap_or(1);

    // The node set: as recorded, else selected now.
    let recorded: Vec<String> = old
        .node_status
        .iter()
        .flatten()
        .filter_map(|t| t.node_name.clone())
        .collect();
    let names = if recorded.is_empty() {
        match rollout::select_nodes(
            spec.node_names.as_deref(),
            spec.label_selector.as_ref(),
            inp.nodes,
        ) {
            Ok(n) => n,
            Err(e) => return fail_at_init(old, events, e, now),
        }
    } else {
        recorded
    };
    if first_look {
        events.push(JobEvent {
            warning: false,
            reason: "Started",
            note: format!(
                "Started upgrading {} node(s) to {version} with {}:{version}",
                names.len(),
                entry.image
            ),
        });
    }
    if names.is_empty() {
        return fail_at_init(old, events, "no node matches labelSelector".into(), now);
    }
    let old_rows: HashMap<&str, &TaskStatus> = old
        .node_status
        .iter()
        .flatten()
        .filter_map(|t| t.node_name.as_deref().map(|n| (n, t)))
        .collect();

    let mut rows: Vec<(String, Row)> = names
        .iter()
        .map(|name| {
            let row = match old_rows.get(name.as_str()) {
                Some(t) if row_finished(t) => Row::Final((*t).clone()),
                _ => track(name, &inp, &entry, &version, &uid, timeout),
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
                tag: None,
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
    let image_ref = format!("{}:{version}", entry.image);
    let mut node_rows: Vec<TaskStatus> = rows
        .iter()
        .map(|(name, row)| node_row(name, row, &image_ref, &version))
        .map(|r| keep_time(r, &old_rows, now))
        .collect();
    summarise(&mut node_rows);

    // Versions.
    let mut historic: BTreeSet<String> = old
        .historic_version
        .iter()
        .flat_map(|h| h.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
        .collect();
    for (name, row) in &rows {
        let from = match row {
            Row::Tracked { tag: Some(t), .. } => t.from_version.clone(),
            _ => None,
        };
        let node_version = match row {
            Row::Final(_) | Row::AtVersion => None,
            _ => inp.versions.get(name).cloned(),
        };
        historic.extend(
            from.into_iter()
                .chain(node_version)
                .filter(|v| *v != version),
        );
    }
    let any_successful = node_rows
        .iter()
        .any(|t| t.state.as_deref() == Some(state::SUCCESSFUL));
    let current_version = if any_successful {
        Some(version.clone())
    } else {
        old.current_version.clone()
    };

    // Job status.
    let total = tally.desired;
    let failed = tally.failed.len();
    let started = states.iter().any(|(_, s)| *s != NodeState::NotStarted);
    let tolerate_text = spec
        .failure_tolerate
        .clone()
        .unwrap_or_else(|| "0.1".into());
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
                event::UPGRADE,
                Some(action::SUCCESS),
                (failed > 0).then(|| format!("{ratio}, within failureTolerate {tolerate_text}")),
            )
        }
    } else if started {
        (
            state::UPGRADING,
            event::UPGRADE,
            None,
            Some(format!(
                "{} of {total} nodes finished ({failed} failed), {} upgrading",
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
    let status = NodeUpgradeJobStatus {
        state: Some(job_state.into()),
        current_version,
        historic_version: (!historic.is_empty())
            .then(|| historic.into_iter().collect::<Vec<_>>().join(",")),
        event: Some(job_event.into()),
        action: job_action.map(str::to_string),
        reason,
        time: if same_phase {
            old.time.clone()
        } else {
            Some(rfc3339(now))
        },
        node_status: Some(node_rows),
    };

    node_events(&status, &old_rows, &mut events);
    if finished {
        events.push(JobEvent {
            warning: job_state == state::FAILED,
            reason: "Finished",
            note: match &status.reason {
                Some(r) => format!("Finished {job_state}: {r}"),
                None => format!("Finished {job_state}: all {total} nodes run {version}"),
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
    let request = (!write_to.is_empty()).then(|| {
        let checks = spec.check_items.clone().filter(|c| !c.is_empty());
        (
            EntryRequest {
                image: entry.image.clone(),
                tag: entry.tag.clone(),
                owner: owner_ref(job),
                pull_policy: entry_pull_policy(job),
                image_pull_policy: Some("IfNotPresent".into()),
                secrets: vec![],
                sandbox: None,
                check_items: checks,
            },
            TagUpgrade {
                version: version.clone(),
                job: job.name_any(),
            },
        )
    });
    // Only results already recorded (in the status we read) release entries.
    let owning = owning_nodes(inp.nodeimages, &uid);
    let release_from: Vec<String> = owning
        .into_iter()
        .filter(|n| old_rows.get(n.as_str()).is_some_and(|t| row_finished(t)))
        .collect();
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
        request,
        write_to,
        release_from,
        events,
        requeue_after,
        finished,
    }
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

/// Where a node without a final result stands.
fn track(
    name: &str,
    inp: &Inputs<'_>,
    entry: &Entry,
    version: &str,
    uid: &str,
    timeout: TimeDelta,
) -> Row {
    let ni = inp.nodeimages.get(name);
    let es = ni.map(|ni| rollout::entry_states(ni, std::slice::from_ref(entry), uid));
    let started = es
        .as_ref()
        .is_some_and(|s| s.iter().any(|e| *e != EntryState::Missing));
    if !started {
        if let Some(why) = rollout::unstartable(inp.nodes.get(name)) {
            return Row::Rejected(why);
        }
        if inp.versions.get(name).map(String::as_str) == Some(version) {
            return Row::AtVersion;
        }
    }
    let (Some(ni), Some(es)) = (ni, es) else {
        return Row::NoNodeImage;
    };
    let tag = rollout::entry_status(ni, entry, uid).cloned();
    let pairs: Vec<(Entry, EntryState)> = vec![(entry.clone(), es[0].clone())];
    let mut before = rollout::node_state(&pairs);
    // A pull is not an upgrade: success needs the daemon's word.
    if before == NodeState::Succeeded
        && tag.as_ref().and_then(|t| t.upgrade_state) != Some(UpgradeState::Successful)
    {
        before = NodeState::Failed(NO_UPGRADE_SUPPORT.into());
    }
    let after = rollout::apply_node_timeout(before.clone(), timeout, inp.now);
    let timed_out = before != after;
    Row::Tracked {
        state: after,
        tag,
        timed_out,
    }
}

fn task(
    name: &str,
    state: &str,
    event: Option<&str>,
    action: Option<&str>,
    reason: Option<String>,
) -> TaskStatus {
    TaskStatus {
        node_name: Some(name.to_string()),
        state: Some(state.to_string()),
        event: event.map(str::to_string),
        action: action.map(str::to_string),
        reason: reason
            .filter(|r| !r.is_empty())
            .map(|r| cap(&r, MAX_REASON_CHARS)),
        time: None,
    }
}

/// The status entry of one node.
fn node_row(name: &str, row: &Row, image_ref: &str, version: &str) -> TaskStatus {
    match row {
        Row::Final(t) => t.clone(),
        Row::Rejected(reason) => task(
            name,
            state::FAILED,
            Some(event::INIT),
            Some(action::FAILURE),
            Some(reason.clone()),
        ),
        Row::AtVersion => task(
            name,
            state::SUCCESSFUL,
            Some(event::CHECK),
            Some(action::SUCCESS),
            Some(format!(
                "already at {version} (the Node's kubeletVersion); nothing to do"
            )),
        ),
        Row::NoNodeImage
        | Row::Tracked {
            state: NodeState::NotStarted,
            ..
        } => task(name, state::INIT, None, None, None),
        Row::Tracked {
            state: node_state,
            tag,
            timed_out,
        } => {
            let upgrade = tag.as_ref().and_then(|t| t.upgrade_state);
            let message = tag.as_ref().and_then(|t| t.message.clone());
            match node_state {
                NodeState::Active(_) => active_row(name, upgrade, tag.as_ref(), image_ref),
                NodeState::Succeeded => {
                    let t = tag.as_ref();
                    let reason = message.or_else(|| {
                        match (
                            t.and_then(|t| t.from_version.as_deref()),
                            t.and_then(|t| t.to_version.as_deref()),
                        ) {
                            (Some(f), Some(to)) => Some(format!("upgraded from {f} to {to}")),
                            (_, Some(to)) => Some(format!("upgraded to {to}")),
                            _ => Some(format!("upgraded to {version}")),
                        }
                    });
                    task(
                        name,
                        state::SUCCESSFUL,
                        Some(event::UPGRADE),
                        Some(action::SUCCESS),
                        reason,
                    )
                }
                NodeState::Failed(reason) if *timed_out => task(
                    name,
                    state::FAILED,
                    Some(event::TIMEOUT),
                    Some(action::FAILURE),
                    Some(reason.clone()),
                ),
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
    }
}

/// A working node's state, event and reason from the daemon's upgradeState.
fn active_row(
    name: &str,
    upgrade: Option<UpgradeState>,
    tag: Option<&ImageTagStatus>,
    image_ref: &str,
) -> TaskStatus {
    let message = tag.and_then(|t| t.message.clone());
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
        Some(UpgradeState::Checking | UpgradeState::Pulling) => (event::CHECK, action::FAILURE),
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

/// A node's `time` stays while its state, event and action do not change;
/// a node entering a new phase gets now.
fn keep_time(
    mut row: TaskStatus,
    old_rows: &HashMap<&str, &TaskStatus>,
    now: DateTime<Utc>,
) -> TaskStatus {
    if row.state.as_deref() == Some(state::INIT) {
        return row;
    }
    let old = row.node_name.as_deref().and_then(|n| old_rows.get(n));
    row.time = match old {
        Some(o) if o.state == row.state && o.event == row.event && o.action == row.action => {
            o.time.clone().or_else(|| Some(rfc3339(now)))
        }
        _ => Some(rfc3339(now)),
    };
    row
}

/// Serialised size of the node rows.
pub fn rows_size(rows: &[TaskStatus]) -> usize {
    serde_json::to_vec(rows)
        .map(|v| v.len())
        .unwrap_or(usize::MAX)
}

/// Shortens reasons until the rows fit [`STATUS_BUDGET_BYTES`]: successful
/// nodes lose theirs, then failure reasons are cut to 64 characters, then
/// every reason and time goes.
pub fn summarise(rows: &mut [TaskStatus]) {
    if rows_size(rows) <= STATUS_BUDGET_BYTES {
        return;
    }
    for r in rows.iter_mut() {
        if r.state.as_deref() == Some(state::SUCCESSFUL) {
            r.reason = None;
        }
    }
    if rows_size(rows) <= STATUS_BUDGET_BYTES {
        return;
    }
    for r in rows.iter_mut() {
        r.reason = r.reason.as_deref().map(|s| cap(s, 64));
    }
    if rows_size(rows) <= STATUS_BUDGET_BYTES {
        return;
    }
    for r in rows.iter_mut() {
        r.reason = None;
        r.time = None;
    }
}

/// Events for nodes that finished in this plan: NodeUpgraded, NodeRolledBack
/// (the upgrade failed and the backup was restored), NodeFailed.
fn node_events(
    status: &NodeUpgradeJobStatus,
    old_rows: &HashMap<&str, &TaskStatus>,
    events: &mut Vec<JobEvent>,
) {
    let newly: Vec<&TaskStatus> = status
        .node_status
        .iter()
        .flatten()
        .filter(|t| row_finished(t))
        .filter(|t| {
            !t.node_name
                .as_deref()
                .and_then(|n| old_rows.get(n))
                .is_some_and(|o| row_finished(o))
        })
        .collect();
    for t in newly.iter().take(MAX_NODE_EVENTS) {
        let name = t.node_name.clone().unwrap_or_default();
        let reason = t.reason.clone().unwrap_or_default();
        let ev = if t.state.as_deref() == Some(state::SUCCESSFUL) {
            JobEvent {
                warning: false,
                reason: "NodeUpgraded",
                note: format!("Node {name}: {reason}"),
            }
        } else if t.event.as_deref() == Some(event::ROLLBACK)
            && t.action.as_deref() == Some(action::SUCCESS)
        {
            JobEvent {
                warning: true,
                reason: "NodeRolledBack",
                note: format!("Node {name} rolled back: {reason}"),
            }
        } else {
            JobEvent {
                warning: true,
                reason: "NodeFailed",
                note: format!(
                    "Node {name} failed ({}): {reason}",
                    t.event.as_deref().unwrap_or_default()
                ),
            }
        };
        events.push(ev);
    }
    if newly.len() > MAX_NODE_EVENTS {
        events.push(JobEvent {
            warning: false,
            reason: "NodesFinished",
            note: format!(
                "{} more nodes finished; see status",
                newly.len() - MAX_NODE_EVENTS
            ),
        });
    }
}

/// The event of a failed job: the one its failed nodes share, else Upgrade.
fn failed_job_event(rows: &[TaskStatus]) -> &'static str {
    let events: BTreeSet<&str> = rows
        .iter()
        .filter(|s| s.state.as_deref() == Some(state::FAILED))
        .filter_map(|s| s.event.as_deref())
        .collect();
    match events.into_iter().collect::<Vec<_>>().as_slice() {
        [one] => [
            event::INIT,
            event::CHECK,
            event::BACKUP,
            event::ROLLBACK,
            event::TIMEOUT,
        ]
        .into_iter()
        .find(|e| e == one)
        .unwrap_or(event::UPGRADE),
        _ => event::UPGRADE,
    }
}

/// The job fails before any node starts.
fn fail_at_init(
    old: NodeUpgradeJobStatus,
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
        status: NodeUpgradeJobStatus {
            state: Some(state::FAILED.into()),
            event: Some(event::INIT.into()),
            action: Some(action::FAILURE.into()),
            reason: Some(reason),
            time: Some(rfc3339(now)),
            ..old
        },
        request: None,
        write_to: vec![],
        release_from: vec![],
        events,
        requeue_after: None,
        finished: true,
    }
}

#[cfg(test)]
mod tests;
