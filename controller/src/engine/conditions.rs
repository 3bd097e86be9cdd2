//! `status.conditions` of every job kind (Complete, Failed, Progressing),
//! derived from the upstream status fields the plans compute, so that
//! `kubectl wait --for=condition=Complete` and pipelines work the usual
//! Kubernetes way. Pure: the reconcilers call [`apply`] before writing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodeimage_api::conditions::{COMPLETE, FAILED, PROGRESSING};
use nodeimage_api::kruise::nodeimage::contract::{TaskEnd, task_end};
use nodeimage_api::kruise::{ImageListPullJobStatus, ImagePullJobStatus};
use nodeimage_api::kubeedge::{ImagePrePullJobStatus, NodeUpgradeJobStatus};
use nodeimage_api::nodeimage_dev::imageremovaljob::ImageRemovalJobStatus;

/// Where a job stands, with a CamelCase reason and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Still working.
    Running(&'static str, String),
    /// Finished as it should.
    Complete(&'static str, String),
    /// Finished with failures it does not tolerate.
    Failed(&'static str, String),
}

/// A status that carries conditions and says where its job stands.
pub trait Judged {
    /// The verdict read from the upstream status fields.
    fn verdict(&self) -> Verdict;
    /// The conditions field.
    fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>>;
    /// The conditions field, read only.
    fn conditions(&self) -> Option<&Vec<Condition>>;
}

/// The conditions for `verdict`: each type's `lastTransitionTime` changes
/// only when its status does (so an unchanged job writes nothing new).
pub fn next(
    old: Option<&Vec<Condition>>,
    verdict: &Verdict,
    generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let (progressing, complete, failed, reason, message) = match verdict {
        Verdict::Running(r, m) => (true, false, false, *r, m),
        Verdict::Complete(r, m) => (false, true, false, *r, m),
        Verdict::Failed(r, m) => (false, false, true, *r, m),
    };
    let one = |type_: &str, on: bool| {
        let status = if on { "True" } else { "False" };
        let prev = old.into_iter().flatten().find(|c| c.type_ == type_);
        let since = match prev {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => now.clone(),
        };
        Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            observed_generation: generation,
            last_transition_time: since,
            reason: reason.to_string(),
            message: message.chars().take(32_768).collect(),
        }
    };
    vec![
        one(COMPLETE, complete),
        one(FAILED, failed),
        one(PROGRESSING, progressing),
    ]
}

/// Sets `new`'s conditions from its verdict, keeping `old`'s transition times.
pub fn apply<S: Judged>(old: Option<&S>, new: &mut S, generation: Option<i64>, now: &Time) {
    let conditions = next(
        old.and_then(|o| o.conditions()),
        &new.verdict(),
        generation,
        now,
    );
    *new.conditions_mut() = Some(conditions);
}

/// [`Judged`]'s accessors of a status whose field is `conditions`.
macro_rules! conditions_field {
    () => {
        fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>> {
            &mut self.conditions
        }
        fn conditions(&self) -> Option<&Vec<Condition>> {
            self.conditions.as_ref()
        }
    };
}

impl Judged for ImagePullJobStatus {
    fn verdict(&self) -> Verdict {
        let message = self.message.clone().unwrap_or_default();
        match (&self.completion_time, self.failed) {
            (None, _) => Verdict::Running("Pulling", message),
            (Some(_), 0) => Verdict::Complete("AllNodesSucceeded", message),
            (Some(_), _) if message.contains("activeDeadlineSeconds") => {
                Verdict::Failed("DeadlineExceeded", message)
            }
            (Some(_), _) => Verdict::Failed("NodesFailed", message),
        }
    }
    conditions_field!();
}

impl Judged for ImageListPullJobStatus {
    fn verdict(&self) -> Verdict {
        let message = format!(
            "{} of {} images pulled on every node, {} finished",
            self.succeeded, self.desired, self.completed
        );
        match (&self.completion_time, &self.failed_image_statuses) {
            (None, _) => Verdict::Running("Pulling", message),
            (Some(_), Some(f)) if !f.is_empty() => Verdict::Failed("ImagesFailed", message),
            (Some(_), _) => Verdict::Complete("AllImagesSucceeded", message),
        }
    }
    conditions_field!();
}

impl Judged for ImageRemovalJobStatus {
    fn verdict(&self) -> Verdict {
        let message = self.message.clone().unwrap_or_default();
        match (&self.completion_time, self.failed, self.kept) {
            (None, _, _) => Verdict::Running("Removing", message),
            (Some(_), 0, 0) => Verdict::Complete("AllNodesRemoved", message),
            (Some(_), 0, _) => Verdict::Complete("SomeImagesKept", message),
            (Some(_), _, _) if message.contains("activeDeadlineSeconds") => {
                Verdict::Failed("DeadlineExceeded", message)
            }
            (Some(_), _, _) => Verdict::Failed("NodesFailed", message),
        }
    }
    conditions_field!();
}

/// The verdict of a KubeEdge job state (`Successful`, `Failed`, other).
fn kubeedge_verdict(state: Option<&str>, reason: Option<&str>) -> Verdict {
    let message = reason.unwrap_or_default().to_string();
    match task_end(state) {
        Some(TaskEnd::Successful) => Verdict::Complete("Successful", message),
        Some(TaskEnd::Failed) => Verdict::Failed("Failed", message),
        None => Verdict::Running("InProgress", message),
    }
}

/// KubeEdge statuses are judged by their job-level state.
macro_rules! judged_by_job_state {
    ($($status:ty),*) => {$(
        impl Judged for $status {
            fn verdict(&self) -> Verdict {
                kubeedge_verdict(self.job.state.as_deref(), self.job.reason.as_deref())
            }
            conditions_field!();
        }
    )*};
}

judged_by_job_state!(ImagePrePullJobStatus, NodeUpgradeJobStatus);

/// The status and transition time of the condition `type_`, for tests of
/// the plans that set conditions.
#[cfg(test)]
pub fn condition_of(conditions: Option<&Vec<Condition>>, type_: &str) -> Option<(String, Time)> {
    let c = conditions?.iter().find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.last_transition_time.clone()))
}

#[cfg(test)]
mod tests;
