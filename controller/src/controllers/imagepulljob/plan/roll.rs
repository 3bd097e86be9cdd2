//! Which of an ImagePullJob's nodes start in this step: within
//! `parallelism`, the registry's cap and the P2P rules (`engine::p2p`),
//! none past the job's deadline or while a pull secret is refused. Pure.

use crate::engine::p2p::{Verdict, observe::Observed};
use crate::engine::rollout::{self, NodeState, Starts, Tally};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodeimage_api::kruise::ImagePullJob;
use nodeimage_api::kruise::nodeimage::contract::past_its_deadline;

/// Where the job's nodes stand after this step.
pub(super) struct Rollout {
    /// The nodes by state (past the deadline, working ones failed).
    pub tally: Tally,
    /// Nodes that start now, and how many the job's budget wanted.
    pub start: Starts,
    /// Nodes to write the entry to: every node holding it (so it follows
    /// an edited spec) and those that start.
    pub write_to: Vec<String>,
    /// activeDeadlineSeconds has passed.
    pub past_deadline: bool,
    /// What the P2P rules held back or sent to the registry directly.
    pub p2p: Verdict,
}

/// How many nodes pull at once: `parallelism`, 1 when unset.
fn parallelism(p: Option<&IntOrString>) -> usize {
    match p {
        None => 1,
        Some(IntOrString::Int(n)) => (*n).max(0) as usize,
        Some(IntOrString::String(s)) => s.trim().parse().unwrap_or(1),
    }
}

/// What bounds the step besides the nodes.
pub(super) struct Bounds<'a> {
    /// activeDeadlineSeconds as a time.
    pub deadline: Option<DateTime<Utc>>,
    /// Why the job's pull secrets are refused, if they are.
    pub refused: Option<&'a str>,
    /// The registry's free slots.
    pub cap: Option<&'a rollout::Cap>,
    /// The P2P settings and what they read.
    pub p2p: &'a Observed,
    /// The job's start.
    pub started: DateTime<Utc>,
}

/// Starts nodes within `parallelism`, the registry's cap and the P2P rules,
/// none past the job's deadline (which fails the working ones) or while a
/// named pull secret is refused (which fails every unfinished node with why).
pub(super) fn roll_out(
    job: &ImagePullJob,
    nodes: Vec<(String, NodeState)>,
    b: &Bounds<'_>,
    now: DateTime<Utc>,
) -> Rollout {
    let past_deadline = b.deadline.is_some_and(|d| now >= d);
    // Every node holding the job's entry keeps it in step with the job's spec
    // (an edited pull policy or TTL reaches finished nodes too).
    let mut write_to: Vec<String> = nodes
        .iter()
        .filter(|(_, s)| *s != NodeState::NotStarted)
        .map(|(n, _)| n.clone())
        .collect();
    let (nodes, start, p2p) = if past_deadline {
        let failed = rollout::apply_deadline(nodes, "job exceeds activeDeadlineSeconds");
        (failed, Starts::default(), Verdict::default())
    } else if let Some(why) = b.refused {
        let failed = rollout::apply_deadline(nodes, why);
        (failed, Starts::default(), Verdict::default())
    } else {
        let limit = parallelism(job.spec.template.parallelism.as_ref());
        // Every failed node of an ImagePullJob had its entry: it pulled.
        let mut v = b.p2p.verdict(nodes, b.started, &Default::default(), now);
        let start = rollout::to_start_paced(&v.startable, limit, b.cap, &v.from_peers);
        let nodes = std::mem::take(&mut v.nodes);
        (nodes, start, v)
    };
    write_to.extend(start.nodes.iter().cloned());
    let tally = rollout::tally(&nodes);
    // A node that failed on its entry's activeDeadlineSeconds (the job's,
    // counted from the entry's createdAt) ran into the job's deadline too,
    // also when the job's recorded start is a second or two later than the
    // entry's creation (a start written by a later reconcile).
    let ran_out = b.deadline.is_some()
        && !tally.failed.is_empty()
        && tally.failed.iter().all(|(_, m)| past_its_deadline(m));
    Rollout {
        tally,
        start,
        write_to,
        past_deadline: past_deadline || ran_out,
        p2p,
    }
}
