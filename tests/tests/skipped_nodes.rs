//! Nodes where no node daemon can run get no NodeImage, so no job waits for
//! them: virtual-kubelet and EKS Fargate nodes, and Windows nodes (the
//! controller's default `--skip-nodes-labelled`; the chart gives the daemon
//! the matching node affinity, tests/tests/chart.rs).

use nodeimage_tests::nodeimage as ni;
use nodeimage_tests::{Cleanup, Cluster, random_suffix, wait_for};
use serde_json::{Value, json};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(60);

/// Issue 30: a Fargate Node and a Windows Node get no NodeImage while a
/// plain Node created after them does; a Node relabelled Windows loses its
/// NodeImage.
#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn fargate_and_windows_nodes_get_no_nodeimage() {
    let c = Cluster::load();
    let id = random_suffix();
    let fargate = format!("e2e-fargate-{id}");
    let windows = format!("e2e-windows-{id}");
    let linux = format!("e2e-linux-{id}");
    let mut cleanup = Cleanup::default();
    for n in [&fargate, &windows, &linux] {
        let (c2, n2) = (c.clone(), n.clone());
        cleanup.defer(format!("delete node {n}"), move || {
            let _ = c2.kubectl(
                &["delete", "node", &n2, "--ignore-not-found", "--wait=false"],
                None,
            );
            let _ = c2.kubectl(
                &[
                    "delete",
                    "nodeimage",
                    &n2,
                    "--ignore-not-found",
                    "--wait=false",
                ],
                None,
            );
        });
    }
    let create_node = |name: &str, labels: Value| {
        let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}});
        c.kubectl_ok(&["create", "-f", "-"], Some(&obj.to_string()));
    };
    create_node(
        &fargate,
        json!({"eks.amazonaws.com/compute-type": "fargate", "kubernetes.io/os": "linux"}),
    );
    create_node(&windows, json!({"kubernetes.io/os": "windows"}));
    create_node(&linux, json!({"kubernetes.io/os": "linux"}));

    wait_for("the linux Node's NodeImage", TIMEOUT, || {
        ni::get(&c, &linux).map(|_| ())
    });
    // The mirror handles Nodes in the order it sees them: the two created
    // first have been decided by now.
    assert!(
        ni::get(&c, &fargate).is_none(),
        "a Fargate Node gets no NodeImage"
    );
    assert!(
        ni::get(&c, &windows).is_none(),
        "a Windows Node gets no NodeImage"
    );

    c.kubectl_ok(
        &[
            "label",
            "node",
            &linux,
            "--overwrite",
            "kubernetes.io/os=windows",
        ],
        None,
    );
    wait_for(
        "the NodeImage of a Node relabelled Windows to be deleted",
        TIMEOUT,
        || ni::get(&c, &linux).is_none().then_some(()),
    );
    drop(cleanup);
}
