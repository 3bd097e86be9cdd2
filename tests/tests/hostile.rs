//! nodeimage tried as a hostile or careless user would: absurd numbers,
//! malformed selectors and names, and objects that do not decode. Nothing may
//! crash or stall the controller or a daemon; each bad object is refused with
//! the field named, or fails alone with a reason, and everything else keeps
//! working, also after a controller restart.

use nodeimage_tests::kruise::{self, SharedController, TestNs};
use nodeimage_tests::nodeimage::{self as ni, Tag};
use nodeimage_tests::registry::Registry;
use nodeimage_tests::tenant::Tenant;
use nodeimage_tests::{Cluster, http, unique};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(240);

/// The test that restarts the shared controller and loosens CRDs runs alone
/// among this file's tests.
static EXCLUSIVE: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    EXCLUSIVE.lock().unwrap_or_else(|p| p.into_inner())
}

fn ipj(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
           "metadata": {"name": name}, "spec": spec})
}

fn ilpj(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImageListPullJob",
           "metadata": {"name": name}, "spec": spec})
}

/// Every daemon answers /readyz 200 and the controller is ready.
fn everything_up(c: &Cluster) {
    for i in 0..c.nodes().len() {
        kruise::eventually(&format!("daemon {} ready", i + 1), LONG, || {
            let code = http::status_of(&c.daemon_readyz(i));
            (code == Some(200))
                .then_some(())
                .ok_or_else(|| format!("{code:?}"))
        });
    }
    let health = c.controller_health();
    kruise::eventually("controller ready", LONG, || {
        (http::status_of(&format!("http://{health}/readyz")) == Some(200))
            .then_some(())
            .ok_or_else(|| "not ready".to_string())
    });
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn tenant_objects_with_absurd_values_are_refused_with_the_field_named() {
    let _g = lock();
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-hostile-tenant");
    let tenant = Tenant::new(&c, &ns.name);
    let i64max = json!(9223372036854775807i64);
    let u32wide = json!(4294967296u64);
    let i32wide = json!(2147483648u64);
    // (object, a part of the message that names the field)
    let cases: Vec<(Value, &str)> = vec![
        (
            ipj(
                "deadline",
                json!({"image": "nginx", "completionPolicy": {"activeDeadlineSeconds": i64max}}),
            ),
            "spec.completionPolicy.activeDeadlineSeconds",
        ),
        (
            ipj(
                "ttl",
                json!({"image": "nginx", "completionPolicy": {"ttlSecondsAfterFinished": u32wide}}),
            ),
            "spec.completionPolicy.ttlSecondsAfterFinished",
        ),
        (
            ipj(
                "parallelism",
                json!({"image": "nginx", "parallelism": i32wide}),
            ),
            "spec.parallelism",
        ),
        (
            ipj(
                "parallelism-text",
                json!({"image": "nginx", "parallelism": "99999999999999999999"}),
            ),
            "spec.parallelism",
        ),
        (
            ipj(
                "timeout",
                json!({"image": "nginx", "pullPolicy": {"timeoutSeconds": u32wide}}),
            ),
            "spec.pullPolicy.timeoutSeconds",
        ),
        (
            ipj(
                "backoff",
                json!({"image": "nginx", "pullPolicy": {"backoffLimit": i32wide}}),
            ),
            "spec.pullPolicy.backoffLimit",
        ),
        (
            ipj(
                "operator",
                json!({"image": "nginx", "selector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}}),
            ),
            "spec.selector.matchExpressions[0].operator",
        ),
        (
            ipj(
                "in-empty",
                json!({"image": "nginx", "selector": {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}}),
            ),
            "spec.selector.matchExpressions",
        ),
        (
            ipj(
                "label-key",
                json!({"image": "nginx", "selector": {"matchLabels": {"no spaces/in keys": "x"}}}),
            ),
            "spec.selector.matchLabels",
        ),
        (
            ipj(
                "node-name",
                json!({"image": "nginx", "selector": {"names": ["Node_1"]}}),
            ),
            "spec.selector.names[0]",
        ),
        (
            ipj(
                "secret-name",
                json!({"image": "nginx", "pullSecrets": ["Bad/Name"]}),
            ),
            "spec.pullSecrets[0]",
        ),
        (
            ipj(
                "short-digest",
                json!({"image": format!("nginx@sha256:{}", "a".repeat(63))}),
            ),
            "spec.image",
        ),
        (
            ipj(
                "upper-digest",
                json!({"image": format!("nginx@sha256:{}", "A".repeat(64))}),
            ),
            "spec.image",
        ),
        (
            ilpj(
                "list-timeout",
                json!({"images": ["nginx"], "pullPolicy": {"timeoutSeconds": u32wide}}),
            ),
            "spec.pullPolicy.timeoutSeconds",
        ),
        (
            ilpj(
                "list-selector",
                json!({"images": ["nginx"], "podSelector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}}),
            ),
            "spec.podSelector.matchExpressions",
        ),
    ];
    let mut failures = Vec::new();
    for (doc, field) in &cases {
        let name = doc["metadata"]["name"].as_str().unwrap_or("?");
        let (ok, stderr) = tenant.apply(doc);
        if ok {
            failures.push(format!(
                "{name}: ACCEPTED, expected a message naming {field}"
            ));
        } else if !stderr.contains(field) {
            failures.push(format!("{name}: message does not name {field}: {stderr}"));
        } else if stderr.contains("Forbidden") && stderr.contains("cannot create") {
            failures.push(format!(
                "{name}: refused by RBAC, not by validation: {stderr}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The tenant's rights are real: a sane job is accepted and runs.
    let image = format!("{}/test:v1", c.var("NODEIMAGE_REGISTRY"));
    let node = c.nodes()[0].clone();
    let (ok, stderr) = tenant.apply(&ipj(
        "sane",
        json!({"image": image, "selector": {"names": [node]}, "completionPolicy": {"type": "Always"}}),
    ));
    assert!(ok, "the tenant's sane job: {stderr}");
    kruise::wait_job(
        &c,
        "imagepulljobs.apps.kruise.io",
        &ns.name,
        "sane",
        "completed",
        LONG,
        kruise::completed,
    );
    everything_up(&c);
}

/// The largest values the API accepts run without a panic anywhere.
#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn the_largest_accepted_values_run() {
    let _g = lock();
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-hostile-max");
    let nodes = c.nodes();
    let image = format!("{}/test:v2", c.var("NODEIMAGE_REGISTRY"));
    kruise::create(
        &c,
        &json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
        "metadata": {"name": "max", "namespace": ns.name},
        "spec": {
            "image": image,
            "parallelism": "2147483647",
            "selector": {"names": [nodes[0]]},
            "pullPolicy": {"timeoutSeconds": 2147483647, "backoffLimit": 2147483647},
            "completionPolicy": {"type": "Always", "activeDeadlineSeconds": 2147483647,
                                 "ttlSecondsAfterFinished": 2147483647},
        }}),
    );
    let prepull = unique("e2e-hostile-max");
    kruise::create(
        &c,
        &json!({"apiVersion": "operations.kubeedge.io/v1alpha1", "kind": "ImagePrePullJob",
        "metadata": {"name": prepull},
        "spec": {"imagePrePullTemplate": {
            "images": [format!("{}/test:v3", c.var("NODEIMAGE_REGISTRY"))],
            "nodeNames": [nodes[1]],
            "checkItems": [],
            "concurrency": 2147483647, "retryTimes": 2147483647, "timeoutSeconds": 2147483647,
        }}}),
    );
    // A hand-written entry with every bound at its largest.
    let key = format!("{}/multi", c.var("NODEIMAGE_REGISTRY"));
    ni::set_image(
        &c,
        &nodes[2],
        &key,
        json!({"tags": [{"tag": "v1", "version": 9007199254740991i64, "pullPolicy": {
            "timeoutSeconds": 2147483647, "backoffLimit": 2147483647,
            "ttlSecondsAfterFinished": 2147483647, "activeDeadlineSeconds": 2147483647}}]}),
    );
    let done = kruise::wait_job(
        &c,
        "imagepulljobs.apps.kruise.io",
        &ns.name,
        "max",
        "completed",
        LONG,
        kruise::completed,
    );
    assert_eq!(
        kruise::count(&done, "succeeded"),
        1,
        "{}",
        kruise::describe(&done)
    );
    ni::wait_phase(
        &c,
        Tag {
            ni: &nodes[2],
            image: &key,
            tag: "v1",
        },
        9007199254740991,
        "Succeeded",
        LONG,
    );
    kruise::eventually("the ImagePrePullJob to succeed", LONG, || {
        let j = kruise::get(
            &c,
            "imageprepulljobs.operations.kubeedge.io",
            None,
            &prepull,
        )
        .ok_or("gone")?;
        match j["status"]["state"].as_str() {
            Some("Successful") => Ok(()),
            other => Err(format!("{other:?}: {}", j["status"])),
        }
    });
    ni::remove_images(&c, &nodes[2], &[key]);
    let _ = c.kubectl(
        &[
            "delete",
            "imageprepulljobs.operations.kubeedge.io",
            &prepull,
            "--wait=false",
        ],
        None,
    );
    everything_up(&c);
}

/// Removes `maximum` and `format` from an integer field of a CRD (every
/// served version), so an object stored now no longer fits the Rust type:
/// what a cluster holds when objects were written before a bound existed.
/// Both go: from Kubernetes 1.36 the API server also enforces an integer's
/// `format: int32` (before, it dropped the format).
fn loosen(c: &Cluster, crd: &str, pointer: &str) {
    let versions = c.kubectl_ok(
        &["get", "crd", crd, "-o", "jsonpath={.spec.versions[*].name}"],
        None,
    );
    let ops: Vec<Value> = (0..versions.split_whitespace().count())
        .flat_map(|i| {
            ["maximum", "format"].map(|key| {
                json!({"op": "remove",
                       "path": format!("/spec/versions/{i}/schema/openAPIV3Schema{pointer}/{key}")})
            })
        })
        .collect();
    c.kubectl_ok(
        &[
            "patch",
            "crd",
            crd,
            "--type=json",
            "-p",
            &Value::Array(ops).to_string(),
        ],
        None,
    );
    // The API server serves the new schema once the CRD is established again.
    std::thread::sleep(Duration::from_secs(3));
}

/// Puts the committed CRDs back when dropped, replaced whole: a server-side
/// apply does not put back a field that another manager removed.
struct RestoreCrds(Cluster);

impl Drop for RestoreCrds {
    fn drop(&mut self) {
        let dir = nodeimage_tests::repo_root().join("crds/yaml");
        let r = self
            .0
            .kubectl(&["replace", "-f", &dir.to_string_lossy()], None);
        if !r.success {
            eprintln!("restoring the CRDs failed: {}", r.stderr);
        }
        std::thread::sleep(Duration::from_secs(3));
    }
}

fn metric(c: &Cluster, name_and_labels: &str) -> Option<f64> {
    let health = c.controller_health();
    let resp = http::request("GET", &format!("http://{health}/metrics"), &[], &[]).ok()?;
    resp.text()
        .lines()
        .find(|l| l.starts_with(name_and_labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn objects_that_do_not_decode_fail_alone_also_after_a_restart() {
    let _g = lock();
    let c = Cluster::load();
    let controller = SharedController::attach(&c);
    let ns = TestNs::create(&c, "e2e-hostile-decode");
    let nodes = c.nodes();
    let registry = c.var("NODEIMAGE_REGISTRY");
    // An image of this test alone: a tag another test pulled onto the node
    // keeps its Succeeded status, and the bad entry's failure would not show.
    let pushed = Registry::new(&registry)
        .push_image(&format!("e2e/decode-{}", unique("img")), Some("v1"), 4096)
        .expect("push the test's image");
    Registry::new(&registry)
        .tag_again(&pushed, "v2")
        .expect("tag the test's image v2");
    let key = pushed.name.clone();
    // The bad entry would stop every later write to this NodeImage; it goes
    // when the test ends, also when it fails.
    let _entry = RemoveImage(c.clone(), nodes[0].clone(), key.clone());

    // Objects stored while a bound did not exist yet; the bounds come back
    // when `restore` drops, whatever happens.
    let restore = RestoreCrds(c.clone());
    loosen(
        &c,
        "imagepulljobs.apps.kruise.io",
        "/properties/spec/properties/pullPolicy/properties/timeoutSeconds",
    );
    loosen(
        &c,
        "nodeimages.apps.kruise.io",
        "/properties/spec/properties/images/additionalProperties/properties/tags/items/properties/pullPolicy/properties/timeoutSeconds",
    );
    kruise::create(
        &c,
        &json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
            "metadata": {"name": "wide", "namespace": ns.name},
            "spec": {"image": "nginx", "pullPolicy": {"timeoutSeconds": 4294967296u64}}}),
    );
    ni::set_image(
        &c,
        &nodes[0],
        &key,
        json!({"tags": [
            {"tag": "v1", "pullPolicy": {"timeoutSeconds": 4294967296u64}},
            {"tag": "v2"},
        ]}),
    );
    drop(restore);

    // The daemon fails the bad entry alone, with the decoder's reason, and
    // pulls its neighbour.
    let (_, bad) = ni::wait_tag(
        &c,
        Tag {
            ni: &nodes[0],
            image: &key,
            tag: "v1",
        },
        "Failed with the reason",
        LONG,
        |t| t["phase"] == "Failed",
        |t| t["phase"] == "Succeeded",
    );
    let message = bad["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("4294967296") && message.contains("tags[0]"),
        "the message names the entry and the value: {bad}"
    );
    ni::wait_phase(
        &c,
        Tag {
            ni: &nodes[0],
            image: &key,
            tag: "v2",
        },
        0,
        "Succeeded",
        LONG,
    );

    // After a restart the controller lists every ImagePullJob again: the
    // bad one is skipped and reported, the others are reconciled. The good
    // job goes to the node whose NodeImage holds the bad entry: the
    // controller reads and writes the rest of that NodeImage, and leaves
    // the bad entry's image as stored.
    controller.kill();
    controller.ensure_running();
    let good = "after-restart";
    kruise::create(
        &c,
        &json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
            "metadata": {"name": good, "namespace": ns.name},
            "spec": {"image": format!("{registry}/test:v3"), "selector": {"names": [nodes[0]]},
                     "completionPolicy": {"type": "Always"}}}),
    );
    let done = kruise::wait_job(
        &c,
        "imagepulljobs.apps.kruise.io",
        &ns.name,
        good,
        "completed",
        LONG,
        kruise::completed,
    );
    assert_eq!(
        kruise::count(&done, "succeeded"),
        1,
        "{}",
        kruise::describe(&done)
    );
    let stored = ni::get(&c, &nodes[0]).expect("the NodeImage");
    assert_eq!(
        stored["spec"]["images"][&key]["tags"][0]["pullPolicy"]["timeoutSeconds"], 4294967296u64,
        "the bad entry is left as stored: {}",
        stored["spec"]["images"][&key]
    );
    let bad_now = &stored["status"]["imageStatuses"][&key]["tags"][0];
    assert_eq!(bad_now["phase"], "Failed", "{bad_now}");
    let wide = kruise::eventually("the bad job to carry the reason", LONG, || {
        let j = kruise::get(&c, "imagepulljobs.apps.kruise.io", Some(&ns.name), "wide")
            .ok_or("gone")?;
        let m = j["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if m.contains("4294967296") {
            Ok(j)
        } else {
            Err(format!("status {}", j["status"]))
        }
    });
    assert!(
        wide["status"]["desired"].is_null() || wide["status"]["desired"] == 0,
        "the bad job was not planned: {}",
        wide["status"]
    );
    kruise::eventually("an InvalidObject event on the bad job", LONG, || {
        let out = c.kubectl_ok(
            &[
                "get",
                "events",
                "-n",
                &ns.name,
                "--field-selector",
                "involvedObject.name=wide,reason=InvalidObject",
                "-o",
                "json",
            ],
            None,
        );
        let v: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        let n = v["items"].as_array().map_or(0, Vec::len);
        (n > 0)
            .then_some(())
            .ok_or_else(|| "no event yet".to_string())
    });
    kruise::eventually("the invalid-objects gauge", LONG, || {
        let v = metric(
            &c,
            "nodeimage_controller_invalid_objects{kind=\"ImagePullJob\"}",
        );
        (v == Some(1.0))
            .then_some(())
            .ok_or_else(|| format!("{v:?}"))
    });
    // Deleting the bad object clears the gauge; the entries go too.
    kruise::delete(&c, "imagepulljobs.apps.kruise.io", &ns.name, "wide");
    kruise::eventually("the gauge back to 0", LONG, || {
        let v = metric(
            &c,
            "nodeimage_controller_invalid_objects{kind=\"ImagePullJob\"}",
        );
        (v == Some(0.0))
            .then_some(())
            .ok_or_else(|| format!("{v:?}"))
    });
    everything_up(&c);
}

/// Takes an image key out of a NodeImage's spec when dropped.
struct RemoveImage(Cluster, String, String);

impl Drop for RemoveImage {
    fn drop(&mut self) {
        ni::remove_images(&self.0, &self.1, std::slice::from_ref(&self.2));
    }
}
