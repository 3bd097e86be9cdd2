//! What both nodeimage binaries need to run in production: structured logs,
//! a kube client from kubeconfig or in-cluster config, `/healthz` and
//! `/readyz`, a shutdown signal, and kubelet's credential-provider plugins
//! (the daemon's pulls and the controller's followed-tag lookups).

pub mod apimetrics;
pub mod client;
pub mod credproviders;
pub mod duration;
pub mod health;
pub mod metrics;
pub mod shutdown;
pub mod telemetry;
