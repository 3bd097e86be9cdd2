//! Command-line flags of nodeimage-controller.

use clap::Parser;
use nodeimage_ops::telemetry::LogFormat;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The labels of Nodes that get no NodeImage unless the controller is told
/// otherwise (`--skip-nodes-labelled`): virtual nodes (virtual-kubelet, EKS
/// Fargate) and Windows nodes, where no node daemon runs, so a job over
/// all nodes would wait for them until its response timeout.
pub const DEFAULT_SKIPPED_NODE_LABELS: &str =
    "type=virtual-kubelet,eks.amazonaws.com/compute-type=fargate,kubernetes.io/os=windows";

/// Mirrors Nodes into NodeImages and turns image pull jobs (OpenKruise
/// ImagePullJob/ImageListPullJob, KubeEdge ImagePrePullJob/NodeUpgradeJob)
/// into per-node tag entries, aggregating results into job status.
#[derive(Clone, Debug, Parser)]
#[command(name = "nodeimage-controller", version)]
pub struct Flags {
    /// Kubeconfig file to use. Default: $KUBECONFIG, ~/.kube/config, or the in-cluster config.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Address of the /healthz and /readyz endpoints.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub health_addr: SocketAddr,

    /// Log format: text or json.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// How long a node daemon may take to pick up a new tag entry before the
    /// tag is marked Failed ("node did not respond"), e.g. 600s or 10m.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub response_timeout: Duration,

