//! The imperative shell of the node mirror: read the caches, decide, and
//! server-side apply the NodeImage's labels when they differ.

use super::OwnedLabels;
use super::decide::{self, FIELD_MANAGER, Mirror};
use crate::context::Context;
use crate::watch::Synced;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use nodeimage_api::NodeImage;
use std::sync::Arc;
use std::time::Duration;

/// Wait before retrying a failed apply.
const RETRY: Duration = Duration::from_secs(5);

/// Wait while the NodeImage cache has not synced yet.
const NOT_SYNCED: Duration = Duration::from_secs(1);

/// What the mirror's reconciler reads.
pub struct State {
    /// Client and settings.
    pub ctx: Context,
    /// NodeImage metadata, without managed fields.
    pub nodeimages: Store<PartialObjectMeta<NodeImage>>,
    /// The label keys the mirror owns on each NodeImage.
    pub owned: OwnedLabels,
    /// Whether `nodeimages` has been listed.
    pub nodeimages_synced: Synced,
}

/// Why mirroring one Node failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The server-side apply of the NodeImage was refused or failed.
    #[error("applying labels to NodeImage {name}: {source}")]
    Apply {
        /// NodeImage name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Creates or relabels the NodeImage of one Node.
pub async fn reconcile(node: Arc<Node>, state: Arc<State>) -> Result<Action, Error> {
    let _timer = state.ctx.metrics.reconcile("Node");
    if !state.nodeimages_synced.get() {
        return Ok(Action::requeue(NOT_SYNCED));
    }
    let name = node.name_any();
    let current = state.nodeimages.get(&ObjectRef::new(&name));
    let owned = state.owned.of(&name);
    let labels = match decide::mirror(
        &node.metadata,
        current.as_ref().map(|ni| &ni.metadata),
        &owned,
    ) {
        Mirror::NotWanted | Mirror::InSync => return Ok(Action::await_change()),
        Mirror::Apply(labels) => labels,
    };
    let api: Api<NodeImage> = Api::all(state.ctx.client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(
        &name,
        &params,
        &Patch::Apply(decide::apply_body(&name, &labels)),
    )
    .await
    .map_err(|source| Error::Apply {
        name: name.clone(),
        source,
    })?;
    if current.is_none() {
        tracing::info!(node = %name, labels = labels.len(), "created NodeImage for node");
    } else {
        tracing::info!(node = %name, labels = labels.len(), "mirrored node labels to NodeImage");
    }
    Ok(Action::await_change())
}

/// Logs the failure and retries the Node after a short wait.
pub fn error_policy(node: Arc<Node>, error: &Error, state: Arc<State>) -> Action {
    state.ctx.metrics.error("Node");
    tracing::warn!(node = %node.name_any(), %error, retry_s = RETRY.as_secs(), "node mirror failed");
    Action::requeue(RETRY)
}
