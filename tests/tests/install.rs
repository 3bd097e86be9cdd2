//! nodeimage installed as a platform team installs it: the Helm chart with
//! `helm install`, its images from the local registry, pods on the local
//! cluster's two real kubelet nodes (kubelet-1 on containerd 2.2, kubelet-2
//! on 1.7 with layer discard; each with containerd at the chart's default
//! paths in its own mount namespace, so the chart's containerd values stay
//! at their defaults). The steps are the ones docs/install.md gives
//! ("On your cluster"); keep the two in step.
//!
//!   1. the process-run nodeimage of the e2e tests is stopped (two controllers
//!      must not reconcile the same objects) and nodeimage's CRDs are deleted,
//!      so Helm installs them as on a new cluster;
//!   2. the release namespace is created with the Pod Security label the
//!      daemon's hostPath needs, and `helm install --wait` of the *previous*
//!      chart (tests/fixtures: what users run before they upgrade) runs the
//!      controller (2 replicas, one leader) and the daemon (a pod on each
//!      real node); the local API server admits critical priority classes only
//!      under a quota, as GKE does, so the quota that chart needed is made by
//!      hand first, as its users had to;
//!   3. an ImagePullJob in a tenant namespace pulls an image of the auth
//!      registry with the tenant's pull secret, through both daemon pods and
//!      the nodes' containerds;
//!   4. with the auth registry stopped, a Pod of that image
//!      (imagePullPolicy: IfNotPresent) reaches Running on each real node:
//!      kubelet uses what nodeimage pulled;
//!   5. the README's CRD upgrade command works on CRDs that Helm installed;
//!   6. the release (release/release.sh, `make release`, run before this):
//!      the daemon image's signature is verified as docs/install.md says,
//!      then docs/release.md's marked install block, run as written with
//!      the release's registry, version and digests (its CRDs, then `helm
//!      upgrade --install --reset-then-reuse-values` to the released chart
//!      from its OCI reference with both images by digest),
//!      rolls the daemon across both nodes while a slow pull is in flight
//!      on both, and the job still completes; the hand-made quota then goes
//!      and a new daemon pod is admitted under the chart's own
//!      (daemon.priorityQuota);
//!   7. the leader's node is cordoned and the controller's pods there
//!      deleted: a pod on the other node leads and a new job completes;
//!   8. the node pool replaced: both Nodes leave and join again with the
//!      start-up taint while the controller's pods are gone; the controller
//!      comes back on a gated node and opens both;
//!   9. uninstall with docs/install.md's marked block, run as written (the
//!      jobs, pinning off and a wait for every daemon to have unpinned,
//!      `helm uninstall`, the start-up taint): a hand-written NodeImage
//!      entry pinned on each real node beforehand, no image carries
//!      nodeimage's pin label in either real node's containerd after it
//!      (ctr), nothing is left stuck on a finalizer, and the CRDs stay.
//!
//! One test, its steps in order (they share the release): it runs alone and
//! last in tests/run-all.sh, since it replaces the e2e tests' nodeimage and
//! deletes every nodeimage object; its name starts with `install_`, which
//! the main e2e step skips. Needs the cluster with its two real nodes
//! (tests/cluster/real-node.sh 1 and 2), the release (release/release.sh: images,
//! signatures, the chart in the registry; `RELEASE_DIR`, default dist/), and
//! helm (tests/chart.sh installs it; `NODEIMAGE_HELM`). Support code:
//! tests/src/install.rs. `KEEP_INSTALL_TEST=1` leaves the release and the
//! namespaces in place at the end.

use nodeimage_tests::docs;
use nodeimage_tests::install::{Install, NS, RELEASE, SECRETS_NS, TENANT, text};
use std::time::Instant;

/// The chart users upgrade from (tests/fixtures/README.md).
const PREVIOUS_CHART: &str = "tests/fixtures/nodeimage-chart-28f48b6.tgz";
const CHART: &str = "charts/nodeimage";
/// The label real-node.sh gives the real nodes (the simulated ones run no
/// Pod), escaped for `helm --set`.
const REAL_NODE_LABEL: &str = "nodeimage\\.dev/real-node";

/// What `helm install` made: the workloads' names.
struct Installed {
    controller: String,
    daemon: String,
}

#[test]
#[ignore = "needs the local cluster with its real node, the release and helm (tests/run-all.sh)"]
fn install_with_helm_on_the_real_node() {
    let mut t = Install::load();
    t.step(
        "a clean slate: the e2e tests' nodeimage stopped, nodeimage's CRDs deleted",
        clean_slate,
    );
    let installed = t.step(
        "helm install (docs/install.md, On your cluster)",
        helm_install,
    );
    let app = t.step(
        "an ImagePullJob with a pull secret, pulled by the daemon pod",
        pull_with_a_secret,
    );
    let nodes = t.node_names().join(" and ");
    t.step(
        &format!("the registry stopped, a Pod of that image starts on {nodes}"),
        |t| pod_without_the_registry(t, &app),
    );
    t.step(
        "the README's CRD upgrade command on CRDs Helm installed",
        crd_upgrade_command,
    );
    t.step(
        "the release's daemon image signature, verified as docs/install.md says",
        daemon_signature,
    );
    t.step(
        "docs/release.md's install block: the released chart (OCI) with the images by digest while a pull is in flight",
        |t| upgrade_during_a_pull(t, installed),
    );
    t.step(
        "the leader's node cordoned and its pod deleted: the controller moves to the other node",
        controller_moves,
    );
    t.step(
        "the node pool replaced: every node leaves and joins again with the start-up taint, the controller's pods gone; the controller comes back on a gated node and opens them all",
        every_node_gated,
    );
    t.step(
        "uninstall as docs/install.md says: no nodeimage pin left on either real node",
        uninstall,
    );
}

