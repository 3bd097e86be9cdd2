//! The one reconcile skeleton of the job kinds that write tag entries
//! (ImagePullJob, ImagePrePullJob, NodeUpgradeJob): metrics, the finalizer
//! branch (clean up, then let the job go), waiting for the caches, the error
//! type and policy, and the writes every kind makes alike (entries, status,
//! events). A kind plugs in its plan and status through [`JobReconciler`].
//!
//! kube's `runtime::finalizer` helper is not used: it removes the finalizer
//! with a JSON Patch `test` of its index and fails on a job already gone,
//! where ours is a merge patch guarded by the resourceVersion that treats a
//! job already gone as released.

use crate::context::Context;
use crate::entries::{self, EntryRequest};
use crate::jobevents::JobEvent;
use crate::rollout::cap;
use crate::tagwrites::{self, WriteError};
use crate::watch::Synced;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use nodeimage_api::kruise::{NodeImage, TagUpgrade};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How soon a job looks again while a cache is still being listed.
const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);
/// How soon a job looks again after a write conflicted (re-plan).
const CONFLICT_RETRY: Duration = Duration::from_secs(1);
/// How soon a job looks again after any other failure.
const ERROR_RETRY: Duration = Duration::from_secs(5);
/// Entry writes in flight at once per job.
const WRITE_CONCURRENCY: usize = 16;
/// Longest event note (the API refuses notes above 1 KB).
const MAX_NOTE_CHARS: usize = 1000;

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
    Secrets(#[from] crate::pullsecrets::SecretsError),
    /// A status patch could not be built.
    #[error(transparent)]
    Patch(#[from] crate::patch::PatchError),
    /// A NodeImage, status or finalizer write failed (or conflicted: re-plan).
    #[error(transparent)]
    Write(#[from] WriteError),
}

impl Error {
    /// Whether someone wrote the object between our read and our write.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Write(WriteError::Conflict(_)))
    }
}

/// Maps an API error of `action` to [`Error`] (a 409 to a conflict).
pub fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| match source {
        kube::Error::Api(s) if s.is_conflict() => Error::Write(WriteError::Conflict(action)),
        source => Error::Api { action, source },
    }
}

/// What every job reconciler reads: the context and the NodeImage cache.
pub struct Shared {
    /// Client, recorder, settings.
    pub ctx: Context,
    /// Every NodeImage.
    pub nodeimages: Store<NodeImage>,
    /// Set once `nodeimages` holds a complete list.
    pub nodeimages_synced: Synced,
}

/// A job kind's names in the shell.
pub trait JobKind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// Kind name, in metrics and logs.
    const KIND: &'static str;
    /// Finalizer that lets a deleted job take its entries back.
    const FINALIZER: &'static str;
    /// `action` of the events published on the job.
    const EVENT_ACTION: &'static str;

    /// The job's API (namespaced or cluster-wide).
    fn api(client: kube::Client, job: &Self) -> Api<Self>;
}

/// What a job kind plugs into the shell.
pub trait JobReconciler: Send + Sync + 'static {
    /// The job kind.
    type Job: JobKind;

    /// The shared context and caches.
    fn shared(&self) -> &Shared;
    /// Whether every cache the plan reads has been listed.
    fn synced(&self) -> bool;
    /// Takes a deleted job's entries (and secrets) back.
    fn cleanup(&self, job: &Self::Job) -> impl Future<Output = Result<(), Error>> + Send;
    /// Plans a live job and writes what the plan says.
    fn apply(&self, job: Arc<Self::Job>) -> impl Future<Output = Result<Action, Error>> + Send;
}

/// Reconciles one job: the finalizer branch, then the kind's plan.
pub async fn reconcile<R: JobReconciler>(job: Arc<R::Job>, r: Arc<R>) -> Result<Action, Error> {
    let shared = r.shared();
    let _timer = shared.ctx.metrics.reconcile(R::Job::KIND);
    let api = R::Job::api(shared.ctx.client.clone(), &job);
    let has_finalizer = job.finalizers().iter().any(|f| f == R::Job::FINALIZER);
    if job.meta().deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Action::await_change());
        }
        // Cleanup reads the NodeImage cache: an empty cache that has not
        // been listed yet would release nothing.
        if !shared.nodeimages_synced.get() {
            return Ok(Action::requeue(NOT_SYNCED_RETRY));
        }
        r.cleanup(&job).await?;
        tagwrites::set_finalizer(&api, job.as_ref(), R::Job::FINALIZER, false).await?;
        tracing::info!(kind = R::Job::KIND, job = %ObjectRef::from_obj(job.as_ref()), "job deleted: its entries are released");
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        tagwrites::set_finalizer(&api, job.as_ref(), R::Job::FINALIZER, true).await?;
        // The patch wakes us again with the new object.
        return Ok(Action::await_change());
    }
    // Selection and counts read the caches: an empty cache that has not
    // been listed yet would mean "no nodes".
    if !r.synced() {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    r.apply(job).await
}

