//! The job's own status, as its kind records it, in one shape for every
//! kind; whether a KubeEdge job has ended is the NodeImage contract's to say.

use super::{Job, JobStatus, JobSummary};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use nodeimage_api::kruise::nodeimage::contract::task_is_final;
use nodeimage_api::kruise::{ImageListPullJobStatus, ImagePullJobStatus};
use nodeimage_api::kubeedge::JobState;

/// The job, summarised.
pub(super) fn summary(job: &Job, uid: &str) -> JobSummary {
    let (images, status) = match job {
        Job::Pull(j) => (
            vec![j.spec.image.clone()],
            pull_status(&j.status.clone().unwrap_or_default()),
        ),
        Job::List(j) => (
            j.spec.images.clone(),
            list_status(&j.status.clone().unwrap_or_default()),
        ),
        Job::PrePull(j) => (
            j.spec.image_pre_pull_template.images.clone(),
            task_status(j.status.as_ref().map(|s| s.job.clone()).unwrap_or_default()),
        ),
        Job::Upgrade(j) => (
            upgrade_images(j),
            task_status(j.status.as_ref().map(|s| s.job.clone()).unwrap_or_default()),
        ),
    };
    let finished = match job {
        Job::Pull(_) | Job::List(_) => status.completion_time.is_some(),
        Job::PrePull(_) | Job::Upgrade(_) => task_is_final(status.state.as_deref()),
    };
    let meta = job.meta();
    JobSummary {
        kind: job.kind(),
        namespace: meta.namespace.clone(),
        name: meta.name.clone().unwrap_or_default(),
        uid: uid.to_string(),
        images,
        finished,
        status,
        p2p: p2p_settings(meta.annotations.as_ref()),
    }
}

/// The job's P2P annotations as `key=value` pairs without their prefix.
fn p2p_settings(a: Option<&std::collections::BTreeMap<String, String>>) -> Option<String> {
    let pairs: Vec<String> = a
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some(format!("{}={v}", k.strip_prefix("nodeimage.dev/p2p-")?)))
        .collect();
    (!pairs.is_empty()).then(|| pairs.join(" "))
}

fn time(t: Option<&Time>) -> Option<Timestamp> {
    t.map(|t| t.0)
}

/// An ImagePullJob's counts of nodes.
fn pull_status(s: &ImagePullJobStatus) -> JobStatus {
    JobStatus {
        desired: Some(s.desired),
        active: Some(s.active),
        succeeded: Some(s.succeeded),
        failed: Some(s.failed),
        message: s.message.clone().filter(|m| !m.is_empty()),
        start_time: time(s.start_time.as_ref()),
        completion_time: time(s.completion_time.as_ref()),
        ..JobStatus::default()
    }
}

/// An ImageListPullJob's counts of images, and its first failure.
fn list_status(s: &ImageListPullJobStatus) -> JobStatus {
    let failed = s.failed_image_statuses.as_ref().map_or(0, Vec::len);
    let message = s.failed_image_statuses.as_ref().and_then(|f| {
        f.iter()
            .find_map(|f| f.message.clone())
            .map(|m| format!("{} image(s) failed: {m}", f.len()))
    });
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
    }
}

/// A KubeEdge job's state. Its `time` is when the state last changed: a
/// completion time only once the state is final.
fn task_status(s: JobState) -> JobStatus {
    let finished = task_is_final(s.state.as_deref());
    let nonempty = |x: &String| !x.is_empty();
    JobStatus {
        state: s.state.filter(nonempty),
        event: s.event.filter(nonempty),
        action: s.action.filter(nonempty),
        message: s.reason.filter(nonempty),
        completion_time: s
            .time
            .as_deref()
            .filter(|_| finished)
            .and_then(|t| t.parse().ok()),
        ..JobStatus::default()
    }
}

/// A NodeUpgradeJob's image, with the version it upgrades to.
fn upgrade_images(j: &nodeimage_api::NodeUpgradeJob) -> Vec<String> {
    let image = j
        .spec
        .image
        .clone()
        .unwrap_or_else(|| nodeimage_api::kubeedge::DEFAULT_UPGRADE_IMAGE.to_string());
    match &j.spec.version {
        Some(v) => vec![format!("{image} (version {v})")],
        None => vec![image],
    }
}
