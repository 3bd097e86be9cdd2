//! Support for the install test (tests/tests/install.rs): the environment it
//! reads (the local cluster's env file, the real node's, the images' and the
//! release's), its steps with their `---- install: <step>` and `ok: …`
//! lines, the diagnostics a failing step prints (pods, events, logs), and
//! the kubectl and helm wrappers it runs everything through, each mirroring
//! a shell idiom of the script it replaced (`>/dev/null`, `2>&1`, `$(…)`).
//!
//! Progress lines, diagnostics and the commands' error output go straight
//! to the process's stderr, past the test harness's capture, so that the log
//! of tests/run-all.sh reads the same whether the test passes or fails.

use crate::helm::Run;
use crate::proxy::Proxy;
use crate::{Cluster, parse_env_file, repo_root};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The Helm release.
pub const RELEASE: &str = "nodeimage";
/// The release namespace.
pub const NS: &str = "nodeimage-system";
/// Where the controller copies pull secrets (`secretsNamespace`).
pub const SECRETS_NS: &str = "nodeimage-secrets";
/// The tenant's namespace: its pull secret, jobs and Pod.
pub const TENANT: &str = "install-tenant";

/// A line on the process's stderr, past the test harness's capture.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Runs `cmd` with `stdin` (none: /dev/null), capturing both streams. Never
/// panics: a command that cannot start is a failed run saying why.
pub fn exec(mut cmd: Command, stdin: Option<&str>) -> Run {
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let shown = format!("{cmd:?}");
    let failed = |e: std::io::Error| Run {
        success: false,
        stdout: String::new(),
        stderr: format!("cannot run {shown}: {e}\n"),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    // Written from a thread: a large input (the CRDs) must not wait for
    // the child to drain its output first.
    let writer = match (child.stdin.take(), stdin) {
        (Some(mut pipe), Some(input)) => {
            let input = input.to_string();
            Some(std::thread::spawn(move || {
                let _ = pipe.write_all(input.as_bytes());
            }))
        }
        _ => None,
    };
    let out = child.wait_with_output();
    if let Some(w) = writer {
        let _ = w.join();
    }
    match out {
        Ok(o) => Run {
            success: o.status.success(),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        },
        Err(e) => failed(e),
    }
}

/// What a failing step printed: both streams, trailing newlines cut, as
/// `$(cat file)` of a `>file 2>&1` gives.
pub fn text(r: &Run) -> String {
    r.text().trim_end().to_string()
}

/// The last `n` lines of `text`.
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The message of a caught panic.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(a panic without a message)".into())
}

/// A daemon of the local cluster stopped by the test, started again with
/// its recorded command line when the test ends.
struct Stopped {
    name: String,
    cmd: String,
}

/// The install test's environment, and what it must undo at the end.
pub struct Install {
    /// The cluster's variables with real-node.env's, nodeimage-images.env's
    /// and the release's release.env's added.
    pub c: Cluster,
    /// `NODEIMAGE_STATE`.
    pub state: PathBuf,
    /// `RELEASE_DIR` (default dist/): the release's files.
    pub release_dir: PathBuf,
    /// The helm binary (`NODEIMAGE_HELM`, else `$NODEIMAGE_STATE/bin/helm`).
    pub helm: PathBuf,
    /// The first real node's name (kubelet-1).
    pub node: String,
    /// Every real node of the stack (kubelet-1, kubelet-2).
    pub nodes: Vec<crate::realnodes::RealNodeEnv>,
    /// A scratch directory, removed at the end.
    pub work: tempfile::TempDir,
    kubectl: String,
    kubeconfig: String,
    stopped: Option<Stopped>,
    slow_proxy: Option<Proxy>,
}

