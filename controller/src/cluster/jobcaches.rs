//! The one cache of each job kind whose jobs own NodeImage tags: its
//! controller, housekeeping (owners), the start-up gate (gating images),
//! ImageListPullJob (its children), pre-download (its jobs) and the
//! scrape-time metrics read one watch and one store per kind. Jobs that do
//! not decode are skipped and reported (`skipped`); each store drops the
//! managed fields, which no reader reads.

use crate::cluster::cache::Cache;
use crate::cluster::skipped::Skipped;
use crate::cluster::watch::without_managed_fields;
use crate::runtime::context::Context;
use nodeimage_api::{ImagePrePullJob, ImagePullJob, ImageRemovalJob, NodeUpgradeJob};

/// The ImagePullJob cache, empty until it runs.
pub fn image_pull_jobs(ctx: &Context) -> Cache<ImagePullJob> {
    Cache::lenient(
        "imagepulljobs",
        "imagepulljobs-synced",
        without_managed_fields::<ImagePullJob>,
        Skipped::new(ctx, "ImagePullJob", Some("message")),
    )
}

/// The ImagePrePullJob cache, empty until it runs.
pub fn image_pre_pull_jobs(ctx: &Context) -> Cache<ImagePrePullJob> {
    Cache::lenient(
        "imageprepulljobs",
        "imageprepulljobs-synced",
        without_managed_fields::<ImagePrePullJob>,
        Skipped::new(ctx, "ImagePrePullJob", Some("reason")),
    )
}

/// The NodeUpgradeJob cache, empty until it runs.
pub fn node_upgrade_jobs(ctx: &Context) -> Cache<NodeUpgradeJob> {
    Cache::lenient(
        "nodeupgradejobs",
        "nodeupgradejobs-synced",
        without_managed_fields::<NodeUpgradeJob>,
        Skipped::new(ctx, "NodeUpgradeJob", Some("reason")),
    )
}

/// The ImageRemovalJob cache, empty until it runs; optional: a chart
/// whose RBAC or CRDs predate the kind (an upgrade of the images alone, or
/// one that skipped the CRD step) leaves removal jobs unserved, not the
/// controller unready.
pub fn image_removal_jobs(ctx: &Context) -> Cache<ImageRemovalJob> {
    Cache::lenient(
        "imageremovaljobs",
        "imageremovaljobs-synced",
        without_managed_fields::<ImageRemovalJob>,
        Skipped::new(ctx, "ImageRemovalJob", Some("message")),
    )
    .optional()
}
