//! How a job writes its tag entries into a NodeImage spec and takes them
//! back: owner references, versions, pull policy, secrets. Pure edits of the
//! `spec.images` map; the caller patches the result.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use nodeimage_api::kruise::{
    ImageSpec, ImageTagPullPolicy, ImageTagSpec, ReferenceObject, SandboxConfig,
};
use std::collections::BTreeMap;

use crate::clock::api_time;

/// What a job wants in one tag entry.
#[derive(Clone, Debug, PartialEq)]
pub struct EntryRequest {
    /// Key in `spec.images`.
    pub image: String,
    /// Tag or digest.
    pub tag: String,
    /// The job, as an owner.
    pub owner: ObjectReference,
    /// Timeouts, retries, TTL and deadline of the pull.
    pub pull_policy: ImageTagPullPolicy,
    /// IfNotPresent or Always.
    pub image_pull_policy: Option<String>,
    /// Secrets the node may use, in the daemons' namespace.
    pub secrets: Vec<ReferenceObject>,
    /// Pod-like metadata for the CRI pull.
    pub sandbox: Option<SandboxConfig>,
    /// Node checks before pulling.
    pub check_items: Option<Vec<String>>,
}

/// Writes `req` into `images`; returns whether anything changed.
///
/// - A new tag gets the job as owner, `createdAt` now, and version one above
///   what status last reported for it (`reported_version`), else 0.
/// - A tag that exists without this owner (another job's, or written by hand)
///   keeps its owners, gains this one, and its version is bumped so the node
///   pulls again for this job.
/// - A tag this job already owns follows the job's current pull policy
///   (OpenKruise does not: its issue #2221), without a re-pull.
pub fn upsert(
    images: &mut BTreeMap<String, ImageSpec>,
    req: &EntryRequest,
    reported_version: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    let before = images.get(&req.image).cloned();
    let image = images.entry(req.image.clone()).or_default();
    let uid = req.owner.uid.as_deref();
    match image.tags.iter_mut().find(|t| t.tag == req.tag) {
        None => image.tags.push(ImageTagSpec {
            tag: req.tag.clone(),
            created_at: Some(api_time(now)),
            pull_policy: Some(req.pull_policy.clone()),
            owner_references: Some(vec![req.owner.clone()]),
            version: Some(reported_version.map(|v| v + 1).unwrap_or(0)),
            image_pull_policy: req.image_pull_policy.clone(),
            check_items: req.check_items.clone(),
            ..Default::default()
        }),
        Some(tag) => {
            let owners = tag.owner_references.get_or_insert_with(Vec::new);
            if !owners.iter().any(|o| o.uid.as_deref() == uid) {
                owners.push(req.owner.clone());
                tag.version = Some(tag.version.unwrap_or(0) + 1);
                tag.created_at = Some(api_time(now));
            }
            tag.pull_policy = Some(req.pull_policy.clone());
            tag.image_pull_policy = req.image_pull_policy.clone();
            tag.check_items = req.check_items.clone();
        }
    }
    let secrets = image.pull_secrets.get_or_insert_with(Vec::new);
    for s in &req.secrets {
        if !secrets
            .iter()
            .any(|x| x.namespace == s.namespace && x.name == s.name)
        {
            secrets.push(s.clone());
        }
    }
    if secrets.is_empty() {
        image.pull_secrets = None;
    }
    if req.sandbox.is_some() {
        image.sandbox_config = req.sandbox.clone();
    }
    before.as_ref() != images.get(&req.image)
}

/// Removes the owner `uid` from every tag; tags left without owners (that had
/// one) are removed, and images left without tags. Returns whether anything changed.
pub fn release(images: &mut BTreeMap<String, ImageSpec>, uid: &str) -> bool {
    let before = images.clone();
    for image in images.values_mut() {
        image.tags.retain_mut(|t| {
            let Some(owners) = t.owner_references.as_mut() else {
                return true;
            };
            let had = owners.len();
            owners.retain(|o| o.uid.as_deref() != Some(uid));
            !(had > 0 && owners.is_empty())
        });
    }
    images.retain(|_, i| !i.tags.is_empty());
    *images != before
}