impl Install {
    /// The real nodes' names, in order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// Reads the environment; panics naming what is missing and what makes it.
    pub fn load() -> Install {
        let mut c = Cluster::load();
        let state = PathBuf::from(c.var("NODEIMAGE_STATE"));
        let release_dir = std::env::var_os("RELEASE_DIR")
            .filter(|d| !d.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_root().join("dist"));
        // cargo runs tests in the package directory: a path relative to the
        // repository root, as run-all.sh gives it, is found there.
        let release_dir = if release_dir.is_relative() {
            repo_root().join(release_dir)
        } else {
            release_dir
        };
        for f in [
            state.join("real-node.env"),
            state.join("nodeimage-images.env"),
            release_dir.join("release.env"),
        ] {
            let text = std::fs::read_to_string(&f).unwrap_or_else(|e| {
                panic!(
                    "no {}: run tests/cluster/real-node.sh and release/release.sh first ({e})",
                    f.display()
                )
            });
            for (k, v) in parse_env_file(&text) {
                c = c.with_var(&k, &v);
            }
        }
        let helm = crate::helm::helm_bin(&c);
        let work = tempfile::Builder::new()
            .prefix("nodeimage-install.")
            .tempdir()
            .expect("create a scratch directory under the temporary directory");
        let nodes = crate::realnodes::RealNodeEnv::all(&state);
        Install {
            node: c.var("NODEIMAGE_REAL_NODE"),
            nodes,
            kubectl: c.var("KUBECTL"),
            kubeconfig: c.var("KUBECONFIG"),
            c,
            state,
            release_dir,
            helm,
            work,
            stopped: None,
            slow_proxy: None,
        }
    }

    /// A variable of the environment (panics naming it when absent).
    pub fn var(&self, name: &str) -> String {
        self.c.var(name)
    }

    /// `$WORK/name`.
    pub fn work_path(&self, name: &str) -> PathBuf {
        self.work.path().join(name)
    }

