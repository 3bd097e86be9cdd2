//! What `status` shows, computed from the objects alone: the job's own
//! status, and one row per node from the NodeImage tag entries the job owns
//! (an ImageListPullJob owns them through its child ImagePullJobs). Pure, so
//! the mapping is table-tested without a cluster.

use crate::target::Kind;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use nodeimage_api::kruise::{ImagePullPhase, ImageTagSpec, ImageTagStatus, NodeImage};
use nodeimage_api::kubeedge::TaskStatus;
use nodeimage_api::{ImageListPullJob, ImagePrePullJob, ImagePullJob, NodeUpgradeJob};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

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

    fn finished(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
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
            || self
                .job
                .status
                .state
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case("failed"))
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

    let summary = summary(job, &uid);
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

/// Rows of the nodes whose NodeImage has tag entries owned by one of `owners`.
fn rows_from_nodeimages(
    nodeimages: &[NodeImage],
    owners: &BTreeSet<String>,
) -> BTreeMap<String, NodeRow> {
    let mut rows = BTreeMap::new();
    for ni in nodeimages {
        let statuses = ni.status.as_ref().and_then(|s| s.image_statuses.as_ref());
        let mut images = Vec::new();
        for (image, spec) in ni.spec.images.iter().flatten() {
            for tag in spec.tags.iter().filter(|t| owned(t, owners)) {
                let status = statuses
                    .and_then(|m| m.get(image))
                    .and_then(|s| s.tags.iter().find(|s| answers(s, tag)));
                images.push(image_row(image, tag, status));
            }
        }
        if !images.is_empty() {
            let node = ni.name_any();
            rows.insert(node.clone(), node_row(node, images));
        }
    }
    rows
}

fn owned(tag: &ImageTagSpec, owners: &BTreeSet<String>) -> bool {
    tag.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid.as_ref().is_some_and(|u| owners.contains(u)))
}

/// Whether a status entry reports on this spec entry: same tag, same
/// version (absent counts as 0), as the node daemon and the counts match them.
fn answers(status: &ImageTagStatus, spec: &ImageTagSpec) -> bool {
    status.tag == spec.tag && status.version.unwrap_or(0) == spec.version.unwrap_or(0)
}

/// `name:tag`, or `name@digest` when the tag is a digest.
pub fn reference(image: &str, tag: &str) -> String {
    let is_digest = tag
        .split_once(':')
        .is_some_and(|(alg, hex)| !alg.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if is_digest {
        format!("{image}@{tag}")
    } else {
        format!("{image}:{tag}")
    }
}

fn image_row(image: &str, tag: &ImageTagSpec, status: Option<&ImageTagStatus>) -> ImageRow {
    let phase = status.map_or(Phase::Waiting, |s| s.phase.into());
    let progress = match phase {
        Phase::Succeeded => 100,
        _ => status.and_then(|s| s.progress).unwrap_or(0).clamp(0, 100),
    };
    ImageRow {
        image: reference(image, &tag.tag),
        phase,
        progress,
        image_id: status
            .and_then(|s| s.image_id.as_deref().map(String::from))
            .filter(|s| !s.is_empty()),
        message: status
            .and_then(|s| s.message.as_deref().map(String::from))
            .filter(|s| !s.is_empty()),
        upgrade_state: status
            .and_then(|s| s.upgrade_state())
            .map(|u| u.to_string()),
    }
}

fn node_row(node: String, images: Vec<ImageRow>) -> NodeRow {
    let all_finished = images.iter().all(|i| i.phase.finished());
    let phase = if all_finished {
        if images.iter().any(|i| i.phase == Phase::Failed) {
            Phase::Failed
        } else {
            Phase::Succeeded
        }
    } else if images.iter().any(|i| i.phase == Phase::Pulling) {
        Phase::Pulling
    } else {
        Phase::Waiting
    };
    let total: i64 = images.iter().map(|i| i64::from(i.progress)).sum();
    let progress = i32::try_from(total / i64::try_from(images.len().max(1)).unwrap_or(1))
        .unwrap_or(0)
        .clamp(0, 100);
    let image_id = match images.as_slice() {
        [one] => one.image_id.clone(),
        _ => None,
    };
    let message = images
        .iter()
        .find(|i| i.phase == Phase::Failed && i.message.is_some())
        .or_else(|| images.iter().find(|i| i.message.is_some()))
        .and_then(|i| i.message.clone())
        .or_else(|| {
            images
                .iter()
                .find_map(|i| i.upgrade_state.as_ref().map(|u| format!("upgrade: {u}")))
        });
    NodeRow {
        node,
        phase,
        progress,
        image_id,
        message,
        images,
    }
}

fn mark_failed<'a>(rows: &mut BTreeMap<String, NodeRow>, nodes: impl Iterator<Item = &'a String>) {
    for node in nodes {
        let row = rows.entry(node.clone()).or_insert_with(|| NodeRow {
            node: node.clone(),
            phase: Phase::Failed,
            progress: 0,
            image_id: None,
            message: Some("failed (recorded in the job's status)".into()),
            images: Vec::new(),
        });
        row.phase = Phase::Failed;
    }
}

