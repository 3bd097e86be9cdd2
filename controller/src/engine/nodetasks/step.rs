//! One step of a KubeEdge node task: from the job's status so far, the
//! Nodes, the NodeImages and the clock, the job's next status, the nodes to
//! write entries to, the events and when to look again. Pure.
//!
//! The step runs in named phases, each deciding one thing: `prepare` (the
//! job's settings and its node set), `track` (where each node stands),
//! `starting` (which nodes start now), the rows (`rows`), the verdict
//! (`verdict`), `node_events`, `write_to` and `next_look`.

use super::outcome::{Node, Planned};
use super::rows::{self, Recorded};
use super::track::Tracker;
use super::verdict::{self, Outcome};
use super::{Announce, Job, NodeTask, is_final, node_timeout};
use crate::engine::jobevents::JobEvent;
use crate::engine::p2p::Verdict;
use crate::engine::rollout::{self, Entry, NodeState, Starts};
use crate::nodeimage::nodes::NodeInfo;
use chrono::{DateTime, TimeDelta, Utc};
use nodeimage_api::kruise::{NodeImage, TagP2p};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// What the job's settings and recorded rows fix for this step.
struct Setup<'a, K: NodeTask> {
    /// The entries every node gets.
    entries: Vec<Entry>,
    /// `failureTolerate`, parsed.
    tolerance: f64,
    /// The node timeout.
    timeout: TimeDelta,
    /// Most nodes working at once.
    concurrency: usize,
    /// Most nodes starting now by the registries' free slots.
    registry_cap: Option<&'a crate::engine::rollout::Cap>,
    /// The job's nodes, in row order.
    names: Vec<String>,
    /// The rows so far.
    recorded: Recorded<'a, K>,
    /// The P2P rules and the job's start.
    p2p: Option<(&'a crate::engine::p2p::observe::Observed, DateTime<Utc>)>,
}

/// Decides the job's next step.
pub fn step<K: NodeTask>(
    kind: &K,
    job: Job<'_, K::Row>,
    nodes: &BTreeMap<String, NodeInfo>,
    nodeimages: &BTreeMap<String, Arc<NodeImage>>,
    now: DateTime<Utc>,
) -> Planned<K> {
    if is_final(job.old.state.as_deref()) {
        return Planned::done(true, job.old.clone(), vec![]);
    }
    let mut events = Vec::new();
    let setup = match prepare(kind, &job, nodes, &mut events) {
        Ok(s) => s,
        Err(reason) => return verdict::fail_at_init(events, reason, now),
    };
    let track = Tracker {
        kind,
        edge_only: job.edge_only,
        nodes,
        nodeimages,
        entries: &setup.entries,
        uid: &job.uid,
        timeout: setup.timeout,
        now,
    };
    let (situation, starts, p2p) = situations(kind, &setup, &track, now);
    let states: Vec<(String, NodeState)> = situation
        .iter()
        .map(|(n, r)| (n.clone(), r.node_state()))
        .collect();
    let tally = rollout::tally(&states);
    let reached = rollout::tolerance_reached(tally.failed.len(), tally.desired, setup.tolerance);
    let finished = tally.finished() || (reached && tally.active == 0);

    let mut node_rows: Vec<K::Row> = situation
        .iter()
        .map(|(name, row)| rows::render(kind, name, row))
        .map(|r| rows::keep_time::<K>(r, &setup.recorded, now))
        .collect();
    let summarised = K::summarise(&mut node_rows, job.status_budget);
    let outcome = Outcome {
        tally: &tally,
        reached,
        finished,
        started: states.iter().any(|(_, s)| *s != NodeState::NotStarted),
        tolerate: job.task.failure_tolerate.unwrap_or("0.1"),
    };
    let failed_event = verdict::failed_job_event::<K>(&node_rows);
    let v = verdict::judge(&outcome, K::WORKING, failed_event);
    let phase = verdict::stamp(&job.old, v, now);
    events.extend(node_events(kind, &node_rows, &setup.recorded));
    if finished {
        events.push(verdict::finished_event(&phase, || {
            kind.all_done(tally.desired)
        }));
    }
    let look = Look {
        timeout: setup.timeout,
        waiting_for_nodeimage: situation
            .iter()
            .any(|(_, r)| matches!(r, Node::NoNodeImage)),
        p2p_wake: p2p.wake_at,
    };
    Planned {
        was_finished: false,
        phase,
        requeue_after: (!finished).then(|| next_look(&states, &look, now)),
        rows: Some(node_rows),
        write_to: write_to(&situation),
        starts,
        p2p: p2p.notes,
        nodes: situation,
        events,
        finished,
        summarised,
    }
}