    /// Runs one step: its `---- install: <step> (HH:MM:SS)` line, then `f`;
    /// when `f` panics, `FAIL: <message>` and [`Install::diagnose`], then a
    /// panic naming the step.
    pub fn step<T>(&mut self, name: &str, f: impl FnOnce(&mut Install) -> T) -> T {
        let mut date = Command::new("date");
        date.arg("+%H:%M:%S");
        let clock = exec(date, None);
        say(&format!("\n---- install: {name} ({})", clock.stdout.trim()));
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self))) {
            Ok(v) => v,
            Err(payload) => {
                let message = panic_message(payload.as_ref());
                say(&format!("\nFAIL: {message}"));
                self.diagnose();
                panic!("install: step \"{name}\": {message}");
            }
        }
    }

    /// `  ok: <what>`.
    pub fn pass(&self, what: &str) {
        say(&format!("  ok: {what}"));
    }

    /// What a failing step leaves for the reader: pods, events, logs.
    pub fn diagnose(&self) {
        let both = |r: Run| {
            let t = r.text();
            if !t.is_empty() {
                say(t.trim_end());
            }
        };
        say(&format!("---- pods in {NS} and {TENANT}"));
        both(self.kc(&["get", "pods", "-n", NS, "-o", "wide"]));
        both(self.kc(&["get", "pods", "-n", TENANT, "-o", "wide"]));
        say(&format!("---- recent events in {NS} and {TENANT}"));
        for ns in [NS, TENANT] {
            let r = self.kc(&["get", "events", "-n", ns, "--sort-by=.lastTimestamp"]);
            let t = last_lines(&r.text(), 20);
            if !t.is_empty() {
                say(&t);
            }
        }
        let pods = self.kc(&["get", "pods", "-n", NS, "-o", "name"]).stdout;
        for p in pods.split_whitespace() {
            say(&format!("---- logs of {p}"));
            both(self.kc(&["logs", "-n", NS, p, "--tail=30", "--all-containers"]));
        }
    }

    /// Until `check` succeeds, every 2 s; panics after `secs` seconds with
    /// `what` and the last 3 lines `check` returned.
    pub fn wait_for(&self, what: &str, secs: u64, mut check: impl FnMut() -> Result<(), String>) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            match check() {
                Ok(()) => return,
                Err(last) => {
                    if Instant::now() >= deadline {
                        panic!(
                            "{what}: not within {secs}s (last: {})",
                            last_lines(&last, 3)
                        );
                    }
                    std::thread::sleep(Duration::from_secs(2));
                }
            }
        }
    }

    // ---------------------------------------------------------------------
    // kubectl (the script's `kc`: every call with --request-timeout=30s)
    // ---------------------------------------------------------------------

    fn kc_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.kubectl);
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .arg("--request-timeout=30s")
            .args(args);
        cmd
    }

    /// `kc ARGS`, both streams captured (`2>&1`, `>file 2>&1`).
    pub fn kc(&self, args: &[&str]) -> Run {
        exec(self.kc_cmd(args), None)
    }

    /// `kc ARGS <<<stdin`, both streams captured.
    pub fn kc_in(&self, args: &[&str], stdin: &str) -> Run {
        exec(self.kc_cmd(args), Some(stdin))
    }

    /// `kc ARGS >/dev/null`: whether it succeeded; its errors go to the log.
    pub fn kc_quiet(&self, args: &[&str]) -> bool {
        let r = self.kc(args);
        if !r.stderr.is_empty() {
            say(r.stderr.trim_end());
        }
        r.success
    }

    /// `kc ARGS >/dev/null 2>&1`: whether it succeeded.
    pub fn kc_silent(&self, args: &[&str]) -> bool {
        self.kc(args).success
    }

    /// `$(kc ARGS)`: its output without the trailing newline; its errors go
    /// to the log.
    pub fn kc_out(&self, args: &[&str]) -> String {
        let r = self.kc(args);
        if !r.stderr.is_empty() {
            say(r.stderr.trim_end());
        }
        r.stdout.trim_end().to_string()
    }

    /// `kc ARGS >/dev/null` under `set -e`: panics with its error unless it
    /// succeeds.
    pub fn kc_ok(&self, args: &[&str], stdin: Option<&str>) {
        let r = exec(self.kc_cmd(args), stdin);
        assert!(
            r.success,
            "kubectl {} failed: {}",
            args.join(" "),
            r.stderr.trim_end()
        );
        if !r.stderr.is_empty() {
            say(r.stderr.trim_end());
        }
    }

    /// `kc apply -f - >/dev/null <<EOF`.
    pub fn apply(&self, manifest: &str) {
        self.kc_ok(&["apply", "-f", "-"], Some(manifest));
    }

    /// `kc create ARGS --dry-run=client -o yaml | kc apply -f - >/dev/null`:
    /// creates the object or leaves the one there.
    pub fn create_or_apply(&self, args: &[&str]) {
        let mut all = vec!["create"];
        all.extend(args);
        all.extend(["--dry-run=client", "-o", "yaml"]);
        let r = self.kc(&all);
        assert!(
            r.success,
            "kubectl {} failed: {}",
            all.join(" "),
            r.stderr.trim_end()
        );
        self.apply(&r.stdout);
    }

    /// `kc rollout status -n NS WHAT --timeout=TIMEOUT >/dev/null`: whether
    /// the rollout finished in time.
    pub fn rollout_status(&self, ns: &str, what: &str, timeout: &str) -> bool {
        self.kc_quiet(&[
            "rollout",
            "status",
            "-n",
            ns,
            what,
            &format!("--timeout={timeout}"),
        ])
    }

    // ---------------------------------------------------------------------
    // helm and the other tools
    // ---------------------------------------------------------------------

    /// `helm ARGS` against the cluster, both streams captured.
    pub fn helm(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(&self.helm);
        cmd.env("KUBECONFIG", &self.kubeconfig).args(args);
        exec(cmd, None)
    }

    /// A shell block of the docs (crate::docs), run with `bash -euo
    /// pipefail` against the cluster: `kubectl` and `helm` are this test's
    /// binaries (shell functions, so the block's own words are kept), and
    /// helm's commands that reach a registry get `--plain-http` for the
    /// loopback registry (the others refuse the flag).
    pub fn doc_script(&self, script: &str) -> Run {
        let prelude = "kubectl() { \"$NI_KUBECTL\" --request-timeout=30s \"$@\"; }\n\
                       helm() { case $1 in install|upgrade|pull|push|show|template) \
                       \"$NI_HELM\" \"$@\" --plain-http ;; *) \"$NI_HELM\" \"$@\" ;; esac; }\n";
        let mut cmd = Command::new("bash");
        cmd.args(["-euo", "pipefail", "-c"])
            .arg(format!("{prelude}{script}"))
            .env("KUBECONFIG", &self.kubeconfig)
            .env("NI_KUBECTL", &self.kubectl)
            .env("NI_HELM", &self.helm);
        exec(cmd, None)
    }

    /// `PROGRAM ARGS`, both streams captured.
    pub fn tool(&self, program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Run {
        let mut cmd = Command::new(program);
        cmd.args(args);
        exec(cmd, None)
    }

    /// A function of tests/cluster/lib.sh, `. lib.sh && FUNCTION ARGS`, with
    /// this environment's state directory; `args` is one word list, split
    /// by the shell as the script split it.
    fn lib_sh(&self, function: &str, name: &str, args: &str) -> Run {
        let lib = repo_root().join("tests/cluster/lib.sh");
        let mut cmd = Command::new("bash");
        cmd.arg("-c")
            .arg(format!(r#". "$1" && {function} "$2" $3"#))
            .arg("lib.sh")
            .arg(&lib)
            .arg(name)
            .arg(args)
            .env("NODEIMAGE_STATE", &self.state);
        exec(cmd, None)
    }

    /// `tests/nodeimage.sh stop >/dev/null 2>&1 || true`.
    pub fn stop_nodeimage_processes(&self) {
        let mut cmd = Command::new(repo_root().join("tests/nodeimage.sh"));
        cmd.arg("stop").env("NODEIMAGE_STATE", &self.state);
        let _ = exec(cmd, None);
    }

    /// The command line tests/cluster/lib.sh recorded for daemon `name`
    /// (`recorded_cmd`), empty when unknown.
    pub fn recorded_cmd(&self, name: &str) -> String {
        std::fs::read_to_string(self.state.join("pids").join(format!("{name}.cmd")))
            .unwrap_or_default()
    }

    /// Stops daemon `name` of the local cluster (lib.sh's `stop_daemon`),
    /// which the end of the test starts again with `cmd`, its recorded
    /// command line, unless [`Install::start_stopped_daemon`] did.
    pub fn stop_daemon(&mut self, name: &str, cmd: &str) {
        self.stopped = Some(Stopped {
            name: name.to_string(),
            cmd: cmd.to_string(),
        });
        let r = self.lib_sh("stop_daemon", name, "");
        assert!(r.success, "stop_daemon {name} failed: {}", text(&r));
    }

    /// Starts the daemon [`Install::stop_daemon`] stopped (lib.sh's
    /// `start_daemon` with the recorded command line).
    pub fn start_stopped_daemon(&mut self) {
        if let Some(s) = self.stopped.take() {
            let r = self.lib_sh("start_daemon", &s.name, &s.cmd);
            assert!(r.success, "start_daemon {} failed: {}", s.name, text(&r));
        }
    }

    /// Starts a throttling proxy (tests/src/proxy.rs) in front of registry
    /// `upstream` at `bytes_per_second`, kept until the test ends; its
    /// `127.0.0.1:PORT`.
    pub fn start_slow_proxy(&mut self, upstream: &str, bytes_per_second: u64) -> String {
        let proxy = Proxy::start(upstream, bytes_per_second)
            .unwrap_or_else(|e| panic!("the slow proxy did not start: {e}"));
        let addr = proxy.addr.to_string();
        self.slow_proxy = Some(proxy);
        addr
    }

    /// A file of the chart under test or of the repository.
    pub fn repo_path(&self, path: &str) -> PathBuf {
        repo_root().join(path)
    }

    /// The CRD files of charts/nodeimage/crds, in order.
    pub fn chart_crd_files(&self) -> Vec<PathBuf> {
        let dir = self.repo_path("charts/nodeimage/crds");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        files
    }

    /// `p` as text.
    pub fn show(p: &Path) -> String {
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Install {
    /// The script's cleanup: the slow proxy stopped, the stopped registry
    /// back for whatever runs next, and unless `KEEP_INSTALL_TEST` is set
    /// the Pod, the release and both namespaces deleted.
    fn drop(&mut self) {
        self.slow_proxy = None;
        if let Some(s) = self.stopped.take() {
            let _ = self.lib_sh("start_daemon", &s.name, &s.cmd);
        }
        let keep = std::env::var_os("KEEP_INSTALL_TEST").is_some_and(|v| !v.is_empty());
        if !keep {
            self.kc(&[
                "delete",
                "pod",
                "-n",
                TENANT,
                "app",
                "--ignore-not-found",
                "--wait=false",
            ]);
            self.helm(&["uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "2m"]);
            self.kc(&[
                "delete",
                "namespace",
                TENANT,
                NS,
                "--ignore-not-found",
                "--wait=false",
            ]);
        }
        if std::thread::panicking() {
            say("install tests FAILED");
        } else {
            say("install tests passed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_of_a_text() {
        assert_eq!(last_lines("a\nb\nc\nd\n", 3), "b\nc\nd");
        assert_eq!(last_lines("a\n", 3), "a");
        assert_eq!(last_lines("", 3), "");
    }

    #[test]
    fn exec_reports_a_command_that_cannot_start() {
        let r = exec(Command::new("/nonexistent/nodeimage-install-test"), None);
        assert!(!r.success);
        assert!(r.stderr.starts_with("cannot run"), "{}", r.stderr);
        let r = exec(Command::new("cat"), Some("in\n"));
        assert!(r.success && r.stdout == "in\n", "{r:?}");
    }
}
