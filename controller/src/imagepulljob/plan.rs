//! What an ImagePullJob should do next, decided from a snapshot of its
//! NodeImages (and pods, for podSelector) and the clock. Pure.

use crate::clock::{api_time, instant};
use crate::entries::EntryRequest;
use crate::jobevents::JobEvent;
use crate::rollout::{self, NodeState, Tally};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::core::SelectorExt;
use nodeimage_api::defaults;
use nodeimage_api::kruise::{
    CompletionPolicyType, ImagePullJob, ImagePullJobStatus, ImageTagPullPolicy, NodeImage,
    ReferenceObject,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// How long a Never job's entry lives before it is re-added (re-pulled): a day.
pub const NEVER_ENTRY_TTL_SECONDS: i32 = 86_400;
/// Smallest per-entry deadline of a Never job.
pub const NEVER_MIN_DEADLINE_SECONDS: i64 = 1_800;
/// How often a Never job looks for expired entries to add again.
pub const NEVER_RESYNC: std::time::Duration = std::time::Duration::from_secs(300);

/// A pod, as far as node selection cares.
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    /// Pod labels.
    pub labels: BTreeMap<String, String>,
    /// Node it is scheduled to, if any.
    pub node_name: Option<String>,
    /// Still running or about to (not Succeeded/Failed, not being deleted).
    pub active: bool,
}

/// Everything the plan reads.
pub struct Inputs<'a> {
    /// The job.
    pub job: &'a ImagePullJob,
    /// Every NodeImage.
    pub nodeimages: &'a [Arc<NodeImage>],
    /// Pods of the job's namespace (used with podSelector).
    pub pods: &'a [PodInfo],
    /// Copies of the job's pull secrets the daemons may read.
    pub secrets: Vec<ReferenceObject>,
    /// Pull secrets named by the job that do not exist.
    pub missing_secrets: Vec<String>,
    /// The time.
    pub now: DateTime<Utc>,
}

/// What to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The job's new status.
    pub status: ImagePullJobStatus,
    /// The entry to write (same on every node).
    pub request: Option<EntryRequest>,
    /// Nodes to write the entry to: newly started, and started ones whose
    /// entry may need to follow a spec edit.
    pub write_to: Vec<String>,
    /// Events to publish.
    pub events: Vec<JobEvent>,
    /// When to look again, if nothing wakes the job before.
    pub requeue_after: Option<std::time::Duration>,
    /// The job's TTL after completion has passed: delete it.
    pub delete: bool,
}

fn parallelism(p: Option<&IntOrString>) -> usize {
    match p {
        None => 1,
        Some(IntOrString::Int(n)) => (*n).max(0) as usize,
        Some(IntOrString::String(s)) => s.trim().parse().unwrap_or(1),
    }
}

/// The nodes a job selects, sorted by name; only nodes with a NodeImage count.
pub fn select_nodes(
    job: &ImagePullJob,
    nodeimages: &[Arc<NodeImage>],
    pods: &[PodInfo],
) -> Result<Vec<String>, String> {
    let t = &job.spec.template;
    let mut out: BTreeSet<String> = BTreeSet::new();
    let have: BTreeSet<String> = nodeimages.iter().map(|n| n.name_any()).collect();
    if let Some(ps) = &t.pod_selector {
        let sel = rollout::selector(ps.clone()).map_err(|e| format!("invalid podSelector: {e}"))?;
        for p in pods.iter().filter(|p| p.active) {
            if let Some(node) = &p.node_name
                && sel.matches(&p.labels)
                && have.contains(node)
            {
                out.insert(node.clone());
            }
        }
        return Ok(out.into_iter().collect());
    }
    match &t.selector {
        Some(s) if s.names.as_ref().is_some_and(|n| !n.is_empty()) => {
            for n in s.names.iter().flatten() {
                if have.contains(n) {
                    out.insert(n.clone());
                }
            }
        }
        Some(s) => {
            let sel = rollout::selector(LabelSelector {
                match_labels: s.match_labels.clone(),
                match_expressions: s.match_expressions.clone(),
            })
            .map_err(|e| format!("invalid selector: {e}"))?;
            out.extend(
                nodeimages
                    .iter()
                    .filter(|ni| sel.matches(ni.labels()))
                    .map(|ni| ni.name_any()),
            );
        }
        None => out.extend(have),
    }
    Ok(out.into_iter().collect())
}

