//! Support code for nodeimage end-to-end tests: reading the local cluster's
//! environment file and driving its API server with `kubectl`, as users do.
//!
//! The end-to-end tests are `#[ignore]`d so that a plain `cargo test` works
//! without a cluster; `make test` starts the cluster and runs them with
//! `--ignored`.
//!
//! Modules: [`cri`] (what a node's containerd holds), [`registry`] (push
//! generated images), [`proxy`] (a throttling, request-counting registry
//! proxy), [`process`] (test-owned daemons, registries and containerds),
//! [`nodeimage`] (reading NodeImages and waiting on tag phases), [`http`],
//! [`kruise`] (OpenKruise job tests: namespaces, jobs, secret copies, fake
//! NodeImages, an image that pulls slowly on the nodes (`SlowImage`), the
//! shared controller),
//! [`prepull`] (KubeEdge ImagePrePullJob tests: jobs, test Nodes, image
//! copies, an ordered watch of NodeImages), [`helm`] (the chart tests),
//! [`install`] (the install test: its environment, steps and diagnostics),
//! [`tenant`] (a user with rights in one namespace only, through its token),
//! [`leaseprobe`] (`ni-sim probe`: Lease renewals as kubelets make them, timed).

pub mod bandwidth;
pub mod cri;
pub mod docs;
pub mod eraser;
pub mod grpc_tap;
pub mod helm;
pub mod http;
pub mod httpproxy;
pub mod install;
pub mod kruise;
pub mod leaseprobe;
pub mod nodeimage;
pub mod prepull;
pub mod process;
pub mod proxy;
pub mod realnodes;
pub mod registry;
pub mod tenant;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The local cluster, as described by the env file `tests/cluster/up.sh` writes.
#[derive(Clone, Debug)]
pub struct Cluster {
    vars: BTreeMap<String, String>,
}

/// Repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

