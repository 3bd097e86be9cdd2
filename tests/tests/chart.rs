//! The Helm chart charts/nodeimage against the local cluster:
//!
//! 1. charts/nodeimage/crds is an exact copy of crds/yaml;
//! 2. `helm lint --strict` (defaults and every optional part on), the
//!    dashboard is valid JSON, what the rendered DaemonSet and Deployment
//!    must contain, and the values the chart and values.schema.json refuse;
//! 3. the chart's CRDs and `helm template` (defaults; every optional part
//!    on, with ServiceMonitors and with PodMonitors) accepted by the API
//!    server (`kubectl apply --dry-run=server`; stand-in Prometheus
//!    Operator CRDs from tests/manifests/monitoring-crds.yaml when absent);
//! 4. the chart refuses to install (`helm install --dry-run=server`) over a
//!    CRD that is not nodeimage's unless `takeOver=true`, and installs once
//!    nodeimage's CRDs are applied as docs/migration.md says;
//! 6. the start-up gate's admission policy, with real tokens: the daemon
//!    and the controller may remove the start-up taint (the daemon only
//!    from its own Node) and change nothing else of a Node;
//! 5. the RBAC, for real: the chart applied as release "chart-test" (no
//!    kubelet here, so its pods never run); as the daemon's ServiceAccount
//!    (tokens bound to a Node, as kubelet's are) it may patch only its own
//!    node's NodeImage status (the node-identity policy), read secrets only
//!    in the secrets namespace, and not change a NodeImage's spec; the
//!    controller's ServiceAccount is checked with `kubectl auth can-i`; then
//!    the real nodeimage-daemon runs with only the daemon's token against a
//!    fake NodeImage and node-1's containerd.
//! 7. API Priority and Fairness: `apiPriority` renders a priority level and
//!    FlowSchemas (none with `enabled=false`; the schema refuses bad
//!    sizes naming the field), and, applied, the API server classifies the
//!    controller's and the daemon's requests (their own tokens) into them,
//!    the controller's Lease reads into `leader-election`, and another
//!    ServiceAccount's into `service-accounts` as before: the UIDs in its
//!    `X-Kubernetes-PF-FlowSchema-UID` and `X-Kubernetes-PF-PriorityLevel-UID`
//!    response headers are those of the objects.
//!
//! tests/chart.sh installs helm and runs these one at a time
//! (`--test-threads=1`): 3 to 5 create cluster-wide objects under fixed names.
//! Every name starts with `chart_`: the other end-to-end tests run without
//! them (`--skip chart_`).

use nodeimage_tests::helm::{self, IMAGES, TokenConfig, chart, node_token_args, render};
use nodeimage_tests::process::Daemon;
use nodeimage_tests::registry::Registry;
use nodeimage_tests::{Cleanup, Cluster, cri, repo_root, unique, wait_for};
use serde_json::json;
use std::path::Path;
use std::time::Duration;

const RELEASE: &str = "chart-test";
const NS: &str = "nodeimage-chart-test";
const SECRETS_NS: &str = "nodeimage-chart-test-secrets";
const OTHER_NS: &str = "nodeimage-chart-test-other";
const FAKE_NI: &str = "nodeimage-chart-test";
const OTHER_NI: &str = "nodeimage-chart-test-other";
const PULL_SECRET: &str = "chart-test-pull";
const DAEMON_SA: &str = "chart-test-nodeimage-daemon";
const CONTROLLER_SA: &str = "chart-test-nodeimage-controller";
const PROVIDERS: &str = r#"daemon.credentialProviders.config={"apiVersion":"kubelet.config.k8s.io/v1","kind":"CredentialProviderConfig","providers":[{"name":"ecr-credential-provider","matchImages":["*.dkr.ecr.*.amazonaws.com"],"defaultCacheDuration":"12h","apiVersion":"credentialprovider.kubelet.k8s.io/v1"}]}"#;

/// Every optional part on, with a ServiceMonitor (`pod`: a PodMonitor).
fn all_on(pod: bool) -> Vec<&'static str> {
    vec![
        "--set",
        "daemon.upgrades.enabled=true",
        "--set-json",
        PROVIDERS,
        "--set",
        "daemon.upgrades.nodeVersionSource=file:/etc/kubeedge/version",
        "--set",
        if pod {
            "metrics.podMonitor.enabled=true"
        } else {
            "metrics.serviceMonitor.enabled=true"
        },
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "grafanaDashboard.enabled=true",
        "--set",
        "controller.replicas=2",
        "--set",
        "controller.leaderElection.enabled=true",
        "--set",
        "controller.podDisruptionBudget.enabled=true",
        "--set",
        "daemon.pullVerifier.enabled=true",
    ]
}

/// A render that must succeed.
fn rendered(c: &Cluster, extra: &[&str]) -> String {
    let r = render(c, RELEASE, NS, extra);
    assert!(r.success, "helm template {extra:?} failed:\n{}", r.text());
    r.stdout
}

fn expect_in(text: &str, needle: &str, what: &str) {
    assert!(
        text.contains(needle),
        "{what}: the rendered manifest lacks {needle:?}"
    );
}

