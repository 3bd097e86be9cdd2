//! What an ImagePullJob should do next, decided from a snapshot of its
//! NodeImages (and pods, for podSelector) and the clock. Pure.

mod entry;
mod roll;
mod select;

use crate::engine::jobevents::JobEvent;
use crate::engine::p2p::observe::Observed;
use crate::engine::rollout::{self, Entry, NodeState, Starts, Tally};
use crate::nodeimage::entries::EntryRequest;
use crate::runtime::clock::{api_time, instant};
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use nodeimage_api::kruise::{ImagePullJob, ImagePullJobStatus, NodeImage, ReferenceObject, TagP2p};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

#[cfg(test)]
use entry::entry_pull_policy;
#[cfg(test)]
use k8s_openapi::api::core::v1::ObjectReference;
#[cfg(test)]
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
#[cfg(test)]
use nodeimage_api::kruise::CompletionPolicyType;

/// How long a Never job's entry lives before it is re-added (re-pulled): a day.
pub const NEVER_ENTRY_TTL_SECONDS: i32 = 86_400;
/// Smallest per-entry deadline of a Never job.
pub const NEVER_MIN_DEADLINE_SECONDS: i64 = 1_800;
/// How often a Never job looks for expired entries to add again.
pub const NEVER_RESYNC: std::time::Duration = std::time::Duration::from_secs(300);
/// How often a running job looks again even if nothing woke it (new nodes).
pub const RUNNING_RESYNC: std::time::Duration = std::time::Duration::from_secs(60);

pub use select::{PodInfo, select_nodes, selects};

/// Event reason when a job's mark to gate new nodes is ignored.
pub const GATE_REFUSED: &str = "StartupGateRefused";

/// Everything the plan reads.
pub struct Inputs<'a> {
    /// The job.
    pub job: &'a ImagePullJob,
    /// Every NodeImage.
    pub nodeimages: &'a [Arc<NodeImage>],
    /// Pods of the job's namespace (used with podSelector).
    pub pods: &'a [PodInfo],
    /// Every Node, trimmed (used with a pre-download's placement).
    pub nodes: &'a [Arc<k8s_openapi::api::core::v1::Node>],
    /// Copies of the job's pull secrets the daemons may read.
    pub secrets: Vec<ReferenceObject>,
    /// Pull secrets named by the job that do not exist.
    pub missing_secrets: Vec<String>,
    /// Why pull secrets named by the job were refused (not registry
    /// credentials): the job's unfinished nodes fail with these reasons.
    pub refused_secrets: Vec<String>,
    /// Why the job's mark `nodeimage.dev/gate-new-nodes` is ignored (its
    /// namespace may not gate new nodes), said once when the job starts.
    pub gate_refusal: Option<String>,
    /// Most nodes that may start now by the registry's free slots
    /// (`None`: the image's registry has no limit).
    pub registry_cap: Option<&'a crate::engine::rollout::Cap>,
    /// Whether the job follows its tag, and since when its nodes pull it again.
    pub follow: Follow,
    /// The job's P2P settings and what they read (`engine::p2p`), or why
    /// its P2P annotations are invalid (the job then starts no node).
    pub p2p: &'a Result<Observed, String>,
    /// The time.
    pub now: DateTime<Utc>,
}

/// What following its tag (`engine::followtag`) asks of the job's entry.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Follow {
    /// The job follows its tag: its entry pulls with `Always` (a present
    /// image of a moved tag is not the tag any more).
    pub on: bool,
    /// The tag moved then: entries created before pull again.
    pub pull_again_before: Option<DateTime<Utc>>,
}

