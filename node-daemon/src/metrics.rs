//! The daemon's metrics: pulls by result and reason, pull durations, bytes,
//! pulls running and waiting, check failures, status-write and CRI errors,
//! registries that rate-limited the node.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of a finished pull.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PullLabels {
    /// succeeded or failed.
    pub result: String,
    /// Why: present, pulled, not_found, unauthorized, timeout, deadline, check, invalid, lost, secret, unavailable, error.
    pub reason: String,
}

/// Labels by result only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// succeeded or failed.
    pub result: String,
}

/// Labels of a node check.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ItemLabels {
    /// disk, cpu or mem.
    pub item: String,
}

/// Labels of the runtime information metric.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuntimeLabels {
    /// CRI runtime name, e.g. containerd.
    pub runtime: String,
    /// CRI runtime version.
    pub version: String,
    /// What the daemon can do on it: progress, resume, pinning (comma-separated; `-` for none).
    pub capabilities: String,
}

/// Labels of a registry (its canonical host: `docker.io` for Docker Hub).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistryLabels {
    /// The registry host, e.g. docker.io.
    pub registry: String,
}

/// Labels of a CRI call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// The CRI method, e.g. PullImage.
    pub call: String,
}

/// Every metric of the daemon; cheap to clone (shared atomics).
#[derive(Clone)]
pub struct Metrics {
    /// Finished pulls.
    pub pulls: Family<PullLabels, Counter>,
    /// Time from pull start (slot acquired) to the end, in seconds.
    pub pull_duration: Family<ResultLabels, Histogram, fn() -> Histogram>,
    /// Bytes of images pulled (content size reported by the runtime).
    pub pulled_bytes: Counter,
    /// Pulls running now.
    pub in_flight: Gauge,
    /// Pulls waiting for a slot.
    pub waiting: Gauge,
    /// Failed node checks.
    pub check_failures: Family<ItemLabels, Counter>,
    /// Failed NodeImage status writes.
    pub status_write_errors: Counter,
    /// Failed CRI calls.
    pub cri_errors: Family<CallLabels, Counter>,
    /// The runtime found at start, always 1.
    pub runtime_info: Family<RuntimeLabels, Gauge>,
    /// Images this daemon keeps pinned (kubelet's GC skips them).
    pub pinned_images: Gauge,
    /// Bytes of the images this daemon keeps pinned.
    pub pinned_bytes: Gauge,
    /// Bytes the runtime's image filesystem can hold (for the pinned share).
    pub image_fs_capacity_bytes: Gauge,
    /// Wanted images on the node the pin budget leaves unpinned.
    pub pins_over_budget: Gauge,
    /// Pinning passes done (the pin metrics are current once it is above 0).
    pub pin_passes: Counter,
    /// Images a finished tag still wants that left the node.
    pub images_lost: Counter,
    /// Pulls a registry rate-limited (HTTP 429), by registry.
    pub registry_rate_limited: Family<RegistryLabels, Counter>,
    /// Pulls waiting for a registry that rate-limited this node, by registry.
    pub registry_waiting: Family<RegistryLabels, Gauge>,
    /// Start-up taints this daemon removed once every gating image was there.
    pub startup_gate_opened: Counter,
    /// Start-up taints this daemon removed because the bound passed.
    pub startup_gate_timed_out: Counter,
    /// Seconds this node has carried the start-up taint past its bound.
    pub startup_gate_overdue_seconds: Gauge,
}

fn duration_histogram() -> Histogram {
    Histogram::new([
        0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
    ])
}

/// Every (result, reason) a finished pull is counted under, so that each
/// series exists at 0 before its first pull (rates and alerts see it).
pub const PULL_OUTCOMES: &[(&str, &str)] = &[
    ("succeeded", "pulled"),
    ("succeeded", "present"),
    ("failed", "not_found"),
    ("failed", "unauthorized"),
    ("failed", "timeout"),
    ("failed", "deadline"),
    ("failed", "check"),
    ("failed", "invalid"),
    ("failed", "blocked"),
    ("failed", "lost"),
    ("failed", "secret"),
    ("failed", "unavailable"),
    ("failed", "error"),
];
/// Node check items.
pub const CHECK_ITEMS: &[&str] = &["disk", "cpu", "mem"];
/// CRI calls the daemon makes.
pub const CRI_CALLS: &[&str] = &["Version", "ImageStatus", "PullImage"];

impl Metrics {
    /// Fresh metrics, every known labelled series present at 0.
    pub fn new() -> Self {
        let m = Self::empty();
        for (result, reason) in PULL_OUTCOMES {
            let _ = m.pulls.get_or_create(&PullLabels {
                result: (*result).into(),
                reason: (*reason).into(),
            });
        }
        for result in ["succeeded", "failed"] {
            let _ = m.pull_duration.get_or_create(&ResultLabels {
                result: result.into(),
            });
        }
        for item in CHECK_ITEMS {
            let _ = m.check_failures.get_or_create(&ItemLabels {
                item: (*item).into(),
            });
        }
        for call in CRI_CALLS {
            let _ = m.cri_errors.get_or_create(&CallLabels {
                call: (*call).into(),
            });
        }
        m
    }

