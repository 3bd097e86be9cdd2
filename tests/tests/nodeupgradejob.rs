//! NodeUpgradeJob end to end, on the local cluster with the shared
//! controller: the upgrade image is pulled on each node through its
//! NodeImage, the upgrade tool is taken out of it and run on the node
//! (backup, upgrade, rollback on failure), one node at a time, with the
//! failure tolerance, versions, skipped nodes, disabled daemons and silent
//! nodes.
//!
//! The upgrade image is built here without Docker (umoci, pushed with
//! skopeo under a unique repository, tag = version). It carries a fake
//! `keadm` on two layers (the lower one is a wrong tool the upper one
//! replaces): a shell script that records each call with timestamps in
//! `<node dir>/calls`, backs up and restores `<node dir>/version`, writes the
//! new version there on upgrade (after `<node dir>/upgrade-seconds`, default
//! 1.5), and fails the upgrade when `<node dir>/fail-upgrade` exists. Each test Node is served by a
//! test-owned daemon started with `--enable-upgrades --node-version-source
//! file:<node dir>/version --upgrade-work-dir <node dir>/work`, so the tool
//! finds its node directory two levels above itself. Every job, Node,
//! daemon, directory and pulled image is removed at the end.

use nodeimage_tests::kruise;
use nodeimage_tests::prepull::{
    NodeImagesWatch, TestNode, concurrency_over_time, remove_from_nodes,
};
use nodeimage_tests::{Cluster, unique, wait_for};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The resource name kubectl users type.
const RESOURCE: &str = "nodeupgradejobs.operations.kubeedge.io";
/// Longest wait for a job to finish: the machine is small and shared.
const WAIT: Duration = Duration::from_secs(240);
/// The version the nodes run before.
const OLD: &str = "v1.16.0";
/// The version the jobs upgrade to.
const NEW: &str = "v1.17.0";
/// Label on every Node these tests make.
const TEST_LABEL: &str = "nodeimage.dev/e2e-upgrade";

/// The fake upgrade tool.
const FAKE_KEADM: &str = r#"#!/bin/sh
# Fake keadm for nodeimage's NodeUpgradeJob tests. Its node directory is two
# levels above it (<node dir>/work/<job>/keadm).
root=$(cd "$(dirname "$0")/../.." && pwd)
stamp() { echo "$(date +%s%N) $*" >>"$root/calls"; }
stamp start "$@"
cmd=$1
case "$cmd" in
  backup)
    sleep 0.5
    cp "$root/version" "$root/backup-version" 2>/dev/null || : >"$root/backup-version"
    echo "backed up $(cat "$root/version" 2>/dev/null)"
    ;;
  upgrade)
    to=""
    while [ $# -gt 0 ]; do
      [ "$1" = "--toVersion" ] && to=$2
      shift
    done
    echo "upgrading edgecore to $to"
    sleep "$(cat "$root/upgrade-seconds" 2>/dev/null || echo 1.5)"
    echo "$to" >"$root/version"
    if [ -e "$root/fail-upgrade" ]; then
      echo "error: simulated failure: edgecore $to did not start" >&2
      stamp end "$cmd"
      exit 1
    fi
    echo "upgraded to $to"
    ;;
  rollback)
    sleep 0.5
    cp "$root/backup-version" "$root/version"
    echo "rolled back to $(cat "$root/version")"
    ;;
  *)
    echo "unknown command $cmd" >&2
    stamp end "$cmd"
    exit 2
    ;;
esac
stamp end "$cmd"
"#;

/// A wrong tool in the lower layer: found only if the upper layer were ignored.
const WRONG_KEADM: &str = "#!/bin/sh\necho 'wrong keadm (lower layer)' >&2\nexit 9\n";

fn cluster() -> Cluster {
    let c = Cluster::load();
    c.install_crds();
    c
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The OCI layout holding the fake installation package (tag `keadm`),
/// built once per test run.
fn layout() -> &'static Path {
    static LAYOUT: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &LAYOUT
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("temp dir");
            let layout = dir.path().join("layout");
            let bundle = dir.path().join("bundle");
            let image = format!("{}:keadm", layout.display());
            run(Command::new("umoci")
                .args(["init", "--layout"])
                .arg(&layout));
            run(Command::new("umoci").args(["new", "--image", &image]));
            run(Command::new("umoci")
                .args(["unpack", "--image", &image])
                .arg(&bundle));
            let bin = bundle.join("rootfs/usr/local/bin");
            std::fs::create_dir_all(&bin).expect("mkdir");
            let write_tool = |text: &str| {
                let tool = bin.join("keadm");
                std::fs::write(&tool, text).expect("write keadm");
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))
                    .expect("chmod keadm");
            };
            write_tool(WRONG_KEADM);
            run(Command::new("umoci")
                .args(["repack", "--refresh-bundle", "--image", &image])
                .arg(&bundle));
            write_tool(FAKE_KEADM);
            run(Command::new("umoci")
                .args(["repack", "--refresh-bundle", "--image", &image])
                .arg(&bundle));
            run(Command::new("umoci").args([
                "config",
                "--image",
                &image,
                "--config.label",
                "dev.nodeimage.test=fake-installation-package",
            ]));
            (dir, layout)
        })
        .1
}

