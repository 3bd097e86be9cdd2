//! Removal entries of a NodeImage end to end (issue 51, the node's part):
//! written by hand as the low-level API is (`kubectl patch nodeimage`), the
//! shared daemon removes through the node's real containerd (CRI) what the
//! entry names and nothing else, keeps what a live pull entry wants, takes
//! its own pin off before removing, answers in `status.removals`, and the
//! API server refuses entries that name no image.

use nodeimage_tests::nodeimage as ni;
use nodeimage_tests::prepull::TestNode;
use nodeimage_tests::process::Daemon;
use nodeimage_tests::registry::{PushedImage, Registry};
use nodeimage_tests::{
    Cleanup, Cluster, KubectlResult, cri, http, random_suffix, unique, wait_for,
};
use serde_json::{Value, json};
use std::time::Duration;

/// Generous limit for a pull or a removal.
const TIMEOUT: Duration = Duration::from_secs(120);

fn push(reg: &Registry, what: &str) -> PushedImage {
    reg.push_image(&unique(&format!("e2e-{what}")), Some("v1"), 4096)
        .expect("push a test image")
}

/// Whether `reference` is off the node whose containerd listens at `socket`.
fn off_node(socket: &std::path::Path, reference: &str) -> bool {
    cri::image_status(socket, reference)
        .expect("CRI ImageStatus")
        .is_none()
}

/// The node these tests use: the third simulated node, whose containerd
/// (2.x) honours pins (Debian's 1.6.20 on the first does not).
const NODE: usize = 2;

/// The node the ImageRemovalJob tests share with each other (the tests
/// above replace node NODE's whole removal list by hand, which would take
/// a job's entry with it).
const JOB_NODE: usize = 1;

/// The node's name, once its NodeImage exists and its shared daemon is ready.
fn node(c: &Cluster) -> String {
    node_at(c, NODE)
}

/// Node `index`'s name, once its NodeImage exists and its shared daemon is
/// ready.
fn node_at(c: &Cluster, index: usize) -> String {
    let node = c.nodes()[index].clone();
    wait_for("the test node's NodeImage", Duration::from_secs(60), || {
        ni::get(c, &node)
    });
    let url = c.daemon_readyz(index);
    wait_for(
        "the test node's shared daemon",
        Duration::from_secs(30),
        || (http::status_of(&url) == Some(200)).then_some(()),
    );
    node
}

/// Sets the node's removal entries (a merge patch replaces the list).
fn set_removals(c: &Cluster, node: &str, entries: Value) -> KubectlResult {
    ni::merge_patch(c, node, &json!({"spec": {"removals": entries}}))
}

/// Waits for the node's answer to the entry `job` of `uid`.
fn answer(c: &Cluster, node: &str, job: &str, uid: &str) -> Value {
    wait_for(
        &format!("the daemon's answer to removal {job} ({uid}) on {node}"),
        TIMEOUT,
        || {
            let obj = ni::get(c, node)?;
            obj["status"]["removals"]
                .as_array()?
                .iter()
                .find(|r| r["job"] == job && r["uid"] == uid)
                .cloned()
        },
    )
}

