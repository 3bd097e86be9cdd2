//! The node start-up gate: a Node that registers with the start-up taint
//! (`--startup-gate-taint`) takes Pods only once the images of the gating
//! jobs that select it are present there (its daemon checks and removes the
//! taint), or once `--startup-gate-timeout` has passed since it was created.
//! This controller tells each gated node's daemon what it waits for (a note
//! on its NodeImage), opens the gate itself when nothing gates the node or
//! the bound passed, and takes the note away once the gate is open. It
//! never adds the taint. The decisions are in `plan` and `images`.
//!
//! It reads the shared Node cache (which keeps the gate's taint), the
//! shared NodeImage cache (which keeps the note) and the gating job kinds'
//! caches, all handed in by the wiring; it keeps nothing of its own.

pub mod images;
pub mod plan;
mod reconcile;

pub use reconcile::GateJobs;

use crate::cluster::nodecache::NodeSubscription;
use crate::cluster::watch::Synced;
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use futures::StreamExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use nodeimage_api::NodeImage;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Runs the start-up gate until `stop` turns true; with `settings.taint`
/// empty (the gate is off) it only drains its subscriptions.
pub async fn run(
    ctx: Context,
    settings: plan::Settings,
    stop: signal::Receiver<bool>,
    nodes: NodeSubscription,
    nodeimages: (Store<NodeImage>, Synced),
    jobs: reconcile::GateJobs,
) {
    let NodeSubscription { store, events, .. } = nodes;
    let node_events = crate::cluster::cache::event_stream(events).filter_map(|event| {
        std::future::ready(match event {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                Some(Ok::<_, watcher::Error>(n))
            }
            _ => None,
        })
    });
    if settings.taint.is_empty() {
        tracing::info!("start-up gate off (--startup-gate-taint is empty)");
        node_events
            .take_until(lifecycle::stopped(stop))
            .for_each(|_| std::future::ready(()))
            .await;
        return;
    }
    tracing::info!(taint = %settings.taint, timeout_s = settings.timeout.num_seconds(), "start-up gate settings");
    let state = Arc::new(reconcile::State {
        ctx,
        jobs,
        nodeimages: nodeimages.0,
        nodeimages_synced: nodeimages.1,
        settings,
    });
    let controller =
        Controller::for_stream(node_events, store).with_config(lifecycle::controller_config());
    let (reconcile, error_policy) = (reconcile::reconcile, reconcile::error_policy);
    lifecycle::run_controller(
        "start-up gate",
        controller,
        reconcile,
        error_policy,
        state,
        stop,
    )
    .await;
}
