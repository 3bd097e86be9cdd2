//! ImagePrePullJob end to end, on the local cluster with the shared
//! controller and daemons: the KubeEdge pre-pull guide step by step, the
//! concurrency budget, node checks against the failure tolerance, retries,
//! node timeouts, nodes that do not exist or are not ready, and image
//! secrets.
//!
//! Tests that need more nodes than the cluster's, or nodes that misbehave,
//! create their own Node objects (the controller mirrors their NodeImages)
//! served by test-owned daemons on the cluster's containerds. Images that
//! must be absent are copies of `test:v1` under unique names. Every job,
//! Node, secret, daemon and image a test makes is removed at its end.

use nodeimage_tests::prepull::{
    self, Job, NodeImagesWatch, TestNode, concurrency_over_time, node_entry, node_names,
    working_for,
};
use nodeimage_tests::{Cleanup, Cluster, RuntimeNode, cri, unique, wait_for};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// Longest wait for a job to finish: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(240);

/// The cluster, with nodeimage (CRDs, controller, daemons) as
/// `tests/nodeimage.sh start` installed it.
fn cluster() -> Cluster {
    Cluster::load()
}

fn sockets(c: &Cluster) -> Vec<PathBuf> {
    (0..c.nodes().len()).map(|i| c.socket(i)).collect()
}

/// A job manifest with `template` lines (YAML, indented under imagePrePullTemplate).
fn manifest(name: &str, template: &str) -> String {
    let body: String = template
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| format!("    {l}\n"))
        .collect();
    format!(
        "apiVersion: operations.kubeedge.io/v1alpha1\nkind: ImagePrePullJob\nmetadata:\n  name: {name}\nspec:\n  imagePrePullTemplate:\n{body}"
    )
}

fn yaml_list(items: &[String]) -> String {
    items.iter().map(|i| format!("  - {i}\n")).collect()
}