/// The result of `image` in an answer: (result, reason, bytesFreed, message).
fn result_of(answer: &Value, image: &str) -> (String, String, i64, String) {
    let r = answer["images"]
        .as_array()
        .and_then(|l| l.iter().find(|i| i["image"] == image))
        .unwrap_or_else(|| panic!("no result for {image} in {answer}"));
    let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
    (
        s("result"),
        s("reason"),
        r["bytesFreed"].as_i64().unwrap_or(0),
        s("message"),
    )
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_removal_entry_removes_what_it_names_and_keeps_what_a_pull_wants() {
    let c = Cluster::load();
    let node = node(&c);
    let socket = c.socket(NODE);
    let reg = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let unused = push(&reg, "rm-unused");
    let wanted = push(&reg, "rm-wanted");
    let bystander = push(&reg, "rm-bystander");
    let job = unique("e2e-rm");
    let mut cleanup = Cleanup::default();
    {
        let (c, node) = (c.clone(), node.clone());
        let names = vec![wanted.name.clone()];
        let refs = [&unused, &wanted, &bystander].map(|i| i.reference());
        let socket = socket.clone();
        cleanup.defer("removal entries, the tag entry and the images", move || {
            let _ = set_removals(&c, &node, Value::Null);
            ni::remove_images(&c, &node, &names);
            ni::wait_status_without(&c, &node, &names, Duration::from_secs(30));
            for r in &refs {
                let _ = cri::remove_image(&socket, r);
            }
        });
    }
    // Two images pulled straight through CRI (nobody's entry, unpinned),
    // one through a tag entry (pinned by the daemon, and wanted).
    cri::pull(&socket, &unused.reference(), None).expect("CRI pull");
    cri::pull(&socket, &bystander.reference(), None).expect("CRI pull");
    ni::set_image(&c, &node, &wanted.name, json!({"tags": [{"tag": "v1"}]}));
    ni::wait_phase(
        &c,
        ni::Tag {
            ni: &node,
            image: &wanted.name,
            tag: "v1",
        },
        0,
        "Succeeded",
        TIMEOUT,
    );
    let absent = format!(
        "{}:v1",
        unique(&format!("{}/e2e-rm-absent", c.var("NODEIMAGE_REGISTRY")))
    );

    let uid = random_suffix();
    let r = set_removals(
        &c,
        &node,
        json!([{"job": job, "uid": uid, "images": [unused.reference(), wanted.reference(), absent]}]),
    );
    assert!(r.success, "{}", r.stderr);
    let got = answer(&c, &node, &job, &uid);
    assert!(got["completionTime"].is_string(), "{got}");

    let (result, _, bytes, message) = result_of(&got, &unused.reference());
    assert_eq!(result, "Removed", "{message}");
    assert!(bytes > 0, "bytes freed reported: {got}");
    assert!(
        off_node(&socket, &unused.reference()),
        "the unused image is off the node"
    );
    let (result, reason, _, message) = result_of(&got, &wanted.reference());
    assert_eq!(
        (result.as_str(), reason.as_str()),
        ("Skipped", "WantedByPull"),
        "{message}"
    );
    assert!(
        message.contains("written by hand"),
        "names who wants it: {message}"
    );
    let kept = cri::image_status(&socket, &wanted.reference()).expect("CRI ImageStatus");
    assert!(
        kept.is_some_and(|i| i.pinned),
        "the wanted image stays, pinned"
    );
    assert_eq!(result_of(&got, &absent).0, "NotPresent");
    assert!(
        cri::image_status(&socket, &bystander.reference())
            .expect("CRI ImageStatus")
            .is_some(),
        "an image no entry names is never touched"
    );

    // The pull entry goes; a new request (another uid) removes the image,
    // taking the daemon's pin off first.
    ni::remove_images(&c, &node, std::slice::from_ref(&wanted.name));
    ni::wait_status_without(&c, &node, std::slice::from_ref(&wanted.name), TIMEOUT);
    let uid2 = random_suffix();
    let r = set_removals(
        &c,
        &node,
        json!([{"job": job, "uid": uid2, "images": [wanted.reference()]}]),
    );
    assert!(r.success, "{}", r.stderr);
    let got = answer(&c, &node, &job, &uid2);
    let (result, _, bytes, message) = result_of(&got, &wanted.reference());
    assert_eq!(result, "Removed", "{message}");
    assert!(bytes > 0, "{got}");
    assert!(
        off_node(&socket, &wanted.reference()),
        "the formerly wanted image is off the node"
    );
    let obj = ni::get(&c, &node).expect("the NodeImage");
    let answers = obj["status"]["removals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        answers.iter().all(|a| a["uid"] != uid.as_str()),
        "the answer to the replaced entry is dropped: {answers:?}"
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn the_api_server_refuses_a_removal_entry_that_names_no_image() {
    let c = Cluster::load();
    let node = node(&c);
    let reg = c.var("NODEIMAGE_REGISTRY");
    let cases = [
        (json!(["*"]), "wildcards"),
        (json!([format!("{reg}/app:*")]), "wildcards"),
        (json!([]), "spec.removals[0].images"),
        (json!(["Not A Reference"]), "spec.removals[0].images[0]"),
        (
            json!([format!("{reg}/a:v1"), format!("{reg}/a:v1")]),
            "spec.removals[0].images[1]",
        ),
    ];
    for (images, needle) in cases {
        let r = set_removals(
            &c,
            &node,
            json!([{"job": "e2e-refused", "uid": "u", "images": images}]),
        );
        assert!(!r.success, "{images} was accepted");
        assert!(
            r.stderr.contains(needle),
            "{images}: the refusal names {needle:?}: {}",
            r.stderr
        );
    }
    let obj = ni::get(&c, &node).expect("the NodeImage");
    assert!(
        obj["spec"]["removals"]
            .as_array()
            .is_none_or(|l| l.iter().all(|e| e["job"] != "e2e-refused")),
        "nothing refused was stored"
    );
}

/// The job's object, once `ready` holds of it.
fn removal_job(c: &Cluster, name: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    wait_for(&format!("ImageRemovalJob {name}: {what}"), TIMEOUT, || {
        let r = c.kubectl(&["get", "imageremovaljob", name, "-o", "json"], None);
        let v: Value = serde_json::from_str(&r.stdout).ok()?;
        ready(&v).then_some(v)
    })
}

/// The status of condition `type_` of a job, and its reason.
fn condition(job: &Value, type_: &str) -> (String, String) {
    let c = job["status"]["conditions"]
        .as_array()
        .and_then(|l| l.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no condition {type_} in {job}"));
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    (s("status"), s("reason"))
}

/// Whether `node`'s NodeImage holds a removal entry of `uid`.
fn holds_entry(c: &Cluster, node: &str, uid: &str) -> bool {
    ni::get(c, node).is_some_and(|o| {
        o["spec"]["removals"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["uid"] == uid))
    })
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn an_image_removal_job_takes_its_images_off_the_nodes_it_names_one_at_a_time() {
    let c = Cluster::load();
    let nodes: Vec<String> = [0, JOB_NODE].iter().map(|i| node_at(&c, *i)).collect();
    let sockets = [c.socket(0), c.socket(JOB_NODE)];
    let reg = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let target = push(&reg, "irj-target");
    let bystander = push(&reg, "irj-bystander");
    let name = unique("e2e-irj");
    let missing = unique("e2e-irj-missing");
    let mut cleanup = Cleanup::default();
    {
        let c = c.clone();
        let (name, missing) = (name.clone(), missing.clone());
        let refs = [target.reference(), bystander.reference()];
        let sockets = sockets.clone();
        cleanup.defer("the jobs and the images", move || {
            c.delete_quietly(&["imageremovaljob", &name]);
            c.delete_quietly(&["imageremovaljob", &missing]);
            for s in &sockets {
                for r in &refs {
                    let _ = cri::remove_image(s, r);
                }
            }
        });
    }
    for s in &sockets {
        cri::pull(s, &target.reference(), None).expect("CRI pull");
        cri::pull(s, &bystander.reference(), None).expect("CRI pull");
    }
    let job = json!({"apiVersion": "nodeimage.dev/v1alpha1", "kind": "ImageRemovalJob",
        "metadata": {"name": name},
        "spec": {"images": [target.reference()], "selector": {"names": nodes}, "parallelism": 1}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&job.to_string()));

    // One node at a time: while the first holds an unanswered entry, the
    // second has none (the daemon answers fast, so this is seen when it is
    // seen; the counts below hold either way).
    let done = removal_job(&c, &name, "finished", |j| {
        j["status"]["completionTime"].is_string()
    });
    let s = &done["status"];
    assert_eq!(
        (
            s["desired"].as_i64(),
            s["succeeded"].as_i64(),
            s["kept"].as_i64(),
            s["failed"].as_i64()
        ),
        (Some(2), Some(2), Some(0), Some(0)),
        "{done}"
    );
    assert!(
        s["bytesFreed"].as_i64().unwrap_or(0) > 0,
        "bytes freed: {done}"
    );
    assert_eq!(
        condition(&done, "Complete"),
        ("True".into(), "AllNodesRemoved".into())
    );
    let uid = done["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    for (s, n) in sockets.iter().zip(&nodes) {
        assert!(
            cri::image_status(s, &target.reference())
                .expect("CRI ImageStatus")
                .is_none(),
            "{} is still on {n}",
            target.reference()
        );
        assert!(
            cri::image_status(s, &bystander.reference())
                .expect("CRI ImageStatus")
                .is_some(),
            "the bystander left {n}"
        );
        assert!(
            holds_entry(&c, n, &uid),
            "{n} keeps the entry while the job exists"
        );
    }
    let events = c.kubectl_ok(
        &[
            "get",
            "events",
            "-A",
            "--field-selector",
            &format!("involvedObject.kind=ImageRemovalJob,involvedObject.name={name}"),
            "-o",
            "jsonpath={.items[*].reason}",
        ],
        None,
    );
    for reason in ["Started", "Completed"] {
        assert!(events.contains(reason), "event {reason} in {events:?}");
    }

    // Deleting the job takes its entries off the nodes, then lets it go.
    c.kubectl_ok(&["delete", "imageremovaljob", &name, "--wait=false"], None);
    wait_for("the job's entries to leave the nodes", TIMEOUT, || {
        nodes
            .iter()
            .all(|n| !holds_entry(&c, n, &uid))
            .then_some(())
    });
    wait_for("the deleted job to go", TIMEOUT, || {
        let r = c.kubectl(&["get", "imageremovaljob", &name], None);
        (!r.success).then_some(())
    });

    // A named node that does not exist fails the job, naming it.
    let ghost = unique("e2e-no-such-node");
    let job = json!({"apiVersion": "nodeimage.dev/v1alpha1", "kind": "ImageRemovalJob",
        "metadata": {"name": missing},
        "spec": {"images": [target.reference()], "selector": {"names": [ghost]}}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&job.to_string()));
    let failed = removal_job(&c, &missing, "finished", |j| {
        j["status"]["completionTime"].is_string()
    });
    assert_eq!(failed["status"]["failedNodes"], json!([ghost]), "{failed}");
    assert_eq!(condition(&failed, "Failed").0, "True");
    let message = failed["status"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("node not found"), "{message}");
    drop(cleanup);
}

/// Creates an ImagePullJob of `image` on `node` (one try, a short deadline)
/// and returns its status once it has completed.
fn pull_job(c: &Cluster, name: &str, image: &str, node: &str) -> Value {
    let job = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"image": image, "selector": {"names": [node]},
                 "pullPolicy": {"backoffLimit": 0, "timeoutSeconds": 60},
                 "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 120}}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&job.to_string()));
    wait_for(&format!("ImagePullJob {name} to complete"), TIMEOUT, || {
        let r = c.kubectl(
            &["get", "imagepulljob", name, "-n", "default", "-o", "json"],
            None,
        );
        let v: Value = serde_json::from_str(&r.stdout).ok()?;
        v["status"]["completionTime"]
            .is_string()
            .then(|| v["status"].clone())
    })
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_block_keeps_a_digest_off_its_nodes_until_the_job_is_deleted() {
    let c = Cluster::load();
    let node = node_at(&c, JOB_NODE);
    let socket = c.socket(JOB_NODE);
    let reg = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let image = push(&reg, "irj-block");
    let by_digest = format!("{}@{}", image.name, image.digest);
    let (name, pull_blocked, pull_after, pull_tag) = (
        unique("e2e-irj-block"),
        unique("e2e-blocked"),
        unique("e2e-unblocked"),
        unique("e2e-blocked-tag"),
    );
    let mut cleanup = Cleanup::default();
    {
        let c = c.clone();
        let (name, jobs) = (
            name.clone(),
            [pull_blocked.clone(), pull_after.clone(), pull_tag.clone()],
        );
        let (socket, reference) = (socket.clone(), image.reference());
        cleanup.defer("the jobs and the image", move || {
            c.delete_quietly(&["imageremovaljob", &name]);
            for j in &jobs {
                c.delete_quietly(&["imagepulljob", j, "-n", "default"]);
            }
            let _ = cri::remove_image(&socket, &reference);
        });
    }
    cri::pull(&socket, &image.reference(), None).expect("CRI pull");
    let job = json!({"apiVersion": "nodeimage.dev/v1alpha1", "kind": "ImageRemovalJob",
        "metadata": {"name": name},
        "spec": {"images": [by_digest], "selector": {"names": [node]}, "block": true}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&job.to_string()));
    let done = removal_job(&c, &name, "finished", |j| {
        j["status"]["completionTime"].is_string()
    });
    assert_eq!(done["status"]["succeeded"], json!(1), "{done}");
    assert_eq!(condition(&done, "Blocking").0, "True");
    assert!(
        off_node(&socket, &image.reference()),
        "the blocked image left the node"
    );

    // A pull job for the blocked digest fails on the node, naming the block.
    let status = pull_job(&c, &pull_blocked, &by_digest, &node);
    assert_eq!(status["failed"], json!(1), "{status}");
    let obj = ni::get(&c, &node).expect("the node's NodeImage");
    let tag = ni::tag_status(&obj, &image.name, &image.digest)
        .unwrap_or_else(|| panic!("no status for the blocked pull in {obj}"));
    let message = tag["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("blocked by ImageRemovalJob {name}")),
        "{message}"
    );
    assert!(
        off_node(&socket, &image.reference()),
        "the blocked image stays off the node"
    );
    // Pulled back by hand, by tag (this node's containerd runs no image
    // verifier): the daemon's next presence check removes it again.
    cri::pull(&socket, &image.reference(), None).expect("CRI pull by tag");
    wait_for(
        "the daemon to remove the blocked image again",
        TIMEOUT,
        || off_node(&socket, &image.reference()).then_some(()),
    );

    // A pull job by tag: the node learns the digest from the pull, then
    // fails the tag naming the block; the sweep takes the image off again.
    let status = pull_job(&c, &pull_tag, &image.reference(), &node);
    assert_eq!(status["failed"], json!(1), "{status}");
    let obj = ni::get(&c, &node).expect("the node's NodeImage");
    let tag = ni::tag_status(&obj, &image.name, "v1")
        .unwrap_or_else(|| panic!("no status for the tag pull in {obj}"));
    let message = tag["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("blocked by ImageRemovalJob {name}"))
            && message.contains("resolves to"),
        "{message}"
    );
    wait_for(
        "the sweep to take the tag's image off again",
        TIMEOUT,
        || off_node(&socket, &image.reference()).then_some(()),
    );
    c.delete_quietly(&["imagepulljob", &pull_tag, "-n", "default"]);

    // Deleting the block lets a new pull job pull it.
    c.kubectl_ok(&["delete", "imageremovaljob", &name], None);
    c.delete_quietly(&["imagepulljob", &pull_blocked, "-n", "default"]);
    let status = pull_job(&c, &pull_after, &by_digest, &node);
    assert_eq!(status["succeeded"], json!(1), "{status}");
    drop(cleanup);
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn kubectl_nodeimage_remove_creates_a_job_and_shows_its_nodes() {
    let c = Cluster::load();
    let node = node_at(&c, JOB_NODE);
    let socket = c.socket(JOB_NODE);
    let reg = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let image = push(&reg, "irj-plugin");
    let name = unique("e2e-irj-plugin");
    let mut cleanup = Cleanup::default();
    {
        let (c, name) = (c.clone(), name.clone());
        let (socket, reference) = (socket.clone(), image.reference());
        cleanup.defer("the job and the image", move || {
            c.delete_quietly(&["imageremovaljob", &name]);
            let _ = cri::remove_image(&socket, &reference);
        });
    }
    cri::pull(&socket, &image.reference(), None).expect("CRI pull");
    let plugin = c.nodeimage_bin().join("kubectl-nodeimage");
    let out = std::process::Command::new(&plugin)
        .args([
            "remove",
            &image.reference(),
            "--nodes",
            &node,
            "--name",
            &name,
            "--wait",
        ])
        .env("KUBECONFIG", c.var("KUBECONFIG"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run kubectl-nodeimage");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}: {stdout}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("imageremovaljob/{name} created")),
        "{stdout}"
    );
    let row = stdout
        .lines()
        .find(|l| l.starts_with(&node))
        .unwrap_or_else(|| panic!("no row for {node} in {stdout}"));
    assert!(row.contains("Succeeded"), "{row}");
    assert!(
        off_node(&socket, &image.reference()),
        "the image left the node"
    );
    // The same rows as JSON, from `status`.
    let out = std::process::Command::new(&plugin)
        .args(["status", &format!("irj/{name}"), "-o", "json"])
        .env("KUBECONFIG", c.var("KUBECONFIG"))
        .output()
        .expect("run kubectl-nodeimage");
    let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(doc["nodes"][0]["node"], json!(node), "{doc}");
    assert_eq!(doc["nodes"][0]["result"], json!("Succeeded"), "{doc}");
    assert!(
        doc["nodes"][0]["bytesFreed"].as_i64().unwrap_or(0) > 0,
        "{doc}"
    );
    drop(cleanup);
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_node_that_joins_a_block_later_has_the_image_removed_by_its_daemon() {
    let c = Cluster::load();
    let socket = c.socket(0);
    let reg = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let image = push(&reg, "irj-late");
    let by_digest = format!("{}@{}", image.name, image.digest);
    let (job, late) = (unique("e2e-irj-late"), unique("e2e-late-node"));
    let label = unique("e2e-late");
    let mut cleanup = Cleanup::default();
    {
        let (c, job, late) = (c.clone(), job.clone(), late.clone());
        let (socket, reference) = (socket.clone(), image.reference());
        cleanup.defer("the job, the late node and the image", move || {
            c.delete_quietly(&["imageremovaljob", &job]);
            c.delete_quietly(&["node", &late]);
            let _ = cri::remove_image(&socket, &reference);
        });
    }
    // The block selects no node yet: it completes, and keeps looking.
    let irj = json!({"apiVersion": "nodeimage.dev/v1alpha1", "kind": "ImageRemovalJob",
        "metadata": {"name": job},
        "spec": {"images": [by_digest], "selector": {"matchLabels": {"e2e-late": label}},
                 "block": true}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&irj.to_string()));
    let done = removal_job(&c, &job, "finished", |j| {
        j["status"]["completionTime"].is_string()
    });
    assert_eq!(done["status"]["desired"], json!(0), "{done}");
    assert_eq!(condition(&done, "Blocking").0, "True");

    // The image is on the containerd the late node's daemon will serve.
    cri::pull(&socket, &image.reference(), None).expect("CRI pull");
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": late, "labels": {"e2e-late": label}}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&node.to_string()));
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "the test's late node",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    c.kubectl_ok(
        &[
            "patch",
            "node",
            &late,
            "--subresource=status",
            "--type=merge",
            "-p",
            &ready.to_string(),
        ],
        None,
    );
    wait_for(
        "the block's entry on the late node's NodeImage",
        TIMEOUT,
        || {
            let obj = ni::get(&c, &late)?;
            let entries = obj["spec"]["removals"].as_array()?;
            entries.iter().any(|e| e["job"] == job).then_some(())
        },
    );
    // Its daemon starts and serves the entry it finds.
    let dir = tempfile::tempdir().expect("a log directory");
    let _daemon = Daemon::start(&c, &late, &socket, dir.path(), &[]);
    let got = answer(
        &c,
        &late,
        &job,
        done["metadata"]["uid"].as_str().unwrap_or_default(),
    );
    let (result, _, bytes, message) = result_of(&got, &by_digest);
    assert_eq!(result, "Removed", "{message}");
    assert!(bytes > 0, "{got}");
    assert!(
        off_node(&socket, &image.reference()),
        "the blocked image left the late node"
    );
    drop(cleanup);
}

/// The references in the controller's Eraser exclusion list, once it exists.
fn eraser_excluded(c: &Cluster) -> Option<(Vec<String>, Value)> {
    let cm = c.get_json(&[
        "configmap",
        "nodeimage-pinned",
        "-n",
        "nodeimage-eraser-e2e",
    ])?;
    let data = cm["data"]["nodeimage-pinned.json"].as_str()?;
    let list: Value = serde_json::from_str(data).ok()?;
    let refs = list["excluded"]
        .as_array()?
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    Some((refs, cm))
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn the_controller_keeps_erasers_exclusion_list_of_the_images_it_pins() {
    let c = Cluster::load();
    let node = node(&c);
    let reg = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let image = push(&reg, "eraser-list");
    let mut cleanup = Cleanup::default();
    {
        let (c, node, names) = (c.clone(), node.clone(), vec![image.name.clone()]);
        let (socket, reference) = (c.socket(NODE), image.reference());
        cleanup.defer("the tag entry and the image", move || {
            ni::remove_images(&c, &node, &names);
            let _ = cri::remove_image(&socket, &reference);
        });
    }
    ni::set_image(&c, &node, &image.name, json!({"tags": [{"tag": "v1"}]}));
    ni::wait_phase(
        &c,
        ni::Tag {
            ni: &node,
            image: &image.name,
            tag: "v1",
        },
        0,
        "Succeeded",
        TIMEOUT,
    );
    // Listed as Eraser matches it (the full tag), within the list's 30 s.
    let listed = |want: bool| {
        wait_for(
            &format!(
                "{} {} Eraser's exclusion list",
                image.reference(),
                if want { "in" } else { "out of" }
            ),
            TIMEOUT,
            || {
                let (refs, cm) = eraser_excluded(&c)?;
                (refs.contains(&image.reference()) == want).then_some(cm)
            },
        )
    };
    let cm = listed(true);
    assert_eq!(
        cm["metadata"]["labels"]["eraser.sh/exclude.list"], "true",
        "{cm}"
    );
    // The entry goes, nodeimage no longer pins it: it leaves the list.
    ni::remove_images(&c, &node, std::slice::from_ref(&image.name));
    listed(false);
    drop(cleanup);
}

/// Removal entries an ImageRemovalJob wrote (`writtenBy`) go once that
/// job is gone, also when its own cleanup never ran (its finalizer taken
/// off by hand, the controller down): housekeeping drops them. A
/// hand-written entry stays, and so does the entry of a job that exists.
/// On a test node of its own (no daemon: nothing answers), so no other
/// test's removal list is touched.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_removal_entry_whose_job_is_gone_is_dropped_by_housekeeping() {
    let c = Cluster::load();
    let node = TestNode::create_exactly(&c, "irj-orphan", &Default::default());
    let live = unique("e2e-irj-live");
    let mut cleanup = Cleanup::default();
    {
        let (c, live) = (c.clone(), live.clone());
        cleanup.defer("the live job", move || {
            c.delete_quietly(&["imageremovaljob", &live])
        });
    }
    // A job that exists (it selects no node this test has).
    let job = json!({"apiVersion": "nodeimage.dev/v1alpha1", "kind": "ImageRemovalJob",
        "metadata": {"name": live},
        "spec": {"images": ["r.example/app:v1"], "selector": {"names": [unique("no-such-node")]}}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&job.to_string()));
    let live_uid =
        removal_job(&c, &live, "created", |j| j["metadata"]["uid"].is_string())["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
    let entry = |job: &str, uid: &str, by_job: bool| {
        let mut e = json!({"job": job, "uid": uid, "images": ["r.example/app:v1"]});
        if by_job {
            e["writtenBy"] = json!("ImageRemovalJob");
        }
        e
    };
    let gone = unique("e2e-irj-gone");
    let r = set_removals(
        &c,
        &node.name,
        json!([
            entry(&gone, "7d1b3c2e-0000-4000-8000-000000000001", true),
            entry("by-hand", "1", false),
            entry(&live, &live_uid, true),
        ]),
    );
    assert!(r.success, "{}", r.stderr);
    let jobs = |c: &Cluster| -> Vec<String> {
        ni::get(c, &node.name)
            .and_then(|o| o["spec"]["removals"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|e| e["job"].as_str().map(str::to_string))
            .collect()
    };
    let want = vec!["by-hand".to_string(), live.clone()];
    wait_for("housekeeping to drop the gone job's entry", TIMEOUT, || {
        (jobs(&c) == want).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(jobs(&c), want, "the others stay");
    drop(cleanup);
}