/// Whether an unfinished job selects `ni` by name or labels (podSelector
/// jobs are woken by their pods instead).
pub fn selects(job: &ImagePullJob, ni: &Arc<NodeImage>) -> bool {
    job.status
        .as_ref()
        .is_none_or(|s| s.completion_time.is_none())
        && job.spec.template.pod_selector.is_none()
        && select_nodes(job, std::slice::from_ref(ni), &[]).is_ok_and(|s| !s.is_empty())
}

/// The tag entry's pull policy, derived from the job as OpenKruise does: an
/// Always job's entries outlive the job's own TTL (or deadline, or all its
/// attempts) by a grace period; a Never job's entries live a day, then the
/// job adds them again so nodes re-pull daily.
pub fn entry_pull_policy(job: &ImagePullJob) -> ImageTagPullPolicy {
    let t = &job.spec.template;
    let timeout = t
        .pull_policy
        .as_ref()
        .and_then(|p| p.timeout_seconds)
        .unwrap_or(defaults::PULL_TIMEOUT_SECONDS);
    let backoff = t
        .pull_policy
        .as_ref()
        .and_then(|p| p.backoff_limit)
        .unwrap_or(defaults::PULL_BACKOFF_LIMIT);
    let cp = t.completion_policy.clone().unwrap_or_default();
    match cp.type_.unwrap_or_default() {
        CompletionPolicyType::Always => {
            let base = cp
                .ttl_seconds_after_finished
                .map(i64::from)
                .or(cp.active_deadline_seconds)
                .unwrap_or(i64::from(timeout).saturating_mul(i64::from(backoff).saturating_add(1)));
            ImageTagPullPolicy {
                timeout_seconds: Some(timeout),
                backoff_limit: Some(backoff),
                ttl_seconds_after_finished: Some(
                    i32::try_from(base.saturating_add(rollout::ENTRY_TTL_GRACE_SECONDS))
                        .unwrap_or(i32::MAX),
                ),
                active_deadline_seconds: cp.active_deadline_seconds,
            }
        }
        CompletionPolicyType::Never => ImageTagPullPolicy {
            timeout_seconds: Some(timeout),
            backoff_limit: Some(backoff),
            ttl_seconds_after_finished: Some(NEVER_ENTRY_TTL_SECONDS),
            active_deadline_seconds: Some(NEVER_MIN_DEADLINE_SECONDS.max(i64::from(timeout))),
        },
    }
}

/// The job as an owner of tag entries.
pub fn owner_ref(job: &ImagePullJob) -> ObjectReference {
    ObjectReference {
        api_version: Some("apps.kruise.io/v1alpha1".into()),
        kind: Some("ImagePullJob".into()),
        namespace: job.namespace(),
        name: Some(job.name_any()),
        uid: job.uid(),
        ..Default::default()
    }
}

