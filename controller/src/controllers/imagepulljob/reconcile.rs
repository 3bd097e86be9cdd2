//! The ImagePullJob reconciler: read the job's world, call the plan, write
//! tag entries and status with narrow patches, publish events. The skeleton
//! (finalizer, errors, retries) is `jobshell`'s.

use super::plan::{self, Inputs, PodInfo};
use crate::cluster::tagwrites;
use crate::cluster::watch::Synced;
use crate::engine::followtag;
use crate::engine::jobshell::{self, Caches, Error, JobKind, JobReconciler, Shared, api_err};
use crate::engine::p2p::{self, observe::Observed};
use crate::engine::pullsecrets;
use crate::engine::registrypace::PacedJob;
use chrono::Utc;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use nodeimage_api::ImagePullJob;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::context::Context;

/// Finalizer that lets a deleted job take its entries and secrets back.
pub const FINALIZER: &str = "nodeimage.dev/imagepulljob-cleanup";

impl JobKind for ImagePullJob {
    const KIND: &'static str = super::KIND;
    const NAME: &'static str = "imagepulljob";
    const EVENT_ACTION: &'static str = "Reconcile";

    fn api(client: kube::Client, job: &Self) -> Api<Self> {
        Api::namespaced(client, &job.namespace().unwrap_or_default())
    }
}

/// What the reconciler reads from.
pub struct State {
    /// Context and NodeImages.
    pub shared: Shared,
    /// Every pod, trimmed to what selection needs.
    pub pods: Store<Pod>,
    /// Set once `pods` holds a complete list.
    pub pods_synced: Synced,
    /// Every Node, trimmed (the shared Node cache; read for a
    /// pre-download's placement).
    pub nodes: Store<k8s_openapi::api::core::v1::Node>,
    /// Every ImagePullJob (the controller's own cache).
    pub jobs: Store<ImagePullJob>,
    /// Followed tags: the lookups' memory and the registry client.
    pub follow: followtag::FollowTags,
}

fn pod_info(p: &Pod) -> PodInfo {
    let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
    PodInfo {
        labels: p.labels().clone(),
        node_name: p.spec.as_ref().and_then(|s| s.node_name.clone()),
        active: p.metadata.deletion_timestamp.is_none()
            && !matches!(phase, Some("Succeeded" | "Failed")),
    }
}

fn job_key(job: &ImagePullJob) -> String {
    nodeimage_api::kruise::nodeimage::requester_key(
        super::KIND,
        &job.namespace().unwrap_or_default(),
        &job.name_any(),
    )
}

impl Caches for State {
    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn synced(&self) -> bool {
        self.shared.nodeimages_synced.get() && self.pods_synced.get()
    }
}

