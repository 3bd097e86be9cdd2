//! Housekeeping of NodeImages: fill `createdAt`, drop tags whose owners are
//! gone or whose TTL passed, fail tags the node did not answer in time, keep
//! the counts right, drop removal entries whose ImageRemovalJob is gone, and
//! delete NodeImages whose Node is gone.
//!
//! A NodeImage is reconciled when it changes, when its Node is deleted (or
//! turns virtual or terminating), when a job owning one of its tags is
//! deleted, when any of those caches is (re)listed, and when its plan's next
//! due time comes.

mod orphans;
mod owners;
pub mod plan;
mod reconcile;

use crate::cluster::cache::{self, Subscription as CacheSubscription};
use crate::cluster::nodecache::NodeSubscription;
use crate::cluster::nodeimages::Subscription;
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use futures::channel::mpsc;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use nodeimage_api::kruise::NodeImageSpec;
use nodeimage_api::{ImagePrePullJob, ImagePullJob, ImageRemovalJob, NodeImage, NodeUpgradeJob};
use owners::{JobCache, OwnerCaches};
use reconcile::{error_policy, reconcile};
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Housekeeping's controller name in logs.
const NAME: &str = "housekeeping";

/// The job kinds' shared caches, read for the owners of tags.
pub struct OwnerFeeds {
    /// ImagePullJobs.
    pub pull: CacheSubscription<ImagePullJob>,
    /// ImagePrePullJobs.
    pub prepull: CacheSubscription<ImagePrePullJob>,
    /// NodeUpgradeJobs.
    pub upgrade: CacheSubscription<NodeUpgradeJob>,
    /// ImageRemovalJobs (owners of removal entries).
    pub removal: CacheSubscription<ImageRemovalJob>,
}

/// Runs housekeeping until `stop` turns true.
pub async fn run(
    ctx: Context,
    stop: signal::Receiver<bool>,
    nodeimages: Subscription,
    nodes: NodeSubscription,
    owners: OwnerFeeds,
) {
    let (relisted_tx, relisted_rx) = mpsc::unbounded::<()>();
    let NodeSubscription {
        store: nodes,
        synced: nodes_synced,
        events,
        ..
    } = nodes;
    let node_events = node_events(cache::event_stream(events), relisted_tx.clone());
    let (pull_jobs, pull_deleted) = job_cache(owners.pull, relisted_tx.clone());
    let (pre_pull_jobs, pre_pull_deleted) = job_cache(owners.prepull, relisted_tx.clone());
    let (upgrade_jobs, upgrade_deleted) = job_cache(owners.upgrade, relisted_tx.clone());
    let (removal_jobs, removal_deleted) = job_cache(owners.removal, relisted_tx);

    let state = Arc::new(reconcile::State {
        ctx,
        nodes,
        nodes_synced,
        owners: OwnerCaches {
            image_pull_jobs: pull_jobs,
            image_pre_pull_jobs: pre_pull_jobs,
            node_upgrade_jobs: upgrade_jobs,
            image_removal_jobs: removal_jobs,
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
        .watches_stream(
            pull_deleted,
            holding(nodeimages.clone(), owners::has_owner_uid),
        )
        .watches_stream(
            pre_pull_deleted,
            holding(nodeimages.clone(), owners::has_owner_uid),
        )
        .watches_stream(
            upgrade_deleted,
            holding(nodeimages.clone(), owners::has_owner_uid),
        )
        .watches_stream(
            removal_deleted,
            holding(nodeimages, owners::has_removal_uid),
        )
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

/// One job kind's cache as housekeeping reads it, and the stream of its
/// deleted jobs; each completed (re)list is told to `relisted`.
fn job_cache<K>(
    sub: CacheSubscription<K>,
    relisted: mpsc::UnboundedSender<()>,
) -> (
    JobCache<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
{
    let undecodable = sub.undecodable;
    let cache = JobCache {
        store: sub.store,
        synced: sub.synced,
        undecodable: Arc::new(move |uid| undecodable.as_ref().is_some_and(|s| s.holds(uid))),
    };
    let deleted = cache::event_stream(sub.events).filter_map(move |event| {
        std::future::ready(match event {
            watcher::Event::Delete(job) => Some(Ok(job)),
            watcher::Event::InitDone => {
                let _ = relisted.unbounded_send(());
                None
            }
            _ => None,
        })
    });
    (cache, deleted)
}

/// Maps a deleted job to the NodeImages whose spec `holds` something of
/// its uid (tags it owned, or removal entries it wrote).
fn holding<K: Resource<DynamicType = ()>>(
    nodeimages: Store<NodeImage>,
    holds: fn(&NodeImageSpec, &str) -> bool,
) -> impl Fn(K) -> Vec<ObjectRef<NodeImage>> + Send + Sync + 'static {
    move |job| {
        let Some(uid) = job.meta().uid.as_deref() else {
            return Vec::new();
        };
        nodeimages
            .state()
            .iter()
            .filter(|ni| holds(&ni.spec, uid))
            .map(|ni| ObjectRef::from_obj(ni.as_ref()))
            .collect()
    }
}
