//! Support for the OpenKruise job tests (ImagePullJob, ImageListPullJob):
//! per-test namespaces, jobs read and awaited through `kubectl`, pull-secret
//! copies, fake NodeImages failed by hand (upstream's `FailNodeImageFast`),
//! a slow registry the shared containerds can reach, and stopping and
//! restarting the shared controller.

use crate::proxy::Proxy;
use crate::registry::{PushedImage, Registry};
use crate::{Cluster, random_suffix};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Namespace the controller copies pull secrets into (its default).
pub const SECRETS_NS: &str = "nodeimage-secrets";
/// Label on every secret copy.
pub const COPY_LABEL: &str = "nodeimage.dev/pull-secret-copy";
/// Annotation on a copy naming its source (`namespace/name`).
pub const SOURCE_ANNOTATION: &str = "nodeimage.dev/source";
/// Annotation on a copy listing the jobs using it (`Kind/namespace/name`, comma-separated).
pub const REFERENCES_ANNOTATION: &str = "nodeimage.dev/references";
/// Label that marks a NodeImage without a Node (and without a daemon).
pub const FAKE_LABEL: &str = crate::nodeimage::FAKE_LABEL;
/// Kind names as `kubectl` resources.
pub const IPJ: &str = "imagepulljobs.apps.kruise.io";
/// ImageListPullJob resource.
pub const ILPJ: &str = "imagelistpulljobs.apps.kruise.io";

/// Parses kubectl JSON output.
pub fn parse(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("kubectl printed no JSON ({e}): {out}"))
}

/// A namespace of one test, deleted (with its pods force-deleted first, as
/// no kubelet will ever confirm their termination) when dropped.
pub struct TestNs {
    c: Cluster,
    /// Its name.
    pub name: String,
}

