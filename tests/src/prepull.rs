//! Support for the ImagePrePullJob tests: jobs applied and read as a user
//! does (`kubectl apply`, `kubectl get -o jsonpath`), test-owned Node
//! objects (with or without a daemon), image copies under unique names, and
//! an ordered watch of several NodeImages. Everything a test creates is
//! removed when its guard is dropped.

use crate::process::Daemon;
use crate::{Cluster, unique, wait_for};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The label of KubeEdge edge nodes.
pub const EDGE_LABEL: &str = "node-role.kubernetes.io/edge";

/// The resource name kubectl users type in the KubeEdge guide.
pub const RESOURCE: &str = "imageprepulljobs.operations.kubeedge.io";

/// An ImagePrePullJob created by a test; deleted (and its finalizer awaited)
/// when dropped.
pub struct Job {
    c: Cluster,
    /// The job's name.
    pub name: String,
}

impl Job {
    /// `kubectl apply -f -` of `manifest`; panics with kubectl's output on failure.
    pub fn apply(c: &Cluster, name: &str, manifest: &str) -> Job {
        c.kubectl_ok(&["apply", "-f", "-"], Some(manifest));
        Job {
            c: c.clone(),
            name: name.to_string(),
        }
    }

    /// The job as JSON.
    pub fn get(&self) -> Value {
        let out = self
            .c
            .kubectl_ok(&["get", RESOURCE, &self.name, "-o", "json"], None);
        serde_json::from_str(&out).expect("kubectl prints JSON")
    }

    /// `kubectl get imageprepulljobs.operations.kubeedge.io NAME -o
    /// jsonpath='{.status}'`, as the guide shows it, parsed.
    pub fn status_jsonpath(&self) -> Value {
        let out = self.c.kubectl_ok(
            &["get", RESOURCE, &self.name, "-o", "jsonpath={.status}"],
            None,
        );
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("status is not JSON ({e}): {out}"))
    }

    /// Waits until `status.state` is Successful or Failed; returns the status.
    pub fn wait_finished(&self, timeout: Duration) -> Value {
        let start = Instant::now();
        let mut last = Value::Null;
        loop {
            let status = self.get()["status"].clone();
            if matches!(status["state"].as_str(), Some("Successful" | "Failed")) {
                return status;
            }
            if start.elapsed() > timeout {
                panic!(
                    "ImagePrePullJob {} not finished after {timeout:?}; status: {status}",
                    self.name
                );
            }
            if status != last {
                last = status;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// The reasons and notes of the events recorded on the job.
    pub fn events(&self) -> Vec<(String, String)> {
        let out = self.c.kubectl_ok(
            &[
                "get",
                "events",
                "-A",
                "--field-selector",
                &format!(
                    "involvedObject.kind=ImagePrePullJob,involvedObject.name={}",
                    self.name
                ),
                "-o",
                "json",
            ],
            None,
        );
        let list: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or_default().to_string(),
                    e["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Deletes the job and waits until its finalizer is done (no panics).
    pub fn delete(&self) {
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
                "cleanup: deleting ImagePrePullJob {}: {}",
                self.name, r.stderr
            );
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        self.delete();
    }
}

/// The status entry of `node` in a job status: (nodeStatus, imageStatus).
pub fn node_entry(status: &Value, node: &str) -> (Value, Vec<Value>) {
    let row = status["status"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["nodeStatus"]["nodeName"] == node)
        .unwrap_or_else(|| panic!("{node} not in job status: {status}"));
    (
        row["nodeStatus"].clone(),
        row["imageStatus"].as_array().cloned().unwrap_or_default(),
    )
}

/// The node names a job status lists, in order.
pub fn node_names(status: &Value) -> Vec<String> {
    status["status"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["nodeStatus"]["nodeName"].as_str().map(str::to_string))
        .collect()
}

/// A Node object made by a test, Ready, with its NodeImage (made by the
/// node mirror); optionally with a test-owned daemon. Deleted when dropped.
pub struct TestNode {
    c: Cluster,
    /// Node (and NodeImage) name.
    pub name: String,
    /// The daemon serving it, if any.
    pub daemon: Option<Daemon>,
}

impl TestNode {
    /// Creates edge Node `prefix-<random>` (label node-role.kubernetes.io/edge,
    /// as KubeEdge's node tasks require) with `labels`, marks it Ready, and
    /// waits for its NodeImage.
    pub fn create(c: &Cluster, prefix: &str, labels: &BTreeMap<String, String>) -> TestNode {
        let mut all = labels.clone();
        all.insert(EDGE_LABEL.into(), String::new());
        Self::create_exactly(c, prefix, &all)
    }

    /// Creates Node `prefix-<random>` with only `labels` (and the hostname),
    /// marks it Ready, and waits for its NodeImage.
    pub fn create_exactly(
        c: &Cluster,
        prefix: &str,
        labels: &BTreeMap<String, String>,
    ) -> TestNode {
        let name = unique(prefix);
        let mut all = labels.clone();
        all.insert("kubernetes.io/hostname".into(), name.clone());
        all.insert("nodeimage.dev/test-node".into(), "true".into());
        let node = json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": all},
        });
        c.kubectl_ok(&["create", "-f", "-"], Some(&node.to_string()));
        let t = TestNode {
            c: c.clone(),
            name: name.clone(),
            daemon: None,
        };
        let status = json!({"status": {"conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "nodeimage test node (made by an ImagePrePullJob test)",
        }]}});
        c.kubectl_ok(
            &[
                "patch",
                "node",
                &name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ],
            None,
        );
        wait_for(
            &format!("the NodeImage of test node {name}"),
            Duration::from_secs(30),
            || crate::nodeimage::get(c, &name).map(|_| ()),
        );
        t
    }

    /// Starts a nodeimage-daemon for this node on `socket` with `extra`
    /// flags, and waits until it is ready.
    pub fn start_daemon(&mut self, socket: &Path, extra: &[&str]) {
        let mut d = Daemon::start(&self.c, &self.name, socket, &log_dir(&self.c), extra);
        d.wait_readyz(200, Duration::from_secs(60));
        self.daemon = Some(d);
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        self.daemon = None;
        self.c.delete_quietly(&["node", &self.name]);
    }
}

