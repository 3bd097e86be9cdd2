//! The wiring: every cache of this binary is made here, once, before
//! anything reads it (one watch per kind), and each controller is handed
//! the stores and subscriptions it reads; the scrape-time metrics get the
//! same stores ([`Caches::scraped`]). No controller makes a cache of a kind
//! that is here, and none publishes one for others.

use crate::cluster::cache::Cache;
use crate::cluster::{jobcaches, nodecache, nodeimages, podcache, tagwrites};
use crate::controllers::{
    eraserlist, housekeeping, imagelistpulljob, imageprepulljob, imagepulljob, imageremovaljob,
    nodemirror, nodeupgradejob, predownload, startupgate,
};
use crate::engine::jobshell;
use crate::engine::registrypace::{Limits, RegistryPacing};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use crate::runtime::readers::{Listed, RegistryReport, Scraped};
use futures::StreamExt;
use kube::Resource;
use nodeimage_api::{ImagePrePullJob, ImagePullJob, ImageRemovalJob, NodeUpgradeJob};
use nodeimage_ops::health::Readiness;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Every cache of the controller, and the one registry pacing over them.
pub struct Caches {
    nodeimages: nodeimages::NodeImages,
    nodes: nodecache::Nodes,
    pods: podcache::Pods,
    pull_jobs: Cache<ImagePullJob>,
    prepull_jobs: Cache<ImagePrePullJob>,
    upgrade_jobs: Cache<NodeUpgradeJob>,
    removal_jobs: Cache<ImageRemovalJob>,
    pacing: Arc<RegistryPacing>,
}

impl Caches {
    /// The caches, empty until [`controllers`] runs them.
    pub fn new(ctx: &Context, limits: Limits) -> Self {
        let nodeimages = nodeimages::NodeImages::new();
        let pacing = Arc::new(RegistryPacing::new(limits, nodeimages.store.clone()));
        Self {
            nodeimages,
            nodes: nodecache::nodes(),
            pods: podcache::pods(crate::engine::podimages::trim_pod),
            pull_jobs: jobcaches::image_pull_jobs(ctx),
            prepull_jobs: jobcaches::image_pre_pull_jobs(ctx),
            upgrade_jobs: jobcaches::node_upgrade_jobs(ctx),
            removal_jobs: jobcaches::image_removal_jobs(ctx),
            pacing,
        }
    }

    /// What the scrape-time metrics read: these caches' stores (a cache not
    /// listed yet, as on a standby, shows nothing) and the pacing's report.
    pub fn scraped(&self) -> Arc<Scraped> {
        let pacing = self.pacing.clone();
        let registries: RegistryReport = Arc::new(move || pacing.report(chrono::Utc::now()));
        Arc::new(Scraped {
            nodeimages: Listed {
                store: self.nodeimages.store.clone(),
                synced: self.nodeimages.synced.clone(),
            },
            nodes: listed(&self.nodes),
            image_pull_jobs: listed(&self.pull_jobs),
            image_pre_pull_jobs: listed(&self.prepull_jobs),
            node_upgrade_jobs: listed(&self.upgrade_jobs),
            image_removal_jobs: listed(&self.removal_jobs),
            registries,
        })
    }
}

/// A cache's store as a reader that only reads sees it.
fn listed<K>(cache: &Cache<K>) -> Listed<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    Listed {
        store: cache.store(),
        synced: cache.synced(),
    }
}