/// The nodes a KubeEdge job works on: those its rows recorded (a job picks
/// its nodes once), else those it selects now. The one rule, read by the
/// step and by the start-up gate.
pub fn job_nodes(
    recorded: Vec<String>,
    task: &super::Task<'_>,
    nodes: &BTreeMap<String, NodeInfo>,
    edge_only: bool,
) -> Result<Vec<String>, String> {
    if recorded.is_empty() {
        rollout::select_nodes(task.node_names, task.label_selector, nodes, edge_only)
    } else {
        Ok(recorded)
    }
}

/// The job's settings, parsed, and its node set: as recorded, else
/// selected now. Announces the start as the kind wants; an error fails the
/// job before any node starts.
fn prepare<'a, K: NodeTask>(
    kind: &K,
    job: &Job<'a, K::Row>,
    nodes: &BTreeMap<String, NodeInfo>,
    events: &mut Vec<JobEvent>,
) -> Result<Setup<'a, K>, String> {
    let first_look = job.old.state.as_deref().unwrap_or_default().is_empty();
    if first_look && K::ANNOUNCE == Announce::AtFirstLook {
        events.push(JobEvent::normal("Started", kind.started(None)));
    }
    let entries = job.entries.clone()?;
    let tolerance = rollout::parse_tolerance(job.task.failure_tolerate)?;
    let timeout = crate::runtime::clock::seconds(node_timeout(job.task.timeout_seconds));
    let concurrency = usize::try_from(job.task.concurrency.unwrap_or(1).max(1)).unwrap_or(1);
    let recorded: Vec<String> = job
        .old_rows
        .iter()
        .filter_map(|r| K::task(r)?.node_name.clone())
        .collect();
    let names = job_nodes(recorded, &job.task, nodes, job.edge_only)?;
    if first_look && K::ANNOUNCE == Announce::OnceSelected {
        events.push(JobEvent::normal("Started", kind.started(Some(names.len()))));
    }
    if names.is_empty() {
        return Err("no node matches labelSelector".into());
    }
    Ok(Setup {
        entries,
        tolerance,
        timeout,
        concurrency,
        registry_cap: job.registry_cap,
        p2p: job.p2p,
        names,
        recorded: Recorded::of(job.old_rows),
    })
}

/// What the P2P rules add to a step.
#[derive(Default)]
struct P2pStep {
    /// What each node starting now records of its P2P start.
    notes: BTreeMap<String, TagP2p>,
    /// When a held node's wait for its agent ends (the job looks again then).
    wake_at: Option<DateTime<Utc>>,
}

/// Each node's situation: its recorded result, else where it stands, and
/// working from now on if it starts in this step; the step's starts, and
/// what the P2P rules add.
fn situations<K: NodeTask>(
    kind: &K,
    setup: &Setup<'_, K>,
    track: &Tracker<'_, K>,
    now: DateTime<Utc>,
) -> (Vec<(String, Node<K>)>, Starts, P2pStep) {
    let recorded = &setup.recorded;
    let mut rows: Vec<(String, Node<K>)> = setup
        .names
        .iter()
        .map(|name| match recorded.get(name) {
            Some(r) if recorded.is_final(name) => (name.clone(), Node::Final(r.clone())),
            _ => (name.clone(), track.node(name)),
        })
        .collect();
    let all = budget(&rows);
    let (budget, verdict) = held_back(&mut rows, all, setup.p2p, now);
    let no_peers = BTreeSet::new();
    let starts = starting(
        &budget,
        rows.len(),
        setup.tolerance,
        (setup.concurrency, setup.registry_cap),
        verdict.as_ref().map_or(&no_peers, |v| &v.from_peers),
    );
    let p2p = match (setup.p2p, &verdict) {
        (Some((observed, _)), Some(v)) => P2pStep {
            notes: observed.notes(v, &starts.nodes),
            wake_at: v.wake_at,
        },
        _ => P2pStep::default(),
    };
    let start: BTreeSet<&String> = starts.nodes.iter().collect();
    for (_, row) in rows.iter_mut().filter(|(n, _)| start.contains(n)) {
        *row = Node::Tracked {
            state: NodeState::Active(Some(now)),
            detail: kind.fresh(setup.entries.len(), now),
            timed_out: false,
        };
    }
    (rows, starts, p2p)
}

