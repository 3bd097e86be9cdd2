//! Housekeeping of NodeImages: fill `createdAt`, drop tags whose owners are
//! gone or whose TTL passed, fail tags the node did not answer in time, keep
//! the counts right, and delete NodeImages whose Node is gone.
//!
//! A NodeImage is reconciled when it changes, when its Node is deleted (or
//! turns virtual or terminating), when a job owning one of its tags is
//! deleted, when any of those caches is (re)listed, and when its plan's next
//! due time comes.

mod orphans;
mod owners;
pub mod plan;
mod reconcile;

use crate::cluster::nodecache::NodeSubscription;
use crate::cluster::nodeimages::Subscription;
use crate::cluster::watch::{self, SyncSignals, Synced};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use nodeimage_api::{ImagePrePullJob, ImagePullJob, NodeImage, NodeUpgradeJob};
use nodeimage_ops::health::Readiness;
use owners::{JobCache, OwnerCaches};
use reconcile::{error_policy, reconcile};
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Housekeeping's controller name in logs.
const NAME: &str = "housekeeping";

/// Runs housekeeping until `stop` turns true.
pub async fn run(
    ctx: Context,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
    nodeimages: Subscription,
    nodes: NodeSubscription,
) {
    let client = ctx.client.clone();
    let (relisted_tx, relisted_rx) = mpsc::unbounded::<()>();
    let signals = |check| SyncSignals {
        synced: Synced::default(),
        check,
        relisted: Some(relisted_tx.clone()),
    };

    let NodeSubscription {
        store: nodes,
        synced: nodes_synced,
        events,
    } = nodes;
    let node_events = node_events(
        crate::cluster::cache::event_stream(events),
        relisted_tx.clone(),
    );
    let (pull_jobs, pull_deleted) = job_cache::<ImagePullJob>(
        "imagepulljobs",
        &client,
        signals(readiness.check("imagepulljobs-synced").await),
    );
    let (pre_pull_jobs, pre_pull_deleted) = job_cache::<ImagePrePullJob>(
        "imageprepulljobs",
        &client,
        signals(readiness.check("imageprepulljobs-synced").await),
    );
    let (upgrade_jobs, upgrade_deleted) = job_cache::<NodeUpgradeJob>(
        "nodeupgradejobs",
        &client,
        signals(readiness.check("nodeupgradejobs-synced").await),
    );
    drop(relisted_tx);

    let state = Arc::new(reconcile::State {
        ctx,
        nodes,
        nodes_synced,
        owners: OwnerCaches {
            image_pull_jobs: pull_jobs,
            image_pre_pull_jobs: pre_pull_jobs,
            node_upgrade_jobs: upgrade_jobs,
        },
        orphans: Default::default(),
        nodeimages: nodeimages.store.clone(),
    });
    let Subscription {
        store: nodeimages,
        changes,
        ..
    } = nodeimages;
    let controller = Controller::for_shared_stream(changes, nodeimages.clone())
        .with_config(lifecycle::controller_config())
        .watches_stream(node_events, |node: Node| {
            Some(ObjectRef::<NodeImage>::new(&node.name_any()))
        })
        .watches_stream(pull_deleted, owned_by(nodeimages.clone()))
        .watches_stream(pre_pull_deleted, owned_by(nodeimages.clone()))
        .watches_stream(upgrade_deleted, owned_by(nodeimages))
        .reconcile_all_on(relisted_rx);
    lifecycle::run_controller(NAME, controller, reconcile, error_policy, state, stop).await;
}

/// The Nodes that wake their NodeImage: only a Node that no longer wants
/// it (or is gone); a relist of the Nodes wakes every NodeImage through
/// `relisted`.
fn node_events(
    events: impl Stream<Item = watcher::Event<Node>> + Send + 'static,
    relisted: mpsc::UnboundedSender<()>,
) -> impl Stream<Item = Result<Node, watcher::Error>> + Send + 'static {
    events.filter_map(move |event| {
        std::future::ready(match event {
            watcher::Event::Delete(n) => Some(Ok::<_, watcher::Error>(n)),
            watcher::Event::Apply(n) if !crate::nodeimage::nodes::wants_nodeimage(&n.metadata) => {
                Some(Ok(n))
            }
            watcher::Event::InitDone => {
                let _ = relisted.unbounded_send(());
                None
            }
            _ => None,
        })
    })
}

/// A metadata cache of one job kind, and the stream of its deleted jobs.
fn job_cache<K>(
    what: &'static str,
    client: &kube::Client,
    signals: SyncSignals,
) -> (
    JobCache<K>,
    impl Stream<Item = Result<PartialObjectMeta<K>, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store::<PartialObjectMeta<K>>();
    let synced = signals.synced.clone();
    let deleted = watch::reflect(
        what,
        Api::all(client.clone()),
        writer,
        watch::without_managed_fields,
        signals,
    )
    .filter_map(|event| {
        std::future::ready(match event {
            watcher::Event::Delete(job) => Some(Ok(job)),
            _ => None,
        })
    });
    (JobCache { store, synced }, deleted)
}

/// Maps a deleted job to the NodeImages holding tags it owned.
fn owned_by<K: Resource<DynamicType = ()>>(
    nodeimages: Store<NodeImage>,
) -> impl Fn(PartialObjectMeta<K>) -> Vec<ObjectRef<NodeImage>> + Send + Sync + 'static {
    move |job| {
        let Some(uid) = job.metadata.uid.as_deref() else {
            return Vec::new();
        };
        nodeimages
            .state()
            .iter()
            .filter(|ni| owners::has_owner_uid(&ni.spec, uid))
            .map(|ni| ObjectRef::from_obj(ni.as_ref()))
            .collect()
    }
}
