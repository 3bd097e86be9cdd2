//! The imperative shell of the node mirror: read the caches, decide, and
//! create the NodeImage or merge-patch its labels when they differ.

use super::Owned;
use super::decide::{self, Mirror};
use crate::cluster::watch::Synced;
use crate::engine::jobshell::requeue::{self, Classify, Failure, NOT_SYNCED_RETRY};
use crate::runtime::context::Context;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use nodeimage_api::NodeImage;
use std::sync::Arc;

/// The mirror's kind name in metrics and logs.
const KIND: &str = "Node";

/// What the mirror's reconciler reads.
pub struct State {
    /// Client and settings.
    pub ctx: Context,
    /// Every NodeImage (the shared cache: no managed fields, none of the
    /// mirror's annotations).
    pub nodeimages: Store<NodeImage>,
    /// What each NodeImage records of the mirror's labels.
    pub owned: Owned,
    /// Whether `nodeimages` has been listed.
    pub nodeimages_synced: Synced,
}

/// Why mirroring one Node failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Creating or relabelling the NodeImage was refused or failed.
    #[error("{action} NodeImage {name}: {source}")]
    Write {
        /// What was being done.
        action: &'static str,
        /// NodeImage name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The NodeImage to create did not decode (a bug, not input).
    #[error("building NodeImage {name}: {source}")]
    Build {
        /// NodeImage name.
        name: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

/// Creates or relabels the NodeImage of one Node.
pub async fn reconcile(node: Arc<Node>, state: Arc<State>) -> Result<Action, Error> {
    let _timer = state.ctx.metrics.reconcile(KIND);
    if !state.nodeimages_synced.get() {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    let name = node.name_any();
    let current = state.nodeimages.get(&ObjectRef::new(&name));
    let owned = state.owned.of(&name);
    let decision = decide::mirror(
        &node.metadata,
        current.as_ref().map(|ni| &ni.metadata),
        &owned,
    );
    let api: Api<NodeImage> = Api::all(state.ctx.client.clone());
    let write_err = |action, source| Error::Write {
        action,
        name: name.clone(),
        source,
    };
    match decision {
        Mirror::NotWanted | Mirror::InSync => {}
        Mirror::Create(labels) => {
            let ni: NodeImage = serde_json::from_value(decide::create_body(&name, &labels))
                .map_err(|source| Error::Build {
                    name: name.clone(),
                    source,
                })?;
            match api.create(&PostParams::default(), &ni).await {
                Ok(_) => {
                    tracing::info!(node = %name, labels = labels.len(), "created NodeImage for node")
                }
                // Made meanwhile (or not yet in the cache): its watch event
                // wakes this Node again.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return Ok(Action::requeue(NOT_SYNCED_RETRY));
                }
                Err(source) => return Err(write_err("creating", source)),
            }
        }
        Mirror::Relabel(patch) => {
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => tracing::info!(node = %name, "mirrored node labels to NodeImage"),
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    return Ok(Action::requeue(NOT_SYNCED_RETRY));
                }
                Err(source) => return Err(write_err("relabelling", source)),
            }
        }
    }
    Ok(Action::await_change())
}

impl Classify for Error {
    fn failure(&self) -> Failure {
        match self {
            Error::Write { source, .. } => requeue::failure_of(source),
            Error::Build { .. } => Failure::Other,
        }
    }
}

/// The retry policy of every controller ([`requeue::after_failure`]): a
/// stale write is a retry soon, not an error; anything else is counted and
/// retried after a short backoff.
pub fn error_policy(node: Arc<Node>, error: &Error, state: Arc<State>) -> Action {
    let metrics = &state.ctx.metrics;
    requeue::after_failure(metrics, KIND, &node.name_any(), error, error.failure())
}

#[cfg(test)]
mod tests;
