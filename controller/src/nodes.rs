//! What a Node means to the controller, shared by the node mirror and the
//! job kinds: whether it gets a NodeImage, and what the plans read of it.

use k8s_openapi::api::core::v1::{Node, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use std::collections::BTreeMap;

/// Label key and value of virtual nodes, which pull no images.
pub const VIRTUAL_KUBELET: (&str, &str) = ("type", "virtual-kubelet");

/// Whether a Node should have a NodeImage: not virtual and not being deleted.
pub fn wants_nodeimage(node: &ObjectMeta) -> bool {
    let (key, value) = VIRTUAL_KUBELET;
    let is_virtual = node
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .is_some_and(|v| v == value);
    !is_virtual && node.deletion_timestamp.is_none()
}

/// A Node, as far as a job's plan cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeInfo {
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// The Ready condition is True.
    pub ready: bool,
    /// The node gets a NodeImage (not virtual, not being deleted).
    pub wants_nodeimage: bool,
}

/// What a plan needs of a Node.
pub fn node_info(n: &Node) -> NodeInfo {
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True");
    NodeInfo {
        labels: n.labels().clone(),
        ready,
        wants_nodeimage: wants_nodeimage(&n.metadata),
    }
}

/// Keeps only what the plans read of a Node: labels, deletion, the Ready
/// condition's status and `nodeInfo.kubeletVersion` (where KubeEdge nodes
/// report their version).
pub fn trim_node(n: &mut Node) {
    n.metadata.managed_fields = None;
    n.metadata.annotations = None;
    n.metadata.owner_references = None;
    n.spec = None;
    if let Some(st) = n.status.as_mut() {
        let ready: Vec<_> = st
            .conditions
            .take()
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ == "Ready")
            .map(|mut c| {
                c.last_heartbeat_time = None;
                c.last_transition_time = None;
                c.message = None;
                c
            })
            .collect();
        let kubelet_version = st
            .node_info
            .take()
            .map(|i| i.kubelet_version)
            .filter(|v| !v.is_empty());
        *st = NodeStatus {
            conditions: Some(ready),
            node_info: kubelet_version.map(|kubelet_version| NodeSystemInfo {
                kubelet_version,
                ..Default::default()
            }),
            ..Default::default()
        };
    }
}
