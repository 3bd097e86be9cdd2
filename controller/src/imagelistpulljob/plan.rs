//! What an ImageListPullJob should do next: one child ImagePullJob per image
//! (recreated when the template changes), and a status aggregated from the
//! children. Pure.

use crate::clock::{api_time, instant};
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
            annotations: Some(BTreeMap::from([(
                IMAGE_ANNOTATION.to_string(),
                image.to_string(),
            )])),
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

/// Decides the list job's next step from its children.
pub fn plan(job: &ImageListPullJob, children: &[Arc<ImagePullJob>], now: DateTime<Utc>) -> Plan {
    let old = job.status.clone().unwrap_or_default();
    let (cp, always) = crate::rollout::completion(&job.spec.template);
    if let Some(done) = old.completion_time.as_ref().map(instant) {
        let (delete_self, requeue_after) =
            crate::rollout::ttl_due(done, cp.ttl_seconds_after_finished, now);
        return Plan {
            create: vec![],
            delete: vec![],
            status: old,
            delete_self,
            requeue_after,
            completed_now: false,
        };
    }
    let hash = template_hash(&job.spec.template);
    let wanted: BTreeSet<&str> = job.spec.images.iter().map(String::as_str).collect();
    let mut current: BTreeMap<&str, &ImagePullJob> = BTreeMap::new();
    let mut delete = Vec::new();
    for c in children {
        let image = c
            .annotations()
            .get(IMAGE_ANNOTATION)
            .map(String::as_str)
            .unwrap_or(c.spec.image.as_str());
        let fresh = c.labels().get(TEMPLATE_HASH_LABEL) == Some(&hash);
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
    let create: Vec<ImagePullJob> = job
        .spec
        .images
        .iter()
        .filter(|i| !current.contains_key(i.as_str()))
        .map(|i| child(job, i, &hash))
        .collect();

    let (mut active, mut completed, mut succeeded) = (0, 0, 0);
    let mut failed = Vec::new();
    for image in &job.spec.images {
        let Some(c) = current.get(image.as_str()) else {
            continue;
        };
        let st = c.status.clone().unwrap_or_default();
        let finished = st.completion_time.is_some()
            || (st.desired > 0 && st.desired == st.succeeded + st.failed);
        if st.active > 0 {
            active += 1;
        }
        if finished {
            completed += 1;
            if st.failed == 0 {
                succeeded += 1;
            }
        }
        if st.failed > 0 {
            failed.push(FailedImageStatus {
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
    let desired = job.spec.images.len() as i32;
    let complete = always && create.is_empty() && completed == desired;
    let status = ImageListPullJobStatus {
        start_time: Some(old.start_time.clone().unwrap_or_else(|| api_time(now))),
        completion_time: complete.then(|| api_time(now)),
        desired,
        active,
        completed,
        succeeded,
        failed_image_statuses: (!failed.is_empty()).then_some(failed),
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::kruise::{
        CompletionPolicy, CompletionPolicyType, ImageListPullJobSpec, ImagePullJobStatus,
    };

    fn now(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    fn list(images: &[&str], cp: CompletionPolicy) -> ImageListPullJob {
        let mut j = ImageListPullJob::new(
            "list",
            ImageListPullJobSpec {
                images: images.iter().map(|s| s.to_string()).collect(),
                template: ImagePullJobTemplate {
                    completion_policy: Some(cp),
                    ..Default::default()
                },
            },
        );
        j.metadata.namespace = Some("ns".into());
        j.metadata.uid = Some("uid-l".into());
        j
    }

    fn made(
        parent: &ImageListPullJob,
        image: &str,
        name: &str,
        status: Option<ImagePullJobStatus>,
    ) -> Arc<ImagePullJob> {
        let mut c = child(parent, image, &template_hash(&parent.spec.template));
        c.metadata.name = Some(name.into());
        c.status = status;
        Arc::new(c)
    }

    fn st(
        desired: i32,
        active: i32,
        succeeded: i32,
        failed: i32,
        done: bool,
    ) -> Option<ImagePullJobStatus> {
        Some(ImagePullJobStatus {
            desired,
            active,
            succeeded,
            failed,
            completion_time: done.then(|| api_time(now(50))),
            failed_nodes: (failed > 0).then(|| vec!["fake-node".to_string()]),
            ..Default::default()
        })
    }

    #[test]
    fn creates_one_child_per_image_without_its_own_ttl() {
        let j = list(
            &["a:1", "b:1"],
            CompletionPolicy {
                ttl_seconds_after_finished: Some(20),
                ..Default::default()
            },
        );
        let p = plan(&j, &[], now(1));
        assert_eq!(p.create.len(), 2);
        let c = &p.create[0];
        assert_eq!(c.spec.image, "a:1");
        assert_eq!(c.owner_references()[0].controller, Some(true));
        assert_eq!(
            c.spec
                .template
                .completion_policy
                .as_ref()
                .and_then(|p| p.ttl_seconds_after_finished),
            None
        );
        assert_eq!(p.status.desired, 2);
        assert!(p.status.completion_time.is_none());
    }

    #[test]
    fn aggregates_children_and_completes() {
        let j = list(
            &["a:1", "b:1"],
            CompletionPolicy {
                ttl_seconds_after_finished: Some(20),
                ..Default::default()
            },
        );
        let kids = vec![
            made(&j, "a:1", "list-a", st(3, 0, 3, 0, true)),
            made(&j, "b:1", "list-b", st(4, 1, 2, 1, false)),
        ];
        let p = plan(&j, &kids, now(60));
        assert!(p.create.is_empty() && p.delete.is_empty());
        assert_eq!(
            (p.status.active, p.status.completed, p.status.succeeded),
            (1, 1, 1)
        );
        assert!(p.status.completion_time.is_none());
        let failed = p.status.failed_image_statuses.clone().unwrap_or_default();
        assert_eq!(failed[0].image_pull_job.as_deref(), Some("list-b"));
        assert!(
            failed[0]
                .message
                .as_deref()
                .is_some_and(|m| m.contains("fake-node"))
        );

        let kids = vec![
            made(&j, "a:1", "list-a", st(3, 0, 3, 0, true)),
            made(&j, "b:1", "list-b", st(4, 0, 3, 1, true)),
        ];
        let p = plan(&j, &kids, now(60));
        assert!(p.completed_now);
        assert_eq!((p.status.completed, p.status.succeeded), (2, 1));
        assert_eq!(p.requeue_after, Some(std::time::Duration::from_secs(20)));
        let mut done = j.clone();
        done.status = Some(p.status);
        assert!(!plan(&done, &kids, now(70)).delete_self);
        assert!(plan(&done, &kids, now(80)).delete_self);
    }

    #[test]
    fn never_jobs_do_not_complete_and_template_changes_recreate() {
        let j = list(
            &["a:1"],
            CompletionPolicy {
                type_: Some(CompletionPolicyType::Never),
                ..Default::default()
            },
        );
        let kids = vec![made(&j, "a:1", "list-a", st(1, 0, 1, 0, false))];
        let p = plan(&j, &kids, now(1));
        assert!(p.status.completion_time.is_none());
        assert_eq!(p.status.completed, 1);

        let mut edited = j.clone();
        edited.spec.template.parallelism =
            Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(5));
        let p = plan(&edited, &kids, now(1));
        assert_eq!(p.delete, vec!["list-a"]);
        assert_eq!(p.create.len(), 1);

        let mut fewer = j.clone();
        fewer.spec.images = vec!["b:1".into()];
        let p = plan(&fewer, &kids, now(1));
        assert_eq!(p.delete, vec!["list-a"]);
        assert_eq!(p.create[0].spec.image, "b:1");
    }
}
