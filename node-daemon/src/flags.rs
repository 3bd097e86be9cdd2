//! Command-line flags of nodeimage-daemon.

use crate::upgrade::version::VersionSource;
use nodeimage_ops::telemetry::LogFormat;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Pulls the images listed in this node's NodeImage through the node's
/// containerd (CRI, namespace k8s.io, as kubelet does) and reports per-tag
/// status, progress and counts.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "nodeimage-daemon", version)]
pub struct Flags {
    /// Name of this node; its NodeImage has the same name.
    #[arg(long, env = "NODE_NAME")]
    pub node_name: String,

    /// Kubeconfig file to use. Default: $KUBECONFIG, ~/.kube/config, or the in-cluster config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// containerd's gRPC socket (serves both CRI and containerd's own API).
    #[arg(long, default_value = "/run/containerd/containerd.sock")]
    pub containerd_socket: PathBuf,

    /// Which API of the socket the daemon uses beside CRI: `auto`
    /// (containerd's own API while it answers at start), `containerd`, or
    /// `cri` (any CRI runtime, e.g. CRI-O: no byte progress, no resume of a
    /// killed pull, no pins, no NodeUpgradeJob tool extraction).
    #[arg(long, value_enum, default_value_t = crate::containerd::RuntimeApi::Auto)]
    pub runtime_api: crate::containerd::RuntimeApi,

    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:10226")]
    pub health_addr: SocketAddr,

    /// The runtime's sandbox (pause) image, which removal entries never
    /// take. Unset: what the runtime's CRI status names (containerd does).
    #[arg(long)]
    pub sandbox_image: Option<String>,

    /// Enforce ImageRemovalJob blocks in containerd 2.x for every client
    /// (kubelet too): the daemon installs an image verifier in DIR/bin and
    /// keeps its list in DIR/nodeimage-blocks. containerd's bindir plugin
    /// must read DIR/bin (its default is /opt/containerd/image-verifier/bin).
    #[arg(long, value_name = "DIR")]
    pub pull_verifier_dir: Option<PathBuf>,

    /// Most pulls running at once on this node; the rest wait in order.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_concurrent_pulls: u32,

    /// The disk check fails above this usage of the image filesystem, in percent.
    #[arg(long, default_value_t = 80.0)]
    pub disk_threshold_percent: f64,

    /// The cpu check fails above this CPU usage, in percent.
    #[arg(long, default_value_t = 80.0)]
    pub cpu_threshold_percent: f64,

    /// The mem check fails above this memory usage, in percent.
    #[arg(long, default_value_t = 80.0)]
    pub mem_threshold_percent: f64,

    /// Log format: text or json.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Run node-agent upgrades (NodeUpgradeJob entries): take the upgrade
    /// tool out of the pulled image and run it on this node. Off: such
    /// entries fail with a reason saying upgrades are disabled here.
    #[arg(long)]
    pub enable_upgrades: bool,

    /// Path of the upgrade tool inside the upgrade image (KubeEdge's
    /// installation-package ships keadm there).
    #[arg(long, default_value = "usr/local/bin/keadm")]
    pub upgrade_tool_path: String,

    /// Directory on the node for upgrades: one subdirectory per job with the
    /// extracted tool and the log of its runs.
    #[arg(long, default_value = "/var/lib/nodeimage/upgrade")]
    pub upgrade_work_dir: PathBuf,

    /// Where the node agent's version is read: `kubelet` (the Node's
    /// kubeletVersion suffix `-kubeedge-vX.Y.Z`, as edgecore reports it) or
    /// `file:<path>` (the first `vX.Y.Z` word of a file the tool writes).
    #[arg(long, default_value = "kubelet")]
    pub node_version_source: VersionSource,

    /// Words run before the upgrade tool, e.g. `nsenter --target 1 --mount
    /// --uts --ipc --net --pid --` to run it in the host's namespaces when
    /// the daemon runs in a pod (needs hostPID and a privileged container).
    #[arg(long, default_value = "")]
    pub upgrade_exec_prefix: String,

