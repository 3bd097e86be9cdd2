//! `status.conditions` of every job kind (Complete, Failed, Progressing),
//! derived from the upstream status fields the plans compute, so that
//! `kubectl wait --for=condition=Complete` and pipelines work the usual
//! Kubernetes way. Pure: the reconcilers call [`apply`] before writing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use nodeimage_api::conditions::{COMPLETE, FAILED, PROGRESSING};
use nodeimage_api::kruise::{ImageListPullJobStatus, ImagePullJobStatus};
use nodeimage_api::kubeedge::{ImagePrePullJobStatus, NodeUpgradeJobStatus};

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
    fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>> {
        &mut self.conditions
    }
    fn conditions(&self) -> Option<&Vec<Condition>> {
        self.conditions.as_ref()
    }
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
    fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>> {
        &mut self.conditions
    }
    fn conditions(&self) -> Option<&Vec<Condition>> {
        self.conditions.as_ref()
    }
}

/// The verdict of a KubeEdge job state (`Successful`, `Failed`, other).
fn kubeedge_verdict(state: Option<&str>, reason: Option<&str>) -> Verdict {
    let message = reason.unwrap_or_default().to_string();
    match state.map(str::to_ascii_lowercase).as_deref() {
        Some("successful") => Verdict::Complete("Successful", message),
        Some("failed") => Verdict::Failed("Failed", message),
        _ => Verdict::Running("InProgress", message),
    }
}

impl Judged for ImagePrePullJobStatus {
    fn verdict(&self) -> Verdict {
        kubeedge_verdict(self.state.as_deref(), self.reason.as_deref())
    }
    fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>> {
        &mut self.conditions
    }
    fn conditions(&self) -> Option<&Vec<Condition>> {
        self.conditions.as_ref()
    }
}

impl Judged for NodeUpgradeJobStatus {
    fn verdict(&self) -> Verdict {
        kubeedge_verdict(self.state.as_deref(), self.reason.as_deref())
    }
    fn conditions_mut(&mut self) -> &mut Option<Vec<Condition>> {
        &mut self.conditions
    }
    fn conditions(&self) -> Option<&Vec<Condition>> {
        self.conditions.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    fn status_of(cs: &[Condition], t: &str) -> (String, String, i64) {
        let c = cs.iter().find(|c| c.type_ == t).expect("condition");
        (
            c.status.clone(),
            c.reason.clone(),
            c.last_transition_time.0.as_second(),
        )
    }

    #[test]
    fn transitions_keep_their_time_until_the_status_changes() {
        let running = Verdict::Running("Pulling", "job is running, progress 10.0%".into());
        let c1 = next(None, &running, Some(1), &at(100));
        // (condition, status, reason, transition time)
        let table = [
            (COMPLETE, "False", 100),
            (FAILED, "False", 100),
            (PROGRESSING, "True", 100),
        ];
        for (t, st, when) in table {
            assert_eq!(
                status_of(&c1, t),
                (st.into(), "Pulling".into(), when),
                "{t}"
            );
        }
        // Still running with a new message: times stay, message moves.
        let later = Verdict::Running("Pulling", "job is running, progress 50.0%".into());
        let c2 = next(Some(&c1), &later, Some(1), &at(200));
        assert_eq!(status_of(&c2, PROGRESSING).2, 100);
        assert!(c2.iter().all(|c| c.message.contains("50.0%")));
        // Same verdict again: identical conditions (no write).
        assert_eq!(next(Some(&c2), &later, Some(1), &at(300)), c2);
        // Complete: Complete and Progressing flip at the new time, Failed stays.
        let done = Verdict::Complete("AllNodesSucceeded", "job has completed".into());
        let c3 = next(Some(&c2), &done, Some(1), &at(400));
        assert_eq!(
            status_of(&c3, COMPLETE),
            ("True".into(), "AllNodesSucceeded".into(), 400)
        );
        assert_eq!(status_of(&c3, PROGRESSING).0, "False");
        assert_eq!(status_of(&c3, PROGRESSING).2, 400);
        assert_eq!(status_of(&c3, FAILED).2, 100);
    }

    #[test]
    fn verdicts_from_upstream_status_fields() {
        let ipj = |completed: bool, failed: i32, message: &str| ImagePullJobStatus {
            completion_time: completed.then(|| at(1)),
            failed,
            message: Some(message.into()),
            ..Default::default()
        };
        let cases = [
            (ipj(false, 0, "job is running"), "Running", "Pulling"),
            (
                ipj(true, 0, "job has completed"),
                "Complete",
                "AllNodesSucceeded",
            ),
            (ipj(true, 2, "job has completed"), "Failed", "NodesFailed"),
            (
                ipj(true, 1, "job exceeds activeDeadlineSeconds"),
                "Failed",
                "DeadlineExceeded",
            ),
        ];
        for (s, kind, reason) in cases {
            let v = s.verdict();
            let (k, r) = match &v {
                Verdict::Running(r, _) => ("Running", *r),
                Verdict::Complete(r, _) => ("Complete", *r),
                Verdict::Failed(r, _) => ("Failed", *r),
            };
            assert_eq!((k, r), (kind, reason), "{s:?}");
        }
        let ke = |state: &str| ImagePrePullJobStatus {
            state: Some(state.into()),
            ..Default::default()
        };
        assert!(matches!(ke("Successful").verdict(), Verdict::Complete(..)));
        assert!(matches!(ke("Failed").verdict(), Verdict::Failed(..)));
        assert!(matches!(ke("Pulling").verdict(), Verdict::Running(..)));
        let list = ImageListPullJobStatus {
            completion_time: Some(at(1)),
            failed_image_statuses: Some(vec![Default::default()]),
            ..Default::default()
        };
        assert!(matches!(list.verdict(), Verdict::Failed("ImagesFailed", _)));
    }
}
