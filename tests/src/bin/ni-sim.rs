//! `ni-sim`: plays the node daemons of many simulated nodes, for the scale
//! benchmarks in `docs/benchmarks.md` (see `tests/bench/scale.sh`).
//!
//! ```text
//! ni-sim create-nodes --count 1000 [--prefix sim] [--concurrency 32]
//! ni-sim run [--selector nodeimage.dev/sim=true] [--concurrency 64] [--pull-ms 0]
//!            [--stats-file F]
//! ni-sim delete-nodes [--selector nodeimage.dev/sim=true]
//! ni-sim bind-pods --namespace NS --selector app=x --count 1000
//!            [--node-selector nodeimage.dev/sim=true] [--concurrency 32] [--timeout-seconds 600]
//! ni-sim probe [--namespace probe] [--prefix probe] [--leases 100] [--interval-ms 10000]
//!            [--duration-s S] [--as USER] [--as-group G]... [--stats-file F]
//! ```
//!
//! `probe` renews Leases as kubelets do and times each renewal, as an
//! ordinary client of the API server (`nodeimage_tests::leaseprobe`).
//!
//! `create-nodes` creates Ready edge Node objects labelled `nodeimage.dev/sim=true`
//! (the controller's node mirror then creates their NodeImages). `run`
//! watches the NodeImages matching `--selector` and, for every spec tag whose
//! status has no finished entry for the tag's `version`, marks it Pulling,
//! waits `--pull-ms`, then marks it Succeeded; as the daemon holds new work
//! for `START_HOLD` (1 s), a pull that ends within it is written once
//! (Succeeded), a longer one shows Pulling at the hold. It writes exactly what the
//! real daemon writes, with the same function
//! (`nodeimage_api::kruise::nodeimage::patch::guarded_status_patch`): a JSON Patch
//! of the status subresource that replaces the whole status, guarded by the
//! observed uid, `status.desired` and the spec tags of each image whose
//! entries it changes, with the counts from `NodeImageStatus::recount`. All tags of a node that are due move in one
//! patch, as the daemon coalesces simultaneous changes. At most
//! `--concurrency` nodes are being written at once. When the guard fails
//! (the spec moved on) the node is read again and retried.
//!
//! `bind-pods` does a scheduler's one write for the Pods of a workload (the
//! benchmark cluster runs no scheduler): a Binding per unbound Pod matching
//! `--selector`, each onto a Node matching `--node-selector` that holds none
//! of those Pods yet (one Pod per node, in name order), until `--count`
//! are bound. The Pods stay Pending (no kubelet), which is all a
//! `podSelector` reads: a Pod bound to a node and not finished.
//!
//! `run` counts its own requests (patches, gets) and prints them every
//! `--stats-interval` seconds and at exit (SIGINT/SIGTERM), as one JSON line
//! on stdout and in `--stats-file` if given. The line also gives, per
//! registry host, the most nodes pulling from it at once
//! (`peakPullingNodes`: what registry pacing must keep under its limit),
//! counted from the status each node is about to write: a daemon stops
//! pulling before it reports Succeeded, and the controller may start the
//! next node the moment that report lands.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use nodeimage_api::kruise::nodeimage::{contract, patch};
use nodeimage_api::kruise::{
    ImagePullPhase, ImageTagStatus, NodeImage, NodeImageStatus, Purpose, TagUpgradeStatus,
    UpgradeState,
};
use nodeimage_api::nodeimage_dev::{ImageRemoval, RemovalResult, RemovalStatus, answer_to};
use nodeimage_api::reference::ImageRef;
use nodeimage_tests::{bandwidth, leaseprobe};
use tokio::sync::mpsc;

