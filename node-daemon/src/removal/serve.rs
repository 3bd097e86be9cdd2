//! Serves the removal entries of this node's NodeImage: an entry that has
//! no answer (in status, or reported and not yet written) runs once, off the
//! loop, and its answer goes to the status writer, which writes it at once.
//! A removal that fails to read the node (the runtime down) is answered
//! Failed with the reason; the controller decides whether to ask again (a
//! new job). An entry that leaves the spec stops its task.

use super::decide::{Entry, Wanting};
use super::run::{self, ImageOutcome, NodeFacts};
use crate::deps::Deps;
use crate::desired::{PullTask, Reported, TagKey};
use crate::runtime::ContainerRuntime;
use nodeimage_api::nodeimage_dev::{
    ImageRemoval, RemovalEntry, RemovalResult, RemovalStatus, answer_to,
};
use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use tokio::task::JoinHandle;

/// Longest message one image's result carries (the CRD's bound).
const MESSAGE_MAX: usize = 1000;

/// The removal tasks of this daemon, by job name, and the block sweep.
#[derive(Default)]
pub struct Removals {
    running: BTreeMap<String, (String, JoinHandle<()>)>,
    sweep: Option<JoinHandle<()>>,
}

impl Removals {
    /// Starts the `entries` that have no answer (in `answered`, or
    /// reported) and no task, and stops the tasks of entries gone. `tasks`
    /// and `reported` are the node's pull entries, the live ones a removal
    /// must not undercut.
    pub fn apply<R: ContainerRuntime>(
        &mut self,
        deps: &Arc<Deps<R>>,
        entries: &[RemovalEntry],
        answered: &[RemovalStatus],
        tasks: &[PullTask],
        reported: &BTreeMap<TagKey, Reported>,
    ) {
        self.running.retain(|job, (uid, handle)| {
            let kept = entries.iter().any(|e| e.job == *job && e.uid == *uid);
            if !kept {
                handle.abort();
            }
            kept
        });
        for entry in entries {
            let started = self
                .running
                .get(&entry.job)
                .is_some_and(|(uid, _)| *uid == entry.uid);
            if started
                || answer_to(entry, answered).is_some()
                || deps.status.removal_answer(&entry.job, &entry.uid).is_some()
            {
                continue;
            }
            let facts = NodeFacts {
                name: deps.node.clone(),
                sandbox: None,
                wanted: wanting(tasks, reported),
            };
            let handle = tokio::spawn(serve(deps.clone(), entry.clone(), facts));
            self.running
                .insert(entry.job.clone(), (entry.uid.clone(), handle));
        }
    }

    /// Removes again what the `blocks` keep off the node, if it came back
    /// (pulled by hand, or by kubelet for a Pod since gone, on a runtime
    /// without nodeimage's verifier), by the same rule as the first time;
    /// one sweep at a time, after the entry's own answer. Nothing is
    /// written: the entry's answer stands, the log says what went.
    pub fn sweep_blocks<R: ContainerRuntime>(
        &mut self,
        deps: &Arc<Deps<R>>,
        blocks: &[RemovalEntry],
        tasks: &[PullTask],
        reported: &BTreeMap<TagKey, Reported>,
    ) {
        if blocks.is_empty() || self.sweep.as_ref().is_some_and(|h| !h.is_finished()) {
            return;
        }
        // An entry's own task stays listed once it ends: only one still
        // running is left to itself.
        let settled: Vec<RemovalEntry> = blocks
            .iter()
            .filter(|e| {
                self.running
                    .get(&e.job)
                    .is_none_or(|(_, h)| h.is_finished())
            })
            .cloned()
            .collect();
        let facts = NodeFacts {
            name: deps.node.clone(),
            sandbox: None,
            wanted: wanting(tasks, reported),
        };
        self.sweep = Some(tokio::spawn(sweep(deps.clone(), settled, facts)));
    }

    /// Stops every task (the NodeImage is gone, or the daemon stops).
    pub fn stop(&mut self) {
        for (_, (_, handle)) in std::mem::take(&mut self.running) {
            handle.abort();
        }
        if let Some(h) = self.sweep.take() {
            h.abort();
        }
    }
}

