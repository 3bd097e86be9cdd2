use super::*;
use serde_json::json;

fn ni(tags: serde_json::Value, statuses: serde_json::Value) -> NodeImage {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "NodeImage",
        "metadata": {"name": "node-1"},
        "spec": {"images": {"nginx": {"tags": tags}}},
        "status": {"imageStatuses": {"nginx": {"tags": statuses}}},
    }))
    .expect("valid NodeImage")
}

fn owner(name: &str) -> serde_json::Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob", "namespace": "ns", "name": name})
}

fn owned(names: &[&str]) -> Vec<Owner> {
    names
        .iter()
        .map(|n| (Some("ns".to_string()), n.to_string()))
        .collect()
}

#[test]
fn only_owners_of_changed_tags_are_woken() {
    let c = TagChanges::new("ImagePullJob", "apps.kruise.io");
    let spec = json!([
        {"tag": "1", "version": 0, "ownerReferences": [owner("a")]},
        {"tag": "2", "version": 0, "ownerReferences": [owner("b"), owner("c")]},
        {"tag": "3", "version": 0, "ownerReferences": [{"apiVersion": "operations.kubeedge.io/v1alpha1", "kind": "ImagePrePullJob", "name": "x"}]},
    ]);
    let pulling = json!([
        {"tag": "1", "phase": "Pulling", "version": 0, "progress": 10},
        {"tag": "2", "phase": "Pulling", "version": 0},
    ]);
    let cases = [
        (
            "first sight wakes every owner of the kind",
            spec.clone(),
            pulling.clone(),
            owned(&["a", "b", "c"]),
        ),
        ("nothing changed", spec.clone(), pulling.clone(), owned(&[])),
        (
            "progress alone wakes nobody",
            spec.clone(),
            json!([
                {"tag": "1", "phase": "Pulling", "version": 0, "progress": 60},
                {"tag": "2", "phase": "Pulling", "version": 0},
            ]),
            owned(&[]),
        ),
        (
            "a phase change wakes that tag's owners only",
            spec.clone(),
            json!([
                {"tag": "1", "phase": "Pulling", "version": 0, "progress": 60},
                {"tag": "2", "phase": "Succeeded", "version": 0},
            ]),
            owned(&["b", "c"]),
        ),
        (
            "an entry edit wakes its owners",
            json!([
                {"tag": "1", "version": 1, "ownerReferences": [owner("a")]},
                {"tag": "2", "version": 0, "ownerReferences": [owner("b"), owner("c")]},
            ]),
            json!([
                {"tag": "1", "phase": "Pulling", "version": 0, "progress": 60},
                {"tag": "2", "phase": "Succeeded", "version": 0},
            ]),
            owned(&["a"]),
        ),
        (
            "a removed tag wakes its former owners",
            json!([{"tag": "1", "version": 1, "ownerReferences": [owner("a")]}]),
            json!([{"tag": "1", "phase": "Pulling", "version": 0, "progress": 60}]),
            owned(&["b", "c"]),
        ),
    ];
    for (name, spec, status, want) in cases {
        assert_eq!(c.owners(&ni(spec, status)), want, "{name}");
    }
}

#[test]
fn owner_lists_are_shared_between_nodes_and_forgotten_when_unused() {
    let c = TagChanges::new("ImagePullJob", "apps.kruise.io");
    let spec = |job: &str| json!([{"tag": "1", "version": 0, "ownerReferences": [owner(job)]}]);
    for i in 0..100 {
        let mut n = ni(spec("a"), json!([]));
        n.metadata.name = Some(format!("node-{i}"));
        c.owners(&n);
    }
    let lists = |c: &TagChanges| c.seen.lock().map(|m| m.owners.lists.len()).unwrap_or(0);
    assert_eq!(lists(&c), 1, "one list for the same owner on 100 nodes");
    // Every node moves to a job of its own, five times over: lists no tag
    // holds any more are swept, so the set stays within twice the lists in
    // use (plus a floor), not the 501 ever seen.
    for round in 0..5 {
        for i in 0..100 {
            let job = format!("job-{round}-{i}");
            let mut n = ni(spec(&job), json!([]));
            n.metadata.name = Some(format!("node-{i}"));
            assert_eq!(c.owners(&n), owned(&[&job]));
        }
    }
    assert!(
        lists(&c) <= 2 * 100 + 64,
        "unused lists swept: {}",
        lists(&c)
    );
}

fn labelled(labels: serde_json::Value) -> NodeImage {
    let mut n = ni(
        json!([
            {"tag": "1", "version": 0, "ownerReferences": [owner("a")]},
            {"tag": "2", "version": 0, "ownerReferences": [owner("b")]},
        ]),
        json!([{"tag": "1", "phase": "Succeeded", "version": 0}]),
    );
    n.metadata.labels = serde_json::from_value(labels).expect("labels");
    n
}

/// A node that leaves a job's selector keeps the job's entry; the job must
/// still be woken to recount without it.
#[test]
fn a_label_change_wakes_the_owners_of_every_tag() {
    let c = TagChanges::new("ImagePullJob", "apps.kruise.io");
    assert_eq!(
        c.owners(&labelled(json!({"pool": "a"}))),
        owned(&["a", "b"])
    );
    assert_eq!(c.owners(&labelled(json!({"pool": "a"}))), owned(&[]));
    assert_eq!(c.owners(&labelled(json!({}))), owned(&["a", "b"]));
    assert_eq!(
        c.owners(&labelled(json!(null))),
        owned(&[]),
        "no labels is an empty map"
    );
}

#[test]
fn label_changes_are_seen_once_and_forgotten_with_their_nodeimage() {
    let (store, mut writer) = kube::runtime::reflector::store::<NodeImage>();
    let named = |name: &str, labels: serde_json::Value| {
        let mut n = labelled(labels);
        n.metadata.name = Some(name.into());
        n
    };
    let live = named("live", json!({"pool": "a"}));
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(live.clone()));
    let c = LabelChanges::new(store);
    let table = [
        ("a new NodeImage", named("live", json!({"pool": "a"})), true),
        (
            "the same labels",
            named("live", json!({"pool": "a"})),
            false,
        ),
        ("a label removed", named("live", json!({})), true),
        (
            "a label added back",
            named("live", json!({"pool": "a"})),
            true,
        ),
        (
            "another NodeImage",
            named("other", json!({"pool": "a"})),
            true,
        ),
    ];
    for (what, n, want) in table {
        assert_eq!(c.changed(&n), want, "{what}");
    }
    // NodeImages that left the cache are forgotten once the memory outgrows it.
    for i in 0..100 {
        assert!(c.changed(&named(&format!("gone-{i}"), json!({}))));
    }
    let remembered = c.seen.lock().map(|s| s.len()).unwrap_or_default();
    assert!(remembered <= 2 + 64, "remembers {remembered}");
    assert!(
        !c.changed(&named("live", json!({"pool": "a"}))),
        "the live one is kept"
    );
}