/// Pushes the fake installation package to a unique repository under each
/// version tag; returns the image name (without tag).
fn push_package(c: &Cluster, versions: &[&str]) -> String {
    let name = format!(
        "{}/{}/installation-package",
        c.var("NODEIMAGE_REGISTRY"),
        unique("e2e-upgrade")
    );
    let src = format!("oci:{}:keadm", layout().display());
    for v in versions {
        run(Command::new("skopeo").args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &src,
            &format!("docker://{name}:{v}"),
        ]));
    }
    name
}

/// A test Node with its own directory (version file, calls, work dir) and,
/// unless `daemon` is None, a test-owned daemon with the given extra flags.
struct UpgradeNode {
    node: TestNode,
    dir: tempfile::TempDir,
    /// The containerd its daemon uses.
    socket: Option<PathBuf>,
}

impl UpgradeNode {
    fn create(
        c: &Cluster,
        run_id: &str,
        version: Option<&str>,
        socket: Option<&Path>,
        enable: bool,
    ) -> UpgradeNode {
        let labels = BTreeMap::from([(TEST_LABEL.to_string(), run_id.to_string())]);
        let mut node = TestNode::create(c, "e2e-upgrade", &labels);
        let dir = tempfile::tempdir().expect("node dir");
        if let Some(v) = version {
            std::fs::write(dir.path().join("version"), format!("{v}\n")).expect("version file");
        }
        if let Some(socket) = socket {
            let source = format!("file:{}", dir.path().join("version").display());
            let work = dir.path().join("work").display().to_string();
            let mut flags = vec![
                "--node-version-source",
                source.as_str(),
                "--upgrade-work-dir",
                work.as_str(),
            ];
            if enable {
                flags.push("--enable-upgrades");
            }
            node.start_daemon(socket, &flags);
        }
        UpgradeNode {
            node,
            dir,
            socket: socket.map(Path::to_path_buf),
        }
    }