/// One sweep of the block entries: what came back and no container uses goes.
async fn sweep<R: ContainerRuntime>(
    deps: Arc<Deps<R>>,
    blocks: Vec<RemovalEntry>,
    mut facts: NodeFacts,
) {
    facts.sandbox = run::sandbox(&deps.runtime, deps.sandbox_image.as_deref()).await;
    for entry in blocks {
        let rule = Entry {
            images: entry.images.clone(),
            force: entry.force,
            block: true,
        };
        match run::remove(&deps.runtime, &facts, &rule).await {
            Ok(outcomes) => {
                for o in outcomes {
                    match o.result {
                        RemovalResult::Removed => {
                            tracing::info!(job = %entry.job, image = %o.image, bytes = o.bytes_freed, "blocked image came back; removed again")
                        }
                        RemovalResult::InUse => {
                            tracing::info!(job = %entry.job, image = %o.image, message = %o.message, "blocked image came back and a container uses it; removed once unused")
                        }
                        _ => {}
                    }
                }
            }
            Err(e) => {
                tracing::warn!(job = %entry.job, error = %e, "block sweep could not read the node")
            }
        }
    }
}

/// The images (as pulls name them) that removal entries with `force` or
/// `block` list: the presence check does not pull them back while those
/// stand.
pub fn forced(entries: &[RemovalEntry]) -> BTreeSet<String> {
    entries
        .iter()
        .filter(|e| e.force || e.block)
        .flat_map(|e| e.images.iter())
        .filter_map(|i| ImageRef::parse(i).ok())
        .map(|r| r.pull_ref())
        .collect()
}

/// The live pull entries of this node, as the removal rule reads them.
pub fn wanting(tasks: &[PullTask], reported: &BTreeMap<TagKey, Reported>) -> Vec<Wanting> {
    tasks
        .iter()
        .filter_map(|t| {
            let target = t.target.as_ref().ok()?;
            Some(Wanting {
                reference: target.image.pull_ref(),
                resolved: reported
                    .get(&t.key)
                    .filter(|r| r.answers(t))
                    .and_then(|r| r.image_id())
                    .map(str::to_string),
                owners: target.requesters.clone(),
            })
        })
        .collect()
}

/// Runs one entry and reports its answer.
async fn serve<R: ContainerRuntime>(deps: Arc<Deps<R>>, entry: RemovalEntry, mut facts: NodeFacts) {
    facts.sandbox = run::sandbox(&deps.runtime, deps.sandbox_image.as_deref()).await;
    tracing::info!(job = %entry.job, images = entry.images.len(), "removal started");
    let rule = Entry {
        images: entry.images.clone(),
        force: entry.force,
        block: entry.block,
    };
    let images = match run::remove(&deps.runtime, &facts, &rule).await {
        Ok(outcomes) => outcomes.into_iter().map(written).collect(),
        Err(e) => {
            tracing::warn!(job = %entry.job, error = %e, "removal could not read the node");
            entry
                .images
                .iter()
                .map(|image| ImageRemoval {
                    image: image.clone(),
                    result: RemovalResult::Failed,
                    reason: None,
                    bytes_freed: None,
                    message: Some(e.to_string()),
                })
                .collect()
        }
    };
    let answer = RemovalStatus {
        job: entry.job.clone(),
        uid: entry.uid.clone(),
        images,
        completion_time: Some(crate::report::now()),
    };
    tracing::info!(job = %entry.job, verdict = ?answer.verdict(), "removal finished");
    deps.status.report_removal(answer);
}

/// One outcome as the status holds it.
fn written(o: ImageOutcome) -> ImageRemoval {
    ImageRemoval {
        image: o.image,
        result: o.result,
        reason: o.reason,
        bytes_freed: (o.result == RemovalResult::Removed)
            .then(|| i64::try_from(o.bytes_freed).unwrap_or(i64::MAX)),
        message: Some(crate::report::truncate(&o.message, MESSAGE_MAX)),
    }
}