/// Whether any tag in `images` is owned by `uid`.
pub fn owns_any(images: &BTreeMap<String, ImageSpec>, uid: &str) -> bool {
    images.values().flat_map(|i| &i.tags).any(|t| {
        t.owner_references
            .iter()
            .flatten()
            .any(|o| o.uid.as_deref() == Some(uid))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps.kruise.io/v1alpha1".into()),
            kind: Some("ImagePullJob".into()),
            namespace: Some("ns".into()),
            name: Some(format!("job-{uid}")),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    fn req(uid: &str, timeout: i32) -> EntryRequest {
        EntryRequest {
            image: "nginx".into(),
            tag: "1.25".into(),
            owner: owner(uid),
            pull_policy: ImageTagPullPolicy {
                timeout_seconds: Some(timeout),
                backoff_limit: Some(3),
                ttl_seconds_after_finished: Some(600),
                active_deadline_seconds: None,
            },
            image_pull_policy: Some("IfNotPresent".into()),
            secrets: vec![ReferenceObject {
                namespace: Some("nodeimage-secrets".into()),
                name: Some(format!("s-{uid}")),
                mode: None,
            }],
            sandbox: None,
            check_items: None,
        }
    }

    fn now(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    #[test]
    fn new_tag_then_second_owner_bumps_version() {
        let mut images = BTreeMap::new();
        assert!(upsert(&mut images, &req("a", 600), None, now(10)));
        let tag = &images["nginx"].tags[0];
        assert_eq!(tag.version, Some(0));
        assert_eq!(tag.owner_references.as_ref().map(Vec::len), Some(1));

        // Same job again: nothing changes.
        assert!(!upsert(&mut images, &req("a", 600), None, now(20)));

        // Another job: both owners, version bumped, createdAt reset, secrets merged.
        assert!(upsert(&mut images, &req("b", 600), None, now(30)));
        let tag = &images["nginx"].tags[0];
        assert_eq!(tag.version, Some(1));
        assert_eq!(tag.owner_references.as_ref().map(Vec::len), Some(2));
        assert_eq!(tag.created_at, Some(api_time(now(30))));
        assert_eq!(images["nginx"].pull_secrets.as_ref().map(Vec::len), Some(2));
    }

    #[test]
    fn new_tag_continues_from_reported_version() {
        let mut images = BTreeMap::new();
        upsert(&mut images, &req("a", 600), Some(4), now(1));
        assert_eq!(images["nginx"].tags[0].version, Some(5));
    }

    #[test]
    fn owned_tag_follows_policy_edits_without_repull() {
        let mut images = BTreeMap::new();
        upsert(&mut images, &req("a", 600), None, now(1));
        assert!(upsert(&mut images, &req("a", 120), None, now(2)));
        let tag = &images["nginx"].tags[0];
        assert_eq!(
            tag.pull_policy.as_ref().and_then(|p| p.timeout_seconds),
            Some(120)
        );
        assert_eq!(tag.version, Some(0));
    }

    #[test]
    fn hand_written_tag_gains_owner_and_is_pulled_again() {
        let mut images = BTreeMap::from([(
            "nginx".to_string(),
            ImageSpec {
                tags: vec![ImageTagSpec {
                    tag: "1.25".into(),
                    version: Some(2),
                    ..Default::default()
                }],
                ..Default::default()
            },
        )]);
        assert!(upsert(&mut images, &req("a", 600), None, now(1)));
        assert_eq!(images["nginx"].tags[0].version, Some(3));
    }

    #[test]
    fn release_drops_owner_then_tag_then_image() {
        let mut images = BTreeMap::new();
        upsert(&mut images, &req("a", 600), None, now(1));
        upsert(&mut images, &req("b", 600), None, now(2));
        images
            .entry("manual".into())
            .or_default()
            .tags
            .push(ImageTagSpec {
                tag: "v1".into(),
                ..Default::default()
            });
        assert!(owns_any(&images, "a"));
        assert!(release(&mut images, "a"));
        assert!(!owns_any(&images, "a"));
        assert_eq!(images["nginx"].tags.len(), 1, "b still owns it");
        assert!(release(&mut images, "b"));
        assert!(!images.contains_key("nginx"), "no owner left: gone");
        assert!(
            images.contains_key("manual"),
            "hand-written tags are not ours to remove"
        );
        assert!(!release(&mut images, "b"));
    }
}