impl JobReconciler for State {
    type Job = ImagePullJob;
    const FINALIZER: &'static str = FINALIZER;
    const UPSTREAM_FINALIZERS: &'static [&'static str] =
        &[nodeimage_api::kruise::DELETION_PROTECTION_FINALIZER];

    /// Takes the job's entries out of every NodeImage and releases its
    /// secrets. The entries of every other ImagePullJob being deleted go in
    /// the same writes: deleting a hundred jobs then costs about one write
    /// per node, not one per job and node.
    async fn cleanup(&self, job: &ImagePullJob) -> Result<(), Error> {
        let ctx = &self.shared.ctx;
        if let Some(uid) = job.uid() {
            let mut uids: Vec<String> = self
                .jobs
                .state()
                .iter()
                .filter(|j| j.meta().deletion_timestamp.is_some())
                .filter_map(|j| j.uid())
                .filter(|u| *u != uid)
                .collect();
            self.shared.pacing.forget(&uid);
            uids.push(uid);
            tagwrites::release_all(&self.shared.writer, &self.shared.nodeimages, &uids).await?;
        }
        pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &job_key(job)).await?;
        Ok(())
    }

    async fn apply(&self, job: Arc<ImagePullJob>) -> Result<Action, Error> {
        let ctx = &self.shared.ctx;
        let api = ImagePullJob::api(ctx.client.clone(), &job);
        let key = job_key(&job);
        let synced = self.sync_secrets(&job, &key).await?;
        let refused = synced.refused.iter().map(ToString::to_string).collect();
        let gate_refusal = nodeimage_api::gate::is_gating(job.annotations())
            .then(|| ctx.policy.gate_refusal(job.namespace().as_deref()))
            .flatten();
        let pods = self.pods_of(&job);
        let p2p = self.p2p_of(&job, ctx.p2p_agent.as_deref());
        let now = Utc::now();
        let (followed, follow_next) = self.follow_tag(&job, now).await;
        // The snapshot goes before any write is awaited: held, it would keep
        // each NodeImage as it was here alive while the cache moves on (a
        // hundred jobs waiting on writes held that many generations).
        let pacing = &self.shared.pacing;
        let paced = pacing.plan(
            &PacedJob::of(super::KIND, job.meta()),
            &plan::entries(&job),
            now,
            |registry_cap| {
                plan::plan(Inputs {
                    job: &job,
                    nodeimages: &self.shared.nodeimages.state(),
                    pods: &pods,
                    nodes: &self.nodes_of(&job),
                    secrets: synced.refs,
                    missing_secrets: synced.missing,
                    refused_secrets: refused,
                    gate_refusal: gate_refusal.clone(),
                    registry_cap,
                    follow: plan::Follow::from(&followed),
                    p2p: &p2p,
                    now,
                })
            },
        );
        let (mut p, look_again, events) = paced.split(plan::Plan::look_again);
        p.events.extend(events);
        let requests: Vec<_> = p.request.iter().cloned().collect();
        jobshell::write_entries(&self.shared, &p.write_to, &requests, None, &p.p2p, now)
            .await
            .inspect_err(|_| pacing.write_failed(&job.uid().unwrap_or_default()))?;
        let written = if p.write_status {
            let body = serde_json::json!({"status": p.status});
            Some(jobshell::written_status(&api, job.as_ref(), &body).await?)
        } else {
            None
        };
        jobshell::publish(ctx, job.as_ref(), &p.events).await;
        note_gate_refusal(ctx, &key, &p, gate_refusal.as_deref());
        if p.completed_now {
            let status = &p.status;
            tracing::info!(job = %key, succeeded = status.succeeded, failed = status.failed, "job completed");
            pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &key).await?;
        }
        // The job's own status writes do not wake it (see `mod.rs`): the job
        // as last written here, whose resourceVersion guards the writes that
        // follow against a newer job than the one this reconcile read.
        let latest = written.as_ref().unwrap_or(job.as_ref());
        let latest = self.write_followed(&api, latest, &followed).await?;
        if p.completed {
            let latest = latest
                .as_ref()
                .unwrap_or(written.as_ref().unwrap_or(job.as_ref()));
            tagwrites::edit_finalizers(&api, latest, None, Self::UPSTREAM_FINALIZERS).await?;
        }
        if p.delete {
            let name = job.name_any();
            tracing::info!(job = %key, "deleting job: ttlSecondsAfterFinished passed");
            api.delete(&name, &DeleteParams::background())
                .await
                .map_err(api_err(format!("deleting {}", key_path(&job))))?;
            return Ok(Action::await_change());
        }
        Ok(jobshell::after_success(earliest(look_again, follow_next)))
    }
}

/// Logs and counts a start-up gate mark the plan ignored.
fn note_gate_refusal(ctx: &Context, key: &str, p: &plan::Plan, why: Option<&str>) {
    if p.events.iter().any(|e| e.reason == plan::GATE_REFUSED) {
        tracing::warn!(job = %key, reason = why.unwrap_or_default(), "start-up gate mark ignored");
        ctx.metrics.startup_gate_refused("ImagePullJob");
    }
}