    fn name(&self) -> &str {
        &self.node.name
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// The version file's content, trimmed.
    fn version(&self) -> String {
        std::fs::read_to_string(self.path("version"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// The tool's calls: (nanoseconds, "start"/"end", arguments).
    fn calls(&self) -> Vec<(u128, String, String)> {
        std::fs::read_to_string(self.path("calls"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, ' ');
                let t = parts.next()?.parse().ok()?;
                let what = parts.next()?.to_string();
                Some((t, what, parts.next().unwrap_or_default().to_string()))
            })
            .collect()
    }

    /// The argument lists of the tool's runs, in order.
    fn commands(&self) -> Vec<String> {
        self.calls()
            .into_iter()
            .filter(|(_, what, _)| what == "start")
            .map(|(_, _, args)| args)
            .collect()
    }

    /// From the first call's start to the last call's end.
    fn busy(&self) -> Option<(u128, u128)> {
        let calls = self.calls();
        Some((calls.first()?.0, calls.last()?.0))
    }
}

/// A NodeUpgradeJob applied as a user does; deleted (finalizer awaited) when dropped.
struct Job {
    c: Cluster,
    name: String,
}

impl Job {
    fn apply(c: &Cluster, image: &str, nodes: &[&UpgradeNode], extra: &str) -> Job {
        Job::apply_as(c, "v1alpha1", image, nodes, extra)
    }

    /// [`Job::apply`] in API version `version` (v1alpha1 or v1alpha2).
    fn apply_as(
        c: &Cluster,
        version: &str,
        image: &str,
        nodes: &[&UpgradeNode],
        extra: &str,
    ) -> Job {
        let name = unique("e2e-upgrade");
        let names: String = nodes
            .iter()
            .map(|n| format!("  - {}\n", n.name()))
            .collect();
        let manifest = format!(
            "apiVersion: operations.kubeedge.io/{version}\nkind: NodeUpgradeJob\nmetadata:\n  name: {name}\nspec:\n  version: {NEW}\n  image: {image}:v0.0.0-ignored\n  nodeNames:\n{names}{extra}"
        );
        c.kubectl_ok(&["apply", "-f", "-"], Some(&manifest));
        Job { c: c.clone(), name }
    }

    fn get(&self) -> Value {
        let out = self
            .c
            .kubectl_ok(&["get", RESOURCE, &self.name, "-o", "json"], None);
        serde_json::from_str(&out).expect("kubectl prints JSON")
    }

    /// Polls the job until it finishes; returns its status and every node
    /// state seen on the way, per node, without repeats.
    fn wait_finished(&self) -> (Value, BTreeMap<String, Vec<String>>) {
        let start = Instant::now();
        let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
        loop {
            let status = self.get()["status"].clone();
            for n in status["nodeStatus"].as_array().into_iter().flatten() {
                let states = seen
                    .entry(n["nodeName"].as_str().unwrap_or_default().to_string())
                    .or_default();
                let s = n["state"].as_str().unwrap_or_default().to_string();
                if states.last() != Some(&s) {
                    states.push(s);
                }
            }
            if matches!(status["state"].as_str(), Some("Successful" | "Failed")) {
                return (status, seen);
            }
            assert!(
                start.elapsed() < WAIT,
                "NodeUpgradeJob {} not finished after {WAIT:?}; status: {status}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// (reason, message) of the events recorded on the job.
    fn events(&self) -> Vec<(String, String)> {
        let out = self.c.kubectl_ok(
            &[
                "get",
                "events",
                "-A",
                "--field-selector",
                &format!(
                    "involvedObject.kind=NodeUpgradeJob,involvedObject.name={}",
                    self.name
                ),
                "-o",
                "json",
            ],
            None,
        );
        let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
        let mut events: Vec<(String, String, String)> = v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["firstTimestamp"]
                        .as_str()
                        .or(e["eventTime"].as_str())
                        .unwrap_or_default()
                        .to_string(),
                    e["reason"].as_str().unwrap_or_default().to_string(),
                    e["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        events.sort();
        events.into_iter().map(|(_, r, m)| (r, m)).collect()
    }

    /// Waits until events with every reason of `want` are recorded.
    fn wait_events(&self, want: &[&str]) -> Vec<(String, String)> {
        wait_for(
            &format!("events {want:?} on NodeUpgradeJob {}", self.name),
            Duration::from_secs(30),
            || {
                let ev = self.events();
                want.iter()
                    .all(|w| ev.iter().any(|(r, _)| r == w))
                    .then_some(ev)
            },
        )
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let r = self.c.kubectl(
            &[
                "delete",
                RESOURCE,
                &self.name,
                "--ignore-not-found",
                "--timeout=60s",
            ],
            None,
        );
        if !r.success {
            eprintln!(
                "cleanup: deleting NodeUpgradeJob {}: {}",
                self.name, r.stderr
            );
        }
    }
}

/// Removes the pulled package from the nodes' containerds when dropped.
struct PulledImage {
    sockets: Vec<PathBuf>,
    image: String,
}

impl Drop for PulledImage {
    fn drop(&mut self) {
        remove_from_nodes(&self.sockets, &format!("{}:{NEW}", self.image));
    }
}

/// Sockets of the nodes whose containerd discards layer blobs once
/// unpacked (`discard_unpacked_layers = true`: node-2 of the mixed
/// cluster). The daemon reads the upgrade tool from the image's unpacked
/// snapshot there, which [`assert_read_from_snapshot`] proves.
fn discarding_sockets(c: &Cluster) -> Vec<PathBuf> {
    let runtimes = c.try_var("NODEIMAGE_NODE_RUNTIMES").unwrap_or_default();
    let discarding: Vec<&str> = runtimes
        .split_whitespace()
        .filter(|r| r.ends_with("/discard"))
        .filter_map(|r| r.split('=').next())
        .collect();
    c.nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| discarding.contains(&n.as_str()))
        .map(|(i, _)| c.socket(i))
        .collect()
}

/// The fake package's (config, layers) digests, read from its OCI layout
/// (skopeo copies the blobs unchanged).
fn package_digests() -> (String, Vec<String>) {
    let read = |path: PathBuf| -> Value {
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let blob = |digest: &str| {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        layout().join("blobs/sha256").join(hex)
    };
    let index = read(layout().join("index.json"));
    let manifest = read(blob(
        index["manifests"][0]["digest"]
            .as_str()
            .expect("the layout's manifest"),
    ));
    let digest = |d: &Value| d["digest"].as_str().unwrap_or_default().to_string();
    let layers = manifest["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .map(digest)
        .collect();
    (digest(&manifest["config"]), layers)
}

/// On a node that discards layers, the tool was read from the image's
/// unpacked snapshot: the package's layer blobs are not in that
/// containerd's content store (its config blob is), and the node's daemon
/// logged where it read the tool.
fn assert_read_from_snapshot(node: &UpgradeNode) {
    let socket = node.socket.as_ref().expect("a daemon's socket");
    let out = Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "content", "ls", "-q"])
        .output()
        .expect("run ctr content ls");
    assert!(out.status.success(), "ctr content ls: {out:?}");
    let blobs = String::from_utf8_lossy(&out.stdout);
    let held: Vec<&str> = blobs.lines().map(str::trim).collect();
    let (config, layers) = package_digests();
    assert!(
        held.contains(&config.as_str()),
        "{}: the package's config {config} is in the content store",
        socket.display()
    );
    for l in &layers {
        assert!(
            !held.contains(&l.as_str()),
            "{}: layer {l} was discarded after unpacking",
            socket.display()
        );
    }
    let log = &node.node.daemon.as_ref().expect("a daemon").log;
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert!(
        text.contains("upgrade tool read from the image's unpacked snapshot"),
        "{}: no snapshot read logged",
        log.display()
    );
}

fn pulled(c: &Cluster, image: &str) -> PulledImage {
    PulledImage {
        sockets: (0..c.nodes().len()).map(|i| c.socket(i)).collect(),
        image: image.to_string(),
    }
}

/// The nodeStatus entry of `node`.
fn node_status<'a>(status: &'a Value, node: &str) -> &'a Value {
    status["nodeStatus"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|n| n["nodeName"] == node)
        .unwrap_or_else(|| panic!("{node} not in job status: {status}"))
}

/// A node's state, or None while the job's status does not list it yet (the
/// controller writes the first status moments after the job is created).
fn state_of(status: &Value, node: &str) -> Option<String> {
    status["nodeStatus"]
        .as_array()?
        .iter()
        .find(|n| n["nodeName"] == node)
        .and_then(|n| n["state"].as_str())
        .map(str::to_string)
}

/// (state, event, action) of a node.
fn sea(status: &Value, node: &str) -> (String, String, String) {
    let n = node_status(status, node);
    let s = |k: &str| n[k].as_str().unwrap_or_default().to_string();
    (s("state"), s("event"), s("action"))
}

fn reason(status: &Value, node: &str) -> String {
    node_status(status, node)["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn tuple(s: &str, e: &str, a: &str) -> (String, String, String) {
    (s.into(), e.into(), a.into())
}

/// Whether NodeImage `node` still holds a tag of `image`.
fn holds_entry(c: &Cluster, node: &str, image: &str) -> bool {
    nodeimage_tests::nodeimage::get(c, node)
        .is_some_and(|ni| ni["spec"]["images"][image].is_object())
}

/// The order of the states a node went through must follow the upgrade:
/// Init, Checking, BackingUp, Upgrading, then the end.
fn assert_in_order(node: &str, states: &[String], end: &[&str]) {
    let order = ["Init", "Checking", "BackingUp", "Upgrading", "RollingBack"];
    let mut last = 0;
    for s in states {
        if end.contains(&s.as_str()) {
            continue;
        }
        let i = order
            .iter()
            .position(|o| o == s)
            .unwrap_or_else(|| panic!("{node}: unexpected state {s} in {states:?}"));
        assert!(i >= last, "{node}: states out of order: {states:?}");
        last = i;
    }
    let final_state = states.last().map(String::as_str).unwrap_or_default();
    assert!(
        end.contains(&final_state),
        "{node}: ends {final_state}, want one of {end:?}: {states:?}"
    );
}

/// Three nodes, concurrency 1, each on another runtime (on the one that
/// discards layers the tool comes from the unpacked snapshot): never two at
/// once (neither in the NodeImages nor in the tool's runs), each node backed
/// up then upgraded with the right arguments, in the job's node order; the
/// job Successful with the versions recorded, the events, each step
/// visible, the entries taken back.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn upgrades_nodes_one_at_a_time_with_a_backup_first() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let watch = NodeImagesWatch::start(&c, &format!("{TEST_LABEL}={run_id}"));
    let nodes: Vec<UpgradeNode> = (0..3)
        .map(|i| {
            UpgradeNode::create(
                &c,
                &run_id,
                Some(OLD),
                Some(&c.socket(i % c.nodes().len())),
                true,
            )
        })
        .collect();
    let refs: Vec<&UpgradeNode> = nodes.iter().collect();
    let job = Job::apply(
        &c,
        &image,
        &refs,
        "  concurrency: 1\n  timeoutSeconds: 120\n",
    );
    let (status, seen) = job.wait_finished();

    assert_eq!(status["state"], "Successful", "{status}");
    assert_eq!(status["currentVersion"], NEW);
    assert_eq!(status["historicVersion"], OLD);
    let discarding = discarding_sockets(&c);
    for n in &nodes {
        assert_eq!(
            sea(&status, n.name()),
            tuple("Successful", "Upgrade", "Success"),
            "{status}"
        );
        assert_eq!(
            reason(&status, n.name()),
            format!("upgraded from {OLD} to {NEW}")
        );
        assert_eq!(
            n.commands(),
            vec![
                "backup edge".to_string(),
                format!("upgrade edge --toVersion {NEW} --image {image} --force"),
            ],
            "{}: the tool's runs",
            n.name()
        );
        assert_eq!(n.version(), NEW);
        assert_in_order(n.name(), &seen[n.name()], &["Successful"]);
        if n.socket.as_ref().is_some_and(|s| discarding.contains(s)) {
            assert_read_from_snapshot(n);
        }
        let log = n.path(&format!("work/{}/upgrade.log", job.name));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            text.contains("backed up v1.16.0") && text.contains("upgraded to v1.17.0"),
            "{}: {text}",
            log.display()
        );
    }
    assert!(
        seen.values().flatten().any(|s| s == "Upgrading")
            && seen.values().flatten().any(|s| s == "BackingUp"),
        "the steps show in the job status: {seen:?}"
    );
    // One at a time, in the job's order.
    let busy: Vec<(u128, u128)> = nodes.iter().map(|n| n.busy().expect("calls")).collect();
    for w in busy.windows(2) {
        assert!(w[0].1 < w[1].0, "tool runs overlap: {busy:?}");
    }
    let uid = job.get()["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let counts = concurrency_over_time(&watch.seen(), &uid);
    assert_eq!(
        counts.iter().max(),
        Some(&1),
        "nodes working at once: {counts:?}"
    );

    let events = job.wait_events(&["Started", "NodeUpgraded", "Finished"]);
    assert_eq!(
        events.iter().filter(|(r, _)| r == "NodeUpgraded").count(),
        3,
        "{events:?}"
    );
    let entry = image.clone();
    for n in &nodes {
        wait_for(
            &format!("the job's entry to leave NodeImage {}", n.name()),
            Duration::from_secs(30),
            || (!holds_entry(&c, n.name(), &entry)).then_some(()),
        );
    }
}

/// One node's upgrade fails: it is rolled back (backup restored) and
/// failed with the tool's output in its reason; with failureTolerate "0.6"
/// the job succeeds, with "0.5" (exactly the failed share) it fails, as in
/// KubeEdge.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_failed_upgrade_is_rolled_back_and_the_tolerance_decides() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let good = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(0)), true);
    let bad = UpgradeNode::create(
        &c,
        &run_id,
        Some(OLD),
        Some(&c.socket(1 % c.nodes().len())),
        true,
    );
    std::fs::write(bad.path("fail-upgrade"), "").expect("marker");
    let bad_discards = bad
        .socket
        .as_ref()
        .is_some_and(|s| discarding_sockets(&c).contains(s));

    // 1 of 2 fails: KubeEdge fails the job at exactly the tolerance (0.5).
    for (tolerate, want) in [("0.6", "Successful"), ("0.5", "Failed")] {
        // Both nodes start from the old version.
        for n in [&good, &bad] {
            std::fs::write(n.path("version"), format!("{OLD}\n")).expect("version");
            let _ = std::fs::remove_file(n.path("calls"));
        }
        let job = Job::apply(
            &c,
            &image,
            &[&good, &bad],
            &format!(
                "  concurrency: 2\n  failureTolerate: \"{tolerate}\"\n  timeoutSeconds: 120\n"
            ),
        );
        let (status, seen) = job.wait_finished();
        assert_eq!(
            status["state"], want,
            "failureTolerate {tolerate}: {status}"
        );
        assert_eq!(
            sea(&status, good.name()),
            tuple("Successful", "Upgrade", "Success")
        );
        assert_eq!(
            sea(&status, bad.name()),
            tuple("Failed", "Rollback", "Success"),
            "{status}"
        );
        let why = reason(&status, bad.name());
        assert!(
            why.starts_with("upgrade failed, rolled back: exit status: 1")
                && why.contains("error: simulated failure: edgecore v1.17.0 did not start"),
            "{why}"
        );
        assert_eq!(
            bad.commands(),
            vec![
                "backup edge".to_string(),
                format!("upgrade edge --toVersion {NEW} --image {image} --force"),
                "rollback edge".to_string(),
            ]
        );
        assert_eq!(bad.version(), OLD, "the backup was restored");
        assert_eq!(good.version(), NEW);
        assert_in_order(bad.name(), &seen[bad.name()], &["Failed"]);
        // The first job pulls the package and may take the tool out before
        // containerd's garbage collector has discarded the layer blobs (the
        // pull's lease held them); the second starts with them gone.
        if bad_discards && tolerate == "0.5" {
            assert_read_from_snapshot(&bad);
        }
        if tolerate == "0.5" {
            assert_eq!(
                status["reason"],
                "1 of 2 nodes failed (50.0%), reaching failureTolerate 0.5"
            );
            assert_eq!(status["phase"], "Failure", "{status}");
        }
        let events = job.wait_events(&["NodeUpgraded", "NodeRolledBack", "Finished"]);
        assert!(
            events
                .iter()
                .any(|(r, m)| r == "NodeRolledBack" && m.contains("simulated failure")),
            "{events:?}"
        );
    }
}

/// A node whose version file shows the target is skipped by its daemon
/// (no tool run); a node whose Node reports it (kubeletVersion
/// `…-kubeedge-v1.17.0`) is skipped by the controller (no entry written).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn nodes_already_at_the_version_are_skipped() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let by_file = UpgradeNode::create(&c, &run_id, Some(NEW), Some(&c.socket(0)), true);
    let by_kubelet = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(0)), true);
    let info = json!({"status": {"nodeInfo": {
        "kubeletVersion": format!("v1.29.5-kubeedge-{NEW}"), "kubeProxyVersion": "",
        "containerRuntimeVersion": "containerd://1.6.20", "architecture": "amd64",
        "operatingSystem": "linux", "osImage": "nodeimage test node", "kernelVersion": "",
        "machineID": "", "systemUUID": "", "bootID": ""}}});
    c.kubectl_ok(
        &[
            "patch",
            "node",
            by_kubelet.name(),
            "--subresource=status",
            "--type=merge",
            "-p",
            &info.to_string(),
        ],
        None,
    );
    // The controller sees the new kubeletVersion before the job starts.
    std::thread::sleep(Duration::from_secs(2));
    let job = Job::apply(&c, &image, &[&by_file, &by_kubelet], "  concurrency: 2\n");
    let (status, _) = job.wait_finished();
    assert_eq!(status["state"], "Successful", "{status}");
    assert_eq!(status["currentVersion"], NEW);
    assert!(status["historicVersion"].is_null(), "{status}");
    assert_eq!(
        sea(&status, by_file.name()),
        tuple("Successful", "Upgrade", "Success")
    );
    assert_eq!(
        reason(&status, by_file.name()),
        format!("already at {NEW}; nothing to do")
    );
    assert_eq!(
        sea(&status, by_kubelet.name()),
        tuple("Successful", "Check", "Success")
    );
    assert!(reason(&status, by_kubelet.name()).starts_with(&format!("already at {NEW}")));
    assert!(
        by_file.calls().is_empty(),
        "no tool run: {:?}",
        by_file.calls()
    );
    assert!(
        by_kubelet.calls().is_empty(),
        "no tool run: {:?}",
        by_kubelet.calls()
    );
    assert!(
        !holds_entry(&c, by_kubelet.name(), &image),
        "no entry written"
    );
    job.wait_events(&["Started", "NodeUpgraded", "Finished"]);
}

