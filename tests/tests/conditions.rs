//! Standard conditions on the job kinds: `kubectl wait --for=condition=…`
//! works as it does for Kubernetes Jobs.

use nodeimage_tests::kruise::{self, TestNs};
use nodeimage_tests::{Cluster, unique};
use serde_json::json;

fn wait(c: &Cluster, what: &[&str], condition: &str) -> Result<(), String> {
    let mut args = vec!["wait", "--timeout=240s"];
    let cond = format!("--for=condition={condition}");
    args.push(&cond);
    args.extend_from_slice(what);
    let r = c.kubectl(&args, None);
    if r.success {
        Ok(())
    } else {
        Err(format!("kubectl {args:?}: {}{}", r.stdout, r.stderr))
    }
}

#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn kubectl_wait_for_complete_and_failed() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-conditions");
    let reg = c.var("NODEIMAGE_REGISTRY");
    let node = c.nodes()[0].clone();
    for (name, image, backoff) in [
        ("ok", format!("{reg}/test:v1"), 3),
        ("broken", format!("{reg}/test:no-such-tag"), 0),
    ] {
        kruise::create(
            &c,
            &json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
                "metadata": {"name": name, "namespace": ns.name},
                "spec": {"image": image, "selector": {"names": [node]},
                         "pullPolicy": {"backoffLimit": backoff},
                         "completionPolicy": {"type": "Always"}}}),
        );
    }
    // What the README and the chart's NOTES give: a wait that ends when the
    // job finishes either way (Progressing=False), then the verdict.
    for (name, verdict) in [("ok", "Complete"), ("broken", "Failed")] {
        let what = format!("imagepulljob/{name}");
        wait(&c, &["-n", &ns.name, &what], "Progressing=False")
            .unwrap_or_else(|e| panic!("{name} finishes: {e}"));
        let r = c.kubectl(
            &[
                "get",
                "-n",
                &ns.name,
                &what,
                "-o",
                "jsonpath={.status.conditions[?(@.status==\"True\")].type}",
            ],
            None,
        );
        assert_eq!(r.stdout.trim(), verdict, "{name}: {}", r.stderr);
    }
    wait(&c, &["-n", &ns.name, "imagepulljob/ok"], "Complete").expect("ok completes");
    wait(&c, &["-n", &ns.name, "imagepulljob/broken"], "Failed").expect("broken fails");
    let ok = kruise::get(&c, "imagepulljobs.apps.kruise.io", Some(&ns.name), "ok").expect("ok");
    let conds = ok["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let by = |t: &str| {
        conds
            .iter()
            .find(|x| x["type"] == t)
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(by("Complete")["status"], "True", "{conds:?}");
    assert_eq!(by("Failed")["status"], "False", "{conds:?}");
    assert_eq!(by("Progressing")["status"], "False", "{conds:?}");
    assert_eq!(
        by("Complete")["observedGeneration"],
        ok["metadata"]["generation"]
    );

    // A KubeEdge job too.
    let prepull = unique("e2e-conditions");
    kruise::create(
        &c,
        &json!({"apiVersion": "operations.kubeedge.io/v1alpha1", "kind": "ImagePrePullJob",
            "metadata": {"name": prepull},
            "spec": {"imagePrePullTemplate": {"images": [format!("{reg}/test:v2")],
                     "nodeNames": [node], "checkItems": []}}}),
    );
    let res = wait(&c, &[&format!("imageprepulljob/{prepull}")], "Complete");
    let _ = c.kubectl(
        &["delete", "imageprepulljob", &prepull, "--wait=false"],
        None,
    );
    res.expect("the ImagePrePullJob completes");
}
