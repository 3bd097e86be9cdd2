use super::*;
use crate::nodeimage::nodes::fixtures::{meta, terminating};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

/// NodeImage metadata whose annotation records `keys` as the mirror's.
fn recorded(mut m: ObjectMeta, keys: &str) -> ObjectMeta {
    m.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(MIRRORED_LABELS.into(), keys.into());
    m
}

/// NodeImage metadata whose labels `owned` were applied by `manager`.
fn applied(mut m: ObjectMeta, manager: &str, owned: &[&str]) -> ObjectMeta {
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

fn relabel(labels: Value, keys: &str) -> Mirror {
    let mut metadata = json!({"annotations": {MIRRORED_LABELS: keys}});
    if !labels.is_null() {
        metadata["labels"] = labels;
    }
    Mirror::Relabel(json!({ "metadata": metadata }))
}

#[test]
fn mirror_table() {
    let zone = ("zone", "a");
    let cases: Vec<(&str, ObjectMeta, Option<ObjectMeta>, Mirror)> = vec![
        (
            "absent NodeImage is created with the node's labels",
            meta(&[zone]),
            None,
            Mirror::Create(labels(&[zone])),
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
            Mirror::Create(labels(&[("type", "worker")])),
        ),
        (
            "same labels, recorded: in sync",
            meta(&[zone]),
            Some(recorded(meta(&[zone]), "zone")),
            Mirror::InSync,
        ),
        (
            "no labels anywhere, recorded as none: in sync",
            meta(&[]),
            Some(recorded(meta(&[]), "")),
            Mirror::InSync,
        ),
        (
            "label added on the node",
            meta(&[zone, ("gpu", "yes")]),
            Some(recorded(meta(&[zone]), "zone")),
            relabel(json!({"gpu": "yes"}), "gpu,zone"),
        ),
        (
            "label changed on the node",
            meta(&[("zone", "b")]),
            Some(recorded(meta(&[zone]), "zone")),
            relabel(json!({"zone": "b"}), "zone"),
        ),
        (
            "label removed from the node that the mirror set",
            meta(&[]),
            Some(recorded(meta(&[zone]), "zone")),
            relabel(json!({"zone": null}), ""),
        ),
        (
            "extra label set by someone else is left alone",
            meta(&[zone]),
            Some(recorded(meta(&[zone, ("team", "x")]), "zone")),
            Mirror::InSync,
        ),
        (
            "a label someone else set is not removed with the node's",
            meta(&[]),
            Some(recorded(meta(&[zone, ("team", "x")]), "zone")),
            relabel(json!({"zone": null}), ""),
        ),
        (
            "a recorded key already gone from the NodeImage: only the record changes",
            meta(&[]),
            Some(recorded(meta(&[]), "zone")),
            relabel(Value::Null, ""),
        ),
        (
            "labels right but unrecorded (made by an earlier version): recorded",
            meta(&[zone]),
            Some(meta(&[zone])),
            relabel(Value::Null, "zone"),
        ),
        (
            "a key the earlier version applied and the node dropped goes",
            meta(&[]),
            Some(applied(meta(&[zone]), LEGACY_FIELD_MANAGER, &["zone"])),
            relabel(json!({"zone": null}), ""),
        ),
        (
            "labels another manager applied are not the mirror's",
            meta(&[]),
            Some(recorded(
                applied(meta(&[("team", "x")]), "kubectl", &["team"]),
                "",
            )),
            Mirror::InSync,
        ),
        (
            "a hand-edited record with blanks and spaces still parses",
            meta(&[]),
            Some(recorded(meta(&[zone, ("team", "x")]), " zone ,,")),
            relabel(json!({"zone": null}), ""),
        ),
    ];
    for (name, node, ni, want) in cases {
        let owned = ni.as_ref().map(Ownership::of).unwrap_or_default();
        assert_eq!(mirror(&node, ni.as_ref(), &owned), want, "{name}");
    }
}

#[test]
fn legacy_keys_come_from_the_apply_entry_of_the_old_manager() {
    let mut m = applied(
        meta(&[]),
        LEGACY_FIELD_MANAGER,
        &["a", "kubernetes.io/hostname"],
    );
    if let Some(fields) = m.managed_fields.as_mut() {
        fields.push(ManagedFieldsEntry {
            manager: Some(LEGACY_FIELD_MANAGER.into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:metadata": {"f:labels": {"f:b": {}}}}))),
            ..Default::default()
        });
    }
    let keys: Vec<String> = legacy_owned_keys(&m).into_iter().collect();
    assert_eq!(keys, vec!["a", "kubernetes.io/hostname"]);
}

#[test]
fn legacy_keys_outlive_managed_fields_cleared_before_the_record() {
    let legacy = |keys: &[&str]| Ownership {
        recorded: None,
        legacy: keys.iter().map(|k| k.to_string()).collect(),
    };
    let record = |r: &str| Ownership {
        recorded: Some(r.into()),
        legacy: BTreeSet::new(),
    };
    let none = Ownership::default();
    // (now, before, managed fields cleared, expected)
    let cases: Vec<(Ownership, Option<Ownership>, bool, Ownership)> = vec![
        // Managed fields cleared by an entry write before the mirror wrote
        // its annotation: the keys seen before still count.
        (
            none.clone(),
            Some(legacy(&["zone"])),
            true,
            legacy(&["zone"]),
        ),
        // Managed fields still there but the old manager's keys gone (taken
        // over by another apply): what the object says.
        (none.clone(), Some(legacy(&["zone"])), false, none.clone()),
        // Never seen, or nothing before: nothing.
        (none.clone(), None, true, none.clone()),
        (none.clone(), Some(none.clone()), true, none.clone()),
        // Recorded since: the record rules, the old keys go.
        (
            record("zone"),
            Some(legacy(&["zone", "old"])),
            true,
            record("zone"),
        ),
        // Recorded before and the annotation removed by hand: not revived
        // from legacy keys (the mirror records anew what the Node has).
        (none.clone(), Some(record("zone")), true, none.clone()),
        // Still applied: what the object says now.
        (legacy(&["a"]), Some(legacy(&["b"])), false, legacy(&["a"])),
    ];
    for (now, before, cleared, want) in cases {
        assert_eq!(
            now.clone().carried_over(before.as_ref(), cleared),
            want,
            "now {now:?}, before {before:?}, cleared {cleared}"
        );
    }
}

#[test]
fn create_body_sets_labels_their_record_and_an_empty_spec() {
    let body = create_body("node-1", &labels(&[("zone", "a"), ("gpu", "yes")]));
    assert_eq!(
        body,
        json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {
                "name": "node-1",
                "labels": {"zone": "a", "gpu": "yes"},
                "annotations": {MIRRORED_LABELS: "gpu,zone"},
            },
            "spec": {},
        })
    );
}
