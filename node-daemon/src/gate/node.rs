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
