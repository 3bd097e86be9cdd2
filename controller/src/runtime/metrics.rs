//! The controller's metrics: reconciles (count, duration, errors) per kind,
//! nodes failing the response timeout, and, read from the caches at scrape
//! time, NodeImages, per-job node counts and jobs by phase. Per-job series
//! vanish with their job because they are computed from the current cache.

use crate::runtime::readers::Scraped;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

pub mod predownload;
mod registries;

/// Labels naming a reconciled kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    /// Kind of the reconciled object.
    pub kind: String,
}

/// Labels of a per-job gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// Job kind.
    pub kind: String,
    /// Namespace ("" for cluster-scoped jobs).
    pub namespace: String,
    /// Job name.
    pub name: String,
    /// desired, active, succeeded or failed.
    pub state: String,
}

/// Labels of the jobs-by-phase gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// Job kind.
    pub kind: String,
    /// Running, Succeeded or Failed.
    pub phase: String,
}

/// Labels of the start-up gates the controller opened.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GateLabels {
    /// no_gating_images or timeout.
    pub reason: String,
}

/// Labels of the followed-tag lookup counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LookupLabels {
    /// One of [`FOLLOW_TAG_RESULTS`].
    pub result: String,
}

/// The `result` values of followed-tag lookups, present at 0 from the start:
/// a digest found, or why not (401/403, 404, 429, no answer or no
/// connection, any other answer without a digest).
pub const FOLLOW_TAG_RESULTS: &[&str] = &[
    "found",
    "unauthorized",
    "not_found",
    "rate_limited",
    "unreachable",
    "bad_answer",
];

/// The kinds whose reconciles are counted (the `kind` label values).
pub const RECONCILED_KINDS: &[&str] = &[
    "Node",
    "NodeImage",
    "ImagePullJob",
    "ImageListPullJob",
    "ImagePrePullJob",
    "NodeUpgradeJob",
    "ImageRemovalJob",
    "Predownload",
];

/// Reconcile metrics, shared by every controller of the binary.
#[derive(Clone)]
pub struct Metrics {
    reconciles: Family<KindLabels, Counter>,
    errors: Family<KindLabels, Counter>,
    duration: Family<KindLabels, Histogram, fn() -> Histogram>,
    in_progress: Family<KindLabels, Gauge>,
    /// Tags failed because their node did not respond in time.
    pub response_timeouts: Counter,
    invalid: Family<KindLabels, Gauge>,
    /// 1 while this replica leads (or runs without leader election), else 0.
    pub leader: Gauge,
    /// Start-up gates the controller opened, by reason.
    startup_gates_opened: Family<GateLabels, Counter>,
    /// Jobs whose mark to gate new nodes was ignored (namespace not allowed).
    startup_gates_refused: Family<KindLabels, Counter>,
    /// Pre-download's jobs and refusals.
    pub predownload: predownload::PredownloadMetrics,
    /// Followed-tag lookups at registries, by result.
    followtag_lookups: Family<LookupLabels, Counter>,
    /// Followed tags seen to move, per job following them.
    followtag_digest_changes: Counter,
}

fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    ])
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(reconcile_histogram),
            in_progress: Family::default(),
            response_timeouts: Counter::default(),
            invalid: Family::default(),
            leader: Gauge::default(),
            startup_gates_opened: Family::default(),
            startup_gates_refused: Family::default(),
            predownload: Default::default(),
            followtag_lookups: Family::default(),
            followtag_digest_changes: Counter::default(),
        }
    }
}

