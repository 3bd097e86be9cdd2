//! The housekeeping rules of one tag: its `createdAt`, its owners, its TTL
//! once finished, its deadlines while unfinished. Pure.

use super::{Change, DEADLINE_GRACE, Failure, Inputs, OwnerLookup, OwnerState, RemoveReason};
use crate::runtime::clock::{after, api_time, go_duration, instant, seconds};
use chrono::{DateTime, TimeDelta, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use nodeimage_api::kruise::nodeimage::contract::{NO_RESPONSE, NOT_FINISHED};
use nodeimage_api::kruise::{ImageTagPullPolicy, ImageTagSpec, ImageTagStatus};

/// What the plan decides for one tag.
pub struct TagOutcome {
    /// The tag as it should be in spec; `None` removes it.
    pub spec: Option<ImageTagSpec>,
    /// Set when the tag is to be marked Failed.
    pub failure: Option<Failure>,
    /// When this tag next needs attention.
    pub due: Option<DateTime<Utc>>,
    /// What changed, for logs.
    pub changes: Vec<Change>,
}

impl TagOutcome {
    /// The tag stays as `spec`, looked at again at `due`.
    fn kept(spec: ImageTagSpec, due: Option<DateTime<Utc>>, changes: Vec<Change>) -> Self {
        TagOutcome {
            spec: Some(spec),
            failure: None,
            due,
            changes,
        }
    }

    /// The tag leaves spec and status, for `reason`.
    fn removed(
        image: &str,
        tag: &ImageTagSpec,
        reason: RemoveReason,
        mut changes: Vec<Change>,
    ) -> Self {
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
    }
}

/// Plans one tag of `image`: stamp `createdAt`, drop gone owners (and the
/// tag with its last), then remove a finished tag past its TTL or fail an
/// unfinished one past a deadline.
pub fn plan_tag<O: OwnerLookup>(
    image: &str,
    tag: &ImageTagSpec,
    reported: &[ImageTagStatus],
    inputs: &Inputs<'_, O>,
) -> TagOutcome {
    let now = inputs.now;
    let mut spec = tag.clone();
    let mut changes = Vec::new();
    if spec.created_at.is_none() {
        spec.created_at = Some(api_time(now));
        changes.push(Change::CreatedAtSet {
            image: image.to_string(),
            tag: tag.tag.to_string(),
        });
    }
    let created = spec.created_at.as_ref().map(instant).unwrap_or(now);
    match live_owners(image, tag, inputs.owners, &mut changes) {
        Some(kept) if kept.is_empty() => {
            return TagOutcome::removed(image, tag, RemoveReason::OwnersGone, changes);
        }
        Some(kept) => spec.owner_references = Some(kept.into()),
        None => {}
    }

    let version = tag.version.unwrap_or(0);
    let policy = tag.pull_policy.clone().unwrap_or_default();
    let report = reported.iter().find(|s| s.answers(tag));
    let ttl = policy
        .ttl_seconds_after_finished
        .map(|s| seconds(i64::from(s.max(0))));

    if let Some(report) = report.filter(|r| r.phase.is_finished()) {
        return match expiry(report, ttl) {
            Some(at) if now >= at => {
                TagOutcome::removed(image, tag, RemoveReason::TtlExpired, changes)
            }
            due => TagOutcome::kept(spec, due, changes),
        };
    }
    // Unfinished: the earliest deadline that has passed fails the tag.
    let deadlines = deadlines(
        created,
        version,
        &policy,
        report.is_none(),
        inputs.response_timeout,
    );
    match deadlines.iter().find(|d| now >= d.at) {
        Some(d) => TagOutcome {
            due: ttl.map(|ttl| after(now, ttl)),
            failure: Some(Failure {
                image: image.to_string(),
                tag: tag.tag.to_string(),
                version,
                message: d.message.clone(),
                no_response: d.no_response,
            }),
            spec: Some(spec),
            changes,
        },
        None => TagOutcome::kept(spec, deadlines.first().map(|d| d.at), changes),
    }
}

/// The tag's owners once the gone ones are dropped (each dropped one is a
/// change), or None when none was dropped (or it has no owners: a tag
/// written by hand). Empty: its last owner is gone.
fn live_owners<O: OwnerLookup>(
    image: &str,
    tag: &ImageTagSpec,
    lookup: &O,
    changes: &mut Vec<Change>,
) -> Option<Vec<ObjectReference>> {
    let owners = tag.owner_references.as_ref().filter(|o| !o.is_empty())?;
    let (kept, gone): (Vec<_>, Vec<_>) = owners
        .iter()
        .cloned()
        .partition(|o| lookup.state(o) != OwnerState::Gone);
    changes.extend(gone.iter().map(|o| Change::OwnerDropped {
        image: image.to_string(),
        tag: tag.tag.to_string(),
        owner: describe_owner(o),
    }));
    (!gone.is_empty()).then_some(kept)
}

/// When a finished tag expires: its completion plus its TTL (never without both).
fn expiry(report: &ImageTagStatus, ttl: Option<TimeDelta>) -> Option<DateTime<Utc>> {
    match (&report.completion_time, ttl) {
        (Some(done), Some(ttl)) => Some(after(instant(done), ttl)),
        _ => None,
    }
}

/// A time by which an unfinished tag fails, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deadline {
    /// When.
    pub at: DateTime<Utc>,
    /// The message written to status.
    pub message: String,
    /// Whether passing it means the node never answered.
    pub no_response: bool,
}

/// The deadlines of an unfinished tag `created` at, earliest first: the
/// response timeout while the node has not reported on `version`, and
/// `activeDeadlineSeconds` (plus a grace) when the policy sets it.
pub fn deadlines(
    created: DateTime<Utc>,
    version: i64,
    policy: &ImageTagPullPolicy,
    unreported: bool,
    response_timeout: TimeDelta,
) -> Vec<Deadline> {
    let mut deadlines = Vec::new();
    if unreported {
        deadlines.push(Deadline {
            at: after(created, response_timeout),
            message: format!(
                "{NO_RESPONSE} {} (no status for version {version})",
                go_duration(response_timeout)
            ),
            no_response: true,
        });
    }
    if let Some(ads) = policy.active_deadline_seconds {
        deadlines.push(Deadline {
            at: after(after(created, seconds(ads.max(0))), DEADLINE_GRACE),
            message: format!("{NOT_FINISHED} ({ads}s) of createdAt"),
            no_response: false,
        });
    }
    deadlines.sort_by_key(|d| d.at);
    deadlines
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

#[cfg(test)]
mod tests;
