//! Pre-download on the simulated nodes, driven by Pods written through the
//! API (bound with `nodeName`; no kubelet runs them), so that each step is
//! one Pod change and the test sees what that change alone wakes. The real
//! kubelet nodes' pre-download tests (tests/tests/real_kubelet.rs) cover a
//! real rollout, with a scheduler and images that run.

use nodeimage_api::predownload::{ENABLED, WORKLOAD_UID_LABEL};
use nodeimage_tests::kruise::{self, TestNs};
use nodeimage_tests::{Cluster, random_suffix};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The controller looks at a workload with jobs again every two minutes
/// (`predownload::RECHECK`), and never at one without jobs or pending
/// images: a change seen within this bound came from the Pod's event.
const WOKEN_WITHIN: Duration = Duration::from_secs(30);

/// A Pod of the workload (`app`), running `image`, bound to `node`.
fn pod(ns: &str, name: &str, app: &str, image: &str, node: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": image}]},
    })
}

/// Deployment `web` of `app` in `ns`, annotated with `annotations`, no
/// replicas, its template on `image` and fitting no node (the job's nodes
/// are those of the Pods alone); returns its uid.
fn deployment(c: &Cluster, ns: &str, app: &str, image: &str, annotations: Value) -> String {
    let deploy = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns, "annotations": annotations},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": app}},
            "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {
                    "nodeSelector": {"nodeimage.test/none": "x"},
                    "containers": [{"name": "c", "image": image}],
                },
            },
        },
    });
    kruise::create(c, &deploy);
    kruise::get(c, "deployments.apps", Some(ns), "web")
        .and_then(|d| d["metadata"]["uid"].as_str().map(str::to_string))
        .expect("the Deployment exists")
}

/// The workload's pre-download jobs.
fn jobs_of(c: &Cluster, ns: &str, uid: &str) -> Vec<Value> {
    let selector = format!("{WORKLOAD_UID_LABEL}={uid}");
    kruise::list(
        c,
        "imagepulljobs.apps.kruise.io",
        Some(ns),
        &["-l", &selector],
    )
    .into_iter()
    .filter(|j| j["metadata"]["deletionTimestamp"].is_null())
    .collect()
}

/// A Deployment annotated for pre-download with no Pod yet has nothing to
/// pre-download and is not looked at again. A Pod of it that appears
/// without the template's image (its old one) wakes it: the job is made at
/// once and pulls onto that Pod's node. When that Pod is replaced by one
/// running the template's image (the rollout is over), the job goes at
/// once, not at the next periodic look.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_pod_change_wakes_predownload_at_once() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-predownload-pods");
    let nodes = c.nodes();
    let new = kruise::push_unique(&kruise::registry(&c), "predownload-new", 4096);
    let old = format!("{}/test:v1", c.var("NODEIMAGE_REGISTRY"));
    let app = format!("web-{}", random_suffix());
    // No node carries this label: the template fits no node, so the job's
    // nodes are those of the Pods alone (no extra nodes to land on).
    let uid = deployment(
        &c,
        &ns.name,
        &app,
        &new.reference(),
        json!({ENABLED: "true"}),
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        jobs_of(&c, &ns.name, &uid).is_empty(),
        "no Pod lacks the image yet: no job"
    );

    let started = Instant::now();
    kruise::create(&c, &pod(&ns.name, "web-old", &app, &old, &nodes[0]));
    let job = kruise::eventually("the pre-download job", WOKEN_WITHIN, || {
        jobs_of(&c, &ns.name, &uid)
            .into_iter()
            .next()
            .ok_or_else(|| "no job yet".to_string())
    });
    let made_after = started.elapsed();
    assert_eq!(job["spec"]["image"], json!(new.reference()), "{job}");
    kruise::eventually("the entry on the Pod's node", WOKEN_WITHIN, || {
        let all = kruise::nodeimages(&c);
        let on =
            |n: &str| kruise::find(&all, n).is_some_and(|ni| kruise::image_in_spec(ni, &new.name));
        match (on(&nodes[0]), nodes[1..].iter().any(|n| on(n))) {
            (true, false) => Ok(()),
            other => Err(format!("(Pod's node, others) = {other:?}")),
        }
    });

    let started = Instant::now();
    // No kubelet finishes a graceful deletion on a simulated node.
    c.kubectl_ok(
        &[
            "delete",
            "pod",
            "web-old",
            "-n",
            &ns.name,
            "--grace-period=0",
            "--force",
        ],
        None,
    );
    kruise::create(
        &c,
        &pod(&ns.name, "web-new", &app, &new.reference(), &nodes[0]),
    );
    kruise::eventually("the job deleted", WOKEN_WITHIN, || {
        match jobs_of(&c, &ns.name, &uid).len() {
            0 => Ok(()),
            n => Err(format!("{n} jobs left")),
        }
    });
    eprintln!(
        "job made {:.1}s after the Pod, deleted {:.1}s after the rollout ended",
        made_after.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

/// A workload's P2P annotations go with its pre-download jobs, and edits of
/// them reach a live job: added, changed, removed (issue 52).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_workloads_p2p_annotations_follow_onto_its_live_job() {
    use nodeimage_api::p2p::{FAN_OUT, SEEDS};
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-predownload-p2p");
    let nodes = c.nodes();
    let new = kruise::push_unique(&kruise::registry(&c), "predownload-p2p", 4096);
    let old = format!("{}/test:v1", c.var("NODEIMAGE_REGISTRY"));
    let app = format!("web-{}", random_suffix());
    let annotations = json!({ENABLED: "true", SEEDS: "1"});
    let uid = deployment(&c, &ns.name, &app, &new.reference(), annotations);
    kruise::create(&c, &pod(&ns.name, "web-old", &app, &old, &nodes[0]));
    // The job's P2P annotations, once they are `want` (None: absent).
    let job_has = |what: &str, want: &[(&str, Option<&str>)]| {
        kruise::eventually(what, WOKEN_WITHIN, || {
            let job = jobs_of(&c, &ns.name, &uid)
                .into_iter()
                .next()
                .ok_or_else(|| "no job yet".to_string())?;
            let a = &job["metadata"]["annotations"];
            let got: Vec<(&str, Option<&str>)> =
                want.iter().map(|(k, _)| (*k, a[*k].as_str())).collect();
            (got == want)
                .then_some(())
                .ok_or_else(|| format!("annotations {a}"))
        })
    };
    job_has(
        "the job made with the seeds",
        &[(SEEDS, Some("1")), (FAN_OUT, None)],
    );
    let annotate = |args: &[&str]| {
        let mut all = vec![
            "annotate",
            "deployment",
            "web",
            "-n",
            &ns.name,
            "--overwrite",
        ];
        all.extend_from_slice(args);
        c.kubectl_ok(&all, None);
    };
    let (two, three) = (format!("{SEEDS}=2"), format!("{FAN_OUT}=3"));
    annotate(&[&two, &three]);
    job_has(
        "the edits on the live job",
        &[(SEEDS, Some("2")), (FAN_OUT, Some("3"))],
    );
    let gone = format!("{SEEDS}-");
    annotate(&[&gone]);
    job_has(
        "the removed one gone",
        &[(SEEDS, None), (FAN_OUT, Some("3"))],
    );
}