fn expect_not_in(text: &str, needle: &str, what: &str) {
    assert!(
        !text.contains(needle),
        "{what}: the rendered manifest must not contain {needle:?}"
    );
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_crds_are_a_copy_of_crds_yaml() {
    let list = |dir: &Path| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .flatten()
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read_to_string(e.path()).unwrap_or_default(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let ours = list(&repo_root().join("crds/yaml"));
    let charted = list(&chart().join("crds"));
    let names = |v: &[(String, String)]| v.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&charted), names(&ours), "the chart's CRD files");
    for ((name, a), (_, b)) in ours.iter().zip(&charted) {
        assert!(
            a == b,
            "charts/nodeimage/crds/{name} differs from crds/yaml; refresh it with `make crds`"
        );
    }
    assert_eq!(ours.len(), 6);
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_lints_renders_and_refuses_bad_values() {
    let c = Cluster::load();
    let chart_dir = chart();
    let chart_s = chart_dir.to_string_lossy();
    for extra in [vec![], all_on(false)] {
        let mut args = vec!["lint", "--strict", &chart_s];
        args.extend(IMAGES);
        args.extend(extra.iter());
        let r = helm::helm(&c, &args);
        assert!(r.success, "helm lint --strict {extra:?}:\n{}", r.text());
    }
    let dashboard = std::fs::read_to_string(chart_dir.join("dashboards/nodeimage.json"))
        .expect("the dashboard");
    serde_json::from_str::<serde_json::Value>(&dashboard)
        .unwrap_or_else(|e| panic!("dashboards/nodeimage.json is not valid JSON: {e}"));

    let ds = rendered(&c, &["--show-only", "templates/daemon-daemonset.yaml"]);
    for (needle, what) in [
        ("- operator: Exists", "daemon tolerates every taint"),
        (
            "priorityClassName: system-node-critical",
            "daemon priority class",
        ),
        (
            "fieldPath: spec.nodeName",
            "NODE_NAME from the downward API",
        ),
        ("- name: NODE_NAME", "NODE_NAME env"),
        (
            "--containerd-socket=/run/containerd/containerd.sock",
            "default containerd socket",
        ),
        (
            "path: /run/containerd",
            "hostPath of the socket's directory",
        ),
        ("maxUnavailable: 10%", "DaemonSet rolling update"),
        ("--health-addr=0.0.0.0:10226", "daemon health address"),
        ("path: /readyz", "daemon readiness probe"),
        ("runAsUser: 0", "daemon runs as root (socket)"),
        ("--pin-budget-percent=40", "the default pin budget"),
    ] {
        expect_in(&ds, needle, what);
    }
    expect_not_in(
        &ds,
        "credential-provider",
        "no credential providers by default",
    );
    // Virtual, Fargate and Windows nodes: no NodeImage, no daemon pod.
    let skip =
        "type=virtual-kubelet,eks.amazonaws.com/compute-type=fargate,kubernetes.io/os=windows";
    let all = rendered(&c, &[]);
    expect_in(
        &all,
        &format!("--skip-nodes-labelled={skip}"),
        "the controller skips them",
    );
    for (key, value) in [
        ("type", "virtual-kubelet"),
        ("eks.amazonaws.com/compute-type", "fargate"),
        ("kubernetes.io/os", "windows"),
    ] {
        expect_in(
            &all,
            &format!(
                "- key: \"{key}\"\n                    operator: NotIn\n                    values: [\"{value}\"]"
            ),
            "the daemon's node affinity keeps off them",
        );
    }
    let none = rendered(&c, &["--set-json", "skipNodesLabelled=[]"]);
    expect_in(
        &none,
        "--skip-nodes-labelled=\n",
        "an empty list skips nothing",
    );
    expect_not_in(&none, "NotIn", "no affinity when nothing is skipped");
    // Registry pacing: a default limit, and one flag per named host.
    expect_in(
        &all,
        "--registry-max-pulls=100\n",
        "the default registry limit",
    );
    expect_not_in(
        &all,
        "--registry-max-pulls-for",
        "no per-host limit by default",
    );
    let paced = rendered(
        &c,
        &[
            "--set-json",
            r#"controller.registryPacing.perRegistry={"docker.io":20,"localhost:5000":1}"#,
        ],
    );
    for flag in ["docker.io=20", "localhost:5000=1"] {
        expect_in(
            &paced,
            &format!("--registry-max-pulls-for={flag}\n"),
            "a per-host registry limit",
        );
    }
    let own = rendered(
        &c,
        &[
            "--set-json",
            r#"daemon.affinity={"nodeAffinity":{"preferredDuringSchedulingIgnoredDuringExecution":[]}}"#,
        ],
    );
    expect_not_in(&own, "NotIn", "a daemon.affinity of the user's replaces it");
    // Log level and extra volumes, for both workloads.
    expect_not_in(&all, "RUST_LOG", "the binaries' own log defaults");
    let extra = rendered(
        &c,
        &[
            "--set",
            "logLevel=info\\,nodeimage_daemon=debug",
            "--set-json",
            r#"daemon.extraVolumes=[{"name":"extra-ca","configMap":{"name":"corp-ca"}}]"#,
            "--set-json",
            r#"daemon.extraVolumeMounts=[{"name":"extra-ca","mountPath":"/etc/ssl/corp"}]"#,
            "--set-json",
            r#"controller.extraVolumes=[{"name":"extra-ca","configMap":{"name":"corp-ca"}}]"#,
            "--set-json",
            r#"controller.extraVolumeMounts=[{"name":"extra-ca","mountPath":"/etc/ssl/corp"}]"#,
        ],
    );
    for (needle, times) in [
        (
            "- name: RUST_LOG\n              value: \"info,nodeimage_daemon=debug\"",
            2,
        ),
        ("name: corp-ca", 2),
        ("mountPath: /etc/ssl/corp", 2),
    ] {
        assert_eq!(
            extra.matches(needle).count(),
            times,
            "{needle:?} in both the controller and the daemon"
        );
    }
    // Chart.yaml's kubeVersion: what the chart relies on is GA from 1.30.
    let old = render(&c, RELEASE, NS, &["--kube-version", "1.29.9"]);
    assert!(
        !old.success && old.stderr.contains("requires kubeVersion"),
        "a 1.29 cluster is refused: {}",
        old.text()
    );
    let gke = render(&c, RELEASE, NS, &["--kube-version", "v1.31.2-gke.1000"]);
    assert!(
        gke.success,
        "a vendor build of 1.31 is taken: {}",
        gke.text()
    );
    // GKE admits the daemon's priority class only under a quota that
    // covers it (tests/kube: the local API server does the same).
    let quota = rendered(&c, &["--show-only", "templates/daemon-priority-quota.yaml"]);
    for (needle, what) in [
        ("kind: ResourceQuota", "a quota by default"),
        ("scopeName: PriorityClass", "scoped to the priority class"),
        ("- \"system-node-critical\"", "the daemon's class"),
        ("pods: \"100000\"", "room for every node"),
    ] {
        expect_in(&quota, needle, what);
    }
    let other_class = rendered(
        &c,
        &[
            "--show-only",
            "templates/daemon-priority-quota.yaml",
            "--set",
            "daemon.priorityClassName=platform-agents",
        ],
    );
    expect_in(
        &other_class,
        "- \"platform-agents\"",
        "the class that is set",
    );
    // The controller's class while the start-up gate is on is in the quota
    // too: it must schedule when every other node is gated (issue 39).
    expect_in(
        &other_class,
        "- \"system-cluster-critical\"",
        "the controller's class",
    );
    let controller_only = rendered(
        &c,
        &[
            "--show-only",
            "templates/daemon-priority-quota.yaml",
            "--set",
            "daemon.priorityClassName=",
        ],
    );
    expect_in(
        &controller_only,
        "- \"system-cluster-critical\"",
        "the controller's class alone",
    );
    expect_not_in(
        &controller_only,
        "- \"system-node-critical\"",
        "no daemon class",
    );
    for off in [
        vec!["daemon.priorityClassName=", "startupGate.enabled=false"],
        vec!["daemon.priorityQuota.enabled=false"],
    ] {
        let args: Vec<&str> = off.iter().flat_map(|v| ["--set", *v]).collect();
        let r = render(&c, RELEASE, NS, &args);
        let what = off.join(" ");
        assert!(r.success, "helm template --set {what}: {}", r.text());
        expect_not_in(&r.stdout, "kind: ResourceQuota", &what);
    }
    // The controller tolerates the gate's taint and gets the critical class
    // while the gate is on, and neither without it.
    let controller = rendered(&c, &["--show-only", "templates/controller-deployment.yaml"]);
    expect_in(
        &controller,
        "key: \"nodeimage.dev/images-pending\"",
        "the controller tolerates the start-up taint",
    );
    expect_in(
        &controller,
        "priorityClassName: system-cluster-critical",
        "the controller's class while gated",
    );
    let ungated = rendered(
        &c,
        &[
            "--show-only",
            "templates/controller-deployment.yaml",
            "--set",
            "startupGate.enabled=false",
        ],
    );
    expect_not_in(&ungated, "images-pending", "no gate, no toleration");
    expect_not_in(&ungated, "priorityClassName", "no gate, no class");
    let k3s = rendered(
        &c,
        &[
            "--show-only",
            "templates/daemon-daemonset.yaml",
            "--set",
            "daemon.containerdSocket=/run/k3s/containerd/containerd.sock",
        ],
    );
    expect_in(
        &k3s,
        "--containerd-socket=/run/k3s/containerd/containerd.sock",
        "custom socket flag",
    );
    expect_in(&k3s, "path: /run/k3s/containerd", "custom socket hostPath");
    let mut args = vec!["--show-only", "templates/daemon-daemonset.yaml"];
    args.extend(all_on(false));
    let cp = rendered(&c, &args);
    for (needle, what) in [
        (
            "--image-credential-provider-config=/etc/nodeimage/credential-providers/config.yaml",
            "credential provider config flag",
        ),
        (
            "--image-credential-provider-bin-dir=/usr/libexec/kubernetes/kubelet-plugins/credential-provider/exec",
            "credential provider bin dir flag",
        ),
        (
            "name: ecr-credential-provider",
            "the provider config in a ConfigMap",
        ),
        (
            "checksum/credential-providers:",
            "a changed provider config rolls the daemons",
        ),
    ] {
        expect_in(&cp, needle, what);
    }

    let deploy = rendered(&c, &["--show-only", "templates/controller-deployment.yaml"]);
    for (needle, what) in [
        ("replicas: 2", "default controller replicas (HA)"),
        (
            "--secrets-namespace=nodeimage-secrets",
            "secrets namespace flag",
        ),
        ("--health-addr=0.0.0.0:8080", "controller health address"),
        ("fieldPath: metadata.name", "POD_NAME from the downward API"),
        ("readOnlyRootFilesystem: true", "read-only root filesystem"),
        ("runAsNonRoot: true", "controller runs as non-root"),
        ("--leader-elect", "leader election on by default"),
    ] {
        expect_in(&deploy, needle, what);
    }
    expect_not_in(
        &deploy,
        "--kubeedge-all-nodes",
        "KubeEdge kinds on edge nodes only by default",
    );
    let mut args = vec!["--show-only", "templates/controller-deployment.yaml"];
    args.extend(all_on(false));
    args.extend(["--set", "controller.kubeedgeAllNodes=true"]);
    let ha = rendered(&c, &args);
    expect_in(&ha, "replicas: 2", "HA replicas");
    expect_in(&ha, "- --leader-elect", "leader election flag");
    expect_in(
        &ha,
        &format!("- --leader-election-namespace={NS}"),
        "lease namespace flag",
    );
    expect_in(&ha, "- --kubeedge-all-nodes", "controller.kubeedgeAllNodes");

    let default = rendered(&c, &[]);
    for kind in [
        "ServiceMonitor",
        "PodMonitor",
        "PrometheusRule",
        "ConfigMap",
    ] {
        expect_not_in(
            &default,
            &format!("kind: {kind}"),
            "optional parts off by default",
        );
    }
    expect_in(
        &default,
        "kind: PodDisruptionBudget",
        "a PodDisruptionBudget for the 2 controller replicas by default",
    );
    expect_in(
        &default,
        "memory: 512Mi",
        "controller memory limit sized from the benchmarks",
    );
    expect_in(&default, "name: nodeimage-secrets", "the secrets namespace");
    let single = rendered(
        &c,
        &[
            "--set",
            "controller.replicas=1",
            "--set",
            "controller.leaderElection.enabled=false",
        ],
    );
    expect_not_in(
        &single,
        "kind: PodDisruptionBudget",
        "no PodDisruptionBudget for a single replica (it would block drains)",
    );
    let all = rendered(&c, &all_on(false));
    for kind in [
        "ServiceMonitor",
        "PrometheusRule",
        "ConfigMap",
        "PodDisruptionBudget",
        "Service",
    ] {
        expect_in(&all, &format!("kind: {kind}"), "optional part when enabled");
    }
    expect_in(
        &all,
        r#"grafana_dashboard: "1""#,
        "dashboard ConfigMap label",
    );
    expect_in(&all, "nodeimage_daemon_pulls_total", "dashboard and alerts");
    expect_in(
        &all,
        "- --pull-verifier-dir=/opt/containerd/image-verifier",
        "the daemon installs containerd's image verifier when asked",
    );
    expect_in(
        &all,
        "path: /opt/containerd/image-verifier\n            type: DirectoryOrCreate",
        "the verifier's host directory",
    );
    expect_not_in(&single, "pull-verifier", "no image verifier by default");
    let pod = rendered(&c, &all_on(true));
    expect_in(&pod, "kind: PodMonitor", "PodMonitor when enabled");
    expect_not_in(
        &pod,
        "kind: ServiceMonitor",
        "no ServiceMonitor with podMonitor",
    );

    // Values the chart refuses, each with a message that names the problem.
    let refused: [(&str, &str, &[&str]); 19] = [
        (
            "ServiceMonitor and PodMonitor together",
            "not both",
            &[
                "--set",
                "metrics.serviceMonitor.enabled=true",
                "--set",
                "metrics.podMonitor.enabled=true",
            ],
        ),
        (
            "2 replicas without leader election",
            "needs controller.leaderElection.enabled=true",
            &[
                "--set",
                "controller.replicas=2",
                "--set",
                "controller.leaderElection.enabled=false",
            ],
        ),
        (
            "a relative containerd socket path",
            "/daemon/containerdSocket",
            &["--set", "daemon.containerdSocket=containerd.sock"],
        ),
        (
            "replicas as a string",
            "/controller/replicas",
            &["--set-string", "controller.replicas=two"],
        ),
        (
            "0 replicas",
            "/controller/replicas",
            &["--set", "controller.replicas=0"],
        ),
        (
            "an unknown logFormat",
            "/logFormat",
            &["--set", "logFormat=xml"],
        ),
        (
            "maxConcurrentPulls 0",
            "/daemon/maxConcurrentPulls",
            &["--set", "daemon.maxConcurrentPulls=0"],
        ),
        (
            "maxConcurrentPulls as a string",
            "/daemon/maxConcurrentPulls",
            &["--set-string", "daemon.maxConcurrentPulls=many"],
        ),
        (
            "a disk threshold over 100",
            "/daemon/thresholds/disk",
            &["--set", "daemon.thresholds.disk=150"],
        ),
        (
            "a port out of range",
            "/daemon/port",
            &["--set", "daemon.port=70000"],
        ),
        (
            "an unknown pull policy",
            "/controller/image/pullPolicy",
            &["--set", "controller.image.pullPolicy=Sometimes"],
        ),
        (
            "a misspelt top-level key",
            "additional properties 'controler' not allowed",
            &["--set", "controler.replicas=3"],
        ),
        (
            "a malformed responseTimeout",
            "/controller/responseTimeout",
            &["--set", "controller.responseTimeout=ten"],
        ),
        (
            "a log level with a space",
            "/logLevel",
            &["--set", "logLevel=debug rm"],
        ),
        (
            "a negative registry limit",
            "/controller/registryPacing/default",
            &["--set", "controller.registryPacing.default=-1"],
        ),
        (
            "a pin budget of 0",
            "/daemon/pinning/budgetPercent",
            &["--set", "daemon.pinning.budgetPercent=0"],
        ),
        (
            "a pin budget above 100 percent",
            "/daemon/pinning/budgetPercent",
            &["--set", "daemon.pinning.budgetPercent=150"],
        ),
        (
            "a pin budget as a string",
            "/daemon/pinning/budgetPercent",
            &["--set-string", "daemon.pinning.budgetPercent=lots"],
        ),
        (
            "a skipped node label without a value",
            "/skipNodesLabelled/0",
            &["--set-json", r#"skipNodesLabelled=["pool"]"#],
        ),
    ];
    for (what, message, args) in refused {
        let r = render(&c, RELEASE, NS, args);
        assert!(!r.success, "the chart accepted {what} ({args:?})");
        assert!(
            r.text().contains(message),
            "refusing {what}: expected the message {message:?}, got:\n{}",
            r.text()
        );
    }
    let bare = helm::helm(&c, &["template", RELEASE, &chart_s, "--namespace", NS]);
    assert!(
        !bare.success,
        "the chart rendered without an image repository"
    );
    assert!(
        bare.text().contains("image.repository is required"),
        "no image repository: {}",
        bare.text()
    );
}

/// Applies `manifest` with `kubectl apply --dry-run=server`; the count of
/// objects the API server accepted.
fn server_dry_run(c: &Cluster, what: &str, manifest: &str) -> usize {
    let r = c.kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(manifest));
    assert!(
        r.success,
        "kubectl apply --dry-run=server of the chart ({what}) was rejected:\n{}",
        r.stderr
    );
    r.stdout.matches("server dry run").count()
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_rendered_objects_pass_server_side_dry_runs() {
    let c = Cluster::load();
    let mut cleanup = Cleanup::default();
    let crds = chart().join("crds");
    let r = c.kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--dry-run=server",
            "-f",
            &crds.to_string_lossy(),
        ],
        None,
    );
    assert!(
        r.success,
        "the API server rejects the chart's CRDs:\n{}",
        r.stderr
    );
    let monitoring = repo_root().join("tests/manifests/monitoring-crds.yaml");
    let have_monitoring = c
        .kubectl(
            &[
                "get",
                "crd",
                "servicemonitors.monitoring.coreos.com",
                "podmonitors.monitoring.coreos.com",
                "prometheusrules.monitoring.coreos.com",
            ],
            None,
        )
        .success;
    if !have_monitoring {
        let m = monitoring.to_string_lossy().to_string();
        c.kubectl_ok(&["apply", "-f", &m], None);
        c.kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                &m,
            ],
            None,
        );
        let cc = c.clone();
        cleanup.defer("delete the stand-in monitoring CRDs", move || {
            let _ = cc.kubectl(
                &["delete", "-f", &m, "--ignore-not-found", "--wait=false"],
                None,
            );
        });
    }
    // Namespaced objects need their namespaces, even in a dry run.
    let (ns, secrets_ns) = (unique("chart-dry"), unique("chart-dry-secrets"));
    for n in [&ns, &secrets_ns] {
        c.kubectl_ok(&["create", "namespace", n], None);
        let (cc, n) = (c.clone(), n.clone());
        cleanup.defer("delete the namespace", move || {
            let _ = cc.kubectl(&["delete", "namespace", &n, "--wait=false"], None);
        });
    }
    let secrets = format!("secretsNamespace={secrets_ns}");
    for (what, extra) in [
        ("default values", vec![]),
        ("every optional part on, ServiceMonitor", all_on(false)),
        ("every optional part on, PodMonitor", all_on(true)),
    ] {
        let mut args = extra.clone();
        args.extend(["--set", &secrets]);
        let r = render(&c, RELEASE, &ns, &args);
        assert!(r.success, "helm template ({what}): {}", r.text());
        let n = server_dry_run(&c, what, &r.stdout);
        assert!(n >= 15, "{what}: only {n} objects");
    }
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_refuses_another_controllers_crds_unless_told_to_take_over() {
    let c = Cluster::load();
    let crd = "imagepulljobs.apps.kruise.io";
    let label = "app.kubernetes.io/part-of";
    let chart_dir = chart();
    let chart_s = chart_dir.to_string_lossy().to_string();
    // --dry-run=server lets the chart's lookups see the cluster, as an install does.
    let install = |extra: &[&str]| {
        let mut args = vec![
            "install",
            "takeover-check",
            &chart_s,
            "-n",
            "default",
            "--dry-run=server",
            "--set",
            "secretsNamespace=takeover-check-secrets",
        ];
        args.extend(IMAGES);
        args.extend(extra);
        helm::helm(&c, &args)
    };
    let mut cleanup = Cleanup::default();
    let cc = c.clone();
    cleanup.defer("give the CRD its label back", move || {
        let _ = cc.kubectl(
            &[
                "label",
                "crd",
                crd,
                &format!("{label}=nodeimage"),
                "--overwrite",
            ],
            None,
        );
    });
    let r = install(&[]);
    assert!(
        r.success,
        "the chart refuses nodeimage's own CRDs:\n{}",
        r.text()
    );

    c.kubectl_ok(&["label", "crd", crd, &format!("{label}-")], None);
    let r = install(&[]);
    assert!(
        !r.success,
        "the chart installed over a CRD that is not nodeimage's"
    );
    assert!(
        r.text()
            .contains(&format!("CRD {crd} exists and is not nodeimage's"))
            && r.text().contains("docs/migration.md"),
        "the refusal names the CRD and the guide:\n{}",
        r.text()
    );
    let r = install(&["--set", "takeOver=true"]);
    assert!(
        r.success,
        "takeOver=true does not let the chart install:\n{}",
        r.text()
    );

    // docs/migration.md's CRD step makes the CRDs nodeimage's again.
    c.kubectl_ok(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &chart_dir.join("crds").to_string_lossy(),
        ],
        None,
    );
    let r = install(&[]);
    assert!(
        r.success,
        "after the CRD step the chart still refuses:\n{}",
        r.text()
    );
}

