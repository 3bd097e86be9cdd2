//! The one job shell of the kinds that write tag entries (ImagePullJob,
//! ImagePrePullJob, NodeUpgradeJob): a kind plugs its plan and status in
//! through [`JobKind`] and [`JobReconciler`]; the shell runs the controller
//! (`run`), the reconcile skeleton and error policy (`reconcile`), the
//! writes every kind makes alike (`writes`: entries, status, events), and
//! the one requeue and retry policy of every controller (`requeue`).

mod reconcile;
pub mod requeue;
mod run;
#[cfg(test)]
pub mod scripted;
mod writes;

pub use reconcile::{error_policy, reconcile, retry};
pub use requeue::after_success;
pub use run::{
    JobInputs, NodeJobs, NodeTaskWiring, drive, ensure_secrets_namespace, run_node_tasks,
    tag_owners, wake_owners,
};
pub use writes::{
    StateOf, patch_status, publish, publish_on, write_entries, write_guarded_status, written_status,
};

use crate::cluster::tagwrites::WriteError;
use crate::cluster::watch::Synced;
use crate::runtime::context::Context;
use kube::Resource;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use nodeimage_api::kruise::NodeImage;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Pull secrets could not be synced.
    #[error(transparent)]
    Secrets(#[from] crate::engine::pullsecrets::SecretsError),
    /// A status patch could not be built.
    #[error(transparent)]
    Patch(#[from] crate::nodeimage::patch::PatchError),
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

impl requeue::Classify for Error {
    fn failure(&self) -> requeue::Failure {
        requeue::Failure::of(self.is_conflict())
    }
}

/// Maps an API error of `action` to [`Error`] (a stale write to a conflict).
pub fn api_err(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let action = action.into();
    move |source| match requeue::failure_of(&source) {
        requeue::Failure::Conflict => Error::Write(WriteError::Conflict(action)),
        requeue::Failure::Other => Error::Write(WriteError::Api { action, source }),
    }
}

/// What every job reconciler reads and writes through: the context, the
/// NodeImage cache and the one writer of tag entries.
pub struct Shared {
    /// Client, recorder, settings.
    pub ctx: Context,
    /// Writes every job's tag entries, batched per node.
    pub writer: crate::cluster::tagwrites::NodeWriter,
    /// Every NodeImage.
    pub nodeimages: Store<NodeImage>,
    /// Set once `nodeimages` holds a complete list.
    pub nodeimages_synced: Synced,
    /// How many nodes pull from each registry at once, across every job.
    pub pacing: Arc<crate::engine::registrypace::RegistryPacing>,
}

/// A job kind's names in the shell.
pub trait JobKind:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// Kind name, in metrics and logs.
    const KIND: &'static str;
    /// Controller name, in logs.
    const NAME: &'static str;
    /// `action` of the events published on the job.
    const EVENT_ACTION: &'static str;

    /// The job's API (cluster-wide unless the kind is namespaced).
    fn api(client: kube::Client, _job: &Self) -> Api<Self> {
        Api::all(client)
    }
}

/// The caches a job reconciler reads.
pub trait Caches {
    /// The shared context and caches.
    fn shared(&self) -> &Shared;
    /// Whether every cache the plan reads has been listed.
    fn synced(&self) -> bool;
}

/// What a job kind plugs into the shell.
pub trait JobReconciler: Caches + Send + Sync + 'static {
    /// The job kind.
    type Job: JobKind;
    /// Finalizer that lets a deleted job take its entries back.
    const FINALIZER: &'static str;
    /// Finalizers the upstream controller puts on jobs it ran; a deleted job
    /// lets them go as upstream would once it is cleaned up (that controller
    /// is stopped when nodeimage takes over: docs/migration.md).
    const UPSTREAM_FINALIZERS: &'static [&'static str];
    /// Takes a deleted job's entries (and secrets) back.
    fn cleanup(&self, job: &Self::Job) -> impl Future<Output = Result<(), Error>> + Send;
    /// Plans a live job and writes what the plan says.
    fn apply(&self, job: Arc<Self::Job>) -> impl Future<Output = Result<Action, Error>> + Send;
}
