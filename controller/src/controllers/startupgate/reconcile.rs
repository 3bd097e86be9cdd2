//! The imperative shell of the start-up gate: read the caches, call the
//! plan, and write narrowly: the note as a merge patch of one NodeImage
//! annotation, the taint's removal as a JSON Patch that `test`s the taints
//! as read (`nodeimage_api::gate::untaint_patch`).

use super::images::{self, Jobs};
use super::plan::{self, Decision, Reason, Settings, Snapshot};
use crate::cluster::watch::Synced;
use crate::engine::jobshell::requeue::{self, Classify, Failure, NOT_SYNCED_RETRY};
use crate::nodeimage::nodes;
use crate::runtime::clock;
use crate::runtime::context::Context;
use crate::runtime::readers::Listed;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use nodeimage_api::gate::{self, GateNote, STARTUP_GATE};
use nodeimage_api::lenient::Lenient;
use nodeimage_api::{ImagePrePullJob, ImagePullJob, NodeImage};
use std::collections::BTreeSet;
use std::sync::Arc;

/// The kind this controller's reconciles and errors are counted under (the
/// documented `kind` labels: Node, shared with the node mirror).
const KIND: &str = "Node";

/// What the gate's reconciler reads.
pub struct State {
    /// Client, settings, metrics.
    pub ctx: Context,
    /// The gating job kinds' caches.
    pub jobs: GateJobs,
    /// Every NodeImage (with the gate's note kept).
    pub nodeimages: Store<NodeImage>,
    /// Whether `nodeimages` has been listed.
    pub nodeimages_synced: Synced,
    /// The gate's settings.
    pub settings: Settings,
}

/// The caches of the job kinds that may gate new nodes.
pub struct GateJobs {
    /// ImagePullJobs.
    pub pull: Listed<ImagePullJob>,
    /// ImagePrePullJobs.
    pub prepull: Listed<ImagePrePullJob>,
}

/// Why handling one Node failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read or write was refused or failed.
    #[error("{action} {name}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// Node (and NodeImage) name.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A patch did not build (a bug, not input).
    #[error("building the patch for {name}: {source}")]
    Build {
        /// Node name.
        name: String,
        /// The encoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl Classify for Error {
    fn failure(&self) -> Failure {
        match self {
            Error::Api { source, .. } => requeue::failure_of(source),
            Error::Build { .. } => Failure::Other,
        }
    }
}

/// Gates, keeps gating, or opens one Node.
pub async fn reconcile(node: Arc<Node>, state: Arc<State>) -> Result<Action, Error> {
    let _timer = state.ctx.metrics.reconcile(KIND);
    let name = node.name_any();
    let tainted = nodes::is_gated(&node);
    let current = state.nodeimages.get(&ObjectRef::new(&name));
    if !tainted && current.as_ref().is_none_or(|ni| !has_note(ni)) {
        return Ok(Action::await_change());
    }
    if !state.nodeimages_synced.get() {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    let images = if tainted {
        match gating_images(&state, &node, current.as_ref()) {
            Known::Images(images) => images,
            Known::NotYet => return Ok(Action::requeue(NOT_SYNCED_RETRY)),
        }
    } else {
        None
    };
    let snap = Snapshot {
        tainted,
        created: node
            .metadata
            .creation_timestamp
            .as_ref()
            .map(clock::instant),
        nodeimage: current.as_deref(),
        images,
    };
    let now = chrono::Utc::now();
    match plan::decide(&snap, &state.settings, now) {
        Decision::Idle => Ok(Action::await_change()),
        Decision::WaitForNodeImage(after) => Ok(Action::requeue(after)),
        Decision::ClearNote => {
            write_note(&state, &name, None).await?;
            tracing::debug!(node = %name, "start-up gate open: cleared the note");
            Ok(Action::await_change())
        }
        Decision::Gated { write, look_again } => {
            if let Some(note) = write {
                write_note(&state, &name, Some(&note)).await?;
                tracing::info!(node = %name, images = note.images.len(), deadline = %note.deadline, "node gated until its images are present");
            }
            Ok(Action::requeue(look_again))
        }
        Decision::Open { reason, missing } => {
            if untaint(&state, &name).await? {
                opened(&state, &node, reason, &missing).await;
            }
            Ok(Action::await_change())
        }
    }
}

/// Whether a cached NodeImage carries the gate's note.
fn has_note(ni: &NodeImage) -> bool {
    ni.annotations().contains_key(STARTUP_GATE)
}

/// What the shell can tell of a Node's gating images.
enum Known {
    /// A job cache is not listed yet: deciding now could open a gate too soon.
    NotYet,
    /// The images (None: not yet known, no NodeImage).
    Images(Option<BTreeSet<String>>),
}

/// The gating images of `node`, from the job kinds' caches.
fn gating_images(state: &State, node: &Node, ni: Option<&Arc<NodeImage>>) -> Known {
    let (Some(pull), Some(prepull)) = (state.jobs.pull.listed(), state.jobs.prepull.listed())
    else {
        return Known::NotYet;
    };
    let info = nodes::node_info(node);
    let Some(ni) = ni.filter(|_| info.wants_nodeimage) else {
        // A Node that gets no NodeImage has no daemon: nothing gates it.
        return Known::Images((!info.wants_nodeimage).then(BTreeSet::new));
    };
    let jobs = Jobs {
        pull: &pull,
        prepull: &prepull,
        edge_only: state.ctx.kubeedge_edge_only,
        policy: &state.ctx.policy,
    };
    Known::Images(Some(images::gating_images(ni, &info, &jobs)))
}

/// Sets (or, with None, removes) the note on NodeImage `name`.
async fn write_note(state: &State, name: &str, note: Option<&GateNote>) -> Result<(), Error> {
    let api: Api<Lenient<NodeImage>> = Api::all(state.ctx.client.clone());
    let value = note.map(GateNote::to_annotation);
    let body = serde_json::json!({"metadata": {"annotations": {STARTUP_GATE: value}}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        // Gone meanwhile: the mirror makes it again and its event wakes us.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Api {
            action: "annotating NodeImage",
            name: name.to_string(),
            source,
        }),
    }
}

