//! Support for the chart tests: the helm binary tests/chart.sh installed,
//! renders of charts/nodeimage, and kubeconfigs that hold nothing but one
//! ServiceAccount token (to act as the chart's ServiceAccounts).

use crate::{Cluster, repo_root};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Image repositories the renders need (no images are published; the
/// rendered pods never run, so any well-formed name does).
pub const IMAGES: [&str; 4] = [
    "--set",
    "controller.image.repository=registry.example.test/nodeimage/controller",
    "--set",
    "daemon.image.repository=registry.example.test/nodeimage/daemon",
];

/// The chart directory.
pub fn chart() -> PathBuf {
    repo_root().join("charts/nodeimage")
}

/// What a helm or kubectl run printed, and whether it succeeded.
#[derive(Debug)]
pub struct Run {
    /// Exit status 0.
    pub success: bool,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    /// Both streams, for messages.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `cmd`, capturing both streams.
pub fn run(mut cmd: Command) -> Run {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    Run {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The helm binary: `NODEIMAGE_HELM` (tests/chart.sh sets it), else
/// `$NODEIMAGE_STATE/bin/helm`.
pub fn helm_bin(c: &Cluster) -> PathBuf {
    let bin = std::env::var_os("NODEIMAGE_HELM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(c.var("NODEIMAGE_STATE")).join("bin/helm"));
    assert!(
        bin.is_file(),
        "no helm at {} (tests/chart.sh installs it)",
        bin.display()
    );
    bin
}

/// `helm ARGS` against the cluster.
pub fn helm(c: &Cluster, args: &[&str]) -> Run {
    let mut cmd = Command::new(helm_bin(c));
    cmd.env("KUBECONFIG", c.var("KUBECONFIG")).args(args);
    run(cmd)
}

/// `helm template RELEASE charts/nodeimage --namespace NS` with the image
/// repositories and `extra`.
pub fn render(c: &Cluster, release: &str, ns: &str, extra: &[&str]) -> Run {
    let chart = chart();
    let chart = chart.to_string_lossy();
    let mut args = vec!["template", release, &chart, "--namespace", ns];
    args.extend(IMAGES);
    args.extend(extra);
    helm(c, &args)
}

/// The `kubectl create token` arguments that give a token of
/// ServiceAccount `ns/sa` the node name `node`, as kubelet's pod tokens
/// carry it (`authentication.kubernetes.io/node-name`). From Kubernetes
/// 1.31 on, the token is bound to the Node itself (ServiceAccountTokenNodeBinding,
/// beta there; kubectl before 1.31 refuses the kind). Before, it is bound to
/// a Pod of that ServiceAccount placed on the node (`spec.nodeName`; no
/// kubelet runs it), which is how the node name gets into pod tokens there
/// (ServiceAccountTokenPodNodeInfo, beta and on by default in 1.30); the Pod
/// is `token-<node>` in `ns`, deleted with the namespace or the Node.
pub fn node_token_args(c: &Cluster, ns: &str, sa: &str, node: &str) -> Vec<String> {
    if server_minor(c) >= 31 {
        return ["--bound-object-kind", "Node", "--bound-object-name", node]
            .map(str::to_string)
            .to_vec();
    }
    let pod = format!("token-{node}");
    let manifest = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod, "namespace": ns},
        "spec": {"serviceAccountName": sa, "nodeName": node,
                 "containers": [{"name": "c", "image": c.var("NODEIMAGE_REGISTRY") + "/test:v1"}]}});
    c.kubectl_ok(&["apply", "-f", "-"], Some(&manifest.to_string()));
    ["--bound-object-kind", "Pod", "--bound-object-name", &pod]
        .map(str::to_string)
        .to_vec()
}

/// The API server's minor version (`kubectl version`).
pub fn server_minor(c: &Cluster) -> u32 {
    let out = c.kubectl_ok(&["version", "-o", "json"], None);
    let v: serde_json::Value = serde_json::from_str(&out).expect("kubectl version -o json");
    let minor = v["serverVersion"]["minor"].as_str().unwrap_or_default();
    minor
        .trim_end_matches('+')
        .parse()
        .unwrap_or_else(|_| panic!("the API server's minor version {minor:?}"))
}

/// A kubeconfig file `dir/name.kubeconfig` that holds only a token of
/// ServiceAccount `ns/sa` (`token_args` go to `kubectl create token`, e.g.
/// to bind it to a Node), beside `name.token` and `name.ca`.
pub struct TokenConfig {
    /// The kubeconfig file.
    pub kubeconfig: PathBuf,
    /// The bearer token.
    pub token: String,
    /// The cluster CA certificate file.
    pub ca: PathBuf,
}

impl TokenConfig {
    /// Creates the token and writes the files.
    pub fn create(
        c: &Cluster,
        dir: &Path,
        name: &str,
        ns: &str,
        sa: &str,
        token_args: &[&str],
    ) -> TokenConfig {
        let mut args = vec!["create", "token", sa, "-n", ns, "--duration=1h"];
        args.extend(token_args);
        let token = c.kubectl_ok(&args, None).trim().to_string();
        let ca_data = c.kubectl_ok(
            &[
                "config",
                "view",
                "--raw",
                "--minify",
                "-o",
                "jsonpath={.clusters[0].cluster.certificate-authority}",
            ],
            None,
        );
        let ca = dir.join(format!("{name}.ca"));
        if ca_data.trim().is_empty() {
            let b64 = c.kubectl_ok(
                &[
                    "config",
                    "view",
                    "--raw",
                    "--minify",
                    "-o",
                    "jsonpath={.clusters[0].cluster.certificate-authority-data}",
                ],
                None,
            );
            let mut dec = Command::new("base64");
            dec.arg("-d").stdin(Stdio::piped()).stdout(Stdio::piped());
            let mut child = dec.spawn().expect("base64 runs");
            std::io::Write::write_all(
                child.stdin.as_mut().expect("stdin is piped"),
                b64.trim().as_bytes(),
            )
            .expect("write base64 input");
            let out = child.wait_with_output().expect("base64 runs");
            std::fs::write(&ca, out.stdout).expect("write the CA file");
        } else {
            std::fs::copy(ca_data.trim(), &ca).expect("copy the CA file");
        }
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        let kc = |args: &[&str]| {
            let mut cmd = Command::new(c.var("KUBECTL"));
            cmd.env("KUBECONFIG", &kubeconfig).args(args);
            let r = run(cmd);
            assert!(r.success, "kubectl {args:?}: {}", r.text());
        };
        let ca_text = ca.to_string_lossy().to_string();
        let server = c.var("NODEIMAGE_API_SERVER");
        kc(&[
            "config",
            "set-cluster",
            "local",
            &format!("--server={server}"),
            &format!("--certificate-authority={ca_text}"),
            "--embed-certs=true",
        ]);
        kc(&["config", "set-credentials", sa, &format!("--token={token}")]);
        kc(&[
            "config",
            "set-context",
            sa,
            "--cluster=local",
            &format!("--user={sa}"),
        ]);
        kc(&["config", "use-context", sa]);
        TokenConfig {
            kubeconfig,
            token,
            ca,
        }
    }

    /// `kubectl ARGS` with only this token.
    pub fn kubectl(&self, c: &Cluster, args: &[&str]) -> Run {
        let mut cmd = Command::new(c.var("KUBECTL"));
        cmd.env("KUBECONFIG", &self.kubeconfig).args(args);
        run(cmd)
    }

    /// A merge patch of NodeImage `ni`'s status through the API (curl, not
    /// kubectl: kubectl GETs the subresource first, a verb the daemon is
    /// not granted); `query` such as `?dryRun=All`.
    pub fn status_patch(&self, c: &Cluster, ni: &str, query: &str) -> Run {
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sS",
            "--fail-with-body",
            "--cacert",
            &self.ca.to_string_lossy(),
            "-H",
            &format!("Authorization: Bearer {}", self.token),
            "-H",
            "Content-Type: application/merge-patch+json",
            "-X",
            "PATCH",
            "--data",
            r#"{"status":{"desired":0,"waiting":0,"pulling":0,"succeeded":0,"failed":0}}"#,
            &format!(
                "{}/apis/apps.kruise.io/v1alpha1/nodeimages/{ni}/status{query}",
                c.var("NODEIMAGE_API_SERVER")
            ),
        ]);
        run(cmd)
    }
}

