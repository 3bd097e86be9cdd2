//! The ImagePullJob reconciler: read the job's world, call the plan, write
//! tag entries and status with narrow patches, publish events. The skeleton
//! (finalizer, errors, retries) is `jobshell`'s.

use super::plan::{self, Inputs, PodInfo};
use crate::jobshell::{self, Caches, Error, JobKind, JobReconciler, Shared, api_err};
use crate::pullsecrets;
use crate::tagwrites;
use crate::watch::Synced;
use chrono::Utc;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use nodeimage_api::ImagePullJob;
use std::sync::Arc;
use std::time::Duration;

/// Finalizer that lets a deleted job take its entries and secrets back.
pub const FINALIZER: &str = "nodeimage.dev/imagepulljob-cleanup";
/// How often a running job looks again even if nothing woke it (new nodes).
const RUNNING_RESYNC: Duration = Duration::from_secs(60);

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
    /// Every ImagePullJob (the controller's own cache).
    pub jobs: Store<ImagePullJob>,
}

/// Keeps only what node selection reads of a pod.
pub fn trim_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
    p.metadata.owner_references = None;
    if let Some(spec) = p.spec.as_mut() {
        let node = spec.node_name.take();
        *spec = Default::default();
        spec.node_name = node;
    }
    if let Some(st) = p.status.as_mut() {
        let phase = st.phase.take();
        *st = Default::default();
        st.phase = phase;
    }
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
    format!(
        "{}/{}/{}",
        super::KIND,
        job.namespace().unwrap_or_default(),
        job.name_any()
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
            uids.push(uid);
            tagwrites::release_all(&ctx.writer, &self.shared.nodeimages, &uids).await?;
        }
        pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &job_key(job)).await?;
        Ok(())
    }

    async fn apply(&self, job: Arc<ImagePullJob>) -> Result<Action, Error> {
        let ctx = &self.shared.ctx;
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        let api = ImagePullJob::api(ctx.client.clone(), &job);
        let completed = job
            .status
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some());
        let names = job.spec.template.pull_secrets.clone().unwrap_or_default();
        let (secrets, missing) = if completed || names.is_empty() {
            (vec![], vec![])
        } else {
            pullsecrets::sync(
                &ctx.client,
                &ctx.secrets_namespace,
                &ns,
                &names,
                &job_key(&job),
            )
            .await?
        };
        let pods: Vec<PodInfo> = if job.spec.template.pod_selector.is_some() {
            self.pods
                .state()
                .iter()
                .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
                .map(|p| pod_info(p))
                .collect()
        } else {
            vec![]
        };
        let now = Utc::now();
        // The snapshot goes before any write is awaited: held, it would keep
        // each NodeImage as it was here alive while the cache moves on (a
        // hundred jobs waiting on writes held that many generations).
        let p = plan::plan(Inputs {
            job: &job,
            nodeimages: &self.shared.nodeimages.state(),
            pods: &pods,
            secrets,
            missing_secrets: missing.clone(),
            now,
        });
        let requests: Vec<_> = p.request.iter().cloned().collect();
        jobshell::write_entries(&self.shared, &p.write_to, &requests, None, now).await?;

        let mut p = p;
        crate::conditions::apply(
            job.status.as_ref(),
            &mut p.status,
            job.metadata.generation,
            &crate::clock::api_time(now),
        );
        let old = job.status.clone().unwrap_or_default();
        let written = if old != p.status {
            let body = serde_json::json!({"status": p.status});
            Some(jobshell::written_status(&api, job.as_ref(), &body).await?)
        } else {
            None
        };
        let mut events: Vec<_> = missing
            .iter()
            .filter(|m| {
                !old.message
                    .as_deref()
                    .unwrap_or_default()
                    .contains(m.as_str())
            })
            .map(|m| {
                crate::jobevents::JobEvent::warning(
                    "PullSecretMissing",
                    format!("Pull secret {m} not found; pulling without it"),
                )
            })
            .collect();
        events.extend(p.events.iter().cloned());
        jobshell::publish(ctx, job.as_ref(), &events).await;
        if p.status.completion_time.is_some() && old.completion_time.is_none() {
            tracing::info!(job = %job_key(&job), succeeded = p.status.succeeded, failed = p.status.failed, "job completed");
            pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &job_key(&job)).await?;
        }
        // As OpenKruise does once a job's secrets are released: a completed
        // job it created loses its deletion-protection finalizer, once its
        // completion is recorded. The job's own status writes do not wake it
        // (see `mod.rs`), so this reads the job as last written here, whose
        // resourceVersion also keeps the write from racing the status patch.
        let latest = written.as_ref().unwrap_or(job.as_ref());
        if latest
            .status
            .as_ref()
            .is_some_and(|s| s.completion_time.is_some())
        {
            tagwrites::edit_finalizers(&api, latest, None, Self::UPSTREAM_FINALIZERS).await?;
        }
        if p.delete {
            tracing::info!(job = %job_key(&job), "deleting job: ttlSecondsAfterFinished passed");
            api.delete(&name, &DeleteParams::background())
                .await
                .map_err(api_err(format!("deleting {ns}/{name}")))?;
            return Ok(Action::await_change());
        }
        let running = p.status.completion_time.is_none();
        Ok(match p.requeue_after {
            Some(d) if running => Action::requeue(d.min(RUNNING_RESYNC)),
            Some(d) => Action::requeue(d),
            None if running => Action::requeue(RUNNING_RESYNC),
            None => Action::await_change(),
        })
    }
}
