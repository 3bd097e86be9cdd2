//! The stores one controller makes and others read: the start-up gate reads
//! the job kinds' caches, and the scrape-time metrics read them all. Each
//! slot is set once, by the controller that makes the store (its owner and
//! only writer); every reader only reads, and a slot not set yet means "not
//! listed yet". They live as long as the process, like the stores behind
//! them.

use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::Store;
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::ImagePullJob;
use nodeimage_api::kubeedge::{ImagePrePullJob, NodeUpgradeJob};
use std::sync::{Arc, OnceLock};

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

/// The shared stores, each set by its owner (named on the field).
#[derive(Default)]
pub struct Stores {
    /// Every NodeImage (set by `lib.rs` from `cluster::nodeimages`).
    pub nodeimages: OnceLock<Store<NodeImage>>,
    /// ImagePullJobs (set by the ImagePullJob controller).
    pub image_pull_jobs: OnceLock<Store<ImagePullJob>>,
    /// ImagePrePullJobs (set by the ImagePrePullJob controller).
    pub image_pre_pull_jobs: OnceLock<Store<ImagePrePullJob>>,
    /// NodeUpgradeJobs (set by the NodeUpgradeJob controller).
    pub node_upgrade_jobs: OnceLock<Store<NodeUpgradeJob>>,
    /// Registry pacing, per registry (set by `lib.rs` from the pacing).
    pub registries: OnceLock<RegistryReport>,
    /// Every Node, trimmed: the only taint a trimmed Node keeps is the
    /// start-up gate's (`nodeimage::nodes::trim_node`); set by the gate.
    pub nodes: OnceLock<Store<Node>>,
}

impl std::fmt::Debug for Stores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stores")
    }
}
