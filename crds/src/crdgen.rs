//! The CustomResourceDefinitions of every kind, as installed in a cluster.
//!
//! OpenKruise kinds are served as `v1alpha1` (stored) and `v1beta1` with the
//! same schema: upstream's two versions differ only by optional fields, and
//! our schema is their union, so conversion strategy `None` loses nothing
//! and manifests written for either version apply.

use crate::{ImageListPullJob, ImagePrePullJob, ImagePullJob, NodeImage, NodeUpgradeJob};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Extra version served beside `v1alpha1` for the OpenKruise kinds.
pub const KRUISE_EXTRA_VERSION: &str = "v1beta1";

/// Every CRD nodeimage serves, with a file name for each.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    vec![
        (
            "apps.kruise.io_nodeimages.yaml",
            with_kruise_versions(NodeImage::crd()),
        ),
        (
            "apps.kruise.io_imagepulljobs.yaml",
            with_kruise_versions(ImagePullJob::crd()),
        ),
        (
            "apps.kruise.io_imagelistpulljobs.yaml",
            with_kruise_versions(ImageListPullJob::crd()),
        ),
        (
            "operations.kubeedge.io_imageprepulljobs.yaml",
            ImagePrePullJob::crd(),
        ),
        (
            "operations.kubeedge.io_nodeupgradejobs.yaml",
            NodeUpgradeJob::crd(),
        ),
    ]
}

fn with_kruise_versions(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut extra = crd.spec.versions[0].clone();
    extra.name = KRUISE_EXTRA_VERSION.to_string();
    extra.storage = false;
    extra.served = true;
    crd.spec.versions.push(extra);
    crd
}