    fn empty() -> Self {
        Metrics {
            pulls: Family::default(),
            pull_duration: Family::new_with_constructor(duration_histogram),
            pulled_bytes: Counter::default(),
            in_flight: Gauge::default(),
            waiting: Gauge::default(),
            check_failures: Family::default(),
            status_write_errors: Counter::default(),
            cri_errors: Family::default(),
            runtime_info: Family::default(),
            pinned_images: Gauge::default(),
            pinned_bytes: Gauge::default(),
            image_fs_capacity_bytes: Gauge::default(),
            pins_over_budget: Gauge::default(),
            pin_passes: Counter::default(),
            images_lost: Counter::default(),
            registry_rate_limited: Family::default(),
            registry_waiting: Family::default(),
            startup_gate_opened: Counter::default(),
            startup_gate_timed_out: Counter::default(),
            startup_gate_overdue_seconds: Gauge::default(),
        }
    }

    /// Registers every metric under the `nodeimage_daemon` prefix.
    pub fn register(&self, r: &mut Registry) {
        let r = r.sub_registry_with_prefix("nodeimage_daemon");
        r.register(
            "pulls",
            "Image pulls finished, by result and reason",
            self.pulls.clone(),
        );
        r.register(
            "pull_duration_seconds",
            "Duration of image pulls from start to end, by result",
            self.pull_duration.clone(),
        );
        r.register(
            "pulled_bytes",
            "Bytes of images pulled",
            self.pulled_bytes.clone(),
        );
        r.register(
            "pulls_in_flight",
            "Image pulls running now",
            self.in_flight.clone(),
        );
        r.register(
            "pulls_waiting",
            "Image pulls waiting for a pull slot",
            self.waiting.clone(),
        );
        r.register(
            "check_failures",
            "Node checks that failed, by item",
            self.check_failures.clone(),
        );
        r.register(
            "status_write_errors",
            "NodeImage status writes that failed",
            self.status_write_errors.clone(),
        );
        r.register(
            "cri_errors",
            "Container runtime calls that failed, by call",
            self.cri_errors.clone(),
        );
        r.register(
            "runtime_info",
            "The container runtime found at start and what the daemon can do on it",
            self.runtime_info.clone(),
        );
        self.register_pins(r);
        r.register(
            "images_lost",
            "Images a finished tag still wanted that left the node (kubelet's image GC, crictl rmi)",
            self.images_lost.clone(),
        );
        r.register(
            "registry_rate_limited",
            "Pull calls a registry rate-limited (HTTP 429, toomanyrequests), by registry",
            self.registry_rate_limited.clone(),
        );
        r.register(
            "registry_pulls_waiting",
            "Pulls waiting for a registry that rate-limited this node, by registry",
            self.registry_waiting.clone(),
        );
        self.register_gate(r);
    }

    /// Registers the pinning task's metrics (under the daemon's prefix).
    fn register_pins(&self, r: &mut Registry) {
        r.register(
            "pinned_images",
            "Images the daemon keeps pinned while a tag entry wants them",
            self.pinned_images.clone(),
        );
        r.register(
            "pinned_bytes",
            "Bytes of the images the daemon keeps pinned",
            self.pinned_bytes.clone(),
        );
        r.register(
            "image_fs_capacity_bytes",
            "Size of the filesystem that holds the runtime's images",
            self.image_fs_capacity_bytes.clone(),
        );
        r.register(
            "pins_over_budget",
            "Images a tag entry wants that the pin budget leaves unpinned (over it, or of unknown size)",
            self.pins_over_budget.clone(),
        );
        r.register(
            "pin_passes",
            "Pinning passes done; the pin metrics are current once it is above 0",
            self.pin_passes.clone(),
        );
    }

    /// Registers the start-up gate's metrics (under the daemon's prefix).
    fn register_gate(&self, r: &mut Registry) {
        r.register(
            "startup_gate_opened",
            "Start-up taints this daemon removed from its Node once every gating image was on the node",
            self.startup_gate_opened.clone(),
        );
        r.register(
            "startup_gate_timed_out",
            "Start-up taints this daemon removed from its Node because the bound passed (no controller opened it)",
            self.startup_gate_timed_out.clone(),
        );
        r.register(
            "startup_gate_overdue_seconds",
            "Seconds this node has carried the start-up taint past its bound (0: not gated, or within it)",
            self.startup_gate_overdue_seconds.clone(),
        );
    }

    /// Counts a failed CRI call.
    pub fn cri_error(&self, call: &str) {
        self.cri_errors
            .get_or_create(&CallLabels { call: call.into() })
            .inc();
    }
}

/// Raises a gauge while alive; lowers it when dropped (also on abort).
pub struct GaugeGuard(Gauge);

impl GaugeGuard {
    /// Increments `g` until the guard is dropped.
    pub fn new(g: &Gauge) -> Self {
        g.inc();
        GaugeGuard(g.clone())
    }
}

