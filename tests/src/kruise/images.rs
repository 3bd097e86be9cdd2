//! Images for the jobs to pull: the cluster's registries, fresh pushes, and
//! a slow registry the shared nodes pull through.

use super::secrets::{docker_config_json, put_secret};
use crate::proxy::Proxy;
use crate::registry::{PushedImage, Registry};
use crate::{Cluster, random_suffix};
use serde_json::Value;
use std::path::PathBuf;

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
        // A proxy just dropped on the same address lets go of it in the
        // background: wait for it a little.
        let mut tries = 0;
        let proxy = loop {
            match Proxy::start_on(listen, upstream, bytes_per_second) {
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 50 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                r => {
                    break r
                        .unwrap_or_else(|e| panic!("start the registry proxy on {listen}: {e}"));
                }
            }
        };
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

/// A fresh image (no node holds it yet) that pulls slowly on the shared
/// nodes: pushed to a cluster registry and named through a [`SlowRegistry`]
/// in front of it. The one preamble of every test that needs a pull to take
/// a while. Dropped, it removes the image from the nodes, then stops the
/// proxy.
pub struct SlowImage {
    /// The pushed image, named through the proxy: `image.reference()` is
    /// what a job pulls.
    pub image: PushedImage,
    slow: SlowRegistry,
    c: Cluster,
}

impl SlowImage {
    /// Pushes `e2e/<prefix>-<random>:v1` of `bytes` to the anonymous
    /// registry, pulled through a proxy passing `bytes_per_second` in all.
    pub fn push(c: &Cluster, prefix: &str, bytes: usize, bytes_per_second: u64) -> SlowImage {
        Self::push_to(c, &registry(c), prefix, bytes, bytes_per_second)
    }

    /// The same from the registry that needs basic auth: a job pulling it
    /// needs a pull secret.
    pub fn push_private(
        c: &Cluster,
        prefix: &str,
        bytes: usize,
        bytes_per_second: u64,
    ) -> SlowImage {
        Self::push_to(c, &auth_registry(c), prefix, bytes, bytes_per_second)
    }

    fn push_to(
        c: &Cluster,
        reg: &Registry,
        prefix: &str,
        bytes: usize,
        bytes_per_second: u64,
    ) -> SlowImage {
        let slow = SlowRegistry::start(c, &reg.host, bytes_per_second);
        let pushed = push_unique(reg, prefix, bytes);
        SlowImage {
            image: via(&pushed, &slow.host()),
            slow,
            c: c.clone(),
        }
    }

    /// `<proxy host>/<repository>:v1`, what a job pulls.
    pub fn reference(&self) -> String {
        self.image.reference()
    }

    /// `<proxy host>/<repository>`, the image's key in the NodeImages.
    pub fn key(&self) -> String {
        self.image.name.clone()
    }

    /// Creates the dockerconfigjson Secret `ns/name` with the cluster's
    /// registry credentials for the proxy's host, the host a private image
    /// is pulled from; returns its `data` as the API stores it.
    pub fn pull_secret(&self, ns: &str, name: &str) -> Value {
        let config = docker_config_json(
            &[&self.host()],
            &self.c.var("NODEIMAGE_AUTH_USER"),
            &self.c.var("NODEIMAGE_AUTH_PASSWORD"),
        );
        let (type_, key) = ("kubernetes.io/dockerconfigjson", ".dockerconfigjson");
        put_secret(&self.c, ns, name, type_, key, &config, false)
    }

    /// The proxy's registry host (what a pull secret names).
    pub fn host(&self) -> String {
        self.slow.host()
    }

    /// The proxy, to read what went through it or change its rate.
    pub fn proxy(&self) -> &Proxy {
        &self.slow.proxy
    }
}

impl Drop for SlowImage {
    fn drop(&mut self) {
        remove_from_nodes(&self.c, &self.image.reference());
    }
}
