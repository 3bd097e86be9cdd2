use super::rows::reference;
use super::*;
use serde_json::{Value, json};

fn nodeimage(name: &str, spec: Value, status: Value) -> NodeImage {
    serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "NodeImage",
        "metadata": {"name": name},
        "spec": {"images": spec},
        "status": {"desired": 0, "imageStatuses": status},
    }))
    .expect("a NodeImage")
}

fn owner(uid: &str) -> Value {
    json!([{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob", "name": "j", "uid": uid}])
}

fn ipj(status: Value) -> Job {
    Job::Pull(Box::new(
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "metadata": {"name": "j", "namespace": "ns", "uid": "u1"},
            "spec": {"image": "r/app:v1"},
            "status": status,
        }))
        .expect("an ImagePullJob"),
    ))
}

/// (node, phase, progress, image ID, message) of each row.
type Brief = (String, Phase, i32, Option<String>, Option<String>);

fn brief(v: &View) -> Vec<Brief> {
    v.nodes
        .iter()
        .map(|r| {
            (
                r.node.clone(),
                r.phase,
                r.progress,
                r.image_id.clone(),
                r.message.clone(),
            )
        })
        .collect()
}

fn row(node: &str, phase: Phase, progress: i32, id: Option<&str>, msg: Option<&str>) -> Brief {
    (
        node.to_string(),
        phase,
        progress,
        id.map(str::to_string),
        msg.map(str::to_string),
    )
}

#[test]
fn rows_of_an_image_pull_job() {
    use Phase::*;
    let cases: Vec<(&str, Vec<NodeImage>, Value, Vec<Brief>)> = vec![
        (
            "no entries yet",
            vec![nodeimage("n1", json!({}), json!({}))],
            json!({"desired": 2}),
            vec![],
        ),
        (
            "an entry the node has not answered waits",
            vec![nodeimage(
                "n1",
                json!({"r/app": {"tags": [{"tag": "v1", "version": 0, "ownerReferences": owner("u1")}]}}),
                json!({}),
            )],
            json!({}),
            vec![row("n1", Waiting, 0, None, None)],
        ),
        (
            "pulling with progress; other owners' tags are not ours",
            vec![nodeimage(
                "n1",
                json!({
                    "r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]},
                    "r/other": {"tags": [{"tag": "v1", "ownerReferences": owner("u2")}]},
                }),
                json!({
                    "r/app": {"tags": [{"tag": "v1", "phase": "Pulling", "progress": 42}]},
                    "r/other": {"tags": [{"tag": "v1", "phase": "Failed", "message": "x"}]},
                }),
            )],
            json!({}),
            vec![row("n1", Pulling, 42, None, None)],
        ),
        (
            "a status of an older version does not answer the entry",
            vec![nodeimage(
                "n1",
                json!({"r/app": {"tags": [{"tag": "v1", "version": 2, "ownerReferences": owner("u1")}]}}),
                json!({"r/app": {"tags": [{"tag": "v1", "version": 1, "phase": "Succeeded", "progress": 100, "imageID": "r/app@sha256:aa"}]}}),
            )],
            json!({}),
            vec![row("n1", Waiting, 0, None, None)],
        ),
        (
            "succeeded and failed nodes, sorted by name",
            vec![
                nodeimage(
                    "n2",
                    json!({"r/app": {"tags": [{"tag": "v1", "version": 1, "ownerReferences": owner("u1")}]}}),
                    json!({"r/app": {"tags": [{"tag": "v1", "version": 1, "phase": "Failed", "progress": 7, "message": "not found"}]}}),
                ),
                nodeimage(
                    "n1",
                    json!({"r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]}}),
                    json!({"r/app": {"tags": [{"tag": "v1", "phase": "Succeeded", "imageID": "r/app@sha256:aa"}]}}),
                ),
            ],
            json!({"desired": 2, "succeeded": 1, "failed": 1}),
            vec![
                row("n1", Succeeded, 100, Some("r/app@sha256:aa"), None),
                row("n2", Failed, 7, None, Some("not found")),
            ],
        ),
        (
            "a node in failedNodes without an entry still shows, failed",
            vec![nodeimage(
                "n1",
                json!({"r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]}}),
                json!({"r/app": {"tags": [{"tag": "v1", "phase": "Pulling", "progress": 30}]}}),
            )],
            json!({"failed": 2, "failedNodes": ["n1", "n3"]}),
            vec![
                row("n1", Failed, 30, None, None),
                row(
                    "n3",
                    Failed,
                    0,
                    None,
                    Some("failed (recorded in the job's status)"),
                ),
            ],
        ),
    ];
    for (name, nis, status, want) in cases {
        let job = ipj(status);
        let v = view(&Inputs {
            job: &job,
            children: &[],
            nodeimages: &nis,
        });
        assert_eq!(brief(&v), want, "{name}");
    }
}

#[test]
fn not_shown_counts_nodes_without_rows() {
    let job = ipj(json!({"desired": 3}));
    let nis = vec![nodeimage(
        "n1",
        json!({"r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1")}]}}),
        json!({}),
    )];
    let v = view(&Inputs {
        job: &job,
        children: &[],
        nodeimages: &nis,
    });
    assert_eq!(
        v.counts,
        Counts {
            nodes: 1,
            waiting: 1,
            not_shown: 2,
            ..Counts::default()
        }
    );
    assert!(!v.job.finished);
    assert!(!v.has_failures());
}

