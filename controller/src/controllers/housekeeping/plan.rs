//! The pure core of NodeImage housekeeping: given one NodeImage, what its
//! owners' stores say and the time now, decide what its spec and status
//! should become and when to look again.
//!
//! Rules, per tag of each image in spec:
//! - a tag without `createdAt` gets `createdAt = now`;
//! - owner references to jobs that are gone (or were recreated with another
//!   UID) are dropped, and a tag whose last owner is gone is removed; owners
//!   whose store has not synced yet are kept; a tag with no owners at all
//!   (written by hand) stays until its TTL;
//! - a finished tag (status with the same tag and version, phase Succeeded
//!   or Failed, and a `completionTime`) is removed from spec and status once
//!   `ttlSecondsAfterFinished` has passed since that completion;
//! - an unfinished tag is marked Failed when the node has not reported on
//!   its version within the response timeout of `createdAt`, or when it has
//!   not finished within `createdAt + activeDeadlineSeconds` plus a grace;
//! - an image left without tags is removed;
//! - a removal entry an ImageRemovalJob wrote (`writtenBy`) is dropped once
//!   that job (name and uid) is gone, also when its finalizer was taken off
//!   by hand; entries written by hand stay, as do all while the job cache
//!   has not synced (or cannot be listed);
//! - status entries of tags no longer in spec are the daemon's to drop (it
//!   rewrites its status when the spec changes); housekeeping drops them,
//!   and recomputes the counts, only when they are still there the response
//!   timeout after it first saw them, for a node whose daemon does not
//!   answer. (Dropping them at once raced every live daemon's own write.)

mod tag;

use crate::runtime::clock::{after, api_time};
use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use nodeimage_api::interned::SharedStr;
use nodeimage_api::kruise::nodeimage::salvage;
use nodeimage_api::kruise::{
    ImagePullPhase, ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImage, NodeImageSpec,
    NodeImageStatus,
};
use nodeimage_api::nodeimage_dev::{RemovalEntry, RemovalWriter};
use std::collections::BTreeMap;
use std::time::Duration;

/// Longest wait before a NodeImage is looked at again, so a missed event
/// costs at most this much delay.
pub const MAX_REQUEUE: TimeDelta = TimeDelta::hours(1);

/// Shortest requeue, so a due time that has just passed does not spin.
pub const MIN_REQUEUE: TimeDelta = TimeDelta::seconds(1);

/// Slack after `createdAt + activeDeadlineSeconds` before the controller
/// fails a tag, so the daemon's own deadline handling reports first.
pub const DEADLINE_GRACE: TimeDelta = TimeDelta::seconds(5);

/// What the owner stores say about one owner reference.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerState {
    /// The owner exists with the referenced UID.
    Exists,
    /// The owner is missing, or exists with another UID.
    Gone,
    /// Not known: a kind without a store, or a store not synced yet.
    Unknown,
}

/// Answers "does this owner still exist with this UID" from a snapshot.
pub trait OwnerLookup {
    /// The state of the object `owner` refers to.
    fn state(&self, owner: &ObjectReference) -> OwnerState;
}

/// Everything besides the NodeImage that the plan depends on.
pub struct Inputs<'a, O> {
    /// The time the plan is made for.
    pub now: DateTime<Utc>,
    /// How long a node may take to report on a tag's version.
    pub response_timeout: TimeDelta,
    /// The owner stores.
    pub owners: &'a O,
    /// When housekeeping first saw this NodeImage's status hold entries of
    /// tags its spec no longer has (None: not seen so far).
    pub orphans_since: Option<DateTime<Utc>>,
}

/// Why a tag leaves the spec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoveReason {
    /// `ttlSecondsAfterFinished` passed since the pull finished.
    TtlExpired,
    /// Every job that asked for the tag is gone.
    OwnersGone,
}

impl RemoveReason {
    /// Short text for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            RemoveReason::TtlExpired => "ttlSecondsAfterFinished passed",
            RemoveReason::OwnersGone => "last owner gone",
        }
    }
}

/// One change the plan makes, for one log line each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `createdAt` was missing and is set to now.
    CreatedAtSet {
        /// Image name.
        image: String,
        /// Tag.
        tag: String,
    },
    /// An owner reference to a gone job is dropped.
    OwnerDropped {
        /// Image name.
        image: String,
        /// Tag.
        tag: String,
        /// `Kind namespace/name (uid)` of the owner.
        owner: String,
    },
    /// A tag leaves spec and status.
    TagRemoved {
        /// Image name.
        image: String,
        /// Tag.
        tag: String,
        /// Why.
        reason: RemoveReason,
    },
    /// An image without tags leaves spec and status.
    ImageRemoved {
        /// Image name.
        image: String,
    },
    /// A removal entry whose ImageRemovalJob is gone leaves the spec.
    RemovalDropped {
        /// The job's name.
        job: String,
    },
}

/// A tag the plan marks Failed; each gets a Warning event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Image name.
    pub image: String,
    /// Tag.
    pub tag: String,
    /// The spec version that failed.
    pub version: i64,
    /// The message written to status.
    pub message: String,
    /// Whether the node never answered (rather than exceeding the deadline).
    pub no_response: bool,
}