impl Cluster {
    /// Loads the env file named by `NODEIMAGE_ENV`, else `<repo>/.state/env.sh`.
    pub fn load() -> Cluster {
        let path = std::env::var_os("NODEIMAGE_ENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join(".state/env.sh"));
        // cargo runs tests in the package directory: a relative path given
        // from the repository root is found there too.
        let path = if path.is_relative() && !path.exists() {
            repo_root().join(path)
        } else {
            path
        };
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "cannot read the local cluster's env file {}: {e}; start it with tests/cluster/up.sh",
                path.display()
            )
        });
        Cluster {
            vars: parse_env_file(&text),
        }
    }

    /// A variable of the env file; panics with its name when absent.
    pub fn var(&self, name: &str) -> String {
        self.vars
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is not set in the cluster env file"))
    }

    /// A variable of the cluster env file, if set.
    pub fn try_var(&self, name: &str) -> Option<String> {
        self.vars.get(name).cloned()
    }

    /// The same cluster with `name` set to `value` (for example another
    /// KUBECONFIG, to act as someone else).
    pub fn with_var(&self, name: &str, value: &str) -> Cluster {
        let mut vars = self.vars.clone();
        vars.insert(name.to_string(), value.to_string());
        Cluster { vars }
    }

    /// Node names, in order.
    pub fn nodes(&self) -> Vec<String> {
        self.var("NODEIMAGE_NODES")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    }

    /// A `kubectl` command bound to the cluster's kubeconfig.
    pub fn kubectl_cmd(&self) -> Command {
        let mut c = Command::new(self.var("KUBECTL"));
        c.env("KUBECONFIG", self.var("KUBECONFIG"));
        c
    }

    /// Runs kubectl with `args` and optional stdin.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> KubectlResult {
        let mut c = self.kubectl_cmd();
        c.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("kubectl starts");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin is piped");
            pipe.write_all(input.as_bytes())
                .expect("write kubectl stdin");
        }
        let out = child.wait_with_output().expect("kubectl runs");
        KubectlResult::from(out)
    }

    /// Runs kubectl and panics with its output unless it succeeds.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let r = self.kubectl(args, stdin);
        assert!(
            r.success,
            "kubectl {args:?} failed:\n{}\n{}",
            r.stdout, r.stderr
        );
        r.stdout
    }

    /// Runs `kubectl` with `args` (a `get … -o json --watch`) and hands each
    /// JSON document it prints to `each`, on a thread of its own, until the
    /// output ends: the one reader of every watch the tests keep. The child
    /// is the caller's to stop.
    pub fn kubectl_watch(
        &self,
        args: &[&str],
        mut each: impl FnMut(serde_json::Value) + Send + 'static,
    ) -> std::process::Child {
        let mut child = self
            .kubectl_cmd()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start kubectl get --watch");
        let out = child.stdout.take().expect("stdout is piped");
        std::thread::spawn(move || {
            let stream = serde_json::Deserializer::from_reader(std::io::BufReader::new(out))
                .into_iter::<serde_json::Value>();
            for doc in stream {
                let Ok(doc) = doc else { break };
                each(doc);
            }
        });
        child
    }

    /// `kubectl get ARGS -o json` as JSON, or None when the object does not
    /// exist; any other failure panics with kubectl's words.
    pub fn get_json(&self, args: &[&str]) -> Option<serde_json::Value> {
        let mut all = vec!["get"];
        all.extend(args);
        all.extend(["-o", "json"]);
        let r = self.kubectl(&all, None);
        if !r.success {
            assert!(
                r.stderr.contains("NotFound") || r.stderr.contains("not found"),
                "kubectl {all:?}: {}",
                r.stderr
            );
            return None;
        }
        let parsed = serde_json::from_str(&r.stdout);
        Some(parsed.unwrap_or_else(|e| panic!("kubectl printed no JSON ({e}): {}", r.stdout)))
    }

    /// `kubectl delete WHAT --ignore-not-found --wait=false`, for cleanup: a
    /// failure is printed, never a panic.
    pub fn delete_quietly(&self, what: &[&str]) {
        let mut args = vec!["delete"];
        args.extend(what);
        args.extend(["--ignore-not-found", "--wait=false"]);
        let r = self.kubectl(&args, None);
        if !r.success {
            eprintln!("cleanup: kubectl delete {}: {}", what.join(" "), r.stderr);
        }
    }

    /// Where the shared controller serves health and metrics
    /// (`NODEIMAGE_CONTROLLER_HEALTH` of nodeimage.sh's env file).
    pub fn controller_health(&self) -> String {
        self.nodeimage_vars()
            .get("NODEIMAGE_CONTROLLER_HEALTH")
            .cloned()
            .unwrap_or_else(|| "127.0.0.1:18080".into())
    }

    /// The env file `tests/nodeimage.sh start` writes (`$STATE/nodeimage.env`),
    /// empty when absent.
    pub fn nodeimage_vars(&self) -> BTreeMap<String, String> {
        let path = PathBuf::from(self.var("NODEIMAGE_STATE")).join("nodeimage.env");
        std::fs::read_to_string(path)
            .map(|t| parse_env_file(&t))
            .unwrap_or_default()
    }

    /// Directory of the nodeimage binaries (`NODEIMAGE_BIN`, else target/debug).
    pub fn nodeimage_bin(&self) -> PathBuf {
        self.nodeimage_vars()
            .get("NODEIMAGE_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("target/debug"))
    }

    /// The containerd socket of node `index` (0-based).
    pub fn socket(&self, index: usize) -> PathBuf {
        PathBuf::from(self.var(&format!("NODEIMAGE_CONTAINERD_{}", index + 1)))
    }

    /// The containerd socket of the node named `node`.
    pub fn node_socket(&self, node: &str) -> PathBuf {
        let i = self
            .nodes()
            .iter()
            .position(|n| n == node)
            .unwrap_or_else(|| panic!("{node} is not a node of the local cluster"));
        self.socket(i)
    }

    /// Every node of the local cluster with the runtime its containerd
    /// reports (CRI `Version`), in order; panics when a node's runtime does
    /// not answer.
    pub fn runtime_nodes(&self) -> Vec<RuntimeNode> {
        self.nodes()
            .into_iter()
            .enumerate()
            .map(|(index, name)| {
                let socket = self.socket(index);
                let (runtime, version) =
                    cri::version(&socket).unwrap_or_else(|e| panic!("CRI Version of {name}: {e}"));
                RuntimeNode {
                    index,
                    name,
                    socket,
                    runtime: format!("{runtime} {version}"),
                }
            })
            .collect()
    }

    /// `/readyz` URL of the shared daemon of node `index` (0-based), as
    /// started by tests/nodeimage.sh.
    pub fn daemon_readyz(&self, index: usize) -> String {
        let base: u16 = self
            .nodeimage_vars()
            .get("NODEIMAGE_DAEMON_HEALTH_BASE")
            .and_then(|b| b.parse().ok())
            .unwrap_or(18100);
        format!("http://127.0.0.1:{}/readyz", base + index as u16 + 1)
    }

    /// Log file of the shared daemon of `node`.
    pub fn daemon_log(&self, node: &str) -> PathBuf {
        PathBuf::from(self.var("NODEIMAGE_STATE")).join(format!("logs/daemon-{node}.log"))
    }

    /// Installs (or updates) the CRDs and waits until they are Established.
    pub fn install_crds(&self) {
        let dir = repo_root().join("crds/yaml");
        let dir = dir.to_string_lossy();
        self.kubectl_ok(
            &["apply", "--server-side", "--force-conflicts", "-f", &dir],
            None,
        );
        self.kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                "--timeout=60s",
                "-f",
                &dir,
            ],
            None,
        );
    }
}

