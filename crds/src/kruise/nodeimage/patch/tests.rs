use super::*;
use crate::kruise::nodeimage::tests::{observed, spec, written};

#[test]
fn status_guard_refuses_only_what_makes_the_written_entries_wrong() {
    use serde_json::json;
    // (case, edit of the stored object after the daemon read it, applies)
    type Edit = fn(&mut serde_json::Value);
    let cases: Vec<(&str, Edit, bool)> = vec![
        ("nothing changed", |_| {}, true),
        (
            "the controller added an image (an entry write)",
            |o| o["spec"]["images"]["c"] = json!({"tags": [{"tag": "9"}]}),
            true,
        ),
        (
            "the controller added a tag of the unchanged image",
            |o| {
                if let Some(t) = o["spec"]["images"]["b"]["tags"].as_array_mut() {
                    t.push(json!({"tag": "2"}));
                }
            },
            true,
        ),
        (
            "an owner added to the written tag",
            |o| o["spec"]["images"]["reg.io/a"]["tags"][0]["ownerReferences"] = json!([]),
            true,
        ),
        (
            "the written tag's version moved on",
            |o| o["spec"]["images"]["reg.io/a"]["tags"][0]["version"] = json!(3),
            false,
        ),
        (
            "the written tag was removed",
            |o| o["spec"]["images"]["reg.io/a"]["tags"] = json!([]),
            false,
        ),
        (
            "the written image was removed",
            |o| {
                if let Some(m) = o["spec"]["images"].as_object_mut() {
                    m.remove("reg.io/a");
                }
            },
            false,
        ),
        (
            "a tag inserted before the written one",
            |o| {
                if let Some(t) = o["spec"]["images"]["reg.io/a"]["tags"].as_array_mut() {
                    t.insert(0, json!({"tag": "0"}));
                }
            },
            false,
        ),
        (
            "the controller's housekeeping removed an entry",
            |o| o["status"]["desired"] = json!(1),
            false,
        ),
        (
            "the NodeImage was recreated",
            |o| o["metadata"]["uid"] = json!("u2"),
            false,
        ),
    ];
    let ni = observed();
    let new = written(&ni);
    let patch: json_patch::Patch =
        serde_json::from_value(guarded_status_patch(&ni, &new)).expect("a JSON patch");
    for (case, edit, applies) in cases {
        let mut stored = serde_json::to_value(&ni).expect("serialises");
        edit(&mut stored);
        let result = json_patch::patch(&mut stored, &patch);
        assert_eq!(result.is_ok(), applies, "{case}: {result:?}");
        if applies {
            assert_eq!(
                stored["status"],
                serde_json::to_value(&new).expect("serialises"),
                "{case}"
            );
        }
    }
}

#[test]
fn status_guard_tests_only_the_images_whose_entries_change() {
    let ni = observed();
    let patch = guarded_status_patch(&ni, &written(&ni));
    let paths: Vec<&str> = patch
        .as_array()
        .into_iter()
        .flatten()
        .filter(|op| op["op"] == "test")
        .filter_map(|op| op["path"].as_str())
        .collect();
    assert_eq!(
        paths,
        vec![
            "/metadata/uid",
            "/status/desired",
            "/spec/images/reg.io~1a/tags/0/tag",
            "/spec/images/reg.io~1a/tags/0/version",
        ]
    );
    let by_generation = guarded_status_patch_with(&ni, &written(&ni), StatusGuard::Generation);
    assert_eq!(by_generation[0]["path"], "/metadata/generation");
    assert_eq!(by_generation[0]["value"], 1);
    assert_eq!(by_generation.as_array().map(Vec::len), Some(2));
}

