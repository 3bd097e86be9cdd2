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
        job: nodeimage_api::kubeedge::JobState {
            state: Some(state.into()),
            ..Default::default()
        },
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