    /// Namespace where jobs' pull secrets are copied for the node daemons
    /// (created if absent). The daemons may read secrets only there.
    #[arg(
        long,
        env = "NODEIMAGE_SECRETS_NAMESPACE",
        default_value = "nodeimage-secrets"
    )]
    pub secrets_namespace: String,

    /// Let ImagePrePullJob and NodeUpgradeJob run on every node they name or
    /// select. By default, as in KubeEdge, they run only on edge nodes
    /// (label node-role.kubernetes.io/edge).
    #[arg(long, env = "NODEIMAGE_KUBEEDGE_ALL_NODES")]
    pub kubeedge_all_nodes: bool,

    /// Run for a Lease and reconcile only while holding it, so several
    /// replicas can run for availability. Off: this process always reconciles.
    #[arg(long, env = "NODEIMAGE_LEADER_ELECT")]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE, else "default").
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_election_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(long, default_value = "nodeimage-controller")]
    pub leader_election_lease: String,

    /// Seconds a leader keeps the Lease without renewing it; a standby takes
    /// over within about this long after the leader dies.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..=300))]
    pub leader_election_lease_seconds: u64,

    /// Nodes carrying any of these labels (KEY=VALUE, comma-separated or
    /// repeated) get no NodeImage: no daemon runs there. Default: virtual
    /// nodes (virtual-kubelet, EKS Fargate) and Windows nodes. An empty
    /// value skips no node.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = DEFAULT_SKIPPED_NODE_LABELS,
        value_parser = parse_label
    )]
    pub skip_nodes_labelled: Vec<Option<(String, String)>>,

    /// Key of the start-up taint new nodes register with (kubelet
    /// --register-with-taints, or the node pool's taints): nodeimage removes
    /// it once the images of the jobs annotated nodeimage.dev/gate-new-nodes
    /// are on the node. It never adds it. Empty: the gate is off.
    #[arg(long, default_value = nodeimage_api::gate::DEFAULT_TAINT_KEY)]
    pub startup_gate_taint: String,

    /// Longest a new node stays behind the start-up taint, counted from its
    /// creation; then the controller removes the taint anyway (with a
    /// Warning event naming the missing images), e.g. 10m.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub startup_gate_timeout: Duration,

    /// Namespaces whose ImagePullJobs and ImageListPullJobs may gate new
    /// nodes (comma-separated; `*`: every namespace; empty: none, the
    /// default). Cluster-scoped ImagePrePullJobs always may, so a tenant's
    /// job annotated nodeimage.dev/gate-new-nodes gates nothing by default.
    #[arg(long, value_delimiter = ',')]
    pub startup_gate_namespaces: Vec<String>,

    /// Namespaces whose Secrets an ImagePrePullJob's `imageSecrets`
    /// (namespace/name) may name (comma-separated; `*`: every namespace,
    /// the default, as in KubeEdge; empty: none).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub image_secret_namespaces: Vec<String>,

    /// Namespaces whose Deployments, StatefulSets and DaemonSets may ask for
    /// pre-download (annotation nodeimage.dev/image-predownload;
    /// comma-separated; `*`: every namespace, the default). An empty value
    /// turns pre-download off and stops watching those kinds.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub predownload_namespaces: Vec<String>,

    /// Namespace where Eraser (AKS Image Cleaner) reads its exclusion lists:
    /// the controller keeps the ConfigMap `nodeimage-pinned` there, listing
    /// the images nodeimage pins, which Eraser then leaves on the nodes.
    /// Empty: no list is kept.
    #[arg(long, default_value = "")]
    pub eraser_namespace: String,

    /// Image references the Eraser exclusion list always names besides the
    /// pinned images (comma-separated), such as the nodes' sandbox (pause)
    /// image: kubelet pins it, Eraser ignores pins and removes it while Pods
    /// run (a node that cannot pull it then starts no Pod).
    #[arg(long, value_delimiter = ',')]
    pub eraser_also_exclude: Vec<String>,

    /// The nodes' P2P agent for jobs that name none (annotation
    /// nodeimage.dev/p2p-agent): `daemonset:NAMESPACE/NAME` or
    /// `pods:NAMESPACE/KEY=VALUE[,KEY=VALUE]`. A node's entry is handed out
    /// only once the agent's Pod on it is Ready. Empty: no default agent.
    #[arg(long, default_value = "")]
    pub p2p_agent: String,

    /// Most nodes a Deployment's or StatefulSet's pre-download pulls onto
    /// beyond the nodes of its Pods: nodes its new pod template can be
    /// scheduled on (node selector, required node affinity, tolerations),
    /// where new Pods of a rollout or a scale-up may land. 0: the nodes of
    /// its Pods only (OpenKruise's rule).
    #[arg(long, default_value_t = 100)]
    pub predownload_max_extra_nodes: u32,

    /// Image repositories NodeUpgradeJobs may take the upgrade tool from
    /// (comma-separated; `host/path/*` allows everything under a prefix,
    /// `*` any repository). A job naming another fails before any node
    /// acts. Default: KubeEdge's installer image, kubeedge/installation-package.
    #[arg(long, value_delimiter = ',', default_value = nodeimage_api::kubeedge::DEFAULT_UPGRADE_IMAGE)]
    pub upgrade_images: Vec<String>,

    /// Most nodes pulling from one registry host at once, across every job
    /// (ImagePullJob, ImageListPullJob, ImagePrePullJob, NodeUpgradeJob);
    /// hand-written NodeImage entries count but are not held back. Jobs
    /// wait in order of creation. 0: no limit (the default).
    #[arg(long, env = "NODEIMAGE_REGISTRY_MAX_PULLS", default_value_t = 0)]
    pub registry_max_pulls: usize,

    /// The limit of one registry host, HOST=N (repeatable, or
    /// comma-separated), over --registry-max-pulls; Docker Hub's aliases
    /// are one host, docker.io. N=0: no limit on that host.
    #[arg(long, value_delimiter = ',', value_parser = parse_host_limit)]
    pub registry_max_pulls_for: Vec<(String, usize)>,

    /// Registries (HOST:PORT, comma-separated) whose followed tags
    /// (annotation nodeimage.dev/follow-tag) are looked up over plain HTTP,
    /// as the nodes' runtimes reach them; loopback hosts always are.
    /// Default: none (HTTPS, verified against the system's roots).
    #[arg(long, value_delimiter = ',')]
    pub follow_tag_http_registries: Vec<String>,

    /// kubelet's credential-provider config file (CredentialProviderConfig):
    /// followed tags of images its plugins match are looked up with the
    /// credentials the plugins answer, after the job's pull secrets, as the
    /// node daemons pull them.
    #[arg(long, requires = "image_credential_provider_bin_dir")]
    pub image_credential_provider_config: Option<PathBuf>,

    /// Directory of the credential-provider plugin executables (kubelet's
    /// --image-credential-provider-bin-dir).
    #[arg(long, requires = "image_credential_provider_config")]
    pub image_credential_provider_bin_dir: Option<PathBuf>,
}

/// Parses `HOST=N` (a registry host, with its port if any, and a limit).
pub fn parse_host_limit(s: &str) -> Result<(String, usize), String> {
    let (host, n) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?} is not HOST=N"))?;
    let host = host.trim();
    if host.is_empty() || host.contains(char::is_whitespace) || host.contains('/') {
        return Err(format!("{s:?}: {host:?} is not a registry host"));
    }
    let n = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {n:?} is not a number of nodes"))?;
    Ok((host.to_string(), n))
}

