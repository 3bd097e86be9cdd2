//! The ImageRemovalJob reconciler: read the job's world, call the plan,
//! write the removal entries through the one node writer and the status as
//! a guarded patch, publish events. The skeleton (finalizer, errors,
//! retries) is `jobshell`'s.

use super::plan::{self, Inputs};
use crate::cluster::tagwrites::{self, WriteError};
use crate::engine::jobshell::{self, Error, JobKind, JobReconciler, NodeJobs, StateOf, api_err};
use crate::nodeimage::removals;
use chrono::Utc;
use futures::StreamExt;
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use nodeimage_api::nodeimage_dev::{ImageRemovalJob, ImageRemovalJobStatus, RemovalEntry};
use std::sync::Arc;

/// Finalizer that lets a deleted job take its removal entries back (and so
/// lift its block).
pub const FINALIZER: &str = "nodeimage.dev/imageremovaljob-cleanup";

/// Entry writes of one plan handed to the node writer at once (a plan
/// starts at most `parallelism` nodes; the writer bounds the API writes).
const WRITE_CONCURRENCY: usize = 256;

impl JobKind for ImageRemovalJob {
    const KIND: &'static str = plan::KIND;
    const NAME: &'static str = "imageremovaljob";
    const EVENT_ACTION: &'static str = "Remove";
}

impl JobReconciler for NodeJobs<ImageRemovalJob> {
    type Job = ImageRemovalJob;
    const FINALIZER: &'static str = FINALIZER;
    const UPSTREAM_FINALIZERS: &'static [&'static str] = &[];

    /// Takes the job's removal entries out of every NodeImage, those written
    /// a moment ago that the cache does not show yet included (the node
    /// writer remembers them).
    async fn cleanup(&self, job: &ImageRemovalJob) -> Result<(), Error> {
        let Some(uid) = job.uid() else {
            return Ok(());
        };
        let (writer, nodeimages) = (&self.shared.writer, &self.shared.nodeimages);
        Ok(tagwrites::release_removals(writer, nodeimages, &uid).await?)
    }

    async fn apply(&self, job: Arc<ImageRemovalJob>) -> Result<Action, Error> {
        let ctx = &self.shared.ctx;
        let now = Utc::now();
        let p = {
            // Dropped before any write is awaited (see `NodeJobs::plan`).
            let (nodes, nodeimages) = self.snapshot();
            plan::plan(Inputs {
                job: &job,
                nodes: &nodes,
                nodeimages: &nodeimages,
                now,
            })
        };
        write_entries(self, &p.write_to, &p.entry).await?;
        let state_of: StateOf<ImageRemovalJobStatus> = |s| {
            let state = if s.completion_time.is_some() {
                "Finished"
            } else {
                "Removing"
            };
            (Some(state), s.message.as_deref())
        };
        jobshell::write_guarded_status(ctx, job.as_ref(), job.status.as_ref(), &p.status, state_of)
            .await?;
        jobshell::publish(ctx, job.as_ref(), &p.events).await;
        if !p.write_to.is_empty() {
            tracing::info!(job = %job.name_any(), nodes = p.write_to.len(), "removal entries written");
        }
        if p.delete {
            let name = job.name_any();
            tracing::info!(job = %name, "deleting job: ttlSecondsAfterFinished passed");
            let api = ImageRemovalJob::api(ctx.client.clone(), &job);
            api.delete(&name, &DeleteParams::background())
                .await
                .map_err(api_err(format!("deleting ImageRemovalJob {name}")))?;
            return Ok(Action::await_change());
        }
        Ok(jobshell::after_success(p.requeue_after))
    }
}

/// Writes `entry` into the NodeImages of `nodes` through the node writer; a
/// conflict is reported after every other write has been tried.
async fn write_entries(
    r: &NodeJobs<ImageRemovalJob>,
    nodes: &[String],
    entry: &RemovalEntry,
) -> Result<(), Error> {
    let shared = &r.shared;
    let writes: Vec<Result<(), WriteError>> = futures::stream::iter(nodes.iter().cloned())
        .filter_map(|node| std::future::ready(shared.nodeimages.get(&ObjectRef::new(&node))))
        .map(|ni| {
            let entry = entry.clone();
            let edit: tagwrites::RemovalEdit = Box::new(move |_, list| removals::add(list, &entry));
            shared.writer.edit_removals(ni, edit)
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
