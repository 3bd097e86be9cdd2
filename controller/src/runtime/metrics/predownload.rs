//! Pre-download's counters: the jobs it made, remade and removed, and the
//! workloads it refused or found invalid, so an operator sees it working
//! (or being asked for where it may not) without reading events.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// What happened to a pre-download job.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// created, updated (parallelism or placement followed the workload) or deleted.
    pub action: String,
}

/// Why a workload's pre-download did not go as asked.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RefusalLabels {
    /// refused (namespace not allowed) or invalid (annotation, selector, image or ServiceAccount).
    pub reason: String,
}

/// The job actions counted (label values), present at 0 from the start.
pub const ACTIONS: &[&str] = &["created", "updated", "deleted"];
/// The refusal reasons counted (label values), present at 0 from the start.
pub const REFUSALS: &[&str] = &["refused", "invalid"];

/// Pre-download's counters.
#[derive(Clone, Default, Debug)]
pub struct PredownloadMetrics {
    jobs: Family<JobLabels, Counter>,
    refusals: Family<RefusalLabels, Counter>,
}

impl PredownloadMetrics {
    /// Registers the counters under `nodeimage_predownload`, each label at 0.
    pub fn register(&self, r: &mut Registry) {
        for a in ACTIONS {
            self.job(a, 0);
        }
        for reason in REFUSALS {
            let _ = self.refusals.get_or_create(&RefusalLabels {
                reason: (*reason).into(),
            });
        }
        let p = r.sub_registry_with_prefix("nodeimage_predownload");
        p.register(
            "jobs",
            "Pre-download ImagePullJobs by what was done to them (created, updated, deleted)",
            self.jobs.clone(),
        );
        p.register(
            "refusals",
            "Workload events of pre-download that did not go as asked: refused (namespace not allowed) or invalid",
            self.refusals.clone(),
        );
    }

    /// Counts `n` jobs `action`ed.
    pub fn job(&self, action: &str, n: u64) {
        self.jobs
            .get_or_create(&JobLabels {
                action: action.into(),
            })
            .inc_by(n);
    }

    /// Counts one refusal for `reason`.
    pub fn refusal(&self, reason: &str) {
        self.refusals
            .get_or_create(&RefusalLabels {
                reason: reason.into(),
            })
            .inc();
    }
}