#[derive(Parser)]
#[command(
    name = "ni-sim",
    about = "Simulated nodeimage node daemons for scale benchmarks"
)]
struct Cli {
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Create COUNT Ready Nodes named PREFIX-00001 … (existing ones are kept).
    CreateNodes {
        #[arg(long)]
        count: usize,
        #[arg(long, default_value = "sim")]
        prefix: String,
        /// Requests in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Spread the nodes over this many zones (label
        /// topology.kubernetes.io/zone=zone-K, round-robin); 0: no label.
        #[arg(long, default_value_t = 0)]
        zones: usize,
    },
    /// Delete the Nodes matching SELECTOR (one delete-collection request).
    DeleteNodes {
        #[arg(long, default_value = SIM_SELECTOR)]
        selector: String,
    },
    /// Bind unbound Pods matching SELECTOR in NAMESPACE, one per Node
    /// matching NODE_SELECTOR, until COUNT of them are bound.
    BindPods {
        #[arg(long)]
        namespace: String,
        #[arg(long)]
        selector: String,
        #[arg(long, default_value = SIM_SELECTOR)]
        node_selector: String,
        #[arg(long)]
        count: usize,
        /// Requests in flight at once.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
        /// Give up when COUNT Pods are not bound by then.
        #[arg(long, default_value_t = 600)]
        timeout_seconds: u64,
    },
    /// Renew LEASES Leases every INTERVAL_MS as USER (impersonated; `{name}`
    /// is each Lease's name) until DURATION_S or SIGTERM; print the count,
    /// p50, p99 and max time of the renewals and their errors as JSON.
    Probe {
        #[arg(long, default_value = "probe")]
        namespace: String,
        #[arg(long, default_value = "probe")]
        prefix: String,
        #[arg(long, default_value_t = 100)]
        leases: usize,
        #[arg(long, default_value_t = 10_000)]
        interval_ms: u64,
        #[arg(long)]
        duration_s: Option<u64>,
        /// User to impersonate, e.g. system:serviceaccount:probe:probe or
        /// system:node:{name}.
        #[arg(long = "as")]
        user: Option<String>,
        /// Group to impersonate with it (repeat for several).
        #[arg(long = "as-group")]
        groups: Vec<String>,
        /// Also write the result line to this file.
        #[arg(long)]
        stats_file: Option<PathBuf>,
    },
    /// Play the daemons of the NodeImages matching SELECTOR until stopped.
    Run {
        #[arg(long, default_value = SIM_SELECTOR)]
        selector: String,
        /// Nodes being written at once.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// Simulated pull time between Pulling and Succeeded, in milliseconds.
        #[arg(long, default_value_t = 0)]
        pull_ms: u64,
        /// Also write each stats line to this file (replaced each time).
        #[arg(long)]
        stats_file: Option<PathBuf>,
        /// Seconds between stats lines.
        #[arg(long, default_value_t = 10)]
        stats_interval: u64,
        /// Pull through a modelled network instead of waiting --pull-ms
        /// (`nodeimage_tests::bandwidth`): `image_mb=…,registry_mbps=…,
        /// node_mbps=…,upload_mbps=…,speed=…`, each optional; a node's zone
        /// is its topology.kubernetes.io/zone label.
        #[arg(long)]
        bandwidth_model: Option<String>,
    },
}

/// Label of the simulated nodes (and so of their NodeImages).
const SIM_LABEL: &str = "nodeimage.dev/sim";
const SIM_SELECTOR: &str = "nodeimage.dev/sim=true";

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Cmd::Probe {
        namespace,
        prefix,
        leases,
        interval_ms,
        duration_s,
        user,
        groups,
        stats_file,
    } = cli.cmd
    {
        let probe = leaseprobe::Probe {
            kubeconfig: cli.kubeconfig,
            namespace,
            prefix,
            leases,
            interval: Duration::from_millis(interval_ms.max(1)),
            duration: duration_s.map(Duration::from_secs),
            user,
            groups,
            stats_file,
        };
        return match leaseprobe::run(probe).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ni-sim: probe: {e}");
                ExitCode::from(2)
            }
        };
    }
    let client = match nodeimage_ops::client::connect(cli.kubeconfig.as_ref()).await {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ni-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.cmd {
        Cmd::CreateNodes {
            count,
            prefix,
            concurrency,
            zones,
        } => create_nodes(client, count, &prefix, concurrency, zones).await,
        Cmd::DeleteNodes { selector } => delete_nodes(client, &selector).await,
        Cmd::BindPods {
            namespace,
            selector,
            node_selector,
            count,
            concurrency,
            timeout_seconds,
        } => {
            let want = Binds {
                selector,
                node_selector,
                count,
                concurrency,
                timeout: Duration::from_secs(timeout_seconds),
            };
            bind_pods(client, &namespace, &want).await
        }
        // Run above, before the client.
        Cmd::Probe { .. } => Ok(()),
        Cmd::Run {
            selector,
            concurrency,
            pull_ms,
            stats_file,
            stats_interval,
            bandwidth_model,
        } => {
            let model = match bandwidth_model.as_deref().map(bandwidth::Config::parse) {
                None => None,
                Some(Ok(cfg)) => Some(Arc::new(bandwidth::Model::new(cfg))),
                Some(Err(e)) => {
                    eprintln!("ni-sim: --bandwidth-model: {e}");
                    return ExitCode::from(2);
                }
            };
            let sim = Arc::new(Sim {
                api: Api::all(client),
                pull: Duration::from_millis(pull_ms),
                stats: Stats::default(),
                nodes: Mutex::default(),
                model,
            });
            run(sim, &selector, concurrency, stats_file, stats_interval).await
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ni-sim: {e}");
            ExitCode::from(2)
        }
    }
}

