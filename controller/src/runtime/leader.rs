//! Leader election over a coordination.k8s.io Lease, so that several replicas
//! can run and only one reconciles. A replica that loses the lease stops its
//! work at once and exits; its restart makes it a standby.

use kube_lease_manager::{LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;

/// Settings of the election.
#[derive(Clone, Debug)]
pub struct Election {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub lease: String,
    /// This replica's identity (the pod name).
    pub identity: String,
    /// Seconds a holder keeps the lease without renewing it.
    pub duration_s: u64,
}

/// Why the election could not run.
#[derive(Debug, thiserror::Error)]
#[error("leader election on lease {namespace}/{lease}: {source}")]
pub struct ElectionError {
    namespace: String,
    lease: String,
    #[source]
    source: kube_lease_manager::LeaseManagerError,
}

/// Starts competing for the lease; the receiver says whether we lead.
pub async fn start(
    client: kube::Client,
    e: &Election,
) -> Result<watch::Receiver<bool>, ElectionError> {
    let grace = (e.duration_s / 3).max(1);
    let manager = LeaseManagerBuilder::new(client, &e.lease)
        .with_namespace(&e.namespace)
        .with_identity(&e.identity)
        .with_parameters(
            // One field manager per replica: the lease is claimed with
            // server-side apply, and only distinct managers conflict (a shared
            // one let two replicas that started together both lead).
            LeaseParams::new(e.identity.clone(), e.duration_s, grace)
                .with_field_manager(format!("nodeimage-controller-{}", e.identity)),
        )
        .build()
        .await
        .map_err(|source| ElectionError {
            namespace: e.namespace.clone(),
            lease: e.lease.clone(),
            source,
        })?;
    let (rx, task) = manager.watch().await;
    tokio::spawn(async move {
        match task.await {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::error!(%error, "lease manager stopped"),
            Err(error) => tracing::error!(%error, "lease manager task failed"),
        }
    });
    Ok(rx)
}