    /// Keep the images a tag entry wants pinned in containerd, so kubelet's
    /// image GC does not remove them (containerd 1.6.25+, 1.7.10+, 2.x);
    /// false unpins what the daemon pinned.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub pin_images: bool,

    /// The most the daemon pins, in percent of the image filesystem (above
    /// 0, at most 100; decimals allowed): wanted images beyond it are not
    /// pinned, gating images and cluster-scoped jobs' images first, then the
    /// oldest entries (docs/api.md).
    #[arg(long, default_value_t = 40.0, value_parser = budget_percent)]
    pub pin_budget_percent: f64,

    /// How often, in seconds, the images of tags reported Succeeded are
    /// looked for on the node (an image gone is pulled again); 0: never.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub presence_check_seconds: u64,

    /// Key of the start-up taint (as the controller's --startup-gate-taint):
    /// the daemon removes it from its own Node once the bound passed, if
    /// nothing else did (the controller down or not scheduled). Empty: off.
    #[arg(long, default_value = nodeimage_api::gate::DEFAULT_TAINT_KEY)]
    pub startup_gate_taint: String,

    /// The start-up gate's bound, counted from the Node's creation (as the
    /// controller's --startup-gate-timeout); the daemon acts a minute after
    /// it, so the controller, when it runs, opens the gate first.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub startup_gate_timeout: std::time::Duration,

    /// kubelet's credential-provider config file (CredentialProviderConfig):
    /// images its plugins match are also pulled with the credentials the
    /// plugins return, after the tag's own pull secrets, as kubelet does.
    #[arg(long, requires = "image_credential_provider_bin_dir")]
    pub image_credential_provider_config: Option<PathBuf>,

    /// Directory of the credential-provider plugin executables (kubelet's
    /// --image-credential-provider-bin-dir).
    #[arg(long, requires = "image_credential_provider_config")]
    pub image_credential_provider_bin_dir: Option<PathBuf>,
}

impl Flags {
    /// kubelet's credential-provider config and plugin directory, as given.
    pub fn credential_providers(&self) -> (Option<&Path>, Option<&Path>) {
        (
            self.image_credential_provider_config.as_deref(),
            self.image_credential_provider_bin_dir.as_deref(),
        )
    }
}

/// Parses `90`, `90s`, `10m`, `1h30m` into a duration.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    nodeimage_ops::duration::parse(s).map_err(|e| e.to_string())
}

/// Parses `--pin-budget-percent`: a number above 0 and at most 100.
fn budget_percent(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        Ok(p) => Err(format!(
            "{p} is out of range: the pin budget is a share of the image filesystem, above 0 and at most 100 (percent)"
        )),
        Err(e) => Err(format!("{s:?} is not a number of percent: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn the_pin_budget_is_above_0_and_at_most_100_percent() {
        let parse = |v: &str| {
            let flag = format!("--pin-budget-percent={v}");
            Flags::try_parse_from(["nodeimage-daemon", "--node-name", "n", &flag])
                .map(|f| f.pin_budget_percent)
                .map_err(|e| e.to_string())
        };
        for (v, want) in [
            ("40", 40.0),
            ("100", 100.0),
            ("0.001", 0.001),
            ("12.5", 12.5),
        ] {
            assert_eq!(parse(v), Ok(want), "{v}");
        }
        for v in ["0", "-5", "100.5", "1e9", "NaN", "inf", "forty"] {
            let e = parse(v).err().unwrap_or_default();
            assert!(
                e.contains("above 0 and at most 100") || e.contains("not a number"),
                "{v}: {e}"
            );
        }
        let default = Flags::try_parse_from(["nodeimage-daemon", "--node-name", "n"]);
        assert_eq!(default.map(|f| f.pin_budget_percent).ok(), Some(40.0));
    }
}
