//! nodeimage-controller: mirrors Nodes into NodeImages, turns every job kind
//! into per-node tag entries and aggregates what the daemons report.
//!
//! Its modules are grouped by role, from the bottom up: `flags`, `messages`,
//! `runtime` (the process), `nodeimage` (the model), `cluster` (what it
//! remembers and the one entry writer), `engine` (what every job kind
//! shares), `controllers`. Each uses only those before it;
//! tests/lint/modcycles.py checks that no two lean on each other.

mod cluster;
mod controllers;
mod engine;
pub mod flags;
mod messages;
mod nodeimage;
mod runtime;

use cluster::{nodecache, nodeimages, podcache, tagwrites};
use controllers::{
    housekeeping, imagelistpulljob, imageprepulljob, imagepulljob, nodemirror, nodeupgradejob,
    predownload, startupgate,
};
use engine::jobshell;
use flags::Flags;
use futures::StreamExt;
use nodeimage::nodes;
use nodeimage_ops::{client, health, shutdown};
use runtime::{context, leader, lifecycle};
use std::time::Duration;

/// How long in-flight reconciles may take to finish after a stop signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] client::ClientError),
    #[error(transparent)]
    Context(#[from] context::ContextError),
    #[error(transparent)]
    Election(#[from] leader::ElectionError),
    #[error("lost the leader-election lease; exiting so that a restart waits as a standby")]
    LostLease,
    #[error("health server on {addr}: {source}")]
    Health {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

/// Runs until a stop signal (or a lost lease), then shuts down cleanly.
pub async fn run(flags: Flags) -> Result<(), Error> {
    nodes::skip_nodes_labelled(
        flags
            .skip_nodes_labelled
            .iter()
            .flatten()
            .cloned()
            .collect(),
    );
    nodes::gate_taint_key(flags.startup_gate_taint.clone());
    let client = client::connect(flags.kubeconfig.as_ref()).await?;
    let ctx = context::Context::new(client, &flags)?;
    let limits =
        engine::registrypace::Limits::new(flags.registry_max_pulls, &flags.registry_max_pulls_for);
    tracing::info!(
        response_timeout_s = flags.response_timeout.as_secs(),
        registry_max_pulls = flags.registry_max_pulls,
        registry_max_pulls_for = ?limits.per_host,
        "controller starting"
    );
    let readiness = health::Readiness::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let health_addr = flags.health_addr;
    let health = serve_health(&ctx, &flags, readiness.clone(), stop_rx.clone());

    // With leader election, wait (as a ready standby) until we hold the lease.
    let Some(mut leading) = lead(&ctx, &flags).await? else {
        let _ = stop_tx.send(true);
        let _ = health.await;
        return Ok(());
    };
    let lost = async {
        match leading.as_mut() {
            Some(rx) => {
                let _ = rx.wait_for(|l| !*l).await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    let gate = startupgate::plan::Settings {
        taint: flags.startup_gate_taint.clone(),
        timeout: runtime::clock::seconds(
            i64::try_from(flags.startup_gate_timeout.as_secs()).unwrap_or(i64::MAX),
        ),
    };
    let work = controllers(ctx.clone(), limits, gate, readiness, stop_rx);
    let mut work = std::pin::pin!(work);
    let mut lost_lease = false;
    tokio::select! {
        _ = &mut work => tracing::warn!("controllers ended without a stop signal"),
        _ = lost => {
            tracing::error!("lost the leader-election lease: stopping work now");
            ctx.metrics.leader.set(0);
            lost_lease = true;
            let _ = stop_tx.send(true);
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut work).await;
        }
        _ = shutdown::signal_received() => {
            let _ = stop_tx.send(true);
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut work).await.is_err() {
                tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "reconciles still running after the grace period; exiting anyway");
            }
        }
    }
    let _ = stop_tx.send(true);
    stopped(health, health_addr, lost_lease).await
}

/// Starts the health and metrics server; it ends when `stop` turns true.
fn serve_health(
    ctx: &context::Context,
    flags: &Flags,
    readiness: health::Readiness,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let mut registry = nodeimage_ops::metrics::registry("controller");
    ctx.metrics
        .register(&mut registry, ctx.stores.clone(), &flags.startup_gate_taint);
    let registry = std::sync::Arc::new(registry);
    let render: health::MetricsFn =
        std::sync::Arc::new(move || nodeimage_ops::metrics::render(&registry));
    tokio::spawn(health::serve(
        flags.health_addr,
        readiness,
        Some(render),
        lifecycle::stopped(stop),
    ))
}

/// Waits until this process may run the controllers: `Some(None)` without
/// leader election, `Some(Some(lease))` once it holds the lease, `None` if
/// a stop signal came first.
async fn lead(
    ctx: &context::Context,
    flags: &Flags,
) -> Result<Option<Option<tokio::sync::watch::Receiver<bool>>>, Error> {
    if !flags.leader_elect {
        ctx.metrics.leader.set(1);
        return Ok(Some(None));
    }
    let election = leader::Election {
        namespace: flags.leader_election_namespace.clone(),
        lease: flags.leader_election_lease.clone(),
        identity: std::env::var("POD_NAME")
            .unwrap_or_else(|_| format!("nodeimage-controller-{}", std::process::id())),
        duration_s: flags.leader_election_lease_seconds,
    };
    let mut rx = leader::start(ctx.client.clone(), &election).await?;
    tracing::info!(identity = %election.identity, lease = %election.lease, "waiting to lead");
    tokio::select! {
        r = rx.wait_for(|l| *l) => { if r.is_err() { return Err(Error::LostLease); } }
        _ = shutdown::signal_received() => return Ok(None),
    }
    tracing::info!(identity = %election.identity, "leading: starting the controllers");
    ctx.metrics.leader.set(1);
    Ok(Some(Some(rx)))
}

/// Every controller of this binary over the shared caches, the one entry
/// writer and the one registry pacing, until `stop` turns true. Every
/// reader subscribes to a cache before the cache runs.
async fn controllers(
    ctx: context::Context,
    limits: engine::registrypace::Limits,
    gate: startupgate::plan::Settings,
    readiness: health::Readiness,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let nodeimages = nodeimages::NodeImages::new();
    let writer = tagwrites::NodeWriter::new(ctx.client.clone(), nodeimages.store.clone());
    let pacing = registry_pacing(&ctx, limits, &nodeimages, stop.clone());
    let _ = ctx.stores.nodeimages.set(nodeimages.store.clone());
    let for_writer = nodeimages.subscribe();
    let [for_housekeeping, for_pull, for_prepull, for_upgrade] =
        std::array::from_fn(|_| nodeimages.subscribe());
    let mut nodes = nodecache::nodes();
    let [n_mirror, n_housekeeping, n_prepull, n_upgrade, n_gate] =
        std::array::from_fn(|_| nodes.subscribe());
    let mut pods = podcache::pods(engine::podimages::trim_pod);
    let [p_pull, p_deployments, p_statefulsets, p_daemonsets] =
        std::array::from_fn(|_| pods.subscribe());
    let node_store = nodes.store();
    let nodeimages_for_gate = (nodeimages.store.clone(), nodeimages.synced.clone());
    let writes_seen = for_writer
        .changes
        .take_until(lifecycle::stopped(stop.clone()));
    tokio::join!(
        nodeimages.run(ctx.clone(), readiness.clone(), stop.clone()),
        nodes.run(ctx.client.clone(), readiness.clone(), stop.clone()),
        pods.run(ctx.client.clone(), readiness.clone(), stop.clone()),
        writer.clone().follow(writes_seen.boxed()),
        nodemirror::run(ctx.clone(), readiness.clone(), stop.clone(), n_mirror),
        housekeeping::run(
            ctx.clone(),
            readiness.clone(),
            stop.clone(),
            for_housekeeping,
            n_housekeeping
        ),
        imagepulljob::run(
            ctx.clone(),
            writer.clone(),
            pacing.clone(),
            stop.clone(),
            for_pull,
            node_store.clone(),
            p_pull
        ),
        jobshell::run_node_tasks(
            imageprepulljob::WIRING,
            ctx.clone(),
            writer.clone(),
            pacing.clone(),
            stop.clone(),
            for_prepull,
            n_prepull
        ),
        imagelistpulljob::run(ctx.clone(), readiness.clone(), stop.clone()),
        predownload::run(
            ctx.clone(),
            readiness.clone(),
            stop.clone(),
            node_store.clone(),
            predownload::PodFeeds {
                deployments: p_deployments,
                statefulsets: p_statefulsets,
                daemonsets: p_daemonsets,
            }
        ),
        startupgate::run(ctx.clone(), gate, stop.clone(), n_gate, nodeimages_for_gate),
        jobshell::run_node_tasks(
            nodeupgradejob::WIRING,
            ctx,
            writer,
            pacing,
            stop,
            for_upgrade,
            n_upgrade
        ),
    );
}

/// The one registry pacing of every job kind, over the NodeImage cache, with
/// its per-registry report handed to the metrics; it follows the cache's
/// changes (to hand freed slots on) until `stop` turns true.
fn registry_pacing(
    ctx: &context::Context,
    limits: engine::registrypace::Limits,
    nodeimages: &nodeimages::NodeImages,
    stop: tokio::sync::watch::Receiver<bool>,
) -> std::sync::Arc<engine::registrypace::RegistryPacing> {
    let pacing = std::sync::Arc::new(engine::registrypace::RegistryPacing::new(
        limits,
        nodeimages.store.clone(),
    ));
    let report = pacing.clone();
    let report: runtime::stores::RegistryReport =
        std::sync::Arc::new(move || report.report(chrono::Utc::now()));
    let _ = ctx.stores.registries.set(report);
    let changes = nodeimages.subscribe().changes;
    let changes = changes.take_until(lifecycle::stopped(stop)).boxed();
    tokio::spawn(pacing.clone().follow(changes));
    pacing
}

/// Waits for the health server and says how the run ended.
async fn stopped(
    health: tokio::task::JoinHandle<std::io::Result<()>>,
    addr: std::net::SocketAddr,
    lost_lease: bool,
) -> Result<(), Error> {
    match health.await {
        Ok(Ok(())) => {}
        Ok(Err(source)) => return Err(Error::Health { addr, source }),
        Err(e) => tracing::warn!(error = %e, "health server task failed"),
    }
    if lost_lease {
        return Err(Error::LostLease);
    }
    tracing::info!("controller stopped cleanly");
    Ok(())
}
