//! This node's Node over the API server, for the start-up gate: read its
//! taints, apply a JSON Patch (the daemon may `get` and `patch` Nodes; the
//! chart's admission policy lets it remove only the gate's taint, and only
//! from its own Node).

use super::look::{NodeApi, NodeError};
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use nodeimage_api::kruise::nodeimage::contract::is_stale_write;

/// One Node through the API.
pub struct KubeNode {
    /// Nodes.
    pub api: Api<Node>,
    /// This node's name.
    pub name: String,
}

fn node_error(e: kube::Error) -> NodeError {
    match e {
        kube::Error::Api(s) if is_stale_write(&s) => NodeError::Stale,
        e => NodeError::Other(e.to_string()),
    }
}

/// What the gate's bound reads of this node's Node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seen {
    /// creationTimestamp, seconds since the epoch.
    pub created: Option<i64>,
    /// The Node carries the start-up taint.
    pub tainted: bool,
}

impl KubeNode {
    /// The Node's creation time and whether it carries `taint`; None when
    /// the Node does not exist.
    pub async fn gate_state(&self, taint: &str) -> Result<Option<Seen>, NodeError> {
        let node = self.api.get_opt(&self.name).await.map_err(node_error)?;
        Ok(node.map(|n| Seen {
            created: n.metadata.creation_timestamp.map(|t| t.0.as_second()),
            tainted: nodeimage_api::gate::has_taint(
                n.spec.as_ref().and_then(|s| s.taints.as_deref()),
                taint,
            ),
        }))
    }
}

impl NodeApi for KubeNode {
    async fn taints(&self) -> Result<Option<Vec<Taint>>, NodeError> {
        let node = self.api.get_opt(&self.name).await.map_err(node_error)?;
        Ok(node.map(|n| n.spec.and_then(|s| s.taints).unwrap_or_default()))
    }

    async fn patch(&self, body: serde_json::Value) -> Result<(), NodeError> {
        let body: json_patch::Patch =
            serde_json::from_value(body).map_err(|e| NodeError::Other(e.to_string()))?;
        self.api
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Json::<()>(body),
            )
            .await
            .map(|_| ())
            .map_err(node_error)
    }
}

/// Records an Event of the start-up gate on this node's Node (a failure to
/// record is logged: the gate's work is done either way).
pub async fn publish_event<R>(
    deps: &crate::deps::Deps<R>,
    type_: kube::runtime::events::EventType,
    reason: &str,
    note: &str,
) {
    use kube::runtime::events::{Event, Recorder};
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(crate::report::truncate(note, 1000)),
        action: "StartupGate".into(),
        secondary: None,
    };
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(deps.node.clone()),
        ..Default::default()
    };
    let recorder = Recorder::new(deps.client.clone(), deps.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &reference).await {
        tracing::warn!(error = %e, "could not record the start-up gate event");
    }
}