#[test]
fn images_patch_writes_only_the_changed_images_each_tested_as_read() {
    use serde_json::json;
    let old = spec(&[("a/x", "1", None), ("b", "2", None), ("gone", "3", None)]);
    let mut new = old.images.clone().unwrap_or_default();
    new.get_mut("a/x").unwrap().tags[0].version = Some(1);
    new.remove("gone");
    new.insert(
        "new~img".into(),
        spec(&[("new~img", "4", None)]).images.unwrap()["new~img"].clone(),
    );
    let v = |image: &str, images: &BTreeMap<SharedStr, ImageSpec>| {
        serde_json::to_value(&images[image]).unwrap()
    };
    let before = old.images.as_ref().unwrap();
    let ops = images_patch(&old, &new).unwrap();
    assert_eq!(
        ops,
        json!([
            {"op": "test", "path": "/spec/images/a~1x", "value": v("a/x", before)},
            {"op": "add", "path": "/spec/images/a~1x", "value": v("a/x", &new)},
            {"op": "test", "path": "/spec/images/gone", "value": v("gone", before)},
            {"op": "remove", "path": "/spec/images/gone"},
            {"op": "test", "path": "/spec/images/new~0img", "value": null},
            {"op": "add", "path": "/spec/images/new~0img", "value": v("new~img", &new)},
        ])
    );
    // Nothing differs: no operations.
    assert_eq!(images_patch(&old, before).unwrap(), json!([]));
    // No images map yet: the whole spec is tested and the map set.
    let empty = NodeImageSpec::default();
    assert_eq!(
        images_patch(&empty, &new).unwrap(),
        json!([
            {"op": "test", "path": "/spec", "value": {}},
            {"op": "add", "path": "/spec/images", "value": serde_json::to_value(&new).unwrap()},
        ])
    );
}

#[test]
fn images_patch_lands_beside_a_change_to_another_image_and_not_on_its_own() {
    // Edits of images that exist: the json-patch crate, unlike the API
    // server, fails a `test` of an absent key against null (the e2e test
    // in tests/tests/nodeimage.rs covers that case).
    let old = spec(&[("a", "1", None), ("b", "2", None)]);
    let mut new = old.images.clone().unwrap_or_default();
    new.get_mut("a").unwrap().tags[0].version = Some(1);
    let patch: json_patch::Patch =
        serde_json::from_value(images_patch(&old, &new).unwrap()).unwrap();
    let stored = |spec: &NodeImageSpec| serde_json::json!({"spec": spec, "status": {}});
    // Another writer added a tag to image b meanwhile: the write lands, b's tag stays.
    let mut doc = stored(&spec(&[
        ("a", "1", None),
        ("b", "2", None),
        ("b", "5", None),
    ]));
    json_patch::patch(&mut doc, &patch).unwrap();
    assert_eq!(doc["spec"]["images"]["a"]["tags"][0]["version"], 1);
    assert_eq!(doc["spec"]["images"]["b"]["tags"][1]["tag"], "5");
    // Image a itself moved: refused.
    let mut moved = stored(&spec(&[("a", "1", Some(3)), ("b", "2", None)]));
    assert!(json_patch::patch(&mut moved, &patch).is_err());
}

#[test]
fn managed_fields_are_cleared_by_every_spec_write() {
    use serde_json::json;
    assert_eq!(no_managed_fields(), json!([{}]));
    // (case, merge patch body, with the clearing)
    let cases = [
        (
            "beside a resourceVersion",
            json!({"metadata": {"resourceVersion": "7"}, "spec": {"images": null}}),
            json!({"metadata": {"resourceVersion": "7", "managedFields": [{}]}, "spec": {"images": null}}),
        ),
        (
            "without metadata yet",
            json!({"spec": {}}),
            json!({"metadata": {"managedFields": [{}]}, "spec": {}}),
        ),
        ("not an object: left alone", json!([1]), json!([1])),
    ];
    for (case, body, want) in cases {
        assert_eq!(clearing_managed_fields(body), want, "{case}");
    }
    assert_eq!(
        clear_managed_fields_op(),
        json!({"op": "add", "path": "/metadata/managedFields", "value": [{}]})
    );
}
