//! The rules of the NodeImage contract, each stated once: which status entry
//! answers which spec entry, when a tag's pull (and a KubeEdge node task)
//! is final, how a status and its counts follow from the spec, and which
//! refused writes mean "the object moved on: read it again and redo".
//!
//! Values are compared exactly as the API spells them: a phase is one of
//! [`ImagePullPhase`]'s variants, a KubeEdge state one of
//! [`crate::kubeedge::state`]'s constants.

use super::spec::{ImageSpec, ImageTagSpec, NodeImage, NodeImageSpec, Purpose};
use super::status::{ImagePullPhase, ImageStatus, ImageTagStatus, NodeImageStatus};
use crate::interned::SharedStr;
use crate::kubeedge::state;
use crate::nodeimage_dev::{RemovalStatus, answer_to};
use std::collections::BTreeMap;

/// How long a node's daemon holds the first report of new work (a spec
/// change, a tag going to Waiting or Pulling) before writing it, so that a
/// pull that ends sooner costs one status write (its Succeeded or Failed)
/// instead of two. An end, a failure or a new message is written at once;
/// the simulated daemons of the benchmarks hold as long.
pub const START_HOLD: std::time::Duration = std::time::Duration::from_secs(1);

/// The purpose of the entries a requester of `kind` writes: a NodeUpgradeJob
/// asks for an upgrade, every other kind (and a hand-written entry, with no
/// owner) for a pull. A pull and an upgrade of one image and tag are two
/// entries, so neither requester ever reads the other's outcome, and neither
/// version bump re-runs the other.
pub fn purpose_of(kind: &str) -> Purpose {
    match kind {
        "NodeUpgradeJob" => Purpose::Upgrade,
        _ => Purpose::Pull,
    }
}

impl ImageTagSpec {
    /// Whether this is the entry keyed by `tag` and `purpose` (the keys of an
    /// image's `tags` list, as the CRD declares them).
    pub fn is_keyed(&self, tag: &str, purpose: Purpose) -> bool {
        self.tag == tag && self.purpose == purpose
    }
}

impl ImageSpec {
    /// The entry keyed by `tag` and `purpose`, if the image has one.
    pub fn entry(&self, tag: &str, purpose: Purpose) -> Option<&ImageTagSpec> {
        self.tags.iter().find(|t| t.is_keyed(tag, purpose))
    }

    /// [`Self::entry`], to edit.
    pub fn entry_mut(&mut self, tag: &str, purpose: Purpose) -> Option<&mut ImageTagSpec> {
        self.tags.iter_mut().find(|t| t.is_keyed(tag, purpose))
    }
}

impl ImageTagStatus {
    /// Whether this entry reports on `spec`: the same tag and purpose at the
    /// same version, an absent version counting as 0 on both sides. An entry
    /// for another version says nothing about the pull the spec asks for
    /// now, and one of another purpose answers another requester.
    pub fn answers(&self, spec: &ImageTagSpec) -> bool {
        self.answers_at(&spec.tag, spec.purpose, spec.version.unwrap_or(0))
    }

    /// [`Self::answers`] for a caller that holds a tag, a purpose and a
    /// version (an absent one as 0) rather than a spec entry, such as a
    /// running pull.
    pub fn answers_at(&self, tag: &str, purpose: Purpose, version: i64) -> bool {
        self.reports_on(tag, purpose) && self.version.unwrap_or(0) == version
    }

    /// Whether this entry reports on the entry keyed by `tag` and `purpose`,
    /// at whatever version.
    pub fn reports_on(&self, tag: &str, purpose: Purpose) -> bool {
        self.tag == tag && self.purpose == purpose
    }
}

/// How a daemon's message on a `Waiting` entry begins while the tag's
/// registry has asked it to slow down (HTTP 429, `toomanyrequests`): the
/// pull waits without spending an attempt, and the controller starts fewer
/// new pulls from that registry while any tag says so.
pub const RATE_LIMITED_PREFIX: &str = "rate limited by registry ";

impl ImageTagStatus {
    /// The message of a tag that waits `wait_seconds` for `registry`, which
    /// answered `reason` (what it said, e.g. `429 Too Many Requests`).
    pub fn rate_limited_message(registry: &str, wait_seconds: u64, reason: &str) -> String {
        format!("{RATE_LIMITED_PREFIX}{registry}, next try in {wait_seconds}s: {reason}")
    }