/// A daemon without `--enable-upgrades` fails the node at once with a
/// reason saying so and runs nothing; a node that never
/// answers (no daemon) times out, and the job still finishes.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn disabled_and_silent_nodes_fail_and_the_job_finishes() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let socket = c.socket(2 % c.nodes().len());
    let disabled = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&socket), false);
    let silent = UpgradeNode::create(&c, &run_id, Some(OLD), None, true);
    let fine = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&socket), true);
    let job = Job::apply(
        &c,
        &image,
        &[&disabled, &silent, &fine],
        "  concurrency: 3\n  timeoutSeconds: 15\n  failureTolerate: \"0.7\"\n",
    );
    let started = Instant::now();
    let (status, _) = job.wait_finished();
    assert_eq!(
        status["state"], "Successful",
        "2 of 3 failed, within 0.7: {status}"
    );
    assert_eq!(
        sea(&status, disabled.name()),
        tuple("Failed", "Check", "Failure")
    );
    assert_eq!(
        reason(&status, disabled.name()),
        "upgrades are disabled on this node (start nodeimage-daemon with --enable-upgrades)"
    );
    assert!(disabled.calls().is_empty());
    assert_eq!(
        sea(&status, silent.name()),
        tuple("Failed", "TimeOut", "Failure")
    );
    assert_eq!(
        reason(&status, silent.name()),
        "timed out: the node did not finish within 15s"
    );
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "the timeout counts from the entry"
    );
    assert_eq!(
        sea(&status, fine.name()),
        tuple("Successful", "Upgrade", "Success")
    );
    assert_eq!(fine.version(), NEW);
    let events = job.wait_events(&["NodeFailed", "NodeUpgraded", "Finished"]);
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "NodeFailed" && m.contains("upgrades are disabled")),
        "{events:?}"
    );
    // The silent node's entry is taken back once its timeout is recorded.
    wait_for(
        "the silent node's entry to be taken back",
        Duration::from_secs(30),
        || (!holds_entry(&c, silent.name(), &image)).then_some(()),
    );
}