/// What housekeeping should write for one NodeImage.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The new `spec.images`, when it differs from the current one.
    pub images: Option<BTreeMap<SharedStr, ImageSpec>>,
    /// The new `spec.removals`, when an entry goes.
    pub removals: Option<Vec<RemovalEntry>>,
    /// The new status, when it differs from the current one.
    pub status: Option<NodeImageStatus>,
    /// What changed, for logs.
    pub changes: Vec<Change>,
    /// Tags marked Failed, for events.
    pub failures: Vec<Failure>,
    /// When to look again: the earliest future due time, capped at [`MAX_REQUEUE`].
    pub requeue_after: Duration,
    /// Whether the status, as planned, still holds entries of tags the
    /// planned spec no longer has (the shell remembers since when).
    pub orphaned: bool,
}

impl Plan {
    /// Whether the plan writes anything.
    pub fn is_noop(&self) -> bool {
        self.images.is_none() && self.status.is_none() && self.removals.is_none()
    }
}

/// Plans the housekeeping of one NodeImage.
pub fn plan<O: OwnerLookup>(ni: &NodeImage, inputs: &Inputs<'_, O>) -> Plan {
    // Borrowed: this runs on every status write of every node.
    let none = BTreeMap::new();
    let old_images = ni.spec.images.as_ref().unwrap_or(&none);
    let no_statuses = BTreeMap::new();
    let old_statuses = ni
        .status
        .as_ref()
        .and_then(|s| s.image_statuses.as_ref())
        .unwrap_or(&no_statuses);
    let drop_orphans = inputs
        .orphans_since
        .is_some_and(|since| after(since, inputs.response_timeout) <= inputs.now);

    let mut out = Planned::default();
    // Images holding an entry that does not decode are left as stored,
    // spec and status (`salvage::keep_unreadable` guards the write too).
    let unreadable = salvage::unreadable_images(ni);
    for (name, image) in old_images {
        if unreadable.contains(name.as_str()) {
            out.images.insert(name.clone(), image.clone());
            if let Some(status) = old_statuses.get(name) {
                out.statuses.insert(name.clone(), status.clone());
            }
            continue;
        }
        let reported = old_statuses
            .get(name)
            .map(|s| s.tags.as_slice())
            .unwrap_or(&[]);
        out.image(name, image, reported, inputs, drop_orphans);
    }
    // Images with entries but no spec at all.
    if !drop_orphans {
        for (name, status) in old_statuses {
            if !old_images.contains_key(name) {
                out.statuses.insert(name.clone(), status.clone());
            }
        }
    }
    let orphaned = has_orphans(&out.statuses, &out.images);
    if orphaned {
        out.due.push(after(
            inputs.orphans_since.unwrap_or(inputs.now),
            inputs.response_timeout,
        ));
    }
    // Status belongs to the daemon: housekeeping writes it only when it
    // changed an entry (dropped orphans or failed one). Recounting merely because the
    // spec changed would race the daemon and publish counts for tags that
    // have no entry yet.
    let entries_changed = *old_statuses != out.statuses;
    let status = entries_changed.then(|| new_status(ni, out.statuses, &out.images));
    let removals = swept_removals(ni, inputs.owners, &mut out.changes);
    Plan {
        images: (out.images != *old_images).then_some(out.images),
        removals,
        status,
        changes: out.changes,
        failures: out.failures,
        requeue_after: requeue_after(inputs.now, &out.due),
        orphaned,
    }
}

/// The removal entries left once those whose ImageRemovalJob is gone are
/// dropped (each named in `changes`); None when none goes, or when the
/// list holds an entry nodeimage cannot read (left as stored).
fn swept_removals<O: OwnerLookup>(
    ni: &NodeImage,
    owners: &O,
    changes: &mut Vec<Change>,
) -> Option<Vec<RemovalEntry>> {
    let list = ni.spec.removals.as_deref()?;
    if salvage::removals_unreadable(ni) {
        return None;
    }
    let gone = |e: &RemovalEntry| {
        e.written_by == Some(RemovalWriter::ImageRemovalJob)
            && owners.state(&removal_owner(e)) == OwnerState::Gone
    };
    if !list.iter().any(gone) {
        return None;
    }
    let (dropped, kept): (Vec<&RemovalEntry>, Vec<&RemovalEntry>) =
        list.iter().partition(|e| gone(e));
    changes.extend(
        dropped
            .into_iter()
            .map(|e| Change::RemovalDropped { job: e.job.clone() }),
    );
    Some(kept.into_iter().cloned().collect())
}

/// The ImageRemovalJob that wrote `e`, as an owner reference.
fn removal_owner(e: &RemovalEntry) -> ObjectReference {
    ObjectReference {
        api_version: Some("nodeimage.dev/v1alpha1".into()),
        kind: Some("ImageRemovalJob".into()),
        name: Some(e.job.clone()),
        uid: Some(e.uid.clone()),
        ..Default::default()
    }
}

