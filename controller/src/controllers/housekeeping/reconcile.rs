//! The imperative shell of housekeeping: read one NodeImage and the caches,
//! delete it if its Node is gone, otherwise plan and write the plan as narrow
//! guarded merge patches (spec first, then status), then publish events.

use super::orphans::OrphansSeen;
use super::owners::OwnerCaches;
use super::plan::{self, Change, Inputs, Plan};
use crate::cluster::watch::Synced;
use crate::engine::jobshell::requeue::{self, Classify, Failure};
use crate::nodeimage::nodes;
use crate::nodeimage::patch::{self, PatchError};
use crate::runtime::context::Context;
use chrono::Utc;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use nodeimage_api::NodeImage;
use nodeimage_api::lenient::Lenient;
use std::sync::Arc;

/// Housekeeping's kind name in metrics and logs.
const KIND: &str = "NodeImage";

/// Event reason for a tag the controller marked Failed.
pub const REASON_PULL_FAILED: &str = "PullImageFailed";

/// What the housekeeping reconciler reads.
pub struct State {
    /// Client, recorder and settings.
    pub ctx: Context,
    /// Node metadata, to tell whether a NodeImage's Node still exists.
    pub nodes: Store<Node>,
    /// Whether `nodes` has been listed.
    pub nodes_synced: Synced,
    /// Job metadata, to tell whether a tag's owners still exist.
    pub owners: OwnerCaches,
    /// Since when each NodeImage's status has held entries of removed tags.
    pub orphans: OrphansSeen,
    /// The NodeImage cache, to forget sightings of deleted NodeImages.
    pub nodeimages: Store<NodeImage>,
}

/// Why housekeeping of one NodeImage failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Someone else wrote the NodeImage after it was read; re-read and re-plan.
    #[error("NodeImage {0} changed while being written; will re-read")]
    Conflict(String),
    /// A write or delete failed.
    #[error("{action} NodeImage {name}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// NodeImage name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The planned object could not be serialised.
    #[error(transparent)]
    Patch(#[from] PatchError),
}

impl Error {
    fn api(action: &'static str, name: &str, source: kube::Error) -> Self {
        match requeue::failure_of(&source) {
            Failure::Conflict => Error::Conflict(name.to_string()),
            Failure::Other => Error::Api {
                action,
                name: name.to_string(),
                source,
            },
        }
    }
}

impl Classify for Error {
    fn failure(&self) -> Failure {
        Failure::of(matches!(self, Error::Conflict(_)))
    }
}

/// Housekeeps one NodeImage.
pub async fn reconcile(ni: Arc<NodeImage>, state: Arc<State>) -> Result<Action, Error> {
    let _timer = state.ctx.metrics.reconcile(KIND);
    if ni.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = ni.name_any();
    let api: Api<Lenient<NodeImage>> = Api::all(state.ctx.client.clone());

    let node = state.nodes.get(&ObjectRef::new(&name));
    if let Some(why) = nodes::orphaned(
        ni.meta(),
        node.as_ref().map(|n| &n.metadata),
        state.nodes_synced.get(),
    ) {
        state.orphans.forget(&name);
        return delete(&api, &ni, why).await;
    }

    let now = Utc::now();
    let plan = plan::plan(
        &ni,
        &Inputs {
            now,
            response_timeout: state.ctx.response_timeout,
            owners: &state.owners,
            orphans_since: state.orphans.since(&name),
        },
    );
    if !plan.is_noop() {
        write(&api, &ni, &plan).await?;
    }
    let exists = |n: &str| state.nodeimages.get(&ObjectRef::new(n)).is_some();
    state.orphans.record(&name, plan.orphaned, now, exists);
    log_changes(&name, &plan);
    publish_failures(&state.ctx, &ni, &plan).await;
    Ok(Action::requeue(plan.requeue_after))
}

/// Deletes a NodeImage whose Node is gone, only if it is still the one read.
async fn delete(
    api: &Api<Lenient<NodeImage>>,
    ni: &NodeImage,
    why: nodes::Orphaned,
) -> Result<Action, Error> {
    let name = ni.name_any();
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: ni.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            tracing::info!(nodeimage = %name, reason = why.as_str(), "deleted NodeImage");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Action::await_change()),
        Err(source) => Err(Error::api("deleting", &name, source)),
    }
}

