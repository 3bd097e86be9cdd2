//! The ImagePullJob reconciler: read the job's world, call the plan, write
//! tag entries and status with narrow patches, publish events.

use super::plan::{self, Inputs, PodInfo};
use crate::context::Context;
use crate::entries;
use crate::pullsecrets;
use crate::tagwrites;
use crate::watch::Synced;
use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use nodeimage_api::{ImagePullJob, NodeImage};
use std::sync::Arc;
use std::time::Duration;

/// Finalizer that lets a deleted job take its entries and secrets back.
pub const FINALIZER: &str = "nodeimage.dev/imagepulljob-cleanup";
/// How often a running job looks again even if nothing woke it (new nodes).
const RUNNING_RESYNC: Duration = Duration::from_secs(60);
/// How soon a job looks again while the caches are still being listed.
const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);
/// Entry writes in flight at once per job.
const WRITE_CONCURRENCY: usize = 16;

/// What the reconciler reads from.
pub struct State {
    /// Client, recorder, settings.
    pub ctx: Context,
    /// Every NodeImage.
    pub nodeimages: Store<NodeImage>,
    /// Set once `nodeimages` holds a complete list.
    pub nodeimages_synced: Synced,
    /// Every pod, trimmed to what selection needs.
    pub pods: Store<Pod>,
    /// Set once `pods` holds a complete list.
    pub pods_synced: Synced,
    /// Every ImagePullJob (the controller's own cache).
    pub jobs: Store<ImagePullJob>,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// Pull secrets could not be synced.
    #[error(transparent)]
    Secrets(#[from] pullsecrets::SecretsError),
    /// A NodeImage or finalizer write failed (or conflicted: re-plan).
    #[error(transparent)]
    Write(#[from] tagwrites::WriteError),
}

fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| Error::Api { action, source }
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

/// Reconciles one job.
pub async fn reconcile(job: Arc<ImagePullJob>, state: Arc<State>) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let _timer = ctx.metrics.reconcile(super::KIND);
    let ns = job.namespace().unwrap_or_default();
    let api: Api<ImagePullJob> = Api::namespaced(ctx.client.clone(), &ns);
    let name = job.name_any();

    // Selection, counts and cleanup read the caches: an empty cache that has
    // not been listed yet would mean "no nodes" (and a deleted job would
    // release nothing).
    if !state.nodeimages_synced.get() || !state.pods_synced.get() {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    if job.meta().deletion_timestamp.is_some() {
        cleanup(&job, &state).await?;
        tagwrites::set_finalizer(&api, job.as_ref(), FINALIZER, false).await?;
        tracing::info!(job = %job_key(&job), "job deleted: entries and secret references released");
        return Ok(Action::await_change());
    }
    if !job.finalizers().iter().any(|f| f == FINALIZER) {
        tagwrites::set_finalizer(&api, job.as_ref(), FINALIZER, true).await?;
        // The patch wakes us again with the new object.
        return Ok(Action::await_change());
    }

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
    let nodeimages = state.nodeimages.state();
    let pods: Vec<PodInfo> = if job.spec.template.pod_selector.is_some() {
        state
            .pods
            .state()
            .iter()
            .filter(|p| p.namespace().as_deref() == Some(ns.as_str()))
            .map(|p| pod_info(p))
            .collect()
    } else {
        vec![]
    };
    let now = Utc::now();
    let p = plan::plan(Inputs {
        job: &job,
        nodeimages: &nodeimages,
        pods: &pods,
        secrets,
        missing_secrets: missing.clone(),
        now,
    });

    if let Some(req) = &p.request {
        let writes = futures::stream::iter(p.write_to.iter().cloned())
            .map(|node| write_entry(&state, node, req, now))
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let mut conflict = None;
        for w in writes {
            match w {
                Ok(()) => {}
                Err(Error::Write(tagwrites::WriteError::Conflict(n))) => conflict = Some(n),
                Err(e) => return Err(e),
            }
        }
        if let Some(n) = conflict {
            tracing::debug!(job = %job_key(&job), node = %n, "entry write conflicted; retrying soon");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }

    let old = job.status.clone().unwrap_or_default();
    if old != p.status {
        let body = serde_json::json!({"status": p.status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
            .map_err(api_err(format!("writing status of {ns}/{name}")))?;
    }
    for m in &missing {
        if !old
            .message
            .as_deref()
            .unwrap_or_default()
            .contains(m.as_str())
        {
            publish(
                ctx,
                &job,
                true,
                "PullSecretMissing",
                format!("Pull secret {m} not found; pulling without it"),
            )
            .await;
        }
    }
    for ev in &p.events {
        publish(ctx, &job, ev.warning, ev.reason, ev.note.clone()).await;
    }
    if p.status.completion_time.is_some() && old.completion_time.is_none() {
        tracing::info!(job = %job_key(&job), succeeded = p.status.succeeded, failed = p.status.failed, "job completed");
        pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &job_key(&job)).await?;
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

async fn write_entry(
    state: &State,
    node: String,
    req: &entries::EntryRequest,
    now: chrono::DateTime<Utc>,
) -> Result<(), Error> {
    let Some(ni) = state
        .nodeimages
        .get(&kube::runtime::reflector::ObjectRef::new(&node))
    else {
        return Ok(());
    };
    let req = req.clone();
    let edit: tagwrites::Edit = Box::new(move |current, images| {
        let reported = entries::reported_version(current, &req.image, &req.tag);
        entries::upsert(images, &req, reported, now)
    });
    state.ctx.writer.edit(ni, edit).await?;
    Ok(())
}

/// Takes the job's entries out of every NodeImage and releases its secrets.
/// The entries of every other ImagePullJob being deleted go in the same
/// writes: deleting a hundred jobs then costs about one write per node, not
/// one per job and node.
async fn cleanup(job: &ImagePullJob, state: &State) -> Result<(), Error> {
    let Some(uid) = job.uid() else { return Ok(()) };
    let mut uids: Vec<String> = state
        .jobs
        .state()
        .iter()
        .filter(|j| j.meta().deletion_timestamp.is_some())
        .filter_map(|j| j.uid())
        .filter(|u| *u != uid)
        .collect();
    uids.push(uid);
    tagwrites::release_all(&state.ctx.writer, state.nodeimages.state(), &uids).await?;
    pullsecrets::release(
        &state.ctx.client,
        &state.ctx.secrets_namespace,
        &job_key(job),
    )
    .await?;
    Ok(())
}

async fn publish(ctx: &Context, job: &ImagePullJob, warning: bool, reason: &str, note: String) {
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(note),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder().publish(&ev, &job.object_ref(&())).await {
        tracing::warn!(error = %e, "could not record event");
    }
}

/// Logs the failure and retries with a short delay (conflicts sooner).
pub fn error_policy(job: Arc<ImagePullJob>, error: &Error, state: Arc<State>) -> Action {
    state.ctx.metrics.error(super::KIND);
    match error {
        Error::Write(tagwrites::WriteError::Conflict(_)) => Action::requeue(Duration::from_secs(1)),
        _ => {
            tracing::warn!(job = %job_key(&job), %error, "reconcile failed; retrying in 5s");
            Action::requeue(Duration::from_secs(5))
        }
    }
}