type Error = Box<dyn std::error::Error + Send + Sync>;

// ---------------------------------------------------------------------------
// Nodes
// ---------------------------------------------------------------------------

/// A Ready node as up.sh writes it (labels, conditions, nodeInfo, capacity).
/// The zone label the simulated nodes carry with `--zones`.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

fn sim_node(name: &str, zone: Option<String>) -> Result<Node, serde_json::Error> {
    let now = Timestamp::now().to_string();
    let mut node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                SIM_LABEL: "true",
                // Edge nodes, as KubeEdge's kinds select only those.
                "node-role.kubernetes.io/edge": "",
            },
        },
        "status": {
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "simulated by ni-sim",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "kubeletVersion": "v1.37.2", "kubeProxyVersion": "",
                "containerRuntimeVersion": "containerd://1.6.20",
                "architecture": "amd64", "operatingSystem": "linux",
                "osImage": "ni-sim", "kernelVersion": "", "machineID": "",
                "systemUUID": "", "bootID": "",
            },
            "capacity": {"cpu": "2", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"},
        },
    }))?;
    if let (Some(zone), Some(labels)) = (zone, node.metadata.labels.as_mut()) {
        labels.insert(ZONE_LABEL.to_string(), zone);
    }
    Ok(node)
}

fn is_ready(n: &Node) -> bool {
    n.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn create_nodes(
    client: kube::Client,
    count: usize,
    prefix: &str,
    concurrency: usize,
    zones: usize,
) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client);
    let zone = |i: usize| (zones > 0).then(|| format!("zone-{}", i % zones));
    let start = Instant::now();
    let created = AtomicU64::new(0);
    let requests = AtomicU64::new(0);
    futures::stream::iter(1..=count)
        .map(|i| {
            let (api, created, requests) = (&api, &created, &requests);
            let name = format!("{prefix}-{i:05}");
            async move {
                let node = sim_node(&name, zone(i))?;
                requests.fetch_add(1, Ordering::Relaxed);
                let node = match api.create(&PostParams::default(), &node).await {
                    Ok(n) => {
                        created.fetch_add(1, Ordering::Relaxed);
                        n
                    }
                    // The node exists already (an earlier run): read it.
                    Err(kube::Error::Api(ae)) if ae.code == 409 => {
                        requests.fetch_add(1, Ordering::Relaxed);
                        api.get(&name).await?
                    }
                    Err(e) => return Err(Error::from(format!("create node {name}: {e}"))),
                };
                if !is_ready(&node) {
                    // The API dropped the status on create: write it separately.
                    let status = serde_json::json!({"status": sim_node(&name, None)?.status});
                    requests.fetch_add(1, Ordering::Relaxed);
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                        .await?;
                }
                Ok::<(), Error>(())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    println!(
        "{{\"nodes\":{count},\"created\":{},\"requests\":{},\"seconds\":{:.3}}}",
        created.load(Ordering::Relaxed),
        requests.load(Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn delete_nodes(client: kube::Client, selector: &str) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client);
    let start = Instant::now();
    let lp = ListParams::default().labels(selector);
    let n = api.list_metadata(&lp).await?.items.len();
    api.delete_collection(&DeleteParams::default(), &lp).await?;
    println!(
        "{{\"deleted\":{n},\"seconds\":{:.3}}}",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Pods onto nodes (the scheduler's part)
// ---------------------------------------------------------------------------

/// What `bind-pods` is asked for.
struct Binds {
    selector: String,
    node_selector: String,
    count: usize,
    concurrency: usize,
    timeout: Duration,
}

/// A Pod as binding reads it: its name and node, if bound.
struct PodSeat {
    name: String,
    node: Option<String>,
}

/// Pairs each unbound Pod with a node that holds none of `pods` yet, both
/// in name order: one Pod per node. Pods left without a free node stay out.
fn assign(pods: &[PodSeat], nodes: &[String]) -> Vec<(String, String)> {
    let taken: HashSet<&str> = pods.iter().filter_map(|p| p.node.as_deref()).collect();
    let mut free: Vec<&String> = nodes
        .iter()
        .filter(|n| !taken.contains(n.as_str()))
        .collect();
    free.sort();
    let mut unbound: Vec<&String> = pods
        .iter()
        .filter(|p| p.node.is_none())
        .map(|p| &p.name)
        .collect();
    unbound.sort();
    unbound
        .into_iter()
        .zip(free)
        .map(|(p, n)| (p.clone(), n.clone()))
        .collect()
}

/// The selected Pods that are active (not finished, not being deleted).
async fn pod_seats(api: &Api<Pod>, selector: &str) -> Result<Vec<PodSeat>, Error> {
    let pods = api.list(&ListParams::default().labels(selector)).await?;
    Ok(pods
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .map(|p| PodSeat {
            name: p.metadata.name.unwrap_or_default(),
            node: p.spec.and_then(|s| s.node_name).filter(|n| !n.is_empty()),
        })
        .collect())
}

async fn bind_pods(client: kube::Client, namespace: &str, want: &Binds) -> Result<(), Error> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let nodes: Api<Node> = Api::all(client);
    let start = Instant::now();
    let node_names: Vec<String> = nodes
        .list_metadata(&ListParams::default().labels(&want.node_selector))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let (bound_now, requests) = (AtomicU64::new(0), AtomicU64::new(2));
    loop {
        let seats = pod_seats(&pods, &want.selector).await?;
        requests.fetch_add(1, Ordering::Relaxed);
        let bound = seats.iter().filter(|p| p.node.is_some()).count();
        if bound >= want.count {
            println!(
                "{{\"bound\":{bound},\"boundNow\":{},\"requests\":{},\"seconds\":{:.3}}}",
                bound_now.load(Ordering::Relaxed),
                requests.load(Ordering::Relaxed),
                start.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if start.elapsed() > want.timeout {
            return Err(format!(
                "{bound} of {} Pods ({}) bound after {:?}; {} Pods, {} Nodes ({})",
                want.count,
                want.selector,
                want.timeout,
                seats.len(),
                node_names.len(),
                want.node_selector
            )
            .into());
        }
        let pairs = assign(&seats, &node_names);
        let tried = pairs.len();
        futures::stream::iter(pairs)
            .map(|(pod, node)| {
                let (pods, bound_now, requests) = (&pods, &bound_now, &requests);
                async move {
                    let binding = serde_json::json!({
                        "apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": pod, "namespace": namespace},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    });
                    requests.fetch_add(1, Ordering::Relaxed);
                    match pods
                        .create_subresource::<_, serde_json::Value>(
                            "binding",
                            &pod,
                            &PostParams::default(),
                            &binding,
                        )
                        .await
                    {
                        Ok(_) => {
                            bound_now.fetch_add(1, Ordering::Relaxed);
                            Ok(())
                        }
                        // Bound meanwhile, or gone: the next list tells.
                        Err(kube::Error::Api(ae)) if ae.code == 409 || ae.code == 404 => Ok(()),
                        Err(e) => Err(Error::from(format!("bind pod {pod} to {node}: {e}"))),
                    }
                }
            })
            .buffer_unordered(want.concurrency.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        // Wait for more Pods (the ReplicaSet controller makes them in
        // batches) unless this pass bound some and all are there.
        if tried == 0 || seats.len() < want.count {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

// ---------------------------------------------------------------------------
// Daemons
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Stats {
    patches: AtomicU64,
    conflicts: AtomicU64,
    errors: AtomicU64,
    gets: AtomicU64,
    pulling: AtomicU64,
    succeeded: AtomicU64,
    registries: Mutex<Registries>,
}

/// Per registry host: the nodes with a tag Pulling from it now, and the
/// most at once so far.
#[derive(Default)]
struct Registries {
    pulling: HashMap<String, HashSet<String>>,
    peak: BTreeMap<String, usize>,
}

impl Registries {
    /// Takes `node`'s status as just written: the registries it pulls from now.
    fn observe(&mut self, node: &str, status: &NodeImageStatus) {
        let now: HashSet<String> = status
            .image_statuses
            .iter()
            .flatten()
            .filter(|(_, st)| st.tags.iter().any(|t| t.phase == ImagePullPhase::Pulling))
            .filter_map(|(image, _)| ImageRef::parse(image).ok().map(|r| r.registry))
            .collect();
        for (registry, nodes) in self.pulling.iter_mut() {
            if !now.contains(registry) {
                nodes.remove(node);
            }
        }
        for registry in now {
            let nodes = self.pulling.entry(registry.clone()).or_default();
            nodes.insert(node.to_string());
            let peak = self.peak.entry(registry).or_default();
            *peak = (*peak).max(nodes.len());
        }
    }
}

impl Stats {
    fn line(&self, since: Instant) -> String {
        let l = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let peak = {
            let r = self.registries.lock().unwrap_or_else(|p| p.into_inner());
            serde_json::to_string(&r.peak).unwrap_or_else(|_| "{}".into())
        };
        format!(
            "{{\"seconds\":{:.1},\"requests\":{},\"patches\":{},\"conflicts\":{},\"errors\":{},\"gets\":{},\"tagsPulling\":{},\"tagsSucceeded\":{},\"peakPullingNodes\":{}}}",
            since.elapsed().as_secs_f64(),
            l(&self.patches) + l(&self.conflicts) + l(&self.errors) + l(&self.gets),
            l(&self.patches),
            l(&self.conflicts),
            l(&self.errors),
            l(&self.gets),
            l(&self.pulling),
            l(&self.succeeded),
            peak,
        )
    }
}

/// Work state of one node.
enum Slot {
    /// In the queue.
    Queued,
    /// Being written; `dirty` when it changed meanwhile (queue it again after).
    Running { dirty: bool },
}

#[derive(Default)]
struct Nodes {
    /// Newest object seen per name (from the watch or our own writes).
    latest: HashMap<String, Arc<NodeImage>>,
    slots: HashMap<String, Slot>,
}

struct Sim {
    api: Api<NodeImage>,
    pull: Duration,
    stats: Stats,
    nodes: Mutex<Nodes>,
    /// The modelled network pulls go through, if any (else `pull`).
    model: Option<Arc<bandwidth::Model>>,
}

fn rv(ni: &NodeImage) -> u64 {
    ni.metadata
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

impl Sim {
    fn lock(&self) -> std::sync::MutexGuard<'_, Nodes> {
        self.nodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps `ni` if it is newer than what we hold; true when it was kept.
    fn store(&self, ni: NodeImage) -> bool {
        let name = ni.metadata.name.clone().unwrap_or_default();
        let mut g = self.lock();
        if g.latest.get(&name).is_some_and(|old| rv(old) >= rv(&ni)) {
            return false;
        }
        g.latest.insert(name, Arc::new(ni));
        true
    }

    /// Queues `name` unless it is queued already; marks a running one dirty.
    fn enqueue(&self, name: &str, queue: &mpsc::UnboundedSender<String>) {
        let mut g = self.lock();
        match g.slots.get_mut(name) {
            Some(Slot::Queued) => {}
            Some(Slot::Running { dirty }) => *dirty = true,
            None => {
                g.slots.insert(name.to_string(), Slot::Queued);
                let _ = queue.send(name.to_string());
            }
        }
    }

    /// Takes `name` off the queue for a worker.
    fn start(&self, name: &str) {
        self.lock()
            .slots
            .insert(name.to_string(), Slot::Running { dirty: false });
    }

    /// Ends a worker's turn; queues the node again if it changed meanwhile.
    fn finish(&self, name: &str, queue: &mpsc::UnboundedSender<String>) {
        let mut g = self.lock();
        if let Some(Slot::Running { dirty: true }) = g.slots.get(name) {
            g.slots.insert(name.to_string(), Slot::Queued);
            let _ = queue.send(name.to_string());
        } else {
            g.slots.remove(name);
        }
    }

    fn latest(&self, name: &str) -> Option<Arc<NodeImage>> {
        self.lock().latest.get(name).cloned()
    }

    /// Moves the node's due tags one phase on until nothing is due.
    async fn play(&self, name: &str) {
        let mut failures = 0;
        loop {
            let Some(ni) = self.latest(name) else { return };
            let Some((mut status, mut pulling, mut succeeded)) = step(&ni) else {
                return;
            };
            // New work is held as the daemon holds it (`START_HOLD`): a
            // pull that ends within the hold is written once, Succeeded.
            if pulling > 0 && (self.pull <= contract::START_HOLD || self.model.is_some()) {
                self.stats
                    .registries
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .observe(name, &status);
                self.wait_pull(&ni, &status).await;
                let started = NodeImage {
                    status: Some(status.clone()),
                    ..(*ni).clone()
                };
                if let Some((done, _, ended)) = step(&started) {
                    (status, pulling, succeeded) = (done, 0, succeeded + ended);
                }
            } else if pulling > 0 {
                tokio::time::sleep(contract::START_HOLD).await;
            }
            // What the node pulls from now, as a daemon knows it before it
            // writes: it has stopped pulling before it reports Succeeded (the
            // controller may free that slot the moment the write lands).
            self.stats
                .registries
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .observe(name, &status);
            // The daemon's own write (the NodeImage write contract).
            let ops: json_patch::Patch =
                match serde_json::from_value(patch::guarded_status_patch(&ni, &status)) {
                    Ok(ops) => ops,
                    Err(e) => {
                        eprintln!("ni-sim: building the status patch of {name}: {e}");
                        return;
                    }
                };
            match self
                .api
                .patch_status(name, &PatchParams::default(), &Patch::Json::<()>(ops))
                .await
            {
                Ok(obj) => {
                    self.stats.patches.fetch_add(1, Ordering::Relaxed);
                    self.stats.pulling.fetch_add(pulling, Ordering::Relaxed);
                    self.stats.succeeded.fetch_add(succeeded, Ordering::Relaxed);
                    self.store(obj);
                    if pulling > 0 {
                        tokio::time::sleep(self.pull.saturating_sub(contract::START_HOLD)).await;
                    }
                }
                // What the entries were built from moved on (a `test`
                // failed): read it again and rebuild, as the daemon does.
                Err(kube::Error::Api(ae)) if contract::is_stale_write(&ae) => {
                    self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                    self.refresh(name).await;
                }
                Err(kube::Error::Api(ae)) if ae.code == 404 => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Err(e) => {
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    failures += 1;
                    eprintln!("ni-sim: status patch of {name} failed ({failures}): {e}");
                    if failures >= 5 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Waits out the node's pulls (the images `status` has Pulling):
    /// through the modelled network, else `pull`.
    async fn wait_pull(&self, ni: &NodeImage, status: &NodeImageStatus) {
        let Some(model) = &self.model else {
            return tokio::time::sleep(self.pull).await;
        };
        let name = ni.metadata.name.as_deref().unwrap_or_default();
        let labels = ni.metadata.labels.as_ref();
        let zone = labels
            .and_then(|l| l.get(ZONE_LABEL))
            .map_or("", String::as_str);
        let pulling = status
            .image_statuses
            .iter()
            .flatten()
            .filter(|(_, st)| st.tags.iter().any(|t| t.phase == ImagePullPhase::Pulling));
        let waits: Vec<_> = pulling
            .map(|(image, _)| model.start(name, image, zone))
            .collect();
        for w in waits {
            let _ = w.await;
        }
    }

    /// Reads the object again after a conflict (the watch may lag behind).
    async fn refresh(&self, name: &str) {
        self.stats.gets.fetch_add(1, Ordering::Relaxed);
        match self.api.get(name).await {
            Ok(obj) => {
                self.store(obj);
            }
            Err(e) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("ni-sim: get {name}: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// The current time in whole seconds, as the daemon writes it.
fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()))
}

/// The status after moving every due tag one phase on (absent or Waiting →
/// Pulling, Pulling → Succeeded), with how many tags became Pulling and
/// Succeeded; `None` when nothing is due. Entries are built as the daemon
/// builds them: one per spec tag, kept when finished for the same version.
fn step(ni: &NodeImage) -> Option<(NodeImageStatus, u64, u64)> {
    let observed = ni.status.as_ref();
    let (mut pulling, mut succeeded) = (0, 0);
    let out = contract::status_for_spec(ni, |image, t, old| match old {
        Some(o) if o.phase.is_finished() => o.clone(),
        Some(o) if o.phase == ImagePullPhase::Pulling => {
            succeeded += 1;
            ImageTagStatus {
                phase: ImagePullPhase::Succeeded,
                progress: Some(100),
                completion_time: Some(now()),
                image_id: Some(format!("{image}@sha256:{:064x}", 0x5151).into()),
                // An upgrade entry (its own entry, beside any pull of the
                // tag) succeeds as a daemon reports a finished upgrade.
                upgrade: t
                    .upgrade
                    .as_ref()
                    .filter(|_| t.purpose == Purpose::Upgrade)
                    .and_then(|u| {
                        TagUpgradeStatus {
                            state: Some(UpgradeState::Successful),
                            to_version: Some(u.version.as_str().into()),
                            ..Default::default()
                        }
                        .boxed()
                    }),
                ..o.clone()
            }
        }
        _ => {
            pulling += 1;
            ImageTagStatus {
                tag: t.tag.clone(),
                phase: ImagePullPhase::Pulling,
                progress: Some(0),
                start_time: Some(now()),
                version: Some(t.version.unwrap_or(0)),
                ..Default::default()
            }
        }
    });
    let mut out = out;
    let answered = answer_removals(ni, &mut out);
    // Also write when entries or counts are stale (a tag left the spec);
    // compare shapes only, so that server-side defaulting cannot loop us.
    let due =
        pulling + succeeded + answered > 0 || observed.is_none_or(|o| shape(o) != shape(&out));
    due.then_some((out, pulling, succeeded))
}

/// Answers each removal entry of `ni` that `out` has no answer to, as a
/// daemon that removed every listed image (1 MiB each) would; returns how
/// many it answered.
fn answer_removals(ni: &NodeImage, out: &mut NodeImageStatus) -> u64 {
    let Some(entries) = ni.spec.removals.as_deref().filter(|e| !e.is_empty()) else {
        return 0;
    };
    let old = out.removals.take().unwrap_or_default();
    let mut answered = 0;
    let answers = entries
        .iter()
        .map(|e| {
            answer_to(e, &old).cloned().unwrap_or_else(|| {
                answered += 1;
                RemovalStatus {
                    job: e.job.clone(),
                    uid: e.uid.clone(),
                    images: e
                        .images
                        .iter()
                        .map(|i| ImageRemoval {
                            image: i.clone(),
                            result: RemovalResult::Removed,
                            reason: None,
                            bytes_freed: Some(1 << 20),
                            message: None,
                        })
                        .collect(),
                    completion_time: Some(now()),
                }
            })
        })
        .collect();
    out.removals = Some(answers);
    answered
}

/// Counts and (image, tag, purpose, version, phase) of every entry.
type Shape<'a> = (
    Vec<Option<i32>>,
    Vec<(&'a str, &'a str, Purpose, i64, ImagePullPhase)>,
);

/// The [`Shape`] of a status.
fn shape(s: &NodeImageStatus) -> Shape<'_> {
    let counts = vec![Some(s.desired), s.waiting, s.pulling, s.succeeded, s.failed];
    let entries = s
        .image_statuses
        .iter()
        .flatten()
        .flat_map(|(i, st)| {
            st.tags.iter().map(move |t| {
                let v = t.version.unwrap_or(0);
                (i.as_str(), t.tag.as_str(), t.purpose, v, t.phase)
            })
        })
        .collect();
    (counts, entries)
}

async fn run(
    sim: Arc<Sim>,
    selector: &str,
    concurrency: usize,
    stats_file: Option<PathBuf>,
    stats_interval: u64,
) -> Result<(), Error> {
    let started = Instant::now();
    let (tx, rx) = mpsc::unbounded_channel::<String>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    for _ in 0..concurrency.max(1) {
        let (sim, rx, tx) = (sim.clone(), rx.clone(), tx.clone());
        tokio::spawn(async move {
            loop {
                let Some(name) = rx.lock().await.recv().await else {
                    return;
                };
                sim.start(&name);
                sim.play(&name).await;
                sim.finish(&name, &tx);
            }
        });
    }

    let watch_sim = sim.clone();
    let cfg = watcher::Config::default().labels(selector);
    let watch = tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(watch_sim.api.clone(), cfg));
        while let Some(ev) = events.next().await {
            match ev {
                Ok(watcher::Event::Apply(ni) | watcher::Event::InitApply(ni)) => {
                    let name = ni.metadata.name.clone().unwrap_or_default();
                    if watch_sim.store(ni) {
                        watch_sim.enqueue(&name, &tx);
                    }
                }
                Ok(watcher::Event::Delete(ni)) => {
                    let name = ni.metadata.name.clone().unwrap_or_default();
                    watch_sim.lock().latest.remove(&name);
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                Err(e) => {
                    eprintln!("ni-sim: watch: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });

    let report = |sim: &Sim| {
        let mut line = sim.stats.line(started);
        if let Some(model) = &sim.model {
            let (registry, peers) = model.served_mb();
            line.pop();
            line.push_str(&format!(
                ",\"modelRegistryMb\":{registry:.1},\"modelPeerMb\":{peers:.1}}}"
            ));
        }
        println!("{line}");
        if let Some(f) = &stats_file {
            let tmp = f.with_extension("tmp");
            if std::fs::write(&tmp, format!("{line}\n")).is_ok() {
                let _ = std::fs::rename(&tmp, f);
            }
        }
    };
    if let Some(model) = sim.model.clone() {
        tokio::spawn(async move {
            let mut last = Instant::now();
            let mut every =
                tokio::time::interval(Duration::from_secs_f64(bandwidth::Model::TICK_SECONDS));
            loop {
                every.tick().await;
                model.tick(last.elapsed().as_secs_f64());
                last = Instant::now();
            }
        });
    }
    let mut tick = tokio::time::interval(Duration::from_secs(stats_interval.max(1)));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tick.tick() => report(&sim),
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
        }
    }
    watch.abort();
    report(&sim);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::kruise::ImageStatus;

    fn status(images: &[(&str, ImagePullPhase)]) -> NodeImageStatus {
        let statuses = images
            .iter()
            .map(|(image, phase)| {
                let tag = ImageTagStatus {
                    tag: "v1".into(),
                    phase: *phase,
                    ..Default::default()
                };
                ((*image).into(), ImageStatus { tags: vec![tag] })
            })
            .collect();
        NodeImageStatus {
            image_statuses: Some(statuses),
            ..Default::default()
        }
    }

    #[test]
    fn one_pod_per_free_node_in_name_order() {
        let seat = |name: &str, node: Option<&str>| PodSeat {
            name: name.into(),
            node: node.map(Into::into),
        };
        let nodes: Vec<String> = ["n3", "n1", "n2", "n4"].map(String::from).to_vec();
        let table: Vec<(Vec<PodSeat>, Vec<(&str, &str)>)> = vec![
            // Nothing bound yet: name order on both sides.
            (
                vec![seat("b", None), seat("a", None)],
                vec![("a", "n1"), ("b", "n2")],
            ),
            // A node that holds a Pod is skipped.
            (
                vec![seat("a", Some("n1")), seat("b", None), seat("c", None)],
                vec![("b", "n2"), ("c", "n3")],
            ),
            // More Pods than free nodes: the rest stay unbound.
            (
                vec![
                    seat("a", Some("n2")),
                    seat("b", None),
                    seat("c", None),
                    seat("d", None),
                    seat("e", None),
                ],
                vec![("b", "n1"), ("c", "n3"), ("d", "n4")],
            ),
            // All bound: nothing to do.
            (vec![seat("a", Some("n1"))], vec![]),
            // A Pod bound to a node outside the set takes no free node.
            (
                vec![seat("a", Some("elsewhere")), seat("b", None)],
                vec![("b", "n1")],
            ),
        ];
        for (pods, want) in table {
            let got = assign(&pods, &nodes);
            let got: Vec<(&str, &str)> =
                got.iter().map(|(p, n)| (p.as_str(), n.as_str())).collect();
            assert_eq!(got, want);
        }
    }

    #[test]
    fn peak_pulling_nodes_per_registry() {
        use ImagePullPhase::{Pulling, Succeeded};
        let mut r = Registries::default();
        r.observe(
            "a",
            &status(&[("127.0.0.1:5000/x", Pulling), ("nginx", Pulling)]),
        );
        r.observe("b", &status(&[("127.0.0.1:5000/y", Pulling)]));
        r.observe(
            "a",
            &status(&[("127.0.0.1:5000/x", Succeeded), ("nginx", Pulling)]),
        );
        r.observe("c", &status(&[("127.0.0.1:5000/x", Pulling)]));
        let peak: Vec<(&str, usize)> = r.peak.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(peak, vec![("127.0.0.1:5000", 2), ("docker.io", 1)]);
        assert_eq!(r.pulling["127.0.0.1:5000"].len(), 2);
    }
}