/// What the plan has decided so far, image by image.
#[derive(Default)]
struct Planned {
    /// The new `spec.images`.
    images: BTreeMap<SharedStr, ImageSpec>,
    /// The new status entries, by image.
    statuses: BTreeMap<SharedStr, ImageStatus>,
    /// What changed, for logs.
    changes: Vec<Change>,
    /// Tags marked Failed.
    failures: Vec<Failure>,
    /// When tags next need attention.
    due: Vec<DateTime<Utc>>,
}

impl Planned {
    /// Plans one image of the spec: each of its tags, then its status
    /// entries; an image left without tags goes.
    fn image<O: OwnerLookup>(
        &mut self,
        name: &SharedStr,
        image: &ImageSpec,
        reported: &[ImageTagStatus],
        inputs: &Inputs<'_, O>,
        drop_orphans: bool,
    ) {
        let mut tags = Vec::new();
        let mut entries: Vec<ImageTagStatus> = Vec::new();
        for spec_tag in &image.tags {
            let outcome = tag::plan_tag(name, spec_tag, reported, inputs);
            self.changes.extend(outcome.changes);
            self.due.extend(outcome.due);
            let Some(spec) = outcome.spec else { continue };
            if let Some(failure) = outcome.failure {
                entries.push(failed_entry(&spec, reported, &failure.message, inputs.now));
                self.failures.push(failure);
            }
            tags.push(spec);
        }
        if tags.is_empty() {
            self.changes.push(Change::ImageRemoved {
                image: name.to_string(),
            });
            if !drop_orphans && !reported.is_empty() {
                let tags = reported.to_vec();
                self.statuses.insert(name.clone(), ImageStatus { tags });
            }
            return;
        }
        let kept = kept_entries(reported, &tags, entries, drop_orphans);
        if !kept.is_empty() {
            self.statuses
                .insert(name.clone(), ImageStatus { tags: kept });
        }
        let spec = ImageSpec {
            tags,
            ..image.clone()
        };
        self.images.insert(name.clone(), spec);
    }
}

/// The node's entries for tags still in spec (and, until they are due,
/// those of tags no longer in it), in their order, with the `failed`
/// entries in place of the old ones (or after them).
fn kept_entries(
    reported: &[ImageTagStatus],
    tags: &[ImageTagSpec],
    mut failed: Vec<ImageTagStatus>,
    drop_orphans: bool,
) -> Vec<ImageTagStatus> {
    let mut kept: Vec<ImageTagStatus> = reported
        .iter()
        .filter(|s| !drop_orphans || tags.iter().any(|t| s.reports_on(&t.tag, t.purpose)))
        .map(
            |s| match failed.iter().position(|e| e.reports_on(&s.tag, s.purpose)) {
                Some(i) => failed.remove(i),
                None => s.clone(),
            },
        )
        .collect();
    kept.extend(failed);
    kept
}

/// Whether status entries are left of tags the planned spec does not have.
fn has_orphans(
    statuses: &BTreeMap<SharedStr, ImageStatus>,
    images: &BTreeMap<SharedStr, ImageSpec>,
) -> bool {
    statuses.iter().any(|(name, status)| {
        status.tags.iter().any(|s| {
            images
                .get(name)
                .is_none_or(|i: &ImageSpec| i.entry(&s.tag, s.purpose).is_none())
        })
    })
}

/// The NodeImage's status with `statuses` as its entries, recounted
/// against the planned spec.
fn new_status(
    ni: &NodeImage,
    statuses: BTreeMap<SharedStr, ImageStatus>,
    images: &BTreeMap<SharedStr, ImageSpec>,
) -> NodeImageStatus {
    let mut status = ni.status.clone().unwrap_or_default();
    status.image_statuses = if statuses.is_empty() && status.image_statuses.is_none() {
        None
    } else {
        Some(statuses)
    };
    status.recount(&NodeImageSpec {
        images: Some(images.clone()),
        removals: None,
    });
    status
}

/// The status entry that marks `tag` Failed now, keeping what the node
/// already reported for this version (start time, progress).
fn failed_entry(
    tag: &ImageTagSpec,
    reported: &[ImageTagStatus],
    message: &str,
    now: DateTime<Utc>,
) -> ImageTagStatus {
    let version = tag.version.unwrap_or(0);
    let base = reported
        .iter()
        .find(|s| s.answers(tag))
        .cloned()
        .unwrap_or_default();
    ImageTagStatus {
        tag: tag.tag.clone(),
        purpose: tag.purpose,
        phase: ImagePullPhase::Failed,
        version: Some(version),
        completion_time: Some(api_time(now)),
        message: Some(message.into()),
        ..base
    }
}

/// Time until the earliest due time, clamped to [`MIN_REQUEUE`, `MAX_REQUEUE`].
fn requeue_after(now: DateTime<Utc>, due: &[DateTime<Utc>]) -> Duration {
    let wait = due
        .iter()
        .map(|at| *at - now)
        .min()
        .unwrap_or(MAX_REQUEUE)
        .clamp(MIN_REQUEUE, MAX_REQUEUE);
    wait.to_std().unwrap_or(Duration::from_secs(1))
}

#[cfg(test)]
mod tests;