/// Writes the planned removal list, the planned spec, then the planned
/// status. The removal list is guarded by the resourceVersion read (a
/// status write of the node in between is a conflict, and the next look
/// plans again; only a job gone without its cleanup leaves such entries). A spec-only change is guarded by the images it changes
/// as they were planned from (the node's status writes do not void it);
/// when status changes too, both writes are guarded by the resourceVersion,
/// since the status was planned from that same read.
async fn write(api: &Api<Lenient<NodeImage>>, ni: &NodeImage, plan: &Plan) -> Result<(), Error> {
    let name = ni.name_any();
    let mut resource_version = ni.resource_version();
    if let Some(removals) = &plan.removals {
        let new = (!removals.is_empty()).then(|| removals.clone());
        let at = resource_version.as_deref();
        let body = patch::guarded(
            "spec.removals",
            at,
            &["spec", "removals"],
            &ni.spec.removals,
            &new,
        )?;
        if let Some(rv) = spec_merge(api, &name, "patching removals of", body).await? {
            resource_version = rv;
        }
    }
    if let Some(images) = &plan.images {
        let old = ni.spec.images.clone();
        let new = Some(images.clone());
        if plan.status.is_none() && old != new {
            let body = patch::images_tested(&ni.spec, images)?;
            api.patch(&name, &PatchParams::default(), &Patch::Json::<()>(body))
                .await
                .map_err(|e| Error::api("patching spec of", &name, e))?;
        } else {
            let at = resource_version.as_deref();
            let body = patch::guarded("spec", at, &["spec", "images"], &old, &new)?;
            if let Some(rv) = spec_merge(api, &name, "patching spec of", body).await? {
                resource_version = rv;
            }
        }
    }
    if let Some(status) = &plan.status {
        let body = patch::guarded(
            "status",
            resource_version.as_deref(),
            &["status"],
            &ni.status,
            &Some(status.clone()),
        )?;
        if let Some(body) = body {
            api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
                .map_err(|e| Error::api("patching status of", &name, e))?;
        }
    }
    Ok(())
}

/// Sends a guarded merge patch of the spec, if there is one (clearing the
/// managed fields); returns the resourceVersion it wrote.
async fn spec_merge(
    api: &Api<Lenient<NodeImage>>,
    name: &str,
    action: &'static str,
    body: Option<serde_json::Value>,
) -> Result<Option<Option<String>>, Error> {
    let Some(body) = body else {
        return Ok(None);
    };
    let body = patch::clearing_managed_fields(body);
    let updated = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
        .map_err(|e| Error::api(action, name, e))?;
    Ok(Some(updated.resource_version()))
}

/// One log line per change the plan made.
fn log_changes(name: &str, plan: &Plan) {
    for change in &plan.changes {
        match change {
            Change::CreatedAtSet { image, tag } => {
                tracing::info!(nodeimage = %name, %image, %tag, "set createdAt of tag");
            }
            Change::OwnerDropped { image, tag, owner } => {
                tracing::info!(nodeimage = %name, %image, %tag, %owner, "dropped owner that no longer exists");
            }
            Change::TagRemoved { image, tag, reason } => {
                tracing::info!(nodeimage = %name, %image, %tag, reason = reason.as_str(), "removed tag");
            }
            Change::ImageRemoved { image } => {
                tracing::info!(nodeimage = %name, %image, "removed image without tags");
            }
            Change::RemovalDropped { job } => {
                tracing::info!(nodeimage = %name, %job, "removed removal entry whose ImageRemovalJob is gone");
            }
        }
    }
    for failure in &plan.failures {
        tracing::warn!(
            nodeimage = %name,
            image = %failure.image,
            tag = %failure.tag,
            version = failure.version,
            why = %failure.message,
            "marked tag Failed"
        );
    }
}

/// A Warning event per tag marked Failed. Events are best effort: a failure
/// to publish is logged, the status already says what happened.
async fn publish_failures(ctx: &Context, ni: &NodeImage, plan: &Plan) {
    let reference = ni.object_ref(&());
    for failure in &plan.failures {
        if failure.no_response {
            ctx.metrics.response_timeouts.inc();
        }
        let event = Event {
            type_: EventType::Warning,
            reason: REASON_PULL_FAILED.into(),
            note: Some(format!(
                "{}:{} (version {}): {}",
                failure.image, failure.tag, failure.version, failure.message
            )),
            action: "MarkFailed".into(),
            secondary: None,
        };
        if let Err(error) = ctx.recorder().publish(&event, &reference).await {
            tracing::warn!(nodeimage = %ni.name_any(), %error, "could not publish event");
        }
    }
}

/// The retry policy of every controller ([`requeue::after_failure`]): a
/// stale write is a retry soon, not an error; anything else is counted and
/// retried after a short backoff.
pub fn error_policy(ni: Arc<NodeImage>, error: &Error, state: Arc<State>) -> Action {
    let metrics = &state.ctx.metrics;
    requeue::after_failure(metrics, KIND, &ni.name_any(), error, error.failure())
}

#[cfg(test)]
mod tests;
