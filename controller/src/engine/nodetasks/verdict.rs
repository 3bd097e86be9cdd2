//! The job-level verdict of a step: its state, event, action and reason
//! from how its nodes stand, the time of that phase, and the Finished
//! event. Pure.

use super::outcome::Planned;
use super::{NodeTask, Phase, Working, action, event, state};
use crate::engine::jobevents::JobEvent;
use crate::engine::rollout::{Tally, rfc3339};
use chrono::{DateTime, Utc};
use std::collections::BTreeSet;

/// How the job's nodes stand after this step, as its verdict reads them.
pub struct Outcome<'a> {
    /// The nodes by state.
    pub tally: &'a Tally,
    /// Failures reached the failure tolerance.
    pub reached: bool,
    /// Every node that will run has finished.
    pub finished: bool,
    /// Some node has started (or finished).
    pub started: bool,
    /// `failureTolerate` as written, for the reason.
    pub tolerate: &'a str,
}

/// The job-level state, event, action and reason of a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Job state.
    pub state: &'static str,
    /// Job event.
    pub event: &'static str,
    /// Job action, once finished.
    pub action: Option<&'static str>,
    /// Why, for people.
    pub reason: Option<String>,
}

/// The job's verdict: failed once finished at the tolerance (with
/// `failed_event`), successful once finished below it, working once a node
/// has started, else waiting for the nodes' NodeImages.
pub fn judge(o: &Outcome<'_>, working: Working, failed_event: &'static str) -> Verdict {
    let total = o.tally.desired;
    let failed = o.tally.failed.len();
    let tolerate = o.tolerate;
    if o.finished {
        let ratio = format!(
            "{failed} of {total} nodes failed ({:.1}%)",
            failed as f64 * 100.0 / total as f64
        );
        return if o.reached {
            let reason = match o.tally.not_started {
                0 => format!("{ratio}, reaching failureTolerate {tolerate}"),
                n => format!("{ratio}, reaching failureTolerate {tolerate}; {n} nodes not started"),
            };
            verdict(
                state::FAILED,
                failed_event,
                Some(action::FAILURE),
                Some(reason),
            )
        } else {
            let reason = (failed > 0).then(|| format!("{ratio}, below failureTolerate {tolerate}"));
            verdict(
                state::SUCCESSFUL,
                working.event,
                Some(action::SUCCESS),
                reason,
            )
        };
    }
    if o.started {
        let stopping = if o.reached {
            ", failureTolerate reached: starting no more nodes"
        } else {
            ""
        };
        let reason = format!(
            "{} of {total} nodes finished ({failed} failed), {} {}{stopping}",
            o.tally.succeeded + failed,
            o.tally.active,
            working.verb
        );
        return verdict(working.state, working.event, None, Some(reason));
    }
    let waiting = "waiting for the nodes' NodeImages".to_string();
    verdict(state::INIT, event::INIT, None, Some(waiting))
}

fn verdict(
    state: &'static str,
    event: &'static str,
    action: Option<&'static str>,
    reason: Option<String>,
) -> Verdict {
    Verdict {
        state,
        event,
        action,
        reason,
    }
}

/// The job's phase for `v`: its time stays `old`'s while state, event and
/// action do not change, else it is now.
pub fn stamp(old: &Phase, v: Verdict, now: DateTime<Utc>) -> Phase {
    let mut phase = Phase {
        state: Some(v.state.into()),
        event: Some(v.event.into()),
        action: v.action.map(str::to_string),
        reason: v.reason,
        time: None,
    };
    phase.time = if super::rows::same_step(old, &phase) {
        old.time.clone()
    } else {
        Some(rfc3339(now))
    };
    phase
}

/// The event of a failed job: the one its failed nodes share, when the
/// kind reports it, else the working event.
pub fn failed_job_event<K: NodeTask>(rows: &[K::Row]) -> &'static str {
    let events: BTreeSet<&str> = rows
        .iter()
        .filter_map(|r| K::task(r))
        .filter(|s| s.phase.state.as_deref() == Some(state::FAILED))
        .filter_map(|s| s.phase.event.as_deref())
        .collect();
    match events.into_iter().collect::<Vec<_>>().as_slice() {
        [one] => K::FAILURE_EVENTS
            .iter()
            .copied()
            .find(|e| e == one)
            .unwrap_or(K::WORKING.event),
        _ => K::WORKING.event,
    }
}

/// The Finished event of a job that finished with `phase`; `all_done` is
/// the note of a job without a reason (no failures).
pub fn finished_event(phase: &Phase, all_done: impl FnOnce() -> String) -> JobEvent {
    let job_state = phase.state.as_deref().unwrap_or_default();
    JobEvent {
        warning: job_state == state::FAILED,
        reason: "Finished",
        note: match &phase.reason {
            Some(r) => format!("Finished {job_state}: {r}"),
            None => format!("Finished {job_state}: {}", all_done()),
        },
    }
}

/// The job fails before any node starts.
pub fn fail_at_init<K: NodeTask>(
    mut events: Vec<JobEvent>,
    reason: String,
    now: DateTime<Utc>,
) -> Planned<K> {
    events.push(JobEvent::warning(
        "Finished",
        format!("Finished {}: {reason}", state::FAILED),
    ));
    let phase = Phase {
        state: Some(state::FAILED.into()),
        event: Some(event::INIT.into()),
        action: Some(action::FAILURE.into()),
        reason: Some(reason),
        time: Some(rfc3339(now)),
    };
    Planned::done(false, phase, events)
}

#[cfg(test)]
mod tests;