/// A daemon killed while the tool upgrades does not run any step again when
/// it comes back: the upgrade was recorded as started, the node does not
/// report the new version yet, so the node fails as interrupted (no
/// automatic rollback); the tool ran `upgrade` exactly once.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_restarted_daemon_does_not_run_an_upgrade_again() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let mut node = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(0)), true);
    std::fs::write(node.path("upgrade-seconds"), "8").expect("delay");
    let job = Job::apply(&c, &image, &[&node], "  timeoutSeconds: 120\n");
    wait_for("the node to be Upgrading", WAIT, || {
        (state_of(&job.get()["status"], node.name())? == "Upgrading").then_some(())
    });
    let daemon = node.node.daemon.as_mut().expect("a daemon");
    daemon.restart();
    let (status, _) = job.wait_finished();
    assert_eq!(
        sea(&status, node.name()),
        tuple("Failed", "Upgrade", "Failure"),
        "{status}"
    );
    let why = reason(&status, node.name());
    assert!(
        why.starts_with(&format!(
            "interrupted while upgrading (the daemon restarted); the node reports {OLD}, not {NEW}"
        )),
        "{why}"
    );
    // The tool the killed daemon started finishes on its own; nothing else runs.
    wait_for(
        "the first upgrade run to end",
        Duration::from_secs(30),
        || {
            node.calls()
                .iter()
                .any(|(_, what, args)| what == "end" && args == "upgrade")
                .then_some(())
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        node.commands(),
        vec![
            "backup edge".to_string(),
            format!("upgrade edge --toVersion {NEW} --image {image} --force"),
        ]
    );
}

