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
fn spec_tested_tests_the_whole_spec_then_sets_the_images() {
    let old = json!({"images": {"nginx": {"tags": [{"tag": "1"}]}}});
    let new = json!({"redis": {"tags": [{"tag": "7"}]}});
    let patch = spec_tested(&old, &new).expect("serialises");
    assert_eq!(
        serde_json::to_value(&patch).expect("serialises"),
        json!([
            {"op": "test", "path": "/spec", "value": old},
            {"op": "add", "path": "/spec/images", "value": new},
        ])
    );
    // Applied locally: succeeds on the spec it was built from, fails on any other.
    let mut doc = json!({"spec": old, "status": {"x": 1}});
    json_patch::patch(&mut doc, &patch).expect("applies");
    assert_eq!(doc["spec"]["images"], new);
    let mut moved = json!({"spec": {"images": {}}, "status": {"x": 1}});
    assert!(json_patch::patch(&mut moved, &patch).is_err());
}
