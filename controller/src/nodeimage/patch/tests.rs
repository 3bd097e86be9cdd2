use super::*;

#[test]
fn merge_diff_table() {
    let cases = [
        ("equal", json!({"a": 1}), json!({"a": 1}), None),
        (
            "scalar changed",
            json!({"a": 1}),
            json!({"a": 2}),
            Some(json!({"a": 2})),
        ),
        (
            "key removed",
            json!({"a": 1, "b": 2}),
            json!({"a": 1}),
            Some(json!({"b": null})),
        ),
        (
            "key added",
            json!({}),
            json!({"a": {"x": 1}}),
            Some(json!({"a": {"x": 1}})),
        ),
        (
            "nested change only",
            json!({"a": {"x": 1, "y": 2}, "b": 3}),
            json!({"a": {"x": 1, "y": 5}, "b": 3}),
            Some(json!({"a": {"y": 5}})),
        ),
        (
            "arrays replaced whole",
            json!({"tags": [{"tag": "1"}, {"tag": "2"}]}),
            json!({"tags": [{"tag": "2"}]}),
            Some(json!({"tags": [{"tag": "2"}]})),
        ),
        (
            "from null",
            Value::Null,
            json!({"a": 1}),
            Some(json!({"a": 1})),
        ),
        (
            "all keys removed",
            json!({"a": 1}),
            json!({}),
            Some(json!({"a": null})),
        ),
    ];
    for (name, old, new, want) in cases {
        assert_eq!(merge_diff(&old, &new), want, "{name}");
    }
}

#[test]
fn guarded_patch_nests_the_diff_and_carries_the_resource_version() {
    let old = json!({"nginx": {"tags": [{"tag": "1"}]}, "redis": {"tags": [{"tag": "7"}]}});
    let new = json!({"nginx": {"tags": [{"tag": "1"}]}});
    let patch = guarded("spec", Some("42"), &["spec", "images"], &old, &new).expect("serialises");
    assert_eq!(
        patch,
        Some(json!({
            "metadata": {"resourceVersion": "42"},
            "spec": {"images": {"redis": null}},
        }))
    );
    let same = guarded("spec", Some("42"), &["spec", "images"], &old, &old).expect("serialises");
    assert_eq!(same, None);
}

#[test]
fn spec_writes_clear_the_managed_fields() {
    let guarded_body =
        json!({"metadata": {"resourceVersion": "42"}, "spec": {"images": {"a": null}}});
    assert_eq!(
        clearing_managed_fields(guarded_body),
        json!({
            "metadata": {"resourceVersion": "42", "managedFields": [{}]},
            "spec": {"images": {"a": null}},
        })
    );

    let old: nodeimage_api::kruise::NodeImageSpec = serde_json::from_value(json!({
        "images": {"a": {"tags": [{"tag": "1", "version": 0}]}}
    }))
    .expect("decodes");
    let mut new = old.images.clone().unwrap_or_default();
    new.clear();
    let ops = serde_json::to_value(images_tested(&old, &new).expect("builds")).expect("encodes");
    let ops = ops.as_array().expect("a JSON Patch is a list");
    assert_eq!(
        ops.last(),
        Some(&json!({"op": "add", "path": "/metadata/managedFields", "value": [{}]})),
        "{ops:?}"
    );
    // Applied to a stored object with managed fields, the patch leaves the
    // one empty entry the API server reads as "clear".
    let mut doc = json!({
        "metadata": {"managedFields": [{"manager": "m", "operation": "Update"}]},
        "spec": {"images": {"a": {"tags": [{"tag": "1", "purpose": "Pull", "version": 0}]}}},
    });
    let patch: json_patch::Patch =
        serde_json::from_value(Value::Array(ops.clone())).expect("decodes");
    json_patch::patch(&mut doc, &patch).expect("applies");
    assert_eq!(doc["metadata"]["managedFields"], json!([{}]));
    assert_eq!(doc["spec"]["images"], json!({}));
}