/// `requireConfirmation`: each node checks and pulls, then waits
/// (WaitingConfirmation, nothing run on the host) until the job's
/// `nodeimage.dev/confirm-upgrade` annotation names it; then it backs up and
/// upgrades. Confirming one node leaves the other waiting.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn require_confirmation_waits_for_the_annotation() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let a = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(0)), true);
    let b = UpgradeNode::create(
        &c,
        &run_id,
        Some(OLD),
        Some(&c.socket(1 % c.nodes().len())),
        true,
    );
    let job = Job::apply(
        &c,
        &image,
        &[&a, &b],
        "  concurrency: 2\n  timeoutSeconds: 240\n  requireConfirmation: true\n",
    );
    let waiting = |n: &UpgradeNode| {
        let status = job.get()["status"].clone();
        (state_of(&status, n.name())? == "WaitingConfirmation").then_some(status)
    };
    let status = wait_for("both nodes to wait for confirmation", WAIT, || {
        waiting(&a)?;
        waiting(&b)
    });
    assert!(
        reason(&status, a.name()).contains("nodeimage.dev/confirm-upgrade"),
        "{status}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert!(
        a.commands().is_empty() && b.commands().is_empty(),
        "nothing ran unconfirmed"
    );

    // Confirm a only.
    c.kubectl_ok(
        &[
            "annotate",
            RESOURCE,
            &job.name,
            &format!("nodeimage.dev/confirm-upgrade={}", a.name()),
        ],
        None,
    );
    wait_for("a to upgrade", WAIT, || {
        let status = job.get()["status"].clone();
        (state_of(&status, a.name())? == "Successful").then_some(())
    });
    assert_eq!(a.version(), NEW);
    assert!(waiting(&b).is_some(), "b still waits");
    assert!(b.commands().is_empty());

    // Confirm all.
    c.kubectl_ok(
        &[
            "annotate",
            "--overwrite",
            RESOURCE,
            &job.name,
            "nodeimage.dev/confirm-upgrade=*",
        ],
        None,
    );
    let (status, _) = job.wait_finished();
    assert_eq!(status["state"], "Successful", "{status}");
    assert_eq!(b.version(), NEW);
    assert!(b.commands().iter().any(|c| c == "backup edge"));
}

/// The manifest digest the registry serves for `image:tag` (its
/// `Docker-Content-Digest` answer to a HEAD), what a user copies into
/// `imageDigestGatter`.
fn registry_digest(image: &str, tag: &str) -> String {
    let (host, repo) = image.split_once('/').expect("host/repository");
    let out = Command::new("curl")
        .args(["-fsSI", "-H"])
        .arg(
            "Accept: application/vnd.oci.image.index.v1+json, \
             application/vnd.oci.image.manifest.v1+json, \
             application/vnd.docker.distribution.manifest.v2+json, \
             application/vnd.docker.distribution.manifest.list.v2+json",
        )
        .arg(format!("http://{host}/v2/{repo}/manifests/{tag}"))
        .output()
        .expect("run curl");
    assert!(out.status.success(), "HEAD of {image}:{tag}: {out:?}");
    let headers = String::from_utf8_lossy(&out.stdout);
    headers
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("docker-content-digest")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| panic!("no Docker-Content-Digest for {image}:{tag}: {headers}"))
}

