//! Support code for nodeimage end-to-end tests: reading the local cluster's
//! environment file and driving its API server with `kubectl`, as users do.
//!
//! The end-to-end tests are `#[ignore]`d so that a plain `cargo test` works
//! without a cluster; `make test` starts the cluster and runs them with
//! `--ignored`.

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
