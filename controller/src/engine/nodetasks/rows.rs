//! The per-node rows of a KubeEdge job's status: the shared row shapes,
//! the row of each node's situation, and how a row keeps its time. Pure.

use super::outcome::Node;
use super::{NodeTask, Phase, action, event, is_final, state};
use crate::engine::rollout::{NodeState, rfc3339};
use crate::messages::cap;
use chrono::{DateTime, Utc};
use nodeimage_api::kubeedge::TaskStatus;
use std::collections::HashMap;

/// The rows the job's status held before this step, by node name.
pub struct Recorded<'a, K: NodeTask> {
    rows: HashMap<&'a str, &'a K::Row>,
}

impl<'a, K: NodeTask> Recorded<'a, K> {
    /// The named rows of `rows` (a row without a node name is left out).
    pub fn of(rows: &'a [K::Row]) -> Self {
        let rows = rows
            .iter()
            .filter_map(|r| Some((K::task(r)?.node_name.as_deref()?, r)))
            .collect();
        Recorded { rows }
    }

    /// The row of node `name`, if it had one.
    pub fn get(&self, name: &str) -> Option<&'a K::Row> {
        self.rows.get(name).copied()
    }

    /// Whether node `name`'s result was already recorded (final).
    pub fn is_final(&self, name: &str) -> bool {
        self.get(name)
            .and_then(|r| K::task(r))
            .is_some_and(|t| is_final(t.phase.state.as_deref()))
    }
}

/// A node status row of the shared shape.
pub fn task(
    name: &str,
    state: &str,
    event: Option<&str>,
    action: Option<&str>,
    reason: Option<String>,
    max_reason: usize,
) -> TaskStatus {
    TaskStatus {
        node_name: Some(name.to_string()),
        phase: Phase {
            state: Some(state.to_string()),
            event: event.map(str::to_string),
            action: action.map(str::to_string),
            reason: reason.map(|r| cap(&r, max_reason)),
            time: None,
        },
    }
}

/// The row of a node that succeeded, after step `event`.
pub fn succeeded(name: &str, event: &str, reason: Option<String>, max_reason: usize) -> TaskStatus {
    let act = Some(action::SUCCESS);
    task(
        name,
        state::SUCCESSFUL,
        Some(event),
        act,
        reason,
        max_reason,
    )
}

/// The row of a node that ran out of time (event TimeOut).
pub fn timed_out(name: &str, reason: &str, max_reason: usize) -> TaskStatus {
    let (ev, act) = (Some(event::TIMEOUT), Some(action::FAILURE));
    task(
        name,
        state::FAILED,
        ev,
        act,
        Some(reason.into()),
        max_reason,
    )
}

/// The status row of one node.
pub fn render<K: NodeTask>(kind: &K, name: &str, row: &Node<K>) -> K::Row {
    match row {
        Node::Final(r) => r.clone(),
        Node::Rejected(reason) => K::row(task(
            name,
            state::FAILED,
            Some(event::INIT),
            Some(action::FAILURE),
            Some(reason.clone()),
            K::MAX_REASON_CHARS,
        )),
        Node::Skipped => kind.render_skipped(name),
        Node::Held(why) => K::row(task(
            name,
            state::INIT,
            None,
            None,
            Some(why.clone()),
            K::MAX_REASON_CHARS,
        )),
        Node::NoNodeImage
        | Node::Tracked {
            state: NodeState::NotStarted,
            ..
        } => K::row(task(name, state::INIT, None, None, None, 0)),
        Node::Tracked {
            state,
            detail,
            timed_out,
        } => kind.render(name, state, detail, *timed_out),
    }
}

/// A node's `time` stays as it was while its state, event and action do
/// not change; a node entering a new phase gets its own time, or now.
pub fn keep_time<K: NodeTask>(
    mut row: K::Row,
    recorded: &Recorded<'_, K>,
    now: DateTime<Utc>,
) -> K::Row {
    let Some(ns) = K::task_mut(&mut row) else {
        return row;
    };
    if ns.phase.state.as_deref() == Some(state::INIT) {
        return row;
    }
    let old = ns
        .node_name
        .as_deref()
        .and_then(|n| recorded.get(n))
        .and_then(|r| K::task(r));
    let own = ns.phase.time.take();
    ns.phase.time = match old {
        Some(o) if same_step(&o.phase, &ns.phase) => o.phase.time.clone().or(own),
        _ => own,
    }
    .or_else(|| Some(rfc3339(now)));
    row
}

/// Whether two phases are the same step: state, event and action alike
/// (reason and time may differ).
pub fn same_step(a: &Phase, b: &Phase) -> bool {
    a.state == b.state && a.event == b.event && a.action == b.action
}
