//! The tag entry an ImagePullJob writes on its nodes: its owner, its pull
//! policy as OpenKruise derives it, its secrets. Pure.

use super::{NEVER_ENTRY_TTL_SECONDS, NEVER_MIN_DEADLINE_SECONDS};
use crate::engine::rollout::{self, Entry};
use crate::nodeimage::entries::EntryRequest;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::defaults;
use nodeimage_api::kruise::{
    CompletionPolicyType, ImagePullJob, ImageTagPullPolicy, ReferenceObject,
};

/// The tag entry's pull policy, derived from the job as OpenKruise does: an
/// Always job's entries outlive the job's own TTL (or deadline, or all its
/// attempts) by a grace period; a Never job's entries live a day, then the
/// job adds them again so nodes re-pull daily.
pub fn entry_pull_policy(job: &ImagePullJob) -> ImageTagPullPolicy {
    let t = &job.spec.template;
    let timeout = t
        .pull_policy
        .as_ref()
        .and_then(|p| p.timeout_seconds)
        .unwrap_or(defaults::PULL_TIMEOUT_SECONDS);
    let backoff = t
        .pull_policy
        .as_ref()
        .and_then(|p| p.backoff_limit)
        .unwrap_or(defaults::PULL_BACKOFF_LIMIT);
    let cp = t.completion_policy.clone().unwrap_or_default();
    match cp.type_.unwrap_or_default() {
        CompletionPolicyType::Always => {
            let base = cp
                .ttl_seconds_after_finished
                .map(i64::from)
                .or(cp.active_deadline_seconds)
                .unwrap_or(i64::from(timeout).saturating_mul(i64::from(backoff).saturating_add(1)));
            ImageTagPullPolicy {
                timeout_seconds: Some(timeout),
                backoff_limit: Some(backoff),
                ttl_seconds_after_finished: Some(
                    i32::try_from(base.saturating_add(rollout::ENTRY_TTL_GRACE_SECONDS))
                        .unwrap_or(i32::MAX),
                ),
                active_deadline_seconds: cp.active_deadline_seconds,
            }
        }
        CompletionPolicyType::Never => ImageTagPullPolicy {
            timeout_seconds: Some(timeout),
            backoff_limit: Some(backoff),
            ttl_seconds_after_finished: Some(NEVER_ENTRY_TTL_SECONDS),
            active_deadline_seconds: Some(NEVER_MIN_DEADLINE_SECONDS.max(i64::from(timeout))),
        },
    }
}

/// The job as an owner of tag entries.
pub fn owner_ref(job: &ImagePullJob) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps.kruise.io/v1alpha1".into()),
        kind: Some("ImagePullJob".into()),
        namespace: job.namespace(),
        name: Some(job.name_any()),
        uid: job.uid(),
        ..Default::default()
    }
}

/// The entry every node of the job gets; a job following its tag pulls
/// with `Always`, and again when the tag moved.
pub fn request(
    job: &ImagePullJob,
    entry: &Entry,
    secrets: &[ReferenceObject],
    follow: super::Follow,
) -> EntryRequest {
    let policy = job
        .spec
        .template
        .image_pull_policy
        .map(|p| format!("{p:?}"));
    EntryRequest {
        image: entry.image.clone(),
        tag: entry.tag.clone(),
        owner: owner_ref(job),
        pull_policy: entry_pull_policy(job),
        image_pull_policy: if follow.on {
            Some("Always".into())
        } else {
            policy
        },
        secrets: secrets.to_vec(),
        sandbox: job.spec.template.sandbox_config.clone(),
        check_items: None,
        pull_again_before: follow.pull_again_before,
        p2p: None,
    }
}