    /// The registry that rate-limited this tag, while it waits for it
    /// ([`RATE_LIMITED_PREFIX`]); `None` for any other entry.
    pub fn rate_limited_by(&self) -> Option<&str> {
        if self.phase != ImagePullPhase::Waiting {
            return None;
        }
        let rest = self.message.as_deref()?.strip_prefix(RATE_LIMITED_PREFIX)?;
        rest.split_once(',')
            .map(|(host, _)| host)
            .filter(|h| !h.is_empty())
    }
}

impl ImageStatus {
    /// The entry of this image that answers `spec`, if the node wrote one.
    pub fn entry_for(&self, spec: &ImageTagSpec) -> Option<&ImageTagStatus> {
        self.tags.iter().find(|s| s.answers(spec))
    }

    /// The entry reporting on `tag` and `purpose` at whatever version (a
    /// new entry's version follows it).
    pub fn reported(&self, tag: &str, purpose: Purpose) -> Option<&ImageTagStatus> {
        self.tags.iter().find(|s| s.reports_on(tag, purpose))
    }
}

impl ImagePullPhase {
    /// Whether the pull has finished, successfully or not: a finished entry
    /// is the node's last word on its version.
    pub fn is_finished(self) -> bool {
        matches!(self, ImagePullPhase::Succeeded | ImagePullPhase::Failed)
    }
}

/// How a KubeEdge job, or one node's task, ended (its v1alpha1 `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskEnd {
    /// `Successful`: done (a job: within its failure tolerance).
    Successful,
    /// `Failed`: done with a failure (a job: beyond its failure tolerance).
    Failed,
}

/// How a KubeEdge job or node task in `state` ended; `None` while it runs
/// (or has not started).
pub fn task_end(state: Option<&str>) -> Option<TaskEnd> {
    match state? {
        state::SUCCESSFUL => Some(TaskEnd::Successful),
        state::FAILED => Some(TaskEnd::Failed),
        _ => None,
    }
}

/// Whether a KubeEdge job or node task in `state` has ended: a final state
/// is never left.
pub fn task_is_final(state: Option<&str>) -> bool {
    task_end(state).is_some()
}

/// What ended a failed entry, as its message says: the status has no field
/// for it (OpenKruise's shape), so the words below are the contract between
/// the writers of those messages (the daemon, housekeeping) and the KubeEdge
/// job controllers that turn them into a node's event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureCause {
    /// A node check (`checkItems`) refused the node.
    Check,
    /// The node ran out of time: the entry's deadline, or no answer.
    Timeout,
    /// Anything else: the pull (or the upgrade tool) failed.
    Pull,
}

/// First word of the daemon's message for a failed node check
/// (`check disk failed: 91% used > 80%`).
pub const CHECK_FAILED: &str = "check ";
/// Start of the daemon's message for an entry past its activeDeadlineSeconds.
pub const DEADLINE_EXCEEDED: &str = "exceeded activeDeadlineSeconds";
/// Start of housekeeping's message for a node that wrote no status in time.
pub const NO_RESPONSE: &str = "node did not respond within";
/// Start of housekeeping's message for a pull not finished by its deadline.
pub const NOT_FINISHED: &str = "pull did not finish within activeDeadlineSeconds";

/// Whether a failed entry's message says it ran past its
/// activeDeadlineSeconds (the daemon's words or housekeeping's).
pub fn past_its_deadline(message: &str) -> bool {
    message.starts_with(DEADLINE_EXCEEDED) || message.starts_with(NOT_FINISHED)
}

/// The cause of a failed entry from its message (see [`FailureCause`]).
pub fn failure_cause(message: &str) -> FailureCause {
    if message.starts_with(CHECK_FAILED) {
        FailureCause::Check
    } else if past_its_deadline(message) || message.starts_with(NO_RESPONSE) {
        FailureCause::Timeout
    } else {
        FailureCause::Pull
    }
}

impl NodeImageStatus {
    /// The entry of `image` that answers `spec`, if the node wrote one.
    pub fn entry_for(&self, image: &str, spec: &ImageTagSpec) -> Option<&ImageTagStatus> {
        self.image_statuses.as_ref()?.get(image)?.entry_for(spec)
    }