/// Counts a reconcile as running while it lives, and as done (with its
/// duration) when dropped.
pub struct ReconcileTimer {
    metrics: Metrics,
    kind: &'static str,
    start: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        let l = KindLabels {
            kind: self.kind.into(),
        };
        self.metrics.in_progress.get_or_create(&l).dec();
        self.metrics.reconciles.get_or_create(&l).inc();
        self.metrics
            .duration
            .get_or_create(&l)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

impl Metrics {
    /// Registers everything under `nodeimage_controller` / `nodeimage`,
    /// with the per-kind counters of every reconciled kind present at 0;
    /// the scrape-time metrics read `caches` (they never write them).
    pub fn register(&self, r: &mut Registry, caches: Arc<Scraped>, gate_taint: &str) {
        for kind in RECONCILED_KINDS {
            let l = KindLabels {
                kind: (*kind).into(),
            };
            let _ = self.reconciles.get_or_create(&l);
            let _ = self.errors.get_or_create(&l);
            let _ = self.duration.get_or_create(&l);
            let _ = self.in_progress.get_or_create(&l);
        }
        for result in FOLLOW_TAG_RESULTS {
            let _ = self.followtag_lookups.get_or_create(&LookupLabels {
                result: (*result).into(),
            });
        }
        let c = r.sub_registry_with_prefix("nodeimage_controller");
        c.register(
            "reconciles",
            "Reconciles run, by kind",
            self.reconciles.clone(),
        );
        c.register(
            "reconcile_errors",
            "Reconciles that failed, by kind",
            self.errors.clone(),
        );
        c.register(
            "reconcile_duration_seconds",
            "Duration of reconciles, by kind",
            self.duration.clone(),
        );
        c.register(
            "reconciles_in_progress",
            "Reconciles running now, by kind (a long one, such as releasing a deleted job's entries on many nodes, shows here before it is counted)",
            self.in_progress.clone(),
        );
        c.register(
            "response_timeouts",
            "Tags marked Failed because the node did not respond in time",
            self.response_timeouts.clone(),
        );
        c.register(
            "leader",
            "1 while this replica leads and reconciles (always 1 without leader election), 0 while it waits as a standby",
            self.leader.clone(),
        );
        c.register(
            "invalid_objects",
            "Objects that cannot be decoded (skipped; NodeImages read entry by entry), by kind",
            self.invalid.clone(),
        );
        c.register(
            "startup_gate_opened",
            "Start-up taints the controller removed, by reason (no_gating_images, timeout); the daemons count those they remove once the images are there",
            self.startup_gates_opened.clone(),
        );
        c.register(
            "startup_gate_refused",
            "Jobs annotated nodeimage.dev/gate-new-nodes whose namespace may not gate new nodes (they gate nothing), by kind",
            self.startup_gates_refused.clone(),
        );
        c.register(
            "followtag_lookups",
            "Digest lookups of followed tags (nodeimage.dev/follow-tag) at registries, one per tag and interval, by result (found, unauthorized, not_found, rate_limited, unreachable, bad_answer)",
            self.followtag_lookups.clone(),
        );
        c.register(
            "followtag_digest_changes",
            "Followed tags seen to point to a new digest, counted per job following them (each a TagMoved event and a re-pull on the job's nodes)",
            self.followtag_digest_changes.clone(),
        );
        self.predownload.register(r);
        r.register_collector(Box::new(CacheCollector(caches, gate_taint.to_string())));
    }

    /// Starts timing a reconcile of `kind`.
    pub fn reconcile(&self, kind: &'static str) -> ReconcileTimer {
        self.in_progress
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
        ReconcileTimer {
            metrics: self.clone(),
            kind,
            start: Instant::now(),
        }
    }

