//! What an ImageRemovalJob should do next, decided from a snapshot of the
//! Nodes, the NodeImages, the job (its status is the record of what it
//! decided before) and the clock. Pure. The rules, in one place:
//!
//! - **Which nodes**: `selector.names` in their order, or the Nodes whose
//!   labels match `matchLabels`/`matchExpressions`, or (no selector) every
//!   Node that gets a NodeImage. Read again on every look, so a node that
//!   joins while the job runs, or while its block is in force, is served too.
//! - **A node's turn**: its Node exists and is Ready, its NodeImage is
//!   there with a free place among its removal entries, and fewer than
//!   `parallelism` nodes hold an unanswered entry of the job.
//! - **A node's part** ends when its daemon answers (`status.removals`):
//!   succeeded (every image gone), kept (some image kept by a rule, none
//!   failed) or failed. A named node that does not exist fails.
//! - **The deadline** (`activeDeadlineSeconds` from `startTime`) fails every
//!   node that has not answered, and ends the job.
//! - **The end**: every selected node's part has ended. A job without block
//!   then looks no more: its status is its record, kept as it is (its
//!   entries stay until it is deleted); a block job keeps handing its entry
//!   to nodes its selector takes later.

use crate::engine::jobevents::JobEvent;
use crate::engine::rollout;
use crate::messages::cap;
use crate::nodeimage::nodes::NodeInfo;
use crate::nodeimage::removals;
use crate::runtime::clock;
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use nodeimage_api::NodeImage;
use nodeimage_api::nodeimage_dev::{
    ImageRemovalJob, ImageRemovalJobStatus, NodeRemoval, RemovalEntry, RemovalStatus,
    RemovalWriter, answer_to,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Kind name, in logs and events.
pub const KIND: &str = "ImageRemovalJob";
/// How often a running job looks again when nothing wakes it.
pub const LOOK_AGAIN: Duration = Duration::from_secs(60);
/// Node failures named one event each per look; more are counted in one.
const NODE_EVENTS_MAX: usize = 10;
/// Longest status message.
const MESSAGE_MAX: usize = 1024;

/// Everything the plan reads.
pub struct Inputs<'a> {
    /// The job.
    pub job: &'a ImageRemovalJob,
    /// Every Node, by name.
    pub nodes: &'a BTreeMap<String, NodeInfo>,
    /// Every NodeImage, by name.
    pub nodeimages: &'a BTreeMap<String, Arc<NodeImage>>,
    /// The time.
    pub now: DateTime<Utc>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The job's new status, conditions included.
    pub status: ImageRemovalJobStatus,
    /// The entry every node of the job gets.
    pub entry: RemovalEntry,
    /// Nodes whose turn comes now: write the entry there.
    pub write_to: Vec<String>,
    /// Events to publish once the status is written.
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<Duration>,
    /// The job has ended (now or before).
    pub finished: bool,
    /// The job's TTL after it ended has passed: delete it.
    pub delete: bool,
}

/// Where one selected node stands.
#[derive(Clone, Debug, PartialEq)]
enum Part {
    /// Its turn has not come; why it cannot start, if it cannot.
    Waiting(Option<String>),
    /// Its daemon holds the entry and has not answered.
    Active,
    /// It answered: how it counts, bytes freed, what it kept and why.
    Answered(NodeRemoval, i64, Option<String>),
    /// It failed without answering (not found, the deadline).
    Failed(String),
}

/// Whether the job has ended (its status says so).
pub fn is_finished(status: &ImageRemovalJobStatus) -> bool {
    status.completion_time.is_some()
}

/// The entry the job writes on each of its nodes.
pub fn entry(job: &ImageRemovalJob, now: DateTime<Utc>) -> RemovalEntry {
    RemovalEntry {
        job: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        images: job.spec.images.clone(),
        force: job.spec.forced(),
        block: job.spec.blocks(),
        created_at: Some(clock::api_time(now)),
        written_by: Some(RemovalWriter::ImageRemovalJob),
    }
}

