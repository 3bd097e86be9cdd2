use super::*;

const WORKING: Working = Working {
    state: "Pulling",
    event: "Pull",
    verb: "pulling",
};

/// The verdict of `tally` (desired, active, not started, failed) with
/// `flags` (reached, finished, started).
fn judged(tally: (usize, usize, usize, usize), flags: [bool; 3]) -> Verdict {
    let (desired, active, not_started, failed) = tally;
    let t = Tally {
        desired,
        active,
        not_started,
        succeeded: desired - active - not_started - failed,
        failed: (0..failed).map(|i| (format!("n{i}"), "x".into())).collect(),
    };
    let [reached, finished, started] = flags;
    let o = Outcome {
        tally: &t,
        reached,
        finished,
        started,
        tolerate: "0.3",
    };
    judge(&o, WORKING, "Check")
}

fn v(
    state: &'static str,
    event: &'static str,
    action: Option<&'static str>,
    reason: &str,
) -> Verdict {
    Verdict {
        state,
        event,
        action,
        reason: (!reason.is_empty()).then(|| reason.to_string()),
    }
}

/// (desired, active, not started, failed), (reached, finished, started), verdict.
#[rustfmt::skip]
#[test]
fn judge_table() {
    let (ok, fail) = (Some("Success"), Some("Failure"));
    let below = "1 of 4 nodes failed (25.0%), below failureTolerate 0.3";
    let reaching = "2 of 4 nodes failed (50.0%), reaching failureTolerate 0.3";
    let not_started = format!("{reaching}; 2 nodes not started");
    let working = "1 of 4 nodes finished (0 failed), 1 pulling";
    let stopping = "2 of 4 nodes finished (2 failed), 1 pulling, failureTolerate reached: starting no more nodes";
    let waiting = "waiting for the nodes' NodeImages";
    let check = |tally: (usize, usize, usize, usize), flags: [bool; 3], want: Verdict| {
        assert_eq!(judged(tally, flags), want, "{tally:?} {flags:?}");
    };
    let cases = [
        ((4, 0, 0, 0), [false, true, true], v("Successful", "Pull", ok, "")),
        ((4, 0, 0, 1), [false, true, true], v("Successful", "Pull", ok, below)),
        ((4, 0, 0, 2), [true, true, true], v("Failed", "Check", fail, reaching)),
        ((4, 0, 2, 2), [true, true, true], v("Failed", "Check", fail, &not_started)),
        ((4, 1, 2, 0), [false, false, true], v("Pulling", "Pull", None, working)),
        ((4, 1, 1, 2), [true, false, true], v("Pulling", "Pull", None, stopping)),
        ((4, 0, 4, 0), [false, false, false], v("Init", "Init", None, waiting)),
    ];
    for (tally, flags, want) in cases {
        check(tally, flags, want);
    }
}

#[test]
fn stamp_keeps_the_time_of_an_unchanged_phase() {
    let now = crate::engine::nodetasks::fixtures::at(60);
    let old = Phase {
        state: Some("Pulling".into()),
        event: Some("Pull".into()),
        action: None,
        reason: Some("0 of 2 nodes finished".into()),
        time: Some("then".into()),
    };
    let working = |reason: &str| Verdict {
        state: "Pulling",
        event: "Pull",
        action: None,
        reason: Some(reason.into()),
    };
    let same = stamp(&old, working("1 of 2 nodes finished"), now);
    assert_eq!(
        same.time.as_deref(),
        Some("then"),
        "a new reason keeps the time"
    );
    assert_eq!(same.reason.as_deref(), Some("1 of 2 nodes finished"));
    let done = Verdict {
        state: "Successful",
        action: Some("Success"),
        ..working("")
    };
    assert_eq!(stamp(&old, done, now).time, Some(rfc3339(now)));
}

#[test]
fn finished_event_table() {
    let phase = |state: &str, reason: Option<&str>| Phase {
        state: Some(state.into()),
        reason: reason.map(str::to_string),
        ..Default::default()
    };
    let cases = [
        (
            phase("Successful", None),
            false,
            "Finished Successful: all 3 nodes pulled",
        ),
        (
            phase("Successful", Some("1 of 3 nodes failed")),
            false,
            "Finished Successful: 1 of 3 nodes failed",
        ),
        (
            phase("Failed", Some("2 of 3 nodes failed")),
            true,
            "Finished Failed: 2 of 3 nodes failed",
        ),
    ];
    for (p, warning, note) in cases {
        let ev = finished_event(&p, || "all 3 nodes pulled".into());
        assert_eq!(
            (ev.warning, ev.reason, ev.note.as_str()),
            (warning, "Finished", note)
        );
    }
}