/// `imageDigestGatter` honoured: a job whose digest is not the pulled
/// image's fails every node with both digests in the reason and runs
/// nothing (no tool call, no tool taken out of the image, the version
/// unchanged); then a v1alpha2 job with the registry's digest for each
/// architecture upgrades the same nodes.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn the_image_digest_gatter_decides_whether_the_tool_runs() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let digest = registry_digest(&image, NEW);
    let wrong = format!("sha256:{}", "0".repeat(64));
    assert_ne!(digest, wrong);
    let run_id = unique("run");
    let nodes: Vec<UpgradeNode> = (0..c.nodes().len().min(2))
        .map(|i| UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(i)), true))
        .collect();
    let refs: Vec<&UpgradeNode> = nodes.iter().collect();

    let bad = Job::apply(
        &c,
        &image,
        &refs,
        &format!(
            "  concurrency: 2\n  timeoutSeconds: 120\n  imageDigestGatter:\n    value: {wrong}\n"
        ),
    );
    let (status, _) = bad.wait_finished();
    assert_eq!(status["state"], "Failed", "{status}");
    for n in &nodes {
        assert_eq!(
            state_of(&status, n.name()).as_deref(),
            Some("Failed"),
            "{status}"
        );
        let why = reason(&status, n.name());
        assert!(
            why.contains("digest mismatch") && why.contains(&digest) && why.contains(&wrong),
            "{}: {why}",
            n.name()
        );
        assert!(
            n.commands().is_empty(),
            "{}: the tool ran: {:?}",
            n.name(),
            n.calls()
        );
        assert!(
            !n.path(&format!("work/{}/keadm", bad.name)).exists(),
            "{}: the tool was taken out of the image",
            n.name()
        );
        assert_eq!(n.version(), OLD, "{}", n.name());
    }
    drop(bad);

    let good = Job::apply_as(
        &c,
        "v1alpha2",
        &image,
        &refs,
        &format!(
            "  concurrency: 2\n  timeoutSeconds: 120\n  imageDigestGatter:\n    amd64: {digest}\n    arm64: {digest}\n"
        ),
    );
    let (status, _) = good.wait_finished();
    assert_eq!(status["state"], "Successful", "{status}");
    for n in &nodes {
        assert_eq!(
            n.commands(),
            vec![
                "backup edge".to_string(),
                format!("upgrade edge --toVersion {NEW} --image {image} --force"),
            ],
            "{}: the tool's runs",
            n.name()
        );
        assert_eq!(n.version(), NEW, "{}", n.name());
    }
}

/// An image outside the controller's `--upgrade-images` (tests/nodeimage.sh
/// allows only the local registry and kubeedge/installation-package) is
/// refused before any node acts: the job Failed with the reason, condition
/// and event naming the image and the flag, and no NodeImage ever held an
/// entry of it.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn an_image_outside_the_allowed_list_is_refused_before_any_node_acts() {
    let c = cluster();
    let image = format!(
        "registry.example.com/{}/installation-package",
        unique("e2e-upgrade")
    );
    let run_id = unique("run");
    let watch = NodeImagesWatch::start(&c, &format!("{TEST_LABEL}={run_id}"));
    let nodes: Vec<UpgradeNode> = (0..c.nodes().len().min(2))
        .map(|i| UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(i)), true))
        .collect();
    let refs: Vec<&UpgradeNode> = nodes.iter().collect();
    let job = Job::apply(&c, &image, &refs, "  concurrency: 2\n");
    let (status, _) = job.wait_finished();
    assert_eq!(status["state"], "Failed", "{status}");
    let why = status["reason"].as_str().unwrap_or_default().to_string();
    assert!(
        why.contains(&format!("spec.image {image}:v0.0.0-ignored"))
            && why.contains("is not an allowed upgrade image")
            && why.contains("--upgrade-images"),
        "{why}"
    );
    let failed = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Failed" && c["status"] == "True");
    assert!(failed, "{status}");
    let events = job.wait_events(&["Finished"]);
    assert!(
        events
            .iter()
            .any(|(r, m)| r == "Finished" && m.contains(&image) && m.contains("--upgrade-images")),
        "{events:?}"
    );
    // Give a (wrongly) started node time to show an entry, then look.
    std::thread::sleep(Duration::from_secs(3));
    let uid = job.get()["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let counts = concurrency_over_time(&watch.seen(), &uid);
    assert!(
        counts.iter().all(|n| *n == 0),
        "nodes with an entry: {counts:?}"
    );
    for n in &nodes {
        assert!(!holds_entry(&c, n.name(), &image), "{}", n.name());
        assert!(n.commands().is_empty(), "{}", n.name());
        assert_eq!(n.version(), OLD);
    }
}

/// An ImagePullJob of `image:NEW` on `node` alone, in its own namespace
/// (completionPolicy Always, so it finishes).
fn apply_pull_job(c: &Cluster, ns: &str, image: &str, node: &str) -> String {
    let name = unique("e2e-pull-and-upgrade");
    let manifest = format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: ImagePullJob\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  image: {image}:{NEW}\n  selector:\n    names: [{node}]\n  pullPolicy:\n    timeoutSeconds: 120\n    backoffLimit: 1\n  completionPolicy:\n    type: Always\n"
    );
    c.kubectl_ok(&["apply", "-f", "-"], Some(&manifest));
    name
}

