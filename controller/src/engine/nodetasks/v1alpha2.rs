//! The v1alpha2 view of a KubeEdge job's status, derived from the v1alpha1
//! rows the engine keeps: the job `phase`, each node's `phase` and
//! `actionFlow`. Both shapes live in one object (see the API crate), so one
//! engine serves both versions; this is the one place that maps them. Pure.

use super::{Phase, action, event, state};
use nodeimage_api::kubeedge::{ActionFlow, TaskStatus, node_phase, phase};

/// One action of a kind's v1alpha2 flow: the v1alpha1 event that reports
/// it, and its v1alpha2 name.
pub type Step = (&'static str, &'static str);

/// The job's v1alpha2 phase for its v1alpha1 state.
pub fn job_phase(job_state: Option<&str>) -> Option<String> {
    let p = match job_state? {
        "" => return None,
        state::INIT => phase::INIT,
        state::SUCCESSFUL => phase::COMPLETED,
        state::FAILED => phase::FAILURE,
        _ => phase::IN_PROGRESS,
    };
    Some(p.to_string())
}

/// The v1alpha1 state of a job whose status only has v1alpha2's phase (a
/// job KubeEdge 1.21+ ran): a finished job stays finished.
pub fn state_of_phase(job_phase: Option<&str>) -> Option<&'static str> {
    match job_phase? {
        phase::COMPLETED => Some(state::SUCCESSFUL),
        phase::FAILURE => Some(state::FAILED),
        _ => None,
    }
}

/// The job-level status the engine starts from: as recorded, with the
/// v1alpha1 state of a job whose status only has v1alpha2's phase.
pub fn recorded(job: &Phase, job_phase: Option<&str>) -> Phase {
    let mut p = job.clone();
    if p.state.is_none() {
        p.state = state_of_phase(job_phase).map(str::to_string);
    }
    p
}

/// A node's v1alpha2 phase: a node that ran out of time is Unknown, as
/// KubeEdge marks it.
pub fn node_phase(t: &TaskStatus) -> String {
    let p = match t.phase.state.as_deref() {
        None | Some("") | Some(state::INIT) => node_phase::PENDING,
        Some(state::SUCCESSFUL) => node_phase::SUCCESSFUL,
        Some(state::FAILED) if t.phase.event.as_deref() == Some(event::TIMEOUT) => {
            node_phase::UNKNOWN
        }
        Some(state::FAILED) => node_phase::FAILURE,
        Some(_) => node_phase::IN_PROGRESS,
    };
    p.to_string()
}

/// The actions a node finished, in `flow` order: every action before the
/// one its event names succeeded; that one carries the node's outcome
/// (none while it runs); a successful node finished its whole flow up to
/// its event. A node rejected before starting or timed out ran none.
pub fn action_flow(t: &TaskStatus, flow: &[Step]) -> Vec<ActionFlow> {
    let Some(at) = flow
        .iter()
        .position(|(ev, _)| Some(*ev) == t.phase.event.as_deref())
    else {
        return vec![];
    };
    let done = |name: &str| ActionFlow {
        action: Some(name.to_string()),
        status: Some("True".into()),
        ..Default::default()
    };
    let mut out: Vec<ActionFlow> = flow[..at].iter().map(|(_, a)| done(a)).collect();
    let ok = match t.phase.action.as_deref() {
        Some(action::SUCCESS) => "True",
        Some(action::FAILURE) => "False",
        _ => return out,
    };
    out.push(ActionFlow {
        action: Some(flow[at].1.to_string()),
        status: Some(ok.into()),
        reason: t.phase.reason.clone().filter(|_| ok == "False"),
        time: t.phase.time.clone(),
    });
    out
}

/// "True" or "False" for a v1alpha1 image or node state.
pub fn condition_status(succeeded: bool) -> String {
    if succeeded { "True" } else { "False" }.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOW: &[Step] = &[("Check", "Check"), ("Pull", "Pull")];

    fn t(state: &str, event: Option<&str>, action: Option<&str>) -> TaskStatus {
        TaskStatus {
            node_name: Some("n".into()),
            phase: Phase {
                state: Some(state.into()),
                event: event.map(str::to_string),
                action: action.map(str::to_string),
                reason: Some("why".into()),
                time: Some("2026-11-25T00:00:00Z".into()),
            },
        }
    }

    #[test]
    fn job_phases() {
        let cases = [
            (None, None),
            (Some(""), None),
            (Some("Init"), Some("Init")),
            (Some("Pulling"), Some("InProgress")),
            (Some("Upgrading"), Some("InProgress")),
            (Some("Successful"), Some("Completed")),
            (Some("Failed"), Some("Failure")),
        ];
        for (s, want) in cases {
            assert_eq!(job_phase(s).as_deref(), want, "{s:?}");
        }
        assert_eq!(state_of_phase(Some("Completed")), Some("Successful"));
        assert_eq!(state_of_phase(Some("Failure")), Some("Failed"));
        assert_eq!(state_of_phase(Some("InProgress")), None);
        assert_eq!(state_of_phase(None), None);
    }

    #[test]
    fn node_phases() {
        let cases = [
            (t("Init", None, None), "Pending"),
            (t("Pulling", Some("Pull"), None), "InProgress"),
            (t("Successful", Some("Pull"), Some("Success")), "Successful"),
            (t("Failed", Some("Pull"), Some("Failure")), "Failure"),
            (t("Failed", Some("Init"), Some("Failure")), "Failure"),
            (t("Failed", Some("TimeOut"), Some("Failure")), "Unknown"),
        ];
        for (row, want) in cases {
            assert_eq!(node_phase(&row), want, "{row:?}");
        }
    }

    #[test]
    fn action_flows() {
        let names = |f: Vec<ActionFlow>| -> Vec<(String, String, Option<String>)> {
            f.into_iter()
                .map(|a| {
                    (
                        a.action.unwrap_or_default(),
                        a.status.unwrap_or_default(),
                        a.reason,
                    )
                })
                .collect()
        };
        let s = |a: &str, st: &str, r: Option<&str>| {
            (a.to_string(), st.to_string(), r.map(str::to_string))
        };
        // Working on Pull: Check done.
        assert_eq!(
            names(action_flow(&t("Pulling", Some("Pull"), None), FLOW)),
            vec![s("Check", "True", None)]
        );
        // Done.
        assert_eq!(
            names(action_flow(
                &t("Successful", Some("Pull"), Some("Success")),
                FLOW
            )),
            vec![s("Check", "True", None), s("Pull", "True", None)]
        );
        // Failed its check: the reason is on the failed action.
        assert_eq!(
            names(action_flow(
                &t("Failed", Some("Check"), Some("Failure")),
                FLOW
            )),
            vec![s("Check", "False", Some("why"))]
        );
        // Rejected before starting, or timed out: no action ran.
        assert!(action_flow(&t("Failed", Some("Init"), Some("Failure")), FLOW).is_empty());
        assert!(action_flow(&t("Failed", Some("TimeOut"), Some("Failure")), FLOW).is_empty());
        // The time of the last action is the row's.
        let f = action_flow(&t("Successful", Some("Pull"), Some("Success")), FLOW);
        assert_eq!(f[1].time.as_deref(), Some("2026-11-25T00:00:00Z"));
        assert_eq!(f[0].time, None);
    }
}
