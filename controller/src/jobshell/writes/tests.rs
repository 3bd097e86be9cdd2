//! The status write every KubeEdge kind makes, against a scripted API: the
//! exact guarded patch, with conditions at the plan's clock.

use super::*;
use crate::jobshell::scripted::{Reply, Script, Seen};
use kube::Resource;
use nodeimage_api::ImagePrePullJob;
use nodeimage_api::kubeedge::{ImagePrePullJobStatus, JobState};
use serde_json::json;

/// The plan's clock: far from the wall clock, so a second `Utc::now()` shows.
fn planned_at() -> DateTime<Utc> {
    DateTime::from_timestamp(1_600_000_000, 0).unwrap_or_default()
}

fn job(status: Option<ImagePrePullJobStatus>) -> ImagePrePullJob {
    let mut j = ImagePrePullJob::new("j", Default::default());
    j.metadata.resource_version = Some("7".into());
    j.status = status;
    j
}

fn pulling() -> ImagePrePullJobStatus {
    ImagePrePullJobStatus {
        job: JobState {
            state: Some("Pulling".into()),
            reason: Some("0 of 1 nodes finished (0 failed), 1 pulling".into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn state_of(s: &ImagePrePullJobStatus) -> (Option<&str>, Option<&str>) {
    (s.job.state.as_deref(), s.job.reason.as_deref())
}

#[tokio::test]
async fn a_new_status_is_written_guarded_with_conditions_at_the_plan_time() {
    let j = job(None);
    let (ctx, _, api) = Script::context(vec![Reply::ok(&j)]);
    let new = pulling();
    write_guarded_status(&ctx, &j, None, &new, state_of, planned_at())
        .await
        .expect("written");
    let mut want = new.clone();
    let at = crate::clock::api_time(planned_at());
    crate::conditions::apply(None, &mut want, None, &at);
    assert_eq!(
        api.seen(),
        vec![Seen {
            method: "PATCH".into(),
            path: format!("{}/j/status", ImagePrePullJob::url_path(&(), None)),
            body: json!({"metadata": {"resourceVersion": "7"}, "status": want}),
        }]
    );
    assert_eq!(
        crate::conditions::condition_of(want.conditions.as_ref(), "Progressing"),
        Some(("True".into(), at))
    );
}

#[tokio::test]
async fn an_unchanged_status_writes_nothing() {
    let mut written = pulling();
    let at = crate::clock::api_time(planned_at());
    crate::conditions::apply(None, &mut written, None, &at);
    let j = job(Some(written.clone()));
    let (ctx, _, api) = Script::context(vec![]);
    // Planned again later: same verdict, so the conditions keep their time.
    let later = planned_at() + chrono::TimeDelta::seconds(30);
    write_guarded_status(&ctx, &j, Some(&written), &pulling(), state_of, later)
        .await
        .expect("nothing to write");
    assert_eq!(api.seen(), vec![]);
}
