//! The NodeUpgradeJob reconciler: read the job's world, call the plan, write
//! the tag entries and the status with narrow guarded patches, take recorded
//! nodes' entries back, publish events.

use super::plan::{self, Inputs};
use crate::context::Context;
use crate::entries;
use crate::rollout::{self, NodeInfo};
use crate::tagwrites::{self, WriteError};
use crate::watch::Synced;
use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use nodeimage_api::kubeedge::{NodeUpgradeJobStatus, kubeedge_version_of_kubelet};
use nodeimage_api::{NodeImage, NodeUpgradeJob};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Finalizer that lets a deleted job take its entries back.
pub const FINALIZER: &str = "nodeimage.dev/nodeupgradejob-cleanup";
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
    /// Every Node, trimmed to labels, Ready and the kubelet version.
    pub nodes: Store<Node>,
    /// Whether `nodes` has been listed.
    pub nodes_synced: Synced,
}

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write failed (or conflicted).
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A status patch could not be built.
    #[error(transparent)]
    Patch(#[from] crate::patch::PatchError),
}

/// The KubeEdge version a Node reports (`kubeletVersion` ending in `-kubeedge-vX.Y.Z`).
pub fn node_version(n: &Node) -> Option<String> {
    let v = &n.status.as_ref()?.node_info.as_ref()?.kubelet_version;
    kubeedge_version_of_kubelet(v)
}

/// Reconciles one job.
pub async fn reconcile(job: Arc<NodeUpgradeJob>, state: Arc<State>) -> Result<Action, Error> {
    let ctx = &state.ctx;
    let _timer = ctx.metrics.reconcile(plan::KIND);
    let api: Api<NodeUpgradeJob> = Api::all(ctx.client.clone());
    let name = job.name_any();

    if job.meta().deletion_timestamp.is_some() {
        if !job.finalizers().iter().any(|f| f == FINALIZER) {
            return Ok(Action::await_change());
        }
        if !state.nodeimages_synced.get() {
            return Ok(Action::requeue(NOT_SYNCED_RETRY));
        }
        if let Some(uid) = job.uid() {
            tagwrites::release_all(&ctx.writer, state.nodeimages.state(), &[uid]).await?;
        }
        tagwrites::set_finalizer(&api, job.as_ref(), FINALIZER, false).await?;
        tracing::info!(job = %name, "job deleted: tag entries released");
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

    let nodes_list = state.nodes.state();
    let nodes: BTreeMap<String, NodeInfo> = nodes_list
        .iter()
        .map(|n| (n.name_any(), rollout::node_info(n)))
        .collect();
    let versions: BTreeMap<String, String> = nodes_list
        .iter()
        .filter_map(|n| Some((n.name_any(), node_version(n)?)))
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
        versions: &versions,
        nodeimages: &nodeimages,
        now,
    });

    if let Some((req, upgrade)) = &p.request {
        let targets: Vec<Arc<NodeImage>> = p
            .write_to
            .iter()
            .filter_map(|n| nodeimages.get(n).cloned())
            .collect();
        let writes = futures::stream::iter(targets)
            .map(|ni| write_entry(&ctx.writer, ni, req.clone(), upgrade.clone(), now))
            .buffer_unordered(WRITE_CONCURRENCY)
            .collect::<Vec<_>>()
            .await;
        let mut conflict = None;
        for w in writes {
            match w {
                Ok(()) => {}
                Err(WriteError::Conflict(n)) => conflict = Some(n),
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(n) = conflict {
            tracing::debug!(job = %name, what = %n, "entry write conflicted; retrying soon");
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
    }

    let old = job.status.clone();
    if old.as_ref() != Some(&p.status) {
        if let Some(body) = crate::patch::guarded(
            "status",
            job.resource_version().as_deref(),
            &["status"],
            &old,
            &Some(p.status.clone()),
        )? {
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    return Err(WriteError::Conflict(format!("NodeUpgradeJob {name}")).into());
                }
                Err(source) => {
                    return Err(WriteError::Api {
                        action: format!("writing status of NodeUpgradeJob {name}"),
                        source,
                    }
                    .into());
                }
            }
        }
        log_transition(&name, old.as_ref(), &p.status);
    }
    for ev in &p.events {
        publish(ctx, &job, ev.warning, ev.reason, ev.note.clone()).await;
    }
    // Recorded results: the entries go, so no later pull of the tag runs the
    // upgrade again (and an unfinished node that timed out stops waiting).
    if let Some(uid) = job.uid() {
        for node in &p.release_from {
            if let Some(ni) = nodeimages.get(node) {
                match tagwrites::release(&ctx.writer, ni.clone(), std::slice::from_ref(&uid)).await
                {
                    Ok(()) => tracing::debug!(job = %name, node = %node, "entry released"),
                    Err(WriteError::Conflict(_)) => {
                        return Ok(Action::requeue(Duration::from_secs(1)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(match p.requeue_after {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    })
}

/// Writes the upgrade entry into one NodeImage.
async fn write_entry(
    writer: &tagwrites::NodeWriter,
    ni: Arc<NodeImage>,
    req: entries::EntryRequest,
    upgrade: nodeimage_api::kruise::TagUpgrade,
    now: chrono::DateTime<Utc>,
) -> Result<(), WriteError> {
    let edit: tagwrites::Edit = Box::new(move |current, images| {
        let reported = entries::reported_version(current, &req.image, &req.tag);
        entries::upsert_upgrade(images, &req, &upgrade, reported, now)
    });
    writer.edit(ni, edit).await
}

/// One log line per job phase change.
fn log_transition(name: &str, old: Option<&NodeUpgradeJobStatus>, new: &NodeUpgradeJobStatus) {
    let old_state = old.and_then(|s| s.state.as_deref()).unwrap_or_default();
    let new_state = new.state.as_deref().unwrap_or_default();
    if old_state != new_state {
        tracing::info!(
            job = %name,
            from = old_state,
            to = new_state,
            reason = new.reason.as_deref().unwrap_or_default(),
            "job state changed"
        );
    }
}

async fn publish(ctx: &Context, job: &NodeUpgradeJob, warning: bool, reason: &str, note: String) {
    let ev = Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.into(),
        note: Some(rollout::cap(&note, 1000)),
        action: "Upgrade".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder().publish(&ev, &job.object_ref(&())).await {
        tracing::warn!(job = %job.name_any(), error = %e, "could not record event");
    }
}

/// Logs the failure and retries with a short delay (conflicts sooner).
pub fn error_policy(job: Arc<NodeUpgradeJob>, error: &Error, state: Arc<State>) -> Action {
    match error {
        Error::Write(WriteError::Conflict(_)) => {
            tracing::debug!(job = %job.name_any(), %error, "write conflict; re-planning");
            Action::requeue(Duration::from_secs(1))
        }
        _ => {
            state.ctx.metrics.error(plan::KIND);
            tracing::warn!(job = %job.name_any(), %error, "reconcile failed; retrying in 5s");
            Action::requeue(Duration::from_secs(5))
        }
    }
}
