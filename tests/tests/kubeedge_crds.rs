//! nodeimage's KubeEdge CRDs applied over KubeEdge's own (1.21+: v1alpha2
//! stored) on a cluster that holds objects KubeEdge stored, with the
//! command docs/install.md gives; then the objects read on in both
//! versions, nodeimage treats a job KubeEdge finished as finished, and a
//! deleted job with KubeEdge's finalizer goes.
//!
//! As docs/migration.md says, nodeimage does not run while KubeEdge's CRDs
//! are in place (a controller writing through KubeEdge's v1alpha1 schema
//! would prune v1alpha2 fields, as KubeEdge's own v1alpha1 code does): the
//! test stops nodeimage first and starts it after applying our CRDs.
//!
//! It replaces cluster-wide CRDs (deleting every object of both kinds) and
//! restarts nodeimage, so tests/run-all.sh runs it alone, after the other
//! end-to-end tests (they skip it with `--skip upstream_crds`).

use nodeimage_tests::{Cleanup, Cluster, repo_root, unique, wait_for};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(120);
const CRDS: [&str; 2] = [
    "imageprepulljobs.operations.kubeedge.io",
    "nodeupgradejobs.operations.kubeedge.io",
];

fn get(c: &Cluster, resource: &str, name: &str) -> Value {
    let out = c.kubectl_ok(&["get", resource, name, "-o", "json"], None);
    serde_json::from_str(&out).expect("kubectl prints JSON")
}

/// Ours, as `helm show crds charts/nodeimage | kubectl apply --server-side
/// --force-conflicts -f -` applies them (the chart's crds/ are those files).
fn apply_ours(c: &Cluster) -> Result<(), String> {
    let dir = repo_root().join("charts/nodeimage/crds");
    let mut all = String::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the chart's crds")
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files {
        all.push_str(&std::fs::read_to_string(&f).expect("CRD file"));
        all.push('\n');
    }
    let r = c.kubectl(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&all),
    );
    if r.success { Ok(()) } else { Err(r.stderr) }
}

fn established(c: &Cluster) {
    for crd in CRDS {
        c.kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{crd}"),
                "--timeout=60s",
            ],
            None,
        );
    }
}

