//! Shutdown on SIGTERM or SIGINT.

use tokio::signal::unix::{SignalKind, signal};

/// Resolves when the process is asked to stop (SIGTERM from the kubelet, or Ctrl-C).
pub async fn signal_received() {
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the process");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = term => tracing::info!(signal = "SIGTERM", "shutting down"),
        _ = tokio::signal::ctrl_c() => tracing::info!(signal = "SIGINT", "shutting down"),
    }
}