/// (succeeded, failed, completed) of an ImagePullJob.
fn pull_outcome(c: &Cluster, ns: &str, name: &str) -> (i64, i64, bool) {
    let job = kruise::get(c, kruise::IPJ, Some(ns), name)
        .unwrap_or_else(|| panic!("ImagePullJob {ns}/{name} is gone"));
    (
        kruise::count(&job, "succeeded"),
        kruise::count(&job, "failed"),
        kruise::completed(&job),
    )
}

/// Waits until the ImagePullJob has finished with its one node pulled.
fn wait_pulled(c: &Cluster, ns: &str, name: &str) {
    kruise::wait_job(
        c,
        kruise::IPJ,
        ns,
        name,
        "finished with its node pulled",
        WAIT,
        |j| kruise::completed(j) && kruise::count(j, "succeeded") == 1,
    );
}

/// The tag entries of `image` on `node`: (purpose, phase) of each status
/// entry, in status order.
fn tag_statuses(c: &Cluster, node: &str, image: &str) -> Vec<(String, String)> {
    let ni = nodeimage_tests::nodeimage::get(c, node).unwrap_or(Value::Null);
    ni["status"]["imageStatuses"][image]["tags"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["purpose"].as_str().unwrap_or("Pull").to_string(),
                t["phase"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// A pull and an upgrade of the same image and tag on one node, the pull
/// first: the ImagePullJob succeeds, then a NodeUpgradeJob of that image
/// and version fails (rolled back) on the node; the pull job's result stays
/// succeeded, and the NodeImage shows two entries, each with its outcome.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_pull_then_a_failing_upgrade_of_one_tag_keep_their_own_outcomes() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let node = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(0)), true);
    std::fs::write(node.path("fail-upgrade"), "").expect("marker");
    let ns = kruise::TestNs::create(&c, "e2e-pull-upgrade");
    let key = image.clone();

    let pull = apply_pull_job(&c, &ns.name, &image, node.name());
    wait_pulled(&c, &ns.name, &pull);

    let job = Job::apply(&c, &image, &[&node], "  timeoutSeconds: 120\n");
    let (status, _) = job.wait_finished();
    assert_eq!(
        sea(&status, node.name()),
        tuple("Failed", "Rollback", "Success"),
        "{status}"
    );
    assert_eq!(node.version(), OLD, "the backup was restored");
    // The pull job's result did not change when the upgrade came and failed.
    kruise::consistently(
        "the pull job stays succeeded",
        Duration::from_secs(5),
        || match pull_outcome(&c, &ns.name, &pull) {
            (1, 0, true) => Ok(()),
            other => Err(format!("(succeeded, failed, completed) = {other:?}")),
        },
    );
    let statuses = tag_statuses(&c, node.name(), &key);
    assert!(
        statuses.contains(&("Pull".to_string(), "Succeeded".to_string())),
        "{statuses:?}"
    );
}

/// The other order: a NodeUpgradeJob runs (slowly) and then fails; an
/// ImagePullJob of the same image and tag that arrives while the upgrade
/// entry is on the node pulls and succeeds on its own (it does not take the
/// upgrade's outcome, and its pull does not restart the upgrade: the tool
/// runs once), and stays succeeded when the upgrade fails.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn an_upgrade_then_a_pull_of_one_tag_keep_their_own_outcomes() {
    let c = cluster();
    let image = push_package(&c, &[NEW]);
    let _pulled = pulled(&c, &image);
    let run_id = unique("run");
    let node = UpgradeNode::create(&c, &run_id, Some(OLD), Some(&c.socket(0)), true);
    std::fs::write(node.path("fail-upgrade"), "").expect("marker");
    std::fs::write(node.path("upgrade-seconds"), "12").expect("slow upgrade");
    let ns = kruise::TestNs::create(&c, "e2e-upgrade-pull");

    let job = Job::apply(&c, &image, &[&node], "  timeoutSeconds: 120\n");
    // Wait until the upgrade runs (its entry is on the node, the tool started).
    wait_for("the upgrade tool to start", WAIT, || {
        node.commands()
            .iter()
            .any(|c| c.starts_with("upgrade edge"))
            .then_some(())
    });
    let pull = apply_pull_job(&c, &ns.name, &image, node.name());
    wait_pulled(&c, &ns.name, &pull);
    assert!(
        !matches!(
            job.get()["status"]["state"].as_str(),
            Some("Successful" | "Failed")
        ),
        "the upgrade had finished before the pull: the test proves nothing"
    );

    let (status, _) = job.wait_finished();
    assert_eq!(
        sea(&status, node.name()),
        tuple("Failed", "Rollback", "Success"),
        "{status}"
    );
    assert_eq!(
        node.commands(),
        vec![
            "backup edge".to_string(),
            format!("upgrade edge --toVersion {NEW} --image {image} --force"),
            "rollback edge".to_string(),
        ],
        "the pull did not run the upgrade again"
    );
    kruise::consistently(
        "the pull job stays succeeded",
        Duration::from_secs(5),
        || match pull_outcome(&c, &ns.name, &pull) {
            (1, 0, true) => Ok(()),
            other => Err(format!("(succeeded, failed, completed) = {other:?}")),
        },
    );
}
