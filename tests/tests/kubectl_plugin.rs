//! `kubectl nodeimage` (the `kubectl-nodeimage` binary) end to end, on the
//! local cluster: the live table of `status --watch` in a real terminal
//! (a detached tmux session, read back with `capture-pane`), `--output
//! json`, plain output to a pipe, an ImageListPullJob seen through its
//! children, and `pull` creating jobs that complete, or fail with exit 3.
//!
//! The binary is looked for where the other nodeimage binaries are
//! (`target/debug`); `cargo build -p nodeimage-kubectl` builds it
//! (tests/run-all.sh does).

use nodeimage_tests::kruise::{self, FakeNodeImage, ILPJ, IPJ, SlowImage, TestNs};
use nodeimage_tests::{Cleanup, Cluster, random_suffix};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// What a whole job may take on this small shared machine.
const LONG: Duration = Duration::from_secs(240);

fn plugin(c: &Cluster) -> PathBuf {
    let path = c.nodeimage_bin().join("kubectl-nodeimage");
    assert!(
        path.exists(),
        "{} is missing: build it with `cargo build -p nodeimage-kubectl`",
        path.display()
    );
    path
}

/// The plugin with the cluster's kubeconfig, its output captured (not a terminal).
fn run(c: &Cluster, args: &[&str]) -> Output {
    Command::new(plugin(c))
        .args(args)
        .env("KUBECONFIG", c.var("KUBECONFIG"))
        .stdin(Stdio::null())
        .output()
        .expect("run kubectl-nodeimage")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ipj(ns: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// A tmux server of this test alone (its own socket), killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Runs `command` in a detached session of a `width`×`height` terminal.
    fn start(command: &str, width: u16, height: u16) -> Tmux {
        let t = Tmux {
            socket: format!("e2e-plugin-{}", random_suffix()),
        };
        let st = t
            .cmd()
            .args(["new-session", "-d", "-s", "main", "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .arg(command)
            .status()
            .expect("run tmux");
        assert!(st.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    /// What the pane shows now (text only: tmux interprets the escape codes).
    fn capture(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "main"])
            .output()
            .expect("run tmux capture-pane");
        text(&out.stdout)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// The percentages in the PROGRESS column of a node's row.
fn percent_of(screen: &str, node: &str) -> Option<u32> {
    let line = screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(node))?;
    line.split_whitespace()
        .find_map(|w| w.strip_suffix('%')?.parse().ok())
}

/// (a) and (b): a slow pull onto every node, followed live in a terminal;
/// then the JSON document and the plain table of the finished job.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn status_watch_draws_a_live_table_until_the_job_completes() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-plugin-watch");
    let nodes = c.nodes();
    // 6 MiB per node through a proxy passing 2 MiB/s in all: about nine
    // seconds for three nodes pulling together, long enough to see progress.
    let size = 6 << 20;
    let slow = SlowImage::push(&c, "plugin-watch", size, 2 << 20);
    let reference = slow.reference();
    let name = "watch-me";
    kruise::create(
        &c,
        &ipj(
            &ns.name,
            name,
            json!({
                "image": reference,
                "selector": {"names": nodes},
                "parallelism": nodes.len(),
                "pullPolicy": {"timeoutSeconds": 120, "backoffLimit": 1},
                "completionPolicy": {"type": "Always"},
            }),
        ),
    );

    let command = format!(
        "{} status ipj/{name} -n {} --watch --kubeconfig {}; echo EXIT=$?; sleep 600",
        shell_quote(&plugin(&c).display().to_string()),
        shell_quote(&ns.name),
        shell_quote(&c.var("KUBECONFIG")),
    );
    let tmux = Tmux::start(&command, 150, 40);
    let start = Instant::now();
    let mut screens: Vec<String> = Vec::new();
    let last = loop {
        let screen = tmux.capture();
        if screens.last() != Some(&screen) {
            screens.push(screen.clone());
        }
        if screen.contains("EXIT=") {
            break screen;
        }
        assert!(
            start.elapsed() < LONG,
            "the watch did not end within {LONG:?}; screen:\n{screen}\nNodeImages:\n{}",
            kruise::nodeimages_summary(&c)
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    eprintln!(
        "{} distinct screens; one while pulling:\n{}\nthe last:\n{last}",
        screens.len(),
        screens
            .iter()
            .find(|s| s.contains("Pulling"))
            .map_or("(none)", |s| s.trim_end())
    );

    assert!(
        last.contains("EXIT=0"),
        "the watch ends with status 0 once the job completes:\n{last}"
    );
    assert_eq!(
        last.matches(&format!("ImagePullJob {}/{name}", ns.name))
            .count(),
        1,
        "the table is redrawn in place, not printed again below:\n{last}"
    );
    assert!(last.contains("Completed"), "the header says so:\n{last}");
    for node in &nodes {
        let row = last
            .lines()
            .find(|l| l.split_whitespace().next() == Some(node.as_str()))
            .unwrap_or_else(|| panic!("no row for {node}:\n{last}"));
        assert!(
            row.contains("Succeeded") && row.contains("100%") && row.contains("sha256:"),
            "{node} finished with an image ID: {row:?}"
        );
    }
    // Nodes showed up while they were still pulling, with progress between.
    let partial: Vec<u32> = screens
        .iter()
        .flat_map(|s| nodes.iter().filter_map(|n| percent_of(s, n)))
        .filter(|p| (1..100).contains(p))
        .collect();
    assert!(
        !partial.is_empty(),
        "some screen showed a node part of the way: {screens:#?}"
    );
    assert!(
        screens
            .iter()
            .any(|s| s.contains("Pulling") && nodes.iter().all(|n| s.contains(n.as_str()))),
        "a screen showed every node while pulling: {screens:#?}"
    );

    // (b) The JSON document: the job and one row per node.
    let out = run(
        &c,
        &[
            "status",
            &format!("ipj/{name}"),
            "-n",
            &ns.name,
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&out.stdout)));
    assert_eq!(doc["job"]["kind"], "ImagePullJob");
    assert_eq!(doc["job"]["name"], name);
    assert_eq!(doc["job"]["finished"], true);
    assert_eq!(doc["job"]["status"]["succeeded"], nodes.len());
    let rows = doc["nodes"].as_array().expect("nodes is a list");
    let mut names: Vec<&str> = rows.iter().filter_map(|r| r["node"].as_str()).collect();
    names.sort_unstable();
    let mut want: Vec<&str> = nodes.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(names, want, "one row per node: {doc}");
    for r in rows {
        assert_eq!(
            (&r["phase"], &r["progress"]),
            (&json!("Succeeded"), &json!(100)),
            "{r}"
        );
        assert!(
            r["imageID"]
                .as_str()
                .is_some_and(|id| id.contains("@sha256:")),
            "{r}"
        );
    }
    assert_eq!(doc["counts"]["succeeded"], nodes.len());

    // Into a pipe: plain text, no escape codes; `--watch` of a finished job
    // prints one snapshot and ends.
    for args in [vec![], vec!["--watch"]] {
        let mut all = vec!["status", "ipj", name, "-n", &ns.name];
        all.extend(args.iter().copied());
        let out = run(&c, &all);
        let stdout = text(&out.stdout);
        assert!(out.status.success(), "{all:?}: {}", text(&out.stderr));
        assert!(
            !stdout.contains('\x1b'),
            "{all:?}: escape codes in a pipe: {stdout:?}"
        );
        assert_eq!(
            stdout.matches("NODE ").count(),
            1,
            "{all:?}: one snapshot: {stdout}"
        );
        assert!(
            stdout.contains("[####################] 100%"),
            "{all:?}: {stdout}"
        );
    }
    drop(slow);
}

/// `pull --wait` creates an ImagePullJob that completes, prints its name
/// first and exits 0; `pull` without `--wait` only creates it.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn pull_creates_a_job_that_completes() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-plugin-pull");
    let nodes = c.nodes();
    let image = kruise::push_unique(&kruise::registry(&c), "plugin-pull", 64 << 10);
    let mut cleanup = Cleanup::default();
    let (c2, r2) = (c.clone(), image.reference());
    cleanup.defer("remove the image from the nodes", move || {
        kruise::remove_from_nodes(&c2, &r2)
    });
    let node_list = nodes.join(",");
    let out = run(
        &c,
        &[
            "pull",
            &image.reference(),
            "--nodes",
            &node_list,
            "-n",
            &ns.name,
            "--parallelism",
            "2",
            "--wait",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "pull --wait: {:?}\n{stdout}\n{}",
        out.status,
        text(&out.stderr)
    );
    let first = stdout.lines().next().unwrap_or_default();
    let name = first
        .strip_prefix("imagepulljob/")
        .and_then(|s| s.strip_suffix(" created"))
        .unwrap_or_else(|| panic!("the first line names the job: {stdout}"));
    assert!(
        name.starts_with("plugin-pull-"),
        "named after the image: {name}"
    );
    let job = kruise::get(&c, IPJ, Some(&ns.name), name).expect("the job exists");
    assert!(kruise::completed(&job), "{}", kruise::describe(&job));
    assert_eq!(job["spec"]["completionPolicy"]["type"], "Always");
    assert_eq!(job["spec"]["parallelism"], 2);
    assert_eq!(job["spec"]["selector"]["names"], json!(nodes));
    assert_eq!(kruise::count(&job, "succeeded"), nodes.len() as i64);
    let last = stdout.rsplit("\n\n").next().unwrap_or_default();
    for node in &nodes {
        assert!(
            last.lines()
                .any(|l| l.starts_with(node.as_str()) && l.contains("Succeeded")),
            "the last snapshot shows {node} done:\n{stdout}"
        );
    }

    // Without --wait: created, not followed.
    let out = run(
        &c,
        &[
            "pull",
            &image.reference(),
            "--all",
            "-n",
            &ns.name,
            "--name",
            "again",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "imagepulljob/again created\n");
    let job = kruise::get(&c, IPJ, Some(&ns.name), "again").expect("created");
    assert!(
        job["spec"]["selector"].is_null(),
        "--all selects every node: {job}"
    );

    // Usage errors exit 2 and name the problem.
    let out = run(&c, &["status", "pods/x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("unknown kind \"pods\""),
        "{}",
        text(&out.stderr)
    );
    let out = run(&c, &["pull", "nginx"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "one of --nodes, --selector, --all is required"
    );
    let out = run(&c, &["status", "ipj/nope", "-n", &ns.name]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("not found"),
        "{}",
        text(&out.stderr)
    );
    drop(cleanup);
}

/// A node that fails makes `pull --wait` exit 3, with the node's reason in
/// its row (a fake NodeImage, failed by hand as upstream's e2e does).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn pull_wait_exits_3_when_a_node_fails() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-plugin-fail");
    let fake = FakeNodeImage::create(&c);
    let image = kruise::push_unique(&kruise::registry(&c), "plugin-fail", 4096);
    let mut child = Command::new(plugin(&c))
        .args([
            "pull",
            &image.reference(),
            "--nodes",
            &fake.name,
            "-n",
            &ns.name,
            "--wait",
        ])
        .env("KUBECONFIG", c.var("KUBECONFIG"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start kubectl-nodeimage pull");
    let start = Instant::now();
    let status = loop {
        fake.fail_unfinished("e2e: the fake node failed the pull");
        if let Some(st) = child.try_wait().expect("wait for the plugin") {
            break st;
        }
        if start.elapsed() > LONG {
            let _ = child.kill();
            panic!("pull --wait did not end within {LONG:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let out = child
        .wait_with_output()
        .expect("collect the plugin's output");
    let stdout = text(&out.stdout);
    assert_eq!(status.code(), Some(3), "{stdout}\n{}", text(&out.stderr));
    let row = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with(&fake.name))
        .unwrap_or_else(|| panic!("a row for {}: {stdout}", fake.name));
    assert!(
        row.contains("Failed") && row.contains("e2e: the fake node failed the pull"),
        "{row}"
    );
}

/// An ImageListPullJob's nodes come from its child ImagePullJobs: one row
/// per node, each with every image of the list.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn status_of_an_image_list_pull_job() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-plugin-list");
    let nodes = c.nodes();
    let reg = kruise::registry(&c);
    let images = [
        kruise::push_unique(&reg, "plugin-list-a", 4096),
        kruise::push_unique(&reg, "plugin-list-b", 4096),
    ];
    let mut cleanup = Cleanup::default();
    for i in &images {
        let (c2, r2) = (c.clone(), i.reference());
        cleanup.defer("remove the image from the nodes", move || {
            kruise::remove_from_nodes(&c2, &r2)
        });
    }
    let name = "list";
    kruise::create(
        &c,
        &json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImageListPullJob",
            "metadata": {"name": name, "namespace": ns.name},
            "spec": {
                "images": images.iter().map(|i| i.reference()).collect::<Vec<_>>(),
                "selector": {"names": nodes},
                "parallelism": nodes.len(),
                "completionPolicy": {"type": "Always"},
            },
        }),
    );
    // --watch -o json: one document per change, the last one finished.
    let out = run(
        &c,
        &[
            "status",
            &format!("ilpj/{name}"),
            "-n",
            &ns.name,
            "--watch",
            "-o",
            "json",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let docs: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let doc = docs.last().expect("at least one document");
    assert_eq!(doc["job"]["kind"], "ImageListPullJob");
    assert_eq!(doc["job"]["finished"], true, "{doc}");
    let job = kruise::get(&c, ILPJ, Some(&ns.name), name).expect("the job");
    assert!(kruise::completed(&job), "{}", kruise::describe(&job));
    let rows = doc["nodes"].as_array().expect("nodes");
    assert_eq!(rows.len(), nodes.len(), "one row per node: {doc}");
    for r in rows {
        assert_eq!(r["phase"], "Succeeded", "{r}");
        let mut got: Vec<&str> = r["images"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["image"].as_str())
            .collect();
        got.sort_unstable();
        let mut want: Vec<String> = images.iter().map(|i| i.reference()).collect();
        want.sort_unstable();
        assert_eq!(got, want, "{r}");
    }
    drop(cleanup);
}

/// A KubeEdge ImagePrePullJob (cluster-scoped, its state in the header):
/// `status ippj/NAME --watch` into a pipe ends once the job is Successful,
/// every node's row done with both images.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn status_of_an_image_pre_pull_job() {
    let c = Cluster::load();
    let nodes = c.nodes();
    let reg = kruise::registry(&c);
    let images = [
        kruise::push_unique(&reg, "plugin-ppj-a", 4096).reference(),
        kruise::push_unique(&reg, "plugin-ppj-b", 4096).reference(),
    ];
    let mut cleanup = Cleanup::default();
    for i in &images {
        let (c2, r2) = (c.clone(), i.clone());
        cleanup.defer("remove the image from the nodes", move || {
            kruise::remove_from_nodes(&c2, &r2)
        });
    }
    let name = nodeimage_tests::unique("plugin-ppj");
    let manifest = json!({
        "apiVersion": "operations.kubeedge.io/v1alpha1",
        "kind": "ImagePrePullJob",
        "metadata": {"name": name},
        "spec": {"imagePrePullTemplate": {
            "images": images,
            "nodeNames": nodes,
            "concurrency": nodes.len(),
            "checkItems": [],
        }},
    });
    let job = nodeimage_tests::prepull::Job::apply(&c, &name, &manifest.to_string());
    let out = run(&c, &["status", &format!("ippj/{name}"), "--watch"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let last = stdout.rsplit("\n\n").next().unwrap_or_default();
    assert!(
        stdout.contains(&format!("ImagePrePullJob {name}: ")),
        "cluster-scoped: no namespace in the title:\n{stdout}"
    );
    let header = stdout
        .rsplit("ImagePrePullJob ")
        .next()
        .and_then(|s| s.lines().nth(1))
        .unwrap_or_default();
    assert!(
        header.starts_with("Successful  event Pull  action Success"),
        "the job's state heads the last snapshot: {header:?}\n{stdout}"
    );
    for node in &nodes {
        let row = last
            .lines()
            .find(|l| l.split_whitespace().next() == Some(node.as_str()))
            .unwrap_or_else(|| panic!("no row for {node}:\n{stdout}"));
        assert!(
            row.contains("Succeeded") && row.contains("100%") && row.contains("2/2 images"),
            "{row}"
        );
    }
    drop(job);
    drop(cleanup);
}

/// An HTTP CONNECT proxy on a free loopback port (one thread per tunnel)
/// that records the target of every CONNECT it serves.
struct ConnectProxy {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl ConnectProxy {
    fn start() -> ConnectProxy {
        use std::io::{BufRead, BufReader, Write};
        use std::net::{TcpListener, TcpStream};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let log = log.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(client.try_clone().ok()?);
                    let mut line = String::new();
                    reader.read_line(&mut line).ok()?;
                    let target = line
                        .strip_prefix("CONNECT ")?
                        .split(' ')
                        .next()?
                        .to_string();
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).ok()? <= 2 {
                            break;
                        }
                    }
                    log.lock().ok()?.push(target.clone());
                    let upstream = TcpStream::connect(&target).ok()?;
                    let mut client = client;
                    client
                        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        .ok()?;
                    let (mut up_r, mut up_w) = (upstream.try_clone().ok()?, upstream);
                    let mut down_w = client.try_clone().ok()?;
                    std::thread::spawn(move || std::io::copy(&mut up_r, &mut down_w));
                    // What the client sent after the headers is in the reader.
                    let _ = std::io::copy(&mut reader, &mut up_w);
                    Some(())
                });
            }
        });
        ConnectProxy { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// Issue 30: behind a corporate proxy the plugin reaches the API server
/// through `HTTPS_PROXY` (a CONNECT tunnel, as kubectl), and around it for
/// the hosts `NO_PROXY` names.
#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn the_plugin_honours_https_proxy_and_no_proxy() {
    let c = Cluster::load();
    let ns = TestNs::create(&c, "e2e-plugin-proxy");
    let proxy = ConnectProxy::start();
    let server = c.var("NODEIMAGE_API_SERVER");
    let authority = server.trim_start_matches("https://").to_string();
    let run_with = |no_proxy: &str| {
        Command::new(plugin(&c))
            .args(["status", "ipj/absent", "-n", &ns.name, "-o", "json"])
            .env("KUBECONFIG", c.var("KUBECONFIG"))
            .env("HTTPS_PROXY", format!("http://127.0.0.1:{}", proxy.port))
            .env("NO_PROXY", no_proxy)
            .env_remove("https_proxy")
            .env_remove("no_proxy")
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl-nodeimage")
    };
    // "not found" is the API server's answer: the request got there.
    let through = run_with("");
    assert!(
        text(&through.stderr).contains("not found"),
        "through the proxy: {}",
        text(&through.stderr)
    );
    assert!(
        proxy.seen().contains(&authority),
        "the proxy tunnelled to {authority}: {:?}",
        proxy.seen()
    );
    let before = proxy.seen().len();
    let around = run_with("example.com,127.0.0.1");
    assert!(
        text(&around.stderr).contains("not found"),
        "around the proxy: {}",
        text(&around.stderr)
    );
    assert_eq!(proxy.seen().len(), before, "NO_PROXY kept it off the proxy");
}

/// Issue 39: `openkruise-check` (docs/migration.md, way A's first step)
/// refuses while an OpenKruise kind other than the image kinds has
/// objects, naming them, and passes when none has.
#[test]
#[ignore = "needs the local cluster and nodeimage (make test)"]
fn openkruise_check_refuses_while_other_openkruise_kinds_have_objects() {
    let c = Cluster::load();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "clonesets.apps.kruise.io"},
        "spec": {"group": "apps.kruise.io", "scope": "Namespaced",
                 "names": {"plural": "clonesets", "singular": "cloneset", "kind": "CloneSet", "listKind": "CloneSetList"},
                 "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
    });
    c.kubectl_ok(&["apply", "-f", "-"], Some(&crd.to_string()));
    let mut cleanup = Cleanup::default();
    let c2 = c.clone();
    cleanup.defer("delete the CloneSet CRD", move || {
        let _ = c2.kubectl(
            &["delete", "crd", "clonesets.apps.kruise.io", "--wait=false"],
            None,
        );
    });
    c.kubectl_ok(
        &[
            "wait",
            "--for=condition=Established",
            "crd/clonesets.apps.kruise.io",
            "--timeout=60s",
        ],
        None,
    );
    let ns = TestNs::create(&c, "e2e-kruise-check");
    // The image kinds alone (the suite's jobs and NodeImages) do not count.
    kruise::eventually("the check passes with no CloneSet", LONG, || {
        let out = run(&c, &["openkruise-check"]);
        (out.status.code() == Some(0) && text(&out.stdout).contains("way A (uninstall it) is safe"))
            .then_some(())
            .ok_or_else(|| {
                format!(
                    "{:?} {}{}",
                    out.status,
                    text(&out.stdout),
                    text(&out.stderr)
                )
            })
    });
    let web = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                     "metadata": {"name": "web", "namespace": ns.name}, "spec": {"replicas": 0}});
    c.kubectl_ok(&["create", "-f", "-"], Some(&web.to_string()));
    let out = run(&c, &["openkruise-check"]);
    let said = text(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{said}{}", text(&out.stderr));
    assert!(
        said.contains(&format!("CloneSet.apps.kruise.io: 1 ({}/web)", ns.name)),
        "{said}"
    );
    assert!(said.contains("way B"), "{said}");
    drop(cleanup);
}
