//! Issue 39: nodeimage's powers over nodes and Secrets, tried with a
//! tenant's own token (a ServiceAccount with rights in one namespace only).
//! The tenant cannot make the controller copy a Secret that is not a
//! registry credential into the namespace every node daemon reads, nor
//! gate new nodes with its jobs; each refusal is said on the job. (The gate
//! on a real node, with a tenant's job beside an allowed one, is in
//! real_kubelet.rs.)

use nodeimage_tests::kruise::{self, TestNs};
use nodeimage_tests::prepull::{Job, node_entry};
use nodeimage_tests::tenant::Tenant;
use nodeimage_tests::{Cluster, http, unique};
use serde_json::{Value, json};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(240);

/// A value no status, event or log may ever show.
fn secret_value() -> String {
    unique("do-not-leak")
}

/// The ImagePullJob of `image` on `node` naming `secrets`.
fn job_with_secrets(name: &str, image: &str, node: &str, secrets: &[&str]) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
        "metadata": {"name": name},
        "spec": {"image": image, "selector": {"names": [node]}, "pullSecrets": secrets,
                 "completionPolicy": {"type": "Always"}}})
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn a_tenants_secret_that_is_not_a_registry_credential_is_never_copied() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-tenant-secret");
    let tenant = Tenant::new(&c, &ns.name);
    let leak = secret_value();
    let b64 = |s: &str| {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(s)
    };
    for (name, type_, data) in [
        ("app-config", "Opaque", json!({"password": b64(&leak)})),
        (
            "web-tls",
            "kubernetes.io/tls",
            json!({"tls.crt": b64(&leak), "tls.key": b64(&leak)}),
        ),
    ] {
        let (ok, stderr) = tenant.apply(&json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name}, "type": type_, "data": data}));
        assert!(ok, "the tenant creates its secret {name}: {stderr}");
    }
    let node = c.nodes()[0].clone();
    let image = format!("{}/test:v1", c.var("NODEIMAGE_REGISTRY"));
    let job = unique("refused");
    let (ok, stderr) = tenant.apply(&job_with_secrets(
        &job,
        &image,
        &node,
        &["app-config", "web-tls"],
    ));
    assert!(ok, "the tenant creates its job: {stderr}");
    let done = kruise::wait_job(
        &c,
        "imagepulljobs.apps.kruise.io",
        &ns.name,
        &job,
        "completed",
        LONG,
        kruise::completed,
    );
    assert_eq!(kruise::count(&done, "failed"), 1, "{done}");
    assert_eq!(kruise::count(&done, "succeeded"), 0, "{done}");
    let message = done["status"]["message"].as_str().unwrap_or_default();
    for (name, type_) in [("app-config", "Opaque"), ("web-tls", "kubernetes.io/tls")] {
        let why = format!("pull secret {}/{name} has type {type_}", ns.name);
        assert!(message.contains(&why), "{why} not in {message:?}");
        assert!(
            kruise::copies_of(&c, &ns.name, name).is_empty(),
            "no copy of {name} for the daemons"
        );
    }
    let events = kruise::events_of(&c, &ns.name, &job);
    let refused: Vec<_> = events
        .iter()
        .filter(|e| e["reason"] == "PullSecretRefused")
        .collect();
    assert_eq!(
        refused.len(),
        2,
        "a PullSecretRefused event each: {events:?}"
    );
    // Nothing of the secrets' content anywhere the controller writes.
    let logs = std::fs::read_to_string(format!("{}/logs/controller.log", c.var("NODEIMAGE_STATE")))
        .unwrap_or_default();
    let everything = format!("{done}{events:?}{logs}");
    assert!(
        !everything.contains(&leak) && !everything.contains(&b64(&leak)),
        "a secret's value leaked"
    );
    // The tenant's own credentials were not widened: it still cannot read
    // the daemons' namespace.
    let out = tenant.run(&["get", "secrets", "-n", kruise::SECRETS_NS], None);
    assert!(
        !out.status.success(),
        "the tenant reads the daemons' secrets"
    );
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn an_image_prepull_job_naming_a_non_registry_secret_fails_its_nodes_naming_it() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-prepull-opaque");
    let leak = secret_value();
    kruise::put_secret(&c, &ns.name, "plain", "Opaque", "token", &leak, false);
    let node = c.nodes()[1].clone();
    let image = format!("{}/test:v1", c.var("NODEIMAGE_REGISTRY"));
    let name = unique("ppj-opaque");
    let manifest = format!(
        "apiVersion: operations.kubeedge.io/v1alpha1\nkind: ImagePrePullJob\nmetadata:\n  name: {name}\nspec:\n  imagePrePullTemplate:\n    images:\n      - {image}\n    nodeNames:\n      - {node}\n    imageSecrets: {}/plain\n",
        ns.name
    );
    let job = Job::apply(&c, &name, &manifest);
    let status = job.wait_finished(LONG);
    let (row, _) = node_entry(&status, &node);
    let reason = row["reason"].as_str().unwrap_or_default();
    assert_eq!(row["state"], "Failed", "{row}");
    assert!(
        reason.contains(&format!("pull secret {}/plain has type Opaque", ns.name)),
        "{reason}"
    );
    assert!(kruise::copies_of(&c, &ns.name, "plain").is_empty());
    assert!(!status.to_string().contains(&leak));
    job.delete();
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn a_tenants_job_marked_to_gate_new_nodes_gates_nothing_and_says_so() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-tenant-gate");
    let tenant = Tenant::new(&c, &ns.name);
    let metrics = format!("http://{}/metrics", c.controller_health());
    let series = "nodeimage_controller_startup_gate_refused_total{kind=\"ImagePullJob\"}";
    let before = http::metric_value(&http::scrape(&metrics), series).unwrap_or(0.0);
    let node = c.nodes()[0].clone();
    let image = format!("{}/test:v1", c.var("NODEIMAGE_REGISTRY"));
    let job = unique("gating");
    let mut doc = job_with_secrets(&job, &image, &node, &[]);
    doc["metadata"]["annotations"] = json!({"nodeimage.dev/gate-new-nodes": "true"});
    let (ok, stderr) = tenant.apply(&doc);
    assert!(ok, "the tenant creates its job: {stderr}");
    kruise::eventually("a StartupGateRefused event on the job", LONG, || {
        let events = kruise::events_of(&c, &ns.name, &job);
        let refused = events.iter().find(|e| e["reason"] == "StartupGateRefused");
        match refused.and_then(|e| e["message"].as_str()) {
            Some(m) if m.contains(&format!("namespace {} may not gate new nodes", ns.name)) => {
                Ok(())
            }
            _ => Err(format!("{events:?}")),
        }
    });
    let after = http::metric_value(&http::scrape(&metrics), series).unwrap_or(0.0);
    assert!(after > before, "{series}: {before} -> {after}");
    // The job itself runs as any other: only the mark is ignored.
    kruise::wait_job(
        &c,
        "imagepulljobs.apps.kruise.io",
        &ns.name,
        &job,
        "completed",
        LONG,
        kruise::completed,
    );
}
