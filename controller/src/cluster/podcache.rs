//! The one Pod cache of this binary: ImagePullJob's podSelector reads it to
//! choose nodes, pre-download to see which Pods run which images where, and
//! both are woken by its events. Each Pod is trimmed to what they read
//! (`engine::podimages::trim_pod`, handed in by the wiring).

use crate::cluster::cache::{Cache, Subscription};
use k8s_openapi::api::core::v1::Pod;

/// The shared Pod cache.
pub type Pods = Cache<Pod>;

/// What one controller reads of the shared Pod cache.
pub type PodSubscription = Subscription<Pod>;

/// The Pod cache, empty until it runs, keeping what `trim` leaves.
pub fn pods(trim: fn(&mut Pod)) -> Pods {
    Cache::new("pods", "pods-synced", trim)
}