    /// Recomputes `desired`, `waiting`, `pulling`, `succeeded` and `failed`
    /// from the tag statuses, so every writer of status (controller and node
    /// daemon) derives the counts the same way.
    ///
    /// `desired` is the number of tags in `spec`. Each spec tag counts once,
    /// by the phase of the status entry that answers it ([`Self::entry_for`]);
    /// a tag with no such entry counts as waiting. All four phase counts are
    /// written, zeros included, so that the result does not depend on who
    /// wrote it.
    pub fn recount(&mut self, spec: &NodeImageSpec) {
        let (mut waiting, mut pulling, mut succeeded, mut failed) = (0, 0, 0, 0);
        let mut desired = 0;
        for (name, image) in spec.images.iter().flatten() {
            for tag in &image.tags {
                desired += 1;
                match self.entry_for(name, tag).map(|s| s.phase) {
                    None | Some(ImagePullPhase::Waiting) => waiting += 1,
                    Some(ImagePullPhase::Pulling) => pulling += 1,
                    Some(ImagePullPhase::Succeeded) => succeeded += 1,
                    Some(ImagePullPhase::Failed) => failed += 1,
                }
            }
        }
        self.desired = desired;
        self.waiting = Some(waiting);
        self.pulling = Some(pulling);
        self.succeeded = Some(succeeded);
        self.failed = Some(failed);
    }
}

/// A whole status with one entry per spec tag, in spec order: `entry` picks
/// each from the image name, the spec tag and the observed entry that
/// answers it (if any), given the spec tag's purpose; images without tags are left out,
/// `firstSyncStatus` is kept, and the counts are recounted. The daemon and
/// the tests' simulator build the status they write with it.
pub fn status_for_spec(
    ni: &NodeImage,
    mut entry: impl FnMut(&str, &ImageTagSpec, Option<&ImageTagStatus>) -> ImageTagStatus,
) -> NodeImageStatus {
    let observed = ni.status.as_ref();
    let mut statuses: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
    for (image, spec) in ni.spec.images.iter().flatten() {
        let old = observed
            .and_then(|s| s.image_statuses.as_ref())
            .and_then(|m| m.get(image));
        let tags: Vec<ImageTagStatus> = spec
            .tags
            .iter()
            .map(|t| {
                let mut e = entry(image, t, old.and_then(|o| o.entry_for(t)));
                e.purpose = t.purpose;
                e
            })
            .collect();
        if !tags.is_empty() {
            statuses.insert(image.clone(), ImageStatus { tags });
        }
    }
    let mut out = NodeImageStatus {
        image_statuses: (!statuses.is_empty()).then_some(statuses),
        first_sync_status: observed.and_then(|s| s.first_sync_status.clone()),
        removals: removal_answers(ni, &[]),
        ..Default::default()
    };
    out.recount(&ni.spec);
    out
}

/// The answers `status.removals` holds for the entries of `spec.removals`,
/// in spec order: from `live` (answers not written yet) first, else what
/// status said; an entry not answered yet has none, and answers to entries
/// gone from spec (or to an older job of the same name) are dropped. None
/// when there is nothing to say.
pub fn removal_answers(ni: &NodeImage, live: &[RemovalStatus]) -> Option<Vec<RemovalStatus>> {
    let observed = ni
        .status
        .as_ref()
        .and_then(|s| s.removals.as_deref())
        .unwrap_or_default();
    let answers: Vec<RemovalStatus> = ni
        .spec
        .removals
        .iter()
        .flatten()
        .filter_map(|e| {
            answer_to(e, live)
                .or_else(|| answer_to(e, observed))
                .cloned()
        })
        .collect();
    (!answers.is_empty()).then_some(answers)
}

/// Whether the API server refused a JSON Patch because one of its `test`
/// operations failed (what the write was built from moved on). It answers
/// 422 with no details; a schema or CEL rejection of the result is also 422
/// but names the object and its causes.
pub fn is_failed_test(e: &kube::core::Status) -> bool {
    e.code == 422
        && e.details
            .as_ref()
            .is_none_or(|d| d.name.is_empty() && d.causes.is_empty())
}

/// Whether the API server refused a write because the object moved on since
/// it was read: a Conflict (the resourceVersion it was guarded by is gone)
/// or a failed `test` ([`is_failed_test`]). Every writer treats it alike:
/// read the object again and redo the write, a retry and not an error.
pub fn is_stale_write(e: &kube::core::Status) -> bool {
    e.is_conflict() || is_failed_test(e)
}

#[cfg(test)]
mod tests;