/// A node of the local cluster and its runtime, for tests that prove a
/// feature on each runtime of the mixed cluster.
#[derive(Clone, Debug)]
pub struct RuntimeNode {
    /// 0-based index (`Cluster::socket(index)`).
    pub index: usize,
    /// Node name (`node-1` …), also its NodeImage's name.
    pub name: String,
    /// Its containerd socket.
    pub socket: PathBuf,
    /// `name version` as CRI reports it, e.g. `containerd 1.7.35`.
    pub runtime: String,
}

impl RuntimeNode {
    /// `node-2 (containerd 1.7.35)`, for messages.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.runtime)
    }

    /// Runs `f`; a panic in it panics again with [`RuntimeNode::label`] in
    /// front of its message, so that a failure names the node and runtime.
    pub fn check<T>(&self, f: impl FnOnce() -> T) -> T {
        with_context(&self.label(), f)
    }
}

/// Runs `f`; a panic in it panics again as `context: message`.
pub fn with_context<T>(context: &str, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "(a panic without a message)".into());
            panic!("{context}: {message}");
        }
    }
}

/// Outcome of one kubectl run.
#[derive(Clone, Debug)]
pub struct KubectlResult {
    /// Exit status was zero.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl From<Output> for KubectlResult {
    fn from(o: Output) -> Self {
        KubectlResult {
            success: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }
}

/// Parses `export NAME=value` / `NAME=value` lines, with optional quotes.
pub fn parse_env_file(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let l = l.strip_prefix("export ").unwrap_or(l);
            let (k, v) = l.split_once('=')?;
            let v = v.trim();
            let quoted = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .or_else(|| v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')));
            let v = match quoted {
                Some(q) => q.to_string(),
                None => unescape(v),
            };
            Some((k.trim().to_string(), v))
        })
        .collect()
}

/// Undoes shell backslash escapes (`printf %q` output such as `a\\ b`).
fn unescape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Eight random lower-case letters and digits, for unique names.
pub fn random_suffix() -> String {
    (0..8)
        .map(|_| {
            let i = fastrand::u8(..36);
            if i < 10 {
                char::from(b'0' + i)
            } else {
                char::from(b'a' + i - 10)
            }
        })
        .collect()
}

/// `prefix-<random>`: a name no other test or run uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", random_suffix())
}

/// A loopback TCP port nothing listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a free loopback port")
}

/// Undo actions run in reverse order when dropped, also when the test
/// panics. Actions must not panic: they report failures on stderr.
#[derive(Default)]
pub struct Cleanup {
    actions: Vec<(String, Box<dyn FnOnce()>)>,
}

impl Cleanup {
    /// Registers `action`, described by `what`, to run at the end.
    pub fn defer(&mut self, what: impl Into<String>, action: impl FnOnce() + 'static) {
        self.actions.push((what.into(), Box::new(action)));
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        while let Some((what, action)) = self.actions.pop() {
            let start = Instant::now();
            action();
            if start.elapsed() > Duration::from_secs(30) {
                eprintln!("cleanup: {what} took {:?}", start.elapsed());
            }
        }
    }
}

/// Polls `check` until it returns `Some`, or panics after `timeout` with `what`.
pub fn wait_for<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Splits a multi-document YAML file into its documents.
pub fn yaml_documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        if line.trim_end() == "---" {
            docs.push(String::new());
        } else if let Some(last) = docs.last_mut() {
            last.push_str(line);
            last.push('\n');
        }
    }
    docs.into_iter()
        .filter(|d| {
            d.lines()
                .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_file_parsing() {
        let vars = parse_env_file(
            "# comment\nexport A=1\nexport B=\"two words\"\nC='x'\n\nexport D=a=b\nexport E=n-1\\ n-2\n",
        );
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "two words");
        assert_eq!(vars["C"], "x");
        assert_eq!(vars["D"], "a=b");
        assert_eq!(vars["E"], "n-1 n-2");
    }

    #[test]
    fn yaml_splitting() {
        let docs = yaml_documents("# head\n---\na: 1\n---\n# only comment\n---\nb: 2\n");
        assert_eq!(docs, vec!["a: 1\n".to_string(), "b: 2\n".to_string()]);
    }
}
