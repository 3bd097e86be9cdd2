//! The ImagePrePullJob reconciler: read the job's world, call the plan,
//! write tag entries and status with narrow guarded patches, publish events.
//! The skeleton (finalizer, errors, retries) is `jobshell`'s.

use super::plan::{self, Inputs, Secrets};
use crate::cluster::tagwrites;
use crate::engine::jobshell::{self, Error, JobKind, JobReconciler, NodeJobs, StateOf};
use crate::engine::p2p;
use crate::engine::pullsecrets;
use chrono::Utc;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use nodeimage_api::ImagePrePullJob;
use nodeimage_api::kubeedge::ImagePrePullJobStatus;
use std::sync::Arc;

/// Finalizer that lets a deleted job take its entries and secret copy back.
pub const FINALIZER: &str = "nodeimage.dev/imageprepulljob-cleanup";

impl JobKind for ImagePrePullJob {
    const KIND: &'static str = plan::KIND;
    const NAME: &'static str = "imageprepulljob";
    const EVENT_ACTION: &'static str = "PrePull";
}

/// `ImagePrePullJob//name`: the job in the secret copies' references.
fn job_key(job: &ImagePrePullJob) -> String {
    nodeimage_api::kruise::nodeimage::requester_key(plan::KIND, "", &job.name_any())
}

impl JobReconciler for NodeJobs<ImagePrePullJob> {
    type Job = ImagePrePullJob;
    const FINALIZER: &'static str = FINALIZER;
    const UPSTREAM_FINALIZERS: &'static [&'static str] =
        &["kubeedge.io/imageprepulljob-controller"];

    /// Takes the job's entries out of every NodeImage and releases its secret copy.
    async fn cleanup(&self, job: &ImagePrePullJob) -> Result<(), Error> {
        let ctx = &self.shared.ctx;
        if let Some(uid) = job.uid() {
            self.shared.pacing.forget(&uid);
            tagwrites::release_all(&self.shared.writer, &self.shared.nodeimages, &[uid]).await?;
        }
        pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &job_key(job)).await?;
        Ok(())
    }

    async fn apply(&self, job: Arc<ImagePrePullJob>) -> Result<Action, Error> {
        let ctx = &self.shared.ctx;
        let finished_before = job.status.as_ref().is_some_and(plan::is_finished);
        let secrets = if finished_before {
            Secrets::None
        } else {
            secrets(&job, ctx).await?
        };
        let now = Utc::now();
        let pacing = &self.shared.pacing;
        let entries = if finished_before {
            vec![]
        } else {
            plan::entries(&job)
        };
        let p2p = if finished_before {
            Ok(Default::default())
        } else {
            let pods = self.pods.as_ref().map(|(store, _)| store);
            let default_agent = ctx.p2p_agent.as_deref();
            p2p::observe::for_job(job.annotations(), default_agent, pods, &self.nodes)
        };
        let paced = self.plan(&job, &entries, now, |w| {
            plan::plan(Inputs {
                job: &job,
                nodes: w.nodes,
                nodeimages: w.nodeimages,
                edge_only: w.edge_only,
                registry_cap: w.registry_cap,
                secrets,
                p2p: &p2p,
                now,
            })
        });
        let (p, requeue_after, waiting) = paced.split(|p| p.requeue_after);
        jobshell::write_entries(&self.shared, &p.write_to, &p.requests, None, &p.p2p, now)
            .await
            .inspect_err(|_| pacing.write_failed(&job.uid().unwrap_or_default()))?;
        jobshell::publish(ctx, job.as_ref(), &waiting).await;
        // A status that changes no job state waits for the pace (its events
        // with it: the next plan makes them again from the same old status).
        let key = job_key(&job);
        if p.status_changed {
            if let Some(wait) = self.status_pace.hold(&key, p.state_changed) {
                return Ok(Action::requeue(wait));
            }
            self.status_pace.wrote(&key);
        }
        let state_of: StateOf<ImagePrePullJobStatus> =
            |s| (s.job.state.as_deref(), s.job.reason.as_deref());
        let old = job.status.as_ref();
        jobshell::write_guarded_status(ctx, job.as_ref(), old, &p.status, state_of).await?;
        if p.summarised != plan::Summary::Full {
            tracing::debug!(job = %job.name_any(), summary = ?p.summarised, "per-node status summarised to fit the object size budget");
        }
        jobshell::publish(ctx, job.as_ref(), &p.events).await;
        if p.finished && job.spec.image_pre_pull_template.image_secrets.is_some() {
            // Finished jobs need no credentials; release on every look so a
            // crash between the status write and the release leaks nothing.
            pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &job_key(&job)).await?;
        }
        Ok(jobshell::after_success(requeue_after))
    }
}

/// Copies the job's image secret for the daemons, or says why it cannot be used.
async fn secrets(
    job: &ImagePrePullJob,
    ctx: &crate::runtime::context::Context,
) -> Result<Secrets, Error> {
    let Some(spec) = job.spec.image_pre_pull_template.image_secrets.as_deref() else {
        return Ok(Secrets::None);
    };
    let Some((ns, name)) = spec.split_once('/') else {
        return Ok(Secrets::Missing(format!(
            "imageSecrets {spec:?} is not of the form namespace/name"
        )));
    };
    if let Some(why) = ctx.policy.image_secret_refusal(ns, name) {
        return Ok(Secrets::Missing(why));
    }
    let synced = pullsecrets::sync(
        &ctx.client,
        &ctx.secrets_namespace,
        ns,
        &[name.to_string()],
        &job_key(job),
    )
    .await?;
    Ok(if let Some(refused) = synced.refused.first() {
        Secrets::Missing(refused.to_string())
    } else if synced.missing.is_empty() {
        Secrets::Copied(synced.refs)
    } else {
        Secrets::Missing(format!("image secret {spec} not found"))
    })
}
