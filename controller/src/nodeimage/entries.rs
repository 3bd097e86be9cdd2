//! How a job writes its tag entries into a NodeImage spec and takes them
//! back: owner references, versions, pull policy, secrets. Pure edits of the
//! `spec.images` map; the caller patches the result.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use nodeimage_api::interned::{Owners, SharedStr};
use nodeimage_api::kruise::{
    ImageSpec, ImageTagPullPolicy, ImageTagSpec, NodeImage, Purpose, ReferenceObject,
    SandboxConfig, TagP2p, TagUpgrade,
};
use std::collections::BTreeMap;

use crate::runtime::clock::api_time;

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
    /// A tag entry created before this is pulled again (its tag moved
    /// then: a followed tag, `engine::followtag`).
    pub pull_again_before: Option<DateTime<Utc>>,
    /// How the P2P rules started this node, for the version it starts
    /// (`engine::p2p::notes`); none without P2P settings.
    pub p2p: Option<TagP2p>,
}

/// The version the node last reported for the entry `image:tag` of
/// `purpose`, if any (another purpose's entry of the tag counts its own
/// versions).
pub fn reported_version(ni: &NodeImage, image: &str, tag: &str, purpose: Purpose) -> Option<i64> {
    ni.status
        .as_ref()
        .and_then(|s| s.image_statuses.as_ref())
        .and_then(|m| m.get(image))
        .and_then(|s| s.reported(tag, purpose))
        .and_then(|t| t.version)
}

/// The version after `v`, within the schema's bound.
fn next_version(v: i64) -> i64 {
    v.saturating_add(1).min(nodeimage_api::limits::VERSION_MAX)
}

/// Makes the node pull `tag` again: a new version, counted from now.
fn pull_again(tag: &mut ImageTagSpec, now: DateTime<Utc>) {
    tag.version = Some(next_version(tag.version.unwrap_or(0)));
    tag.created_at = Some(api_time(now));
}

/// Writes `req` into `images` as a pull entry ([`Purpose::Pull`]); returns
/// whether anything changed.
///
/// - A new tag gets the job as owner, `createdAt` now, and version one above
///   what status last reported for it (`reported_version`), else 0.
/// - A tag that exists without this owner (another job's, or written by hand)
///   keeps its owners, gains this one, and its version is bumped so the node
///   pulls again for this job.
/// - A tag this job already owns follows the job's current pull policy
///   (OpenKruise does not: its issue #2221), without a re-pull; but when a
///   secret of the job is not on the image yet (its copy was just made, or
///   the entry was written by OpenKruise with kruise-daemon-config's copy)
///   the version is bumped, so a node that failed or is pulling without it
///   pulls again with it.
/// - A tag created before `req.pull_again_before` (the job follows its tag
///   and the tag moved since) gets a new version too: the same path, so
///   "pull again" has one home.
/// - A NodeUpgradeJob's entry of the same tag ([`Purpose::Upgrade`]) is
///   another entry: never touched here, so neither request reads or bumps
///   the other's outcome (the NodeImage contract, `purpose_of`).
pub fn upsert(
    images: &mut BTreeMap<SharedStr, ImageSpec>,
    req: &EntryRequest,
    reported_version: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    upsert_keyed(images, req, Purpose::Pull, reported_version, now)
}

