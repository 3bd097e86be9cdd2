//! ImagePrePullJob: KubeEdge's batch pre-pull of a list of images onto named
//! or selected nodes, with node checks, a concurrency budget, per-node
//! timeouts, retries and a failure tolerance, through tag entries in the
//! nodes' NodeImages. Decisions are in `plan`; `reconcile` reads, calls the
//! plan, and writes narrow patches.
//!
//! A job is woken when it changes, when a NodeImage holding one of its tags
//! changes, when a Node's labels, readiness or existence change (running
//! jobs only), and when its plan's due time comes (a node timeout, or the
//! periodic look of a running job).

pub mod plan;
mod reconcile;

use crate::context::Context;
use crate::lifecycle;
use crate::nodeimages::Subscription;
use crate::wakeups::TagChanges;
use crate::watch::{self, SyncSignals, Synced};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef};

use nodeimage_api::{ImagePrePullJob, NodeImage};
use nodeimage_ops::health::Readiness;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Runs the ImagePrePullJob controller until `stop` turns true.
pub async fn run(
    ctx: Context,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
    nodeimages: Subscription,
) {
    let client = ctx.client.clone();
    if let Err(e) = crate::pullsecrets::ensure_namespace(&client, &ctx.secrets_namespace).await {
        tracing::warn!(namespace = %ctx.secrets_namespace, error = %e, "cannot ensure the daemons' secrets namespace; image secrets will fail until it exists");
    }

    // Nodes: only a change of what the plan reads (labels, readiness,
    // whether it gets a NodeImage) or a deletion is passed on.
    let nodes_synced = Synced::default();
    let (nodes, node_writer) = reflector::store::<Node>();
    let node_events = watch::reflect(
        "imageprepulljob-nodes",
        Api::all(client.clone()),
        node_writer,
        crate::nodes::trim_node,
        SyncSignals {
            synced: nodes_synced.clone(),
            check: readiness.check("imageprepulljob-nodes-synced").await,
            relisted: None,
        },
    )
    .filter_map(watch::changes_only(node_key::of));

    let (jobs, job_writer) = reflector::store::<ImagePrePullJob>();
    let skipped = crate::skipped::Skipped::new(&ctx, plan::KIND, Some("reason"));
    let controller = Controller::for_stream(
        watch::controller_trigger(client.clone(), job_writer, skipped),
        jobs.clone(),
    );
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
    tracing::info!("imageprepulljob controller starting");
    controller
        .watches_shared_stream(nodeimages.changes, move |ni: Arc<NodeImage>| {
            changes
                .owners(&ni)
                .into_iter()
                .map(|(_, name)| ObjectRef::new(&name))
                .collect::<Vec<ObjectRef<ImagePrePullJob>>>()
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
            lifecycle::log_outcome("imageprepulljob", result);
            std::future::ready(())
        })
        .await;
    tracing::info!("imageprepulljob controller stopped");
}

/// What of a Node matters to a job, to pass on only its changes.
mod node_key {
    use crate::nodes::node_info;
    use k8s_openapi::api::core::v1::Node;
    use std::collections::BTreeMap;

    /// Labels, readiness, and whether the node gets a NodeImage.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct NodeKey(BTreeMap<String, String>, bool, bool);

    /// The key of a Node.
    pub fn of(n: &Node) -> NodeKey {
        let i = node_info(n);
        NodeKey(i.labels, i.ready, i.wants_nodeimage)
    }
}