/// Every controller of this binary over the shared caches, the one entry
/// writer and the one registry pacing, until `stop` turns true. Every
/// reader subscribes to a cache before the cache runs.
pub async fn controllers(
    ctx: Context,
    mut caches: Caches,
    gate: startupgate::plan::Settings,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
) {
    let writer = tagwrites::NodeWriter::new(ctx.client.clone(), caches.nodeimages.store.clone());
    let paced = caches.nodeimages.subscribe().changes;
    tokio::spawn(
        caches
            .pacing
            .clone()
            .follow(paced.take_until(lifecycle::stopped(stop.clone())).boxed()),
    );
    let writes_seen = caches
        .nodeimages
        .subscribe()
        .changes
        .take_until(lifecycle::stopped(stop.clone()));
    let f = caches.feeds(&ctx, &writer);
    let eraser = eraserlist::run(
        ctx.clone(),
        caches.nodeimages.store.clone(),
        caches.nodeimages.synced.clone(),
        stop.clone(),
    );
    tokio::join!(
        caches.run(ctx.clone(), readiness.clone(), stop.clone()),
        writer.follow(writes_seen.boxed()),
        eraser,
        nodemirror::run(ctx.clone(), stop.clone(), f.mirror_nodes, f.mirror),
        housekeeping::run(
            ctx.clone(),
            stop.clone(),
            f.housekeeping_nodeimages,
            f.housekeeping_nodes,
            f.owners
        ),
        imagepulljob::run(f.pull, f.node_store, f.pull_pods, stop.clone()),
        jobshell::run_node_tasks(
            imageprepulljob::WIRING,
            f.prepull,
            f.prepull_nodes,
            Some(f.prepull_pods),
            stop.clone()
        ),
        imagelistpulljob::run(ctx.clone(), readiness.clone(), stop.clone(), f.lists),
        predownload::run(
            ctx.clone(),
            readiness,
            stop.clone(),
            f.predownload_nodes,
            f.predownload
        ),
        startupgate::run(
            ctx,
            gate,
            stop.clone(),
            f.gate_nodes,
            f.gate_nodeimages,
            f.gate_jobs
        ),
        jobshell::run_node_tasks(
            nodeupgradejob::WIRING,
            f.upgrade,
            f.upgrade_nodes,
            None,
            stop.clone()
        ),
        jobshell::run_node_tasks(
            imageremovaljob::WIRING,
            f.removal,
            f.removal_nodes,
            None,
            stop
        ),
    );
}

/// Each controller's share of the caches, subscribed before they run.
struct Feeds {
    mirror: nodemirror::NodeImageFeed,
    mirror_nodes: nodecache::NodeSubscription,
    housekeeping_nodeimages: nodeimages::Subscription,
    housekeeping_nodes: nodecache::NodeSubscription,
    owners: housekeeping::OwnerFeeds,
    pull: jobshell::JobInputs<ImagePullJob>,
    pull_pods: podcache::PodSubscription,
    node_store: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
    prepull: jobshell::JobInputs<ImagePrePullJob>,
    prepull_nodes: nodecache::NodeSubscription,
    prepull_pods: podcache::PodSubscription,
    upgrade: jobshell::JobInputs<NodeUpgradeJob>,
    upgrade_nodes: nodecache::NodeSubscription,
    removal: jobshell::JobInputs<ImageRemovalJob>,
    removal_nodes: nodecache::NodeSubscription,
    lists: crate::cluster::cache::Subscription<ImagePullJob>,
    predownload: predownload::Feeds,
    predownload_nodes: kube::runtime::reflector::Store<k8s_openapi::api::core::v1::Node>,
    gate_nodes: nodecache::NodeSubscription,
    gate_nodeimages: (
        kube::runtime::reflector::Store<nodeimage_api::NodeImage>,
        crate::runtime::readers::Synced,
    ),
    gate_jobs: startupgate::GateJobs,
}

impl Caches {
    /// Pre-download's subscriptions, one per workload kind.
    fn predownload_feeds(&mut self) -> predownload::Feeds {
        let mut feed = || predownload::Feed {
            pods: self.pods.subscribe(),
            jobs: self.pull_jobs.subscribe(),
        };
        predownload::Feeds {
            deployments: feed(),
            statefulsets: feed(),
            daemonsets: feed(),
        }
    }

