//! The writes every job kind makes alike: its tag entries into NodeImages
//! (through the shared per-node writer), its status, its events.

use super::{Error, JobKind, Shared, api_err};
use crate::cluster::tagwrites::{self, WriteError};
use crate::engine::jobevents::JobEvent;
use crate::messages::cap;
use crate::nodeimage::entries::{self, EntryRequest};
use crate::runtime::context::Context;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use nodeimage_api::kruise::{TagP2p, TagUpgrade};
use std::collections::BTreeMap;

/// A job's entry edits handed to the shared writer at once. All of a plan's
/// nodes (a plan starts at most its parallelism), so that the jobs planning
/// on one NodeImage event reach each node within one gather window and share
/// its write: handed 16 at a time, each batch waiting for its write, a
/// hundred jobs' edits for a node came seconds apart in separate writes
/// (docs/benchmarks.md, "100 ImagePullJobs × 1,000 nodes"). The writer
/// bounds the API writes (`tagwrites::WRITES_IN_FLIGHT`); this bound only
/// caps the edits one job holds waiting.
const WRITE_CONCURRENCY: usize = 1024;
/// Longest event note (the API refuses notes above 1 KB).
const MAX_NOTE_CHARS: usize = 1000;

/// Writes `requests` (with `upgrade`, a NodeUpgradeJob's) into the
/// NodeImages of `nodes`, several at a time, through the shared writer,
/// with each node's P2P start note of `p2p` (`engine::p2p::notes`). A
/// conflict is reported after every other write has been tried.
pub async fn write_entries(
    shared: &Shared,
    nodes: &[String],
    requests: &[EntryRequest],
    upgrade: Option<&TagUpgrade>,
    p2p: &BTreeMap<String, TagP2p>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    if requests.is_empty() {
        return Ok(());
    }
    // Nodes already holding the entry as asked are left out here, before
    // the writer copies their specs. Each is read from the cache when its
    // turn comes, not all up front: a list held over the writes kept every
    // listed NodeImage as it was alive beside the cache's newer copy.
    let writes: Vec<Result<(), WriteError>> = futures::stream::iter(nodes.iter().cloned())
        .filter_map(|node: String| {
            let ni = shared.nodeimages.get(&ObjectRef::new(&node));
            std::future::ready(ni.filter(|ni| entries::would_change(ni, requests, upgrade, now)))
        })
        .map(|ni| {
            let mut reqs = requests.to_vec();
            if let Some(note) = p2p.get(ni.metadata.name.as_deref().unwrap_or_default()) {
                reqs.iter_mut().for_each(|r| r.p2p = Some(note.clone()));
            }
            let upgrade = upgrade.cloned();
            let edit: tagwrites::Edit = Box::new(move |current, images| {
                entries::apply_requests(current, images, &reqs, upgrade.as_ref(), now)
            });
            shared.writer.edit(ni, edit)
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut conflict = None;
    for w in writes {
        match w {
            Ok(()) => {}
            Err(WriteError::Conflict(n)) => conflict = Some(n),
            Err(e) => return Err(e.into()),
        }
    }
    match conflict {
        Some(n) => Err(WriteError::Conflict(n).into()),
        None => Ok(()),
    }
}

/// Writes a job's status subresource with a merge patch `body`.
pub async fn patch_status<K: JobKind, B: serde::Serialize + std::fmt::Debug + ?Sized>(
    api: &Api<K>,
    job: &K,
    body: &B,
) -> Result<(), Error> {
    written_status(api, job, body).await.map(drop)
}

/// [`patch_status`], returning the job as written (for a write that must
/// follow it in the same reconcile, guarded by its resourceVersion).
pub async fn written_status<K: JobKind, B: serde::Serialize + std::fmt::Debug + ?Sized>(
    api: &Api<K>,
    job: &K,
    body: &B,
) -> Result<K, Error> {
    let name = job.name_any();
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(api_err(format!("writing status of {} {name}", K::KIND)))
}

/// Publishes the plan's events on the job (a failure to record is logged).
pub async fn publish<K: JobKind>(ctx: &Context, job: &K, events: &[JobEvent]) {
    let on = job.object_ref(&());
    publish_on(ctx, &on, K::EVENT_ACTION, events).await;
}

/// Records `events` on the object `on` (a job, or a workload that has
/// jobs made for it), with `action`; a failure is logged, never returned.
pub async fn publish_on(
    ctx: &Context,
    on: &k8s_openapi::api::core::v1::ObjectReference,
    action: &str,
    events: &[JobEvent],
) {
    for ev in events {
        let event = Event {
            type_: if ev.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: ev.reason.into(),
            note: Some(cap(&ev.note, MAX_NOTE_CHARS)),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder().publish(&event, on).await {
            let (kind, name) = (
                on.kind.as_deref().unwrap_or_default(),
                on.name.as_deref().unwrap_or_default(),
            );
            tracing::warn!(kind, object = %name, error = %e, "could not record event");
        }
    }
}

/// The job-level state and reason of a status, for logs.
pub type StateOf<S> = fn(&S) -> (Option<&str>, Option<&str>);

/// Writes a job's new status (its conditions as the plan set them) as a
/// merge patch guarded by the resourceVersion it was planned from (the plan
/// read the old status), and logs a change of the job's state.
pub async fn write_guarded_status<K, S>(
    ctx: &Context,
    job: &K,
    old: Option<&S>,
    new: &S,
    state_of: StateOf<S>,
) -> Result<(), Error>
where
    K: JobKind,
    S: serde::Serialize + PartialEq + Clone,
{
    if old == Some(new) {
        return Ok(());
    }
    let body = crate::nodeimage::patch::guarded_raw(
        "status",
        job.resource_version().as_deref(),
        &["status"],
        &old,
        &Some(new),
    )?;
    if let Some(body) = body {
        patch_status(&K::api(ctx.client.clone(), job), job, &body).await?;
    }
    let (old_state, _) = old.map(state_of).unwrap_or_default();
    let (new_state, reason) = state_of(new);
    if old_state != new_state {
        tracing::info!(
            kind = K::KIND,
            job = %job.name_any(),
            from = old_state.unwrap_or_default(),
            to = new_state.unwrap_or_default(),
            reason = reason.unwrap_or_default(),
            "job state changed"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests;
