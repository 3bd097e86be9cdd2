//! Removal entries of a NodeImage end to end (issue 51, the node's part):
//! written by hand as the low-level API is (`kubectl patch nodeimage`), the
//! shared daemon removes through the node's real containerd (CRI) what the
//! entry names and nothing else, keeps what a live pull entry wants, takes
//! its own pin off before removing, answers in `status.removals`, and the
//! API server refuses entries that name no image.

use nodeimage_tests::nodeimage as ni;
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

/// The node these tests use: the third simulated node, whose containerd
/// (2.x) honours pins (Debian's 1.6.20 on the first does not).
const NODE: usize = 2;

/// The node's name, once its NodeImage exists and its shared daemon is ready.
fn node(c: &Cluster) -> String {
    let node = c.nodes()[NODE].clone();
    wait_for("the test node's NodeImage", Duration::from_secs(60), || {
        ni::get(c, &node)
    });
    let url = c.daemon_readyz(NODE);
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
        cri::image_status(&socket, &unused.reference())
            .expect("CRI ImageStatus")
            .is_none(),
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
        cri::image_status(&socket, &wanted.reference())
            .expect("CRI ImageStatus")
            .is_none(),
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
