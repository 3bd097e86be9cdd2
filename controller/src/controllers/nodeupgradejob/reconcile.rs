//! The NodeUpgradeJob reconciler: read the job's world, call the plan, write
//! the tag entries and the status with narrow guarded patches, take recorded
//! nodes' entries back, publish events. The skeleton (finalizer, errors,
//! retries) is `jobshell`'s.

use super::plan::{self, Inputs};
use crate::cluster::tagwrites;
use crate::engine::jobshell::{self, Error, JobKind, JobReconciler, NodeJobs, StateOf};
use chrono::Utc;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use nodeimage_api::NodeUpgradeJob;
use nodeimage_api::kruise::TagUpgrade;
use nodeimage_api::kubeedge::NodeUpgradeJobStatus;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Finalizer that lets a deleted job take its entries back.
pub const FINALIZER: &str = "nodeimage.dev/nodeupgradejob-cleanup";

impl JobKind for NodeUpgradeJob {
    const KIND: &'static str = plan::KIND;
    const NAME: &'static str = "nodeupgradejob";
    const EVENT_ACTION: &'static str = "Upgrade";
}

impl JobReconciler for NodeJobs<NodeUpgradeJob> {
    type Job = NodeUpgradeJob;
    const FINALIZER: &'static str = FINALIZER;
    const UPSTREAM_FINALIZERS: &'static [&'static str] =
        &[nodeimage_api::kubeedge::NODEUPGRADEJOB_FINALIZER];

    async fn cleanup(&self, job: &NodeUpgradeJob) -> Result<(), Error> {
        if let Some(uid) = job.uid() {
            tagwrites::release_all(&self.shared.writer, &self.shared.nodeimages, &[uid]).await?;
        }
        Ok(())
    }

    async fn apply(&self, job: Arc<NodeUpgradeJob>) -> Result<Action, Error> {
        let ctx = &self.shared.ctx;
        let versions: BTreeMap<String, String> = self
            .nodes
            .state()
            .iter()
            .filter_map(|n| Some((n.name_any(), crate::nodeimage::nodes::kubeedge_version(n)?)))
            .collect();
        let now = Utc::now();
        let p = self.plan(|w| {
            plan::plan(Inputs {
                job: &job,
                nodes: w.nodes,
                versions: &versions,
                nodeimages: w.nodeimages,
                edge_only: w.edge_only,
                now,
            })
        });
        if let Some((req, upgrade)) = &p.request {
            let reqs = std::slice::from_ref(req);
            // Nodes still waiting for confirmation get the entry that says so.
            let (waiting, going): (Vec<String>, Vec<String>) = p
                .write_to
                .iter()
                .cloned()
                .partition(|n| p.awaiting.contains(n));
            let wait = TagUpgrade {
                await_confirmation: true,
                ..upgrade.clone()
            };
            for (nodes, up) in [(&going, upgrade), (&waiting, &wait)] {
                if !nodes.is_empty() {
                    jobshell::write_entries(&self.shared, nodes, reqs, Some(up), now).await?;
                }
            }
        }
        let state_of: StateOf<NodeUpgradeJobStatus> =
            |s| (s.job.state.as_deref(), s.job.reason.as_deref());
        let old = job.status.as_ref();
        jobshell::write_guarded_status(ctx, job.as_ref(), old, &p.status, state_of).await?;
        jobshell::publish(ctx, job.as_ref(), &p.events).await;
        // Recorded results: the entries go, so no later pull of the tag runs
        // the upgrade again (and an unfinished node that timed out stops waiting).
        if let Some(uid) = job.uid() {
            for node in &p.release_from {
                let Some(ni) = self.shared.nodeimages.get(&ObjectRef::new(node)) else {
                    continue;
                };
                tagwrites::release(&self.shared.writer, ni, std::slice::from_ref(&uid)).await?;
                tracing::debug!(job = %job.name_any(), %node, "entry released");
            }
        }
        Ok(jobshell::after_success(p.requeue_after))
    }
}