    /// Sets how many objects of `kind` are skipped as undecodable.
    pub fn invalid_objects(&self, kind: &'static str, count: usize) {
        self.invalid
            .get_or_create(&KindLabels { kind: kind.into() })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// Counts a start-up gate the controller opened, for `reason`.
    pub fn startup_gate_opened(&self, reason: &str) {
        self.startup_gates_opened
            .get_or_create(&GateLabels {
                reason: reason.into(),
            })
            .inc();
    }

    /// Counts a job of `kind` whose mark to gate new nodes was ignored.
    pub fn startup_gate_refused(&self, kind: &str) {
        self.startup_gates_refused
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
    }

    /// Counts a followed-tag lookup that ended with `result`.
    pub fn followtag_lookup(&self, result: &str) {
        self.followtag_lookups
            .get_or_create(&LookupLabels {
                result: result.into(),
            })
            .inc();
    }

    /// Counts a job's followed tag seen to move.
    pub fn followtag_digest_changed(&self) {
        self.followtag_digest_changes.inc();
    }

    /// Counts a failed reconcile of `kind`.
    pub fn error(&self, kind: &'static str) {
        self.errors
            .get_or_create(&KindLabels { kind: kind.into() })
            .inc();
    }

    /// How many failed reconciles of `kind` were counted, for tests of the
    /// retry policy (a stale write is not one).
    #[cfg(test)]
    pub fn errors_of(&self, kind: &'static str) -> u64 {
        self.errors
            .get_or_create(&KindLabels { kind: kind.into() })
            .get()
    }
}

/// How many cached Nodes carry the start-up gate's taint `key` (none when
/// the gate is off, `key` empty).
fn gated_nodes(nodes: &[Arc<k8s_openapi::api::core::v1::Node>], key: &str) -> usize {
    let gated = |n: &std::sync::Arc<k8s_openapi::api::core::v1::Node>| {
        let taints = n.spec.as_ref().and_then(|s| s.taints.as_deref());
        !key.is_empty() && nodeimage_api::gate::has_taint(taints, key)
    };
    nodes.iter().filter(|n| gated(n)).count()
}

/// The shared caches, and the start-up gate's taint key (empty: off).
#[derive(Debug)]
struct CacheCollector(Arc<Scraped>, String);

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let c = &self.0;
        if let Some(all) = c.nodeimages.listed() {
            let g = ConstGauge::new(all.len() as i64);
            g.encode(encoder.encode_descriptor(
                "nodeimage_nodeimages",
                "NodeImages in the cluster",
                None,
                g.metric_type(),
            )?)?;
        }
        if let Some(all) = c.nodes.listed() {
            let gated = gated_nodes(&all, &self.1);
            let g = ConstGauge::new(i64::try_from(gated).unwrap_or(i64::MAX));
            g.encode(encoder.encode_descriptor(
                "nodeimage_startup_gated_nodes",
                "Nodes carrying the start-up taint now (waiting for their gating images)",
                None,
                g.metric_type(),
            )?)?;
        }
        let mut jobs: Vec<JobCounts> = Vec::new();
        if let Some(all) = c.image_pull_jobs.listed() {
            jobs.extend(all.iter().map(|j| image_pull_job_counts(j)));
        }
        if let Some(all) = c.image_pre_pull_jobs.listed() {
            jobs.extend(all.iter().map(|j| image_pre_pull_job_counts(j)));
        }
        if let Some(all) = c.node_upgrade_jobs.listed() {
            jobs.extend(all.iter().map(|j| node_upgrade_job_counts(j)));
        }
        if let Some(all) = c.image_removal_jobs.listed() {
            jobs.extend(all.iter().map(|j| image_removal_job_counts(j)));
        }
        let nodes: Family<JobLabels, Gauge> = Family::default();
        let mut phases: BTreeMap<(&'static str, &'static str), i64> = BTreeMap::new();
        for j in &jobs {
            for (state, v) in [
                ("desired", j.desired),
                ("active", j.active),
                ("succeeded", j.succeeded),
                ("failed", j.failed),
            ] {
                nodes
                    .get_or_create(&JobLabels {
                        kind: j.kind.into(),
                        namespace: j.namespace.clone(),
                        name: j.name.clone(),
                        state: state.into(),
                    })
                    .set(v);
            }
            *phases.entry((j.kind, j.phase)).or_default() += 1;
        }
        nodes.encode(encoder.encode_descriptor(
            "nodeimage_job_nodes",
            "Nodes of each job, by state (desired, active, succeeded, failed)",
            None,
            nodes.metric_type(),
        )?)?;
        let by_phase: Family<PhaseLabels, Gauge> = Family::default();
        for ((kind, phase), n) in phases {
            by_phase
                .get_or_create(&PhaseLabels {
                    kind: kind.into(),
                    phase: phase.into(),
                })
                .set(n);
        }
        by_phase.encode(encoder.encode_descriptor(
            "nodeimage_jobs",
            "Jobs by kind and phase (Running, Succeeded, Failed)",
            None,
            by_phase.metric_type(),
        )?)?;
        registries::encode(&(c.registries)(), &mut encoder)?;
        Ok(())
    }
}

mod jobcounts;
pub use jobcounts::{
    JobCounts, image_pre_pull_job_counts, image_pull_job_counts, image_removal_job_counts,
    node_upgrade_job_counts,
};

#[cfg(test)]
mod tests;
