//! nodeimage-daemon: one per node; pulls what the node's NodeImage lists
//! through containerd and reports status.

mod checks;
pub mod containerd;
mod credentials;
mod decode;
mod deps;
mod desired;
pub mod flags;
mod gate;
mod metrics;
mod pins;
mod presence;
mod pull;
mod ratelimit;
pub mod removal;
mod report;
mod resume;
mod retry;
pub mod runtime;
mod runtime_info;
mod status;
mod sync;
mod upgrade;
mod worker;
mod writer;

use nodeimage_ops::credproviders::Providers;

use flags::Flags;
use kube::runtime::events::Reporter;
use nodeimage_api::kruise::NodeImage;
use nodeimage_ops::{client, health, shutdown};
use std::sync::Arc;
use std::time::Duration;

/// What every task shares, over the node's containerd.
type NodeDeps = deps::Deps<containerd::Runtime>;

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] client::ClientError),
    #[error("containerd socket {0}: {1}")]
    Runtime(String, runtime::RuntimeError),
    #[error("health server: {0}")]
    Health(std::io::Error),
    #[error(transparent)]
    CredentialProviders(#[from] nodeimage_ops::credproviders::LoadError),
    #[error("--pull-verifier-dir: {0}")]
    PullVerifier(#[from] removal::verifier::VerifierError),
}

/// Runs until a stop signal (or a lost lease), then shuts down cleanly.
pub async fn run(flags: Flags) -> Result<(), Error> {
    // A config kubelet would refuse stops the daemon before anything else.
    let providers = Providers::from_flags(flags.credential_providers())?;
    let client = client::connect(flags.kubeconfig.as_ref()).await?;
    let runtime = containerd::Runtime::new(&flags.containerd_socket, flags.runtime_api)
        .map_err(|e| Error::Runtime(flags.containerd_socket.display().to_string(), e))?;
    log_start(&flags);

    let metrics = metrics::Metrics::new();
    let readiness = health::Readiness::default();
    let synced = readiness.check("nodeimage-synced").await;
    let runtime_ok = readiness.check("containerd").await;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let health = tokio::spawn(health::serve(
        flags.health_addr,
        readiness.clone(),
        Some(render_metrics(&metrics)),
        stopped(stop_rx.clone()),
    ));
    let (info_tx, info_rx) = tokio::sync::watch::channel(None);
    let probe = tokio::spawn(watch_runtime(
        runtime.clone(),
        runtime_ok,
        metrics.clone(),
        info_tx,
        flags.runtime_api,
        stop_rx.clone(),
    ));

    let api: kube::Api<nodeimage_api::lenient::Lenient<NodeImage>> = kube::Api::all(client.clone());
    let status = writer::StatusHandle::default();
    let deps = Arc::new(deps(
        &flags,
        runtime,
        client,
        status.clone(),
        metrics.clone(),
        providers,
    ));
    let pinning = tokio::spawn(pin_when_able(
        deps.clone(),
        info_rx,
        pin_settings(&flags),
        stop_rx.clone(),
    ));
    let writer = tokio::spawn(writer::run(
        status,
        api.clone(),
        flags.node_name.clone(),
        metrics.status_write_errors.clone(),
        stop_rx.clone(),
    ));
    let presence_every = (flags.presence_check_seconds > 0)
        .then(|| Duration::from_secs(flags.presence_check_seconds));
    let (notes, notes_rx) = tokio::sync::watch::channel(None);
    let bound = gate_bound(&flags);
    let gate = tokio::spawn(gate::run(deps.clone(), notes_rx, bound, stop_rx.clone()));
    let sync = tokio::spawn(sync::run(
        sync::watch_nodeimage(api, &flags.node_name),
        flags.node_name.clone(),
        workers(deps, &flags)?,
        synced,
        presence_every,
        notes,
        stop_rx.clone(),
    ));

    shutdown::signal_received().await;
    let _ = stop_tx.send(true);
    let tasks = Tasks {
        sync,
        gate,
        writer,
        probe,
        pinning,
        health,
    };
    tasks.stopped().await
}

/// The daemon's background tasks, told to stop by the stop switch.
struct Tasks {
    sync: tokio::task::JoinHandle<()>,
    gate: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
    probe: tokio::task::JoinHandle<()>,
    pinning: tokio::task::JoinHandle<()>,
    health: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Tasks {
    /// Waits for each task to end: the pulls first, then the writer's
    /// last write of what they reported, then the rest.
    async fn stopped(self) -> Result<(), Error> {
        let _ = self.sync.await;
        let _ = self.gate.await;
        if tokio::time::timeout(Duration::from_secs(5), self.writer)
            .await
            .is_err()
        {
            tracing::warn!("last status write did not finish within 5s");
        }
        let _ = self.probe.await;
        let _ = self.pinning.await;
        match self.health.await {
            Ok(Err(e)) => return Err(Error::Health(e)),
            Err(e) => tracing::warn!(error = %e, "health server task failed"),
            Ok(Ok(())) => {}
        }
        tracing::info!("daemon stopped cleanly");
        Ok(())
    }
}

/// Says how the daemon starts, and warns when upgrades may run on the node.
fn log_start(flags: &Flags) {
    tracing::info!(
        node = %flags.node_name,
        socket = %flags.containerd_socket.display(),
        max_concurrent_pulls = flags.max_concurrent_pulls,
        "daemon starting"
    );
    if flags.enable_upgrades {
        tracing::warn!(
            work_dir = %flags.upgrade_work_dir.display(),
            tool = %flags.upgrade_tool_path,
            version_source = %flags.node_version_source,
            "node-agent upgrades enabled: NodeUpgradeJob entries run their tool on this node"
        );
    }
}

/// The daemon's metrics, registered and rendered for the health server.
fn render_metrics(metrics: &metrics::Metrics) -> health::MetricsFn {
    let mut registry = nodeimage_ops::metrics::registry("daemon");
    metrics.register(&mut registry);
    let registry = Arc::new(registry);
    Arc::new(move || nodeimage_ops::metrics::render(&registry))
}

/// Resolves once `stop` turns true (or its sender is gone).
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// What every task shares, from the flags.
fn deps(
    flags: &Flags,
    runtime: containerd::Runtime,
    client: kube::Client,
    status: writer::StatusHandle,
    metrics: metrics::Metrics,
    providers: Option<Arc<nodeimage_ops::credproviders::Providers>>,
) -> NodeDeps {
    deps::Deps {
        node: flags.node_name.clone(),
        runtime,
        client,
        slots: Arc::new(tokio::sync::Semaphore::new(
            flags.max_concurrent_pulls as usize,
        )),
        status,
        reporter: Reporter {
            controller: "nodeimage-daemon".into(),
            instance: Some(flags.node_name.clone()),
        },
        metrics,
        thresholds: checks::Thresholds {
            disk: flags.disk_threshold_percent,
            cpu: flags.cpu_threshold_percent,
            mem: flags.mem_threshold_percent,
        },
        providers,
        leases: Arc::default(),
        pins: pins::Pins::default(),
        rate_limits: ratelimit::registries::Registries::new(flags.node_name.clone()),
        sandbox_image: flags.sandbox_image.clone(),
        blocked: Default::default(),
    }
}

/// What the loop hands its tasks: the shared pieces, upgrades, and
/// containerd's image verifier, installed here if the flags ask for it.
fn workers(
    deps: Arc<NodeDeps>,
    flags: &Flags,
) -> Result<worker::Workers<containerd::Runtime>, Error> {
    let verifier = flags
        .pull_verifier_dir
        .as_deref()
        .map(removal::verifier::PullVerifier::install)
        .transpose()?;
    Ok(worker::Workers {
        deps,
        upgrades: upgrade_settings(flags),
        verifier: verifier.map(Arc::new),
    })
}

/// How node-agent upgrades run on this node, from the flags.
fn upgrade_settings(flags: &Flags) -> Arc<upgrade::Settings> {
    Arc::new(upgrade::Settings {
        enabled: flags.enable_upgrades,
        tool_path: upgrade::extract::normalize(&flags.upgrade_tool_path),
        work_dir: flags.upgrade_work_dir.clone(),
        version_source: flags.node_version_source.clone(),
        exec_prefix: flags
            .upgrade_exec_prefix
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        node_name: flags.node_name.clone(),
        lock: tokio::sync::Mutex::new(()),
    })
}

/// How this node pins, from the flags.
fn pin_settings(flags: &Flags) -> pins::Settings {
    pins::Settings {
        node: flags.node_name.clone(),
        enabled: flags.pin_images,
        budget_percent: flags.pin_budget_percent,
    }
}

/// Once the runtime is known: says what it can do (a log line, the
/// `runtime_info` metric, an event on the NodeImage once it is read) and,
/// where it honours pins, keeps the wanted images pinned (`pins`).
async fn pin_when_able(
    deps: Arc<NodeDeps>,
    mut info: tokio::sync::watch::Receiver<Option<runtime_info::RuntimeInfo>>,
    settings: pins::Settings,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let info = tokio::select! {
        r = info.wait_for(Option::is_some) => match r {
            Ok(i) => i.clone(),
            Err(_) => return,
        },
        _ = stop.changed() => return,
    };
    let Some(info) = info else { return };
    record_runtime(&deps, &info);
    let events = tokio::spawn(announce_runtime(deps.clone(), info.clone(), stop.clone()));
    let enabled = settings.enabled;
    if info.has(runtime_info::Capability::Pinning) {
        let sinks = pins::Sinks {
            metrics: deps.metrics.clone(),
            status: deps.status.clone(),
            announce: announce_unpinned(deps.clone()),
        };
        pins::run(
            deps.pins.clone(),
            deps.runtime.clone(),
            settings,
            sinks,
            stop.clone(),
        )
        .await;
    } else if enabled {
        tracing::warn!(runtime = %info.name, version = %info.version, "this runtime does not honour image pins; kubelet's image GC may remove pre-pulled images (they are pulled again while wanted)");
    }
    let _ = stop.changed().await;
    events.abort();
}

/// Records a Warning event on the NodeImage for an image the pin budget
/// leaves unpinned (the pinning task says each image once).
fn announce_unpinned(deps: Arc<NodeDeps>) -> Box<dyn Fn(String) + Send + Sync> {
    Box::new(move |note| {
        let deps = deps.clone();
        tokio::spawn(async move {
            let warning = kube::runtime::events::EventType::Warning;
            report::event(&deps, warning, pins::REASON_NOT_PINNED, "Pin", note).await;
        });
    })
}

/// Says what the runtime can do: a log line and the `runtime_info` metric.
fn record_runtime(deps: &NodeDeps, info: &runtime_info::RuntimeInfo) {
    let missing = info.missing();
    if missing.is_empty() {
        tracing::info!(runtime = %info.name, version = %info.version, capabilities = %info.capabilities(), "container runtime supports every daemon feature");
    } else {
        tracing::warn!(runtime = %info.name, version = %info.version, capabilities = %info.capabilities(), missing = %missing, "container runtime lacks some daemon features");
    }
    deps.metrics
        .runtime_info
        .get_or_create(&metrics::RuntimeLabels {
            runtime: info.name.clone(),
            version: info.version.clone(),
            capabilities: info.capabilities(),
        })
        .set(1);
}

/// Records what the runtime can do as an event on the NodeImage, once the
/// NodeImage is known.
async fn announce_runtime(
    deps: Arc<NodeDeps>,
    info: runtime_info::RuntimeInfo,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // The event needs the NodeImage: wait for the first one.
    while deps.status.observed().is_none() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {},
            _ = stop.changed() => return,
        }
    }
    let (type_, note) = if info.missing().is_empty() {
        (
            kube::runtime::events::EventType::Normal,
            format!("Runtime {info}"),
        )
    } else {
        (
            kube::runtime::events::EventType::Warning,
            format!("Runtime {info}; not available here: {}", info.missing()),
        )
    };
    report::event(&deps, type_, "RuntimeDetected", "Start", note).await;
}

