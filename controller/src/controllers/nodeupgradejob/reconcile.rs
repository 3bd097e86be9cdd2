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
            self.shared.pacing.forget(&uid);
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
        let pacing = &self.shared.pacing;
        let finished = job.status.as_ref().is_some_and(plan::is_finished);
        let allowed = &ctx.policy.upgrade_images;
        let entries: Vec<_> = plan::upgrade_entry(&job, allowed)
            .ok()
            .filter(|_| !finished)
            .into_iter()
            .collect();
        let paced = self.plan(&job, &entries, now, |w| {
            plan::plan(Inputs {
                job: &job,
                nodes: w.nodes,
                versions: &versions,
                nodeimages: w.nodeimages,
                edge_only: w.edge_only,
                upgrade_images: allowed,
                registry_cap: w.registry_cap,
                now,
            })
        });
        let (p, requeue_after, waiting) = paced.split(|p| p.requeue_after);
        let uid = job.uid().unwrap_or_default();
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
                    jobshell::write_entries(
                        &self.shared,
                        nodes,
                        reqs,
                        Some(up),
                        &Default::default(),
                        now,
                    )
                    .await
                    .inspect_err(|_| pacing.write_failed(&uid))?;
                }
            }
        }
        let state_of: StateOf<NodeUpgradeJobStatus> =
            |s| (s.job.state.as_deref(), s.job.reason.as_deref());
        let old = job.status.as_ref();
        jobshell::write_guarded_status(ctx, job.as_ref(), old, &p.status, state_of).await?;
        jobshell::publish(ctx, job.as_ref(), &p.events).await;
        jobshell::publish(ctx, job.as_ref(), &waiting).await;
        // Recorded results: the entries go, so no later pull of the tag runs
        // the upgrade again (and an unfinished node that timed out stops waiting).
        if !uid.is_empty() && !p.release_from.is_empty() {
            let (w, nodes) = (&self.shared.writer, p.release_from.iter().cloned());
            tagwrites::release_on(
                w,
                &self.shared.nodeimages,
                nodes,
                std::slice::from_ref(&uid),
            )
            .await?;
            tracing::debug!(job = %job.name_any(), nodes = p.release_from.len(), "entries released");
        }
        Ok(jobshell::after_success(requeue_after))
    }
}
