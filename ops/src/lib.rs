//! What both nodeimage binaries need to run in production: structured logs,
//! a kube client from kubeconfig or in-cluster config, `/healthz` and
//! `/readyz`, and a shutdown signal.

pub mod apimetrics;
pub mod client;
pub mod duration;
pub mod health;
pub mod metrics;
pub mod shutdown;
pub mod telemetry;
