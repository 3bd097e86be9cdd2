//! What every pull and upgrade task on this node shares: the runtime, the
//! API client, the pull slots, the status writer, events and metrics, and
//! which registries rate-limited the node.

use crate::checks::Thresholds;
use crate::metrics::Metrics;
use crate::writer::StatusHandle;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// What every worker shares; generic over the runtime (the seam,
/// `crate::runtime`) so everything above it runs over an in-memory one in
/// unit tests.
pub struct Deps<R> {
    /// This node's name: scopes what the daemon keeps in a containerd that
    /// other daemons may share (the resume leases).
    pub node: String,
    /// The node's runtime.
    pub runtime: R,
    /// Client for reading pull secrets.
    pub client: kube::Client,
    /// Pull slots; the rest wait in order.
    pub slots: Arc<Semaphore>,
    /// Where state is reported.
    pub status: StatusHandle,
    /// Who records the NodeImage's events.
    pub reporter: kube::runtime::events::Reporter,
    /// Metrics; `in_flight` also attributes progress when a pull is alone.
    pub metrics: Metrics,
    /// Limits of the node checks.
    pub thresholds: Thresholds,
    /// Node credentials from kubelet's credential-provider plugins, if configured.
    pub providers: Option<Arc<nodeimage_ops::credproviders::Providers>>,
    /// Which image references tasks pull now, so a resume lease two tags
    /// share ends with the last of them.
    pub leases: Arc<crate::resume::Users>,
    /// The images the spec wants pinned; told when a pull ends.
    pub pins: crate::pins::Pins,
    /// Registries that rate-limited this node, so every pull from one waits.
    pub rate_limits: crate::ratelimit::registries::Registries,
    /// The sandbox image named by `--sandbox-image`, if set (removals never
    /// take it; unset, the runtime's status names it).
    pub sandbox_image: Option<String>,
    /// `name@digest` of each image a block entry keeps off this node, with
    /// the job: a tag whose pull resolves to one fails (set by the loop).
    pub blocked: std::sync::RwLock<std::collections::BTreeMap<String, String>>,
}

#[cfg(test)]
impl<R> Deps<R> {
    /// What the tasks share in a unit test: node `n1`, `runtime`, `slots`
    /// pull slots, no limits from the node checks, and a kube client whose
    /// every request fails at once without I/O (events and Secret reads
    /// are best effort).
    pub fn for_tests(runtime: R, slots: usize) -> Self {
        let svc = tower::service_fn(|_: http::Request<kube::client::Body>| async {
            Err::<http::Response<kube::client::Body>, _>(std::io::Error::other(
                "no API server in unit tests",
            ))
        });
        Deps {
            node: "n1".into(),
            runtime,
            client: kube::Client::new(svc, "default"),
            slots: Arc::new(Semaphore::new(slots)),
            status: StatusHandle::default(),
            reporter: kube::runtime::events::Reporter {
                controller: "test".into(),
                instance: None,
            },
            metrics: Metrics::new(),
            thresholds: Thresholds {
                disk: 100.0,
                cpu: 100.0,
                mem: 100.0,
            },
            providers: None,
            leases: Arc::default(),
            pins: crate::pins::Pins::default(),
            rate_limits: crate::ratelimit::registries::Registries::new("n1"),
            sandbox_image: None,
            blocked: Default::default(),
        }
    }
}