/// Removes the start-up taint from Node `name` as it is now; false when it
/// no longer has it (its daemon opened the gate meanwhile).
async fn untaint(state: &State, name: &str) -> Result<bool, Error> {
    let api: Api<Node> = Api::all(state.ctx.client.clone());
    let api_err = |action, source| Error::Api {
        action,
        name: name.to_string(),
        source,
    };
    let Some(fresh) = api
        .get_opt(name)
        .await
        .map_err(|e| api_err("reading Node", e))?
    else {
        return Ok(false);
    };
    let taints = fresh.spec.and_then(|s| s.taints).unwrap_or_default();
    let Some(body) = gate::untaint_patch(&taints, &state.settings.taint) else {
        return Ok(false);
    };
    let body: json_patch::Patch = serde_json::from_value(body).map_err(|source| Error::Build {
        name: name.to_string(),
        source,
    })?;
    api.patch(name, &PatchParams::default(), &Patch::Json::<()>(body))
        .await
        .map_err(|e| api_err("removing the start-up taint from Node", e))?;
    Ok(true)
}

/// Records that the controller opened a gate: a log line, the metric and
/// an Event on the Node.
async fn opened(state: &State, node: &Node, reason: Reason, missing: &[String]) {
    let name = node.name_any();
    let taint = &state.settings.taint;
    state.ctx.metrics.startup_gate_opened(reason.label());
    let (type_, why, note) = match reason {
        Reason::NoGatingImages => (
            EventType::Normal,
            gate::REASON_READY,
            format!("No gating image targets this node; removed taint {taint}"),
        ),
        Reason::Timeout => (
            EventType::Warning,
            gate::REASON_TIMEOUT,
            format!(
                "Start-up gate bound of {}s passed; removed taint {taint}; images still missing: {}",
                state.settings.timeout.num_seconds(),
                if missing.is_empty() {
                    "none as far as the node reported (its daemon did not open the gate)"
                        .to_string()
                } else {
                    missing.join(", ")
                }
            ),
        ),
    };
    tracing::info!(node = %name, reason = reason.label(), missing = ?missing, "start-up gate opened by the controller");
    let ev = Event {
        type_,
        reason: why.into(),
        note: Some(crate::messages::cap(&note, 1000)),
        action: "StartupGate".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(node, &());
    if let Err(e) = state.ctx.recorder().publish(&ev, &reference).await {
        tracing::warn!(node = %name, error = %e, "could not record the start-up gate event");
    }
}

/// Logs the failure and retries the Node by the one retry policy.
pub fn error_policy(node: Arc<Node>, error: &Error, state: Arc<State>) -> Action {
    requeue::after_failure(
        &state.ctx.metrics,
        KIND,
        &node.name_any(),
        error,
        error.failure(),
    )
}