impl From<&crate::engine::followtag::Verdict> for Follow {
    fn from(v: &crate::engine::followtag::Verdict) -> Self {
        Follow {
            on: v.following,
            pull_again_before: v.pull_again_before,
        }
    }
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The job's new status, its conditions at the plan's time.
    pub status: ImagePullJobStatus,
    /// The entry to write (same on every node).
    pub request: Option<EntryRequest>,
    /// Nodes to write the entry to: newly started, and started ones whose
    /// entry may need to follow a spec edit.
    pub write_to: Vec<String>,
    /// The nodes that start now, and how many `parallelism` wanted.
    pub starts: Starts,
    /// What each node starting now records of its P2P start (its entry's
    /// `p2p`); empty without P2P settings.
    pub p2p: BTreeMap<String, TagP2p>,
    /// Events to publish (missing pull secrets first).
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<std::time::Duration>,
    /// The job's TTL after completion has passed: delete it.
    pub delete: bool,
    /// The status differs from the one read: write it.
    pub write_status: bool,
    /// The job completed in this step: its secret copies are released.
    pub completed_now: bool,
    /// The job has completed: the upstream deletion-protection finalizer
    /// goes, as OpenKruise lets it go once a job's secrets are released.
    pub completed: bool,
}

/// Decides the job's next step, its status with conditions (at `now`),
/// and what its shell does besides writing: events, secret release,
/// finalizers, deletion.
pub fn plan(inp: Inputs<'_>) -> Plan {
    let job = inp.job;
    let old = job.status.clone().unwrap_or_default();
    let mut p = decide(&inp, old.clone());
    crate::engine::conditions::apply(
        job.status.as_ref(),
        &mut p.status,
        job.metadata.generation,
        &api_time(inp.now),
    );
    let mut events = missing_secret_events(&inp.missing_secrets, &old);
    events.extend(refused_secret_events(&inp.refused_secrets, &old));
    events.append(&mut p.events);
    p.events = events;
    p.write_status = p.status != old;
    p.completed_now = p.status.completion_time.is_some() && old.completion_time.is_none();
    p.completed = p.status.completion_time.is_some();
    p
}

/// A warning for each missing pull secret the status did not name yet.
fn missing_secret_events(missing: &[String], old: &ImagePullJobStatus) -> Vec<JobEvent> {
    let named = old.message.as_deref().unwrap_or_default();
    missing
        .iter()
        .filter(|m| !named.contains(m.as_str()))
        .map(|m| {
            JobEvent::warning(
                "PullSecretMissing",
                format!("Pull secret {m} not found; pulling without it"),
            )
        })
        .collect()
}

/// A warning for each refused pull secret the status did not name yet.
fn refused_secret_events(refused: &[String], old: &ImagePullJobStatus) -> Vec<JobEvent> {
    let named = old.message.as_deref().unwrap_or_default();
    refused
        .iter()
        .filter(|m| !named.contains(m.as_str()))
        .map(|m| JobEvent::warning("PullSecretRefused", m.clone()))
        .collect()
}

/// The pull secrets the shell copies for the daemons: none once the job
/// completed (they are released then).
pub fn secrets_to_copy(job: &ImagePullJob) -> &[String] {
    let completed = job
        .status
        .as_ref()
        .is_some_and(|s| s.completion_time.is_some());
    match &job.spec.template.pull_secrets {
        Some(names) if !completed => names,
        _ => &[],
    }
}

/// The job's tag entry, for registry pacing: none once the job has
/// completed or if its image is invalid.
pub fn entries(job: &ImagePullJob) -> Vec<Entry> {
    let completed = job
        .status
        .as_ref()
        .is_some_and(|s| s.completion_time.is_some());
    let entry = rollout::entry_for(&job.spec.image).ok();
    entry.filter(|_| !completed).into_iter().collect()
}

/// Whether the plan reads the pods of the job's namespace (podSelector jobs).
pub fn reads_pods(job: &ImagePullJob) -> bool {
    job.spec.template.pod_selector.is_some()
}

impl Plan {
    /// When the job looks again: as the plan says, and a running job at
    /// least every [`RUNNING_RESYNC`] (new nodes).
    pub fn look_again(&self) -> Option<std::time::Duration> {
        let running = self.status.completion_time.is_none();
        match self.requeue_after {
            Some(d) if running => Some(d.min(RUNNING_RESYNC)),
            Some(d) => Some(d),
            None if running => Some(RUNNING_RESYNC),
            None => None,
        }
    }

