//! One step of a KubeEdge node task: from the job's status so far, the
//! Nodes, the NodeImages and the clock, the job's next status, the nodes to
//! write entries to, the events and when to look again. Pure.

use super::{
    Announce, Job, NodeTask, Phase, Precheck, action, event, is_final, node_timeout, state,
};
use crate::jobevents::JobEvent;
use crate::nodes::NodeInfo;
use crate::rollout::{self, Entry, EntryState, NodeState, cap, rfc3339};
use chrono::{DateTime, TimeDelta, Utc};
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::kubeedge::TaskStatus;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

/// Why a named node that is no edge node does not run a KubeEdge task.
pub const NOT_EDGE: &str =
    "not an edge node: KubeEdge node tasks run only on nodes labelled node-role.kubernetes.io/edge";

/// One node's situation in this step.
pub enum Node<K: NodeTask> {
    /// Finished before: kept verbatim.
    Final(K::Row),
    /// Failed before starting (event Init).
    Rejected(String),
    /// Needs nothing (the kind's precheck): succeeded at once.
    Skipped,
    /// Waiting for its NodeImage to exist.
    NoNodeImage,
    /// Known through its entries.
    Tracked {
        /// Where the node stands.
        state: NodeState,
        /// What its NodeImage reports.
        detail: K::Detail,
        /// It failed in this step by running out of time.
        timed_out: bool,
    },
}

impl<K: NodeTask> Node<K> {
    fn node_state(&self) -> NodeState {
        match self {
            Node::Final(r) => {
                let t = K::task(r).cloned().unwrap_or_default();
                if t.phase.state.as_deref() == Some(state::SUCCESSFUL) {
                    NodeState::Succeeded
                } else {
                    NodeState::Failed(t.phase.reason.unwrap_or_default())
                }
            }
            Node::Rejected(reason) => NodeState::Failed(reason.clone()),
            Node::Skipped => NodeState::Succeeded,
            Node::NoNodeImage => NodeState::NotStarted,
            Node::Tracked { state, .. } => state.clone(),
        }
    }
}

/// What the engine decided.
pub struct Planned<K: NodeTask> {
    /// The job had finished before: nothing changes.
    pub was_finished: bool,
    /// The job's new phase.
    pub phase: Phase,
    /// The per-node rows, summarised to fit; None: as they were (the job
    /// finished before, or fails before any node starts).
    pub rows: Option<Vec<K::Row>>,
    /// Each node's situation, in row order.
    pub nodes: Vec<(String, Node<K>)>,
    /// Nodes to write the entries to: newly started ones, and working ones
    /// whose entries may need to follow a spec edit.
    pub write_to: Vec<String>,
    /// Events to publish once the status is written.
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<Duration>,
    /// Every node has finished (now or before).
    pub finished: bool,
    /// How far the rows were summarised.
    pub summarised: K::Summary,
}

impl<K: NodeTask> Planned<K> {
    /// A final step: the phase, no rows to change, nothing to write.
    fn done(was_finished: bool, phase: Phase, events: Vec<JobEvent>) -> Self {
        Planned {
            was_finished,
            phase,
            rows: None,
            nodes: vec![],
            write_to: vec![],
            events,
            requeue_after: None,
            finished: true,
            summarised: K::Summary::default(),
        }
    }
}

