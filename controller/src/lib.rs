//! nodeimage-controller: mirrors Nodes into NodeImages, turns every job kind
//! into per-node tag entries and aggregates what the daemons report.
//!
//! Its modules are grouped by role, from the bottom up: `flags`, `messages`,
//! `runtime` (the process), `nodeimage` (the model), `cluster` (what it
//! remembers and the one entry writer), `engine` (what every job kind
//! shares), `controllers`, and `wiring` (the caches, made once and handed
//! to the controllers). Each uses only those before it;
//! tests/lint/modcycles.py checks that no two lean on each other.

mod cluster;
mod controllers;
mod engine;
pub mod flags;
mod messages;
mod nodeimage;
mod runtime;

mod wiring;

use controllers::startupgate;
use flags::Flags;
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
    #[error("--p2p-agent: {0}")]
    P2pAgent(String),
    #[error("--eraser-also-exclude: {0}")]
    EraserAlsoExclude(String),
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
    if !flags.p2p_agent.trim().is_empty() {
        engine::p2p::settings::AgentRef::parse(&flags.p2p_agent).map_err(Error::P2pAgent)?;
    }
    controllers::eraserlist::plan::always(&flags.eraser_also_exclude)
        .map_err(Error::EraserAlsoExclude)?;
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
    let caches = wiring::Caches::new(&ctx, limits);
    let health = serve_health(
        &ctx,
        &flags,
        caches.scraped(),
        readiness.clone(),
        stop_rx.clone(),
    );

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
    let work = wiring::controllers(ctx.clone(), caches, gate, readiness, stop_rx);
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
    caches: std::sync::Arc<runtime::readers::Scraped>,
    readiness: health::Readiness,
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<std::io::Result<()>> {
    let mut registry = nodeimage_ops::metrics::registry("controller");
    ctx.metrics
        .register(&mut registry, caches, &flags.startup_gate_taint);
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
