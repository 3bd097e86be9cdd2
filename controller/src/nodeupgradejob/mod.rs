//! NodeUpgradeJob: KubeEdge's rolling upgrade of the node agent, run through
//! NodeImage tag entries. Per selected node (concurrency budget, node
//! timeout, failure tolerance, as for ImagePrePullJob) the job writes the
//! entry `image:version` carrying an `upgrade` extension; the node daemon
//! (started with `--enable-upgrades`) checks, pulls, takes the upgrade tool
//! out of the image, backs up, upgrades and rolls back on failure, and
//! reports each step in the tag status, which the plan maps into the job's
//! `nodeStatus`. Decisions are in `plan`; `reconcile` reads, calls the plan,
//! and writes narrow patches.
//!
//! A job is woken when it changes, when a NodeImage holding its tag changes,
//! when a Node's labels, readiness, existence or kubelet version change
//! (running jobs only), and when its plan's due time comes.

pub mod plan;
mod reconcile;

use crate::context::Context;
use crate::lifecycle;
use crate::nodeimages::Subscription;
use crate::nodes;
use crate::wakeups::TagChanges;
use crate::watch::{self, SyncSignals, Synced};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef};

use nodeimage_api::{NodeImage, NodeUpgradeJob};
use nodeimage_ops::health::Readiness;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// What of a Node matters to a job, to pass on only its changes: labels,
/// readiness, whether it gets a NodeImage, and its KubeEdge version.
type NodeKey = (nodes::NodeInfo, Option<String>);

fn node_key(n: &Node) -> NodeKey {
    (nodes::node_info(n), reconcile::node_version(n))
}

/// Runs the NodeUpgradeJob controller until `stop` turns true.
pub async fn run(
    ctx: Context,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
    nodeimages: Subscription,
) {
    let client = ctx.client.clone();

    let nodes_synced = Synced::default();
    let (nodes, node_writer) = reflector::store::<Node>();
    let node_events = watch::reflect(
        "nodeupgradejob-nodes",
        Api::all(client.clone()),
        node_writer,
        nodes::trim_node,
        SyncSignals {
            synced: nodes_synced.clone(),
            check: readiness.check("nodeupgradejob-nodes-synced").await,
            relisted: None,
        },
    )
    .filter_map(watch::changes_only(node_key));

    let (jobs, job_writer) = reflector::store::<NodeUpgradeJob>();
    let skipped = crate::skipped::Skipped::new(&ctx, plan::KIND, Some("reason"));
    let controller = Controller::for_stream(
        watch::controller_trigger(client.clone(), job_writer, skipped),
        jobs.clone(),
    );
    let _ = ctx.metrics.caches.node_upgrade_jobs.set(jobs.clone());
    let state = Arc::new(reconcile::State {
        shared: crate::jobshell::Shared {
            ctx,
            nodeimages: nodeimages.store,
            nodeimages_synced: nodeimages.synced,
        },
        nodes,
        nodes_synced,
    });
    let changes = TagChanges::new(plan::KIND, crate::nodetasks::GROUP);
    tracing::info!("nodeupgradejob controller starting");
    controller
        .watches_shared_stream(nodeimages.changes, move |ni: Arc<NodeImage>| {
            changes
                .owners(&ni)
                .into_iter()
                .map(|(_, name)| ObjectRef::<NodeUpgradeJob>::new(&name))
                .collect::<Vec<_>>()
        })
        .watches_stream(node_events, move |_: Node| {
            jobs.state()
                .iter()
                .filter(|j| !j.status.as_ref().is_some_and(plan::is_finished))
                .map(|j| ObjectRef::from_obj(j.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(lifecycle::stopped(stop))
        .run(
            crate::jobshell::reconcile,
            crate::jobshell::error_policy,
            state,
        )
        .for_each(|result| {
            lifecycle::log_outcome("nodeupgradejob", result);
            std::future::ready(())
        })
        .await;
    tracing::info!("nodeupgradejob controller stopped");
}