/// Decides the job's next step.
pub fn step<K: NodeTask>(
    kind: &K,
    job: Job<'_, K::Row>,
    nodes: &BTreeMap<String, NodeInfo>,
    nodeimages: &BTreeMap<String, Arc<NodeImage>>,
    now: DateTime<Utc>,
) -> Planned<K> {
    let old = &job.old;
    if is_final(old.state.as_deref()) {
        return Planned::done(true, old.clone(), vec![]);
    }
    let mut events = Vec::new();
    let first_look = old.state.as_deref().unwrap_or_default().is_empty();
    if first_look && K::ANNOUNCE == Announce::AtFirstLook {
        events.push(JobEvent::normal("Started", kind.started(None)));
    }
    let entries = match &job.entries {
        Ok(e) => e.clone(),
        Err(e) => return fail_at_init(events, e.clone(), now),
    };
    let tolerance = match rollout::parse_tolerance(job.failure_tolerate) {
        Ok(v) => v,
        Err(e) => return fail_at_init(events, e, now),
    };
    let timeout = crate::clock::seconds(node_timeout(job.timeout_seconds));
    let concurrency = usize::try_from(job.concurrency.unwrap_or(1).max(1)).unwrap_or(1);

    // The node set: as recorded, else selected now.
    let recorded: Vec<String> = job
        .old_rows
        .iter()
        .filter_map(|r| K::task(r)?.node_name.clone())
        .collect();
    let names = if recorded.is_empty() {
        match rollout::select_nodes(job.node_names, job.label_selector, nodes, job.edge_only) {
            Ok(n) => n,
            Err(e) => return fail_at_init(events, e, now),
        }
    } else {
        recorded
    };
    if first_look && K::ANNOUNCE == Announce::OnceSelected {
        events.push(JobEvent::normal("Started", kind.started(Some(names.len()))));
    }
    if names.is_empty() {
        return fail_at_init(events, "no node matches labelSelector".into(), now);
    }
    let old_rows: HashMap<&str, &K::Row> = job
        .old_rows
        .iter()
        .filter_map(|r| Some((K::task(r)?.node_name.as_deref()?, r)))
        .collect();
    let old_final = |name: &str| {
        old_rows
            .get(name)
            .and_then(|r| K::task(r))
            .is_some_and(|t| is_final(t.phase.state.as_deref()))
    };

    let track = Tracker {
        kind,
        edge_only: job.edge_only,
        nodes,
        nodeimages,
        entries: &entries,
        uid: &job.uid,
        timeout,
        now,
    };
    let mut rows: Vec<(String, Node<K>)> = names
        .iter()
        .map(|name| {
            let row = match old_rows.get(name.as_str()) {
                Some(r) if old_final(name) => Node::Final((*r).clone()),
                _ => track.node(name),
            };
            (name.clone(), row)
        })
        .collect();

    // The budget: nodes without a NodeImage cannot start yet.
    let budget: Vec<(String, NodeState)> = rows
        .iter()
        .filter(|(_, r)| !matches!(r, Node::NoNodeImage))
        .map(|(n, r)| (n.clone(), r.node_state()))
        .collect();
    // Fail fast: once failures reach the tolerance, no further node starts.
    let failed_before = budget
        .iter()
        .filter(|(_, s)| matches!(s, NodeState::Failed(_)))
        .count();
    let stopping = rollout::tolerance_reached(failed_before, names.len(), tolerance);
    let start: BTreeSet<String> = if stopping {
        BTreeSet::new()
    } else {
        rollout::to_start(&budget, concurrency)
            .into_iter()
            .collect()
    };
    for (name, row) in rows.iter_mut() {
        if start.contains(name) {
            *row = Node::Tracked {
                state: NodeState::Active(Some(now)),
                detail: kind.fresh(entries.len(), now),
                timed_out: false,
            };
        }
    }
    let states: Vec<(String, NodeState)> = rows
        .iter()
        .map(|(n, r)| (n.clone(), r.node_state()))
        .collect();
    let tally = rollout::tally(&states);
    let reached = rollout::tolerance_reached(tally.failed.len(), tally.desired, tolerance);
    let finished = tally.finished() || (reached && tally.active == 0);

    // Per-node status.
    let mut node_rows: Vec<K::Row> = rows
        .iter()
        .map(|(name, row)| render(kind, name, row))
        .map(|r| keep_time::<K>(r, &old_rows, now))
        .collect();
    let summarised = K::summarise(&mut node_rows, job.status_budget);

    // Job status.
    let total = tally.desired;
    let failed = tally.failed.len();
    let started = states.iter().any(|(_, s)| *s != NodeState::NotStarted);
    let tolerate_text = job.failure_tolerate.unwrap_or("0.1");
    let working = K::WORKING;
    let (job_state, job_event, job_action, reason) = if finished {
        let ratio = format!(
            "{failed} of {total} nodes failed ({:.1}%)",
            failed as f64 * 100.0 / total as f64
        );
        if reached {
            (
                state::FAILED,
                failed_job_event::<K>(&node_rows),
                Some(action::FAILURE),
                Some(match tally.not_started {
                    0 => format!("{ratio}, reaching failureTolerate {tolerate_text}"),
                    n => format!(
                        "{ratio}, reaching failureTolerate {tolerate_text}; {n} nodes not started"
                    ),
                }),
            )
        } else {
            (
                state::SUCCESSFUL,
                working.event,
                Some(action::SUCCESS),
                (failed > 0).then(|| format!("{ratio}, below failureTolerate {tolerate_text}")),
            )
        }
    } else if started {
        let stopping = if reached {
            ", failureTolerate reached: starting no more nodes"
        } else {
            ""
        };
        (
            working.state,
            working.event,
            None,
            Some(format!(
                "{} of {total} nodes finished ({failed} failed), {} {}{stopping}",
                tally.succeeded + failed,
                tally.active,
                working.verb
            )),
        )
    } else {
        (
            state::INIT,
            event::INIT,
            None,
            Some("waiting for the nodes' NodeImages".to_string()),
        )
    };
    let same_phase = old.state.as_deref() == Some(job_state)
        && old.event.as_deref() == Some(job_event)
        && old.action.as_deref() == job_action;
    let phase = Phase {
        state: Some(job_state.into()),
        event: Some(job_event.into()),
        action: job_action.map(str::to_string),
        reason,
        time: if same_phase {
            old.time.clone()
        } else {
            Some(rfc3339(now))
        },
    };

    // Events: nodes newly finished, and the end.
    let node_events: Vec<JobEvent> = node_rows
        .iter()
        .filter_map(|r| K::task(r))
        .filter(|t| is_final(t.phase.state.as_deref()))
        .filter(|t| !t.node_name.as_deref().is_some_and(old_final))
        .filter_map(|t| kind.node_event(t))
        .collect();
    let more = node_events.len().saturating_sub(super::MAX_NODE_EVENTS);
    events.extend(node_events.into_iter().take(super::MAX_NODE_EVENTS));
    if more > 0 {
        events.push(K::more_nodes(more));
    }
    if finished {
        events.push(JobEvent {
            warning: job_state == state::FAILED,
            reason: "Finished",
            note: match &phase.reason {
                Some(r) => format!("Finished {job_state}: {r}"),
                None => format!("Finished {job_state}: {}", kind.all_done(total)),
            },
        });
    }

    let write_to: Vec<String> = rows
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                Node::Tracked {
                    state: NodeState::Active(_),
                    ..
                }
            )
        })
        .map(|(n, _)| n.clone())
        .collect();
    let requeue_after = (!finished).then(|| {
        let mut wait = super::RUNNING_RESYNC;
        for (_, s) in &states {
            if let Some(at) = rollout::node_timeout_at(s, timeout) {
                let d = (at - now).to_std().unwrap_or(Duration::from_secs(1));
                wait = wait.min(d.max(Duration::from_secs(1)));
            }
        }
        if rows.iter().any(|(_, r)| matches!(r, Node::NoNodeImage)) {
            wait = wait.min(super::NODEIMAGE_WAIT);
        }
        wait
    });
    Planned {
        was_finished: false,
        phase,
        rows: Some(node_rows),
        nodes: rows,
        write_to,
        events,
        requeue_after,
        finished,
        summarised,
    }
}