/// The earlier of two due times (None: not due).
fn earliest(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl State {
    /// The job's pull secrets, copied where the daemons read them (none
    /// named: nothing to copy).
    async fn sync_secrets(
        &self,
        job: &ImagePullJob,
        key: &str,
    ) -> Result<pullsecrets::Synced, Error> {
        let names = plan::secrets_to_copy(job);
        if names.is_empty() {
            return Ok(pullsecrets::Synced::default());
        }
        let (ctx, ns) = (&self.shared.ctx, job.namespace().unwrap_or_default());
        Ok(pullsecrets::sync(&ctx.client, &ctx.secrets_namespace, &ns, names, key).await?)
    }

    /// Writes the job's follow-tag annotations when they change, guarded by
    /// the resourceVersion of `job` (the job as this reconcile last wrote or
    /// read it), then publishes what following the tag says: a reconcile
    /// that read the job before an earlier one's write conflicts instead of
    /// saying it again. The job as written (None: nothing to write).
    async fn write_followed(
        &self,
        api: &Api<ImagePullJob>,
        job: &ImagePullJob,
        followed: &followtag::Verdict,
    ) -> Result<Option<ImagePullJob>, Error> {
        let written = match followtag::annotations_patch(followed, job.resource_version()) {
            None => None,
            Some(body) => {
                let params = kube::api::PatchParams::default();
                let what = format!("writing follow-tag annotations of {}", key_path(job));
                let written = api
                    .patch(&job.name_any(), &params, &kube::api::Patch::Merge(&body))
                    .await
                    .map_err(api_err(what))?;
                Some(written)
            }
        };
        jobshell::publish(&self.shared.ctx, job, &followed.events).await;
        self.follow.published(followed);
        Ok(written)
    }

    /// What following its tag means for `job` now (nothing without the
    /// annotation); when its next lookup is due.
    async fn follow_tag(
        &self,
        job: &ImagePullJob,
        now: chrono::DateTime<Utc>,
    ) -> (followtag::Verdict, Option<Duration>) {
        let ns = job.namespace().unwrap_or_default();
        let completed = job
            .status
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some());
        let secrets = job
            .spec
            .template
            .pull_secrets
            .as_deref()
            .unwrap_or_default();
        let follows = followtag::Job {
            namespace: &ns,
            annotations: job.annotations(),
            image: &job.spec.image,
            pull_secrets: secrets,
            completed,
        };
        self.follow
            .follow(&self.shared.ctx.client, follows, now)
            .await
    }

    /// The Nodes, for a job whose selection reads them (a pre-download's
    /// placement); none for the others.
    fn nodes_of(&self, job: &ImagePullJob) -> Vec<Arc<k8s_openapi::api::core::v1::Node>> {
        let placed = job
            .annotations()
            .contains_key(nodeimage_api::predownload::PLACEMENT_ANNOTATION);
        if plan::reads_pods(job) && placed {
            self.nodes.state()
        } else {
            vec![]
        }
    }

    /// The job's P2P settings and what they read of the Pod and Node
    /// caches (nothing for a finished job or one without them).
    fn p2p_of(&self, job: &ImagePullJob, default_agent: Option<&str>) -> Result<Observed, String> {
        let finished = job
            .status
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some());
        if finished {
            return Ok(Observed::default());
        }
        p2p::observe::for_job(
            job.annotations(),
            default_agent,
            Some(&self.pods),
            &self.nodes,
        )
    }

    /// The pods of the job's namespace, as the plan reads them (only for
    /// podSelector jobs).
    fn pods_of(&self, job: &ImagePullJob) -> Vec<PodInfo> {
        if !plan::reads_pods(job) {
            return vec![];
        }
        let ns = job.namespace().unwrap_or_default();
        let pods = self.pods.state();
        let in_ns = pods
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns.as_str()));
        in_ns.map(|p| pod_info(p)).collect()
    }
}

/// `namespace/name` of a job, in error contexts.
fn key_path(job: &ImagePullJob) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

#[cfg(test)]
mod tests;
