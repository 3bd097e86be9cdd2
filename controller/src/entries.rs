//! How a job writes its tag entries into a NodeImage spec and takes them
//! back: owner references, versions, pull policy, secrets. Pure edits of the
//! `spec.images` map; the caller patches the result.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use nodeimage_api::kruise::{
    ImageSpec, ImageTagPullPolicy, ImageTagSpec, NodeImage, ReferenceObject, SandboxConfig,
    TagUpgrade,
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

/// The version the node last reported for `image:tag`, if any.
pub fn reported_version(ni: &NodeImage, image: &str, tag: &str) -> Option<i64> {
    ni.status
        .as_ref()
        .and_then(|s| s.image_statuses.as_ref())
        .and_then(|m| m.get(image))
        .and_then(|s| s.tags.iter().find(|t| t.tag == tag))
        .and_then(|t| t.version)
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
/// - A tag that carries an `upgrade` (a NodeUpgradeJob's) gains the owner
///   without a version bump: a bump would run the upgrade again; the node's
///   result of the upgrade answers this job too.
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
            version: Some(
                reported_version
                    .map(|v| v.saturating_add(1).min(nodeimage_api::limits::VERSION_MAX))
                    .unwrap_or(0),
            ),
            image_pull_policy: req.image_pull_policy.clone(),
            check_items: req.check_items.clone(),
            ..Default::default()
        }),
        Some(tag) => {
            let owners = tag.owner_references.get_or_insert_with(Vec::new);
            if !owners.iter().any(|o| o.uid.as_deref() == uid) {
                owners.push(req.owner.clone());
                if tag.upgrade.is_none() {
                    tag.version = Some(
                        tag.version
                            .unwrap_or(0)
                            .saturating_add(1)
                            .min(nodeimage_api::limits::VERSION_MAX),
                    );
                    tag.created_at = Some(api_time(now));
                }
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

/// Writes a NodeUpgradeJob's entry: `req` as [`upsert`] writes it, carrying
/// `upgrade`. A tag that did not carry this upgrade yet gets a new version
/// (unless it is new, or `upsert` just bumped it) so that the node runs it.
pub fn upsert_upgrade(
    images: &mut BTreeMap<String, ImageSpec>,
    req: &EntryRequest,
    upgrade: &TagUpgrade,
    reported_version: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    let find = |images: &BTreeMap<String, ImageSpec>| {
        images
            .get(&req.image)
            .and_then(|i| i.tags.iter().find(|t| t.tag == req.tag))
            .map(|t| t.version)
    };
    let prior = find(images);
    let mut changed = upsert(images, req, reported_version, now);
    let Some(tag) = images
        .get_mut(&req.image)
        .and_then(|i| i.tags.iter_mut().find(|t| t.tag == req.tag))
    else {
        return changed;
    };
    if tag.upgrade.as_ref() != Some(upgrade) {
        if prior.is_some_and(|v| v == tag.version) {
            tag.version = Some(
                tag.version
                    .unwrap_or(0)
                    .saturating_add(1)
                    .min(nodeimage_api::limits::VERSION_MAX),
            );
            tag.created_at = Some(api_time(now));
        }
        tag.upgrade = Some(upgrade.clone());
        changed = true;
    }
    changed
}

/// Removes the owner `uid` from every tag; tags left without owners (that had
/// one) are removed, and images left without tags. A tag kept for other
/// owners loses the `upgrade` of the NodeUpgradeJob that leaves, so that no
/// later pull of it runs the upgrade again. Returns whether anything changed.
pub fn release(images: &mut BTreeMap<String, ImageSpec>, uid: &str) -> bool {
    let before = images.clone();
    for image in images.values_mut() {
        image.tags.retain_mut(|t| {
            let Some(owners) = t.owner_references.as_mut() else {
                return true;
            };
            let had = owners.len();
            let upgrade_job = t.upgrade.as_ref().map(|u| u.job.as_str());
            let leaving_upgrader = owners.iter().any(|o| {
                o.uid.as_deref() == Some(uid)
                    && o.kind.as_deref() == Some("NodeUpgradeJob")
                    && o.name.as_deref() == upgrade_job
            });
            owners.retain(|o| o.uid.as_deref() != Some(uid));
            if leaving_upgrader {
                t.upgrade = None;
            }
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

    fn upgrader(uid: &str, job: &str) -> (EntryRequest, TagUpgrade) {
        let mut r = req(uid, 300);
        r.owner.kind = Some("NodeUpgradeJob".into());
        r.owner.name = Some(job.into());
        r.image = "kubeedge/installation-package".into();
        r.tag = "v1.17.0".into();
        (
            r,
            TagUpgrade {
                version: "v1.17.0".into(),
                job: job.into(),
            },
        )
    }

    fn pull_of(uid: &str, image: &str, tag: &str) -> EntryRequest {
        let mut r = req(uid, 600);
        r.image = image.into();
        r.tag = tag.into();
        r
    }

    fn tag_of<'a>(images: &'a BTreeMap<String, ImageSpec>, image: &str) -> &'a ImageTagSpec {
        &images[image].tags[0]
    }

    #[test]
    fn upgrade_entries_run_once_per_upgrade() {
        let img = "kubeedge/installation-package";
        // New tag: version from status, carrying the upgrade.
        let mut images = BTreeMap::new();
        let (u, up) = upgrader("u1", "up");
        assert!(upsert_upgrade(&mut images, &u, &up, Some(2), now(1)));
        assert_eq!(tag_of(&images, img).version, Some(3));
        assert_eq!(tag_of(&images, img).upgrade.as_ref(), Some(&up));
        // Again: nothing changes.
        assert!(!upsert_upgrade(&mut images, &u, &up, Some(2), now(2)));

        // A pull job joining the upgrade's tag does not bump it (no re-run).
        assert!(upsert(
            &mut images,
            &pull_of("p1", img, "v1.17.0"),
            None,
            now(3)
        ));
        assert_eq!(tag_of(&images, img).version, Some(3));
        assert_eq!(
            tag_of(&images, img).owner_references.as_ref().map(Vec::len),
            Some(2)
        );
        assert_eq!(tag_of(&images, img).upgrade.as_ref(), Some(&up));

        // The upgrade job leaves: the tag stays for the pull job, without the upgrade.
        assert!(release(&mut images, "u1"));
        assert_eq!(tag_of(&images, img).upgrade, None);
        assert_eq!(tag_of(&images, img).version, Some(3));

        // An upgrade joining a plain tag bumps it once and marks it.
        let (u2, up2) = upgrader("u2", "up2");
        assert!(upsert_upgrade(&mut images, &u2, &up2, None, now(4)));
        assert_eq!(tag_of(&images, img).version, Some(4));
        assert_eq!(tag_of(&images, img).created_at, Some(api_time(now(4))));
        assert_eq!(tag_of(&images, img).upgrade.as_ref(), Some(&up2));
        assert!(!upsert_upgrade(&mut images, &u2, &up2, None, now(5)));

        // Another owner's release keeps the upgrade.
        assert!(release(&mut images, "p1"));
        assert_eq!(tag_of(&images, img).upgrade.as_ref(), Some(&up2));
        // The last owner leaves: gone.
        assert!(release(&mut images, "u2"));
        assert!(images.is_empty());
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
