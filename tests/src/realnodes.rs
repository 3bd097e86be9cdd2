//! The stack's real kubelet nodes (tests/cluster/real-node.sh INDEX): what
//! each one's env file says, for the tests that run on them.

use crate::parse_env_file;
use std::path::{Path, PathBuf};

/// How many real nodes the stack starts (tests/run-all.sh).
pub const COUNT: usize = 2;

/// One real kubelet node, as its env file (`real-node.env` for the first,
/// `real-node-INDEX.env` for the others) describes it.
#[derive(Clone, Debug)]
pub struct RealNodeEnv {
    /// 1 for kubelet-1, 2 for kubelet-2.
    pub index: usize,
    /// The Node's name.
    pub name: String,
    /// Its containerd's socket, as the host sees it.
    pub socket: PathBuf,
    /// Its containerd's root, as the host sees it.
    pub containerd_root: PathBuf,
    /// Its mount namespace's pin (where /run/containerd is the node's).
    pub mount_ns: PathBuf,
    /// Its runtime, `containerd/VERSION/vCONFIG[/discard]`.
    pub runtime: String,
    /// Every variable of the file.
    pub vars: Vec<(String, String)>,
}

impl RealNodeEnv {
    /// The env file of real node `index` under `state`.
    pub fn file(state: &Path, index: usize) -> PathBuf {
        if index == 1 {
            state.join("real-node.env")
        } else {
            state.join(format!("real-node-{index}.env"))
        }
    }

    /// Reads real node `index`'s env file; Err says what is missing.
    pub fn load(state: &Path, index: usize) -> Result<RealNodeEnv, String> {
        let f = Self::file(state, index);
        let text = std::fs::read_to_string(&f).map_err(|e| {
            format!(
                "no {}: start the real node first (tests/cluster/real-node.sh {index}): {e}",
                f.display()
            )
        })?;
        let vars = parse_env_file(&text);
        let get = |k: &str| {
            vars.get(k)
                .cloned()
                .ok_or_else(|| format!("{} has no {k}", f.display()))
        };
        Ok(RealNodeEnv {
            index,
            name: get("NODEIMAGE_REAL_NODE")?,
            socket: get("NODEIMAGE_REAL_NODE_CONTAINERD")?.into(),
            containerd_root: get("NODEIMAGE_REAL_NODE_CONTAINERD_ROOT")?.into(),
            mount_ns: get("NODEIMAGE_REAL_NODE_MOUNT_NS")?.into(),
            runtime: get("NODEIMAGE_REAL_NODE_RUNTIME")?,
            vars: vars.into_iter().collect(),
        })
    }

    /// Every real node of the stack, in order; panics naming a missing one.
    pub fn all(state: &Path) -> Vec<RealNodeEnv> {
        (1..=COUNT)
            .map(|i| Self::load(state, i).unwrap_or_else(|e| panic!("{e}")))
            .collect()
    }

    /// "kubelet-2 (containerd/1.7.35/v2/discard)", for messages.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name, self.runtime)
    }
}