/// The nodes the job selects: names in order (duplicates dropped), or the
/// nodes whose labels match, or every node that gets a NodeImage.
fn select(
    job: &ImageRemovalJob,
    nodes: &BTreeMap<String, NodeInfo>,
) -> Result<Vec<String>, String> {
    let sel = job.spec.selector.clone().unwrap_or_default();
    if let Some(names) = sel.names.as_deref().filter(|n| !n.is_empty()) {
        return rollout::select_nodes(Some(names), None, nodes, false);
    }
    let labels = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: sel.match_labels,
        match_expressions: sel.match_expressions,
    };
    let picked = rollout::select_nodes(None, Some(&labels), nodes, false)?;
    Ok(picked
        .into_iter()
        .filter(|n| nodes.get(n).is_some_and(|i| i.wants_nodeimage))
        .collect())
}

/// Where node `name` stands with the job's entry.
fn part(job: &ImageRemovalJob, uid: &str, name: &str, named: bool, inp: &Inputs<'_>) -> Part {
    let ni = inp.nodeimages.get(name);
    if let Some(e) = ni.and_then(|ni| removals::entry_of(ni, uid)) {
        let answers = ni
            .and_then(|ni| ni.status.as_ref())
            .and_then(|s| s.removals.as_deref())
            .unwrap_or_default();
        return match answer_to(e, answers) {
            Some(a) => Part::Answered(a.verdict(), bytes_freed(a), kept_note(a)),
            None => Part::Active,
        };
    }
    match rollout::unstartable(inp.nodes.get(name)) {
        Some(why) if named && why == rollout::NOT_FOUND => Part::Failed("node not found".into()),
        Some(why) => Part::Waiting(Some(why)),
        None => match ni {
            None => Part::Waiting(Some("its NodeImage does not exist yet".into())),
            Some(ni) => Part::Waiting(removals::full_with(ni, &job.name_any()).map(|jobs| {
                format!(
                    "its {} removal places are taken (by {}); deleting finished removal jobs frees them",
                    removals::PER_NODE,
                    jobs.join(", ")
                )
            })),
        },
    }
}

/// The bytes a node's answer freed, over its images.
fn bytes_freed(a: &RemovalStatus) -> i64 {
    a.images
        .iter()
        .filter_map(|i| i.bytes_freed)
        .fold(0i64, |sum, b| sum.saturating_add(b.max(0)))
}

/// What a node kept or failed and why, first image first.
fn kept_note(a: &RemovalStatus) -> Option<String> {
    let i = a.images.iter().find(|i| !i.result.is_gone())?;
    let why = i.message.as_deref().unwrap_or_default();
    Some(format!("{} {:?}: {why}", i.image, i.result))
}

/// Decides the job's next step.
pub fn plan(inp: Inputs<'_>) -> Plan {
    let job = inp.job;
    let now = inp.now;
    let old = job.status.clone().unwrap_or_default();
    let was_finished = is_finished(&old);
    let start = old.start_time.as_ref().map(clock::instant).unwrap_or(now);
    let deadline = job
        .spec
        .active_deadline_seconds
        .map(|s| clock::after(start, clock::seconds(s)));
    if was_finished && !job.spec.blocks() {
        return settled(job, old, deadline, now);
    }
    let past_deadline = !was_finished && deadline.is_some_and(|d| now >= d);
    let (selected, mut parts) = parts_of(&inp, past_deadline);
    let parallelism = usize::try_from(job.spec.parallelism.unwrap_or(1).max(1)).unwrap_or(1);
    let may_start = (!was_finished || job.spec.blocks()) && !past_deadline;
    let write_to = if may_start {
        turns(&mut parts, parallelism)
    } else {
        vec![]
    };

    let mut status = tally(&parts, &selected, parallelism);
    status.start_time = Some(
        old.start_time
            .clone()
            .unwrap_or_else(|| clock::api_time(now)),
    );
    let ended = parts
        .iter()
        .all(|(_, p)| matches!(p, Part::Answered(..) | Part::Failed(_)));
    status.completion_time = old
        .completion_time
        .clone()
        .or_else(|| ((ended && selected.is_ok()) || past_deadline).then(|| clock::api_time(now)));
    let finished = is_finished(&status);
    if past_deadline {
        status.message = Some(cap(
            &format!(
                "activeDeadlineSeconds ({}s) passed: {}",
                job.spec.active_deadline_seconds.unwrap_or_default(),
                status.message.as_deref().unwrap_or_default()
            ),
            MESSAGE_MAX,
        ));
    }
    let events = events(job, &old, &status, &parts);
    crate::engine::conditions::apply(
        job.status.as_ref(),
        &mut status,
        job.metadata.generation,
        &clock::api_time(now),
    );
    blocking(job, old.conditions.as_ref(), &mut status, now);
    let (delete, requeue_after) = due(job, &status, deadline, now);
    Plan {
        status,
        entry: entry(job, now),
        write_to,
        events,
        requeue_after,
        finished,
        delete,
    }
}

