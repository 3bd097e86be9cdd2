//! docs/migration.md, the OpenKruise half, step by step on the local cluster
//! (nodeimage already running, as after the guide's install step): jobs
//! OpenKruise created (its `apps.kruise.io/deletion-protection` finalizer,
//! its status) are taken over and finish, a NodeImage entry OpenKruise's
//! daemon had pulled is kept and served, and deleting such jobs works (no
//! job stays Terminating). The KubeEdge half (CRD ownership, stored
//! v1alpha2 objects, KubeEdge's finalizer) is tests/tests/kubeedge_crds.rs;
//! the chart's refusal to install over another controller's CRDs is in
//! tests/chart.sh.

use nodeimage_tests::kruise::{self, IPJ, TestNs};
use nodeimage_tests::{Cleanup, Cluster, prepull, unique, wait_for};
use serde_json::{Value, json};
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(180);
const KRUISE_FINALIZER: &str = "apps.kruise.io/deletion-protection";

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn openkruise_jobs_are_taken_over_and_can_be_deleted() {
    let c = Cluster::load();
    let nodes = c.nodes();
    let ns = TestNs::create(&c, "e2e-migrate");
    let image = prepull::unique_image(&c, "migrate");
    let mut cleanup = Cleanup::default();
    let (s, i) = (
        (0..nodes.len()).map(|i| c.socket(i)).collect::<Vec<_>>(),
        image.clone(),
    );
    cleanup.defer("remove the image", move || {
        prepull::remove_from_nodes(&s, &i)
    });

    // A job as OpenKruise left it: its finalizer, and a running status.
    let name = "made-by-kruise";
    let job = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": ns.name, "finalizers": [KRUISE_FINALIZER]},
        "spec": {
            "image": image,
            "selector": {"names": [nodes[0], nodes[1]]},
            "parallelism": 0,
            "completionPolicy": {"type": "Always"},
        },
    });
    // Paused (parallelism 0) until OpenKruise's status is in place: nodeimage
    // must not finish the job before the takeover is set up.
    kruise::create(&c, &job);
    let _ = c.kubectl(
        &[
            "patch",
            IPJ,
            name,
            "-n",
            &ns.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"desired":2,"active":2,"message":"job is running, progress 0.0%"}}"#,
        ],
        None,
    );
    c.kubectl_ok(
        &[
            "patch",
            IPJ,
            name,
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            r#"{"spec":{"parallelism":2}}"#,
        ],
        None,
    );
    // Step "what happens to running jobs": nodeimage finishes them.
    let done = wait_for("the taken-over job to complete", WAIT, || {
        let j = kruise::get(&c, IPJ, Some(&ns.name), name)?;
        kruise::completed(&j).then_some(j)
    });
    assert_eq!(
        str_of(&done["status"]["message"]),
        "job has completed",
        "{done}"
    );
    assert_eq!(done["status"]["succeeded"], 2, "{}", done["status"]);
    // As OpenKruise does at completion: its finalizer goes (nodeimage's
    // own stays until the job is deleted).
    let done = wait_for("OpenKruise's finalizer to go at completion", WAIT, || {
        let j = kruise::get(&c, IPJ, Some(&ns.name), name)?;
        let fins: Vec<&str> = j["metadata"]["finalizers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        (!fins.contains(&KRUISE_FINALIZER)).then_some(j.clone())
    });
    let uid = str_of(&done["metadata"]["uid"]).to_string();
    assert!(!nodeimage_tests::nodeimage::entries_owned_by(&c, &nodes[0], &uid).is_empty());

    // Step "deleting jobs OpenKruise created": the delete completes, the
    // entries go.
    c.kubectl_ok(
        &[
            "delete",
            IPJ,
            name,
            "-n",
            &ns.name,
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    );
    assert!(kruise::get(&c, IPJ, Some(&ns.name), name).is_none());
    wait_for("the job's entries to be released", WAIT, || {
        (nodeimage_tests::nodeimage::entries_owned_by(&c, &nodes[0], &uid).len()
            + nodeimage_tests::nodeimage::entries_owned_by(&c, &nodes[1], &uid).len()
            == 0)
            .then_some(())
    });

    // A job deleted while it still waits (never started here: parallelism
    // 0) also goes.
    let waiting = "kruise-paused";
    let mut paused = job.clone();
    paused["metadata"]["name"] = json!(waiting);
    kruise::create(&c, &paused);
    std::thread::sleep(Duration::from_secs(2));
    c.kubectl_ok(
        &[
            "delete",
            IPJ,
            waiting,
            "-n",
            &ns.name,
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    );

    // Step "NodeImages": an entry OpenKruise wrote by hand (no owner), with
    // the status its daemon left, is kept and served by nodeimage's daemon.
    let node = &nodes[2];
    let repo = image
        .rsplit_once(':')
        .map(|(r, _)| r)
        .unwrap_or(&image)
        .to_string();
    let tag = unique("kept");
    prepull::copy_image(&image, &format!("{repo}:{tag}"), None);
    let (s, i) = (vec![c.node_socket(node)], format!("{repo}:{tag}"));
    cleanup.defer("remove the kept tag", move || {
        prepull::remove_from_nodes(&s, &i)
    });
    let patch = json!({"spec": {"images": {repo.clone(): {"tags": [{"tag": tag, "version": 0}]}}}});
    c.kubectl_ok(
        &[
            "patch",
            "nodeimage",
            node,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    );
    let (rc, cc, n) = (repo.clone(), c.clone(), node.clone());
    cleanup.defer("drop the kept entry", move || {
        let p = json!({"spec": {"images": {rc: null}}});
        let _ = cc.kubectl(
            &[
                "patch",
                "nodeimage",
                &n,
                "--type=merge",
                "-p",
                &p.to_string(),
            ],
            None,
        );
    });
    wait_for("the kept entry to be pulled on the node", WAIT, || {
        let ni = nodeimage_tests::nodeimage::get(&c, node)?;
        let st = kruise::status_tag(&ni, &repo, &tag)?;
        (st["phase"] == "Succeeded").then_some(())
    });
    drop(ns);
}

/// A job OpenKruise was running with `pullSecrets` (docs/migration.md,
/// "What happens to existing objects"): its NodeImage entry names
/// OpenKruise's copy of the secret in kruise-daemon-config, which
/// nodeimage's daemon does not read. When nodeimage's controller adds its
/// own copy to the entry it gives the tag a new version (docs/api.md,
/// "Credentials"), so a node that pulled (or is pulling) without it pulls
/// again with it, and the job succeeds. Without the bump a node that had
/// started before the copy was added fails with 401, as a real
/// kruise-manager migration showed (here the controller is usually first,
/// so the unit test in controller/src/nodeimage/entries/tests.rs is the one that
/// fails without the rule).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn an_openkruise_job_with_pull_secrets_is_pulled_again_with_nodeimages_copy() {
    let c = Cluster::load();
    let node = c.nodes()[0].clone();
    let ns = TestNs::create(&c, "e2e-migrate-secret");
    let reg = kruise::auth_registry(&c);
    let pushed = kruise::push_unique(&reg, "migrate-secret", 64 << 10);
    let image = format!("{}:v1", pushed.name);
    let payload = kruise::docker_config_json(
        &[c.var("NODEIMAGE_AUTH_REGISTRY").as_str()],
        &c.var("NODEIMAGE_AUTH_USER"),
        &c.var("NODEIMAGE_AUTH_PASSWORD"),
    );
    kruise::put_secret(
        &c,
        &ns.name,
        "regcred",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &payload,
        false,
    );
    let mut cleanup = Cleanup::default();
    let (s, i) = (vec![c.socket(0)], pushed.name.clone());
    cleanup.defer("remove the image", move || {
        prepull::remove_from_nodes(&s, &i)
    });

    // The job, paused so that nodeimage writes nothing before OpenKruise's
    // entry is in place.
    let name = "kruise-with-secret";
    kruise::create(
        &c,
        &json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "metadata": {"name": name, "namespace": ns.name},
            "spec": {
                "image": image,
                "pullSecrets": ["regcred"],
                "selector": {"names": [node]},
                "parallelism": 0,
                "completionPolicy": {"type": "Always"},
            },
        }),
    );
    let (c2, ns2) = (c.clone(), ns.name.clone());
    cleanup.defer("delete the job", move || {
        let _ = c2.kubectl(
            &[
                "delete",
                IPJ,
                name,
                "-n",
                &ns2,
                "--ignore-not-found",
                "--timeout=60s",
            ],
            None,
        );
    });
    let job = kruise::get(&c, IPJ, Some(&ns.name), name).expect("the job exists");
    let uid = str_of(&job["metadata"]["uid"]).to_string();

    // OpenKruise's entry: the job as owner, OpenKruise's secret copy.
    let (repo, tag) = (pushed.name.clone(), "v1");
    nodeimage_tests::nodeimage::set_image(
        &c,
        &node,
        &repo,
        json!({
            "pullSecrets": [{"namespace": "kruise-daemon-config", "name": format!("regcred-{uid}")}],
            "tags": [{
                "tag": tag,
                "version": 1,
                "ownerReferences": [{
                    "apiVersion": "apps.kruise.io/v1alpha1",
                    "kind": "ImagePullJob",
                    "namespace": ns.name,
                    "name": name,
                    "uid": uid,
                }],
            }],
        }),
    );
    let (rc, cc, n) = (repo.clone(), c.clone(), node.clone());
    cleanup.defer("drop the entry", move || {
        nodeimage_tests::nodeimage::remove_images(&cc, &n, &[rc])
    });
    // nodeimage takes the job on: its copy joins the entry, with a new
    // version (the paused job's node already has an entry: it is adopted).
    c.kubectl_ok(
        &[
            "patch",
            IPJ,
            name,
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            r#"{"spec":{"parallelism":1}}"#,
        ],
        None,
    );
    wait_for(
        "nodeimage's copy on the entry, with version 2",
        WAIT,
        || {
            let ni = nodeimage_tests::nodeimage::get(&c, &node)?;
            let spec = nodeimage_tests::nodeimage::spec_tag(&ni, &repo, tag)?;
            let secrets = ni["spec"]["images"][&repo]["pullSecrets"].as_array()?.len();
            (spec["version"] == 2 && secrets == 2).then_some(())
        },
    );
    let done = kruise::wait_job(
        &c,
        IPJ,
        &ns.name,
        name,
        "completed",
        WAIT,
        kruise::completed,
    );
    assert_eq!(
        (
            kruise::count(&done, "succeeded"),
            kruise::count(&done, "failed")
        ),
        (1, 0),
        "{}",
        kruise::describe(&done)
    );
    drop(cleanup);
    drop(ns);
}