fn uid(job: &Job) -> String {
    job.get()["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn the_kubeedge_guide_step_by_step() {
    let c = cluster();
    let nodes = c.nodes();
    let socks = sockets(&c);
    let (registry, auth) = (
        c.var("NODEIMAGE_REGISTRY"),
        c.var("NODEIMAGE_AUTH_REGISTRY"),
    );
    let (user, password) = (
        c.var("NODEIMAGE_AUTH_USER"),
        c.var("NODEIMAGE_AUTH_PASSWORD"),
    );
    let mut cleanup = Cleanup::default();

    // 2.1) The image in the private registry.
    let image = format!("{auth}/{}:nginx", unique("ppj-guide"));
    prepull::copy_image(
        &format!("{registry}/test:v1"),
        &image,
        Some((&user, &password)),
    );
    let (s, i) = (socks.clone(), image.clone());
    cleanup.defer("remove the image from the nodes", move || {
        prepull::remove_from_nodes(&s, &i)
    });
    for s in &socks {
        assert_eq!(cri::image_status(s, &image), Ok(None), "{image} is new");
    }

    // 2.2) kubectl create secret docker-registry.
    let secret = unique("my-secret");
    c.kubectl_ok(
        &[
            "create",
            "secret",
            "docker-registry",
            &secret,
            "--namespace=default",
            &format!("--docker-server={auth}"),
            &format!("--docker-username={user}"),
            &format!("--docker-password={password}"),
            "--docker-email=tiger@acme.example",
        ],
        None,
    );
    let (c2, s2) = (c.clone(), secret.clone());
    cleanup.defer("delete the secret", move || {
        c2.kubectl(
            &[
                "delete",
                "secret",
                &s2,
                "-n",
                "default",
                "--ignore-not-found",
            ],
            None,
        );
    });

    // 3.1, 3.2) The guide's manifest with local image and node names; apply.
    let name = unique("imageprepull-example");
    let m = manifest(
        &name,
        &format!(
            "concurrency: 1\nfailureTolerate: '0.1'\nimages:\n{}nodeNames:\n{}imageSecrets: default/{secret}\nretryTimes: 1\ntimeoutSeconds: 120\n",
            yaml_list(std::slice::from_ref(&image)),
            yaml_list(&nodes),
        ),
    );
    let job = Job::apply(&c, &name, &m);
    job.wait_finished(WAIT);

    // 3.3) kubectl get … -o jsonpath='{.status}'.
    let status = job.status_jsonpath();
    assert_eq!(
        (
            str_of(&status["state"]),
            str_of(&status["event"]),
            str_of(&status["action"])
        ),
        ("Successful", "Pull", "Success"),
        "{status}"
    );
    assert!(
        chrono_like(str_of(&status["time"])),
        "time is RFC 3339: {status}"
    );
    assert_eq!(
        node_names(&status),
        nodes,
        "one entry per named node, in order"
    );
    for n in &nodes {
        let (ns, images) = node_entry(&status, n);
        assert_eq!(
            (
                str_of(&ns["state"]),
                str_of(&ns["event"]),
                str_of(&ns["action"])
            ),
            ("Successful", "Pull", "Success"),
            "{n}: {ns}"
        );
        assert!(chrono_like(str_of(&ns["time"])), "{n}: {ns}");
        assert_eq!(
            images,
            vec![serde_json::json!({"image": image, "state": "Successful"})],
            "{n}"
        );
    }

    // 4) The image is in each named node's containerd (CRI, namespace k8s.io).
    for (n, s) in nodes.iter().zip(&socks) {
        let out = Command::new(c.var("NODEIMAGE_CRI"))
            .arg("--socket")
            .arg(s)
            .args(["status", &image])
            .output()
            .expect("run ni-cri");
        assert!(
            out.status.success(),
            "{image} is not on {n}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // Events, and the secret copy released once the job finished.
    let events = job.events();
    for reason in ["Started", "Finished"] {
        assert!(
            events.iter().any(|(r, _)| r == reason),
            "no {reason} event: {events:?}"
        );
    }
    let job_ref = format!("ImagePrePullJob//{name}");
    wait_for(
        "the secret copy to be released",
        Duration::from_secs(60),
        || {
            let out = c.kubectl_ok(
                &[
                    "get",
                    "secrets",
                    "-n",
                    "nodeimage-secrets",
                    "-l",
                    "nodeimage.dev/pull-secret-copy=true",
                    "-o",
                    "json",
                ],
                None,
            );
            let list: Value = serde_json::from_str(&out).ok()?;
            let used = list["items"].as_array().into_iter().flatten().any(|s| {
                s["metadata"]["annotations"]["nodeimage.dev/references"]
                    .as_str()
                    .is_some_and(|r| r.split(',').any(|x| x == job_ref))
            });
            (!used).then_some(())
        },
    );

    // Deleting the job takes its entries out of the NodeImages.
    let uid = uid(&job);
    job.delete();
    for n in &nodes {
        wait_for(
            &format!("{n}'s NodeImage to lose the job's entries"),
            Duration::from_secs(60),
            || {
                let ni = nodeimage_tests::nodeimage::get(&c, n)?;
                let owned = ni["spec"]["images"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .flat_map(|(_, i)| i["tags"].as_array().cloned().unwrap_or_default())
                    .any(|t| {
                        t["ownerReferences"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|o| o["uid"] == uid.as_str())
                    });
                (!owned).then_some(())
            },
        );
    }
}

/// Whether `s` looks like `2024-04-26T18:51:41Z`.
fn chrono_like(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 20 && b[4] == b'-' && b[10] == b'T' && b[19] == b'Z'
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn label_selector_with_concurrency_one_never_runs_two_nodes_at_once() {
    let c = cluster();
    let socks = sockets(&c);
    let key = "nodeimage.dev/ppj-concurrency";
    let value = unique("c");
    let mut test_nodes: Vec<TestNode> = (0..3)
        .map(|_| TestNode::create(&c, "ppj-conc", &labels(&[(key, &value)])))
        .collect();
    for (i, n) in test_nodes.iter_mut().enumerate() {
        n.start_daemon(&socks[i % socks.len()], &[]);
    }
    let image = prepull::unique_image(&c, "ppj-conc");
    let mut cleanup = Cleanup::default();
    let (s, i) = (socks.clone(), image.clone());
    cleanup.defer("remove the image", move || {
        prepull::remove_from_nodes(&s, &i)
    });

    let watch = NodeImagesWatch::start(&c, &format!("{key}={value}"));
    wait_for(
        "the watch to list the test nodes",
        Duration::from_secs(30),
        || (watch.seen().len() >= 3).then_some(()),
    );
    let name = unique("ppj-conc");
    let job = Job::apply(
        &c,
        &name,
        &manifest(
            &name,
            &format!(
                "images:\n{}labelSelector:\n  matchLabels:\n    {key}: {value}\nconcurrency: 1\nfailureTolerate: '0'\n",
                yaml_list(std::slice::from_ref(&image))
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    assert_eq!(str_of(&status["state"]), "Successful", "{status}");
    let mut want: Vec<String> = test_nodes.iter().map(|n| n.name.clone()).collect();
    want.sort();
    assert_eq!(node_names(&status), want, "the selected nodes, sorted");

    // Replay every NodeImage version in the API server's order.
    let uid = uid(&job);
    let versions = wait_for(
        "the watch to see every node finish",
        Duration::from_secs(30),
        || {
            let seen = watch.seen();
            let mut latest: BTreeMap<String, &Value> = BTreeMap::new();
            for v in &seen {
                latest.insert(str_of(&v["metadata"]["name"]).to_string(), v);
            }
            let done = want.iter().all(|n| {
                latest.get(n).is_some_and(|ni| {
                    !working_for(ni, &uid)
                        && ni["spec"]["images"]
                            .as_object()
                            .is_some_and(|m| !m.is_empty())
                })
            });
            done.then_some(seen)
        },
    );
    let counts = concurrency_over_time(&versions, &uid);
    eprintln!("nodes working after each NodeImage version: {counts:?}");
    assert_eq!(
        counts.iter().max(),
        Some(&1),
        "nodes working at once, after each of {} NodeImage versions: {counts:?}",
        versions.len()
    );
    let worked: BTreeSet<String> = versions
        .iter()
        .filter(|v| working_for(v, &uid))
        .map(|v| str_of(&v["metadata"]["name"]).to_string())
        .collect();
    assert_eq!(worked.len(), 3, "every node worked in turn: {worked:?}");
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_failed_disk_check_against_the_failure_tolerance() {
    let c = cluster();
    let socks = sockets(&c);
    let key = "nodeimage.dev/ppj-check";
    let value = unique("c");
    let mut test_nodes: Vec<TestNode> = (0..3)
        .map(|_| TestNode::create(&c, "ppj-check", &labels(&[(key, &value)])))
        .collect();
    for (i, n) in test_nodes.iter_mut().enumerate() {
        // The last node's disk is "full": any usage above 1 % fails.
        let extra: &[&str] = if i == 2 {
            &["--disk-threshold-percent", "1"]
        } else {
            &[]
        };
        n.start_daemon(&socks[i % socks.len()], extra);
    }
    let full = test_nodes[2].name.clone();
    let image = prepull::unique_image(&c, "ppj-check");
    let mut cleanup = Cleanup::default();
    let (s, i) = (socks.clone(), image.clone());
    cleanup.defer("remove the image", move || {
        prepull::remove_from_nodes(&s, &i)
    });

    let run = |tolerate: &str| {
        let name = unique("ppj-check");
        let job = Job::apply(
            &c,
            &name,
            &manifest(
                &name,
                &format!(
                    "images:\n{}labelSelector:\n  matchLabels:\n    {key}: {value}\ncheckItems:\n  - disk\nconcurrency: 3\nfailureTolerate: '{tolerate}'\n",
                    yaml_list(std::slice::from_ref(&image))
                ),
            ),
        );
        let status = job.wait_finished(WAIT);
        (job, status)
    };

    // "0.5": one failure of three is tolerated.
    let (job, status) = run("0.5");
    assert_eq!(
        (str_of(&status["state"]), str_of(&status["reason"])),
        (
            "Successful",
            "1 of 3 nodes failed (33.3%), below failureTolerate 0.5"
        ),
        "{status}"
    );
    let (ns, images) = node_entry(&status, &full);
    assert_eq!(
        (
            str_of(&ns["state"]),
            str_of(&ns["event"]),
            str_of(&ns["action"])
        ),
        ("Failed", "Check", "Failure"),
        "{ns}"
    );
    let reason = str_of(&ns["reason"]);
    assert!(
        reason.starts_with("check disk failed: ") && reason.ends_with("% used > 1%"),
        "the check's reason: {ns}"
    );
    assert_eq!(str_of(&images[0]["state"]), "Failed", "{images:?}");
    assert_eq!(str_of(&images[0]["reason"]), reason, "{images:?}");
    for n in test_nodes.iter().filter(|n| n.name != full) {
        assert_eq!(
            str_of(&node_entry(&status, &n.name).0["state"]),
            "Successful"
        );
    }
    let events = job.events();
    assert!(
        events.iter().any(|(r, m)| r == "NodeFailed"
            && m.contains(&full)
            && m.contains("check disk failed")),
        "NodeFailed event: {events:?}"
    );
    drop(job);

    // "0.1": the same failure fails the job, with the ratio.
    let (_job, status) = run("0.1");
    assert_eq!(
        (
            str_of(&status["state"]),
            str_of(&status["event"]),
            str_of(&status["action"]),
            str_of(&status["reason"])
        ),
        (
            "Failed",
            "Check",
            "Failure",
            "1 of 3 nodes failed (33.3%), reaching failureTolerate 0.1"
        ),
        "{status}"
    );
}

/// The disk check reads the image filesystem of every runtime (CRI
/// ImageFsInfo, then its usage): a test node on each node's containerd
/// (containerd 1.6, 1.7 with layer discard, 2.x), each with a 1 % threshold,
/// fails the check with `check disk failed: N% used > 1%`, and none pulls
/// the image. A failure names the node's runtime.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_disk_check_over_its_threshold_fails_on_every_runtime() {
    let c = cluster();
    let key = "nodeimage.dev/ppj-disk";
    let value = unique("d");
    let runtimes = c.runtime_nodes();
    let test_nodes: Vec<(RuntimeNode, TestNode)> = runtimes
        .into_iter()
        .map(|n| {
            let mut t = TestNode::create(&c, "ppj-disk", &labels(&[(key, &value)]));
            t.start_daemon(&n.socket, &["--disk-threshold-percent", "1"]);
            (n, t)
        })
        .collect();
    let image = prepull::unique_image(&c, "ppj-disk");
    let socks = sockets(&c);
    let mut cleanup = Cleanup::default();
    let (s, i) = (socks.clone(), image.clone());
    cleanup.defer("remove the image", move || {
        prepull::remove_from_nodes(&s, &i)
    });

    let name = unique("ppj-disk");
    let job = Job::apply(
        &c,
        &name,
        &manifest(
            &name,
            &format!(
                "images:\n{}labelSelector:\n  matchLabels:\n    {key}: {value}\ncheckItems:\n  - disk\nconcurrency: 3\nfailureTolerate: '0.5'\n",
                yaml_list(std::slice::from_ref(&image))
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    assert_eq!(str_of(&status["state"]), "Failed", "{status}");
    for (n, t) in &test_nodes {
        let label = n.label();
        let (ns, images) = node_entry(&status, &t.name);
        assert_eq!(
            (
                str_of(&ns["state"]),
                str_of(&ns["event"]),
                str_of(&ns["action"])
            ),
            ("Failed", "Check", "Failure"),
            "{label} (test node {}): {ns}",
            t.name
        );
        let reason = str_of(&ns["reason"]);
        assert!(
            reason.starts_with("check disk failed: ") && reason.ends_with("% used > 1%"),
            "{label}: the check measured the image filesystem: {ns}"
        );
        assert_eq!(str_of(&images[0]["reason"]), reason, "{label}: {images:?}");
        let held = cri::image_status(&n.socket, &image)
            .unwrap_or_else(|e| panic!("{label}: CRI ImageStatus: {e}"));
        assert!(
            held.is_none(),
            "{label}: a failed check pulls nothing, yet {image} is on the node"
        );
    }
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_missing_image_is_tried_retry_times_plus_one_then_fails() {
    let c = cluster();
    let node = c.nodes()[0].clone();
    let repo = unique("ppj-missing");
    let image = format!("{}/{repo}:v1", c.var("NODEIMAGE_REGISTRY"));
    let name = unique("ppj-missing");
    let job = Job::apply(
        &c,
        &name,
        &manifest(
            &name,
            &format!(
                "images:\n{}nodeNames:\n  - {node}\nretryTimes: 2\ntimeoutSeconds: 120\n",
                yaml_list(std::slice::from_ref(&image))
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    assert_eq!(
        (str_of(&status["state"]), str_of(&status["reason"])),
        (
            "Failed",
            "1 of 1 nodes failed (100.0%), reaching failureTolerate 0.1"
        ),
        "{status}"
    );
    let (ns, images) = node_entry(&status, &node);
    assert_eq!(
        (
            str_of(&ns["state"]),
            str_of(&ns["event"]),
            str_of(&ns["action"])
        ),
        ("Failed", "Pull", "Failure"),
        "{ns}"
    );
    let reason = str_of(&ns["reason"]);
    assert!(
        reason.starts_with("pull failed after 3 attempts: ") && reason.contains("not found"),
        "three attempts and the registry's reason: {reason}"
    );
    assert_eq!(
        (str_of(&images[0]["image"]), str_of(&images[0]["state"])),
        (image.as_str(), "Failed")
    );
    // The registry saw at least three manifest requests for it.
    let registry = c.var("NODEIMAGE_REGISTRY");
    let port = registry.rsplit(':').next().unwrap_or("5000");
    let log = PathBuf::from(c.var("NODEIMAGE_STATE")).join(format!("logs/registry-{port}.log"));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let requests = text
        .lines()
        .filter(|l| l.contains(&format!("/v2/{repo}/manifests/v1")) && l.contains("HTTP/1.1\""))
        .count();
    assert!(
        requests >= 3,
        "{requests} manifest requests in {}",
        log.display()
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_node_whose_daemon_stopped_times_out_and_the_job_finishes() {
    let c = cluster();
    let socks = sockets(&c);
    let node = c.nodes()[0].clone();
    let mut silent = TestNode::create(&c, "ppj-silent", &BTreeMap::new());
    silent.start_daemon(&socks[0], &[]);
    if let Some(d) = silent.daemon.as_mut() {
        d.kill();
    }
    let image = prepull::unique_image(&c, "ppj-timeout");
    let mut cleanup = Cleanup::default();
    let (s, i) = (socks.clone(), image.clone());
    cleanup.defer("remove the image", move || {
        prepull::remove_from_nodes(&s, &i)
    });

    let name = unique("ppj-timeout");
    let started = Instant::now();
    let job = Job::apply(
        &c,
        &name,
        &manifest(
            &name,
            &format!(
                "images:\n{}nodeNames:\n  - {}\n  - {node}\nconcurrency: 2\ntimeoutSeconds: 20\nfailureTolerate: '0.6'\n",
                yaml_list(std::slice::from_ref(&image)),
                silent.name
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(18) && took < Duration::from_secs(120),
        "finished after {took:?}, expected about 20 s"
    );
    let (ns, _) = node_entry(&status, &silent.name);
    assert_eq!(
        (
            str_of(&ns["state"]),
            str_of(&ns["event"]),
            str_of(&ns["action"])
        ),
        ("Failed", "TimeOut", "Failure"),
        "{ns}"
    );
    assert!(str_of(&ns["reason"]).contains("20s"), "{ns}");
    assert_eq!(str_of(&node_entry(&status, &node).0["state"]), "Successful");
    assert_eq!(
        (str_of(&status["state"]), str_of(&status["reason"])),
        (
            "Successful",
            "1 of 2 nodes failed (50.0%), below failureTolerate 0.6"
        ),
        "{status}"
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn named_nodes_that_do_not_exist_or_are_not_ready_are_listed_as_failed() {
    let c = cluster();
    let socks = sockets(&c);
    let node = c.nodes()[0].clone();
    let ghost = unique("ppj-ghost");
    let down = TestNode::create(&c, "ppj-down", &BTreeMap::new());
    c.kubectl_ok(
        &[
            "patch",
            "node",
            &down.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","message":"test"}]}}"#,
        ],
        None,
    );
    let image = prepull::unique_image(&c, "ppj-ghost");
    let mut cleanup = Cleanup::default();
    let (s, i) = (socks.clone(), image.clone());
    cleanup.defer("remove the image", move || {
        prepull::remove_from_nodes(&s, &i)
    });

    let name = unique("ppj-ghost");
    let job = Job::apply(
        &c,
        &name,
        &manifest(
            &name,
            &format!(
                "images:\n{}nodeNames:\n  - {node}\n  - {ghost}\n  - {}\nfailureTolerate: '1'\n",
                yaml_list(std::slice::from_ref(&image)),
                down.name
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    assert_eq!(
        node_names(&status),
        vec![node.clone(), ghost.clone(), down.name.clone()]
    );
    for (n, reason) in [(&ghost, "not found"), (&down.name, "not ready")] {
        let (ns, _) = node_entry(&status, n);
        assert_eq!(
            (
                str_of(&ns["state"]),
                str_of(&ns["event"]),
                str_of(&ns["action"]),
                str_of(&ns["reason"])
            ),
            ("Failed", "Init", "Failure", reason),
            "{ns}"
        );
    }
    assert_eq!(str_of(&node_entry(&status, &node).0["state"]), "Successful");
    assert_eq!(
        (str_of(&status["state"]), str_of(&status["reason"])),
        (
            "Successful",
            "2 of 3 nodes failed (66.7%), below failureTolerate 1"
        ),
        "{status}"
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn image_secrets_of_the_wrong_form_are_rejected_and_a_missing_one_is_named() {
    let c = cluster();
    let node = c.nodes()[0].clone();
    let image = format!("{}/test:v1", c.var("NODEIMAGE_AUTH_REGISTRY"));

    let name = unique("ppj-badsecret");
    let r = c.kubectl(
        &["apply", "-f", "-"],
        Some(&manifest(
            &name,
            &format!("images:\n  - {image}\nnodeNames:\n  - {node}\nimageSecrets: my-secret\n"),
        )),
    );
    assert!(!r.success, "accepted imageSecrets without a namespace");
    assert!(
        r.stderr
            .contains("spec.imagePrePullTemplate.imageSecrets must be of the form namespace/name"),
        "{}",
        r.stderr
    );

    let absent = unique("absent");
    let name = unique("ppj-nosecret");
    let job = Job::apply(
        &c,
        &name,
        &manifest(
            &name,
            &format!(
                "images:\n  - {image}\nnodeNames:\n  - {node}\nimageSecrets: default/{absent}\n"
            ),
        ),
    );
    let status = job.wait_finished(WAIT);
    let (ns, _) = node_entry(&status, &node);
    assert_eq!(
        (
            str_of(&ns["state"]),
            str_of(&ns["event"]),
            str_of(&ns["reason"])
        ),
        (
            "Failed",
            "Init",
            format!("image secret default/{absent} not found").as_str()
        ),
        "{ns}"
    );
    assert_eq!(str_of(&status["state"]), "Failed", "{status}");
}
