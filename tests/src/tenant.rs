//! A tenant as a platform team has them: a ServiceAccount with rights in
//! one namespace only (the OpenKruise job kinds and Secrets there), driven
//! through its own token, so tests show what such a user can and cannot
//! make nodeimage do.

use crate::Cluster;
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A kubectl bound to a ServiceAccount token of a tenant namespace, with
/// no other credentials.
pub struct Tenant {
    kubectl: String,
    kubeconfig: PathBuf,
    /// The tenant's namespace.
    pub ns: String,
}

impl Tenant {
    /// A ServiceAccount `tenant` allowed to manage ImagePullJobs,
    /// ImageListPullJobs and Secrets in `ns` only.
    pub fn new(c: &Cluster, ns: &str) -> Tenant {
        c.kubectl_ok(&["create", "serviceaccount", "tenant", "-n", ns], None);
        c.kubectl_ok(
            &[
                "create",
                "role",
                "tenant-jobs",
                "-n",
                ns,
                "--verb=create,get,list,watch,delete,patch,update",
                "--resource=imagepulljobs.apps.kruise.io,imagelistpulljobs.apps.kruise.io,secrets",
            ],
            None,
        );
        let sa = format!("--serviceaccount={ns}:tenant");
        c.kubectl_ok(
            &[
                "create",
                "rolebinding",
                "tenant-jobs",
                "-n",
                ns,
                "--role=tenant-jobs",
                &sa,
            ],
            None,
        );
        let token = c.kubectl_ok(&["create", "token", "tenant", "-n", ns], None);
        let state = PathBuf::from(c.var("NODEIMAGE_STATE"));
        let kubeconfig = state.join(format!("tmp/tenant-{ns}.kubeconfig"));
        let _ = std::fs::create_dir_all(state.join("tmp"));
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": c.var("NODEIMAGE_API_SERVER"),
                "certificate-authority": state.join("kube/pki/ca.crt"),
            }}],
            "users": [{"name": "tenant", "user": {"token": token.trim()}}],
            "contexts": [{"name": "tenant", "context": {"cluster": "local", "user": "tenant", "namespace": ns}}],
            "current-context": "tenant",
        });
        std::fs::write(&kubeconfig, config.to_string()).expect("write tenant kubeconfig");
        Tenant {
            kubectl: c.var("KUBECTL"),
            kubeconfig,
            ns: ns.to_string(),
        }
    }

    /// `kubectl create -f -` as the tenant: (success, stderr).
    pub fn apply(&self, doc: &Value) -> (bool, String) {
        let out = self.run(&["create", "-n", &self.ns, "-f", "-"], Some(doc));
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Any kubectl command as the tenant, with `stdin` as JSON.
    pub fn run(&self, args: &[&str], stdin: Option<&Value>) -> Output {
        let mut child = Command::new(&self.kubectl)
            .env("KUBECONFIG", &self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        if let Some(mut pipe) = child.stdin.take() {
            use std::io::Write;
            if let Some(doc) = stdin {
                pipe.write_all(doc.to_string().as_bytes())
                    .expect("write stdin");
            }
        }
        child.wait_with_output().expect("kubectl runs")
    }
}