    /// A plan that writes nothing but `status` and `events`.
    fn only(status: ImagePullJobStatus, events: Vec<JobEvent>) -> Self {
        Plan {
            status,
            request: None,
            write_to: vec![],
            starts: Starts::default(),
            p2p: BTreeMap::new(),
            events,
            requeue_after: None,
            delete: false,
            write_status: false,
            completed_now: false,
            completed: false,
        }
    }
}

/// The step before the shell's concerns: a completed job waits for its
/// TTL; a job whose image or selection is invalid says so; else the rollout.
fn decide(inp: &Inputs<'_>, old: ImagePullJobStatus) -> Plan {
    let (job, now) = (inp.job, inp.now);
    let (cp, always) = crate::engine::rollout::completion(&job.spec.template);
    if let Some(done) = old.completion_time.as_ref().map(instant) {
        let (delete, requeue_after) = rollout::ttl_due(done, cp.ttl_seconds_after_finished, now);
        return Plan {
            requeue_after,
            delete,
            ..Plan::only(old, vec![])
        };
    }
    let start_time = old.start_time.as_ref().map(instant).unwrap_or(now);
    let mut events = Vec::new();
    if old.start_time.is_none() {
        events.push(JobEvent::normal(
            "Started",
            format!("Started pulling {}", job.spec.image),
        ));
        if let Some(why) = &inp.gate_refusal {
            events.push(JobEvent::warning(GATE_REFUSED, why.clone()));
        }
    }
    let (entry, nodes, observed) = match nodes_of(inp) {
        Ok(found) => found,
        Err(message) => {
            let status = ImagePullJobStatus {
                start_time: Some(api_time(start_time)),
                message: Some(message),
                ..old
            };
            return Plan::only(status, events);
        }
    };
    let deadline = cp
        .active_deadline_seconds
        .filter(|_| always)
        .map(|s| crate::runtime::clock::after(start_time, crate::runtime::clock::seconds(s)));
    let refused = (!inp.refused_secrets.is_empty()).then(|| inp.refused_secrets.join("; "));
    let bounds = roll::Bounds {
        deadline,
        refused: refused.as_deref(),
        cap: inp.registry_cap,
        p2p: observed,
        started: start_time,
    };
    let r = roll::roll_out(job, nodes, &bounds, now);
    let complete = always && r.tally.finished();
    events.extend(node_events(job, &old, &r.tally, complete));
    let requeue_after = if complete {
        cp.ttl_seconds_after_finished
            .map(|t| std::time::Duration::from_secs(t.max(0) as u64))
    } else if !always {
        Some(NEVER_RESYNC)
    } else {
        deadline.and_then(|d| (d - now).to_std().ok())
    };
    // A node waiting for its P2P agent decides again when its wait ends.
    let wake = (r.p2p.wake_at.filter(|_| !complete))
        .map(|w| (w - now).to_std().unwrap_or_default())
        .map(|d| d.max(std::time::Duration::from_secs(1)));
    let requeue_after = match (requeue_after, wake) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let status = status_of(&r, &old, start_time, complete, inp, now);
    Plan {
        status,
        request: (!r.write_to.is_empty())
            .then(|| entry::request(job, &entry, &inp.secrets, inp.follow)),
        p2p: observed.notes(&r.p2p, &r.start.nodes),
        write_to: r.write_to,
        starts: r.start,
        events,
        requeue_after,
        ..Plan::only(Default::default(), vec![])
    }
}