/// A finished job without block: its status is its record and stays as
/// it is (a node's entry or answer that goes later, by hand or with its
/// node, changes nothing); only its TTL is left to watch.
fn settled(
    job: &ImageRemovalJob,
    status: ImageRemovalJobStatus,
    deadline: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Plan {
    let (delete, requeue_after) = due(job, &status, deadline, now);
    Plan {
        status,
        entry: entry(job, now),
        write_to: vec![],
        events: vec![],
        requeue_after,
        finished: true,
        delete,
    }
}

/// The selected nodes and where each stands (with the deadline passed, every
/// node that has not answered has failed).
fn parts_of(
    inp: &Inputs<'_>,
    past_deadline: bool,
) -> (Result<Vec<String>, String>, Vec<(String, Part)>) {
    let job = inp.job;
    let uid = job.uid().unwrap_or_default();
    let named = job
        .spec
        .selector
        .as_ref()
        .and_then(|s| s.names.as_ref())
        .is_some_and(|n| !n.is_empty());
    let selected = select(job, inp.nodes);
    let mut parts: Vec<(String, Part)> = match &selected {
        Ok(names) => names
            .iter()
            .map(|n| (n.clone(), part(job, &uid, n, named, inp)))
            .collect(),
        Err(_) => vec![],
    };
    if past_deadline {
        for (_, p) in parts.iter_mut() {
            if matches!(p, Part::Waiting(_) | Part::Active) {
                *p = Part::Failed(format!(
                    "did not answer within activeDeadlineSeconds ({}s)",
                    job.spec.active_deadline_seconds.unwrap_or_default()
                ));
            }
        }
    }
    (selected, parts)
}

/// The nodes whose turn comes now: up to `parallelism` unanswered entries
/// at once, in selection order; they are marked active.
fn turns(parts: &mut [(String, Part)], parallelism: usize) -> Vec<String> {
    let active = parts.iter().filter(|(_, p)| *p == Part::Active).count();
    let mut free = parallelism.saturating_sub(active);
    let mut out = Vec::new();
    for (n, p) in parts.iter_mut() {
        if free == 0 {
            break;
        }
        if *p == Part::Waiting(None) {
            *p = Part::Active;
            out.push(n.clone());
            free -= 1;
        }
    }
    out
}

/// Whether the job is due for deletion (its TTL), and when to look again:
/// the TTL, the deadline, or the periodic look of a running or block job.
fn due(
    job: &ImageRemovalJob,
    status: &ImageRemovalJobStatus,
    deadline: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> (bool, Option<Duration>) {
    let finished = is_finished(status);
    let (delete, ttl_wait) = match status.completion_time.as_ref() {
        Some(done) => rollout::ttl_due(
            clock::instant(done),
            job.spec.ttl_seconds_after_finished,
            now,
        ),
        None => (false, None),
    };
    let deadline_wait = deadline
        .filter(|_| !finished)
        .and_then(|d| (d - now).to_std().ok());
    let look = (!finished || job.spec.blocks()).then_some(LOOK_AGAIN);
    (
        delete,
        [ttl_wait, deadline_wait, look].into_iter().flatten().min(),
    )
}

mod status;
use status::{blocking, events, tally};

#[cfg(test)]
mod tests;