/// How API Priority and Fairness classified one request: the UIDs the API
/// server names in its `X-Kubernetes-PF-FlowSchema-UID` and
/// `X-Kubernetes-PF-PriorityLevel-UID` response headers, and the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    /// The matching FlowSchema's UID (empty when the header is absent).
    pub flow_schema: String,
    /// Its priority level's UID (empty when the header is absent).
    pub priority_level: String,
    /// The HTTP status code of the response.
    pub status: u16,
}

impl TokenConfig {
    /// A GET of `path` (e.g. `/version`) with only this token, and how API
    /// Priority and Fairness classified it (curl, to read the headers).
    pub fn classify(&self, c: &Cluster, path: &str) -> Classified {
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sS",
            "-o",
            "/dev/null",
            "-D",
            "-",
            "--cacert",
            &self.ca.to_string_lossy(),
            "-H",
            &format!("Authorization: Bearer {}", self.token),
            &format!("{}{path}", c.var("NODEIMAGE_API_SERVER")),
        ]);
        let r = run(cmd);
        assert!(r.success, "curl GET {path}: {}", r.text());
        parse_classified(&r.stdout)
            .unwrap_or_else(|| panic!("GET {path}: no status line in:\n{}", r.stdout))
    }
}

/// The APF headers and status of a response's header block (curl `-D -`);
/// None without a status line.
fn parse_classified(headers: &str) -> Option<Classified> {
    let mut lines = headers.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let mut out = Classified {
        flow_schema: String::new(),
        priority_level: String::new(),
        status,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "x-kubernetes-pf-flowschema-uid" => out.flow_schema = value.trim().to_string(),
            "x-kubernetes-pf-prioritylevel-uid" => out.priority_level = value.trim().to_string(),
            _ => {}
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_apf_headers_whatever_their_case() {
        let h = "HTTP/2 200 \r\ncontent-type: application/json\r\nx-kubernetes-pf-flowschema-uid: a-1\r\nX-Kubernetes-PF-PriorityLevel-UID:  b-2 \r\n\r\n";
        assert_eq!(
            parse_classified(h),
            Some(Classified {
                flow_schema: "a-1".into(),
                priority_level: "b-2".into(),
                status: 200
            })
        );
        let none = parse_classified("HTTP/1.1 404 Not Found\r\n\r\n").expect("a status");
        assert_eq!((none.status, none.flow_schema.as_str()), (404, ""));
        assert_eq!(parse_classified(""), None);
    }
}
