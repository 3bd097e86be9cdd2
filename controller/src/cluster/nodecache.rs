//! The one Node cache of this binary. The node mirror, housekeeping, the
//! start-up gate, the job kinds and pre-download read Nodes through one
//! watch and one store (`cluster::cache`), trimmed to what any of them
//! reads (`nodes::trim_node`). (Four caches held four copies of every Node;
//! docs/benchmarks.md, "Controller memory".)

use crate::cluster::cache::{Cache, Subscription};
use k8s_openapi::api::core::v1::Node;

/// The shared Node cache.
pub type Nodes = Cache<Node>;

/// What one controller reads of the shared Node cache.
pub type NodeSubscription = Subscription<Node>;

/// The Node cache, empty until it runs.
pub fn nodes() -> Nodes {
    Cache::new("nodes", "nodes-synced", crate::nodeimage::nodes::trim_node)
}
