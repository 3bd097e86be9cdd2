//! The job's status from where its nodes stand: counts, the message, the
//! events of a look, and the Blocking condition. Pure.

use super::{MESSAGE_MAX, NODE_EVENTS_MAX, Part};
use crate::engine::jobevents::JobEvent;
use crate::messages::cap;
use crate::runtime::clock;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use nodeimage_api::limits::{FAILED_NODES_LISTED_MAX, VERSION_MAX};
use nodeimage_api::nodeimage_dev::imageremovaljob::BLOCKING;
use nodeimage_api::nodeimage_dev::{ImageRemovalJob, ImageRemovalJobStatus, NodeRemoval};
use std::collections::BTreeSet;

/// The counts and message of `parts`.
pub(super) fn tally(
    parts: &[(String, Part)],
    selected: &Result<Vec<String>, String>,
    parallelism: usize,
) -> ImageRemovalJobStatus {
    let count = |f: &dyn Fn(&Part) -> bool| {
        i32::try_from(parts.iter().filter(|(_, p)| f(p)).count()).unwrap_or(i32::MAX)
    };
    let verdict = |v: NodeRemoval| move |p: &Part| matches!(p, Part::Answered(x, ..) if *x == v);
    let failed_names: BTreeSet<&str> = parts
        .iter()
        .filter(|(_, p)| matches!(p, Part::Failed(_) | Part::Answered(NodeRemoval::Failed, ..)))
        .map(|(n, _)| n.as_str())
        .collect();
    let bytes = parts
        .iter()
        .filter_map(|(_, p)| match p {
            Part::Answered(_, b, _) => Some(*b),
            _ => None,
        })
        .fold(0i64, i64::saturating_add)
        .min(VERSION_MAX);
    let status = ImageRemovalJobStatus {
        desired: i32::try_from(parts.len()).unwrap_or(i32::MAX),
        active: count(&|p| *p == Part::Active),
        succeeded: count(&verdict(NodeRemoval::Succeeded)),
        kept: count(&verdict(NodeRemoval::Kept)),
        failed: i32::try_from(failed_names.len()).unwrap_or(i32::MAX),
        bytes_freed: bytes,
        failed_nodes: (!failed_names.is_empty()).then(|| {
            failed_names
                .iter()
                .take(FAILED_NODES_LISTED_MAX as usize)
                .map(|n| n.to_string())
                .collect()
        }),
        ..Default::default()
    };
    let message = match selected {
        Err(e) => format!("cannot select nodes: {e}"),
        Ok(_) => describe(&status, parts, parallelism),
    };
    ImageRemovalJobStatus {
        message: Some(cap(&message, MESSAGE_MAX)),
        ..status
    }
}

/// The status message: how far the job is, and the first reason of each
/// kind of trouble (a node that waits, kept, or failed).
fn describe(s: &ImageRemovalJobStatus, parts: &[(String, Part)], parallelism: usize) -> String {
    if parts.is_empty() {
        return "no node is selected".into();
    }
    let answered = s.succeeded + s.kept + s.failed;
    let mut out = format!(
        "{answered} of {} nodes done: {} removed every image, {} kept some, {} failed; {} removing (parallelism {parallelism}); {} bytes freed",
        s.desired, s.succeeded, s.kept, s.failed, s.active, s.bytes_freed
    );
    let first = |f: &dyn Fn(&Part) -> Option<String>| {
        parts
            .iter()
            .find_map(|(n, p)| f(p).map(|why| format!("{n}: {why}")))
    };
    if let Some(w) = first(&|p| match p {
        Part::Waiting(Some(why)) => Some(why.clone()),
        _ => None,
    }) {
        out.push_str(&format!("; waiting: {w}"));
    }
    if let Some(k) = first(&|p| match p {
        Part::Answered(NodeRemoval::Kept, _, note) => note.clone(),
        _ => None,
    }) {
        out.push_str(&format!("; kept: {k}"));
    }
    if let Some(f) = first(&|p| match p {
        Part::Failed(why) => Some(why.clone()),
        Part::Answered(NodeRemoval::Failed, _, note) => note.clone(),
        _ => None,
    }) {
        out.push_str(&format!("; failed: {f}"));
    }
    out
}

/// Started, one per node failed since the last status (a few, then a
/// count), and the end.
pub(super) fn events(
    job: &ImageRemovalJob,
    old: &ImageRemovalJobStatus,
    new: &ImageRemovalJobStatus,
    parts: &[(String, Part)],
) -> Vec<JobEvent> {
    let mut out = Vec::new();
    if old.start_time.is_none() {
        out.push(JobEvent::normal(
            "Started",
            format!(
                "removing {} from {} nodes{}",
                job.spec.images.join(", "),
                new.desired,
                if job.spec.blocks() {
                    ", and keeping them off while this job exists"
                } else {
                    ""
                }
            ),
        ));
    }
    let before: BTreeSet<&str> = old
        .failed_nodes
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    let newly: Vec<(&str, String)> = parts
        .iter()
        .filter(|(n, _)| !before.contains(n.as_str()))
        .filter_map(|(n, p)| match p {
            Part::Failed(why) => Some((n.as_str(), why.clone())),
            Part::Answered(NodeRemoval::Failed, _, note) => {
                Some((n.as_str(), note.clone().unwrap_or_default()))
            }
            _ => None,
        })
        .collect();
    for (n, why) in newly.iter().take(NODE_EVENTS_MAX) {
        out.push(JobEvent::warning(
            "NodeFailed",
            format!("Node {n} failed: {why}"),
        ));
    }
    if newly.len() > NODE_EVENTS_MAX {
        out.push(JobEvent::warning(
            "NodeFailed",
            format!(
                "{} more nodes failed; see status",
                newly.len() - NODE_EVENTS_MAX
            ),
        ));
    }
    if old.completion_time.is_none() && new.completion_time.is_some() {
        let note = new.message.clone().unwrap_or_default();
        out.push(if new.failed == 0 {
            JobEvent::normal("Completed", note)
        } else {
            JobEvent::warning("Failed", note)
        });
    }
    out
}

/// The Blocking condition of a block job: True while it exists (its block
/// is in force on the nodes holding its entry).
pub(super) fn blocking(
    job: &ImageRemovalJob,
    old: Option<&Vec<Condition>>,
    status: &mut ImageRemovalJobStatus,
    now: DateTime<Utc>,
) {
    if !job.spec.blocks() {
        return;
    }
    let since = old
        .into_iter()
        .flatten()
        .find(|c| c.type_ == BLOCKING && c.status == "True")
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| clock::api_time(now));
    let c = Condition {
        type_: BLOCKING.into(),
        status: "True".into(),
        observed_generation: job.metadata.generation,
        last_transition_time: since,
        reason: "BlockInForce".into(),
        message: format!(
            "pulls of {} fail on the nodes holding this job's entry until it is deleted",
            job.spec.images.join(", ")
        ),
    };
    status.conditions.get_or_insert_default().push(c);
}
