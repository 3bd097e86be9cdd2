//! The pure decisions of the node mirror: which Nodes get a NodeImage, when
//! its labels need applying (when a NodeImage has outlived its Node is
//! `nodes::orphaned`, which housekeeping decides).

use crate::nodes::wants_nodeimage;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use nodeimage_api::kruise::NodeImage;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Field manager of the mirror's server-side apply; it owns exactly the
/// NodeImage labels copied from the Node.
pub const FIELD_MANAGER: &str = "nodeimage-node-mirror";

/// What the mirror does for one Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mirror {
    /// The Node gets no NodeImage (virtual or terminating).
    NotWanted,
    /// The NodeImage exists and carries the Node's labels.
    InSync,
    /// Apply these labels (creating the NodeImage if it is absent).
    Apply(BTreeMap<String, String>),
}

/// Decides whether the NodeImage of `node` must be created or relabelled.
///
/// `nodeimage` is the NodeImage's metadata and `owned` the label keys the
/// mirror set earlier (from its managed-field entry, `owned_label_keys`):
/// those the Node no longer has must go, while labels others set are left
/// alone.
pub fn mirror(
    node: &ObjectMeta,
    nodeimage: Option<&ObjectMeta>,
    owned: &BTreeSet<String>,
) -> Mirror {
    if !wants_nodeimage(node) {
        return Mirror::NotWanted;
    }
    let want = node.labels.clone().unwrap_or_default();
    let Some(ni) = nodeimage else {
        return Mirror::Apply(want);
    };
    let have = ni.labels.clone().unwrap_or_default();
    let missing_or_different = want.iter().any(|(k, v)| have.get(k) != Some(v));
    let stale = owned.iter().any(|k| !want.contains_key(k));
    if missing_or_different || stale {
        Mirror::Apply(want)
    } else {
        Mirror::InSync
    }
}

/// The label keys `manager` owns through server-side apply, read from the
/// object's managed fields (`f:metadata` → `f:labels` → `f:<key>`).
pub fn owned_label_keys(meta: &ObjectMeta, manager: &str) -> BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|e| {
            e.manager.as_deref() == Some(manager) && e.operation.as_deref() == Some("Apply")
        })
        .filter_map(|e| e.fields_v1.as_ref())
        .filter_map(|f| f.0.get("f:metadata")?.get("f:labels")?.as_object().cloned())
        .flat_map(|labels| {
            labels
                .keys()
                .filter_map(|k| k.strip_prefix("f:").map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The server-side apply body that gives NodeImage `name` exactly `labels`
/// from this manager, creating it with an empty spec if needed.
pub fn apply_body(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({
        "apiVersion": NodeImage::api_version(&()),
        "kind": NodeImage::kind(&()),
        "metadata": { "name": name, "labels": labels },
        "spec": {},
    })
}

#[cfg(test)]
mod tests;
