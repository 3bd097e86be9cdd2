//! Whose credentials a pull uses, and pulls that outlast a registry outage:
//! a tenant's tag is pulled only with secrets its own job supplied, a missing
//! secret next to a valid one does not stop the pull, and the default retry
//! schedule rides out a 30 s registry outage.

use nodeimage_tests::kruise::{self, TestNs};
use nodeimage_tests::nodeimage::{self as ni, Tag};
use nodeimage_tests::process::TestRegistry;
use nodeimage_tests::registry::Registry;
use nodeimage_tests::{Cleanup, Cluster, cri, unique};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const LONG: Duration = Duration::from_secs(240);
const IPJ: &str = "imagepulljobs.apps.kruise.io";
const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

fn ipj(ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// A dockerconfigjson Secret with the auth registry's credentials.
fn registry_secret(c: &Cluster, ns: &str, name: &str) {
    let host = c.var("NODEIMAGE_AUTH_REGISTRY");
    let payload = kruise::docker_config_json(
        &[host.as_str()],
        &c.var("NODEIMAGE_AUTH_USER"),
        &c.var("NODEIMAGE_AUTH_PASSWORD"),
    );
    kruise::put_secret(
        c,
        ns,
        name,
        DOCKER_CONFIG_JSON,
        ".dockerconfigjson",
        &payload,
        false,
    );
}

fn wait_done(c: &Cluster, ns: &str, name: &str) -> Value {
    kruise::wait_job(c, IPJ, ns, name, "completed", LONG, kruise::completed)
}

/// On every node, whatever its runtime (containerd 1.6, 1.7 with layer
/// discard, 2.x through the Transfer Service): a tenant's job listing its
/// pull secret pulls a private image (it is in the node's containerd),
/// while another tenant's job for another tag of that image, without a
/// secret, fails with the registry's `unauthorized:`: the owner's secret is
/// not lent to it.
#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn a_tenant_pulls_only_with_its_own_credentials_on_every_runtime() {
    let c = Cluster::load();
    let nodes = c.runtime_nodes();
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    let owner = TestNs::create(&c, "e2e-creds-owner");
    let other = TestNs::create(&c, "e2e-creds-other");
    // A private image with two tags, in the registry that needs basic auth.
    let reg = kruise::auth_registry(&c);
    let v1 = kruise::push_unique(&reg, "tenant", 64 << 10);
    reg.push_image(&v1.repository, Some("v2"), 64 << 10)
        .expect("push the second tag");
    registry_secret(&c, &owner.name, "regcred");
    // At the end, before the namespaces go: the jobs (their finalizer takes
    // their entries out of the NodeImages), then, once each node's daemon has
    // seen the entries go, what they pulled.
    let mut cleanup = Cleanup::default();
    for n in &nodes {
        let (c2, node, image) = (c.clone(), n.name.clone(), vec![v1.name.clone()]);
        let (socket, refs) = (
            n.socket.clone(),
            [format!("{}:v1", v1.name), format!("{}:v2", v1.name)],
        );
        cleanup.defer(format!("remove {refs:?} from {}", n.name), move || {
            ni::wait_status_without(&c2, &node, &image, Duration::from_secs(30));
            for r in &refs {
                if let Ok(Some(_)) = cri::image_status(&socket, r) {
                    let _ = cri::remove_image(&socket, r);
                }
            }
        });
    }
    for (ns, job) in [(&owner.name, "mine"), (&other.name, "theirs")] {
        let (c2, ns) = (c.clone(), ns.clone());
        cleanup.defer(format!("delete imagepulljob {ns}/{job}"), move || {
            let r = c2.kubectl(
                &[
                    "delete",
                    IPJ,
                    job,
                    "-n",
                    &ns,
                    "--ignore-not-found",
                    "--timeout=60s",
                ],
                None,
            );
            if !r.success {
                eprintln!("cleanup: deleting imagepulljob {ns}/{job}: {}", r.stderr);
            }
        });
    }

    // The owner lists its secret: its tag is pulled with it on every node.
    kruise::create(
        &c,
        &ipj(
            &owner.name,
            "mine",
            json!({"image": format!("{}:v1", v1.name), "pullSecrets": ["regcred"],
                   "selector": {"names": names}, "parallelism": nodes.len(),
                   "completionPolicy": {"type": "Always"}}),
        ),
    );
    let done = wait_done(&c, &owner.name, "mine");
    assert_eq!(
        kruise::count(&done, "succeeded"),
        nodes.len() as i64,
        "{}",
        kruise::describe(&done)
    );
    for n in &nodes {
        let held = cri::image_status(&n.socket, &format!("{}:v1", v1.name))
            .unwrap_or_else(|e| panic!("{}: CRI ImageStatus: {e}", n.label()));
        assert!(
            held.is_some(),
            "{}: the owner's tag is in the node's containerd",
            n.label()
        );
    }

    // Another tenant asks for another tag of the same private image with no
    // secret, while the owner's copy hangs on that image: it must not be
    // lent, so the pull is refused by the registry.
    kruise::create(
        &c,
        &ipj(
            &other.name,
            "theirs",
            json!({"image": format!("{}:v2", v1.name), "selector": {"names": names},
                   "parallelism": nodes.len(), "pullPolicy": {"backoffLimit": 0},
                   "completionPolicy": {"type": "Always"}}),
        ),
    );
    let done = wait_done(&c, &other.name, "theirs");
    assert_eq!(
        kruise::count(&done, "failed"),
        nodes.len() as i64,
        "{}",
        kruise::describe(&done)
    );
    for n in &nodes {
        let label = n.label();
        let obj = ni::get(&c, &n.name).expect("NodeImage");
        let spec = ni::spec_tag(&obj, &v1.name, "v2")
            .unwrap_or_else(|| panic!("{label}: no entry for v2"));
        assert!(
            !spec["ownerReferences"].to_string().contains(&owner.name),
            "{label}: v2 is requested only by the other tenant: {spec}"
        );
        let pull_secrets = &obj["spec"]["images"][v1.name.as_str()]["pullSecrets"];
        assert!(
            pull_secrets.as_array().is_some_and(|a| !a.is_empty()),
            "{label}: the owner's copy is listed on the image: {pull_secrets}"
        );
        let status = ni::tag_status(&obj, &v1.name, "v2")
            .unwrap_or_else(|| panic!("{label}: no status of v2"));
        let message = status["message"].as_str().unwrap_or_default();
        assert_eq!(status["phase"], "Failed", "{label}: {status}");
        assert!(
            message.contains("unauthorized: "),
            "{label}: the failure says the registry refused: {status}"
        );
    }
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn a_missing_secret_next_to_a_valid_one_does_not_stop_the_pull() {
    let c = Cluster::load();
    let nodes = c.nodes();
    let ns = TestNs::create(&c, "e2e-creds-missing");
    let reg = kruise::auth_registry(&c);
    let image = kruise::push_unique(&reg, "missing", 64 << 10);
    registry_secret(&c, &ns.name, "valid");

    // A job listing an absent secret before a valid one.
    kruise::create(
        &c,
        &ipj(
            &ns.name,
            "both",
            json!({"image": image.reference(), "pullSecrets": ["absent", "valid"],
                   "selector": {"names": [nodes[1]]}, "completionPolicy": {"type": "Always"}}),
        ),
    );
    let done = wait_done(&c, &ns.name, "both");
    assert_eq!(
        kruise::count(&done, "succeeded"),
        1,
        "{}",
        kruise::describe(&done)
    );
    let message = done["status"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("absent"),
        "the job names the missing secret: {message}"
    );

    // A hand-written entry listing a missing and a valid secret by hand.
    let tag = image.tag.clone().unwrap_or_else(|| "v1".into());
    ni::set_image(
        &c,
        &nodes[2],
        &image.name,
        json!({"pullSecrets": [
                  {"namespace": ns.name, "name": "not-there"},
                  {"namespace": ns.name, "name": "valid"}],
               "tags": [{"tag": tag, "pullPolicy": {"backoffLimit": 0}}]}),
    );
    ni::wait_phase(
        &c,
        Tag {
            ni: &nodes[2],
            image: &image.name,
            tag: &tag,
        },
        0,
        "Succeeded",
        LONG,
    );
    ni::remove_images(&c, &nodes[2], std::slice::from_ref(&image.name));
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn a_thirty_second_registry_outage_does_not_fail_a_job() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-outage");
    let dir = std::env::temp_dir().join(unique("nodeimage-outage"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut registry = TestRegistry::start(&dir);
    let image = kruise::push_unique(&Registry::new(&registry.host()), "outage", 64 << 10);
    let nodes = c.nodes();

    // The registry goes down, then a job with the default pull policy
    // (3 retries, 600 s per attempt) starts on every node.
    registry.stop();
    let down = Instant::now();
    kruise::create(
        &c,
        &ipj(
            &ns.name,
            "through-outage",
            json!({"image": image.reference(), "selector": {"names": nodes},
                   "parallelism": nodes.len(), "completionPolicy": {"type": "Always"}}),
        ),
    );
    // The outage is felt: a node reports a failed attempt and a retry.
    kruise::eventually("a failed attempt during the outage", LONG, || {
        let retrying = nodes.iter().any(|n| {
            ni::get(&c, n)
                .and_then(|o| {
                    let tag = image.tag.clone().unwrap_or_else(|| "v1".into());
                    ni::tag_status(&o, &image.name, &tag).map(|t| {
                        t["message"]
                            .as_str()
                            .unwrap_or_default()
                            .contains("retrying")
                    })
                })
                .unwrap_or(false)
        });
        retrying
            .then_some(())
            .ok_or_else(|| "no retry yet".to_string())
    });
    let left = Duration::from_secs(30).saturating_sub(down.elapsed());
    std::thread::sleep(left);
    registry.start_again();
    eprintln!("registry was down for {:?}", down.elapsed());

    let done = wait_done(&c, &ns.name, "through-outage");
    assert_eq!(
        (
            kruise::count(&done, "succeeded"),
            kruise::count(&done, "failed")
        ),
        (nodes.len() as i64, 0),
        "{}",
        kruise::describe(&done)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