/// Applies a KubeEdge job's per-node record: final states win, and nodes the
/// job lists without entries yet show as Pending.
fn apply_task_statuses<'a>(
    rows: &mut BTreeMap<String, NodeRow>,
    nodes: impl Iterator<Item = &'a TaskStatus>,
) {
    for t in nodes {
        let Some(node) = t.node_name.clone().filter(|n| !n.is_empty()) else {
            continue;
        };
        let state = t.phase.state.as_deref().unwrap_or_default();
        let reason = t.phase.reason.clone().filter(|r| !r.is_empty());
        let final_phase = if state.eq_ignore_ascii_case("successful") {
            Some(Phase::Succeeded)
        } else if state.eq_ignore_ascii_case("failed") {
            Some(Phase::Failed)
        } else {
            None
        };
        let row = rows.entry(node.clone()).or_insert_with(|| NodeRow {
            node,
            phase: Phase::Pending,
            progress: 0,
            image_id: None,
            message: None,
            images: Vec::new(),
        });
        match final_phase {
            Some(Phase::Succeeded) => {
                row.phase = Phase::Succeeded;
                row.progress = 100;
            }
            Some(p) => {
                row.phase = p;
                if reason.is_some() {
                    row.message = reason;
                }
            }
            None => {}
        }
    }
}

