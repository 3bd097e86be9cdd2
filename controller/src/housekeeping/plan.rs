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
//! - status entries of tags no longer in spec are the daemon's to drop (it
//!   rewrites its status when the spec changes); housekeeping drops them,
//!   and recomputes the counts, only when they are still there the response
//!   timeout after it first saw them, for a node whose daemon does not
//!   answer. (Dropping them at once raced every live daemon's own write.)

use crate::clock::{after, api_time, go_duration, instant, seconds};
use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use nodeimage_api::kruise::{
    ImagePullPhase, ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImage, NodeImageSpec,
    NodeImageStatus,
};
use nodeimage_api::shared::SharedStr;
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
        self.images.is_none() && self.status.is_none()
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

    let mut images = BTreeMap::new();
    let mut statuses = BTreeMap::new();
    let mut changes = Vec::new();
    let mut failures = Vec::new();
    let mut due = Vec::new();
    let drop_orphans = inputs
        .orphans_since
        .is_some_and(|since| after(since, inputs.response_timeout) <= inputs.now);

    for (name, image) in old_images {
        let reported = old_statuses
            .get(name)
            .map(|s| s.tags.as_slice())
            .unwrap_or(&[]);
        let mut tags = Vec::new();
        let mut entries: Vec<ImageTagStatus> = Vec::new();
        for tag in &image.tags {
            let outcome = plan_tag(name, tag, reported, inputs);
            changes.extend(outcome.changes);
            due.extend(outcome.due);
            let Some(spec) = outcome.spec else { continue };
            if let Some(failure) = outcome.failure {
                entries.push(failed_entry(&spec, reported, &failure.message, inputs.now));
                failures.push(failure);
            }
            tags.push(spec);
        }
        if tags.is_empty() {
            changes.push(Change::ImageRemoved {
                image: name.to_string(),
            });
            if !drop_orphans && !reported.is_empty() {
                statuses.insert(
                    name.clone(),
                    ImageStatus {
                        tags: reported.to_vec(),
                    },
                );
            }
            continue;
        }
        // Keep the node's entries for tags still in spec (and, until they
        // are due, those of tags no longer in it), in their order, with the
        // entries this plan failed in place of the old ones.
        let mut kept: Vec<ImageTagStatus> = reported
            .iter()
            .filter(|s| !drop_orphans || tags.iter().any(|t| t.tag == s.tag))
            .map(|s| match entries.iter().position(|e| e.tag == s.tag) {
                Some(i) => entries.remove(i),
                None => s.clone(),
            })
            .collect();
        kept.extend(entries);
        if !kept.is_empty() {
            statuses.insert(name.clone(), ImageStatus { tags: kept });
        }
        images.insert(
            name.clone(),
            ImageSpec {
                tags,
                ..image.clone()
            },
        );
    }

    // Images with entries but no spec at all.
    if !drop_orphans {
        for (name, status) in old_statuses {
            if !old_images.contains_key(name) {
                statuses.insert(name.clone(), status.clone());
            }
        }
    }
    let orphaned = statuses.iter().any(|(name, status)| {
        status.tags.iter().any(|s| {
            !images
                .get(name)
                .is_some_and(|i: &ImageSpec| i.tags.iter().any(|t| t.tag == s.tag))
        })
    });
    if orphaned {
        due.push(after(
            inputs.orphans_since.unwrap_or(inputs.now),
            inputs.response_timeout,
        ));
    }

    // Status belongs to the daemon: housekeeping writes it only when it
    // changed an entry (dropped orphans or failed one). Recounting merely because the
    // spec changed would race the daemon and publish counts for tags that
    // have no entry yet.
    let entries_changed = *old_statuses != statuses;
    let status = entries_changed.then(|| {
        let mut status = ni.status.clone().unwrap_or_default();
        status.image_statuses = if statuses.is_empty() && status.image_statuses.is_none() {
            None
        } else {
            Some(statuses)
        };
        status.recount(&NodeImageSpec {
            images: Some(images.clone()),
        });
        status
    });

    Plan {
        images: (images != *old_images).then_some(images),
        status,
        changes,
        failures,
        requeue_after: requeue_after(inputs.now, &due),
        orphaned,
    }
}

/// What the plan decides for one tag.
struct TagOutcome {
    /// The tag as it should be in spec; `None` removes it.
    spec: Option<ImageTagSpec>,
    /// Set when the tag is to be marked Failed.
    failure: Option<Failure>,
    /// When this tag next needs attention.
    due: Option<DateTime<Utc>>,
    changes: Vec<Change>,
}