    /// Subscribes every controller to the caches it reads.
    fn feeds(&mut self, ctx: &Context, writer: &tagwrites::NodeWriter) -> Feeds {
        let owned = nodemirror::Owned::default();
        let recorder = owned.clone();
        self.nodeimages.observe(move |ni| recorder.record(ni));
        let mirror = nodemirror::NodeImageFeed {
            store: self.nodeimages.store.clone(),
            synced: self.nodeimages.synced.clone(),
            events: self.nodeimages.subscribe_meta(),
            owned,
        };
        let predownload = self.predownload_feeds();
        let (c, w, p) = (ctx, writer, &self.pacing);
        let pull = job_inputs(
            c,
            w,
            p,
            self.nodeimages.subscribe(),
            self.pull_jobs.subscribe(),
        );
        let prepull = job_inputs(
            c,
            w,
            p,
            self.nodeimages.subscribe(),
            self.prepull_jobs.subscribe(),
        );
        let upgrade = job_inputs(
            c,
            w,
            p,
            self.nodeimages.subscribe(),
            self.upgrade_jobs.subscribe(),
        );
        Feeds {
            mirror,
            mirror_nodes: self.nodes.subscribe(),
            housekeeping_nodeimages: self.nodeimages.subscribe(),
            housekeeping_nodes: self.nodes.subscribe(),
            owners: housekeeping::OwnerFeeds {
                pull: self.pull_jobs.subscribe(),
                prepull: self.prepull_jobs.subscribe(),
                upgrade: self.upgrade_jobs.subscribe(),
                removal: self.removal_jobs.subscribe(),
            },
            pull,
            pull_pods: self.pods.subscribe(),
            node_store: self.nodes.store(),
            prepull,
            prepull_nodes: self.nodes.subscribe(),
            prepull_pods: self.pods.subscribe(),
            upgrade,
            upgrade_nodes: self.nodes.subscribe(),
            removal: job_inputs(
                c,
                w,
                p,
                self.nodeimages.subscribe(),
                self.removal_jobs.subscribe(),
            ),
            removal_nodes: self.nodes.subscribe(),
            lists: self.pull_jobs.subscribe(),
            predownload,
            predownload_nodes: self.nodes.store(),
            gate_nodes: self.nodes.subscribe(),
            gate_nodeimages: (
                self.nodeimages.store.clone(),
                self.nodeimages.synced.clone(),
            ),
            gate_jobs: startupgate::GateJobs {
                pull: listed(&self.pull_jobs),
                prepull: listed(&self.prepull_jobs),
            },
        }
    }

    /// Runs every cache until `stop` turns true.
    async fn run(self, ctx: Context, readiness: Readiness, stop: signal::Receiver<bool>) {
        let client = ctx.client.clone();
        tokio::join!(
            self.nodeimages.run(ctx, readiness.clone(), stop.clone()),
            self.nodes
                .run(client.clone(), readiness.clone(), stop.clone()),
            self.pods
                .run(client.clone(), readiness.clone(), stop.clone()),
            self.pull_jobs
                .run(client.clone(), readiness.clone(), stop.clone()),
            self.prepull_jobs
                .run(client.clone(), readiness.clone(), stop.clone()),
            self.upgrade_jobs
                .run(client.clone(), readiness.clone(), stop.clone()),
            self.removal_jobs.run(client, readiness, stop),
        );
    }
}

/// One job kind's share of the wiring.
fn job_inputs<K: Resource<DynamicType = ()> + Clone + 'static>(
    ctx: &Context,
    writer: &tagwrites::NodeWriter,
    pacing: &Arc<RegistryPacing>,
    nodeimages: nodeimages::Subscription,
    jobs: crate::cluster::cache::Subscription<K>,
) -> jobshell::JobInputs<K> {
    jobshell::JobInputs {
        ctx: ctx.clone(),
        writer: writer.clone(),
        pacing: pacing.clone(),
        nodeimages,
        jobs,
    }
}
