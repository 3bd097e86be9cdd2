//! The KubeEdge kinds as KubeEdge users run them today, on the local cluster
//! with the shared controller and daemons: v1alpha2 manifests applied and
//! run, an object read in both versions and written back, what KubeEdge
//! accepts (concurrency 0, a repeated image, any check item name, no
//! default check), only edge nodes taking part, and the rollout stopping
//! once failures reach failureTolerate (KubeEdge's boundary).

use nodeimage_tests::prepull::{self, EDGE_LABEL, Job, TestNode};
use nodeimage_tests::{Cleanup, Cluster, unique, wait_for};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Longest wait for a job to finish: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(240);
const IPPJ_V1: &str = "imageprepulljobs.v1alpha1.operations.kubeedge.io";
const IPPJ_V2: &str = "imageprepulljobs.v1alpha2.operations.kubeedge.io";
const NUJ_V1: &str = "nodeupgradejobs.v1alpha1.operations.kubeedge.io";
const NUJ_V2: &str = "nodeupgradejobs.v1alpha2.operations.kubeedge.io";

fn cluster() -> Cluster {
    Cluster::load()
}

fn sockets(c: &Cluster) -> Vec<PathBuf> {
    (0..c.nodes().len()).map(|i| c.socket(i)).collect()
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// `kubectl get RESOURCE NAME -o json`, in the version the resource names.
fn get(c: &Cluster, resource: &str, name: &str) -> Value {
    let out = c.kubectl_ok(&["get", resource, name, "-o", "json"], None);
    serde_json::from_str(&out).expect("kubectl prints JSON")
}

/// An ImagePrePullJob manifest in `version` with `template` lines.
fn ippj(version: &str, name: &str, template: &str) -> String {
    let body: String = template
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("    {l}\n"))
        .collect();
    format!(
        "apiVersion: operations.kubeedge.io/{version}\nkind: ImagePrePullJob\nmetadata:\n  name: {name}\nspec:\n  imagePrePullTemplate:\n{body}"
    )
}

/// Removes the test images from every node when dropped.
fn image_cleanup(c: &Cluster, images: &[String]) -> Cleanup {
    let mut cleanup = Cleanup::default();
    for image in images {
        let (s, i) = (sockets(c), image.clone());
        cleanup.defer("remove the image", move || {
            prepull::remove_from_nodes(&s, &i)
        });
    }
    cleanup
}