/// Parses `KEY=VALUE` (a label); an empty item is None.
pub fn parse_label(s: &str) -> Result<Option<(String, String)>, String> {
    if s.trim().is_empty() {
        return Ok(None);
    }
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => {
            Ok(Some((k.to_string(), v.to_string())))
        }
        _ => Err(format!("{s:?} is not KEY=VALUE")),
    }
}

/// Parses `90`, `90s`, `10m`, `1h30m` into a duration (nodeimage_ops::duration).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    nodeimage_ops::duration::parse(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("1d").is_err());
        assert!(parse_duration("m").is_err());
    }

    /// Every namespace flag reads alike: `*` is every namespace, an empty
    /// value none, names only those (the chart renders each list so).
    #[test]
    fn namespace_lists_read_alike() {
        use crate::runtime::policy::Namespaces;
        let lists = |args: &[&str]| {
            let f = Flags::parse_from(std::iter::once("c").chain(args.iter().copied()));
            [
                Namespaces::from_list(&f.startup_gate_namespaces),
                Namespaces::from_list(&f.image_secret_namespaces),
                Namespaces::from_list(&f.predownload_namespaces),
            ]
        };
        let none = || Namespaces::Only(Default::default());
        let only = |n: &[&str]| Namespaces::Only(n.iter().map(|s| s.to_string()).collect());
        // The defaults: gating none, secrets and pre-download any.
        assert_eq!(lists(&[]), [none(), Namespaces::Any, Namespaces::Any]);
        for (value, want) in [
            ("", none()),
            ("*", Namespaces::Any),
            ("team-a,team-b", only(&["team-a", "team-b"])),
        ] {
            let args = [
                format!("--startup-gate-namespaces={value}"),
                format!("--image-secret-namespaces={value}"),
                format!("--predownload-namespaces={value}"),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(
                lists(&args),
                [want.clone(), want.clone(), want],
                "{value:?}"
            );
        }
    }

    #[test]
    fn skipped_node_labels() {
        let f = Flags::parse_from(["c"]);
        assert_eq!(
            f.skip_nodes_labelled,
            vec![
                Some(("type".into(), "virtual-kubelet".into())),
                Some(("eks.amazonaws.com/compute-type".into(), "fargate".into())),
                Some(("kubernetes.io/os".into(), "windows".into())),
            ]
        );
        let f = Flags::parse_from(["c", "--skip-nodes-labelled="]);
        assert_eq!(f.skip_nodes_labelled, vec![None]);
        let f = Flags::parse_from(["c", "--skip-nodes-labelled=pool=gpu,empty="]);
        assert_eq!(
            f.skip_nodes_labelled,
            vec![
                Some(("pool".into(), "gpu".into())),
                Some(("empty".into(), String::new()))
            ]
        );
        assert!(Flags::try_parse_from(["c", "--skip-nodes-labelled=novalue"]).is_err());
        assert!(Flags::try_parse_from(["c", "--skip-nodes-labelled==x"]).is_err());
    }

    #[test]
    fn startup_gate_defaults() {
        let f = Flags::parse_from(["c"]);
        assert_eq!(f.startup_gate_taint, nodeimage_api::gate::DEFAULT_TAINT_KEY);
        assert_eq!(f.startup_gate_timeout, Duration::from_secs(600));
        let f = Flags::parse_from(["c", "--startup-gate-taint=", "--startup-gate-timeout=30s"]);
        assert!(f.startup_gate_taint.is_empty());
        assert_eq!(f.startup_gate_timeout, Duration::from_secs(30));
    }

    #[test]
    fn registry_limits() {
        let f = Flags::parse_from(["c"]);
        assert_eq!(
            (f.registry_max_pulls, f.registry_max_pulls_for),
            (0, vec![])
        );
        let f = Flags::parse_from([
            "c",
            "--registry-max-pulls=100",
            "--registry-max-pulls-for=docker.io=20,localhost:5000=1",
            "--registry-max-pulls-for",
            "quay.io=0",
        ]);
        assert_eq!(f.registry_max_pulls, 100);
        assert_eq!(
            f.registry_max_pulls_for,
            vec![
                ("docker.io".into(), 20),
                ("localhost:5000".into(), 1),
                ("quay.io".into(), 0)
            ]
        );
        for bad in ["docker.io", "=3", "docker.io=x", "a/b=1", "docker.io=-1"] {
            let arg = format!("--registry-max-pulls-for={bad}");
            assert!(Flags::try_parse_from(["c", &arg]).is_err(), "{bad}");
        }
    }
}