impl TestNs {
    /// Creates `<prefix>-<random>` and waits for its `default` ServiceAccount.
    pub fn create(c: &Cluster, prefix: &str) -> TestNs {
        let name = format!("{prefix}-{}", &random_suffix()[..6]);
        c.kubectl_ok(&["create", "namespace", &name], None);
        let ns = TestNs { c: c.clone(), name };
        crate::wait_for(
            &format!("ServiceAccount default in {}", ns.name),
            Duration::from_secs(60),
            || {
                c.kubectl(&["get", "serviceaccount", "default", "-n", &ns.name], None)
                    .success
                    .then_some(())
            },
        );
        ns
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = self.c.kubectl(
            &[
                "delete",
                "pods",
                "--all",
                "-n",
                &self.name,
                "--grace-period=0",
                "--force",
                "--wait=false",
            ],
            None,
        );
        let r = self.c.kubectl(
            &[
                "delete",
                "namespace",
                &self.name,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
        if !r.success {
            eprintln!("cleanup: deleting namespace {}: {}", self.name, r.stderr);
        }
    }
}

/// `kubectl create -f -` of one object.
pub fn create(c: &Cluster, obj: &Value) {
    c.kubectl_ok(&["create", "-f", "-"], Some(&obj.to_string()));
}

/// An object as JSON, None when it does not exist.
pub fn get(c: &Cluster, resource: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    let mut args = vec!["get", resource, name, "-o", "json"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    let r = c.kubectl(&args, None);
    if !r.success {
        assert!(
            r.stderr.contains("NotFound") || r.stderr.contains("not found"),
            "kubectl {args:?}: {}",
            r.stderr
        );
        return None;
    }
    Some(parse(&r.stdout))
}

/// Every object of a resource (in `ns`, or cluster-wide).
pub fn list(c: &Cluster, resource: &str, ns: Option<&str>, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["get", resource, "-o", "json"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(extra);
    let v = parse(&c.kubectl_ok(&args, None));
    v["items"].as_array().cloned().unwrap_or_default()
}

/// Deletes an object without waiting (no panic: usable in cleanup).
pub fn delete(c: &Cluster, resource: &str, ns: &str, name: &str) {
    let r = c.kubectl(
        &[
            "delete",
            resource,
            name,
            "-n",
            ns,
            "--ignore-not-found",
            "--wait=false",
        ],
        None,
    );
    if !r.success {
        eprintln!("deleting {resource} {ns}/{name}: {}", r.stderr);
    }
}

/// A job's status field as an integer (0 when absent).
pub fn count(job: &Value, field: &str) -> i64 {
    job["status"][field].as_i64().unwrap_or(0)
}

/// Whether a job's status has a completionTime.
pub fn completed(job: &Value) -> bool {
    job["status"]["completionTime"].is_string()
}

/// Short text of a job's status, for failure messages.
pub fn describe(job: &Value) -> String {
    format!(
        "{}/{}: {}",
        job["metadata"]["namespace"].as_str().unwrap_or("?"),
        job["metadata"]["name"].as_str().unwrap_or("?"),
        job["status"]
    )
}

/// Polls a job until `done` holds; panics after `timeout` with the job's
/// last status and the NodeImages' entries for `image_key` (if given).
pub fn wait_job(
    c: &Cluster,
    resource: &str,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(job) = get(c, resource, Some(ns), name) {
            if done(&job) {
                return job;
            }
            last = Some(job);
        }
        if start.elapsed() > timeout {
            panic!(
                "timed out after {timeout:?} waiting for {resource} {ns}/{name} to be {what}; last seen: {}\nNodeImages:\n{}",
                last.map(|j| describe(&j))
                    .unwrap_or_else(|| "does not exist".into()),
                nodeimages_summary(c)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until an object is gone.
pub fn wait_gone(c: &Cluster, resource: &str, ns: &str, name: &str, timeout: Duration) {
    let start = Instant::now();
    loop {
        let Some(obj) = get(c, resource, Some(ns), name) else {
            return;
        };
        if start.elapsed() > timeout {
            panic!(
                "{resource} {ns}/{name} still exists after {timeout:?}: metadata {} status {}",
                obj["metadata"], obj["status"]
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Polls `check` until it returns Ok, panicking after `timeout` with the
/// last reason it gave.
pub fn eventually<T>(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> T {
    let start = Instant::now();
    loop {
        match check() {
            Ok(v) => return v,
            Err(why) if start.elapsed() > timeout => {
                panic!("timed out after {timeout:?} waiting for {what}: {why}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// Checks that `check` holds on every poll for `duration`.
pub fn consistently(what: &str, duration: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let start = Instant::now();
    while start.elapsed() < duration {
        if let Err(why) = check() {
            panic!("{what} stopped holding after {:?}: {why}", start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

// ---------------------------------------------------------------------------
// NodeImages
// ---------------------------------------------------------------------------

/// Every NodeImage.
pub fn nodeimages(c: &Cluster) -> Vec<Value> {
    list(c, "nodeimages.apps.kruise.io", None, &[])
}

/// The NodeImage named `name` out of a list.
pub fn find<'a>(list: &'a [Value], name: &str) -> Option<&'a Value> {
    list.iter().find(|n| n["metadata"]["name"] == name)
}

/// The spec tag entry of `image`/`tag`.
pub fn spec_tag<'a>(ni: &'a Value, image: &str, tag: &str) -> Option<&'a Value> {
    crate::nodeimage::spec_tag(ni, image, tag)
}

/// The status entry of `image`/`tag`.
pub fn status_tag<'a>(ni: &'a Value, image: &str, tag: &str) -> Option<&'a Value> {
    crate::nodeimage::tag_status(ni, image, tag)
}

/// Whether the tag entry lists the owner with `uid`.
pub fn owned_by(tag: &Value, uid: &str) -> bool {
    tag["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["uid"] == uid)
}

/// Whether `image` (the NodeImage key) has any tag in the NodeImage's spec.
pub fn image_in_spec(ni: &Value, image: &str) -> bool {
    ni["spec"]["images"].get(image).is_some()
}

/// Where the job with `uid` stands on this NodeImage for `image`/`tag`:
/// None when it owns no entry, else the phase of the status entry of the
/// entry's version ("" when the node has not reported that version yet).
pub fn job_phase(ni: &Value, image: &str, tag: &str, uid: &str) -> Option<String> {
    let t = spec_tag(ni, image, tag).filter(|t| owned_by(t, uid))?;
    let version = t["version"].as_i64().unwrap_or(0);
    Some(
        status_tag(ni, image, tag)
            .filter(|s| s["version"].as_i64().unwrap_or(0) == version)
            .and_then(|s| s["phase"].as_str())
            .unwrap_or_default()
            .to_string(),
    )
}

/// Whether a phase from [`job_phase`] means the node is still working.
pub fn is_pulling(phase: &str) -> bool {
    !matches!(phase, "Succeeded" | "Failed")
}

/// Every change to any NodeImage, in the order the API server made them
/// (one `kubectl get nodeimages --watch` stream), from the moment it starts.
/// Replaying the changes gives the state of all NodeImages after each one.
/// Stops the watch when dropped.
pub struct NodeImageHistory {
    child: std::process::Child,
    events: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl NodeImageHistory {
    /// Starts watching; returns once the current NodeImages have been seen.
    pub fn start(c: &Cluster) -> NodeImageHistory {
        let mut child = c
            .kubectl_cmd()
            .args([
                "get",
                "nodeimages.apps.kruise.io",
                "-o",
                "json",
                "--watch",
                "--output-watch-events",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kubectl get --watch");
        let out = child.stdout.take().expect("stdout is piped");
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = events.clone();
        std::thread::spawn(move || {
            let stream = serde_json::Deserializer::from_reader(std::io::BufReader::new(out))
                .into_iter::<Value>();
            for ev in stream {
                let Ok(ev) = ev else { break };
                let kind = ev["type"].as_str().unwrap_or_default().to_string();
                sink.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((kind, ev["object"].clone()));
            }
        });
        let h = NodeImageHistory { child, events };
        let existing = nodeimages(c).len();
        crate::wait_for(
            "the NodeImage watch to list the current NodeImages",
            Duration::from_secs(60),
            || (h.events().len() >= existing).then_some(()),
        );
        h
    }

    /// The (type, object) events so far.
    pub fn events(&self) -> Vec<(String, Value)> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replays the events; `check` sees every NodeImage (by name) as it was
    /// after each event, and the resourceVersion of that event.
    pub fn replay(
        &self,
        mut check: impl FnMut(&std::collections::BTreeMap<String, Value>, &str),
    ) -> usize {
        let mut state = std::collections::BTreeMap::new();
        let events = self.events();
        for (kind, obj) in &events {
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if kind == "DELETED" {
                state.remove(&name);
            } else {
                state.insert(name, obj.clone());
            }
            check(
                &state,
                obj["metadata"]["resourceVersion"].as_str().unwrap_or("?"),
            );
        }
        events.len()
    }
}

impl Drop for NodeImageHistory {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line per NodeImage with its tag entries and statuses, for failure messages.
pub fn nodeimages_summary(c: &Cluster) -> String {
    let r = c.kubectl(&["get", "nodeimages.apps.kruise.io", "-o", "json"], None);
    if !r.success {
        return format!("(cannot list NodeImages: {})", r.stderr);
    }
    parse(&r.stdout)["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            format!(
                "  {}: spec {} status {}",
                n["metadata"]["name"].as_str().unwrap_or("?"),
                n["spec"]["images"],
                n["status"]["imageStatuses"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A NodeImage without a Node or daemon (label `apps.kruise.io/fake-nodeimage`),
/// deleted when dropped.
pub struct FakeNodeImage {
    c: Cluster,
    /// Its name (`e2e-fake-…`).
    pub name: String,
}

impl FakeNodeImage {
    /// Creates `e2e-fake-<random>` with an empty spec.
    pub fn create(c: &Cluster) -> FakeNodeImage {
        let name = format!("e2e-fake-{}", random_suffix());
        crate::nodeimage::create_fake(c, &name, &Default::default(), json!({}));
        FakeNodeImage { c: c.clone(), name }
    }

    /// Upstream's `FailNodeImageFast`: every spec tag of the NodeImage that
    /// has no finished status for its version gets a Failed status, as if
    /// its node had failed the pull. Returns how many tags were failed.
    pub fn fail_unfinished(&self, message: &str) -> usize {
        for _ in 0..10 {
            let Some(ni) = get(&self.c, "nodeimages.apps.kruise.io", None, &self.name) else {
                return 0;
            };
            let now = chrono_now();
            let mut statuses = serde_json::Map::new();
            let (mut failed_now, mut counts) = (0usize, [0i64; 5]);
            for (image, spec) in ni["spec"]["images"].as_object().into_iter().flatten() {
                let mut tags = Vec::new();
                for t in spec["tags"].as_array().into_iter().flatten() {
                    let version = t["version"].as_i64().unwrap_or(0);
                    let tag = t["tag"].as_str().unwrap_or_default();
                    let old = status_tag(&ni, image, tag)
                        .filter(|s| s["version"].as_i64().unwrap_or(0) == version)
                        .filter(|s| matches!(s["phase"].as_str(), Some("Succeeded" | "Failed")))
                        .cloned();
                    let entry = old.unwrap_or_else(|| {
                        failed_now += 1;
                        json!({
                            "tag": tag, "phase": "Failed", "version": version,
                            "progress": 0, "startTime": now, "completionTime": now,
                            "message": message,
                        })
                    });
                    counts[0] += 1;
                    counts[if entry["phase"] == "Succeeded" { 3 } else { 4 }] += 1;
                    tags.push(entry);
                }
                statuses.insert(image.clone(), json!({ "tags": tags }));
            }
            if failed_now == 0 {
                return 0;
            }
            let patch = json!({
                "metadata": {"resourceVersion": ni["metadata"]["resourceVersion"]},
                "status": {
                    "desired": counts[0], "waiting": 0, "pulling": 0,
                    "succeeded": counts[3], "failed": counts[4],
                    "imageStatuses": statuses,
                },
            });
            let r = self.c.kubectl(
                &[
                    "patch",
                    "nodeimages.apps.kruise.io",
                    &self.name,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &patch.to_string(),
                ],
                None,
            );
            if r.success {
                return failed_now;
            }
            assert!(
                r.stderr.contains("Conflict") || r.stderr.contains("modified"),
                "failing the tags of {}: {}",
                self.name,
                r.stderr
            );
        }
        panic!("failing the tags of {}: conflicts kept coming", self.name);
    }
}

impl Drop for FakeNodeImage {
    fn drop(&mut self) {
        crate::nodeimage::delete(&self.c, &self.name);
    }
}

/// Now as an RFC 3339 timestamp (seconds), as the API prints times.
pub fn chrono_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

// ---------------------------------------------------------------------------
// Images and secrets
// ---------------------------------------------------------------------------

/// The anonymous registry.
pub fn registry(c: &Cluster) -> Registry {
    Registry::new(&c.var("NODEIMAGE_REGISTRY"))
}

/// The registry that needs basic auth, with the cluster's credentials.
pub fn auth_registry(c: &Cluster) -> Registry {
    Registry::with_basic_auth(
        &c.var("NODEIMAGE_AUTH_REGISTRY"),
        &c.var("NODEIMAGE_AUTH_USER"),
        &c.var("NODEIMAGE_AUTH_PASSWORD"),
    )
}

/// Pushes a fresh image `e2e/<prefix>-<random>:v1` with `bytes` of random
/// content, so that no node holds it yet.
pub fn push_unique(reg: &Registry, prefix: &str, bytes: usize) -> PushedImage {
    let repo = format!("e2e/{prefix}-{}", random_suffix());
    reg.push_image(&repo, Some("v1"), bytes)
        .unwrap_or_else(|e| panic!("pushing {repo} to {}: {e}", reg.host))
}

/// The same pushed image, named through another registry host (a proxy).
pub fn via(image: &PushedImage, host: &str) -> PushedImage {
    PushedImage {
        name: format!("{host}/{}", image.repository),
        ..image.clone()
    }
}

/// A `.dockerconfigjson` payload with credentials for `hosts`.
pub fn docker_config_json(hosts: &[&str], user: &str, password: &str) -> String {
    let auth = STANDARD.encode(format!("{user}:{password}"));
    let auths: serde_json::Map<String, Value> = hosts
        .iter()
        .map(|h| {
            (
                h.to_string(),
                json!({"username": user, "password": password, "auth": auth}),
            )
        })
        .collect();
    json!({ "auths": auths }).to_string()
}

/// A legacy `.dockercfg` payload (registry → credentials, no `auths`).
pub fn docker_cfg(host: &str, user: &str, password: &str) -> String {
    let auth = STANDARD.encode(format!("{user}:{password}"));
    json!({ host: {"username": user, "password": password, "auth": auth}}).to_string()
}

/// Creates (or, with `replace`, replaces) a Secret holding `payload` under
/// `key`; returns its `data` as the API stores it.
pub fn put_secret(
    c: &Cluster,
    ns: &str,
    name: &str,
    type_: &str,
    key: &str,
    payload: &str,
    replace: bool,
) -> Value {
    let obj = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": type_,
        "data": { key: STANDARD.encode(payload) },
    });
    let verb = if replace { "replace" } else { "create" };
    c.kubectl_ok(&[verb, "-f", "-"], Some(&obj.to_string()));
    obj["data"].clone()
}

/// The copies (in [`SECRETS_NS`]) of the secret `ns/name`.
pub fn copies_of(c: &Cluster, ns: &str, name: &str) -> Vec<Value> {
    let source = format!("{ns}/{name}");
    list(
        c,
        "secrets",
        Some(SECRETS_NS),
        &["-l", &format!("{COPY_LABEL}=true")],
    )
    .into_iter()
    .filter(|s| s["metadata"]["annotations"][SOURCE_ANNOTATION] == source.as_str())
    .collect()
}

/// The job references listed on a copy.
pub fn references(copy: &Value) -> Vec<String> {
    copy["metadata"]["annotations"][REFERENCES_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// How a copy refers to an ImagePullJob.
pub fn job_reference(ns: &str, name: &str) -> String {
    format!("ImagePullJob/{ns}/{name}")
}

/// Waits until `ns/name` has exactly one copy, named `<ns>.<name>-…`, with
/// `data` and a reference to the job `job`; returns it.
pub fn wait_copy(c: &Cluster, ns: &str, name: &str, data: &Value, job: &str) -> Value {
    let want_ref = job_reference(ns, job);
    eventually(
        &format!("a copy of secret {ns}/{name} referencing {want_ref}"),
        Duration::from_secs(60),
        || {
            let copies = copies_of(c, ns, name);
            let [copy] = copies.as_slice() else {
                return Err(format!("{} copies: {copies:?}", copies.len()));
            };
            let prefix = format!("{ns}.{name}-");
            let cname = copy["metadata"]["name"].as_str().unwrap_or_default();
            if !cname.starts_with(&prefix) {
                return Err(format!("copy is named {cname}, expected {prefix}…"));
            }
            if copy["data"] != *data {
                return Err(format!(
                    "copy data {} differs from the source's {data}",
                    copy["data"]
                ));
            }
            if !references(copy).contains(&want_ref) {
                return Err(format!("copy references {:?}", references(copy)));
            }
            Ok(copy.clone())
        },
    )
}

/// Waits until `ns/name` has no copy left.
pub fn wait_no_copy(c: &Cluster, ns: &str, name: &str, timeout: Duration) {
    eventually(
        &format!("the copy of secret {ns}/{name} to be deleted"),
        timeout,
        || {
            let copies = copies_of(c, ns, name);
            if copies.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "still there: {:?}",
                    copies
                        .iter()
                        .map(|s| (&s["metadata"]["name"], references(s)))
                        .collect::<Vec<_>>()
                ))
            }
        },
    );
}

/// Events (core view) in `ns` about the object `name`.
pub fn events_of(c: &Cluster, ns: &str, name: &str) -> Vec<Value> {
    list(c, "events", Some(ns), &[])
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}

// ---------------------------------------------------------------------------
// A slow registry the shared nodes can pull from
// ---------------------------------------------------------------------------

/// A throttling proxy in front of a cluster registry, registered with every
/// node's containerd (a `certs.d/<proxy>/hosts.toml`, plain HTTP) so that
/// images named `<proxy host>/…` are pulled through it. Removed when dropped.
pub struct SlowRegistry {
    /// The proxy; `proxy.host()` is the registry host of image names.
    pub proxy: Proxy,
    dirs: Vec<PathBuf>,
}

impl SlowRegistry {
    /// Starts a proxy to `upstream` (`host:port`) passing `bytes_per_second`.
    pub fn start(c: &Cluster, upstream: &str, bytes_per_second: u64) -> SlowRegistry {
        Self::start_on(c, "127.0.0.1:0", upstream, bytes_per_second)
    }

    /// [`SlowRegistry::start`] on the address `listen` (`127.0.0.1:port`).
    pub fn start_on(
        c: &Cluster,
        listen: &str,
        upstream: &str,
        bytes_per_second: u64,
    ) -> SlowRegistry {
        let proxy = Proxy::start_on(listen, upstream, bytes_per_second)
            .unwrap_or_else(|e| panic!("start the registry proxy on {listen}: {e}"));
        let host = proxy.host();
        let state = PathBuf::from(c.var("NODEIMAGE_STATE"));
        let mut dirs = Vec::new();
        for node in c.nodes() {
            let dir = state.join("nodes").join(&node).join("certs.d").join(&host);
            std::fs::create_dir_all(&dir).expect("create certs.d dir");
            std::fs::write(
                dir.join("hosts.toml"),
                format!(
                    "# Written by an e2e test (nodeimage-tests kruise::SlowRegistry)\nserver = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
                ),
            )
            .expect("write hosts.toml");
            dirs.push(dir);
        }
        SlowRegistry { proxy, dirs }
    }

    /// The registry host to put in image names.
    pub fn host(&self) -> String {
        self.proxy.host()
    }
}

impl Drop for SlowRegistry {
    fn drop(&mut self) {
        for d in &self.dirs {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Removes `image` from every node's containerd (no panic: for cleanup).
pub fn remove_from_nodes(c: &Cluster, image: &str) {
    for i in 0..c.nodes().len() {
        let _ = crate::cri::remove_image(&c.socket(i), image);
    }
}

// ---------------------------------------------------------------------------
// The shared controller
// ---------------------------------------------------------------------------

/// The shared controller that `tests/nodeimage.sh start` runs (PID file
/// `$STATE/pids/controller.pid`, command line in `controller.cmd`). Dropping
/// this guard starts it again, exactly as nodeimage.sh does, if it is not
/// running, so a failing test never leaves the cluster without it.
pub struct SharedController {
    c: Cluster,
    pid_file: PathBuf,
    cmd: String,
}

impl SharedController {
    /// Reads the recorded PID and command line; panics if it is not running.
    pub fn attach(c: &Cluster) -> SharedController {
        let pids = PathBuf::from(c.var("NODEIMAGE_STATE")).join("pids");
        let cmd = std::fs::read_to_string(pids.join("controller.cmd")).expect(
            "read $STATE/pids/controller.cmd: start nodeimage with tests/nodeimage.sh start",
        );
        let s = SharedController {
            c: c.clone(),
            pid_file: pids.join("controller.pid"),
            cmd: cmd.trim_end().to_string(),
        };
        assert!(
            s.running_pid().is_some(),
            "the shared controller is not running; start it with tests/nodeimage.sh start"
        );
        s
    }

    fn cmdline_of(pid: u32) -> Option<String> {
        let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        let parts: Vec<String> = raw
            .split(|b| *b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Some(parts.join(" "))
    }

    /// The PID of the running controller, if the PID file names a live
    /// process with the recorded command line.
    pub fn running_pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(&self.pid_file)
            .ok()?
            .trim()
            .parse()
            .ok()?;
        (Self::cmdline_of(pid).as_deref() == Some(self.cmd.as_str())).then_some(pid)
    }

    /// SIGKILL, and wait until the process is gone.
    pub fn kill(&self) {
        let pid = self.running_pid().expect("the shared controller runs");
        let st = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(st.success(), "kill -KILL {pid} failed");
        crate::wait_for(
            &format!("controller pid {pid} to exit"),
            Duration::from_secs(30),
            || (Self::cmdline_of(pid).as_deref() != Some(self.cmd.as_str())).then_some(()),
        );
    }

    fn health_url(&self) -> String {
        let addr = self
            .c
            .nodeimage_vars()
            .get("NODEIMAGE_CONTROLLER_HEALTH")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:18080".into());
        format!("http://{addr}/readyz")
    }

    /// Starts the controller with its recorded command line, logging to
    /// `$STATE/logs/controller.log` and recording its PID, as nodeimage.sh's
    /// `start_daemon` does, unless one is running already; waits until ready.
    pub fn ensure_running(&self) {
        if self.running_pid().is_none() {
            let state = PathBuf::from(self.c.var("NODEIMAGE_STATE"));
            let log_path = state.join("logs/controller.log");
            let mut log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .expect("open controller.log");
            use std::io::Write;
            let _ = writeln!(
                log,
                "\n===== {} starting (restarted by an e2e test): {}",
                chrono_now(),
                self.cmd
            );
            let err = log.try_clone().expect("clone log handle");
            let mut parts = self.cmd.split(' ');
            let program = parts.next().expect("recorded command is not empty");
            let child = Command::new(program)
                .args(parts)
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(err)
                // Its own process group: it outlives this test process.
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| panic!("restart the controller ({}): {e}", self.cmd));
            std::fs::write(&self.pid_file, child.id().to_string()).expect("write controller.pid");
            // Not waited for: the controller keeps running after the test.
            std::mem::forget(child);
        }
        let url = self.health_url();
        crate::wait_for(
            "the restarted controller to be ready",
            Duration::from_secs(120),
            || (crate::http::status_of(&url) == Some(200)).then_some(()),
        );
    }
}

impl Drop for SharedController {
    fn drop(&mut self) {
        if self.running_pid().is_none() {
            eprintln!("restarting the shared controller the test stopped");
            let r =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.ensure_running()));
            if r.is_err() {
                eprintln!("the shared controller did not come back; run tests/nodeimage.sh start");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_configs() {
        let v: Value = serde_json::from_str(&docker_config_json(&["r:1"], "u", "p")).unwrap();
        assert_eq!(v["auths"]["r:1"]["auth"], "dTpw");
        let v: Value = serde_json::from_str(&docker_cfg("r:1", "u", "p")).unwrap();
        assert_eq!(v["r:1"]["username"], "u");
        assert!(v.get("auths").is_none());
    }

    #[test]
    fn job_phases() {
        let ni = json!({
            "spec": {"images": {"r/a": {"tags": [
                {"tag": "v1", "version": 2, "ownerReferences": [{"uid": "u1"}]},
            ]}}},
            "status": {"imageStatuses": {"r/a": {"tags": [
                {"tag": "v1", "version": 1, "phase": "Succeeded"},
            ]}}},
        });
        assert_eq!(job_phase(&ni, "r/a", "v1", "u1").as_deref(), Some(""));
        assert_eq!(job_phase(&ni, "r/a", "v1", "u2"), None);
        assert!(is_pulling(""));
        let mut done = ni.clone();
        done["status"]["imageStatuses"]["r/a"]["tags"][0]["version"] = json!(2);
        assert_eq!(
            job_phase(&done, "r/a", "v1", "u1").as_deref(),
            Some("Succeeded")
        );
        assert!(!is_pulling("Succeeded"));
    }
}