/// The node's status entries of v1alpha2 `nodeStatus`, by node name.
fn v2_nodes(status: &Value) -> BTreeMap<String, Value> {
    status["nodeStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| (str_of(&n["nodeName"]).to_string(), n.clone()))
        .collect()
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_v1alpha2_job_runs_and_reads_in_both_versions() {
    let c = cluster();
    let nodes = c.nodes();
    let image = prepull::unique_image(&c, "ke-v2");
    let _images = image_cleanup(&c, std::slice::from_ref(&image));
    let name = unique("ke-v2");
    // As KubeEdge's v1alpha2 types take it; concurrency 0 as KubeEdge accepts.
    let job = Job::apply(
        &c,
        &name,
        &ippj(
            "v1alpha2",
            &name,
            &format!(
                "images:\n  - {image}\nnodeNames:\n  - {}\n  - {}\nconcurrency: 0\ntimeoutSeconds: 120\n",
                nodes[0], nodes[1]
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    assert_eq!(str_of(&status["state"]), "Successful", "{status}");

    let v2 = get(&c, IPPJ_V2, &name);
    assert_eq!(v2["apiVersion"], "operations.kubeedge.io/v1alpha2");
    let st = &v2["status"];
    assert_eq!(st["phase"], "Completed", "{st}");
    let rows = v2_nodes(st);
    assert_eq!(rows.len(), 2, "{st}");
    for n in &nodes[..2] {
        let row = &rows[n];
        assert_eq!(row["phase"], "Successful", "{row}");
        let flow: Vec<(&str, &str)> = row["actionFlow"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| (str_of(&a["action"]), str_of(&a["status"])))
            .collect();
        assert_eq!(flow, vec![("Check", "True"), ("Pull", "True")], "{row}");
        assert_eq!(row["imageStatus"][0]["image"], image.as_str(), "{row}");
        assert_eq!(row["imageStatus"][0]["status"], "True", "{row}");
    }

    let v1 = get(&c, IPPJ_V1, &name);
    assert_eq!(v1["apiVersion"], "operations.kubeedge.io/v1alpha1");
    assert_eq!(v1["spec"], v2["spec"], "one spec in both versions");
    assert_eq!(v1["status"]["state"], "Successful");
    assert_eq!(
        v1["status"]["status"].as_array().map(Vec::len),
        Some(2),
        "{}",
        v1["status"]
    );
    // No check ran: KubeEdge runs none unless checkItems asks.
    assert!(v1["spec"]["imagePrePullTemplate"]["checkItems"].is_null());
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_v1alpha1_object_reads_as_v1alpha2_and_writes_back() {
    let c = cluster();
    let name = unique("ke-roundtrip");
    // A NodeUpgradeJob in v1alpha1 with v1alpha1's digest field, on a node
    // that does not exist: it fails at once, with a status to read.
    let manifest = format!(
        "apiVersion: operations.kubeedge.io/v1alpha1\nkind: NodeUpgradeJob\nmetadata:\n  name: {name}\nspec:\n  version: v1.21.0\n  nodeNames: [{name}-ghost]\n  imageDigestGatter:\n    value: sha256:0000000000000000000000000000000000000000000000000000000000000000\n"
    );
    c.kubectl_ok(&["apply", "-f", "-"], Some(&manifest));
    let mut cleanup = Cleanup::default();
    let (cc, n) = (c.clone(), name.clone());
    cleanup.defer("delete the job", move || {
        let _ = cc.kubectl(&["delete", NUJ_V1, &n, "--ignore-not-found"], None);
    });
    let v2 = wait_for("the job to fail", WAIT, || {
        let v = get(&c, NUJ_V2, &name);
        (v["status"]["phase"] == "Failure").then_some(v)
    });
    assert_eq!(v2["apiVersion"], "operations.kubeedge.io/v1alpha2");
    assert_eq!(v2["spec"]["version"], "v1.21.0");
    assert_eq!(
        str_of(&v2["spec"]["imageDigestGatter"]["value"]).len(),
        71,
        "{}",
        v2["spec"]
    );
    assert_eq!(v2["status"]["state"], "Failed", "{}", v2["status"]);
    assert_eq!(v2["status"]["nodeStatus"][0]["phase"], "Failure");
    assert_eq!(v2["status"]["nodeStatus"][0]["reason"], "not found");

    // Written back as read in v1alpha2 (the spec may not change: unchanged).
    let mut back = v2.clone();
    if let Some(m) = back["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    c.kubectl_ok(&["replace", "-f", "-"], Some(&back.to_string()));
    let v1 = get(&c, NUJ_V1, &name);
    assert_eq!(v1["apiVersion"], "operations.kubeedge.io/v1alpha1");
    assert_eq!(v1["spec"], v2["spec"]);
    assert_eq!(v1["status"]["state"], "Failed");
    assert_eq!(v1["status"]["nodeStatus"][0]["event"], "Init");

    // A spec change is refused in either version, as in KubeEdge.
    let r = c.kubectl(
        &[
            "patch",
            NUJ_V2,
            &name,
            "--type=merge",
            "-p",
            r#"{"spec":{"version":"v1.22.0"}}"#,
        ],
        None,
    );
    assert!(
        !r.success && r.stderr.contains("spec is immutable"),
        "{}",
        r.stderr
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn what_kubeedge_accepts_is_accepted() {
    let c = cluster();
    let nodes = c.nodes();
    let image = prepull::unique_image(&c, "ke-accept");
    let _images = image_cleanup(&c, std::slice::from_ref(&image));
    let name = unique("ke-accept");
    // A repeated image, a check item nodeimage does not run, concurrency 0.
    let job = Job::apply(
        &c,
        &name,
        &ippj(
            "v1alpha1",
            &name,
            &format!(
                "images:\n  - {image}\n  - {image}\nnodeNames:\n  - {}\ncheckItems:\n  - gpu\nconcurrency: 0\nfailureTolerate: '1'\n",
                nodes[0]
            ),
        ),
    );
    let uid = str_of(&job.get()["metadata"]["uid"]).to_string();
    let status = job.wait_finished(WAIT);
    // The unknown check fails the node, as KubeEdge v1alpha2 does.
    let (ns, _) = prepull::node_entry(&status, &nodes[0]);
    assert_eq!(
        (str_of(&ns["state"]), str_of(&ns["event"])),
        ("Failed", "Check"),
        "{status}"
    );
    assert!(
        str_of(&ns["reason"]).contains("check gpu is not supported"),
        "{ns}"
    );
    // The repeated image is one entry on the node.
    let entries = nodeimage_tests::nodeimage::entries_owned_by(&c, &nodes[0], &uid);
    assert_eq!(entries.len(), 1, "{entries:?}");

    // NodeUpgradeJob: concurrency 0 and another check item, accepted.
    let nuj = format!(
        "apiVersion: operations.kubeedge.io/v1alpha2\nkind: NodeUpgradeJob\nmetadata:\n  name: {name}\nspec:\n  version: v1.21.0\n  nodeNames: [{}]\n  concurrency: 0\n  checkItems: [network]\n",
        nodes[0]
    );
    c.kubectl_ok(&["create", "--dry-run=server", "-f", "-"], Some(&nuj));
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn only_edge_nodes_take_part() {
    let c = cluster();
    let nodes = c.nodes();
    // A Ready Node without the edge label (no daemon: it must never be asked).
    let cloud = TestNode::create_exactly(&c, "ke-cloud", &BTreeMap::new());
    let image = prepull::unique_image(&c, "ke-edge");
    let _images = image_cleanup(&c, std::slice::from_ref(&image));

    // Named: the cloud node fails at once with the reason; the edge node pulls.
    let name = unique("ke-named");
    let job = Job::apply(
        &c,
        &name,
        &ippj(
            "v1alpha1",
            &name,
            &format!(
                "images:\n  - {image}\nnodeNames:\n  - {}\n  - {}\nconcurrency: 2\nfailureTolerate: '1'\n",
                cloud.name, nodes[0]
            ),
        ),
    );
    let uid = str_of(&job.get()["metadata"]["uid"]).to_string();
    let status = job.wait_finished(WAIT);
    let (ns, _) = prepull::node_entry(&status, &cloud.name);
    assert_eq!(
        (str_of(&ns["state"]), str_of(&ns["event"])),
        ("Failed", "Init"),
        "{status}"
    );
    assert!(
        str_of(&ns["reason"]).starts_with("not an edge node"),
        "{ns}"
    );
    assert_eq!(
        str_of(&prepull::node_entry(&status, &nodes[0]).0["state"]),
        "Successful"
    );
    assert!(nodeimage_tests::nodeimage::entries_owned_by(&c, &cloud.name, &uid).is_empty());

    // Selected: a selector matching both takes only the edge node.
    let name = unique("ke-selected");
    let job = Job::apply(
        &c,
        &name,
        &ippj(
            "v1alpha2",
            &name,
            &format!(
                "images:\n  - {image}\nlabelSelector:\n  matchExpressions:\n  - key: kubernetes.io/hostname\n    operator: In\n    values: [{}, {}]\n",
                cloud.name, nodes[0]
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    assert_eq!(prepull::node_names(&status), vec![nodes[0].clone()]);
    assert_eq!(str_of(&status["phase"]), "Completed", "{status}");
    let node = get(&c, "node", &nodes[0]);
    assert!(
        node["metadata"]["labels"].get(EDGE_LABEL).is_some(),
        "the cluster's nodes are edge nodes"
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn failures_reaching_the_tolerance_start_no_more_nodes() {
    let c = cluster();
    let nodes = c.nodes();
    assert!(nodes.len() >= 3, "needs three nodes");
    // An image no registry holds: every node that tries it fails.
    let registry = c.var("NODEIMAGE_REGISTRY");
    let missing = format!("{registry}/{}:v1", unique("ke-missing"));
    let name = unique("ke-failfast");
    let job = Job::apply(
        &c,
        &name,
        &ippj(
            "v1alpha1",
            &name,
            &format!(
                "images:\n  - {missing}\nnodeNames:\n  - {}\n  - {}\n  - {}\nconcurrency: 1\nfailureTolerate: '0.3'\nretryTimes: 0\n",
                nodes[0], nodes[1], nodes[2]
            ),
        ),
    );
    let uid = str_of(&job.get()["metadata"]["uid"]).to_string();
    let status = job.wait_finished(WAIT);
    assert_eq!(
        (str_of(&status["state"]), str_of(&status["reason"])),
        (
            "Failed",
            "1 of 3 nodes failed (33.3%), reaching failureTolerate 0.3; 2 nodes not started"
        ),
        "{status}"
    );
    assert_eq!(str_of(&status["phase"]), "Failure");
    for n in &nodes[1..3] {
        assert_eq!(
            str_of(&prepull::node_entry(&status, n).0["state"]),
            "Init",
            "{status}"
        );
        assert_eq!(v2_nodes(&status)[n]["phase"], "Pending", "{status}");
        assert!(
            nodeimage_tests::nodeimage::entries_owned_by(&c, n, &uid).is_empty(),
            "{n} never started"
        );
    }
}