fn plan_tag<O: OwnerLookup>(
    image: &str,
    tag: &ImageTagSpec,
    reported: &[ImageTagStatus],
    inputs: &Inputs<'_, O>,
) -> TagOutcome {
    let now = inputs.now;
    let mut spec = tag.clone();
    let mut changes = Vec::new();
    let removed = |reason, mut changes: Vec<Change>| {
        changes.push(Change::TagRemoved {
            image: image.to_string(),
            tag: tag.tag.to_string(),
            reason,
        });
        TagOutcome {
            spec: None,
            failure: None,
            due: None,
            changes,
        }
    };

    if spec.created_at.is_none() {
        spec.created_at = Some(api_time(now));
        changes.push(Change::CreatedAtSet {
            image: image.to_string(),
            tag: tag.tag.to_string(),
        });
    }
    let created = spec.created_at.as_ref().map(instant).unwrap_or(now);

    if let Some(owners) = tag.owner_references.as_ref().filter(|o| !o.is_empty()) {
        let (kept, gone): (Vec<_>, Vec<_>) = owners
            .iter()
            .cloned()
            .partition(|o| inputs.owners.state(o) != OwnerState::Gone);
        changes.extend(gone.iter().map(|o| Change::OwnerDropped {
            image: image.to_string(),
            tag: tag.tag.to_string(),
            owner: describe_owner(o),
        }));
        if kept.is_empty() {
            return removed(RemoveReason::OwnersGone, changes);
        }
        if !gone.is_empty() {
            spec.owner_references = Some(kept.into());
        }
    }

    let version = tag.version.unwrap_or(0);
    let policy = tag.pull_policy.clone().unwrap_or_default();
    let report = reported
        .iter()
        .find(|s| s.tag == tag.tag && s.version.unwrap_or(0) == version);
    let ttl = policy
        .ttl_seconds_after_finished
        .map(|s| seconds(i64::from(s.max(0))));

    if let Some(report) = report.filter(|r| r.phase.is_finished()) {
        let expiry = match (&report.completion_time, ttl) {
            (Some(done), Some(ttl)) => after(instant(done), ttl),
            _ => {
                return TagOutcome {
                    spec: Some(spec),
                    failure: None,
                    due: None,
                    changes,
                };
            }
        };
        if now >= expiry {
            return removed(RemoveReason::TtlExpired, changes);
        }
        return TagOutcome {
            spec: Some(spec),
            failure: None,
            due: Some(expiry),
            changes,
        };
    }

    // Unfinished: the earliest deadline that has passed fails the tag.
    let mut deadlines: Vec<(DateTime<Utc>, String, bool)> = Vec::new();
    if report.is_none() {
        deadlines.push((
            after(created, inputs.response_timeout),
            format!(
                "node did not respond within {} (no status for version {version})",
                go_duration(inputs.response_timeout)
            ),
            true,
        ));
    }
    if let Some(ads) = policy.active_deadline_seconds {
        deadlines.push((
            after(after(created, seconds(ads.max(0))), DEADLINE_GRACE),
            format!("pull did not finish within activeDeadlineSeconds ({ads}s) of createdAt"),
            false,
        ));
    }
    deadlines.sort_by_key(|(at, _, _)| *at);
    match deadlines.iter().find(|(at, _, _)| now >= *at) {
        Some((_, message, no_response)) => TagOutcome {
            due: ttl.map(|ttl| after(now, ttl)),
            failure: Some(Failure {
                image: image.to_string(),
                tag: tag.tag.to_string(),
                version,
                message: message.clone(),
                no_response: *no_response,
            }),
            spec: Some(spec),
            changes,
        },
        None => TagOutcome {
            due: deadlines.first().map(|(at, _, _)| *at),
            failure: None,
            spec: Some(spec),
            changes,
        },
    }
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
        .find(|s| s.tag == tag.tag && s.version.unwrap_or(0) == version)
        .cloned()
        .unwrap_or_default();
    ImageTagStatus {
        tag: tag.tag.clone(),
        phase: ImagePullPhase::Failed,
        version: Some(version),
        completion_time: Some(api_time(now)),
        message: Some(message.into()),
        ..base
    }
}

/// `Kind namespace/name (uid)` for logs.
fn describe_owner(o: &ObjectReference) -> String {
    let kind = o.kind.as_deref().unwrap_or("?");
    let name = o.name.as_deref().unwrap_or("?");
    let uid = o.uid.as_deref().unwrap_or("?");
    match o.namespace.as_deref() {
        Some(ns) => format!("{kind} {ns}/{name} ({uid})"),
        None => format!("{kind} {name} ({uid})"),
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