/// Where test-owned daemons log.
pub fn log_dir(c: &Cluster) -> PathBuf {
    let dir = PathBuf::from(c.var("NODEIMAGE_STATE")).join("logs");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// `skopeo copy` between registries without TLS, with optional credentials
/// for the destination; panics with skopeo's output on failure.
pub fn copy_image(src: &str, dst: &str, dest_creds: Option<(&str, &str)>) {
    let mut cmd = Command::new("skopeo");
    cmd.args([
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        "--dest-tls-verify=false",
    ]);
    if let Some((u, p)) = dest_creds {
        cmd.arg(format!("--dest-creds={u}:{p}"));
    }
    cmd.arg(format!("docker://{src}"))
        .arg(format!("docker://{dst}"));
    let out = cmd.output().expect("run skopeo");
    assert!(
        out.status.success(),
        "skopeo copy {src} {dst}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `127.0.0.1:5000/<prefix>-<random>:v1`: a copy of the cluster's test:v1
/// under a name no node holds yet.
pub fn unique_image(c: &Cluster, prefix: &str) -> String {
    let registry = c.var("NODEIMAGE_REGISTRY");
    let dst = format!("{registry}/{}:v1", unique(prefix));
    copy_image(&format!("{registry}/test:v1"), &dst, None);
    dst
}

/// Removes every name of `image`'s repository (`name:tag`, `name@digest`)
/// from every listed containerd (no panics: for cleanup). Only the names go
/// (`ctr images rm`): the copies share their content with other images, and
/// CRI's RemoveImage would take every name of that content.
pub fn remove_from_nodes(sockets: &[PathBuf], image: &str) {
    let slash = image.rfind('/').unwrap_or(0);
    let name = match image[slash..].find([':', '@']) {
        Some(i) => &image[..slash + i],
        None => image,
    };
    let ctr = |s: &Path, args: &[&str]| {
        Command::new("ctr")
            .arg("--address")
            .arg(s)
            .args(["--namespace", "k8s.io", "images"])
            .args(args)
            .output()
    };
    for s in sockets {
        let refs: Vec<String> = match ctr(s, &["ls", "-q"]) {
            Ok(o) => String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|r| {
                    r.starts_with(&format!("{name}:")) || r.starts_with(&format!("{name}@"))
                })
                .map(str::to_string)
                .collect(),
            Err(e) => {
                eprintln!("cleanup: running ctr: {e}");
                continue;
            }
        };
        if refs.is_empty() {
            continue;
        }
        let mut args = vec!["rm"];
        args.extend(refs.iter().map(String::as_str));
        match ctr(s, &args) {
            Ok(o) if o.status.success() => {}
            Ok(o) => eprintln!(
                "cleanup: removing {refs:?} from {}: {}",
                s.display(),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => eprintln!("cleanup: running ctr: {e}"),
        }
    }
}

/// Every version of the NodeImages matching a label selector, in the order
/// the API server sent them (one watch, so one order). Stops when dropped.
pub struct NodeImagesWatch {
    child: Child,
    seen: Arc<Mutex<Vec<Value>>>,
}

impl NodeImagesWatch {
    /// Starts `kubectl get nodeimages -l SELECTOR -o json --watch`.
    pub fn start(c: &Cluster, selector: &str) -> NodeImagesWatch {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let args = ["get", "nodeimages", "-l", selector, "-o", "json", "--watch"];
        let child = c.kubectl_watch(&args, move |obj| {
            s.lock().unwrap_or_else(|p| p.into_inner()).push(obj);
        });
        NodeImagesWatch { child, seen }
    }

    /// The versions seen so far, in order.
    pub fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for NodeImagesWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether NodeImage `ni` (JSON) holds an entry owned by `uid` that the
/// node has not finished (no Succeeded/Failed status for its version).
pub fn working_for(ni: &Value, uid: &str) -> bool {
    let statuses = &ni["status"]["imageStatuses"];
    ni["spec"]["images"]
        .as_object()
        .into_iter()
        .flatten()
        .any(|(image, spec)| {
            spec["tags"].as_array().into_iter().flatten().any(|t| {
                let owned = t["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|o| o["uid"] == uid);
                let version = t["version"].as_i64().unwrap_or(0);
                let done = statuses[image]["tags"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|s| {
                        s["tag"] == t["tag"]
                            && s["version"].as_i64().unwrap_or(0) == version
                            && matches!(s["phase"].as_str(), Some("Succeeded" | "Failed"))
                    });
                owned && !done
            })
        })
}

/// Replays NodeImage versions in order and returns, after each, how many
/// nodes were working for `uid`; the maximum is the concurrency observed.
pub fn concurrency_over_time(versions: &[Value], uid: &str) -> Vec<usize> {
    let mut latest: BTreeMap<String, Value> = BTreeMap::new();
    versions
        .iter()
        .map(|v| {
            let name = v["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            latest.insert(name, v.clone());
            latest.values().filter(|ni| working_for(ni, uid)).count()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ni(name: &str, owner: &str, version: i64, phase: Option<&str>) -> Value {
        let status = match phase {
            Some(p) => {
                json!({"imageStatuses": {"img": {"tags": [{"tag": "v1", "version": version, "phase": p}]}}})
            }
            None => json!({}),
        };
        json!({
            "metadata": {"name": name},
            "spec": {"images": {"img": {"tags": [{"tag": "v1", "version": version, "ownerReferences": [{"uid": owner}]}]}}},
            "status": status,
        })
    }

    #[test]
    fn concurrency_replay() {
        let versions = vec![
            ni("a", "u", 0, None),
            ni("a", "u", 0, Some("Pulling")),
            ni("a", "u", 0, Some("Succeeded")),
            ni("b", "u", 0, None),
            ni("b", "u", 1, Some("Succeeded")),
            ni("c", "other", 0, None),
        ];
        assert_eq!(
            concurrency_over_time(&versions, "u"),
            vec![1, 1, 0, 1, 0, 0]
        );
        let overlapping = vec![ni("a", "u", 0, None), ni("b", "u", 0, Some("Pulling"))];
        assert_eq!(concurrency_over_time(&overlapping, "u"), vec![1, 2]);
    }
}
