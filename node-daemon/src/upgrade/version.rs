//! Where the daemon reads the node agent's version (`--node-version-source`):
//! the Node's `status.nodeInfo.kubeletVersion`, which KubeEdge's edgecore
//! reports as `<kubernetes version>-kubeedge-<version>`, or a file the
//! upgrade tool (or the operator) writes, whose first `vX.Y.Z` word counts.

use k8s_openapi::api::core::v1::Node;
use nodeimage_api::kubeedge::{first_version_in, kubeedge_version_of_kubelet};
use std::path::PathBuf;
use std::str::FromStr;

/// Where the node agent's version is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionSource {
    /// The Node's kubeletVersion suffix `-kubeedge-vX.Y.Z`.
    Kubelet,
    /// A file on the node.
    File(PathBuf),
}

impl FromStr for VersionSource {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "kubelet" => Ok(VersionSource::Kubelet),
            _ => match s.strip_prefix("file:") {
                Some(p) if !p.is_empty() => Ok(VersionSource::File(PathBuf::from(p))),
                _ => Err(format!(
                    "{s:?}: use `kubelet` or `file:<path>` (e.g. file:/etc/kubeedge/version)"
                )),
            },
        }
    }
}

impl std::fmt::Display for VersionSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VersionSource::Kubelet => f.write_str("kubelet"),
            VersionSource::File(p) => write!(f, "file:{}", p.display()),
        }
    }
}

impl VersionSource {
    /// The version the node runs now: None when the source has none (no
    /// file, a kubelet that is not KubeEdge's); an error when it cannot be read.
    pub async fn read(&self, client: &kube::Client, node: &str) -> Result<Option<String>, String> {
        match self {
            VersionSource::File(path) => match tokio::fs::read_to_string(path).await {
                Ok(text) => Ok(first_version_in(&text)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(format!("reading {}: {e}", path.display())),
            },
            VersionSource::Kubelet => {
                let api: kube::Api<Node> = kube::Api::all(client.clone());
                let n = api
                    .get_opt(node)
                    .await
                    .map_err(|e| format!("reading Node {node}: {e}"))?;
                Ok(n.and_then(|n| n.status?.node_info)
                    .and_then(|i| kubeedge_version_of_kubelet(&i.kubelet_version)))
            }
        }
    }

    /// Whether a version read right after a successful upgrade must already
    /// show the target: a file is written by the tool; the kubelet version
    /// follows only once edgecore has restarted and reported.
    pub fn verifies_at_once(&self) -> bool {
        matches!(self, VersionSource::File(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_flag() {
        assert_eq!("kubelet".parse(), Ok(VersionSource::Kubelet));
        assert_eq!(
            "file:/etc/kubeedge/version".parse(),
            Ok(VersionSource::File("/etc/kubeedge/version".into()))
        );
        assert!("file:".parse::<VersionSource>().is_err());
        assert!("edgecore".parse::<VersionSource>().is_err());
        assert_eq!(
            VersionSource::File("/x".into()).to_string(),
            "file:/x".to_string()
        );
    }

    #[tokio::test]
    async fn reads_version_files() {
        let dir = std::env::temp_dir().join(format!("ni-version-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("version");
        let src = VersionSource::File(path.clone());
        let client = || {
            // Never contacted for a file source.
            kube::Client::try_from(kube::Config::new(
                "http://127.0.0.1:1".parse().expect("url"),
            ))
        };
        let Ok(c) = client() else {
            return;
        };
        assert_eq!(src.read(&c, "n").await, Ok(None), "missing file");
        let _ = std::fs::write(&path, "KubeEdge v1.16.2\n");
        assert_eq!(src.read(&c, "n").await, Ok(Some("v1.16.2".into())));
        let _ = std::fs::write(&path, "garbage\n");
        assert_eq!(src.read(&c, "n").await, Ok(None));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