/// The job's entry, where each selected node stands with it and the P2P
/// rules' view, or why the job cannot pull (an invalid image, selector or
/// P2P annotation).
fn nodes_of<'a>(
    inp: &Inputs<'a>,
) -> Result<(Entry, Vec<(String, NodeState)>, &'a Observed), String> {
    let job = inp.job;
    let entry = rollout::entry_for(&job.spec.image)
        .map_err(|e| format!("cannot pull {}: {e}", job.spec.image))?;
    let observed =
        (inp.p2p.as_ref()).map_err(|e| format!("cannot pull {}: {e}", job.spec.image))?;
    let selected = select_nodes(job, inp.nodeimages, inp.pods, inp.nodes)?;
    let uid = job.uid().unwrap_or_default();
    let by_name: BTreeMap<String, &Arc<NodeImage>> =
        inp.nodeimages.iter().map(|n| (n.name_any(), n)).collect();
    let nodes = selected
        .iter()
        .filter_map(|n| by_name.get(n).map(|ni| (n.clone(), ni)))
        .map(|(n, ni)| {
            let states = rollout::entry_states(ni, std::slice::from_ref(&entry), &uid);
            let pairs: Vec<_> = states.into_iter().map(|s| (entry.clone(), s)).collect();
            (n, rollout::node_state(&pairs))
        })
        .collect();
    Ok((entry, nodes, observed))
}

/// NodeFailed for each node that failed since the status was written, and
/// Completed when the job completes.
fn node_events(
    job: &ImagePullJob,
    old: &ImagePullJobStatus,
    tally: &Tally,
    complete: bool,
) -> Vec<JobEvent> {
    let old_failed: BTreeSet<&String> = old.failed_nodes.iter().flatten().collect();
    let image = &job.spec.image;
    let mut events: Vec<JobEvent> = tally
        .failed
        .iter()
        .filter(|(n, _)| !old_failed.contains(n))
        .map(|(n, reason)| {
            JobEvent::warning(
                "NodeFailed",
                format!("Node {n} failed to pull {image}: {reason}"),
            )
        })
        .collect();
    if complete {
        events.push(JobEvent {
            warning: !tally.failed.is_empty(),
            reason: "Completed",
            note: format!(
                "Completed: {} of {} node(s) pulled {image}, {} failed",
                tally.succeeded,
                tally.desired,
                tally.failed.len()
            ),
        });
    }
    events
}

/// The job's status after this step (conditions as they were).
fn status_of(
    r: &roll::Rollout,
    old: &ImagePullJobStatus,
    start_time: DateTime<Utc>,
    complete: bool,
    inp: &Inputs<'_>,
    now: DateTime<Utc>,
) -> ImagePullJobStatus {
    let tally = &r.tally;
    let failed_nodes: Vec<String> = tally.failed.iter().map(|(n, _)| n.clone()).collect();
    let mut message = status_message(tally, complete, r.past_deadline);
    if !inp.missing_secrets.is_empty() {
        message.push_str(&format!(
            "; pull secret(s) not found, pulling without them: {}",
            inp.missing_secrets.join(", ")
        ));
    }
    for why in &inp.refused_secrets {
        message.push_str(&format!("; {why}"));
    }
    if let Some(p2p) = r.p2p.summary().filter(|_| !complete) {
        message.push_str(&format!("; {p2p}"));
    }
    ImagePullJobStatus {
        start_time: Some(api_time(start_time)),
        completion_time: complete.then(|| api_time(now)),
        desired: tally.desired as i32,
        active: (tally.active + r.start.nodes.len()) as i32,
        succeeded: tally.succeeded as i32,
        failed: tally.failed.len() as i32,
        message: Some(message),
        failed_nodes: (!failed_nodes.is_empty()).then_some(failed_nodes),
        conditions: old.conditions.clone(),
    }
}

/// `status.message`, word for word as OpenKruise writes it (scripts and the
/// MESSAGE column match it); the counts are in the status fields.
fn status_message(t: &Tally, complete: bool, past_deadline: bool) -> String {
    if complete && past_deadline {
        return "job exceeds activeDeadlineSeconds".into();
    }
    if complete {
        return "job has completed".into();
    }
    if t.desired == 0 {
        return "job is running, no progress".into();
    }
    format!("job is running, progress {:.1}%", t.percent_done())
}

impl crate::engine::registrypace::Starting for Plan {
    fn starts(&self) -> &Starts {
        &self.starts
    }
}

#[cfg(test)]
mod tests;