#[test]
fn a_node_with_several_images() {
    use Phase::*;
    // (name, phases and progress of two images, expected phase, progress, message)
    let cases = [
        ("both waiting", [("Waiting", 0), ("Waiting", 0)], Waiting, 0),
        (
            "one pulling",
            [("Succeeded", 0), ("Pulling", 50)],
            Pulling,
            75,
        ),
        (
            "one waiting",
            [("Succeeded", 0), ("Waiting", 0)],
            Waiting,
            50,
        ),
        (
            "all done",
            [("Succeeded", 0), ("Succeeded", 0)],
            Succeeded,
            100,
        ),
        (
            "one failed, the other still pulling",
            [("Failed", 10), ("Pulling", 20)],
            Pulling,
            15,
        ),
        (
            "one failed, all finished",
            [("Failed", 10), ("Succeeded", 0)],
            Failed,
            55,
        ),
    ];
    for (name, tags, phase, progress) in cases {
        let statuses: Vec<Value> = tags
            .iter()
            .enumerate()
            .map(|(i, (p, pr))| json!({"tag": format!("v{i}"), "phase": p, "progress": pr, "imageID": format!("r/a@sha256:{i}"), "message": (*p == "Failed").then_some("boom")}))
            .collect();
        let ni = nodeimage(
            "n1",
            json!({"r/a": {"tags": [
                {"tag": "v0", "ownerReferences": owner("u1")},
                {"tag": "v1", "ownerReferences": owner("u1")},
            ]}}),
            json!({"r/a": {"tags": statuses}}),
        );
        let job = ipj(json!({}));
        let v = view(&Inputs {
            job: &job,
            children: &[],
            nodeimages: &[ni],
        });
        let r = &v.nodes[0];
        assert_eq!((r.phase, r.progress), (phase, progress), "{name}");
        assert_eq!(r.image_id, None, "{name}: no single image ID");
        assert_eq!(r.images.len(), 2, "{name}");
        let failed = tags.iter().any(|(p, _)| *p == "Failed");
        assert_eq!(r.message.as_deref(), failed.then_some("boom"), "{name}");
    }
}

#[test]
fn an_image_list_pull_job_owns_through_its_children() {
    let list: ImageListPullJob = serde_json::from_value(json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImageListPullJob",
        "metadata": {"name": "l", "namespace": "ns", "uid": "L"},
        "spec": {"images": ["r/a:v1", "r/b:v1"]},
        "status": {"desired": 2, "completed": 1, "succeeded": 1, "active": 1,
                   "startTime": "2025-01-01T00:00:00Z"},
    }))
    .expect("an ImageListPullJob");
    let child = |name: &str, uid: &str, parent: &str| -> ImagePullJob {
        serde_json::from_value(json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "metadata": {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": [
                {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImageListPullJob", "name": "l", "uid": parent}
            ]},
            "spec": {"image": "r/a:v1"},
        }))
        .expect("a child")
    };
    let children = vec![
        child("l-a", "A", "L"),
        child("l-b", "B", "L"),
        child("x", "X", "other"),
    ];
    let ni = nodeimage(
        "n1",
        json!({
            "r/a": {"tags": [{"tag": "v1", "ownerReferences": owner("A")}]},
            "r/b": {"tags": [{"tag": "v1", "ownerReferences": owner("B")}]},
            "r/x": {"tags": [{"tag": "v1", "ownerReferences": owner("X")}]},
        }),
        json!({
            "r/a": {"tags": [{"tag": "v1", "phase": "Succeeded"}]},
            "r/b": {"tags": [{"tag": "v1", "phase": "Pulling", "progress": 20}]},
            "r/x": {"tags": [{"tag": "v1", "phase": "Failed"}]},
        }),
    );
    let job = Job::List(Box::new(list));
    let v = view(&Inputs {
        job: &job,
        children: &children,
        nodeimages: &[ni],
    });
    assert_eq!(brief(&v), vec![row("n1", Phase::Pulling, 60, None, None)]);
    let images: Vec<&str> = v.nodes[0].images.iter().map(|i| i.image.as_str()).collect();
    assert_eq!(images, ["r/a:v1", "r/b:v1"]);
    assert_eq!(v.job.status.completed, Some(1));
    assert_eq!(v.job.images, ["r/a:v1", "r/b:v1"]);
    assert!(!v.job.finished);
}

