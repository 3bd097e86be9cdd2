//! nodeimage-controller: mirrors Nodes into NodeImages, keeps NodeImage specs
//! tidy, and (in later modules) turns jobs into per-node tag entries.

mod flags;
mod housekeeping;
mod nodemirror;

use clap::Parser;
use flags::Flags;
use nodeimage_ops::{client, health, shutdown, telemetry};
use std::process::ExitCode;

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
    #[error("health server on {addr}: {source}")]
    Health {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

async fn run(flags: Flags) -> Result<(), Error> {
    let client = client::connect(flags.kubeconfig.as_ref()).await?;
    tracing::info!(
        response_timeout_s = flags.response_timeout.as_secs(),
        "controller starting"
    );
    let readiness = health::Readiness::default();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = {
        let mut rx = stop_rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let health_addr = flags.health_addr;
    let health = tokio::spawn(health::serve(health_addr, readiness.clone(), None, stopped));

    let ctx = nodemirror::Context::new(client.clone(), &flags);
    let work = async {
        tokio::join!(
            nodemirror::run(ctx.clone(), readiness.clone(), stop_rx.clone()),
            housekeeping::run(ctx.clone(), readiness.clone(), stop_rx.clone()),
        )
    };
    tokio::select! {
        _ = work => tracing::warn!("controllers ended"),
        _ = shutdown::signal_received() => {},
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
