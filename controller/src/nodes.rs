//! What a Node means to the controller, shared by the node mirror and the
//! job kinds: whether it gets a NodeImage, when a NodeImage has outlived
//! its Node, and what the plans read of it.

use k8s_openapi::api::core::v1::{Node, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use nodeimage_api::kruise::FAKE_NODEIMAGE_LABEL;
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

/// Why a NodeImage is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orphaned {
    /// No Node of that name exists.
    Gone,
    /// The Node is being deleted.
    Terminating,
    /// The Node is virtual and gets no NodeImage.
    Virtual,
}

impl Orphaned {
    /// Short text for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Orphaned::Gone => "node gone",
            Orphaned::Terminating => "node terminating",
            Orphaned::Virtual => "node is virtual-kubelet",
        }
    }
}

/// Whether NodeImage `nodeimage` should be deleted because its Node is gone
/// (or gets no NodeImage). Never for NodeImages labelled
/// `apps.kruise.io/fake-nodeimage`, and never from a Node cache that has not
/// synced, where "absent" means "not listed yet".
pub fn orphaned(
    nodeimage: &ObjectMeta,
    node: Option<&ObjectMeta>,
    nodes_synced: bool,
) -> Option<Orphaned> {
    let fake = nodeimage
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(FAKE_NODEIMAGE_LABEL));
    if fake || !nodes_synced || nodeimage.deletion_timestamp.is_some() {
        return None;
    }
    match node {
        None => Some(Orphaned::Gone),
        Some(n) if n.deletion_timestamp.is_some() => Some(Orphaned::Terminating),
        Some(n) if !wants_nodeimage(n) => Some(Orphaned::Virtual),
        Some(_) => None,
    }
}

/// A Node, as far as a job's plan cares.
#[derive(Clone, Debug, Default, PartialEq, Hash)]
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

/// Node metadata builders the tests of several modules share.
#[cfg(test)]
pub(crate) mod fixtures {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    /// Metadata of `node-1` with these labels.
    pub(crate) fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            name: Some("node-1".into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    /// The same metadata, being deleted.
    pub(crate) fn terminating(mut m: ObjectMeta) -> ObjectMeta {
        m.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{meta, terminating};
    use super::*;

    #[test]
    fn orphaned_table() {
        let fake = (FAKE_NODEIMAGE_LABEL, "true");
        let cases: Vec<(&str, ObjectMeta, Option<ObjectMeta>, bool, Option<Orphaned>)> = vec![
            ("node present", meta(&[]), Some(meta(&[])), true, None),
            ("node gone", meta(&[]), None, true, Some(Orphaned::Gone)),
            (
                "node gone but cache not synced",
                meta(&[]),
                None,
                false,
                None,
            ),
            ("fake NodeImage is kept", meta(&[fake]), None, true, None),
            (
                "fake label with any value is kept",
                meta(&[(FAKE_NODEIMAGE_LABEL, "")]),
                None,
                true,
                None,
            ),
            (
                "node terminating",
                meta(&[]),
                Some(terminating(meta(&[]))),
                true,
                Some(Orphaned::Terminating),
            ),
            (
                "node turned virtual",
                meta(&[]),
                Some(meta(&[VIRTUAL_KUBELET])),
                true,
                Some(Orphaned::Virtual),
            ),
            (
                "NodeImage already being deleted",
                terminating(meta(&[])),
                None,
                true,
                None,
            ),
        ];
        for (name, ni, node, synced, want) in cases {
            assert_eq!(orphaned(&ni, node.as_ref(), synced), want, "{name}");
        }
    }
}
