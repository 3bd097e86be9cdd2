//! What an ImageListPullJob should do next: one child ImagePullJob per image
//! (recreated when the template changes), and a status aggregated from the
//! children. Pure.

use crate::engine::jobevents::JobEvent;
use crate::runtime::clock::{api_time, instant};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;
use nodeimage_api::kruise::{
    FailedImageStatus, ImageListPullJob, ImageListPullJobStatus, ImagePullJob, ImagePullJobSpec,
    ImagePullJobTemplate,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Annotation on a child naming its image.
pub const IMAGE_ANNOTATION: &str = "nodeimage.dev/image";
/// Label on a child: hash of the template it was made from.
pub const TEMPLATE_HASH_LABEL: &str = "nodeimage.dev/template-hash";
/// Label on a child: name of its ImageListPullJob.
pub const PARENT_LABEL: &str = "nodeimage.dev/imagelistpulljob";

/// What to do.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Children to create.
    pub create: Vec<ImagePullJob>,
    /// Names of children to delete (image gone, or template changed).
    pub delete: Vec<String>,
    /// The new status.
    pub status: ImageListPullJobStatus,
    /// Delete the list job itself (its TTL passed).
    pub delete_self: bool,
    /// When to look again.
    pub requeue_after: Option<std::time::Duration>,
    /// Whether the job completed in this step.
    pub completed_now: bool,
    /// The status (with conditions) differs from the one read: write it.
    pub write_status: bool,
    /// Events to publish.
    pub events: Vec<JobEvent>,
}

/// FNV-1a hash of the template's JSON, as a label value.
pub fn template_hash(t: &ImagePullJobTemplate) -> String {
    let json = serde_json::to_vec(t).unwrap_or_default();
    let h = json.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{h:016x}")
}