/// What tracking a node reads.
struct Tracker<'a, K> {
    kind: &'a K,
    edge_only: bool,
    nodes: &'a BTreeMap<String, NodeInfo>,
    nodeimages: &'a BTreeMap<String, Arc<NodeImage>>,
    entries: &'a [Entry],
    uid: &'a str,
    timeout: TimeDelta,
    now: DateTime<Utc>,
}

impl<K: NodeTask> Tracker<'_, K> {
    /// Where a node without a final result stands.
    fn node(&self, name: &str) -> Node<K> {
        let ni = self.nodeimages.get(name);
        let states = ni.map(|ni| rollout::entry_states(ni, self.entries, self.uid));
        let started = states
            .as_ref()
            .is_some_and(|s| s.iter().any(|e| *e != EntryState::Missing));
        if !started {
            if let Some(why) = rollout::unstartable(self.nodes.get(name)) {
                return Node::Rejected(why);
            }
            if self.edge_only
                && self
                    .nodes
                    .get(name)
                    .is_some_and(|n| !rollout::is_edge_node(n))
            {
                return Node::Rejected(NOT_EDGE.into());
            }
            match self.kind.precheck(name) {
                Some(Precheck::Reject(why)) => return Node::Rejected(why),
                Some(Precheck::Skip) => return Node::Skipped,
                None => {}
            }
        }
        let (Some(ni), Some(states)) = (ni, states) else {
            return Node::NoNodeImage;
        };
        let detail = self.kind.detail(ni, self.entries, self.uid, &states);
        let pairs: Vec<(Entry, EntryState)> = self.entries.iter().cloned().zip(states).collect();
        let before = self.kind.settle(rollout::node_state(&pairs), &detail);
        let after = rollout::apply_node_timeout(before.clone(), self.timeout, self.now);
        let timed_out = before != after;
        Node::Tracked {
            state: after,
            detail,
            timed_out,
        }
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
fn render<K: NodeTask>(kind: &K, name: &str, row: &Node<K>) -> K::Row {
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
fn keep_time<K: NodeTask>(
    mut row: K::Row,
    old_rows: &HashMap<&str, &K::Row>,
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
        .and_then(|n| old_rows.get(n))
        .and_then(|r| K::task(r));
    let own = ns.phase.time.take();
    ns.phase.time = match old {
        Some(o)
            if o.phase.state == ns.phase.state
                && o.phase.event == ns.phase.event
                && o.phase.action == ns.phase.action =>
        {
            o.phase.time.clone().or(own)
        }
        _ => own,
    }
    .or_else(|| Some(rfc3339(now)));
    row
}

/// The event of a failed job: the one its failed nodes share, else the
/// working event.
fn failed_job_event<K: NodeTask>(rows: &[K::Row]) -> &'static str {
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

/// The job fails before any node starts.
fn fail_at_init<K: NodeTask>(
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
