//! The CustomResourceDefinitions of every kind, as installed in a cluster.
//!
//! OpenKruise kinds are served as `v1alpha1` (stored) and `v1beta1` with the
//! same schema: upstream's two versions differ only by optional fields, and
//! our schema is their union, so conversion strategy `None` loses nothing
//! and manifests written for either version apply.
//!
//! KubeEdge kinds are served as `v1alpha1` and `v1alpha2` with one schema,
//! the union of both (see `kubeedge`), and stored as `v1alpha2` as KubeEdge
//! 1.21+ stores them: our CRDs apply over upstream's (whose storedVersions
//! name v1alpha2) and objects upstream stored read on. Conversion `None`
//! needs no webhook; each version has its own printer columns.
//!
//! nodeimage's own kinds (`nodeimage.dev`) are served as `v1alpha1` only.

use crate::{
    ImageListPullJob, ImagePrePullJob, ImagePullJob, ImageRemovalJob, NodeImage, NodeUpgradeJob,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// Extra version served beside `v1alpha1` for the OpenKruise kinds.
pub const KRUISE_EXTRA_VERSION: &str = "v1beta1";
/// Version the KubeEdge kinds are stored in, served beside `v1alpha1`.
pub const KUBEEDGE_STORAGE_VERSION: &str = "v1alpha2";

/// Label on nodeimage's CRDs: the chart refuses to install over CRDs
/// without it (another controller's) unless told to take over.
pub const OWNER_LABEL: (&str, &str) = ("app.kubernetes.io/part-of", "nodeimage");

/// Every CRD nodeimage serves, with a file name for each.
pub fn all() -> Vec<(&'static str, CustomResourceDefinition)> {
    let mut all = unlabelled();
    for (_, crd) in all.iter_mut() {
        crd.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(OWNER_LABEL.0.into(), OWNER_LABEL.1.into());
    }
    all
}

fn unlabelled() -> Vec<(&'static str, CustomResourceDefinition)> {
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
            with_kubeedge_versions(ImagePrePullJob::crd()),
        ),
        (
            "operations.kubeedge.io_nodeupgradejobs.yaml",
            with_kubeedge_versions(NodeUpgradeJob::crd()),
        ),
        // nodeimage's own kind: one version, no upstream to follow.
        (
            "nodeimage.dev_imageremovaljobs.yaml",
            ImageRemovalJob::crd(),
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

fn with_kubeedge_versions(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut v2 = crd.spec.versions[0].clone();
    crd.spec.versions[0].storage = false;
    v2.name = KUBEEDGE_STORAGE_VERSION.to_string();
    v2.storage = true;
    v2.served = true;
    // v1alpha2 users read phase, not state/event.
    if let Some(cols) = v2.additional_printer_columns.as_mut() {
        cols.retain(|c| !matches!(c.name.as_str(), "STATE" | "EVENT"));
        let at = cols
            .iter()
            .position(|c| c.name == "VERSION")
            .map_or(0, |i| i + 1);
        cols.insert(
            at,
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceColumnDefinition {
                name: "PHASE".into(),
                type_: "string".into(),
                json_path: ".status.phase".into(),
                description: Some("Phase of the job".into()),
                ..Default::default()
            },
        );
    }
    crd.spec.versions.push(v2);
    crd
}
