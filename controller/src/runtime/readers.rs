//! How a reader sees a shared cache it never writes ([`Listed`], [`Synced`]),
//! and what the scrape-time metrics read ([`Scraped`]): stores made by the
//! wiring before anything runs and handed to each reader, never published
//! into slots a reader waits for.

use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::runtime::reflector::Store;
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::ImagePullJob;
use nodeimage_api::kubeedge::{ImagePrePullJob, NodeUpgradeJob};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// One registry's pacing at scrape time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegistryGauge {
    /// Registry host (Docker Hub's aliases as `docker.io`).
    pub registry: String,
    /// Nodes pulling from it now (unfinished entries, written or being written).
    pub in_flight: usize,
    /// Its limit, if it has one.
    pub limit: Option<usize>,
    /// Some tag waits because it answered 429.
    pub rate_limited: bool,
    /// Jobs waiting for a slot on it.
    pub jobs_waiting: usize,
}

/// Reads every registry's gauges at scrape time.
pub type RegistryReport = Arc<dyn Fn() -> Vec<RegistryGauge> + Send + Sync>;

/// What the scrape-time metrics read, built by the wiring (`wiring.rs`)
/// from the caches it makes before anything runs; a cache not listed yet
/// shows no series.
pub struct Scraped {
    /// Every NodeImage.
    pub nodeimages: Listed<NodeImage>,
    /// Every Node, trimmed: the only taint a trimmed Node keeps is the
    /// start-up gate's (`nodeimage::nodes::trim_node`).
    pub nodes: Listed<Node>,
    /// ImagePullJobs.
    pub image_pull_jobs: Listed<ImagePullJob>,
    /// ImagePrePullJobs.
    pub image_pre_pull_jobs: Listed<ImagePrePullJob>,
    /// NodeUpgradeJobs.
    pub node_upgrade_jobs: Listed<NodeUpgradeJob>,
    /// ImageRemovalJobs.
    pub image_removal_jobs: Listed<nodeimage_api::ImageRemovalJob>,
    /// Registry pacing, per registry.
    pub registries: RegistryReport,
}

impl std::fmt::Debug for Scraped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Scraped")
    }
}

/// A shared store as a reader sees it: the objects, and whether they are a
/// complete list yet (an empty store not listed yet means nothing).
pub struct Listed<K: Resource<DynamicType = ()> + Clone + 'static> {
    /// The cache's store (its watch is the only writer).
    pub store: Store<K>,
    /// Set once `store` holds a complete list.
    pub synced: Synced,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Listed<K> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            synced: self.synced.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Listed<K> {
    /// Every object, once the store holds a complete list.
    pub fn listed(&self) -> Option<Vec<Arc<K>>> {
        self.synced.get().then(|| self.store.state())
    }
}

/// Whether a reflector store has completed its first list.
#[derive(Clone, Debug, Default)]
pub struct Synced(Arc<AtomicBool>);

impl Synced {
    /// True once the store holds a complete list.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// Marks the store as holding a complete list (its watch does).
    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// A flag that is already set, for tests of code that reads stores.
    #[cfg(test)]
    pub fn done() -> Self {
        let s = Self::default();
        s.set();
        s
    }
}