/// The child job for `image`. Children never delete themselves: the list
/// job's TTL deletes the list job, and garbage collection its children.
pub fn child(parent: &ImageListPullJob, image: &str, hash: &str) -> ImagePullJob {
    let mut template = parent.spec.template.clone();
    if let Some(cp) = template.completion_policy.as_mut() {
        cp.ttl_seconds_after_finished = None;
    }
    let owner = OwnerReference {
        api_version: "apps.kruise.io/v1alpha1".into(),
        kind: "ImageListPullJob".into(),
        name: parent.name_any(),
        uid: parent.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    ImagePullJob {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", parent.name_any())),
            namespace: parent.namespace(),
            labels: Some(BTreeMap::from([
                (TEMPLATE_HASH_LABEL.to_string(), hash.to_string()),
                (PARENT_LABEL.to_string(), parent.name_any()),
            ])),
            annotations: Some(child_annotations(parent, image)),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: ImagePullJobSpec {
            image: image.to_string(),
            template,
        },
        status: None,
    }
}

/// A child's annotations: its image, and the start-up gate's mark, the
/// follow-tag interval and the P2P settings when the list job carries them
/// (children carry them on: the gate reads ImagePullJobs, and each child
/// follows its own tag and rolls out on its own).
fn child_annotations(parent: &ImageListPullJob, image: &str) -> BTreeMap<String, String> {
    let mut a = BTreeMap::from([(IMAGE_ANNOTATION.to_string(), image.to_string())]);
    if let Some(every) = parent
        .annotations()
        .get(nodeimage_api::followtag::FOLLOW_TAG)
    {
        a.insert(
            nodeimage_api::followtag::FOLLOW_TAG.to_string(),
            every.clone(),
        );
    }
    // P2P settings (`engine::p2p`): each child waits for the agent and
    // rolls out in waves as the list job says.
    for key in nodeimage_api::p2p::ALL {
        if let Some(v) = parent.annotations().get(key) {
            a.insert(key.to_string(), v.clone());
        }
    }
    if nodeimage_api::gate::is_gating(parent.annotations()) {
        a.insert(
            nodeimage_api::gate::GATE_NEW_NODES.to_string(),
            "true".to_string(),
        );
    }
    a
}

/// Decides the list job's next step from its children, its status with
/// conditions at `now`, and its events.
pub fn plan(job: &ImageListPullJob, children: &[Arc<ImagePullJob>], now: DateTime<Utc>) -> Plan {
    let mut p = decide(job, children, now);
    crate::engine::conditions::apply(
        job.status.as_ref(),
        &mut p.status,
        job.metadata.generation,
        &api_time(now),
    );
    p.write_status = job.status.as_ref() != Some(&p.status);
    if p.completed_now {
        p.events.push(JobEvent {
            warning: p.status.failed_image_statuses.is_some(),
            reason: "Completed",
            note: format!(
                "Completed: {} of {} image(s) pulled on every node",
                p.status.succeeded, p.status.desired
            ),
        });
    }
    p
}

/// The step before conditions and events: a completed list waits for its
/// TTL; else its children follow its images and template, and its counts
/// follow its children.
fn decide(job: &ImageListPullJob, children: &[Arc<ImagePullJob>], now: DateTime<Utc>) -> Plan {
    let old = job.status.clone().unwrap_or_default();
    let (cp, always) = crate::engine::rollout::completion(&job.spec.template);
    if let Some(done) = old.completion_time.as_ref().map(instant) {
        let (delete_self, requeue_after) =
            crate::engine::rollout::ttl_due(done, cp.ttl_seconds_after_finished, now);
        return Plan {
            create: vec![],
            delete: vec![],
            status: old,
            delete_self,
            requeue_after,
            completed_now: false,
            write_status: false,
            events: vec![],
        };
    }
    let hash = template_hash(&job.spec.template);
    let (current, delete) = sort_children(job, children, &hash);
    let create: Vec<ImagePullJob> = job
        .spec
        .images
        .iter()
        .filter(|i| !current.contains_key(i.as_str()))
        .map(|i| child(job, i, &hash))
        .collect();
    let counts = count(job, &current);
    let desired = job.spec.images.len() as i32;
    let complete = always && create.is_empty() && counts.completed == desired;
    let status = ImageListPullJobStatus {
        start_time: Some(old.start_time.clone().unwrap_or_else(|| api_time(now))),
        completion_time: complete.then(|| api_time(now)),
        desired,
        active: counts.active,
        completed: counts.completed,
        succeeded: counts.succeeded,
        failed_image_statuses: (!counts.failed.is_empty()).then_some(counts.failed),
        conditions: old.conditions.clone(),
    };
    let requeue_after = complete
        .then(|| {
            cp.ttl_seconds_after_finished
                .map(|t| std::time::Duration::from_secs(t.max(0) as u64))
        })
        .flatten();
    Plan {
        create,
        delete,
        status,
        delete_self: false,
        requeue_after,
        completed_now: complete,
        write_status: false,
        events: vec![],
    }
}

/// The child that stands for each wanted image (made from the current
/// template, not being deleted; the first of several), and the names of
/// the others, to delete.
fn sort_children<'a>(
    job: &ImageListPullJob,
    children: &'a [Arc<ImagePullJob>],
    hash: &str,
) -> (BTreeMap<&'a str, &'a ImagePullJob>, Vec<String>) {
    let wanted: BTreeSet<&str> = job.spec.images.iter().map(String::as_str).collect();
    let mut current: BTreeMap<&str, &ImagePullJob> = BTreeMap::new();
    let mut delete = Vec::new();
    for c in children {
        let image = c
            .annotations()
            .get(IMAGE_ANNOTATION)
            .map(String::as_str)
            .unwrap_or(c.spec.image.as_str());
        let fresh = c.labels().get(TEMPLATE_HASH_LABEL).map(String::as_str) == Some(hash);
        if !wanted.contains(image)
            || !fresh
            || current.contains_key(image)
            || c.metadata.deletion_timestamp.is_some()
        {
            if c.metadata.deletion_timestamp.is_none() {
                delete.push(c.name_any());
            }
            continue;
        }
        current.insert(image, c);
    }
    (current, delete)
}

/// The list's counts, by image.
struct Counts {
    /// Images whose child has nodes working.
    active: i32,
    /// Images whose child finished.
    completed: i32,
    /// Images whose child finished without a failed node.
    succeeded: i32,
    /// Images whose child has failed nodes.
    failed: Vec<FailedImageStatus>,
}

/// Counts the images by how their current child stands.
fn count(job: &ImageListPullJob, current: &BTreeMap<&str, &ImagePullJob>) -> Counts {
    let mut counts = Counts {
        active: 0,
        completed: 0,
        succeeded: 0,
        failed: Vec::new(),
    };
    for image in &job.spec.images {
        let Some(c) = current.get(image.as_str()) else {
            continue;
        };
        let st = c.status.clone().unwrap_or_default();
        let finished = st.completion_time.is_some()
            || (st.desired > 0 && st.desired == st.succeeded + st.failed);
        if st.active > 0 {
            counts.active += 1;
        }
        if finished {
            counts.completed += 1;
            if st.failed == 0 {
                counts.succeeded += 1;
            }
        }
        if st.failed > 0 {
            counts.failed.push(FailedImageStatus {
                image_pull_job: Some(c.name_any()),
                name: Some(image.clone()),
                message: Some(format!(
                    "{} of {} node(s) failed: {}",
                    st.failed,
                    st.desired,
                    st.failed_nodes.unwrap_or_default().join(", ")
                )),
            });
        }
    }
    counts
}

#[cfg(test)]
mod tests;
