//! The pure decisions of the node mirror: which Nodes get a NodeImage, when
//! its labels need writing (when a NodeImage has outlived its Node is
//! `nodes::orphaned`, which housekeeping decides).

use crate::nodeimage::nodes::wants_nodeimage;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use nodeimage_api::kruise::NodeImage;
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, BTreeSet};

/// Annotation naming the label keys the mirror copied from the Node
/// (sorted, comma-separated): the labels it may remove again. NodeImages
/// carry no managed fields (the controller clears them, see
/// `patch::no_managed_fields`), so ownership is recorded here.
pub const MIRRORED_LABELS: &str = "nodeimage.dev/mirrored-labels";

/// Field manager of the server-side apply earlier versions used; its label
/// keys still count as the mirror's until they are rewritten.
pub const LEGACY_FIELD_MANAGER: &str = "nodeimage-node-mirror";

/// What the mirror does for one Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mirror {
    /// The Node gets no NodeImage (virtual or terminating).
    NotWanted,
    /// The NodeImage exists and carries the Node's labels.
    InSync,
    /// Create the NodeImage with these labels.
    Create(BTreeMap<String, String>),
    /// Apply this JSON merge patch to the NodeImage's metadata.
    Relabel(Value),
}

/// Which labels of a NodeImage are the mirror's, as read from it.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Ownership {
    /// The value of the [`MIRRORED_LABELS`] annotation.
    pub recorded: Option<String>,
    /// The keys an earlier version set by server-side apply.
    pub legacy: BTreeSet<String>,
}

impl Ownership {
    /// What `meta` says the mirror owns.
    pub fn of(meta: &ObjectMeta) -> Self {
        Self {
            recorded: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(MIRRORED_LABELS))
                .cloned(),
            legacy: legacy_owned_keys(meta),
        }
    }

    /// What a NodeImage records now, given what it recorded when last seen
    /// (`before`) and whether its managed fields are gone (`cleared`): keys
    /// an earlier version applied still count once a job's entry write has
    /// cleared the managed fields that named them, until the mirror's
    /// annotation records its keys. Upgraded with jobs running, the mirror
    /// would otherwise forget them and leave a label the Node lost.
    pub fn carried_over(self, before: Option<&Ownership>, cleared: bool) -> Self {
        match before {
            Some(b) if cleared && self.is_empty() && b.recorded.is_none() => Self {
                recorded: None,
                legacy: b.legacy.clone(),
            },
            _ => self,
        }
    }

    /// Nothing recorded either way.
    pub fn is_empty(&self) -> bool {
        self.recorded.is_none() && self.legacy.is_empty()
    }
}

/// Decides whether the NodeImage of `node` must be created or relabelled.
///
/// `nodeimage` is the NodeImage's metadata and `owned` what it records of
/// the mirror's labels ([`Ownership::of`]): the keys the Node no longer
/// has must go, while labels others set are left alone.
pub fn mirror(node: &ObjectMeta, nodeimage: Option<&ObjectMeta>, owned: &Ownership) -> Mirror {
    if !wants_nodeimage(node) {
        return Mirror::NotWanted;
    }
    let want = node.labels.clone().unwrap_or_default();
    let Some(ni) = nodeimage else {
        return Mirror::Create(want);
    };
    let empty = BTreeMap::new();
    let have = ni.labels.as_ref().unwrap_or(&empty);
    let recorded = owned.recorded.as_ref();
    let owned: BTreeSet<&str> = recorded
        .map(|r| parse_keys(r))
        .into_iter()
        .flatten()
        .chain(owned.legacy.iter().map(String::as_str))
        .collect();

    let mut labels = Map::new();
    for (k, v) in &want {
        if have.get(k) != Some(v) {
            labels.insert(k.clone(), Value::String(v.clone()));
        }
    }
    for k in owned {
        if !want.contains_key(k) && have.contains_key(k) {
            labels.insert(k.to_string(), Value::Null);
        }
    }
    let keys = join_keys(&want);
    if labels.is_empty() && recorded == Some(&keys) {
        return Mirror::InSync;
    }
    let mut metadata = Map::new();
    if !labels.is_empty() {
        metadata.insert("labels".into(), Value::Object(labels));
    }
    metadata.insert("annotations".into(), json!({ MIRRORED_LABELS: keys }));
    Mirror::Relabel(json!({ "metadata": metadata }))
}

/// The keys an annotation value names (empty items skipped).
fn parse_keys(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|k| !k.is_empty())
}

/// The annotation value for `labels`: their keys, sorted, comma-separated
/// (a label key holds no comma).
fn join_keys(labels: &BTreeMap<String, String>) -> String {
    labels
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

/// The label keys an earlier version of the mirror owns through
/// server-side apply (`f:metadata` → `f:labels` → `f:<key>` of its Apply
/// entry).
pub fn legacy_owned_keys(meta: &ObjectMeta) -> BTreeSet<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|e| {
            e.manager.as_deref() == Some(LEGACY_FIELD_MANAGER)
                && e.operation.as_deref() == Some("Apply")
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

/// The NodeImage `name` as the mirror creates it: `labels`, the annotation
/// that records them, and an empty spec.
pub fn create_body(name: &str, labels: &BTreeMap<String, String>) -> Value {
    json!({
        "apiVersion": NodeImage::api_version(&()),
        "kind": NodeImage::kind(&()),
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": { MIRRORED_LABELS: join_keys(labels) },
        },
        "spec": {},
    })
}

#[cfg(test)]
mod tests;
