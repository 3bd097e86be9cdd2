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
        let owned = ni
            .as_ref()
            .map(|m| owned_label_keys(m, FIELD_MANAGER))
            .unwrap_or_default();
        assert_eq!(mirror(&node, ni.as_ref(), &owned), want, "{name}");
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