fn time(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

fn kubeedge_finished(state: Option<&str>) -> bool {
    state.is_some_and(|s| s.eq_ignore_ascii_case("successful") || s.eq_ignore_ascii_case("failed"))
}

fn summary(job: &Job, uid: &str) -> JobSummary {
    let meta = job.meta();
    let (images, status) = match job {
        Job::Pull(j) => {
            let s = j.status.clone().unwrap_or_default();
            (
                vec![j.spec.image.clone()],
                JobStatus {
                    desired: Some(s.desired),
                    active: Some(s.active),
                    succeeded: Some(s.succeeded),
                    failed: Some(s.failed),
                    message: s.message.clone().filter(|m| !m.is_empty()),
                    start_time: time(s.start_time.as_ref()),
                    completion_time: time(s.completion_time.as_ref()),
                    ..JobStatus::default()
                },
            )
        }
        Job::List(j) => {
            let s = j.status.clone().unwrap_or_default();
            let failed = s.failed_image_statuses.as_ref().map_or(0, Vec::len);
            let message = s.failed_image_statuses.as_ref().and_then(|f| {
                f.iter()
                    .find_map(|f| f.message.clone())
                    .map(|m| format!("{} image(s) failed: {m}", f.len()))
            });
            (
                j.spec.images.clone(),
                JobStatus {
                    desired: Some(s.desired),
                    active: Some(s.active),
                    succeeded: Some(s.succeeded),
                    failed: Some(i32::try_from(failed).unwrap_or(i32::MAX)),
                    completed: Some(s.completed),
                    message,
                    start_time: time(s.start_time.as_ref()),
                    completion_time: time(s.completion_time.as_ref()),
                    ..JobStatus::default()
                },
            )
        }
        Job::PrePull(j) => {
            let s = j.status.clone().unwrap_or_default();
            (
                j.spec.image_pre_pull_template.images.clone(),
                JobStatus {
                    state: s.job.state.filter(|x| !x.is_empty()),
                    event: s.job.event.filter(|x| !x.is_empty()),
                    action: s.job.action.filter(|x| !x.is_empty()),
                    message: s.job.reason.filter(|x| !x.is_empty()),
                    completion_time: s.job.time.as_deref().and_then(|t| t.parse().ok()),
                    ..JobStatus::default()
                },
            )
        }
        Job::Upgrade(j) => {
            let s = j.status.clone().unwrap_or_default();
            let image = j
                .spec
                .image
                .clone()
                .unwrap_or_else(|| nodeimage_api::kubeedge::DEFAULT_UPGRADE_IMAGE.to_string());
            let images = match &j.spec.version {
                Some(v) => vec![format!("{image} (version {v})")],
                None => vec![image],
            };
            (
                images,
                JobStatus {
                    state: s.job.state.filter(|x| !x.is_empty()),
                    event: s.job.event.filter(|x| !x.is_empty()),
                    action: s.job.action.filter(|x| !x.is_empty()),
                    message: s.job.reason.filter(|x| !x.is_empty()),
                    completion_time: s.job.time.as_deref().and_then(|t| t.parse().ok()),
                    ..JobStatus::default()
                },
            )
        }
    };
    let finished = match job {
        Job::Pull(_) | Job::List(_) => status.completion_time.is_some(),
        Job::PrePull(_) | Job::Upgrade(_) => kubeedge_finished(status.state.as_deref()),
    };
    let status = match job {
        // A KubeEdge `time` is when the state last changed: a completion
        // time only once the job is final.
        Job::PrePull(_) | Job::Upgrade(_) if !finished => JobStatus {
            completion_time: None,
            ..status
        },
        _ => status,
    };
    JobSummary {
        kind: job.kind(),
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
        uid: uid.to_string(),
        images,
        finished,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn nodeimage(name: &str, spec: Value, status: Value) -> NodeImage {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {"name": name},
            "spec": {"images": spec},
            "status": {"desired": 0, "imageStatuses": status},
        }))
        .expect("a NodeImage")
    }

    fn owner(uid: &str) -> Value {
        json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob", "name": "j", "uid": uid}])
    }

    fn ipj(status: Value) -> Job {
        Job::Pull(Box::new(
            serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "ImagePullJob",
                "metadata": {"name": "j", "namespace": "ns", "uid": "u1"},
                "spec": {"image": "r/app:v1"},
                "status": status,
            }))
            .expect("an ImagePullJob"),
        ))
    }

    /// (node, phase, progress, image ID, message) of each row.
    type Brief = (String, Phase, i32, Option<String>, Option<String>);

    fn brief(v: &View) -> Vec<Brief> {
        v.nodes
            .iter()
            .map(|r| {
                (
                    r.node.clone(),
                    r.phase,
                    r.progress,
                    r.image_id.clone(),
                    r.message.clone(),
                )
            })
            .collect()
    }

    fn row(node: &str, phase: Phase, progress: i32, id: Option<&str>, msg: Option<&str>) -> Brief {
        (
            node.to_string(),
            phase,
            progress,
            id.map(str::to_string),
            msg.map(str::to_string),
        )
    }

    #[test]
    fn rows_of_an_image_pull_job() {
        use Phase::*;
        let cases: Vec<(&str, Vec<NodeImage>, Value, Vec<Brief>)> = vec![
            (
                "no entries yet",
                vec![nodeimage("n1", json!({}), json!({}))],
                json!({"desired": 2}),
                vec![],
            ),
            (
                "an entry the node has not answered waits",
                vec![nodeimage(
                    "n1",
                    json!({"r/app": {"tags": [{"tag": "v1", "version": 0, "ownerReferences": owner("u1")}]}}),
                    json!({}),
                )],
                json!({}),
                vec![row("n1", Waiting, 0, None, None)],
            ),
            (
                "pulling with progress; other owners' tags are not ours",
                vec![nodeimage(
                    "n1",
                    json!({
                        "r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]},
                        "r/other": {"tags": [{"tag": "v1", "ownerReferences": owner("u2")}]},
                    }),
                    json!({
                        "r/app": {"tags": [{"tag": "v1", "phase": "Pulling", "progress": 42}]},
                        "r/other": {"tags": [{"tag": "v1", "phase": "Failed", "message": "x"}]},
                    }),
                )],
                json!({}),
                vec![row("n1", Pulling, 42, None, None)],
            ),
            (
                "a status of an older version does not answer the entry",
                vec![nodeimage(
                    "n1",
                    json!({"r/app": {"tags": [{"tag": "v1", "version": 2, "ownerReferences": owner("u1")}]}}),
                    json!({"r/app": {"tags": [{"tag": "v1", "version": 1, "phase": "Succeeded", "progress": 100, "imageID": "r/app@sha256:aa"}]}}),
                )],
                json!({}),
                vec![row("n1", Waiting, 0, None, None)],
            ),
            (
                "succeeded and failed nodes, sorted by name",
                vec![
                    nodeimage(
                        "n2",
                        json!({"r/app": {"tags": [{"tag": "v1", "version": 1, "ownerReferences": owner("u1")}]}}),
                        json!({"r/app": {"tags": [{"tag": "v1", "version": 1, "phase": "Failed", "progress": 7, "message": "not found"}]}}),
                    ),
                    nodeimage(
                        "n1",
                        json!({"r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]}}),
                        json!({"r/app": {"tags": [{"tag": "v1", "phase": "Succeeded", "imageID": "r/app@sha256:aa"}]}}),
                    ),
                ],
                json!({"desired": 2, "succeeded": 1, "failed": 1}),
                vec![
                    row("n1", Succeeded, 100, Some("r/app@sha256:aa"), None),
                    row("n2", Failed, 7, None, Some("not found")),
                ],
            ),
            (
                "a node in failedNodes without an entry still shows, failed",
                vec![nodeimage(
                    "n1",
                    json!({"r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]}}),
                    json!({"r/app": {"tags": [{"tag": "v1", "phase": "Pulling", "progress": 30}]}}),
                )],
                json!({"failed": 2, "failedNodes": ["n1", "n3"]}),
                vec![
                    row("n1", Failed, 30, None, None),
                    row(
                        "n3",
                        Failed,
                        0,
                        None,
                        Some("failed (recorded in the job's status)"),
                    ),
                ],
            ),
        ];
        for (name, nis, status, want) in cases {
            let job = ipj(status);
            let v = view(&Inputs {
                job: &job,
                children: &[],
                nodeimages: &nis,
            });
            assert_eq!(brief(&v), want, "{name}");
        }
    }

    #[test]
    fn not_shown_counts_nodes_without_rows() {
        let job = ipj(json!({"desired": 3}));
        let nis = vec![nodeimage(
            "n1",
            json!({"r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]}}),
            json!({}),
        )];
        let v = view(&Inputs {
            job: &job,
            children: &[],
            nodeimages: &nis,
        });
        assert_eq!(
            v.counts,
            Counts {
                nodes: 1,
                waiting: 1,
                not_shown: 2,
                ..Counts::default()
            }
        );
        assert!(!v.job.finished);
        assert!(!v.has_failures());
    }

    #[test]
    fn a_node_with_several_images() {
        use Phase::*;
        // (name, phases and progress of two images, expected phase, progress, message)
        let cases = [
            ("both waiting", [("Waiting", 0), ("Waiting", 0)], Waiting, 0),
            (
                "one pulling",
                [("Succeeded", 0), ("Pulling", 50)],
                Pulling,
                75,
            ),
            (
                "one waiting",
                [("Succeeded", 0), ("Waiting", 0)],
                Waiting,
                50,
            ),
            (
                "all done",
                [("Succeeded", 0), ("Succeeded", 0)],
                Succeeded,
                100,
            ),
            (
                "one failed, the other still pulling",
                [("Failed", 10), ("Pulling", 20)],
                Pulling,
                15,
            ),
            (
                "one failed, all finished",
                [("Failed", 10), ("Succeeded", 0)],
                Failed,
                55,
            ),
        ];
        for (name, tags, phase, progress) in cases {
            let statuses: Vec<Value> = tags
                .iter()
                .enumerate()
                .map(|(i, (p, pr))| json!({"tag": format!("v{i}"), "phase": p, "progress": pr, "imageID": format!("r/a@sha256:{i}"), "message": (*p == "Failed").then_some("boom")}))
                .collect();
            let ni = nodeimage(
                "n1",
                json!({"r/a": {"tags": [
                    {"tag": "v0", "ownerReferences": owner("u1")},
                    {"tag": "v1", "ownerReferences": owner("u1")},
                ]}}),
                json!({"r/a": {"tags": statuses}}),
            );
            let job = ipj(json!({}));
            let v = view(&Inputs {
                job: &job,
                children: &[],
                nodeimages: &[ni],
            });
            let r = &v.nodes[0];
            assert_eq!((r.phase, r.progress), (phase, progress), "{name}");
            assert_eq!(r.image_id, None, "{name}: no single image ID");
            assert_eq!(r.images.len(), 2, "{name}");
            let failed = tags.iter().any(|(p, _)| *p == "Failed");
            assert_eq!(r.message.as_deref(), failed.then_some("boom"), "{name}");
        }
    }

    #[test]
    fn an_image_list_pull_job_owns_through_its_children() {
        let list: ImageListPullJob = serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImageListPullJob",
            "metadata": {"name": "l", "namespace": "ns", "uid": "L"},
            "spec": {"images": ["r/a:v1", "r/b:v1"]},
            "status": {"desired": 2, "completed": 1, "succeeded": 1, "active": 1,
                       "startTime": "2025-01-01T00:00:00Z"},
        }))
        .expect("an ImageListPullJob");
        let child = |name: &str, uid: &str, parent: &str| -> ImagePullJob {
            serde_json::from_value(json!({
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "ImagePullJob",
                "metadata": {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": [
                    {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImageListPullJob", "name": "l", "uid": parent}
                ]},
                "spec": {"image": "r/a:v1"},
            }))
            .expect("a child")
        };
        let children = vec![
            child("l-a", "A", "L"),
            child("l-b", "B", "L"),
            child("x", "X", "other"),
        ];
        let ni = nodeimage(
            "n1",
            json!({
                "r/a": {"tags": [{"tag": "v1", "ownerReferences": owner("A")}]},
                "r/b": {"tags": [{"tag": "v1", "ownerReferences": owner("B")}]},
                "r/x": {"tags": [{"tag": "v1", "ownerReferences": owner("X")}]},
            }),
            json!({
                "r/a": {"tags": [{"tag": "v1", "phase": "Succeeded"}]},
                "r/b": {"tags": [{"tag": "v1", "phase": "Pulling", "progress": 20}]},
                "r/x": {"tags": [{"tag": "v1", "phase": "Failed"}]},
            }),
        );
        let job = Job::List(Box::new(list));
        let v = view(&Inputs {
            job: &job,
            children: &children,
            nodeimages: &[ni],
        });
        assert_eq!(brief(&v), vec![row("n1", Phase::Pulling, 60, None, None)]);
        let images: Vec<&str> = v.nodes[0].images.iter().map(|i| i.image.as_str()).collect();
        assert_eq!(images, ["r/a:v1", "r/b:v1"]);
        assert_eq!(v.job.status.completed, Some(1));
        assert_eq!(v.job.images, ["r/a:v1", "r/b:v1"]);
        assert!(!v.job.finished);
    }

    #[test]
    fn kubeedge_jobs_merge_their_node_records() {
        use Phase::*;
        let job: ImagePrePullJob = serde_json::from_value(json!({
            "apiVersion": "operations.kubeedge.io/v1alpha1",
            "kind": "ImagePrePullJob",
            "metadata": {"name": "p", "uid": "P"},
            "spec": {"imagePrePullTemplate": {"images": ["r/a:v1"], "nodeNames": ["n1", "n2", "n3", "n4"]}},
            "status": {"state": "Pulling", "event": "Pull", "time": "2025-01-01T00:00:00Z", "status": [
                {"nodeStatus": {"nodeName": "n1", "state": "Successful"}},
                {"nodeStatus": {"nodeName": "n2", "state": "Failed", "event": "TimeOut", "reason": "timed out"}},
                {"nodeStatus": {"nodeName": "n3", "state": "Pulling"}},
                {"nodeStatus": {"nodeName": "n4"}},
            ]},
        }))
        .expect("an ImagePrePullJob");
        let entry = |node: &str, phase: &str, progress: i32| {
            nodeimage(
                node,
                json!({"r/a": {"tags": [{"tag": "v1", "ownerReferences": [{"kind": "ImagePrePullJob", "name": "p", "uid": "P"}]}]}}),
                json!({"r/a": {"tags": [{"tag": "v1", "phase": phase, "progress": progress}]}}),
            )
        };
        // n1's entry expired; n2 still pulls on the node but the job timed it out.
        let nis = vec![entry("n2", "Pulling", 40), entry("n3", "Pulling", 70)];
        let job = Job::PrePull(Box::new(job));
        let v = view(&Inputs {
            job: &job,
            children: &[],
            nodeimages: &nis,
        });
        assert_eq!(
            brief(&v),
            vec![
                row("n1", Succeeded, 100, None, None),
                row("n2", Failed, 40, None, Some("timed out")),
                row("n3", Pulling, 70, None, None),
                row("n4", Pending, 0, None, None),
            ]
        );
        assert!(!v.job.finished);
        assert_eq!(v.job.status.completion_time, None, "not final yet");
        assert!(v.has_failures());
        assert_eq!(
            v.counts,
            Counts {
                nodes: 4,
                pending: 1,
                pulling: 1,
                succeeded: 1,
                failed: 1,
                ..Counts::default()
            }
        );
    }

    #[test]
    fn finished_jobs() {
        let cases: Vec<(&str, Job, bool, bool)> = vec![
            ("running ipj", ipj(json!({"desired": 1})), false, false),
            (
                "completed ipj",
                ipj(
                    json!({"desired": 1, "succeeded": 1, "completionTime": "2025-01-01T00:00:00Z"}),
                ),
                true,
                false,
            ),
            (
                "completed ipj with a failure",
                ipj(json!({"failed": 1, "completionTime": "2025-01-01T00:00:00Z"})),
                true,
                true,
            ),
        ];
        let kubeedge = |state: &str| -> Job {
            Job::Upgrade(Box::new(
                serde_json::from_value(json!({
                    "apiVersion": "operations.kubeedge.io/v1alpha1",
                    "kind": "NodeUpgradeJob",
                    "metadata": {"name": "u", "uid": "U"},
                    "spec": {"version": "v1.17.0", "nodeNames": ["n1"]},
                    "status": {"state": state},
                }))
                .expect("a NodeUpgradeJob"),
            ))
        };
        let cases = cases.into_iter().chain([
            ("upgrading", kubeedge("Upgrading"), false, false),
            ("successful", kubeedge("Successful"), true, false),
            ("failed", kubeedge("Failed"), true, true),
        ]);
        for (name, job, finished, failures) in cases {
            let v = view(&Inputs {
                job: &job,
                children: &[],
                nodeimages: &[],
            });
            assert_eq!(
                (v.job.finished, v.has_failures()),
                (finished, failures),
                "{name}"
            );
        }
    }

    #[test]
    fn references() {
        let cases = [
            ("nginx", "1.25", "nginx:1.25"),
            ("r:5000/a", "v1", "r:5000/a:v1"),
            ("r/a", "sha256:abcdef01", "r/a@sha256:abcdef01"),
        ];
        for (image, tag, want) in cases {
            assert_eq!(reference(image, tag), want);
        }
    }
}
