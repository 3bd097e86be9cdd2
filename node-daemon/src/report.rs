//! How a task tells the world about a tag: status through the writer
//! (Waiting, Pulling with progress, Succeeded or Failed), an event on the
//! NodeImage, a log line and the pull metrics. Both the pull flow and the
//! upgrade flow report through here.

use crate::deps::Deps;
use crate::desired::TagKey;
use crate::metrics::{Metrics, PullLabels, ResultLabels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType, Recorder};
use nodeimage_api::kruise::{ImagePullPhase, ImageTagStatus};
use std::time::Duration;

/// How a tag's pull ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Pulled (or present, when `pulled` is false); the repository digest.
    Succeeded {
        /// `name@sha256:…` of what the node holds.
        id: String,
        /// Whether the registry was contacted (false: already present).
        pulled: bool,
    },
    /// Gave up.
    Failed {
        /// Why, for status and events.
        message: String,
        /// Short reason for metrics.
        reason: &'static str,
    },
}

impl Outcome {
    /// A failure with its metric reason and message.
    pub(crate) fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            message: message.into(),
            reason,
        }
    }
}

/// Reports one tag's state to the status writer.
pub(crate) struct Reporter<'a, R> {
    /// What the workers share.
    pub(crate) deps: &'a Deps<R>,
    /// The entry.
    pub(crate) key: TagKey,
    /// The entry's version.
    pub(crate) version: i64,
    /// When the work started.
    pub(crate) start: Option<Time>,
    /// Upgrade fields added to every status sent (set by upgrade entries only).
    pub(crate) upgrade: std::sync::Mutex<UpgradeReport>,
}

impl<'a, R> Reporter<'a, R> {
    /// A reporter for the entry `key` at `version`.
    pub(crate) fn new(deps: &'a Deps<R>, key: TagKey, version: i64) -> Self {
        Reporter {
            deps,
            key,
            version,
            start: None,
            upgrade: Default::default(),
        }
    }

    fn with_upgrade(&self, mut st: ImageTagStatus) -> ImageTagStatus {
        st.upgrade = self
            .upgrade
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .boxed();
        st
    }

    /// The tag's status in `phase`, with the upgrade fields if any.
    fn status(
        &self,
        phase: ImagePullPhase,
        progress: i32,
        message: Option<String>,
    ) -> ImageTagStatus {
        self.with_upgrade(ImageTagStatus {
            tag: self.key.tag.as_str().into(),
            purpose: self.key.purpose,
            phase,
            progress: Some(progress),
            start_time: self.start.clone(),
            version: Some(self.version),
            message: message.map(Into::into),
            ..Default::default()
        })
    }

    /// Reports an unfinished phase.
    pub(crate) fn send(&self, phase: ImagePullPhase, progress: i32, message: Option<String>) {
        self.deps
            .status
            .report(&self.key, self.status(phase, progress, message));
    }

    /// Reports the end of a pull.
    pub(crate) fn finish(&self, outcome: &Outcome) {
        match outcome {
            Outcome::Succeeded { id, .. } => self.finish_with(true, None, Some(id.clone())),
            Outcome::Failed { message, .. } => self.finish_with(false, Some(message.clone()), None),
        }
    }

    /// Reports the end: Succeeded (with the image's digest) or Failed.
    pub(crate) fn finish_with(
        &self,
        succeeded: bool,
        message: Option<String>,
        image_id: Option<String>,
    ) {
        let (phase, progress) = if succeeded {
            (ImagePullPhase::Succeeded, 100)
        } else {
            (ImagePullPhase::Failed, 0)
        };
        let mut st = self.status(phase, progress, message);
        st.start_time = st.start_time.or_else(|| Some(now()));
        st.completion_time = Some(now());
        st.image_id = image_id.filter(|_| succeeded).map(Into::into);
        self.deps.status.report(&self.key, st);
    }
}

/// The current time as the API stores it (whole seconds), so that what we
/// write compares equal to what we read back.
pub(crate) fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()))
}

/// The upgrade fields of a tag status (NodeUpgradeJob entries), which a
/// reporter adds to every status it sends once the upgrade flow set them.
pub type UpgradeReport = nodeimage_api::kruise::TagUpgradeStatus;

/// Records a finished pull in the metrics.
pub(crate) fn count(m: &Metrics, outcome: &Outcome, elapsed: Option<Duration>) {
    let (result, reason) = match outcome {
        Outcome::Succeeded { pulled: true, .. } => ("succeeded", "pulled"),
        Outcome::Succeeded { pulled: false, .. } => ("succeeded", "present"),
        Outcome::Failed { reason, .. } => ("failed", *reason),
    };
    m.pulls
        .get_or_create(&PullLabels {
            result: result.into(),
            reason: reason.into(),
        })
        .inc();
    if let Some(e) = elapsed {
        m.pull_duration
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .observe(e.as_secs_f64());
    }
}

/// Records the end of a pull as an event on the NodeImage and a log line.
pub(crate) async fn announce<R>(deps: &Deps<R>, key: &TagKey, outcome: &Outcome) {
    let (type_, reason, note) = match outcome {
        Outcome::Succeeded { id, pulled } => {
            tracing::info!(tag = %key, image_id = %id, pulled, "pull succeeded");
            (
                EventType::Normal,
                "PullImageSucceed",
                format!("Image {key} pulled ({id})"),
            )
        }
        Outcome::Failed { message, reason } => {
            tracing::warn!(tag = %key, reason, message = %message, "pull failed");
            (
                EventType::Warning,
                "PullImageFailed",
                format!("Image {key} failed: {message}"),
            )
        }
    };
    event(deps, type_, reason, "Pull", note).await;
}

/// Records an event on this node's NodeImage (none before it is known).
pub(crate) async fn event<R>(
    deps: &Deps<R>,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
) {
    let Some(ni) = deps.status.observed() else {
        return;
    };
    let reference = kube::Resource::object_ref(&ni, &());
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(&note, 1000)),
        action: action.into(),
        secondary: None,
    };
    // A fresh recorder for each event: kube's Recorder merges events of the
    // same type and reason on one object into a series that keeps the first
    // note, so every later tag of the NodeImage would show the first tag's
    // message.
    let recorder = Recorder::new(deps.client.clone(), deps.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &reference).await {
        tracing::warn!(error = %e, "could not record event");
    }
}

/// `s` cut to at most `max` bytes (at a character boundary), with an ellipsis.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
