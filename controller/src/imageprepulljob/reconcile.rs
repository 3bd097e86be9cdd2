//! The ImagePrePullJob reconciler: read the job's world, call the plan,
//! write tag entries and status with narrow guarded patches, publish events.

use super::plan::{self, Inputs, NodeInfo, Secrets};
use crate::context::Context;
use crate::entries;
use crate::patch;
use crate::pullsecrets;
use crate::tagwrites;
use crate::watch::Synced;
use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use nodeimage_api::{ImagePrePullJob, NodeImage};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Finalizer that lets a deleted job take its entries and secret copy back.
pub const FINALIZER: &str = "nodeimage.dev/imageprepulljob-cleanup";
/// Entry writes in flight at once per job.
const WRITE_CONCURRENCY: usize = 16;
/// Wait while a cache has not been listed yet.
const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);

/// What the reconciler reads from.
pub struct State {
    /// Client, recorder, settings.
    pub ctx: Context,
    /// Every NodeImage.
    pub nodeimages: Store<NodeImage>,
    /// Whether `nodeimages` has been listed.
    pub nodeimages_synced: Synced,
    /// Every Node, trimmed to labels and the Ready condition.
    pub nodes: Store<Node>,
    /// Whether `nodes` has been listed.
    pub nodes_synced: Synced,
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
    /// The image secret could not be copied.
    #[error(transparent)]
    Secrets(#[from] pullsecrets::SecretsError),
    /// A patch could not be built.
    #[error(transparent)]
    Patch(#[from] patch::PatchError),
    /// Someone wrote the object between our read and our write.
    #[error("{0} changed while writing; retrying")]
    Conflict(String),
    /// A batched entry write (with other jobs' entries) failed.
    #[error(transparent)]
    Write(std::sync::Arc<tagwrites::WriteError>),
}

impl From<tagwrites::WriteError> for Error {
    fn from(e: tagwrites::WriteError) -> Self {
        match e {
            tagwrites::WriteError::Conflict(what) => Error::Conflict(what),
            tagwrites::WriteError::Api { action, source } => Error::Api { action, source },
            tagwrites::WriteError::Patch(p) => Error::Patch(p),
            tagwrites::WriteError::Shared(e) => Error::Write(e),
        }
    }
}

fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| match source {
        kube::Error::Api(s) if s.is_conflict() => Error::Conflict(action),
        source => Error::Api { action, source },
    }
}

pub use crate::rollout::{node_info, trim_node};

/// `ImagePrePullJob//name`: the job in the secret copies' references.
fn job_key(job: &ImagePrePullJob) -> String {
    format!("{}//{}", plan::KIND, job.name_any())
}

/// Reconciles one job.
pub async fn reconcile(job: Arc<ImagePrePullJob>, state: Arc<State>) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let api: Api<ImagePrePullJob> = Api::all(ctx.client.clone());
    let name = job.name_any();