/// The P2P rules over the budget (`engine::p2p`): held nodes get their
/// reason in their rows and leave the budget; nodes the rules skip fail
/// before they start. Returns the budget left and the rules' verdict
/// (none without P2P settings).
fn held_back<K: NodeTask>(
    rows: &mut [(String, Node<K>)],
    budget: Vec<(String, NodeState)>,
    p2p: Option<(&crate::engine::p2p::observe::Observed, DateTime<Utc>)>,
    now: DateTime<Utc>,
) -> (Vec<(String, NodeState)>, Option<Verdict>) {
    let Some((observed, started)) = p2p else {
        return (budget, None);
    };
    // Nodes refused before they started (recorded at Init) never pulled.
    let never_pulled: BTreeSet<String> =
        rows.iter()
            .filter(|(_, r)| match r {
                Node::Rejected(_) => true,
                Node::Final(row) => K::task(row)
                    .is_some_and(|t| t.phase.event.as_deref() == Some(super::event::INIT)),
                _ => false,
            })
            .map(|(n, _)| n.clone())
            .collect();
    let mut v = observed.verdict(budget, started, &never_pulled, now);
    let held: BTreeMap<&String, &String> = v.held.iter().map(|(n, w)| (n, w)).collect();
    let failed: BTreeMap<&String, &String> = v
        .nodes
        .iter()
        .filter_map(|(n, s)| match s {
            NodeState::Failed(why) => Some((n, why)),
            _ => None,
        })
        .collect();
    for (name, row) in rows.iter_mut() {
        let not_started = row.node_state() == NodeState::NotStarted;
        if let Some(why) = held.get(name).filter(|_| not_started) {
            *row = Node::Held((*why).clone());
        } else if let Some(why) = failed.get(name).filter(|_| not_started) {
            *row = Node::Rejected((*why).clone());
        }
    }
    (std::mem::take(&mut v.startable), Some(v))
}

/// The nodes the concurrency budget counts: all but those still waiting
/// for their NodeImage (they cannot start yet).
fn budget<K: NodeTask>(rows: &[(String, Node<K>)]) -> Vec<(String, NodeState)> {
    rows.iter()
        .filter(|(_, r)| !matches!(r, Node::NoNodeImage))
        .map(|(n, r)| (n.clone(), r.node_state()))
        .collect()
}

/// The nodes that start now: within `concurrency` and the registries'
/// cap (which `from_peers` nodes need no slot of), and none once the
/// failures among the `budget` reach the tolerance of the job's `total`
/// nodes (fail fast).
fn starting(
    budget: &[(String, NodeState)],
    total: usize,
    tolerance: f64,
    (concurrency, registry_cap): (usize, Option<&crate::engine::rollout::Cap>),
    from_peers: &BTreeSet<String>,
) -> Starts {
    let failed = budget
        .iter()
        .filter(|(_, s)| matches!(s, NodeState::Failed(_)))
        .count();
    if rollout::tolerance_reached(failed, total, tolerance) {
        return Starts::default();
    }
    rollout::to_start_paced(budget, concurrency, registry_cap, from_peers)
}

/// The events of nodes that finished in this step (their results were not
/// recorded before), the first [`super::MAX_NODE_EVENTS`] of them and a
/// sum of the rest.
fn node_events<K: NodeTask>(
    kind: &K,
    rows: &[K::Row],
    recorded: &Recorded<'_, K>,
) -> Vec<JobEvent> {
    let mut events: Vec<JobEvent> = rows
        .iter()
        .filter_map(|r| K::task(r))
        .filter(|t| is_final(t.phase.state.as_deref()))
        .filter(|t| !t.node_name.as_deref().is_some_and(|n| recorded.is_final(n)))
        .filter_map(|t| kind.node_event(t))
        .collect();
    let more = events.len().saturating_sub(super::MAX_NODE_EVENTS);
    events.truncate(super::MAX_NODE_EVENTS);
    if more > 0 {
        events.push(K::more_nodes(more));
    }
    events
}

/// The nodes to write the entries to: every working node.
fn write_to<K: NodeTask>(rows: &[(String, Node<K>)]) -> Vec<String> {
    rows.iter()
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
        .collect()
}

/// When an unfinished job looks again: at the next node timeout or the end
/// of a node's wait for its P2P agent (at least a second away), soon while
/// a node waits for its NodeImage, and at the latest after the running
/// resync.
fn next_look(states: &[(String, NodeState)], look: &Look, now: DateTime<Utc>) -> Duration {
    let until = |at: DateTime<Utc>| {
        let d = (at - now).to_std().unwrap_or(Duration::from_secs(1));
        d.max(Duration::from_secs(1))
    };
    let mut wait = super::RUNNING_RESYNC;
    for (_, s) in states {
        if let Some(at) = rollout::node_timeout_at(s, look.timeout) {
            wait = wait.min(until(at));
        }
    }
    if look.waiting_for_nodeimage {
        wait = wait.min(super::NODEIMAGE_WAIT);
    }
    if let Some(at) = look.p2p_wake {
        wait = wait.min(until(at));
    }
    wait
}

/// What besides the nodes' states sets when a job looks again.
struct Look {
    /// A node's timeout.
    timeout: TimeDelta,
    /// Some node waits for its NodeImage.
    waiting_for_nodeimage: bool,
    /// When a node held for its P2P agent stops waiting.
    p2p_wake: Option<DateTime<Utc>>,
}

#[cfg(test)]
mod tests;