fn clean_slate(t: &mut Install) {
    t.stop_nodeimage_processes();
    // Finalizers of jobs left by the e2e tests would hold the CRDs' deletion
    // with no controller to clear them: nodeimage's own finalizers are
    // dropped first.
    for kind in [
        "imagepulljobs.apps.kruise.io",
        "imagelistpulljobs.apps.kruise.io",
        "imageprepulljobs.operations.kubeedge.io",
        "nodeupgradejobs.operations.kubeedge.io",
    ] {
        let r = t.kc(&[
            "get",
            kind,
            "-A",
            "-o",
            r#"jsonpath={range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}"#,
        ]);
        let listed = if r.success { r.stdout } else { String::new() };
        for line in listed.lines() {
            // "NAMESPACE NAME", or " NAME" for the cluster-scoped kinds.
            let (ns, name) = match line.trim().split_once(' ') {
                Some((ns, name)) => (ns, name.trim()),
                None => ("", line.trim()),
            };
            if name.is_empty() {
                continue;
            }
            let mut args = vec!["patch", kind, name];
            if !ns.is_empty() {
                args.extend(["-n", ns]);
            }
            args.extend(["--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#]);
            t.kc_silent(&args);
        }
    }
    for f in t.chart_crd_files() {
        let f = Install::show(&f);
        assert!(
            t.kc_quiet(&[
                "delete",
                "-f",
                &f,
                "--ignore-not-found",
                "--wait=true",
                "--timeout=120s"
            ]),
            "deleting the CRD of {f} failed"
        );
    }
    // The e2e tests' controller made the secrets namespace outside Helm,
    // which Helm refuses to adopt (docs/install.md, Uninstalling): remove it.
    assert!(
        t.kc_quiet(&[
            "delete",
            "namespace",
            SECRETS_NS,
            "--ignore-not-found",
            "--wait=true",
            "--timeout=120s"
        ]),
        "deleting namespace {SECRETS_NS} did not finish"
    );
    t.pass("nodeimage CRDs removed; no nodeimage process running");
}

/// The daemon pod on real node `node` (`""` when there is none).
fn daemon_pod(t: &Install, node: &str) -> String {
    let selector = format!("spec.nodeName={node}");
    t.kc_out(&[
        "get",
        "pods",
        "-n",
        NS,
        "-l",
        "app.kubernetes.io/component=daemon",
        "--field-selector",
        &selector,
        "-o",
        "jsonpath={.items[0].metadata.name}",
    ])
}

fn helm_install(t: &mut Install) -> Installed {
    let t: &Install = t;
    let node = t.node.clone();
    t.create_or_apply(&["namespace", NS]);
    t.kc_ok(
        &[
            "label",
            "namespace",
            NS,
            "pod-security.kubernetes.io/enforce=privileged",
            "--overwrite",
        ],
        None,
    );
    // As on GKE (tests/kube/main.go), a Pod of a critical priority class is
    // refused in a namespace with no quota for its class: the chart brings
    // one (daemon.priorityQuota), or the DaemonSet would create no pods.
    let image = format!("--image={}", t.var("NODEIMAGE_PAUSE_IMAGE"));
    let probe = text(&t.kc(&[
        "run",
        "gke-quota-probe",
        "-n",
        NS,
        &image,
        "--restart=Never",
        r#"--overrides={"apiVersion":"v1","spec":{"priorityClassName":"system-node-critical"}}"#,
        "--dry-run=server",
        "-o",
        "name",
    ]));
    assert!(
        probe.contains("insufficient quota to match these scopes"),
        "the local API server admits a system-node-critical Pod without a quota, unlike GKE: {probe}"
    );
    t.pass("a system-node-critical Pod without a quota is refused, as on GKE");
    // What users of the previous chart, which brought no quota, made on GKE.
    t.apply(&format!(
        r#"apiVersion: v1
kind: ResourceQuota
metadata:
  name: by-hand-critical-pods
  namespace: {NS}
spec:
  hard: {{pods: "100"}}
  scopeSelector:
    matchExpressions:
      - {{scopeName: PriorityClass, operator: In, values: [system-node-critical]}}
"#
    ));
    // The local cluster's specifics: pods go to the real nodes only (the
    // simulated nodes have no kubelet). Each real node has its containerd
    // at the chart's default paths (in its own mount namespace), so the
    // DaemonSet mounts the same hostPaths on every node, as on a fleet.
    let prefix = t.var("NODEIMAGE_IMAGE_PREFIX");
    let tag = t.var("NODEIMAGE_IMAGE_TAG");
    let values = [
        format!("controller.image.repository={prefix}/controller"),
        format!("controller.image.tag={tag}"),
        format!("daemon.image.repository={prefix}/daemon"),
        format!("daemon.image.tag={tag}"),
        format!("secretsNamespace={SECRETS_NS}"),
        "logFormat=text".to_string(),
    ];
    // Label values are strings (the chart's schema says so; `--set` would
    // make `true` a boolean).
    let selectors = [
        format!("controller.nodeSelector.{REAL_NODE_LABEL}=true"),
        format!("daemon.nodeSelector.{REAL_NODE_LABEL}=true"),
    ];
    let previous = Install::show(&t.repo_path(PREVIOUS_CHART));
    let mut args = vec!["install", RELEASE, &previous, "-n", NS];
    for v in &values {
        args.extend(["--set", v.as_str()]);
    }
    for v in &selectors {
        args.extend(["--set-string", v.as_str()]);
    }
    args.extend(["--wait", "--timeout", "5m"]);
    let t0 = Instant::now();
    let install = t.helm(&args);
    assert!(
        install.success,
        "helm install of the previous chart failed: {}",
        text(&install)
    );
    let file = PREVIOUS_CHART.rsplit('/').next().unwrap_or(PREVIOUS_CHART);
    t.pass(&format!(
        "helm install --wait of the previous chart ({file}) returned in {}s",
        t0.elapsed().as_secs()
    ));
    assert!(
        install.text().contains("rollout status"),
        "helm install printed no NOTES: {}",
        text(&install)
    );
    for crd in [
        "nodeimages.apps.kruise.io",
        "imagepulljobs.apps.kruise.io",
        "imagelistpulljobs.apps.kruise.io",
        "imageprepulljobs.operations.kubeedge.io",
        "nodeupgradejobs.operations.kubeedge.io",
    ] {
        assert!(
            t.kc_silent(&["get", "crd", crd]),
            "helm install did not create CRD {crd}"
        );
    }
    t.pass("Helm installed the 5 CRDs");

    let (mut controller, mut daemon) =
        (format!("{RELEASE}-controller"), format!("{RELEASE}-daemon"));
    if !t.kc_silent(&["get", "deploy", "-n", NS, &controller]) {
        controller = format!("{RELEASE}-nodeimage-controller");
        daemon = format!("{RELEASE}-nodeimage-daemon");
    }
    assert!(
        t.rollout_status(NS, &format!("deploy/{controller}"), "180s"),
        "the controller Deployment did not become available"
    );
    let ready = t.kc_out(&[
        "get",
        "deploy",
        "-n",
        NS,
        &controller,
        "-o",
        "jsonpath={.status.readyReplicas}",
    ]);
    assert!(ready == "2", "controller: {ready} ready replicas, want 2");
    assert!(
        t.rollout_status(NS, &format!("ds/{daemon}"), "180s"),
        "the daemon DaemonSet did not become ready"
    );
    let mut pods = vec![];
    for n in &t.nodes {
        let p = daemon_pod(t, &n.name);
        assert!(!p.is_empty(), "no daemon pod on {}", n.describe());
        pods.push(format!("{p} on {}", n.describe()));
    }
    t.pass(&format!(
        "controller 2/2 ready; daemon pods ready: {} (system-node-critical, under the hand-made quota)",
        pods.join(", ")
    ));

    let holder = |t: &Install| {
        t.kc(&[
            "get",
            "lease",
            "-n",
            NS,
            "nodeimage-controller",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
    };
    t.wait_for("a controller pod holds the leader Lease", 60, || {
        let h = holder(t);
        let name = h.stdout.trim();
        if name.is_empty() {
            return Err(h.stderr);
        }
        let pod = t.kc(&["get", "pod", "-n", NS, name]);
        if pod.success {
            Ok(())
        } else {
            Err(format!("{}{}", h.stderr, pod.text()))
        }
    });
    let leader = holder(t).stdout.trim().to_string();
    t.pass(&format!("one leader: {leader}"));
    t.wait_for(
        &format!("the controller creates NodeImage {node}"),
        60,
        || {
            let r = t.kc(&["get", "nodeimage", &node]);
            if r.success { Ok(()) } else { Err(r.text()) }
        },
    );
    t.pass(&format!(
        "NodeImage {node} exists (the controller in a pod reaches the API server)"
    ));
    Installed { controller, daemon }
}

/// An ImagePullJob's `.status`, for messages.
fn job_status(t: &Install, name: &str) -> String {
    text(&t.kc(&["get", "ipj", "-n", TENANT, name, "-o", "jsonpath={.status}"]))
}

/// Waits up to `timeout` for ImagePullJob `name` to be Complete with every
/// real node succeeded; `what` starts the failure messages.
fn wait_complete(t: &Install, name: &str, timeout: &str, incomplete: &str, what: &str) {
    let job = format!("ipj/{name}");
    let timeout = format!("--timeout={timeout}");
    assert!(
        t.kc_quiet(&[
            "wait",
            "-n",
            TENANT,
            &job,
            "--for=condition=Complete",
            &timeout
        ]),
        "{incomplete}: {}",
        job_status(t, name)
    );
    let succeeded = t.kc_out(&[
        "get",
        "ipj",
        "-n",
        TENANT,
        name,
        "-o",
        "jsonpath={.status.succeeded}",
    ]);
    let want = t.nodes.len().to_string();
    assert!(
        succeeded == want,
        "{what}: succeeded={succeeded}, want {want}: {}",
        job_status(t, name)
    );
}

fn pull_with_a_secret(t: &mut Install) -> String {
    let t: &Install = t;
    let auth = t.var("NODEIMAGE_AUTH_REGISTRY");
    let (user, password) = (
        t.var("NODEIMAGE_AUTH_USER"),
        t.var("NODEIMAGE_AUTH_PASSWORD"),
    );
    let app = format!("{auth}/install/app:v1");
    let push = t.tool(
        "skopeo",
        &[
            "copy",
            "--quiet",
            "--src-tls-verify=false",
            "--dest-tls-verify=false",
            "--dest-creds",
            &format!("{user}:{password}"),
            &format!("docker://{}", t.var("NODEIMAGE_PAUSE_IMAGE")),
            &format!("docker://{app}"),
        ],
    );
    assert!(push.success, "pushing {app} failed: {}", text(&push));
    let cri = t.var("NODEIMAGE_CRI");
    for n in &t.nodes {
        t.tool(&cri, &["--socket", &Install::show(&n.socket), "rmi", &app]);
    }
    let names = t.node_names().join(", ");
    t.create_or_apply(&["namespace", TENANT]);
    t.create_or_apply(&[
        "secret",
        "docker-registry",
        "-n",
        TENANT,
        "regcred",
        &format!("--docker-server={auth}"),
        &format!("--docker-username={user}"),
        &format!("--docker-password={password}"),
    ]);
    t.apply(&format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: app
  namespace: {TENANT}
spec:
  image: {app}
  pullSecrets: [regcred]
  selector:
    names: [{names}]
  completionPolicy:
    type: Always
    activeDeadlineSeconds: 600
"#
    ));
    wait_complete(
        t,
        "app",
        "300s",
        "the ImagePullJob did not complete",
        "ImagePullJob",
    );
    for n in &t.nodes {
        let socket = Install::show(&n.socket);
        let status = t.tool(&cri, &["--socket", &socket, "status", &app]);
        if !status.stderr.is_empty() {
            nodeimage_tests::install::say(status.stderr.trim_end());
        }
        assert!(
            status.success,
            "{app} is not in the containerd of {} although the job succeeded",
            n.describe()
        );
    }
    t.pass(&format!(
        "ImagePullJob app Complete; {app} is in the containerd of {names}"
    ));
    app
}

fn pod_without_the_registry(t: &mut Install, app: &str) {
    let auth = t.var("NODEIMAGE_AUTH_REGISTRY");
    let port = auth.rsplit(':').next().unwrap_or(&auth);
    let registry = format!("registry-{port}");
    let cmd = t.recorded_cmd(&registry);
    assert!(
        !cmd.is_empty(),
        "no recorded command of {registry} in {}",
        Install::show(&t.state.join("pids"))
    );
    t.stop_daemon(&registry, &cmd);
    let url = format!("http://{auth}/v2/");
    let code = t
        .tool(
            "curl",
            &[
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "3",
                &url,
            ],
        )
        .stdout;
    assert!(
        code == "000",
        "the auth registry still answers (HTTP {code})"
    );
    for n in &t.nodes {
        let (node, pod) = (&n.name, format!("app-{}", n.index));
        t.apply(&format!(
            r#"apiVersion: v1
kind: Pod
metadata:
  name: {pod}
  namespace: {TENANT}
spec:
  nodeSelector:
    kubernetes.io/hostname: {node}
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: {app}
      imagePullPolicy: IfNotPresent
"#
        ));
        assert!(
            t.kc_quiet(&[
                "wait",
                "-n",
                TENANT,
                &format!("pod/{pod}"),
                "--for=jsonpath={.status.phase}=Running",
                "--timeout=120s"
            ]),
            "Pod {pod} did not reach Running on {}: {}",
            n.describe(),
            text(&t.kc(&["get", "pod", "-n", TENANT, &pod, "-o", "jsonpath={.status}"]))
        );
        t.pass(&format!(
            "Pod {pod} Running on {} with the registry down",
            n.describe()
        ));
    }
    t.start_stopped_daemon();
    let t: &Install = t;
    t.wait_for("the auth registry to answer again", 30, || {
        let r = t.tool("curl", &["-s", "-o", "/dev/null", "--max-time", "2", &url]);
        if r.success { Ok(()) } else { Err(r.text()) }
    });
    for n in &t.nodes {
        let pod = format!("app-{}", n.index);
        t.kc_ok(&["delete", "pod", "-n", TENANT, &pod, "--wait=false"], None);
    }
}

fn crd_upgrade_command(t: &mut Install) {
    let chart = Install::show(&t.repo_path(CHART));
    let crds = t.helm(&["show", "crds", &chart]);
    assert!(
        crds.success,
        "helm show crds | kubectl apply --server-side --force-conflicts failed: {}",
        text(&crds)
    );
    if !crds.stderr.is_empty() {
        nodeimage_tests::install::say(crds.stderr.trim_end());
    }
    let out = t.kc_in(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        &crds.stdout,
    );
    assert!(
        out.success,
        "helm show crds | kubectl apply --server-side --force-conflicts failed: {}",
        text(&out)
    );
    let applied = out
        .text()
        .lines()
        .filter(|l| l.contains("serverside-applied"))
        .count();
    // The current chart's CRDs: the previous chart's 5, and ImageRemovalJob's,
    // which this upgrade creates.
    assert!(
        applied == 6,
        "the CRD upgrade command applied {applied} CRDs, not 6: {}",
        text(&out)
    );
    assert!(
        t.kc_silent(&["get", "crd", "imageremovaljobs.nodeimage.dev"]),
        "the CRD upgrade command did not create ImageRemovalJob's CRD"
    );
    t.pass("helm show crds | kubectl apply --server-side --force-conflicts: the 5 CRDs applied over Helm's, and ImageRemovalJob's created");
}

/// `IMAGE%@*`: the repository of `repo@digest`.
fn repository(image: &str) -> &str {
    image.rsplit_once('@').map_or(image, |(r, _)| r)
}

/// `IMAGE#*@`: the digest of `repo@digest`.
fn digest(image: &str) -> &str {
    image.split_once('@').map_or(image, |(_, d)| d)
}

/// `cosign verify --key` of the release's public key, as docs/release.md
/// says: the daemon image's digest verifies; a digest the release did not
/// sign (the cluster's pause image) does not.
fn daemon_signature(t: &mut Install) {
    let image = t.var("NODEIMAGE_DAEMON_IMAGE");
    let cosign = t.state.join("bin/cosign");
    let public = Install::show(&t.release_dir.join("cosign.pub"));
    let verify = |reference: &str| {
        t.tool(
            &cosign,
            &[
                "verify",
                "--key",
                &public,
                "--insecure-ignore-tlog=true",
                "--allow-http-registry",
                "--allow-insecure-registry",
                reference,
            ],
        )
    };
    let verified = verify(&image);
    assert!(
        verified.success,
        "cosign verify of the daemon image {image}: {}",
        text(&verified)
    );
    let pause = t.var("NODEIMAGE_PAUSE_IMAGE");
    let unsigned = t.tool(
        "skopeo",
        &[
            "inspect",
            "--tls-verify=false",
            "--format",
            "{{.Digest}}",
            &format!("docker://{pause}"),
        ],
    );
    assert!(
        unsigned.success,
        "skopeo inspect {pause}: {}",
        text(&unsigned)
    );
    let other = format!("{}@{}", repository_of_tag(&pause), unsigned.text().trim());
    assert!(
        !verify(&other).success,
        "cosign verified {other}, which the release did not sign"
    );
    t.pass(&format!(
        "cosign verify --key: {image} verified; {other} (not signed) refused"
    ));
}

/// The repository of `repo:tag` (a registry port's colon stays).
fn repository_of_tag(image: &str) -> &str {
    match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => image,
    }
}

/// docs/release.md's marked install block with this release's values: its
/// registry (the directory of the released images, under which release.sh
/// pushed the chart), version and image digests.
fn release_install_script(t: &Install, chart: &str, version: &str) -> String {
    let md = std::fs::read_to_string(t.repo_path("docs/release.md")).expect("read docs/release.md");
    let block = docs::marked_block(&md, "release-install")
        .unwrap_or_else(|e| panic!("docs/release.md: {e}"));
    let controller_image = t.var("NODEIMAGE_CONTROLLER_IMAGE");
    let daemon_image = t.var("NODEIMAGE_DAEMON_IMAGE");
    let registry = repository(&controller_image)
        .strip_suffix("/controller")
        .unwrap_or_else(|| panic!("{controller_image} is not <registry>/controller@<digest>"))
        .to_string();
    assert!(
        repository(&daemon_image) == format!("{registry}/daemon")
            && chart == format!("oci://{registry}/charts/nodeimage"),
        "the release is not laid out as docs/release.md says (<registry>/controller, \
         <registry>/daemon, oci://<registry>/charts/nodeimage): {controller_image}, {daemon_image}, {chart}"
    );
    block
        .with_values(&[
            ("REGISTRY", registry),
            ("VERSION", version.to_string()),
            ("CONTROLLER_DIGEST", digest(&controller_image).to_string()),
            ("DAEMON_DIGEST", digest(&daemon_image).to_string()),
        ])
        .unwrap_or_else(|e| panic!("docs/release.md: {e}"))
}

fn upgrade_during_a_pull(t: &mut Install, installed: Installed) {
    let node = t.node.clone();
    let names = t.node_names();
    let Installed { controller, daemon } = installed;
    let old_pods: Vec<String> = names.iter().map(|n| daemon_pod(t, n)).collect();
    let chart = t.var("NODEIMAGE_CHART");
    let version = t.var("NODEIMAGE_VERSION");
    let work = Install::show(t.work.path());
    let pull = t.helm(&[
        "pull",
        &chart,
        "--version",
        &version,
        "--plain-http",
        "-d",
        &work,
    ]);
    assert!(pull.success, "helm pull {chart} failed: {}", text(&pull));
    let chart_digest = t.var("NODEIMAGE_CHART_DIGEST");
    assert!(
        pull.text().contains(&format!("Digest: {chart_digest}")),
        "the chart in the registry is not the one released ({chart_digest}): {}",
        text(&pull)
    );
    // A ~50 MB image through a proxy at 2 MB/s: about 25 s in flight.
    let registry = t.var("NODEIMAGE_REGISTRY");
    let slow = t.start_slow_proxy(&registry, 2_000_000);
    let t: &Install = t;
    let big = format!("{slow}/big:v1"); // tests/cluster/up.sh's ~50 MB image
    t.apply(&format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: big
  namespace: {TENANT}
spec:
  image: {big}
  selector:
    names: [{}]
  pullPolicy:
    timeoutSeconds: 300
  completionPolicy:
    type: Always
    activeDeadlineSeconds: 900
"#,
        names.join(", ")
    ));
    t.wait_for(&format!("the daemon starts pulling {big}"), 60, || {
        let r = t.kc(&[
            "get",
            "nodeimage",
            &node,
            "-o",
            "jsonpath={.status.pulling}",
        ]);
        let pulling: i64 = r.stdout.trim().parse().unwrap_or(0);
        if pulling >= 1 { Ok(()) } else { Err(r.text()) }
    });
    // docs/release.md's "Installing a release", as written: the CRDs of the
    // released chart, then `helm upgrade --install --reset-then-reuse-values`
    // with both images by digest (the values given at install are kept, the
    // new chart's defaults apply to the rest).
    let controller_image = t.var("NODEIMAGE_CONTROLLER_IMAGE");
    let daemon_image = t.var("NODEIMAGE_DAEMON_IMAGE");
    let upgrade = t.doc_script(&release_install_script(t, &chart, &version));
    assert!(
        upgrade.success,
        "docs/release.md's install block failed: {}",
        text(&upgrade)
    );
    assert!(
        t.rollout_status(NS, &format!("ds/{daemon}"), "180s"),
        "the daemon did not roll"
    );
    assert!(
        t.rollout_status(NS, &format!("deploy/{controller}"), "180s"),
        "the controller did not roll"
    );
    let args = t.kc_out(&[
        "get",
        "deploy",
        "-n",
        NS,
        &controller,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].args}",
    ]);
    assert!(
        args.contains("--skip-nodes-labelled=")
            && args.contains(&format!("--secrets-namespace={SECRETS_NS}")),
        "after the upgrade the controller lacks the new chart's default or the value given at install: {args}"
    );
    let mut rolled = vec![];
    for (n, old) in names.iter().zip(&old_pods) {
        let new = daemon_pod(t, n);
        assert!(
            !new.is_empty() && new != *old,
            "the daemon pod on {n} was not replaced by helm upgrade ({old} -> {new:?})"
        );
        rolled.push(format!("{n}: {old} -> {new}"));
    }
    let dpod = daemon_pod(t, &node);
    let img = t.kc_out(&[
        "get",
        "pod",
        "-n",
        NS,
        &dpod,
        "-o",
        "jsonpath={.spec.containers[0].image}",
    ]);
    assert!(
        img == daemon_image,
        "the new daemon pod runs {img}, not {daemon_image}"
    );
    let cimg = t.kc_out(&[
        "get",
        "deploy",
        "-n",
        NS,
        &controller,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ]);
    assert!(
        cimg == controller_image,
        "the controller runs {cimg}, not {controller_image}"
    );
    t.pass(&format!(
        "helm upgrade rolled the daemon across the nodes during the pull ({}; {img})",
        rolled.join(", ")
    ));
    wait_complete(
        t,
        "big",
        "600s",
        "the in-flight job did not complete after the rollout",
        "in-flight job",
    );
    t.pass(&format!(
        "the pull in flight during the rollout completed (ImagePullJob big Succeeded on {})",
        names.join(" and ")
    ));
    assert!(
        t.kc_silent(&[
            "get",
            "resourcequota",
            "-n",
            NS,
            &format!("{daemon}-priority")
        ]),
        "the upgraded chart made no priority quota"
    );
    t.kc_ok(
        &["delete", "resourcequota", "-n", NS, "by-hand-critical-pods"],
        None,
    );
    t.kc_ok(
        &[
            "delete",
            "pod",
            "-n",
            NS,
            &dpod,
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    );
    let selector = format!("spec.nodeName={node}");
    t.wait_for(
        "a new daemon pod admitted under the chart's quota alone",
        120,
        || {
            let r = t.kc(&[
                "get",
                "pods",
                "-n",
                NS,
                "-l",
                "app.kubernetes.io/component=daemon",
                "--field-selector",
                &selector,
                "-o",
                r#"jsonpath={.items[?(@.status.phase=="Running")].metadata.name}"#,
            ]);
            let p = r.stdout.trim();
            if !p.is_empty() && p != dpod {
                Ok(())
            } else {
                Err(r.text())
            }
        },
    );
    t.pass("the hand-made quota gone, a new system-node-critical daemon pod runs under the chart's quota");
}