/// Logs the failure and retries: a conflict soon (re-plan), else after a while.
pub fn error_policy<R: JobReconciler>(job: Arc<R::Job>, error: &Error, r: Arc<R>) -> Action {
    let job = ObjectRef::from_obj(job.as_ref());
    if error.is_conflict() {
        tracing::debug!(kind = R::Job::KIND, %job, %error, "write conflict; re-planning");
        return Action::requeue(CONFLICT_RETRY);
    }
    r.shared().ctx.metrics.error(R::Job::KIND);
    tracing::warn!(kind = R::Job::KIND, %job, %error, "reconcile failed; retrying in 5s");
    Action::requeue(ERROR_RETRY)
}

/// Writes `requests` (with `upgrade`, a NodeUpgradeJob's) into the
/// NodeImages of `nodes`, several at a time, through the shared writer. A
/// conflict is reported after every other write has been tried.
pub async fn write_entries(
    shared: &Shared,
    nodes: &[String],
    requests: &[EntryRequest],
    upgrade: Option<&TagUpgrade>,
    now: DateTime<Utc>,
) -> Result<(), Error> {
    if requests.is_empty() {
        return Ok(());
    }
    let targets: Vec<Arc<NodeImage>> = nodes
        .iter()
        .filter_map(|node| shared.nodeimages.get(&ObjectRef::new(node)))
        .collect();
    let writes: Vec<Result<(), WriteError>> = futures::stream::iter(targets)
        .map(|ni| {
            let (reqs, upgrade) = (requests.to_vec(), upgrade.cloned());
            let edit: tagwrites::Edit = Box::new(move |current, images| {
                reqs.iter().fold(false, |changed, req| {
                    let reported = entries::reported_version(current, &req.image, &req.tag);
                    let wrote = match &upgrade {
                        Some(u) => entries::upsert_upgrade(images, req, u, reported, now),
                        None => entries::upsert(images, req, reported, now),
                    };
                    wrote | changed
                })
            });
            shared.ctx.writer.edit(ni, edit)
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;
    let mut conflict = None;
    for w in writes {
        match w {
            Ok(()) => {}
            Err(WriteError::Conflict(n)) => conflict = Some(n),
            Err(e) => return Err(e.into()),
        }
    }
    match conflict {
        Some(n) => Err(WriteError::Conflict(n).into()),
        None => Ok(()),
    }
}

/// Writes a job's status subresource with a merge patch `body`.
pub async fn patch_status<K: JobKind>(
    api: &Api<K>,
    job: &K,
    body: &serde_json::Value,
) -> Result<(), Error> {
    let name = job.name_any();
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .map_err(api_err(format!("writing status of {} {name}", K::KIND)))?;
    Ok(())
}

/// Publishes the plan's events on the job (a failure to record is logged).
pub async fn publish<K: JobKind>(ctx: &Context, job: &K, events: &[JobEvent]) {
    for ev in events {
        let event = Event {
            type_: if ev.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: ev.reason.into(),
            note: Some(cap(&ev.note, MAX_NOTE_CHARS)),
            action: K::EVENT_ACTION.into(),
            secondary: None,
        };
        if let Err(e) = ctx.recorder().publish(&event, &job.object_ref(&())).await {
            tracing::warn!(kind = K::KIND, job = %job.name_any(), error = %e, "could not record event");
        }
    }
}

/// The job-level state and reason of a status, for logs.
pub type StateOf<S> = fn(&S) -> (Option<&str>, Option<&str>);

/// Writes a job's new status as a merge patch guarded by the
/// resourceVersion it was planned from (the plan read the old status), and
/// logs a change of the job's state.
pub async fn write_guarded_status<K, S>(
    ctx: &Context,
    job: &K,
    old: Option<&S>,
    new: &S,
    state_of: StateOf<S>,
) -> Result<(), Error>
where
    K: JobKind,
    S: serde::Serialize + PartialEq + Clone,
{
    if old == Some(new) {
        return Ok(());
    }
    let body = crate::patch::guarded(
        "status",
        job.resource_version().as_deref(),
        &["status"],
        &old.cloned(),
        &Some(new.clone()),
    )?;
    if let Some(body) = body {
        patch_status(&K::api(ctx.client.clone(), job), job, &body).await?;
    }
    let (old_state, _) = old.map(state_of).unwrap_or_default();
    let (new_state, reason) = state_of(new);
    if old_state != new_state {
        tracing::info!(
            kind = K::KIND,
            job = %job.name_any(),
            from = old_state.unwrap_or_default(),
            to = new_state.unwrap_or_default(),
            reason = reason.unwrap_or_default(),
            "job state changed"
        );
    }
    Ok(())
}
