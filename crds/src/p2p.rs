//! Peer-to-peer distribution: the annotations by which a job names the
//! node's P2P agent (Spegel, Dragonfly, Kraken, peerd) and asks for
//! seed-then-fan-out waves. An ImagePullJob, ImageListPullJob (its children
//! carry them on), ImagePrePullJob or pre-downloading workload (its
//! ImagePullJobs carry them on) reads them. Names only: the rules are the
//! controller's (`engine::p2p`).

/// The node's P2P agent: `daemonset:NAMESPACE/NAME` (the DaemonSet's Pods)
/// or `pods:NAMESPACE/SELECTOR` (Pods matching a label selector, e.g.
/// `pods:kraken/app=kraken-agent`); `none` turns off the chart's default
/// (`--p2p-agent`). A node's entry is handed out only once the agent's Pod
/// on that node is Ready.
pub const AGENT: &str = "nodeimage.dev/p2p-agent";

/// How long a node waits for its agent's Pod to be Ready (a duration, `10m`
/// by default), counted from the job's start or the node's creation,
/// whichever is later. Past it, [`AGENT_MISSING`] decides.
pub const AGENT_WAIT: &str = "nodeimage.dev/p2p-agent-wait";

/// What a node whose agent is not Ready within [`AGENT_WAIT`] does:
/// `direct` (the default: it pulls from the registry, and the job says so)
/// or `skip` (the node fails, with the reason).
pub const AGENT_MISSING: &str = "nodeimage.dev/p2p-agent-missing";

/// Seed nodes per topology domain that pull first, from the registry; the
/// others wait until a seed of their domain holds the image. Absent: no
/// waves (every node may start within the job's parallelism, as upstream).
pub const SEEDS: &str = "nodeimage.dev/p2p-seeds";

/// How fast the waves grow once a domain holds the image: each node that
/// holds it lets `FAN_OUT - 1` more pull at once (2 by default: the nodes
/// that hold it double each wave), always within the job's parallelism.
pub const FAN_OUT: &str = "nodeimage.dev/p2p-fan-out";

/// The Node label whose value is a node's topology domain (default
/// `topology.kubernetes.io/zone`; nodes without it share one domain).
pub const TOPOLOGY_KEY: &str = "nodeimage.dev/p2p-topology-key";

/// How long a seed may pull before another node of its domain is made a
/// seed too (a duration, `10m` by default), so a slow or lost seed does
/// not stall its domain.
pub const SEED_DEADLINE: &str = "nodeimage.dev/p2p-seed-deadline";

/// Every annotation above: what a parent hands on to the jobs it makes.
pub const ALL: [&str; 7] = [
    AGENT,
    AGENT_WAIT,
    AGENT_MISSING,
    SEEDS,
    FAN_OUT,
    TOPOLOGY_KEY,
    SEED_DEADLINE,
];

/// The topology key when [`TOPOLOGY_KEY`] is absent.
pub const DEFAULT_TOPOLOGY_KEY: &str = "topology.kubernetes.io/zone";