/// [`upsert`] for the entry of `purpose`. An upgrade entry gains an owner
/// without a version bump: a bump would run the upgrade again
/// ([`upsert_upgrade`] decides when it runs).
fn upsert_keyed(
    images: &mut BTreeMap<SharedStr, ImageSpec>,
    req: &EntryRequest,
    purpose: Purpose,
    reported_version: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    let before = images.get(req.image.as_str()).cloned();
    let image = images.entry(SharedStr::new(&req.image)).or_default();
    let uid = req.owner.uid.as_deref();
    let has = |s: &ReferenceObject| {
        image
            .pull_secrets
            .iter()
            .flatten()
            .any(|x| x.namespace == s.namespace && x.name == s.name)
    };
    let secret_missing = req.secrets.iter().any(|s| !has(s));
    match image.entry_mut(&req.tag, purpose) {
        None => image.tags.push(ImageTagSpec {
            tag: SharedStr::new(&req.tag),
            purpose,
            created_at: Some(api_time(now)),
            pull_policy: Some(req.pull_policy.clone().into()),
            owner_references: Some(vec![req.owner.clone()].into()),
            version: Some(reported_version.map(next_version).unwrap_or(0)),
            image_pull_policy: req.image_pull_policy.as_deref().map(SharedStr::new),
            check_items: req.check_items.clone().map(Box::new),
            p2p: req.p2p.clone().map(Box::new),
            ..Default::default()
        }),
        Some(tag) => {
            let owners = tag.owner_references.get_or_insert_with(Owners::default);
            let new_owner = !owners.iter().any(|o| o.uid.as_deref() == uid);
            if new_owner {
                owners.push(req.owner.clone());
            }
            let moved = req.pull_again_before.is_some_and(|t| {
                tag.created_at
                    .as_ref()
                    .is_none_or(|c| crate::runtime::clock::instant(c) < t)
            });
            if (new_owner || secret_missing || moved) && purpose == Purpose::Pull {
                pull_again(tag, now);
                tag.p2p = req.p2p.clone().map(Box::new);
            }
            tag.pull_policy = Some(req.pull_policy.clone().into());
            tag.image_pull_policy = req.image_pull_policy.as_deref().map(SharedStr::new);
            tag.check_items = req.check_items.clone().map(Box::new);
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
        image.sandbox_config = req.sandbox.clone().map(Box::new);
    }
    before.as_ref() != images.get(req.image.as_str())
}

/// Writes a NodeUpgradeJob's entry: `req` as [`upsert`] writes it, but as
/// the tag's [`Purpose::Upgrade`] entry, carrying `upgrade`; a pull entry of
/// the same tag is left as it is. An entry that did not carry this upgrade
/// yet gets a new version (unless it is new) so that the node runs it; a
/// confirmation (only `awaitConfirmation` changes) keeps the version and
/// restarts the node's timeout.
pub fn upsert_upgrade(
    images: &mut BTreeMap<SharedStr, ImageSpec>,
    req: &EntryRequest,
    upgrade: &TagUpgrade,
    reported_version: Option<i64>,
    now: DateTime<Utc>,
) -> bool {
    let existed = images
        .get(req.image.as_str())
        .is_some_and(|i| i.entry(&req.tag, Purpose::Upgrade).is_some());
    let mut changed = upsert_keyed(images, req, Purpose::Upgrade, reported_version, now);
    let Some(tag) = images
        .get_mut(req.image.as_str())
        .and_then(|i| i.entry_mut(&req.tag, Purpose::Upgrade))
    else {
        return changed;
    };
    let same_run = tag.upgrade.as_ref().is_some_and(|u| u.same_run(upgrade));
    if !same_run {
        if existed {
            pull_again(tag, now);
        }
        tag.upgrade = Some(Box::new(upgrade.clone()));
        changed = true;
    } else if tag.upgrade.as_deref() != Some(upgrade) {
        // A confirmation: the same run goes on, with a fresh node timeout
        // for the steps after it (KubeEdge times a node from its last action).
        if tag.upgrade.as_ref().is_some_and(|u| u.await_confirmation) && !upgrade.await_confirmation
        {
            tag.created_at = Some(api_time(now));
        }
        tag.upgrade = Some(Box::new(upgrade.clone()));
        changed = true;
    }
    changed
}

/// Applies every request (a NodeUpgradeJob's with `upgrade`) to `images`,
/// each new version counted from what `current` reports; returns whether
/// anything changed.
pub fn apply_requests(
    current: &NodeImage,
    images: &mut BTreeMap<SharedStr, ImageSpec>,
    requests: &[EntryRequest],
    upgrade: Option<&TagUpgrade>,
    now: DateTime<Utc>,
) -> bool {
    requests.iter().fold(false, |changed, req| {
        let purpose = if upgrade.is_some() {
            Purpose::Upgrade
        } else {
            Purpose::Pull
        };
        let reported = reported_version(current, &req.image, &req.tag, purpose);
        let wrote = match upgrade {
            Some(u) => upsert_upgrade(images, req, u, reported, now),
            None => upsert(images, req, reported, now),
        };
        wrote | changed
    })
}

/// Whether [`apply_requests`] would change `current`'s spec. Works on
/// copies of the requested images only (each request touches its own image
/// alone): a job looks at every node it started on each reconcile, and a
/// copy of each whole spec made that the controller's main cost.
pub fn would_change(
    current: &NodeImage,
    requests: &[EntryRequest],
    upgrade: Option<&TagUpgrade>,
    now: DateTime<Utc>,
) -> bool {
    let all = current.spec.images.as_ref();
    let mut scratch: BTreeMap<SharedStr, ImageSpec> = requests
        .iter()
        .filter_map(|r| {
            Some((
                SharedStr::new(&r.image),
                all?.get(r.image.as_str())?.clone(),
            ))
        })
        .collect();
    apply_requests(current, &mut scratch, requests, upgrade, now)
}

/// Removes the owner `uid` from every tag; tags left without owners (that had
/// one) are removed, and images left without tags. An upgrade entry is owned
/// by NodeUpgradeJobs only, so a pull of its tag never inherits it. Returns
/// whether anything changed.
pub fn release(images: &mut BTreeMap<SharedStr, ImageSpec>, uid: &str) -> bool {
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
pub fn owns_any(images: &BTreeMap<SharedStr, ImageSpec>, uid: &str) -> bool {
    images.values().flat_map(|i| &i.tags).any(|t| {
        t.owner_references
            .iter()
            .flatten()
            .any(|o| o.uid.as_deref() == Some(uid))
    })
}

#[cfg(test)]
mod tests;
