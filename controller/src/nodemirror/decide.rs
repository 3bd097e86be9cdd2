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
/// `nodeimage` is the NodeImage's metadata with the mirror's managed-field
/// entry, which tells which labels the mirror set earlier: those the Node no
/// longer has must go, while labels others set are left alone.
pub fn mirror(node: &ObjectMeta, nodeimage: Option<&ObjectMeta>) -> Mirror {
    if !wants_nodeimage(node) {
        return Mirror::NotWanted;
    }
    let want = node.labels.clone().unwrap_or_default();
    let Some(ni) = nodeimage else {
        return Mirror::Apply(want);
    };
    let have = ni.labels.clone().unwrap_or_default();
    let missing_or_different = want.iter().any(|(k, v)| have.get(k) != Some(v));
    let stale = owned_label_keys(ni, FIELD_MANAGER)
        .iter()
        .any(|k| !want.contains_key(k));
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
mod tests {
    use super::*;
    use crate::nodes::fixtures::{meta, terminating};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

    /// NodeImage metadata whose labels `owned` were applied by the mirror.
    fn with_owned(mut m: ObjectMeta, manager: &str, owned: &[&str]) -> ObjectMeta {
        let labels: serde_json::Map<String, Value> = owned
            .iter()
            .map(|k| (format!("f:{k}"), json!({})))
            .collect();
        m.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            fields_v1: Some(FieldsV1(json!({"f:metadata": {"f:labels": labels}}))),
            ..Default::default()
        }]);
        m
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect()
    }

    #[test]
    fn mirror_table() {
        let zone = ("zone", "a");
        let cases: Vec<(&str, ObjectMeta, Option<ObjectMeta>, Mirror)> = vec![
            (
                "absent NodeImage is created with the node's labels",
                meta(&[zone]),
                None,
                Mirror::Apply(labels(&[zone])),
            ),
            (
                "virtual-kubelet node gets none",
                meta(&[("type", "virtual-kubelet")]),
                None,
                Mirror::NotWanted,
            ),
            (
                "terminating node gets none",
                terminating(meta(&[zone])),
                None,
                Mirror::NotWanted,
            ),
            (
                "other type label is a normal node",
                meta(&[("type", "worker")]),
                None,
                Mirror::Apply(labels(&[("type", "worker")])),
            ),
            (
                "same labels: in sync",
                meta(&[zone]),
                Some(with_owned(meta(&[zone]), FIELD_MANAGER, &["zone"])),
                Mirror::InSync,
            ),
            (
                "label added on the node",
                meta(&[zone, ("gpu", "yes")]),
                Some(with_owned(meta(&[zone]), FIELD_MANAGER, &["zone"])),
                Mirror::Apply(labels(&[zone, ("gpu", "yes")])),
            ),
            (
                "label changed on the node",
                meta(&[("zone", "b")]),
                Some(with_owned(meta(&[zone]), FIELD_MANAGER, &["zone"])),
                Mirror::Apply(labels(&[("zone", "b")])),
            ),
            (
                "label removed from the node that the mirror set",
                meta(&[]),
                Some(with_owned(meta(&[zone]), FIELD_MANAGER, &["zone"])),
                Mirror::Apply(labels(&[])),
            ),
            (
                "extra label set by someone else is left alone",
                meta(&[zone]),
                Some(with_owned(
                    meta(&[zone, ("team", "x")]),
                    FIELD_MANAGER,
                    &["zone"],
                )),
                Mirror::InSync,
            ),
            (
                "labels owned by another manager do not count as ours",
                meta(&[]),
                Some(with_owned(meta(&[("team", "x")]), "kubectl", &["team"])),
                Mirror::InSync,
            ),
        ];
        for (name, node, ni, want) in cases {
            assert_eq!(mirror(&node, ni.as_ref()), want, "{name}");
        }
    }

    #[test]
    fn owned_keys_come_from_the_apply_entry_of_the_manager() {
        let mut m = with_owned(meta(&[]), FIELD_MANAGER, &["a", "kubernetes.io/hostname"]);
        if let Some(fields) = m.managed_fields.as_mut() {
            fields.push(ManagedFieldsEntry {
                manager: Some(FIELD_MANAGER.into()),
                operation: Some("Update".into()),
                fields_v1: Some(FieldsV1(json!({"f:metadata": {"f:labels": {"f:b": {}}}}))),
                ..Default::default()
            });
        }
        let keys: Vec<String> = owned_label_keys(&m, FIELD_MANAGER).into_iter().collect();
        assert_eq!(keys, vec!["a", "kubernetes.io/hostname"]);
    }

    #[test]
    fn apply_body_sets_only_labels_and_an_empty_spec() {
        let body = apply_body("node-1", &labels(&[("zone", "a")]));
        assert_eq!(
            body,
            json!({
                "apiVersion": "apps.kruise.io/v1alpha1",
                "kind": "NodeImage",
                "metadata": {"name": "node-1", "labels": {"zone": "a"}},
                "spec": {},
            })
        );
    }
}
