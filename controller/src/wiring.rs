//! The wiring: every cache of this binary is made here, once, before
//! anything reads it (one watch per kind), and each controller is handed
//! the stores and subscriptions it reads; the scrape-time metrics get the
//! same stores ([`Caches::scraped`]). No controller makes a cache of a kind
//! that is here, and none publishes one for others.

use crate::cluster::cache::Cache;
use crate::cluster::{jobcaches, nodecache, nodeimages, podcache, tagwrites};
use crate::controllers::{
    housekeeping, imagelistpulljob, imageprepulljob, imagepulljob, nodemirror, nodeupgradejob,
    predownload, startupgate,
};
use crate::engine::jobshell;
use crate::engine::registrypace::{Limits, RegistryPacing};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use crate::runtime::readers::{Listed, RegistryReport, Scraped};
use futures::StreamExt;
use kube::Resource;
use nodeimage_api::{ImagePrePullJob, ImagePullJob, NodeUpgradeJob};
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
    caches: Caches,
    gate: startupgate::plan::Settings,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
) {
    let Caches {
        mut nodeimages,
        mut nodes,
        mut pods,
        mut pull_jobs,
        mut prepull_jobs,
        mut upgrade_jobs,
        pacing,
    } = caches;
    let writer = tagwrites::NodeWriter::new(ctx.client.clone(), nodeimages.store.clone());
    let paced = nodeimages.subscribe().changes;
    tokio::spawn(
        pacing
            .clone()
            .follow(paced.take_until(lifecycle::stopped(stop.clone())).boxed()),
    );
    let owned = nodemirror::Owned::default();
    let recorder = owned.clone();
    nodeimages.observe(move |ni| recorder.record(ni));
    let mirror_feed = nodemirror::NodeImageFeed {
        store: nodeimages.store.clone(),
        synced: nodeimages.synced.clone(),
        events: nodeimages.subscribe_meta(),
        owned,
    };
    let for_writer = nodeimages.subscribe();
    let [for_housekeeping, for_pull, for_prepull, for_upgrade] =
        std::array::from_fn(|_| nodeimages.subscribe());
    let [n_mirror, n_housekeeping, n_prepull, n_upgrade, n_gate] =
        std::array::from_fn(|_| nodes.subscribe());
    let [p_pull, p_deployments, p_statefulsets, p_daemonsets] =
        std::array::from_fn(|_| pods.subscribe());
    let [
        j_pull,
        j_owners,
        j_lists,
        j_deployments,
        j_statefulsets,
        j_daemonsets,
    ] = std::array::from_fn(|_| pull_jobs.subscribe());
    let [pre_jobs, pre_owners] = std::array::from_fn(|_| prepull_jobs.subscribe());
    let [up_jobs, up_owners] = std::array::from_fn(|_| upgrade_jobs.subscribe());
    let gate_jobs = startupgate::GateJobs {
        pull: listed(&pull_jobs),
        prepull: listed(&prepull_jobs),
    };
    let owners = housekeeping::OwnerFeeds {
        pull: j_owners,
        prepull: pre_owners,
        upgrade: up_owners,
    };
    let feeds = predownload::Feeds {
        deployments: predownload::Feed {
            pods: p_deployments,
            jobs: j_deployments,
        },
        statefulsets: predownload::Feed {
            pods: p_statefulsets,
            jobs: j_statefulsets,
        },
        daemonsets: predownload::Feed {
            pods: p_daemonsets,
            jobs: j_daemonsets,
        },
    };
    let node_store = nodes.store();
    let nodeimages_for_gate = (nodeimages.store.clone(), nodeimages.synced.clone());
    let writes_seen = for_writer
        .changes
        .take_until(lifecycle::stopped(stop.clone()));
    let client = ctx.client.clone();
    tokio::join!(
        nodeimages.run(ctx.clone(), readiness.clone(), stop.clone()),
        nodes.run(client.clone(), readiness.clone(), stop.clone()),
        pods.run(client.clone(), readiness.clone(), stop.clone()),
        pull_jobs.run(client.clone(), readiness.clone(), stop.clone()),
        prepull_jobs.run(client.clone(), readiness.clone(), stop.clone()),
        upgrade_jobs.run(client, readiness.clone(), stop.clone()),
        writer.clone().follow(writes_seen.boxed()),
        nodemirror::run(ctx.clone(), stop.clone(), n_mirror, mirror_feed),
        housekeeping::run(
            ctx.clone(),
            stop.clone(),
            for_housekeeping,
            n_housekeeping,
            owners
        ),
        imagepulljob::run(
            job_inputs(&ctx, &writer, &pacing, for_pull, j_pull),
            node_store.clone(),
            p_pull,
            stop.clone()
        ),
        jobshell::run_node_tasks(
            imageprepulljob::WIRING,
            job_inputs(&ctx, &writer, &pacing, for_prepull, pre_jobs),
            n_prepull,
            stop.clone()
        ),
        imagelistpulljob::run(ctx.clone(), readiness.clone(), stop.clone(), j_lists),
        predownload::run(
            ctx.clone(),
            readiness.clone(),
            stop.clone(),
            node_store,
            feeds
        ),
        startupgate::run(
            ctx.clone(),
            gate,
            stop.clone(),
            n_gate,
            nodeimages_for_gate,
            gate_jobs
        ),
        jobshell::run_node_tasks(
            nodeupgradejob::WIRING,
            job_inputs(&ctx, &writer, &pacing, for_upgrade, up_jobs),
            n_upgrade,
            stop
        ),
    );
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
