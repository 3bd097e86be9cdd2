//! The status write every KubeEdge kind makes, against a scripted API: the
//! exact guarded patch, and nothing when nothing changed.

use super::*;
use crate::engine::jobshell::scripted::{Reply, Script, Seen};
use kube::Resource;
use nodeimage_api::ImagePrePullJob;
use nodeimage_api::kubeedge::{ImagePrePullJobStatus, JobState};
use serde_json::json;

fn job(status: Option<ImagePrePullJobStatus>) -> ImagePrePullJob {
    let mut j = ImagePrePullJob::new("j", Default::default());
    j.metadata.resource_version = Some("7".into());
    j.status = status;
    j
}

fn with_reason(reason: &str) -> ImagePrePullJobStatus {
    ImagePrePullJobStatus {
        job: JobState {
            state: Some("Pulling".into()),
            reason: Some(reason.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn state_of(s: &ImagePrePullJobStatus) -> (Option<&str>, Option<&str>) {
    (s.job.state.as_deref(), s.job.reason.as_deref())
}

#[tokio::test]
async fn a_new_status_is_one_patch_of_what_changed_guarded_by_the_version_read() {
    let old = with_reason("0 of 2 nodes finished (0 failed), 1 pulling");
    let j = job(Some(old.clone()));
    let (ctx, _, api) = Script::context(vec![Reply::ok(&j)]);
    let new = with_reason("1 of 2 nodes finished (0 failed), 1 pulling");
    write_guarded_status(&ctx, &j, Some(&old), &new, state_of)
        .await
        .expect("written");
    assert_eq!(
        api.seen(),
        vec![Seen {
            method: "PATCH".into(),
            path: format!("{}/j/status", ImagePrePullJob::url_path(&(), None)),
            body: json!({"metadata": {"resourceVersion": "7"},
                         "status": {"reason": "1 of 2 nodes finished (0 failed), 1 pulling"}}),
        }]
    );
}

#[tokio::test]
async fn an_unchanged_status_writes_nothing() {
    let old = with_reason("0 of 2 nodes finished (0 failed), 1 pulling");
    let j = job(Some(old.clone()));
    let (ctx, _, api) = Script::context(vec![]);
    write_guarded_status(&ctx, &j, Some(&old), &old.clone(), state_of)
        .await
        .expect("nothing to write");
    assert_eq!(api.seen(), vec![]);
}