/// The leader's pod and the node it runs on (empty when it does not run).
fn leader(t: &Install) -> (String, String) {
    let pod = t.kc_out(&[
        "get",
        "lease",
        "-n",
        NS,
        "nodeimage-controller",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    if pod.is_empty() {
        return (pod, String::new());
    }
    // The Lease names a deleted pod until another takes it: not an error.
    let quiet = |field: &str| {
        let jsonpath = format!("jsonpath={field}");
        let r = t.kc(&["get", "pod", "-n", NS, &pod, "-o", &jsonpath]);
        r.stdout.trim().to_string()
    };
    let (node, phase) = (quiet("{.spec.nodeName}"), quiet("{.status.phase}"));
    let node = if phase == "Running" {
        node
    } else {
        String::new()
    };
    (pod, node)
}

/// The controller moves between the real nodes: the leader's node is
/// cordoned and the controller's pods there deleted; the leader is then a pod on the
/// other node, which still does the work (a new job completes there and
/// on the cordoned node, whose daemon pod stays).
fn controller_moves(t: &mut Install) {
    let t: &Install = t;
    let (pod, from) = leader(t);
    assert!(
        !pod.is_empty() && !from.is_empty(),
        "no leader pod: {pod:?} on {from:?}"
    );
    t.kc_ok(&["cordon", &from], None);
    // Every controller pod there: a replica left on the cordoned node could
    // take the lease and keep the controller where it was.
    let on_from = format!("spec.nodeName={from}");
    t.kc_ok(
        &[
            "delete",
            "pod",
            "-n",
            NS,
            "-l",
            "app.kubernetes.io/component=controller",
            "--field-selector",
            &on_from,
            "--wait=false",
        ],
        None,
    );
    let mut to = String::new();
    t.wait_for(&format!("a controller pod off {from} to lead"), 180, || {
        let (p, n) = leader(t);
        if p != pod && !n.is_empty() && n != from {
            to = n;
            Ok(())
        } else {
            Err(format!("leader {p:?} on {n:?}"))
        }
    });
    let names = t.node_names().join(", ");
    t.apply(&format!(
        r#"apiVersion: apps.kruise.io/v1alpha1
kind: ImagePullJob
metadata:
  name: after-the-move
  namespace: {TENANT}
spec:
  image: {}
  selector:
    names: [{names}]
  completionPolicy:
    type: Always
    activeDeadlineSeconds: 600
"#,
        t.var("NODEIMAGE_PAUSE_IMAGE")
    ));
    wait_complete(
        t,
        "after-the-move",
        "180s",
        "a job made after the controller moved did not complete",
        "after the move",
    );
    t.kc_ok(&["uncordon", &from], None);
    t.pass(&format!(
        "the leader moved from {pod} on {from} to a pod on {to}; a job after the move completed on {names}"
    ));
}

/// kubelet's setting that makes a real node register with the start-up taint.
const REGISTER_GATED: &str =
    "registerWithTaints: [{key: \"nodeimage.dev/images-pending\", effect: NoSchedule}]\n";

/// Runs tests/cluster/real-node.sh for real node `index` with the kubelet
/// settings in `extra` (None: the defaults back).
fn real_node(t: &Install, index: usize, extra: Option<&std::path::Path>) {
    let mut cmd = std::process::Command::new(t.repo_path("tests/cluster/real-node.sh"));
    cmd.arg(index.to_string()).env("NODEIMAGE_STATE", &t.state);
    if let Some(e) = extra {
        cmd.env("NODEIMAGE_KUBELET_EXTRA_CONFIG", e);
    }
    let out = cmd.output().expect("run tests/cluster/real-node.sh");
    assert!(
        out.status.success(),
        "real-node.sh {index}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 39, on every real node (a node pool replaced): each node leaves
/// (its Node deleted) and registers again with the start-up taint, and the
/// controller's pods are deleted: every schedulable node is gated. The
/// chart's controller tolerates the taint, so it comes back on a gated node
/// and opens them all (no job gates them) long before the bound (10
/// minutes: the daemon's own act comes a minute later). Without the
/// toleration it stays Pending and the nodes closed.
fn every_node_gated(t: &mut Install) {
    let t: &Install = t;
    let opened = |node: &str| {
        let events = t.kc_out(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.name={node},reason=StartupGateOpened"),
            "-o",
            "name",
        ]);
        events.lines().count()
    };
    let before: Vec<usize> = t.nodes.iter().map(|n| opened(&n.name)).collect();
    let selector = "app.kubernetes.io/component=controller";
    // The nodes the controller's Running pods are on.
    let running_on = || {
        t.kc_out(&[
            "get",
            "pods",
            "-n",
            NS,
            "-l",
            selector,
            "--field-selector",
            "status.phase=Running",
            "-o",
            "jsonpath={.items[*].spec.nodeName}",
        ])
    };
    t.kc_ok(
        &["delete", "pod", "-n", NS, "-l", selector, "--wait=false"],
        None,
    );
    for n in &t.nodes {
        t.kc_ok(
            &["delete", "node", &n.name, "--wait=true", "--timeout=60s"],
            None,
        );
    }
    let extra = t.work_path("kubelet-register-gated.yaml");
    std::fs::write(&extra, REGISTER_GATED).expect("write the kubelet settings");
    for n in &t.nodes {
        real_node(t, n.index, Some(&extra));
    }
    let names = t.node_names().join(" and ");
    t.pass(&format!("{names} registered again with the start-up taint"));
    let t0 = Instant::now();
    t.wait_for("the controller to open every gated node", 240, || {
        let mut state = vec![];
        for (n, before) in t.nodes.iter().zip(&before) {
            let taints = t.kc_out(&["get", "node", &n.name, "-o", "jsonpath={.spec.taints}"]);
            if taints.contains("images-pending") || opened(&n.name) <= *before {
                state.push(format!("{}: still gated ({taints})", n.name));
            }
        }
        if running_on().is_empty() {
            state.push("no controller pod Running".into());
        }
        if state.is_empty() {
            Ok(())
        } else {
            Err(state.join("; "))
        }
    });
    let on = running_on();
    t.pass(&format!(
        "controller pods run on the gated nodes ({on}) and opened {names} (StartupGateOpened) {}s after they registered",
        t0.elapsed().as_secs()
    ));
    // kubelet's defaults back (the Nodes keep no taint).
    for n in &t.nodes {
        real_node(t, n.index, None);
    }
    for what in ["deploy", "daemonset"] {
        let part = if what == "deploy" {
            "controller"
        } else {
            "daemon"
        };
        let name = format!("{what}/{RELEASE}-{part}");
        let fallback = format!("{what}/{RELEASE}-nodeimage-{part}");
        assert!(
            t.rollout_status(NS, &name, "180s") || t.rollout_status(NS, &fallback, "180s"),
            "{what} did not become available again"
        );
    }
    for n in &t.nodes {
        assert!(
            !daemon_pod(t, &n.name).is_empty(),
            "no daemon pod on {} after it joined again",
            n.describe()
        );
    }
}

/// The images nodeimage pinned in real node `n`'s containerd (its label
/// `nodeimage.dev/pinned-by`, read with ctr: CRI does not show labels).
fn nodeimage_pins(t: &Install, n: &nodeimage_tests::realnodes::RealNodeEnv) -> Vec<String> {
    let socket = Install::show(&n.socket);
    let ls = t.tool(
        "ctr",
        &["--address", &socket, "-n", "k8s.io", "images", "ls"],
    );
    assert!(
        ls.success,
        "ctr images ls on {} failed: {}",
        n.describe(),
        text(&ls)
    );
    ls.stdout
        .lines()
        .filter(|l| l.contains("nodeimage.dev/pinned-by="))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
        .collect()
}

fn uninstall(t: &mut Install) {
    // A hand-written NodeImage entry on each real node: deleting the jobs
    // does not take it away, so its pin goes only through the block's step 2.
    let registry = t.var("NODEIMAGE_REGISTRY");
    let image = format!("{registry}/test");
    let patch = serde_json::json!({"spec": {"images": {image.clone(): {"tags": [{"tag": "v1"}]}}}});
    for n in t.node_names() {
        t.kc_ok(
            &[
                "patch",
                "nodeimage",
                &n,
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
            None,
        );
    }
    for n in &t.nodes {
        t.wait_for(&format!("a nodeimage pin on {}", n.describe()), 180, || {
            let pins = nodeimage_pins(t, n);
            if pins.iter().any(|p| p.starts_with(&image)) {
                Ok(())
            } else {
                Err(format!("nodeimage's pins there: {pins:?}"))
            }
        });
    }
    let md = std::fs::read_to_string(t.repo_path("docs/install.md")).expect("read docs/install.md");
    let block =
        docs::marked_block(&md, "uninstall").unwrap_or_else(|e| panic!("docs/install.md: {e}"));
    let script = block
        .with_values(&[
            ("NS", NS.to_string()),
            ("RELEASE", RELEASE.to_string()),
            ("CHART", Install::show(&t.repo_path(CHART))),
        ])
        .unwrap_or_else(|e| panic!("docs/install.md: {e}"));
    let run = t.doc_script(&script);
    assert!(
        run.success,
        "docs/install.md's uninstall block failed:\n{}",
        text(&run)
    );
    let left = format!(
        "{}{}",
        t.kc(&["get", "imagepulljobs,imagelistpulljobs", "-A", "-o", "name"])
            .text(),
        t.kc(&["get", "imageprepulljobs,nodeupgradejobs", "-o", "name"])
            .text()
    );
    let left = left.trim_end();
    assert!(left.is_empty(), "objects left after uninstall: {left}");
    for n in &t.nodes {
        let pins = nodeimage_pins(t, n);
        assert!(
            pins.is_empty(),
            "nodeimage pins left in the containerd of {} after the documented uninstall: {pins:?}",
            n.describe()
        );
    }
    let tainted = t.kc_out(&[
        "get",
        "nodes",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name}{" "}{.spec.taints[*].key}{"\n"}{end}"#,
    ]);
    let tainted: Vec<&str> = tainted
        .lines()
        .filter(|l| l.contains("nodeimage.dev/images-pending"))
        .collect();
    assert!(
        tainted.is_empty(),
        "nodes still carry the start-up taint: {tainted:?}"
    );
    for crd in ["nodeimages.apps.kruise.io", "imagepulljobs.apps.kruise.io"] {
        assert!(
            t.kc_silent(&["get", "crd", crd]),
            "helm uninstall deleted CRD {crd} (CRDs must stay)"
        );
    }
    if t.kc_silent(&["get", "namespace", SECRETS_NS]) {
        assert!(
            t.kc_silent(&[
                "wait",
                "--for=delete",
                &format!("namespace/{SECRETS_NS}"),
                "--timeout=120s"
            ]),
            "the secrets namespace {SECRETS_NS} is stuck terminating"
        );
    }
    t.pass(&format!(
        "uninstalled as documented: no nodeimage pin in the containerd of {}, no job left, no start-up taint, the CRDs stay",
        t.node_names().join(" or ")
    ));
}

#[test]
fn image_references_split_as_the_script_did() {
    assert_eq!(repository("r:5000/n/daemon@sha256:ab"), "r:5000/n/daemon");
    assert_eq!(digest("r:5000/n/daemon@sha256:ab"), "sha256:ab");
    assert_eq!(repository("r/n/daemon"), "r/n/daemon");
    assert_eq!(digest("r/n/daemon"), "r/n/daemon");
}