#[test]
#[ignore = "replaces the KubeEdge CRDs: run alone (tests/run-all.sh)"]
fn upstream_crds_then_ours_objects_read_on() {
    let c = cluster_with_ours_restored_at_end();
    let nodes = c.0.nodes();
    let c = &c.0;

    // KubeEdge 1.21+'s CRDs in place of ours, nodeimage stopped.
    nodeimage(false);
    c.kubectl_ok(
        &[
            "delete",
            "crd",
            CRDS[0],
            CRDS[1],
            "--wait=true",
            "--timeout=120s",
        ],
        None,
    );
    let upstream = repo_root().join("tests/upstream/kubeedge");
    for f in [
        "operations_v1alpha2_imageprepulljob.yaml",
        "operations_v1alpha2_nodeupgradejob.yaml",
    ] {
        c.kubectl_ok(&["create", "-f", &upstream.join(f).to_string_lossy()], None);
    }
    established(c);

    // Objects as KubeEdge stores them: v1alpha2, its finalizer, a v1alpha2
    // status (a finished pre-pull; an upgrade as in KubeEdge 1.21's notes).
    let registry = c.var("NODEIMAGE_REGISTRY");
    let (ppj, nuj) = (unique("ke-stored"), unique("ke-stored-up"));
    let pre_pull = json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2",
        "kind": "ImagePrePullJob",
        "metadata": {"name": ppj, "finalizers": ["kubeedge.io/imageprepulljob-controller"]},
        "spec": {"imagePrePullTemplate": {
            "images": [format!("{registry}/test:v1")],
            "nodeNames": [nodes[0]],
            "concurrency": 1,
            "timeoutSeconds": 180,
            "failureTolerate": "0.3",
        }},
    });
    let upgrade = json!({
        "apiVersion": "operations.kubeedge.io/v1alpha2",
        "kind": "NodeUpgradeJob",
        "metadata": {"name": nuj, "finalizers": ["kubeedge.io/nodeupgradejob-controller"]},
        "spec": {
            "version": "v1.21.0",
            "nodeNames": [nodes[0]],
            "imageDigestGatter": {"amd64": "sha256:1111111111111111111111111111111111111111111111111111111111111111"},
        },
    });
    let mut cleanup = Cleanup::default();
    for (kind, name) in [("imageprepulljob", &ppj), ("nodeupgradejob", &nuj)] {
        let (cc, n) = (c.clone(), name.clone());
        let resource = format!("{kind}s.operations.kubeedge.io");
        cleanup.defer(format!("delete {name}"), move || {
            let _ = cc.kubectl(
                &[
                    "patch",
                    &resource,
                    &n,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ],
                None,
            );
            let _ = cc.kubectl(&["delete", &resource, &n, "--ignore-not-found"], None);
        });
    }
    c.kubectl_ok(&["create", "-f", "-"], Some(&pre_pull.to_string()));
    c.kubectl_ok(&["create", "-f", "-"], Some(&upgrade.to_string()));
    let pre_pull_status = json!({"status": {
        "phase": "Completed",
        "nodeStatus": [{
            "nodeName": nodes[0],
            "phase": "Successful",
            "actionFlow": [
                {"action": "Check", "status": "True", "time": "2026-11-20T08:12:01Z"},
                {"action": "Pull", "status": "True", "time": "2026-11-20T08:12:05Z"},
            ],
            "imageStatus": [{"image": format!("{registry}/test:v1"), "status": "True"}],
        }],
    }});
    let upgrade_status = json!({"status": {
        "phase": "Completed",
        "nodeStatus": [{
            "nodeName": nodes[0],
            "phase": "Successful",
            "currentVersion": "v1.21.0",
            "historicVersion": "v1.20.0",
            "actionFlow": [
                {"action": "Check", "status": "True", "time": "2025-05-28T08:12:01Z"},
                {"action": "WaitingConfirmation", "status": "True", "time": "2025-05-28T08:12:01Z"},
                {"action": "BackUp", "status": "True", "time": "2025-05-28T08:12:01Z"},
                {"action": "Upgrade", "status": "True", "time": "2025-05-28T08:13:02Z"},
            ],
        }],
    }});
    for (resource, name, status) in [
        (
            "imageprepulljobs.operations.kubeedge.io",
            &ppj,
            &pre_pull_status,
        ),
        (
            "nodeupgradejobs.operations.kubeedge.io",
            &nuj,
            &upgrade_status,
        ),
    ] {
        c.kubectl_ok(
            &[
                "patch",
                resource,
                name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ],
            None,
        );
    }
    let stored = get(c, "crd", CRDS[0]);
    assert_eq!(stored["status"]["storedVersions"], json!(["v1alpha2"]));

    // Ours over theirs, with the documented command.
    if let Err(e) = apply_ours(c) {
        panic!("applying nodeimage's CRDs over KubeEdge's: {e}");
    }
    established(c);
    nodeimage(true);
    let ours = get(c, "crd", CRDS[0]);
    let versions: Vec<(&str, bool)> = ours["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["name"].as_str().unwrap_or_default(), v["storage"] == true))
        .collect();
    assert_eq!(versions, vec![("v1alpha1", false), ("v1alpha2", true)]);

    // The objects read on, in both versions.
    let v2 = get(c, "imageprepulljobs.v1alpha2.operations.kubeedge.io", &ppj);
    assert_eq!(v2["status"]["phase"], "Completed", "{v2}");
    assert_eq!(
        v2["status"]["nodeStatus"][0]["actionFlow"][1]["action"],
        "Pull"
    );
    let v1 = get(c, "imageprepulljobs.v1alpha1.operations.kubeedge.io", &ppj);
    assert_eq!(v1["spec"], v2["spec"]);
    let up = get(c, "nodeupgradejobs.v1alpha2.operations.kubeedge.io", &nuj);
    assert_eq!(up["status"]["nodeStatus"][0]["historicVersion"], "v1.20.0");
    assert_eq!(
        up["spec"]["imageDigestGatter"]["amd64"],
        "sha256:1111111111111111111111111111111111111111111111111111111111111111"
    );

    // nodeimage's controller takes them as finished: it records the
    // v1alpha1 state beside the phase and writes no entry.
    for (resource, name) in [
        ("imageprepulljobs.operations.kubeedge.io", &ppj),
        ("nodeupgradejobs.operations.kubeedge.io", &nuj),
    ] {
        let job = wait_for(&format!("nodeimage to read {name}"), WAIT, || {
            let j = get(c, resource, name);
            (j["status"]["state"] == "Successful").then_some(j)
        });
        assert_eq!(job["status"]["phase"], "Completed", "{job}");
        let uid = job["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ni = nodeimage_tests::nodeimage::get(c, &nodes[0]).unwrap_or_default();
        assert!(
            !ni.to_string().contains(&uid),
            "no entry for a job KubeEdge finished: {ni}"
        );
    }

    // Deleted, a job with KubeEdge's finalizer goes (nodeimage lets it go).
    for (resource, name) in [
        ("imageprepulljobs.operations.kubeedge.io", &ppj),
        ("nodeupgradejobs.operations.kubeedge.io", &nuj),
    ] {
        c.kubectl_ok(
            &["delete", resource, name, "--wait=true", "--timeout=60s"],
            None,
        );
    }
}

/// Starts or stops nodeimage (controller and daemons) with tests/nodeimage.sh.
fn nodeimage(start: bool) -> bool {
    let env = std::env::var("NODEIMAGE_ENV").unwrap_or_default();
    let state = std::path::Path::new(&env)
        .parent()
        .map(|p| p.to_path_buf())
        .unwrap_or_else(|| repo_root().join(".state"));
    let status = Command::new(repo_root().join("tests/nodeimage.sh"))
        .arg(if start { "start" } else { "stop" })
        .env("NODEIMAGE_STATE", state)
        .status();
    let ok = status.as_ref().is_ok_and(|s| s.success());
    assert!(ok || !start, "tests/nodeimage.sh start: {status:?}");
    ok
}

/// The cluster; when dropped (also on failure), nodeimage's CRDs are applied
/// again and nodeimage runs, so that later steps find them.
struct Restore(Cluster);

impl Drop for Restore {
    fn drop(&mut self) {
        if let Err(e) = apply_ours(&self.0) {
            eprintln!("restoring nodeimage's KubeEdge CRDs: {e}");
        }
        if !std::thread::panicking() {
            return;
        }
        let _ = std::panic::catch_unwind(|| nodeimage(true));
    }
}

fn cluster_with_ours_restored_at_end() -> Restore {
    Restore(Cluster::load())
}
