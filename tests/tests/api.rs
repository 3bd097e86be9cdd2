//! The API against a real kube-apiserver: CRDs install, upstream manifests
//! apply, invalid ones are rejected with a message naming the field, defaults
//! and printer columns show up.

use nodeimage_tests::{Cluster, repo_root, yaml_documents};
use serde_json::Value;

const NS: &str = "nodeimage-api-test";

fn cluster() -> Cluster {
    let c = Cluster::load();
    c.install_crds();
    let r = c.kubectl(&["create", "namespace", NS], None);
    assert!(
        r.success || r.stderr.contains("AlreadyExists"),
        "create namespace: {}",
        r.stderr
    );
    c
}

fn manifests(dir: &str) -> Vec<(String, String)> {
    let dir = repo_root().join("tests/manifests").join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).expect("read manifest");
            (
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned(),
                text,
            )
        })
        .collect()
}

fn json(c: &Cluster, args: &[&str]) -> Value {
    let out = c.kubectl_ok(&[args, &["-o", "json"]].concat(), None);
    serde_json::from_str(&out).expect("kubectl prints JSON")
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn crds_are_established_with_the_right_scope() {
    let c = cluster();
    let out = c.kubectl_ok(
        &["api-resources", "--api-group=apps.kruise.io", "-o", "wide"],
        None,
    );
    let out2 = c.kubectl_ok(
        &[
            "api-resources",
            "--api-group=operations.kubeedge.io",
            "-o",
            "wide",
        ],
        None,
    );
    let all = format!("{out}{out2}");
    for (plural, namespaced, kind) in [
        ("nodeimages", "false", "NodeImage"),
        ("imagepulljobs", "true", "ImagePullJob"),
        ("imagelistpulljobs", "true", "ImageListPullJob"),
        ("imageprepulljobs", "false", "ImagePrePullJob"),
        ("nodeupgradejobs", "false", "NodeUpgradeJob"),
    ] {
        let line = all
            .lines()
            .find(|l| l.split_whitespace().next() == Some(plural))
            .unwrap_or_else(|| panic!("{plural} not listed by kubectl api-resources:\n{all}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        assert!(
            cols.contains(&namespaced) && cols.contains(&kind),
            "{plural}: expected namespaced={namespaced} kind={kind}, got {line}"
        );
        let crd = json(
            &c,
            &[
                "get",
                "crd",
                &format!(
                    "{plural}.{}",
                    if kind.contains("Pre") || kind.contains("Upgrade") {
                        "operations.kubeedge.io"
                    } else {
                        "apps.kruise.io"
                    }
                ),
            ],
        );
        let established = crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|cond| cond["type"] == "Established" && cond["status"] == "True");
        assert!(established, "{plural} is not Established");
        for v in crd["spec"]["versions"].as_array().into_iter().flatten() {
            assert!(
                v["subresources"]["status"].is_object(),
                "{plural} {} lacks the status subresource",
                v["name"]
            );
        }
    }
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn seed_manifests_are_accepted() {
    let c = cluster();
    let mut failures = Vec::new();
    for (name, text) in manifests("seeds") {
        let r = c.kubectl(
            &["create", "--dry-run=server", "-n", NS, "-f", "-"],
            Some(&text),
        );
        if !r.success {
            failures.push(format!("{name}: {}", r.stderr.trim()));
        }
    }
    assert!(
        failures.is_empty(),
        "rejected seeds:\n{}",
        failures.join("\n")
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn seed_typos_are_rejected_with_a_clear_message() {
    let c = cluster();
    let expected = [
        (
            "kubeedge-guide-api-example.verbatim.yaml",
            "mapping values are not allowed",
        ),
        (
            "kubeedge-guide-api-example.nodes-typo.yaml",
            "unknown field \"spec.imagePrePullTemplate.nodes\"",
        ),
        (
            "kruise-guide-both-selectors.yaml",
            "can not set both names and a label selector",
        ),
    ];
    let files = manifests("typos");
    assert_eq!(files.len(), expected.len(), "every typo file has a case");
    for (file, message) in expected {
        let (_, text) = files
            .iter()
            .find(|(n, _)| n == file)
            .unwrap_or_else(|| panic!("missing tests/manifests/typos/{file}"));
        let r = c.kubectl(
            &["create", "--dry-run=server", "-n", NS, "-f", "-"],
            Some(text),
        );
        assert!(!r.success, "{file} was accepted");
        assert!(
            r.stderr.contains(message),
            "{file}: expected {message:?} in:\n{}",
            r.stderr
        );
    }
}

/// Cases built in code because they are too long to write out.
fn generated_invalid_cases() -> Vec<(String, String)> {
    let images: Vec<String> = (0..256).map(|i| format!("  - app-{i}:v1")).collect();
    let list = format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: ImageListPullJob\nmetadata:\n  name: too-many-images\nspec:\n  images:\n{}\n",
        images.join("\n")
    );
    let entries: Vec<String> = (0..257)
        .map(|i| format!("    app-{i}:\n      tags: [{{tag: v1}}]"))
        .collect();
    let ni = format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: NodeImage\nmetadata:\n  name: api-test-too-many\nspec:\n  images:\n{}\n",
        entries.join("\n")
    );
    vec![
        (
            "spec.images: Too many: 256: must have at most 255 items".to_string(),
            list,
        ),
        (
            "spec.images: Too many: 257: must have at most 256 items".to_string(),
            ni,
        ),
    ]
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn invalid_manifests_are_rejected_with_the_field_named() {
    let c = cluster();
    let text = std::fs::read_to_string(repo_root().join("tests/manifests/invalid.yaml"))
        .expect("read invalid.yaml");
    let mut cases: Vec<(String, String)> = yaml_documents(&text)
        .into_iter()
        .map(|doc| {
            let expect = doc
                .lines()
                .find_map(|l| l.strip_prefix("# expect: "))
                .unwrap_or_else(|| panic!("case without '# expect:' line:\n{doc}"))
                .to_string();
            (expect, doc)
        })
        .collect();
    cases.extend(generated_invalid_cases());
    assert!(cases.len() >= 25, "the table has at least 25 cases");
    let mut failures = Vec::new();
    for (expect, doc) in &cases {
        let r = c.kubectl(
            &["create", "--dry-run=server", "-n", NS, "-f", "-"],
            Some(doc),
        );
        if r.success {
            failures.push(format!("ACCEPTED, expected {expect:?}:\n{doc}"));
        } else if !r.stderr.contains(expect.as_str()) {
            failures.push(format!(
                "expected {expect:?}, got:\n{}\nfor:\n{doc}",
                r.stderr.trim()
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases wrong:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n----\n")
    );
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn pull_secrets_cannot_change_after_creation() {
    let c = cluster();
    for (kind, name, image_field) in [
        ("ImagePullJob", "immutable-secrets", "image: nginx"),
        (
            "ImageListPullJob",
            "immutable-secrets-list",
            "images: [nginx]",
        ),
    ] {
        let _ = c.kubectl(
            &["delete", kind, name, "-n", NS, "--ignore-not-found"],
            None,
        );
        let doc = format!(
            "apiVersion: apps.kruise.io/v1alpha1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  {image_field}\n  parallelism: 0\n  pullSecrets: [a]\n"
        );
        c.kubectl_ok(&["create", "-n", NS, "-f", "-"], Some(&doc));
        for patch in [
            r#"{"spec":{"pullSecrets":["b"]}}"#,
            r#"{"spec":{"pullSecrets":null}}"#,
        ] {
            let r = c.kubectl(
                &["patch", kind, name, "-n", NS, "--type=merge", "-p", patch],
                None,
            );
            assert!(!r.success, "{kind}: patch {patch} was accepted");
            assert!(
                r.stderr.contains("spec.pullSecrets is immutable"),
                "{kind}: {}",
                r.stderr
            );
        }
        // Other fields stay editable.
        c.kubectl_ok(
            &[
                "patch",
                kind,
                name,
                "-n",
                NS,
                "--type=merge",
                "-p",
                r#"{"spec":{"parallelism":2}}"#,
            ],
            None,
        );
        c.kubectl_ok(&["delete", kind, name, "-n", NS, "--wait=false"], None);
    }
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn defaults_appear_on_created_objects() {
    let c = cluster();
    let ipj = json(
        &c,
        &[
            "create",
            "--dry-run=server",
            "-n",
            NS,
            "-f",
            &repo_root()
                .join("tests/manifests/defaults/imagepulljob.yaml")
                .to_string_lossy(),
        ],
    );
    let s = &ipj["spec"];
    assert_eq!(s["parallelism"], 1, "{s}");
    assert_eq!(s["pullPolicy"]["timeoutSeconds"], 600, "{s}");
    assert_eq!(s["pullPolicy"]["backoffLimit"], 3, "{s}");
    assert_eq!(s["imagePullPolicy"], "IfNotPresent", "{s}");
    assert_eq!(s["completionPolicy"]["type"], "Always", "{s}");

    let ippj = json(
        &c,
        &[
            "create",
            "--dry-run=server",
            "-f",
            &repo_root()
                .join("tests/manifests/defaults/imageprepulljob.yaml")
                .to_string_lossy(),
        ],
    );
    let t = &ippj["spec"]["imagePrePullTemplate"];
    assert_eq!(t["concurrency"], 1, "{t}");
    assert_eq!(t["failureTolerate"], "0.1", "{t}");
    assert_eq!(t["timeoutSeconds"], 300, "{t}");
    assert_eq!(t["retryTimes"], 0, "{t}");
    // KubeEdge documents checkItems ["disk"] but runs no check when unset; no default here either.
    assert_eq!(t["checkItems"], serde_json::Value::Null, "{t}");

    let nuj = json(
        &c,
        &[
            "create",
            "--dry-run=server",
            "-f",
            &repo_root()
                .join("tests/manifests/defaults/nodeupgradejob.yaml")
                .to_string_lossy(),
        ],
    );
    let s = &nuj["spec"];
    assert_eq!(s["image"], "kubeedge/installation-package", "{s}");
    assert_eq!(s["concurrency"], 1, "{s}");
    assert_eq!(s["timeoutSeconds"], 300, "{s}");
    assert_eq!(s["failureTolerate"], "0.1", "{s}");
    assert!(s.get("checkItems").is_none(), "no checks by default: {s}");

    let ni = json(
        &c,
        &[
            "create",
            "--dry-run=server",
            "-f",
            &repo_root()
                .join("tests/manifests/defaults/nodeimage.yaml")
                .to_string_lossy(),
        ],
    );
    let tag = &ni["spec"]["images"]["ubuntu"]["tags"][0];
    assert_eq!(tag["pullPolicy"]["timeoutSeconds"], 600, "{tag}");
    assert_eq!(tag["pullPolicy"]["backoffLimit"], 3, "{tag}");
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn printer_columns_answer_how_far_along() {
    let c = cluster();
    let name = "api-test-columns";
    let _ = c.kubectl(&["delete", "nodeimage", name, "--ignore-not-found"], None);
    c.kubectl_ok(
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: apps.kruise.io/v1alpha1\nkind: NodeImage\nmetadata:\n  name: {name}\n  labels: {{apps.kruise.io/fake-nodeimage: \"true\"}}\nspec: {{}}\n"
        )),
    );
    c.kubectl_ok(
        &[
            "patch",
            "nodeimage",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"desired":7,"pulling":2,"succeeded":3,"failed":1,"waiting":1}}"#,
        ],
        None,
    );
    let out = c.kubectl_ok(&["get", "nodeimage", name], None);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "DESIRED", "PULLING", "SUCCEED", "FAILED", "AGE"],
        "{out}"
    );
    let row: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(&row[..5], [name, "7", "2", "3", "1"], "{out}");
    c.kubectl_ok(&["delete", "nodeimage", name], None);

    let job = "columns-job";
    let _ = c.kubectl(
        &[
            "delete",
            "imagepulljob",
            job,
            "-n",
            NS,
            "--ignore-not-found",
        ],
        None,
    );
    c.kubectl_ok(
        &["create", "-n", NS, "-f", "-"],
        Some(&format!(
            "apiVersion: apps.kruise.io/v1alpha1\nkind: ImagePullJob\nmetadata:\n  name: {job}\nspec:\n  image: nginx\n  parallelism: 0\n  selector: {{names: [no-such-node]}}\n"
        )),
    );
    let out = c.kubectl_ok(&["get", "imagepulljob", job, "-n", NS], None);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME", "TOTAL", "ACTIVE", "SUCCEED", "FAILED", "AGE", "MESSAGE"
        ],
        "{out}"
    );
    c.kubectl_ok(
        &["delete", "imagepulljob", job, "-n", NS, "--wait=false"],
        None,
    );

    for (resource, columns) in [
        (
            "imagelistpulljobs",
            vec!["NAME", "TOTAL", "SUCCEEDED", "COMPLETED", "AGE"],
        ),
        ("imageprepulljobs", vec!["NAME", "STATE", "EVENT", "AGE"]),
        (
            "nodeupgradejobs",
            vec!["NAME", "VERSION", "STATE", "EVENT", "AGE"],
        ),
    ] {
        let crd = json(
            &c,
            &[
                "get",
                "crd",
                &format!(
                    "{resource}.{}",
                    if resource == "imagelistpulljobs" {
                        "apps.kruise.io"
                    } else {
                        "operations.kubeedge.io"
                    }
                ),
            ],
        );
        let names: Vec<String> = crd["spec"]["versions"][0]["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|col| col["priority"].as_i64().unwrap_or(0) == 0)
            .filter_map(|col| col["name"].as_str().map(str::to_string))
            .collect();
        assert_eq!(names, columns[1..], "{resource}");
    }
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn v1beta1_manifests_apply_too() {
    let c = cluster();
    let name = "api-test-v1beta1";
    let _ = c.kubectl(&["delete", "nodeimage", name, "--ignore-not-found"], None);
    c.kubectl_ok(
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: apps.kruise.io/v1beta1\nkind: NodeImage\nmetadata:\n  name: {name}\n  labels: {{apps.kruise.io/fake-nodeimage: \"true\"}}\nspec:\n  images:\n    nginx:\n      pullSecrets: [{{namespace: ns, name: s, mode: batch}}]\n      tags: [{{tag: \"1.25\", pullPolicy: {{ttlSecondsAfterFinished: 60}}}}]\n"
        )),
    );
    let obj = json(&c, &["get", "nodeimages.v1alpha1.apps.kruise.io", name]);
    assert_eq!(obj["apiVersion"], "apps.kruise.io/v1alpha1");
    assert_eq!(
        obj["spec"]["images"]["nginx"]["pullSecrets"][0]["mode"],
        "batch"
    );
    c.kubectl_ok(&["delete", "nodeimage", name], None);
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn kubectl_explain_describes_nodeimage_images() {
    let c = cluster();
    let out = c.kubectl_ok(&["explain", "nodeimage.spec.images"], None);
    for needle in [
        "Images to pull on this node",
        "tags",
        "pullSecrets",
        "sandboxConfig",
    ] {
        assert!(out.contains(needle), "explain lacks {needle:?}:\n{out}");
    }
    let out = c.kubectl_ok(&["explain", "nodeimage.spec.images.tags.pullPolicy"], None);
    assert!(out.contains("ttlSecondsAfterFinished"), "{out}");
}

/// What the bounds and the reference grammar must still accept: every
/// largest value, every reference form of the distribution grammar, and
/// every selector operator used right.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn values_at_the_bounds_and_every_reference_form_are_accepted() {
    let c = cluster();
    let digest = format!("sha256:{}", "f".repeat(64));
    let images = [
        "nginx".to_string(),
        "test.com:5000".to_string(),
        "localhost:5000/a/b:c".to_string(),
        "[::1]:5000/app:v1".to_string(),
        format!("[2001:db8::1]:5000/repo:tag@{digest}"),
        "192.168.1.1:5000/repo".to_string(),
        "Registry.Example.com/app:Upper_Tag".to_string(),
        format!("xn--7o8h.com/myimage@sha512:{}", "f".repeat(128)),
        format!("{}a:tag", "a/".repeat(127)),
    ];
    let mut failures = Vec::new();
    for (i, image) in images.iter().enumerate() {
        let doc = format!(
            r#"apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata: {{name: edge-{i}}}
spec:
  image: "{image}"
  parallelism: "2147483647"
  pullSecrets: [a.b-c]
  selector:
    matchLabels: {{"example.com/key_1.x": "", "k": "V-1.2_3"}}
    matchExpressions:
    - {{key: kubernetes.io/hostname, operator: In, values: [node-1]}}
    - {{key: a, operator: NotIn, values: [b]}}
    - {{key: x, operator: Exists}}
    - {{key: zone, operator: DoesNotExist, values: []}}
  pullPolicy: {{timeoutSeconds: 2147483647, backoffLimit: 2147483647}}
  completionPolicy: {{activeDeadlineSeconds: 2147483647, ttlSecondsAfterFinished: 2147483647}}
"#
        );
        let r = c.kubectl(
            &["create", "--dry-run=server", "-n", NS, "-f", "-"],
            Some(&doc),
        );
        if !r.success {
            failures.push(format!("{image}: {}", r.stderr.trim()));
        }
    }
    let others = [
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: NodeImage
metadata: {name: edge-ni}
spec:
  images:
    "[::1]:5000/app":
      pullSecrets: [{namespace: kube-system, name: reg.cred}]
      tags:
      - tag: v1
        version: 9007199254740991
        pullPolicy: {timeoutSeconds: 2147483647, backoffLimit: 2147483647, ttlSecondsAfterFinished: 2147483647, activeDeadlineSeconds: 2147483647}
"#,
        r#"apiVersion: operations.kubeedge.io/v1alpha1
kind: ImagePrePullJob
metadata: {name: edge-ippj}
spec:
  imagePrePullTemplate:
    images: ["[::1]:5000/app:v1"]
    labelSelector: {matchExpressions: [{key: node-role.kubernetes.io/edge, operator: Exists}]}
    concurrency: 2147483647
    retryTimes: 2147483647
    timeoutSeconds: 2147483647
    imageSecrets: kube-system/reg.cred
"#,
        r#"apiVersion: operations.kubeedge.io/v1alpha1
kind: NodeUpgradeJob
metadata: {name: edge-nuj}
spec:
  version: v1.17.0
  nodeNames: [ip-10-0-0-1.ec2.internal]
  concurrency: 2147483647
  timeoutSeconds: 2147483647
"#,
    ];
    for doc in others {
        let r = c.kubectl(
            &["create", "--dry-run=server", "-n", NS, "-f", "-"],
            Some(doc),
        );
        if !r.success {
            failures.push(r.stderr.trim().to_string());
        }
    }
    assert!(failures.is_empty(), "rejected:\n{}", failures.join("\n"));
}

/// A NodeUpgradeJob's spec cannot change after creation, as KubeEdge's
/// admission refuses it; metadata stays editable.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn node_upgrade_job_spec_is_immutable() {
    let c = cluster();
    let name = "immutable-upgrade";
    let _ = c.kubectl(
        &["delete", "nodeupgradejob", name, "--ignore-not-found"],
        None,
    );
    // A node that does not exist: the job fails at once and upgrades nothing.
    let doc = format!(
        "apiVersion: operations.kubeedge.io/v1alpha1\nkind: NodeUpgradeJob\nmetadata:\n  name: {name}\nspec:\n  version: v1.17.0\n  nodeNames: [no-such-node-immutable]\n"
    );
    c.kubectl_ok(&["create", "-f", "-"], Some(&doc));
    for patch in [
        r#"{"spec":{"version":"v1.18.0"}}"#,
        r#"{"spec":{"nodeNames":["other"]}}"#,
        r#"{"spec":{"concurrency":5}}"#,
    ] {
        let r = c.kubectl(
            &["patch", "nodeupgradejob", name, "--type=merge", "-p", patch],
            None,
        );
        assert!(!r.success, "patch {patch} was accepted");
        assert!(r.stderr.contains("spec is immutable"), "{}", r.stderr);
    }
    c.kubectl_ok(
        &[
            "patch",
            "nodeupgradejob",
            name,
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"team":"edge"}}}"#,
        ],
        None,
    );
    c.kubectl_ok(&["delete", "nodeupgradejob", name, "--wait=false"], None);
}