/// Keeps the `containerd` readiness condition current, and finds out what
/// the runtime is the first time it answers.
async fn watch_runtime(
    runtime: containerd::Runtime,
    ok: health::Check,
    metrics: metrics::Metrics,
    info: tokio::sync::watch::Sender<Option<runtime_info::RuntimeInfo>>,
    api: containerd::RuntimeApi,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut was: Option<bool> = None;
    loop {
        let now = match runtime.version().await {
            Ok(v) => {
                if was != Some(true) {
                    tracing::info!(runtime = %v, "containerd reachable");
                }
                if info.borrow().is_none()
                    && let Ok(found) = runtime_info::detect(&runtime).await
                {
                    if !found.containerd_api && api == containerd::RuntimeApi::Auto {
                        // Not containerd (CRI-O): CRI alone from now on.
                        runtime.cri_only();
                    }
                    let _ = info.send(Some(found));
                }
                true
            }
            Err(e) => {
                metrics.cri_error("Version");
                if was != Some(false) {
                    tracing::warn!(socket = %runtime.socket().display(), error = %e, "containerd unreachable");
                }
                false
            }
        };
        ok.set(now);
        was = Some(now);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(5)) => {},
            _ = stop.changed() => return,
        }
    }
}

/// The start-up gate's bound on this node, from the flags.
fn gate_bound(flags: &Flags) -> gate::bound::Settings {
    gate::bound::Settings {
        taint: flags.startup_gate_taint.clone(),
        timeout: flags.startup_gate_timeout,
    }
}