    if job.meta().deletion_timestamp.is_some() {
        if !job.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Action::await_change());
        }
        if !state.nodeimages_synced.get() {
            return Ok(Action::requeue(NOT_SYNCED_RETRY));
        }
        cleanup(&job, &state).await?;
        tagwrites::set_finalizer(&api, job.as_ref(), FINALIZER, false).await?;
        tracing::info!(job = %name, "job deleted: tag entries and secret copy released");
        return Ok(Action::await_change());
    }
    if !job.finalizers().iter().any(|f| f == FINALIZER) {
        tagwrites::set_finalizer(&api, job.as_ref(), FINALIZER, true).await?;
        // The patch wakes us again with the new object.
        return Ok(Action::await_change());
    }
    if !state.nodes_synced.get() || !state.nodeimages_synced.get() {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }

    let finished_before = job.status.as_ref().is_some_and(plan::is_finished);
    let secrets = if finished_before {
        Secrets::None
    } else {
        secrets(&job, ctx).await?
    };
    let nodes: BTreeMap<String, NodeInfo> = state
        .nodes
        .state()
        .iter()
        .map(|n| (n.name_any(), node_info(n)))
        .collect();
    let nodeimages: BTreeMap<String, Arc<NodeImage>> = state
        .nodeimages
        .state()
        .into_iter()
        .map(|ni| (ni.name_any(), ni))
        .collect();
    let now = Utc::now();
    let p = plan::plan(Inputs {
        job: &job,
        nodes: &nodes,
        nodeimages: &nodeimages,
        secrets,
        now,
    });

    if !p.write_to.is_empty() && !p.requests.is_empty() {
        let writes = futures::stream::iter(p.write_to.iter().cloned())
            .map(|node| write_entries(&state, node, &p.requests, now))
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let mut conflict = None;
        for w in writes {
            match w {
                Ok(()) => {}
                Err(Error::Conflict(n)) => conflict = Some(n),
                Err(e) => return Err(e),
            }
        }
        if let Some(n) = conflict {
            tracing::debug!(job = %name, what = %n, "entry write conflicted; retrying soon");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }

    let old = job.status.clone();
    if old.as_ref() != Some(&p.status) {
        if let Some(body) = patch::guarded(
            "status",
            job.resource_version().as_deref(),
            &["status"],
            &old,
            &Some(p.status.clone()),
        )? {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .map_err(api_err(format!("writing status of ImagePrePullJob {name}")))?;
        }
        log_transition(&name, old.as_ref(), &p);
    }
    for ev in &p.events {
        publish(ctx, &job, ev.warning, ev.reason, ev.note.clone()).await;
    }
    if p.finished && job.spec.image_pre_pull_template.image_secrets.is_some() {
        // Finished jobs need no credentials; release on every look so a
        // crash between the status write and the release leaks nothing.
        pullsecrets::release(&ctx.client, &ctx.secrets_namespace, &job_key(&job)).await?;
    }
    Ok(match p.requeue_after {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// One log line per job phase change and per summarisation change.
fn log_transition(
    name: &str,
    old: Option<&nodeimage_api::kubeedge::ImagePrePullJobStatus>,
    p: &plan::Plan,
) {
    let old_state = old.and_then(|s| s.state.as_deref()).unwrap_or_default();
    let new_state = p.status.state.as_deref().unwrap_or_default();
    if old_state != new_state {
        tracing::info!(
            job = %name,
            from = old_state,
            to = new_state,
            reason = p.status.reason.as_deref().unwrap_or_default(),
            "job state changed"
        );
    }
    if p.summarised != plan::Summary::Full {
        tracing::debug!(job = %name, summary = ?p.summarised, "per-node status summarised to fit the object size budget");
    }
}

/// Copies the job's image secret for the daemons, or says why it cannot be used.
async fn secrets(job: &ImagePrePullJob, ctx: &Context) -> Result<Secrets, Error> {
    let Some(spec) = job.spec.image_pre_pull_template.image_secrets.as_deref() else {
        return Ok(Secrets::None);
    };
    let Some((ns, name)) = spec.split_once('/') else {
        return Ok(Secrets::Missing(format!(
            "imageSecrets {spec:?} is not of the form namespace/name"
        )));
    };
    let (refs, missing) = pullsecrets::sync(
        &ctx.client,
        &ctx.secrets_namespace,
        ns,
        &[name.to_string()],
        &job_key(job),
    )
    .await?;
    Ok(if missing.is_empty() {
        Secrets::Copied(refs)
    } else {
        Secrets::Missing(format!("image secret {spec} not found"))
    })
}

async fn write_entries(
    state: &State,
    node: String,
    reqs: &[entries::EntryRequest],
    now: chrono::DateTime<Utc>,
) -> Result<(), Error> {
    let Some(ni) = state.nodeimages.get(&ObjectRef::new(&node)) else {
        return Ok(());
    };
    let reqs = reqs.to_vec();
    let edit: tagwrites::Edit = Box::new(move |current, images| {
        let mut changed = false;
        for req in &reqs {
            let reported = entries::reported_version(current, &req.image, &req.tag);
            changed |= entries::upsert(images, req, reported, now);
        }
        changed
    });
    state.ctx.writer.edit(ni, edit).await?;
    Ok(())
}

/// Takes the job's entries out of every NodeImage and releases its secret copy.
async fn cleanup(job: &ImagePrePullJob, state: &State) -> Result<(), Error> {
    if let Some(uid) = job.uid() {
        tagwrites::release_all(&state.ctx.writer, state.nodeimages.state(), &[uid]).await?;
    }
    pullsecrets::release(
        &state.ctx.client,
        &state.ctx.secrets_namespace,
        &job_key(job),
    )
    .await?;
    Ok(())
}

async fn publish(ctx: &Context, job: &ImagePrePullJob, warning: bool, reason: &str, note: String) {
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(plan::cap(&note, 1000)),
        action: "PrePull".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder().publish(&ev, &job.object_ref(&())).await {
        tracing::warn!(job = %job.name_any(), error = %e, "could not record event");
    }
}

/// Logs the failure and retries with a short delay (conflicts sooner).
pub fn error_policy(job: Arc<ImagePrePullJob>, error: &Error, _: Arc<State>) -> Action {
    match error {
        Error::Conflict(_) => {
            tracing::debug!(job = %job.name_any(), %error, "write conflict; re-planning");
            Action::requeue(Duration::from_secs(1))
        }
        _ => {
            tracing::warn!(job = %job.name_any(), %error, "reconcile failed; retrying in 5s");
            Action::requeue(Duration::from_secs(5))
        }
    }
}