/// Decides the job's next step.
pub fn plan(inp: Inputs<'_>) -> Plan {
    let job = inp.job;
    let old = job.status.clone().unwrap_or_default();
    let now = inp.now;
    let (cp, always) = crate::rollout::completion(&job.spec.template);
    let mut events = Vec::new();

    // A completed job only waits for its TTL.
    if let Some(done) = old.completion_time.as_ref().map(instant) {
        let (delete, requeue_after) = rollout::ttl_due(done, cp.ttl_seconds_after_finished, now);
        return Plan {
            status: old,
            request: None,
            write_to: vec![],
            events,
            requeue_after,
            delete,
        };
    }

    let start_time = old.start_time.as_ref().map(instant).unwrap_or(now);
    if old.start_time.is_none() {
        events.push(JobEvent {
            warning: false,
            reason: "Started",
            note: format!("Started pulling {}", job.spec.image),
        });
    }

    let entry = match rollout::entry_for(&job.spec.image) {
        Ok(e) => e,
        Err(e) => {
            let status = ImagePullJobStatus {
                start_time: Some(api_time(start_time)),
                message: Some(format!("cannot pull {}: {e}", job.spec.image)),
                ..old
            };
            return Plan {
                status,
                request: None,
                write_to: vec![],
                events,
                requeue_after: None,
                delete: false,
            };
        }
    };
    let uid = job.uid().unwrap_or_default();
    let selected = match select_nodes(job, inp.nodeimages, inp.pods) {
        Ok(s) => s,
        Err(e) => {
            let status = ImagePullJobStatus {
                start_time: Some(api_time(start_time)),
                message: Some(e),
                ..old
            };
            return Plan {
                status,
                request: None,
                write_to: vec![],
                events,
                requeue_after: None,
                delete: false,
            };
        }
    };
    let by_name: BTreeMap<String, &Arc<NodeImage>> =
        inp.nodeimages.iter().map(|n| (n.name_any(), n)).collect();
    let mut nodes: Vec<(String, NodeState)> = selected
        .iter()
        .filter_map(|n| by_name.get(n).map(|ni| (n.clone(), ni)))
        .map(|(n, ni)| {
            let states = rollout::entry_states(ni, std::slice::from_ref(&entry), &uid);
            let pairs: Vec<_> = states.into_iter().map(|s| (entry.clone(), s)).collect();
            (n, rollout::node_state(&pairs))
        })
        .collect();

    let deadline = cp
        .active_deadline_seconds
        .filter(|_| always)
        .map(|s| crate::clock::after(start_time, crate::clock::seconds(s)));
    let past_deadline = deadline.is_some_and(|d| now >= d);
    // Every node holding the job's entry keeps it in step with the job's spec
    // (an edited pull policy or TTL reaches finished nodes too).
    let holding: Vec<String> = nodes
        .iter()
        .filter(|(_, s)| *s != NodeState::NotStarted)
        .map(|(n, _)| n.clone())
        .collect();
    if past_deadline {
        nodes = rollout::apply_deadline(nodes, "job exceeds activeDeadlineSeconds");
    }
    let tally = rollout::tally(&nodes);
    let limit = parallelism(job.spec.template.parallelism.as_ref());
    let start = if past_deadline {
        vec![]
    } else {
        rollout::to_start(&nodes, limit)
    };
    let mut write_to = holding;
    write_to.extend(start.iter().cloned());

    let complete = always && tally.finished();
    let failed_nodes: Vec<String> = tally.failed.iter().map(|(n, _)| n.clone()).collect();
    let old_failed: BTreeSet<&String> = old.failed_nodes.iter().flatten().collect();
    for (n, reason) in &tally.failed {
        if !old_failed.contains(n) {
            events.push(JobEvent {
                warning: true,
                reason: "NodeFailed",
                note: format!("Node {n} failed to pull {}: {reason}", job.spec.image),
            });
        }
    }
    let mut message = status_message(&tally, complete, past_deadline);
    if !inp.missing_secrets.is_empty() {
        message.push_str(&format!(
            "; pull secret(s) not found, pulling without them: {}",
            inp.missing_secrets.join(", ")
        ));
    }
    if complete {
        events.push(JobEvent {
            warning: !tally.failed.is_empty(),
            reason: "Completed",
            note: format!(
                "Completed: {} of {} node(s) pulled {}, {} failed",
                tally.succeeded,
                tally.desired,
                job.spec.image,
                tally.failed.len()
            ),
        });
    }
    let status = ImagePullJobStatus {
        start_time: Some(api_time(start_time)),
        completion_time: complete.then(|| api_time(now)),
        desired: tally.desired as i32,
        active: (tally.active + start.len()) as i32,
        succeeded: tally.succeeded as i32,
        failed: tally.failed.len() as i32,
        message: Some(message),
        failed_nodes: (!failed_nodes.is_empty()).then_some(failed_nodes),
        conditions: old.conditions.clone(),
    };
    let requeue_after = if complete {
        cp.ttl_seconds_after_finished
            .map(|t| std::time::Duration::from_secs(t.max(0) as u64))
    } else if !always {
        Some(NEVER_RESYNC)
    } else {
        deadline.and_then(|d| (d - now).to_std().ok())
    };
    let request = (!write_to.is_empty()).then(|| EntryRequest {
        image: entry.image.clone(),
        tag: entry.tag.clone(),
        owner: owner_ref(job),
        pull_policy: entry_pull_policy(job),
        image_pull_policy: job
            .spec
            .template
            .image_pull_policy
            .map(|p| format!("{p:?}")),
        secrets: inp.secrets.clone(),
        sandbox: job.spec.template.sandbox_config.clone(),
        check_items: None,
    });
    Plan {
        status,
        request,
        write_to,
        events,
        requeue_after,
        delete: false,
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

#[cfg(test)]
mod tests;
