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

mod rows;
mod task;

use crate::engine::jobevents::JobEvent;
use crate::engine::nodetasks::{self, Job, Task, v1alpha2};
use crate::engine::rollout::{Entry, Starts};
use crate::nodeimage::entries::EntryRequest;
use crate::nodeimage::nodes::NodeInfo;
use crate::runtime::policy::UpgradeImages;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::kruise::{ImageTagPullPolicy, NodeImage, Purpose, TagUpgrade};
use nodeimage_api::kubeedge::{
    CONFIRM_ANNOTATION, DEFAULT_UPGRADE_IMAGE, NodeUpgradeJob, NodeUpgradeJobStatus, TaskStatus,
    UpgradeDigests, is_version, upgrade_digests,
};
use nodeimage_api::reference::ImageRef;
pub use rows::summarise;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use task::Upgrade;

#[cfg(test)]
use crate::engine::rollout::rfc3339;
#[cfg(test)]
use nodeimage_api::kruise::{ImageTagStatus, UpgradeState};
#[cfg(test)]
use nodetasks::rows_size;

/// Kind name in tag owner references.
pub const KIND: &str = "NodeUpgradeJob";

/// Job and node states, as KubeEdge's upgrade FSM names them.
pub mod state {
    pub use crate::engine::nodetasks::state::{FAILED, INIT, SUCCESSFUL};
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
    pub use crate::engine::nodetasks::event::{INIT, TIMEOUT};
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
    /// The repositories the upgrade image may come from (`--upgrade-images`).
    pub upgrade_images: &'a UpgradeImages,
    /// Most nodes that may start now by the registry's free slots (`None`:
    /// the upgrade image's registry has no limit).
    pub registry_cap: Option<&'a crate::engine::rollout::Cap>,
    /// The time.
    pub now: DateTime<Utc>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The job's new status, its conditions at the plan's time.
    pub status: NodeUpgradeJobStatus,
    /// The entry to write, with its upgrade (the same on every node).
    pub request: Option<(EntryRequest, TagUpgrade)>,
    /// Nodes to write the entry to: newly started ones, and working ones
    /// (whose entry follows a policy change).
    pub write_to: Vec<String>,
    /// The nodes that start now, and how many `concurrency` wanted.
    pub starts: Starts,
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
/// without its tag or digest, tagged with `version`; refused (the job fails
/// before any node acts) when the image's repository is not one of
/// `allowed` (`--upgrade-images`) or `imageDigestGatter` is not usable;
/// the tag's upgrade entry ([`Purpose::Upgrade`]), beside any pull entry.
pub fn upgrade_entry(job: &NodeUpgradeJob, allowed: &UpgradeImages) -> Result<Entry, String> {
    upgrade_target(job, allowed).map(|(entry, _)| entry)
}

/// The entry a job writes and the digests its nodes check (None: no
/// check), as [`upgrade_entry`] decides it.
pub fn upgrade_target(
    job: &NodeUpgradeJob,
    allowed: &UpgradeImages,
) -> Result<(Entry, Option<UpgradeDigests>), String> {
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
    if let Some(why) = allowed.refusal(&r, image) {
        return Err(why);
    }
    let digests = upgrade_digests(job.spec.image_digest_gatter.as_ref())?;
    let entry = Entry {
        image: r.familiar_name(),
        tag: version.to_string(),
        purpose: Purpose::Upgrade,
    };
    Ok((entry, digests))
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
    let target = upgrade_target(job, inp.upgrade_images);
    let kind = Upgrade::of(job, inp.versions, target.as_ref().ok());
    let entry = target.map(|(e, _)| e);
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
            task: Task::of(&job.spec.task),
            edge_only: inp.edge_only,
            registry_cap: inp.registry_cap,
            status_budget: nodetasks::status_budget(nodetasks::spec_bytes(&job.spec)),
            p2p: None,
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
    let release_from = release_from(&old_rows, owning_nodes(inp.nodeimages, &uid), &p);
    let node_status = match p.rows {
        Some(rows) => Some(rows::v1alpha2_rows(
            rows,
            &kind.version,
            historic_version.as_deref(),
        )),
        None => old.node_status.clone(),
    };
    let mut status = NodeUpgradeJobStatus {
        phase: v1alpha2::job_phase(p.phase.state.as_deref()).or(old.phase.clone()),
        current_version,
        historic_version,
        node_status,
        ..with_phase(old, p.phase)
    };
    let at = crate::runtime::clock::api_time(inp.now);
    crate::engine::conditions::apply(
        job.status.as_ref(),
        &mut status,
        job.metadata.generation,
        &at,
    );
    Plan {
        status,
        request,
        write_to: p.write_to,
        starts: p.starts,
        awaiting,
        release_from,
        events: p.events,
        requeue_after: p.requeue_after,
        finished: p.finished,
    }
}

/// The nodes, of those `owning` an entry of the job, to take it back from:
/// only results already recorded (in the status the plan read) release
/// entries; a job that had finished releases every entry.
fn release_from(
    old_rows: &[TaskStatus],
    owning: Vec<String>,
    p: &nodetasks::Planned<Upgrade<'_>>,
) -> Vec<String> {
    let recorded: BTreeSet<&str> = old_rows
        .iter()
        .filter(|t| nodetasks::is_final(t.phase.state.as_deref()))
        .filter_map(|t| t.node_name.as_deref())
        .collect();
    owning
        .into_iter()
        .filter(|n| p.was_finished || (p.rows.is_some() && recorded.contains(n.as_str())))
        .collect()
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
                .is_some_and(|m| crate::nodeimage::entries::owns_any(m, uid))
        })
        .map(|(n, _)| n.clone())
        .collect()
}

impl crate::engine::registrypace::Starting for Plan {
    fn starts(&self) -> &Starts {
        &self.starts
    }
}

#[cfg(test)]
mod tests;