/// `kubectl auth can-i ARGS` as `who` must answer `want`.
fn can_i(c: &Cluster, who: &TokenConfig, name: &str, want: &str, args: &[&str]) {
    let mut all = vec!["auth", "can-i"];
    all.extend(args);
    let got = who.kubectl(c, &all).stdout.trim().to_string();
    assert_eq!(got, want, "{name}: kubectl auth can-i {args:?}");
}

/// `r` must have been refused as Forbidden.
fn forbidden(r: &helm::Run, what: &str) {
    assert!(
        !r.success,
        "{what}: expected Forbidden, but it succeeded: {}",
        r.text()
    );
    assert!(
        r.text().to_lowercase().contains("forbidden"),
        "{what}: expected Forbidden, got: {}",
        r.text()
    );
}

fn ok(r: &helm::Run, what: &str) {
    assert!(r.success, "{what}: expected success, got: {}", r.text());
}

/// Deletes the test release and what it used (also on failure).
fn cleanup_release(c: &Cluster, release_yaml: &str) {
    let _ = c.kubectl(
        &[
            "delete",
            "node",
            FAKE_NI,
            OTHER_NI,
            "--ignore-not-found",
            "--wait=false",
        ],
        None,
    );
    let _ = c.kubectl(
        &[
            "delete",
            "nodeimage",
            FAKE_NI,
            OTHER_NI,
            "--ignore-not-found",
            "--wait=false",
        ],
        None,
    );
    let _ = c.kubectl(
        &["delete", "--ignore-not-found", "--wait=false", "-f", "-"],
        Some(release_yaml),
    );
    let _ = c.kubectl(
        &[
            "delete",
            "pods",
            "--all",
            "-n",
            NS,
            "--force",
            "--grace-period=0",
        ],
        None,
    );
    let _ = c.kubectl(
        &[
            "delete",
            "namespace",
            NS,
            SECRETS_NS,
            OTHER_NS,
            "--ignore-not-found",
            "--wait=false",
        ],
        None,
    );
    let gone = || {
        let r = c.kubectl(
            &[
                "get",
                "namespace",
                NS,
                SECRETS_NS,
                OTHER_NS,
                "--ignore-not-found",
                "-o",
                "name",
            ],
            None,
        );
        r.stdout.trim().is_empty()
    };
    for _ in 0..240 {
        if gone() {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!("cleanup: the chart test's namespaces are still present after 120s");
}

/// The chart rendered with `values` and applied as the test release, in its
/// namespaces, after removing leftovers of an interrupted run; the release
/// and the namespaces go when the returned guard drops.
fn applied_release(c: &Cluster, values: &[&str]) -> (String, Cleanup) {
    let release = rendered(c, values);
    cleanup_release(c, &release);
    let mut cleanup = Cleanup::default();
    let (cc, ry) = (c.clone(), release.clone());
    cleanup.defer("delete the test release", move || cleanup_release(&cc, &ry));
    for n in [NS, SECRETS_NS, OTHER_NS] {
        c.kubectl_ok(&["create", "namespace", n], None);
        c.kubectl_ok(
            &["label", "namespace", n, "nodeimage.dev/chart-test=true"],
            None,
        );
    }
    c.kubectl_ok(&["apply", "-f", "-"], Some(&release));
    (release, cleanup)
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_rbac_node_identity_and_the_real_daemon() {
    let c = Cluster::load();
    let work = tempfile::tempdir().expect("work dir");
    let release_values = [
        "--set",
        &format!("secretsNamespace={SECRETS_NS}"),
        "--set",
        "controller.replicas=2",
        "--set",
        "controller.leaderElection.enabled=true",
    ]
    .map(str::to_string);
    let values: Vec<&str> = release_values.iter().map(String::as_str).collect();
    let (_, mut cleanup) = applied_release(&c, &values);

    // A dockerconfigjson pull secret for the auth registry, in the secrets
    // namespace (as the controller copies it) and in another namespace.
    let auth_registry = c.var("NODEIMAGE_AUTH_REGISTRY");
    let (user, password) = (
        c.var("NODEIMAGE_AUTH_USER"),
        c.var("NODEIMAGE_AUTH_PASSWORD"),
    );
    let config =
        json!({"auths": {auth_registry.clone(): {"username": user, "password": password}}});
    let config_file = work.path().join("dockerconfig.json");
    std::fs::write(&config_file, config.to_string()).expect("write the docker config");
    for n in [SECRETS_NS, OTHER_NS] {
        c.kubectl_ok(
            &[
                "create",
                "secret",
                "generic",
                PULL_SECRET,
                "-n",
                n,
                "--type=kubernetes.io/dockerconfigjson",
                &format!("--from-file=.dockerconfigjson={}", config_file.display()),
            ],
            None,
        );
    }

    // The daemon's tokens are bound to a Node, as kubelet's pod tokens are.
    // The fake Node (no kubelet) exists only so that a token can be bound to it.
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": FAKE_NI, "labels": {"nodeimage.dev/chart-test": "true"}}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&node.to_string()));
    let dir = work.path();
    let bound = node_token_args(&c, NS, DAEMON_SA, FAKE_NI);
    let bound: Vec<&str> = bound.iter().map(String::as_str).collect();
    let daemon = TokenConfig::create(&c, dir, "daemon", NS, DAEMON_SA, &bound);
    let bound = node_token_args(&c, NS, DAEMON_SA, "node-1");
    let bound: Vec<&str> = bound.iter().map(String::as_str).collect();
    let daemon_node1 = TokenConfig::create(&c, dir, "daemon-node-1", NS, DAEMON_SA, &bound);
    let unbound = TokenConfig::create(&c, dir, "daemon-unbound", NS, DAEMON_SA, &[]);
    let controller = TokenConfig::create(&c, dir, "controller", NS, CONTROLLER_SA, &[]);
    let who = daemon.kubectl(
        &c,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(
        who.stdout.trim(),
        format!("system:serviceaccount:{NS}:{DAEMON_SA}"),
        "{}",
        who.text()
    );

    // The fake NodeImages the daemon works on.
    for ni in [FAKE_NI, OTHER_NI] {
        let obj = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
            "metadata": {"name": ni, "labels": {"apps.kruise.io/fake-nodeimage": "true", "nodeimage.dev/chart-test": "true"}},
            "spec": {}});
        c.kubectl_ok(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&obj.to_string()),
        );
    }
    for n in ["node-1", "node-2"] {
        if !c.kubectl(&["get", "nodeimage", n], None).success {
            let obj = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage", "metadata": {"name": n}, "spec": {}});
            if c.kubectl(&["create", "-f", "-"], Some(&obj.to_string()))
                .success
            {
                let (cc, n) = (c.clone(), n.to_string());
                cleanup.defer("delete a NodeImage made here", move || {
                    let _ = cc.kubectl(&["delete", "nodeimage", &n, "--ignore-not-found"], None);
                });
            }
        }
    }

    // Node identity: the policy takes effect once the API server loaded it.
    let refused = wait_for(
        "the node-identity policy to refuse another node's NodeImage",
        Duration::from_secs(60),
        || {
            let r = daemon.status_patch(&c, OTHER_NI, "?dryRun=All");
            (!r.success).then_some(r)
        },
    );
    assert!(
        refused.text().contains(r#""code": 403"#)
            && refused.text().contains(&format!(
                "may write only NodeImage {FAKE_NI}, not {OTHER_NI}"
            )),
        "a token of node {FAKE_NI} on NodeImage {OTHER_NI}'s status: {}",
        refused.text()
    );
    ok(
        &daemon.status_patch(&c, FAKE_NI, "?dryRun=All"),
        "a token bound to the fake node patches its own NodeImage (dry run)",
    );
    let r = daemon_node1.status_patch(&c, "node-2", "?dryRun=All");
    assert!(
        !r.success
            && r.text()
                .contains("may write only NodeImage node-1, not node-2"),
        "node-1's token on node-2's NodeImage status: {}",
        r.text()
    );
    ok(
        &daemon_node1.status_patch(&c, "node-1", "?dryRun=All"),
        "node-1's token on node-1's NodeImage (dry run)",
    );
    let r = unbound.status_patch(&c, FAKE_NI, "?dryRun=All");
    assert!(
        !r.success && r.text().contains("the token is not bound to a node"),
        "an unbound daemon token: {}",
        r.text()
    );
    ok(
        &daemon.status_patch(&c, FAKE_NI, ""),
        "the daemon patches its node's NodeImage status",
    );
    let desired = c.kubectl_ok(
        &[
            "get",
            "nodeimage",
            FAKE_NI,
            "-o",
            "jsonpath={.status.desired}",
        ],
        None,
    );
    assert_eq!(desired.trim(), "0", "the daemon's status patch stuck");

    // The daemon's other permissions.
    ok(
        &daemon.kubectl(&c, &["get", "nodeimage", FAKE_NI]),
        "daemon gets a NodeImage",
    );
    ok(
        &daemon.kubectl(
            &c,
            &[
                "get",
                "nodeimages",
                "--field-selector",
                &format!("metadata.name={FAKE_NI}"),
            ],
        ),
        "daemon lists NodeImages by field selector",
    );
    ok(
        &daemon.kubectl(&c, &["get", "secret", PULL_SECRET, "-n", SECRETS_NS]),
        "daemon gets a secret in the secrets namespace",
    );
    forbidden(
        &daemon.kubectl(&c, &["get", "secret", PULL_SECRET, "-n", OTHER_NS]),
        "daemon gets a secret in another namespace",
    );
    forbidden(
        &daemon.kubectl(&c, &["get", "secret", PULL_SECRET, "-n", NS]),
        "daemon gets a secret in the release namespace",
    );
    forbidden(
        &daemon.kubectl(&c, &["get", "secrets", "-n", SECRETS_NS]),
        "daemon lists secrets",
    );
    forbidden(
        &daemon.kubectl(
            &c,
            &[
                "patch",
                "nodeimage",
                FAKE_NI,
                "--type=merge",
                "-p",
                r#"{"spec":{"images":{"busybox":{"tags":[{"tag":"1.36"}]}}}}"#,
            ],
        ),
        "daemon updates a NodeImage's spec",
    );
    forbidden(
        &daemon.kubectl(&c, &["delete", "nodeimage", FAKE_NI, "--wait=false"]),
        "daemon deletes a NodeImage",
    );
    forbidden(&daemon.kubectl(&c, &["get", "nodes"]), "daemon lists nodes");
    for (want, args) in [
        ("yes", vec!["watch", "nodeimages.apps.kruise.io"]),
        (
            "yes",
            vec!["create", "events.events.k8s.io", "-n", "default"],
        ),
        ("yes", vec!["create", "events", "-n", "default"]),
        ("no", vec!["create", "events.events.k8s.io", "-n", OTHER_NS]),
        ("no", vec!["create", "events", "-n", "kube-system"]),
        ("no", vec!["create", "events.events.k8s.io", "-A"]),
        ("no", vec!["update", "nodeimages.apps.kruise.io"]),
        ("no", vec!["create", "secrets", "-n", SECRETS_NS]),
        ("no", vec!["watch", "secrets", "-n", SECRETS_NS]),
        ("no", vec!["get", "imagepulljobs.apps.kruise.io", "-A"]),
        // The start-up gate: its own Node only, its taint only (the policy).
        ("yes", vec!["patch", "nodes"]),
        ("no", vec!["delete", "nodes"]),
    ] {
        can_i(&c, &daemon, "daemon", want, &args);
    }

    // The controller's ServiceAccount.
    let mut checks: Vec<(&str, Vec<&str>)> = vec![
        ("yes", vec!["list", "nodes"]),
        // The start-up gate: only removing its taint (the admission policy,
        // chart_startup_gate_policy_lets_nodeimage_only_remove_its_taint).
        ("yes", vec!["patch", "nodes"]),
        ("no", vec!["update", "nodes"]),
        ("no", vec!["delete", "nodes"]),
        ("yes", vec!["create", "nodeimages.apps.kruise.io"]),
        ("yes", vec!["delete", "nodeimages.apps.kruise.io"]),
        (
            "yes",
            vec!["patch", "nodeimages.apps.kruise.io", "--subresource=status"],
        ),
        ("yes", vec!["watch", "pods", "-A"]),
        ("no", vec!["create", "pods", "-A"]),
        ("yes", vec!["get", "secrets", "-n", OTHER_NS]),
        ("yes", vec!["watch", "secrets", "-A"]),
        ("no", vec!["create", "secrets", "-n", OTHER_NS]),
        ("no", vec!["delete", "secrets", "-n", OTHER_NS]),
        ("yes", vec!["create", "secrets", "-n", SECRETS_NS]),
        ("yes", vec!["delete", "secrets", "-n", SECRETS_NS]),
        ("yes", vec!["create", "namespaces"]),
        ("no", vec!["delete", "namespaces"]),
        (
            "yes",
            vec!["create", "events.events.k8s.io", "-n", OTHER_NS],
        ),
        ("yes", vec!["patch", "leases.coordination.k8s.io", "-n", NS]),
        (
            "no",
            vec!["patch", "leases.coordination.k8s.io", "-n", "default"],
        ),
    ];
    for r in [
        "imagepulljobs.apps.kruise.io",
        "imagelistpulljobs.apps.kruise.io",
        "imageprepulljobs.operations.kubeedge.io",
        "nodeupgradejobs.operations.kubeedge.io",
    ] {
        checks.push(("yes", vec!["watch", r, "-A"]));
        checks.push(("yes", vec!["patch", r, "-A", "--subresource=status"]));
        checks.push(("yes", vec!["update", r, "-A", "--subresource=finalizers"]));
        // Only ImagePullJobs are created: an ImageListPullJob's children
        // and pre-download's jobs.
        let create = if r.starts_with("imagepulljobs.") {
            "yes"
        } else {
            "no"
        };
        checks.push((create, vec!["create", r, "-A"]));
    }
    // Pre-download reads the workload kinds and never writes them.
    for r in ["deployments.apps", "statefulsets.apps", "daemonsets.apps"] {
        checks.push(("yes", vec!["watch", r, "-A"]));
        checks.push(("no", vec!["patch", r, "-A"]));
        checks.push(("no", vec!["update", r, "-A"]));
    }
    // ...and a workload's ServiceAccount (its Pods' pull secrets), never
    // writing or listing them.
    checks.push(("yes", vec!["get", "serviceaccounts", "-n", "default"]));
    checks.push(("no", vec!["list", "serviceaccounts", "-A"]));
    checks.push(("no", vec!["patch", "serviceaccounts", "-A"]));
    for (want, args) in checks {
        can_i(&c, &controller, "controller", want, &args);
    }
    ok(
        &controller.kubectl(
            &c,
            &[
                "create",
                "secret",
                "generic",
                "chart-test-copy",
                "-n",
                SECRETS_NS,
                "--from-literal=k=v",
            ],
        ),
        "controller creates a secret in the secrets namespace",
    );
    forbidden(
        &controller.kubectl(
            &c,
            &[
                "create",
                "secret",
                "generic",
                "chart-test-copy",
                "-n",
                OTHER_NS,
                "--from-literal=k=v",
            ],
        ),
        "controller creates a secret in another namespace",
    );

    // The real daemon with only the daemon's token.
    let registry = c.var("NODEIMAGE_REGISTRY");
    let repo = format!("chart-test/img-{}", unique("x"));
    let plain = Registry::new(&registry)
        .push_image(&repo, Some("v1"), 4096)
        .expect("push the plain image");
    let authed = Registry::with_basic_auth(
        &auth_registry,
        &c.var("NODEIMAGE_AUTH_USER"),
        &c.var("NODEIMAGE_AUTH_PASSWORD"),
    )
    .push_image(&repo, Some("v1"), 4096)
    .expect("push the private image");
    let denied = format!("{auth_registry}/chart-test/denied-{}", unique("x"));
    let socket = c.socket(0);
    for image in [plain.reference(), authed.reference()] {
        let s = socket.clone();
        cleanup.defer("remove the pulled image", move || {
            let _ = cri::remove_image(&s, &image);
        });
    }
    let spec = json!({"spec": {"images": {
        plain.name.clone(): {"tags": [{"tag": "v1", "imagePullPolicy": "Always"}]},
        authed.name.clone(): {"pullSecrets": [{"namespace": SECRETS_NS, "name": PULL_SECRET}],
                              "tags": [{"tag": "v1", "imagePullPolicy": "Always"}]},
        denied.clone(): {"pullSecrets": [{"namespace": OTHER_NS, "name": PULL_SECRET}],
                         "tags": [{"tag": "v1", "imagePullPolicy": "Always"}]},
    }}});
    c.kubectl_ok(
        &[
            "patch",
            "nodeimage",
            FAKE_NI,
            "--type=merge",
            "-p",
            &spec.to_string(),
        ],
        None,
    );
    let as_daemon = c.with_var("KUBECONFIG", &daemon.kubeconfig.to_string_lossy());
    let mut d = Daemon::start(&as_daemon, FAKE_NI, &socket, work.path(), &[]);
    d.wait_readyz(200, Duration::from_secs(60));
    let phases = wait_for(
        "the daemon to finish the three tags",
        Duration::from_secs(120),
        || {
            let ni = nodeimage_tests::nodeimage::get(&c, FAKE_NI)?;
            let of = |image: &str| {
                let st = nodeimage_tests::kruise::status_tag(&ni, image, "v1")?;
                let phase = st["phase"].as_str()?.to_string();
                matches!(phase.as_str(), "Succeeded" | "Failed").then(|| {
                    (
                        phase,
                        st["message"].as_str().unwrap_or_default().to_string(),
                    )
                })
            };
            Some((of(&plain.name)?, of(&authed.name)?, of(&denied)?))
        },
    );
    assert_eq!(
        phases.0.0, "Succeeded",
        "{}:v1 with the token: {}",
        plain.name, phases.0.1
    );
    assert_eq!(
        phases.1.0, "Succeeded",
        "{}:v1 with the secret in {SECRETS_NS}: {}",
        authed.name, phases.1.1
    );
    assert_eq!(
        phases.2.0, "Failed",
        "{denied}:v1 with the secret in {OTHER_NS}"
    );
    assert!(
        phases.2.1.to_lowercase().contains("forbidden"),
        "{denied}:v1 failed, but not for a forbidden secret read: {}",
        phases.2.1
    );
    assert!(
        cri::image_status(&socket, &plain.reference())
            .ok()
            .flatten()
            .is_some(),
        "{} is not in node-1's containerd although its status says Succeeded",
        plain.reference()
    );
    let log = d.log_text();
    let other: Vec<&str> = log
        .lines()
        .filter(|l| l.to_lowercase().contains("forbidden"))
        .filter(|l| !l.contains(&format!("{OTHER_NS}/{PULL_SECRET}")))
        .collect();
    assert!(
        other.is_empty(),
        "permission errors besides the expected one: {other:?}"
    );
}

/// The start-up taint's key (the chart's default).
const GATE_TAINT: &str = "nodeimage.dev/images-pending";

/// `who` JSON-patches Node `node` with `ops` (`dry`: server-side dry run).
fn node_patch(
    c: &Cluster,
    who: &TokenConfig,
    node: &str,
    ops: serde_json::Value,
    dry: bool,
) -> helm::Run {
    let ops = ops.to_string();
    let mut args = vec!["patch", "node", node, "--type=json", "-p", ops.as_str()];
    if dry {
        args.push("--dry-run=server");
    }
    who.kubectl(c, &args)
}

/// `r` must have been refused by the start-up gate policy, saying `why`.
fn refused_by_gate(r: &helm::Run, why: &str, what: &str) {
    forbidden(r, what);
    assert!(
        r.text().contains(why),
        "{what}: expected {why:?} in: {}",
        r.text()
    );
}

/// The taint keys of Node `node`, space-separated.
fn taint_keys(c: &Cluster, node: &str) -> String {
    c.kubectl_ok(
        &["get", "node", node, "-o", "jsonpath={.spec.taints[*].key}"],
        None,
    )
    .trim()
    .to_string()
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_startup_gate_policy_lets_nodeimage_only_remove_its_taint() {
    let c = Cluster::load();
    let work = tempfile::tempdir().expect("work dir");
    let values = [
        "--set".to_string(),
        format!("secretsNamespace={SECRETS_NS}"),
    ];
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let (release, cleanup) = applied_release(&c, &values);
    expect_in(
        &release,
        "--startup-gate-taint=nodeimage.dev/images-pending",
        "controller args",
    );
    expect_in(&release, "--startup-gate-timeout=10m", "controller args");

    // Two fake Nodes (no kubelet), registered with the start-up taint and another one.
    // NoSchedule: the API server stamps NoExecute taints with timeAdded, which
    // a hand-written patch would change (the gate copies the taints as read).
    let other_taint = json!({"key": "dedicated", "value": "x", "effect": "NoSchedule"});
    let gate_taint = json!({"key": GATE_TAINT, "effect": "NoSchedule"});
    for n in [FAKE_NI, OTHER_NI] {
        let node = json!({"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": n, "labels": {"nodeimage.dev/chart-test": "true"}},
            "spec": {"taints": [other_taint.clone(), gate_taint.clone()]}});
        c.kubectl_ok(&["create", "-f", "-"], Some(&node.to_string()));
    }
    let dir = work.path();
    let bound = node_token_args(&c, NS, DAEMON_SA, FAKE_NI);
    let bound: Vec<&str> = bound.iter().map(String::as_str).collect();
    let daemon = TokenConfig::create(&c, dir, "daemon", NS, DAEMON_SA, &bound);
    let controller = TokenConfig::create(&c, dir, "controller", NS, CONTROLLER_SA, &[]);
    // The API server adds node.kubernetes.io/not-ready to a new Node: the
    // patches keep every taint as read but the one they remove.
    let without = |node: &str, key: &str| {
        let taints: serde_json::Value = serde_json::from_str(&c.kubectl_ok(
            &["get", "node", node, "-o", "jsonpath={.spec.taints}"],
            None,
        ))
        .expect("taints as JSON");
        let kept: Vec<&serde_json::Value> = taints
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| t["key"] != key)
            .collect();
        json!([{"op": "replace", "path": "/spec/taints", "value": kept}])
    };
    let only_other = without(FAKE_NI, GATE_TAINT);
    let only_other_there = without(OTHER_NI, GATE_TAINT);
    let only_gate = without(FAKE_NI, "dedicated");
    let only_gate_there = without(OTHER_NI, "dedicated");
    let added = json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": "extra", "effect": "NoSchedule"}}]);
    // A label or a cordon beside an allowed removal of the start-up taint,
    // so the policy's taint rule (checked first) passes whether or not the
    // shared controller's own gate took the taint off meanwhile, and its
    // label or spec rule is what refuses.
    let with = |allowed: &serde_json::Value, op: serde_json::Value| {
        let mut ops = allowed.as_array().cloned().unwrap_or_default();
        ops.push(op);
        serde_json::Value::Array(ops)
    };
    let label_op = json!({"op": "add", "path": "/metadata/labels/extra", "value": "x"});
    let cordon_op = json!({"op": "add", "path": "/spec/unschedulable", "value": true});
    let relabel = with(&only_other, label_op.clone());
    let cordon = with(&only_other, cordon_op.clone());
    let relabel_there = with(&only_other_there, label_op);
    let cordon_there = with(&only_other_there, cordon_op);

    // The policy takes effect once the API server loaded it.
    let first = wait_for(
        "the start-up gate policy to refuse another taint's removal",
        Duration::from_secs(60),
        || {
            let r = node_patch(&c, &daemon, FAKE_NI, only_gate.clone(), true);
            (!r.success).then_some(r)
        },
    );
    refused_by_gate(
        &first,
        "may only remove taint nodeimage.dev/images-pending",
        "daemon removes another taint",
    );
    let may_only = "may only remove taint nodeimage.dev/images-pending";
    let not_own = format!("may write only Node {FAKE_NI}, not {OTHER_NI}");
    for (who, name, ops, why, what) in [
        (
            &daemon,
            FAKE_NI,
            added.clone(),
            may_only,
            "daemon adds a taint",
        ),
        (
            &daemon,
            FAKE_NI,
            relabel.clone(),
            "labels, annotations",
            "daemon changes a label",
        ),
        (
            &daemon,
            FAKE_NI,
            cordon.clone(),
            "the rest of its spec",
            "daemon cordons its node",
        ),
        (
            &daemon,
            OTHER_NI,
            only_other.clone(),
            not_own.as_str(),
            "daemon on another node",
        ),
        (
            &controller,
            OTHER_NI,
            only_gate_there.clone(),
            may_only,
            "controller removes another taint",
        ),
        (
            &controller,
            OTHER_NI,
            added.clone(),
            may_only,
            "controller adds a taint",
        ),
        (
            &controller,
            OTHER_NI,
            relabel_there.clone(),
            "labels, annotations",
            "controller changes a label",
        ),
        (
            &controller,
            OTHER_NI,
            cordon_there.clone(),
            "the rest of its spec",
            "controller cordons a node",
        ),
    ] {
        refused_by_gate(&node_patch(&c, who, name, ops, true), why, what);
    }
    forbidden(
        &daemon.kubectl(&c, &["delete", "node", FAKE_NI, "--dry-run=server"]),
        "daemon deletes its Node",
    );

    // Removing exactly the start-up taint passes, for real.
    ok(
        &node_patch(&c, &daemon, FAKE_NI, only_other.clone(), false),
        "daemon removes the start-up taint from its own Node",
    );
    let keys = taint_keys(&c, FAKE_NI);
    assert!(
        !keys.contains(GATE_TAINT) && keys.contains("dedicated"),
        "{keys}"
    );
    ok(
        &node_patch(&c, &controller, OTHER_NI, only_other_there, false),
        "controller removes the start-up taint after the bound",
    );
    let keys = taint_keys(&c, OTHER_NI);
    assert!(
        !keys.contains(GATE_TAINT) && keys.contains("dedicated"),
        "{keys}"
    );
    // Nothing left to remove: the same taints again are no change, and allowed.
    ok(
        &node_patch(&c, &daemon, FAKE_NI, only_other, true),
        "daemon writes the taints as they are",
    );
    drop(cleanup);
}

/// The UID of the cluster-scoped object `kind/name`.
fn uid_of(c: &Cluster, kind: &str, name: &str) -> String {
    c.kubectl_ok(&["get", kind, name, "-o", "jsonpath={.metadata.uid}"], None)
        .trim()
        .to_string()
}

/// The chart's API Priority and Fairness objects: what the values render
/// and refuse, and, applied, that the API server classifies the
/// controller's and the daemon's requests into them (the UIDs it answers
/// every request with) and nobody else's.
#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_api_priority_classifies_nodeimages_requests() {
    let c = Cluster::load();
    let flowcontrol = "flowcontrol.apiserver.k8s.io/v1";
    let off = rendered(&c, &["--set", "apiPriority.enabled=false"]);
    expect_not_in(&off, flowcontrol, "apiPriority.enabled=false");
    let single = rendered(
        &c,
        &[
            "--set",
            "controller.replicas=1",
            "--set",
            "controller.leaderElection.enabled=false",
        ],
    );
    expect_not_in(
        &single,
        "name: leader-election",
        "no Lease, no Lease schema",
    );
    for (what, message, args) in [
        (
            "lendablePercent 150",
            "/apiPriority/lendablePercent",
            ["--set", "apiPriority.lendablePercent=150"],
        ),
        (
            "0 queues",
            "/apiPriority/queues",
            ["--set", "apiPriority.queues=0"],
        ),
        (
            "a precedence behind service-accounts",
            "/apiPriority/matchingPrecedence",
            ["--set", "apiPriority.matchingPrecedence=9000"],
        ),
        (
            "a precedence ahead of the node schemas",
            "/apiPriority/matchingPrecedence",
            ["--set", "apiPriority.matchingPrecedence=400"],
        ),
        (
            "a hand larger than the queues",
            "apiPriority.handSize (100) must not exceed apiPriority.queues (64)",
            ["--set", "apiPriority.handSize=100"],
        ),
        (
            "a misspelt key",
            "additional properties 'queue' not allowed",
            ["--set", "apiPriority.queue=3"],
        ),
    ] {
        let r = render(&c, RELEASE, NS, &args);
        assert!(!r.success, "the chart accepted {what} ({args:?})");
        assert!(
            r.text().contains(message),
            "refusing {what}: expected {message:?} in:\n{}",
            r.text()
        );
    }

    let values = [
        "--set".to_string(),
        format!("secretsNamespace={SECRETS_NS}"),
    ];
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    let (release, cleanup) = applied_release(&c, &values);
    assert_eq!(
        release.matches(flowcontrol).count(),
        4,
        "a level, 3 schemas"
    );
    expect_in(
        &release,
        "name: leader-election",
        "the Lease schema's level",
    );
    let level = uid_of(&c, "prioritylevelconfiguration", "chart-test-nodeimage");
    let leader_level = uid_of(&c, "prioritylevelconfiguration", "leader-election");
    let schema = |name: &str| uid_of(&c, "flowschema", &format!("chart-test-nodeimage-{name}"));
    let (controller_fs, daemon_fs, lease_fs) = (
        schema("controller"),
        schema("daemon"),
        schema("leader-election"),
    );
    let service_accounts = uid_of(&c, "flowschema", "service-accounts");

    let dir = tempfile::tempdir().expect("work dir");
    let controller = TokenConfig::create(&c, dir.path(), "controller", NS, CONTROLLER_SA, &[]);
    let daemon = TokenConfig::create(&c, dir.path(), "daemon", NS, DAEMON_SA, &[]);
    c.kubectl_ok(
        &["create", "serviceaccount", "chart-test-other", "-n", NS],
        None,
    );
    let other = TokenConfig::create(&c, dir.path(), "other", NS, "chart-test-other", &[]);

    // The API server takes new FlowSchemas up within seconds.
    let want = |fs: &str, pl: &str| (fs.to_string(), pl.to_string());
    let got = |who: &TokenConfig, path: &str| {
        let r = who.classify(&c, path);
        (r.flow_schema, r.priority_level)
    };
    wait_for(
        "the API server to classify by the chart's FlowSchemas",
        Duration::from_secs(60),
        || (got(&controller, "/version") == want(&controller_fs, &level)).then_some(()),
    );
    let lease = format!("/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/nodeimage-controller");
    let own_ni =
        format!("/apis/apps.kruise.io/v1alpha1/nodeimages?fieldSelector=metadata.name%3D{FAKE_NI}");
    for (who, name, path, fs, pl) in [
        (
            &controller,
            "controller",
            "/version",
            &controller_fs,
            &level,
        ),
        (
            &controller,
            "controller",
            "/api/v1/nodes?limit=1",
            &controller_fs,
            &level,
        ),
        (
            &controller,
            "controller",
            "/apis/apps.kruise.io/v1alpha1/imagepulljobs?limit=1",
            &controller_fs,
            &level,
        ),
        (
            &controller,
            "controller",
            lease.as_str(),
            &lease_fs,
            &leader_level,
        ),
        (&daemon, "daemon", "/version", &daemon_fs, &level),
        (&daemon, "daemon", own_ni.as_str(), &daemon_fs, &level),
        // Refused by RBAC, classified all the same: APF runs before authorization.
        (&daemon, "daemon", "/api/v1/nodes", &daemon_fs, &level),
    ] {
        assert_eq!(got(who, path), want(fs, pl), "{name}'s GET {path}");
    }
    // Another ServiceAccount of the same namespace stays where it was.
    let r = other.classify(&c, "/version");
    assert_eq!(
        r.flow_schema, service_accounts,
        "another ServiceAccount's GET /version"
    );
    assert_ne!(
        r.priority_level, level,
        "another ServiceAccount's priority level"
    );
    drop(cleanup);
}
