//! nodeimage-controller: mirrors Nodes into NodeImages, keeps NodeImage specs
//! tidy, and (in later modules) turns jobs into per-node tag entries.

mod clock;
mod context;
mod entries;
mod flags;
mod housekeeping;
mod imagelistpulljob;
mod imagepulljob;
mod lifecycle;
mod nodemirror;
mod pullsecrets;
mod rollout;
mod watch;

use clap::Parser;
use flags::Flags;
use nodeimage_ops::{client, health, shutdown, telemetry};
use std::process::ExitCode;
use std::time::Duration;

/// How long in-flight reconciles may take to finish after a stop signal.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

#[tokio::main]
async fn main() -> ExitCode {
    let flags = Flags::parse();
    telemetry::init(flags.log_format, "info,kube_runtime=warn");
    match run(flags).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "controller stopped");
            ExitCode::FAILURE
        }
    }
}

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Client(#[from] client::ClientError),
    #[error(transparent)]
    Context(#[from] context::ContextError),
    #[error("health server on {addr}: {source}")]
    Health {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

async fn run(flags: Flags) -> Result<(), Error> {
    let client = client::connect(flags.kubeconfig.as_ref()).await?;
    let ctx = context::Context::new(client, &flags)?;
    tracing::info!(
        response_timeout_s = flags.response_timeout.as_secs(),
        "controller starting"
    );
    let readiness = health::Readiness::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let health_addr = flags.health_addr;
    let health = tokio::spawn(health::serve(
        health_addr,
        readiness.clone(),
        None,
        lifecycle::stopped(stop_rx.clone()),
    ));

    let work = async {
        tokio::join!(
            nodemirror::run(ctx.clone(), readiness.clone(), stop_rx.clone()),
            housekeeping::run(ctx.clone(), readiness.clone(), stop_rx.clone()),
            imagepulljob::run(ctx.clone(), readiness.clone(), stop_rx.clone()),
            imagelistpulljob::run(ctx.clone(), readiness.clone(), stop_rx.clone()),
        )
    };
    let mut work = std::pin::pin!(work);
    tokio::select! {
        _ = &mut work => tracing::warn!("controllers ended without a stop signal"),
        _ = shutdown::signal_received() => {
            let _ = stop_tx.send(true);
            if tokio::time::timeout(SHUTDOWN_GRACE, &mut work).await.is_err() {
                tracing::warn!(grace_s = SHUTDOWN_GRACE.as_secs(), "reconciles still running after the grace period; exiting anyway");
            }
        }
    }
    let _ = stop_tx.send(true);
    match health.await {
        Ok(Ok(())) => {}
        Ok(Err(source)) => {
            return Err(Error::Health {
                addr: health_addr,
                source,
            });
        }
        Err(e) => tracing::warn!(error = %e, "health server task failed"),
    }
    tracing::info!("controller stopped cleanly");
    Ok(())
}