impl Drop for GaugeGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registered daemon's metrics with one series in every labelled
    /// family (a family is encoded only once it has one).
    fn filled() -> (Metrics, prometheus_client::registry::Registry) {
        let m = Metrics::new();
        let mut r = nodeimage_ops::metrics::registry("daemon");
        m.register(&mut r);
        m.pulls
            .get_or_create(&PullLabels {
                result: "succeeded".into(),
                reason: "pulled".into(),
            })
            .inc();
        m.pull_duration
            .get_or_create(&ResultLabels {
                result: "succeeded".into(),
            })
            .observe(1.5);
        m.cri_error("PullImage");
        m.check_failures
            .get_or_create(&ItemLabels {
                item: "disk".into(),
            })
            .inc();
        m.runtime_info
            .get_or_create(&RuntimeLabels {
                runtime: "containerd".into(),
                version: "2.0.0".into(),
                capabilities: "-".into(),
            })
            .set(1);
        let docker = RegistryLabels {
            registry: "docker.io".into(),
        };
        m.registry_rate_limited.get_or_create(&docker).inc();
        m.registry_waiting.get_or_create(&docker).set(2);
        (m, r)
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        let (m, r) = filled();
        {
            let _g = GaugeGuard::new(&m.in_flight);
            assert_eq!(m.in_flight.get(), 1);
        }
        assert_eq!(m.in_flight.get(), 0);
        let text = nodeimage_ops::metrics::render(&r);
        for name in [
            "nodeimage_daemon_pulls_total{result=\"succeeded\",reason=\"pulled\"} 1",
            "nodeimage_daemon_pull_duration_seconds_bucket",
            "nodeimage_daemon_pulled_bytes_total",
            "nodeimage_daemon_pulls_in_flight",
            "nodeimage_daemon_pulls_waiting",
            "nodeimage_daemon_check_failures_total{item=\"disk\"} 1",
            "nodeimage_daemon_status_write_errors_total",
            "nodeimage_daemon_cri_errors_total{call=\"PullImage\"} 1",
            "nodeimage_daemon_pinned_images 0",
            "nodeimage_daemon_pinned_bytes 0",
            "nodeimage_daemon_pins_over_budget 0",
            "nodeimage_daemon_pin_passes_total 0",
            "nodeimage_daemon_images_lost_total 0",
            "nodeimage_daemon_registry_rate_limited_total{registry=\"docker.io\"} 1",
            "nodeimage_daemon_registry_pulls_waiting{registry=\"docker.io\"} 2",
            "nodeimage_daemon_startup_gate_opened_total 0",
            "nodeimage_daemon_startup_gate_timed_out_total 0",
            "nodeimage_daemon_startup_gate_overdue_seconds 0",
        ] {
            assert!(text.contains(name), "{name} missing:\n{text}");
        }
    }

    /// docs/metrics.md's "Node daemon" table lists exactly the daemon's own
    /// metrics (`nodeimage_daemon_*`; the shared ones are under "Both").
    #[test]
    fn metrics_md_lists_what_the_daemon_declares() {
        let (_m, r) = filled();
        let declared: std::collections::BTreeSet<String> =
            nodeimage_ops::metrics::declared_names(&nodeimage_ops::metrics::render(&r))
                .into_iter()
                .filter(|n| n.starts_with("nodeimage_daemon_"))
                .collect();
        let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
        let doc = std::fs::read_to_string(doc).expect("read docs/metrics.md");
        let documented = nodeimage_ops::metrics::documented_names(&doc, "Node daemon");
        assert!(declared.len() >= 10, "declared: {declared:?}");
        assert_eq!(
            documented, declared,
            "docs/metrics.md's Node daemon table (left) vs the daemon's metrics (right)"
        );
    }

    /// Every file of the Helm chart that may hold PromQL (dashboard, alerts).
    pub(crate) fn chart_queries() -> std::collections::BTreeSet<String> {
        let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/nodeimage");
        let mut text = String::new();
        for dir in ["dashboards", "templates"] {
            for entry in std::fs::read_dir(chart.join(dir))
                .into_iter()
                .flatten()
                .flatten()
            {
                text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        nodeimage_ops::metrics::queried_names(&text)
    }

    #[test]
    fn dashboard_queries_exported_metrics() {
        let (m, r) = filled();
        m.pulls
            .get_or_create(&PullLabels {
                result: "failed".into(),
                reason: "not_found".into(),
            })
            .inc();
        m.pull_duration
            .get_or_create(&ResultLabels {
                result: "failed".into(),
            })
            .observe(1.0);
        let exported = nodeimage_ops::metrics::exported_names(&nodeimage_ops::metrics::render(&r));
        let queried = chart_queries();
        assert!(
            queried.iter().any(|q| q.starts_with("nodeimage_daemon_")),
            "the dashboard queries no daemon metric: {queried:?}"
        );
        let missing: Vec<&String> = queried
            .iter()
            .filter(|q| {
                q.starts_with("nodeimage_daemon_")
                    || q.starts_with("process_")
                    || q.starts_with("nodeimage_build")
            })
            .filter(|q| !exported.contains(*q))
            .collect();
        assert!(
            missing.is_empty(),
            "queried but not exported by the daemon: {missing:?}\nexported: {exported:?}"
        );
    }
}