#[test]
fn kubeedge_jobs_merge_their_node_records() {
    use Phase::*;
    let job: ImagePrePullJob = serde_json::from_value(json!({
        "apiVersion": "operations.kubeedge.io/v1alpha1",
        "kind": "ImagePrePullJob",
        "metadata": {"name": "p", "uid": "P"},
        "spec": {"imagePrePullTemplate": {"images": ["r/a:v1"], "nodeNames": ["n1", "n2", "n3", "n4"]}},
        "status": {"state": "Pulling", "event": "Pull", "time": "2025-01-01T00:00:00Z", "status": [
            {"nodeStatus": {"nodeName": "n1", "state": "Successful"}},
            {"nodeStatus": {"nodeName": "n2", "state": "Failed", "event": "TimeOut", "reason": "timed out"}},
            {"nodeStatus": {"nodeName": "n3", "state": "Pulling"}},
            {"nodeStatus": {"nodeName": "n4"}},
        ]},
    }))
    .expect("an ImagePrePullJob");
    let entry = |node: &str, phase: &str, progress: i32| {
        nodeimage(
            node,
            json!({"r/a": {"tags": [{"tag": "v1", "ownerReferences": [{"kind": "ImagePrePullJob", "name": "p", "uid": "P"}]}]}}),
            json!({"r/a": {"tags": [{"tag": "v1", "phase": phase, "progress": progress}]}}),
        )
    };
    // n1's entry expired; n2 still pulls on the node but the job timed it out.
    let nis = vec![entry("n2", "Pulling", 40), entry("n3", "Pulling", 70)];
    let job = Job::PrePull(Box::new(job));
    let v = view(&Inputs {
        job: &job,
        children: &[],
        nodeimages: &nis,
    });
    assert_eq!(
        brief(&v),
        vec![
            row("n1", Succeeded, 100, None, None),
            row("n2", Failed, 40, None, Some("timed out")),
            row("n3", Pulling, 70, None, None),
            row("n4", Pending, 0, None, None),
        ]
    );
    assert!(!v.job.finished);
    assert_eq!(v.job.status.completion_time, None, "not final yet");
    assert!(v.has_failures());
    assert_eq!(
        v.counts,
        Counts {
            nodes: 4,
            pending: 1,
            pulling: 1,
            succeeded: 1,
            failed: 1,
            ..Counts::default()
        }
    );
}

#[test]
fn finished_jobs() {
    let cases: Vec<(&str, Job, bool, bool)> = vec![
        ("running ipj", ipj(json!({"desired": 1})), false, false),
        (
            "completed ipj",
            ipj(json!({"desired": 1, "succeeded": 1, "completionTime": "2025-01-01T00:00:00Z"})),
            true,
            false,
        ),
        (
            "completed ipj with a failure",
            ipj(json!({"failed": 1, "completionTime": "2025-01-01T00:00:00Z"})),
            true,
            true,
        ),
    ];
    let kubeedge = |state: &str| -> Job {
        Job::Upgrade(Box::new(
            serde_json::from_value(json!({
                "apiVersion": "operations.kubeedge.io/v1alpha1",
                "kind": "NodeUpgradeJob",
                "metadata": {"name": "u", "uid": "U"},
                "spec": {"version": "v1.17.0", "nodeNames": ["n1"]},
                "status": {"state": state},
            }))
            .expect("a NodeUpgradeJob"),
        ))
    };
    let cases = cases.into_iter().chain([
        ("upgrading", kubeedge("Upgrading"), false, false),
        ("successful", kubeedge("Successful"), true, false),
        ("failed", kubeedge("Failed"), true, true),
    ]);
    for (name, job, finished, failures) in cases {
        let v = view(&Inputs {
            job: &job,
            children: &[],
            nodeimages: &[],
        });
        assert_eq!(
            (v.job.finished, v.has_failures()),
            (finished, failures),
            "{name}"
        );
    }
}

#[test]
fn references() {
    let cases = [
        ("nginx", "1.25", "nginx:1.25"),
        ("r:5000/a", "v1", "r:5000/a:v1"),
        ("r/a", "sha256:abcdef01", "r/a@sha256:abcdef01"),
    ];
    for (image, tag, want) in cases {
        assert_eq!(reference(image, tag), want);
    }
}

#[test]
fn each_node_says_how_the_p2p_rules_started_it() {
    let tag = |p2p: Value| json!({"r/app": {"tags": [{"tag": "v1", "ownerReferences": owner("u1"), "p2p": p2p}]}});
    let nis = vec![
        nodeimage(
            "a-1",
            tag(json!({"wave": "Seed", "domain": "zone=a", "agent": "Ready"})),
            json!({}),
        ),
        nodeimage(
            "a-2",
            tag(json!({"wave": "Peers", "domain": "zone=a", "holders": 2})),
            json!({}),
        ),
        nodeimage("b-1", tag(json!({"agent": "Direct"})), json!({})),
        nodeimage("c-1", tag(Value::Null), json!({})),
    ];
    let job = ipj(json!({}));
    let v = view(&Inputs {
        job: &job,
        children: &[],
        nodeimages: &nis,
    });
    let got: Vec<(&str, Option<&str>)> = v
        .nodes
        .iter()
        .map(|r| (r.node.as_str(), r.p2p.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("a-1", Some("seed zone=a agent")),
            ("a-2", Some("peers(2) zone=a")),
            ("b-1", Some("direct")),
            ("c-1", None),
        ]
    );
}
