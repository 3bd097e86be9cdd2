//! ImagePrePullJob as a node task of the engine: the entries every
//! working node gets, and each node's row from what its NodeImage reports.
//! Pure.

use super::{
    MAX_REASON_CHARS, Secrets, Summary, check_items, entry_pull_policy, event, failure_event,
    owner_ref, state,
};
use crate::engine::jobevents::JobEvent;
use crate::engine::nodetasks::{self, Announce, NodeReader, NodeTask, Precheck, Working, action};
use crate::engine::rollout::{Entry, EntryState, NodeState, rfc3339};
use crate::messages::cap;
use crate::nodeimage::entries::EntryRequest;
use chrono::{DateTime, Utc};
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::kubeedge::{
    ImagePrePullJob, ImagePrePullStatus, PrePullImageStatus, TaskStatus,
};
use std::collections::BTreeMap;

/// ImagePrePullJob as a node task.
pub struct PrePull<'a> {
    /// The job.
    pub job: &'a ImagePrePullJob,
    /// Each image of the job with its entry.
    pub images: Vec<(String, Entry)>,
    /// The distinct entries.
    pub entries: Vec<Entry>,
    /// The job's image secret, as the shell found it.
    pub secrets: &'a Secrets,
}

impl PrePull<'_> {
    /// The entries every working node gets.
    pub fn requests(&self) -> Vec<EntryRequest> {
        let owner = owner_ref(self.job);
        let policy = entry_pull_policy(self.job);
        let checks = Some(check_items(self.job)).filter(|c| !c.is_empty());
        let secrets = match self.secrets {
            Secrets::Copied(s) => s.clone(),
            _ => vec![],
        };
        self.entries
            .iter()
            .map(|e| EntryRequest {
                image: e.image.clone(),
                tag: e.tag.clone(),
                owner: owner.clone(),
                pull_policy: policy.clone(),
                image_pull_policy: Some("IfNotPresent".into()),
                secrets: secrets.clone(),
                sandbox: None,
                check_items: checks.clone(),
                pull_again_before: None,
                p2p: None,
            })
            .collect()
    }
}

impl NodeReader for PrePull<'_> {
    type Detail = Vec<EntryState>;

    fn precheck(&self, _: &str) -> Option<Precheck> {
        match self.secrets {
            Secrets::Missing(why) => Some(Precheck::Reject(why.clone())),
            _ => None,
        }
    }

    fn detail(&self, _: &NodeImage, _: &[Entry], _: &str, states: &[EntryState]) -> Self::Detail {
        states.to_vec()
    }

    fn fresh(&self, entries: usize, now: DateTime<Utc>) -> Self::Detail {
        vec![EntryState::Active(Some(now)); entries]
    }
}

impl NodeTask for PrePull<'_> {
    type Row = ImagePrePullStatus;
    type Summary = Summary;
    const WORKING: Working = Working {
        state: state::PULLING,
        event: event::PULL,
        verb: "pulling",
    };
    const FAILURE_EVENTS: &'static [&'static str] = &[event::INIT, event::CHECK, event::TIMEOUT];
    const MAX_REASON_CHARS: usize = MAX_REASON_CHARS;
    const ANNOUNCE: Announce = Announce::AtFirstLook;

    fn task(row: &ImagePrePullStatus) -> Option<&TaskStatus> {
        row.node_status.as_ref()
    }

    fn task_mut(row: &mut ImagePrePullStatus) -> Option<&mut TaskStatus> {
        row.node_status.as_mut()
    }

    fn row(task: TaskStatus) -> ImagePrePullStatus {
        ImagePrePullStatus {
            node_status: Some(task),
            image_status: None,
        }
    }

    fn started(&self, _: Option<usize>) -> String {
        format!(
            "Started pre-pulling {}",
            self.job.spec.image_pre_pull_template.images.join(", ")
        )
    }

    fn render(
        &self,
        name: &str,
        node_state: &NodeState,
        states: &Vec<EntryState>,
        timed_out: bool,
    ) -> ImagePrePullStatus {
        let by_entry: BTreeMap<&Entry, &EntryState> = self.entries.iter().zip(states).collect();
        let image_status: Vec<PrePullImageStatus> = self
            .images
            .iter()
            .filter_map(|(image, e)| {
                let (st, reason) = match by_entry.get(e) {
                    Some(EntryState::Succeeded) => (state::SUCCESSFUL, None),
                    Some(EntryState::Failed(m)) => (state::FAILED, Some(m.clone())),
                    _ if timed_out => (
                        state::FAILED,
                        Some("timed out before this image was pulled".to_string()),
                    ),
                    _ => return None,
                };
                Some(PrePullImageStatus {
                    image: Some(image.clone()),
                    state: Some(st.into()),
                    reason: reason.map(|r| cap(&r, MAX_REASON_CHARS)),
                })
            })
            .collect();
        let node_status = match node_state {
            NodeState::Active(since) => {
                let mut s = nodetasks::task(name, state::PULLING, Some(event::PULL), None, None, 0);
                s.phase.time = since.map(rfc3339);
                s
            }
            NodeState::Succeeded => nodetasks::succeeded(name, event::PULL, None, 0),
            NodeState::Failed(reason) if timed_out => {
                nodetasks::timed_out(name, reason, MAX_REASON_CHARS)
            }
            NodeState::Failed(_) | NodeState::NotStarted => {
                let failures: Vec<&str> = states
                    .iter()
                    .filter_map(|s| match s {
                        EntryState::Failed(m) => Some(m.as_str()),
                        _ => None,
                    })
                    .collect();
                let ev = failures
                    .iter()
                    .map(|m| failure_event(m))
                    .find(|e| *e != event::PULL)
                    .unwrap_or(event::PULL);
                let reason = Some(distinct(&failures).join("; "));
                let (st, act) = (state::FAILED, Some(action::FAILURE));
                nodetasks::task(name, st, Some(ev), act, reason, MAX_REASON_CHARS)
            }
        };
        ImagePrePullStatus {
            node_status: Some(node_status),
            image_status: (!image_status.is_empty()).then_some(image_status),
        }
    }

    fn summarise(rows: &mut [ImagePrePullStatus], budget: usize) -> Summary {
        super::summarise(rows, budget)
    }

    fn node_event(&self, t: &TaskStatus) -> Option<JobEvent> {
        (t.phase.state.as_deref() == Some(state::FAILED)).then(|| {
            JobEvent::warning(
                "NodeFailed",
                format!(
                    "Node {} failed ({}): {}",
                    t.node_name.as_deref().unwrap_or_default(),
                    t.phase.event.as_deref().unwrap_or_default(),
                    t.phase.reason.as_deref().unwrap_or_default()
                ),
            )
        })
    }

    fn more_nodes(n: usize) -> JobEvent {
        JobEvent::warning("NodeFailed", format!("{n} more nodes failed; see status"))
    }

    fn all_done(&self, total: usize) -> String {
        format!("all {total} nodes pulled")
    }
}

/// The distinct messages, in order.
fn distinct<'a>(messages: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for m in messages {
        if !out.contains(m) {
            out.push(m);
        }
    }
    out
}
