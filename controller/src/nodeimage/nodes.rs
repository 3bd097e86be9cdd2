//! What a Node means to the controller, shared by the node mirror and the
//! job kinds: whether it gets a NodeImage, when a NodeImage has outlived
//! its Node, and what the plans read of it.

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use nodeimage_api::kruise::FAKE_NODEIMAGE_LABEL;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The skipped labels in force: set once at start from the flag (owner:
/// `lib::run`; never changes afterwards), else the defaults.
static SKIPPED: OnceLock<Vec<(String, String)>> = OnceLock::new();

/// Sets which Node labels get no NodeImage; the first call wins (at start).
pub fn skip_nodes_labelled(labels: Vec<(String, String)>) {
    let _ = SKIPPED.set(labels);
}

/// The start-up gate's taint key in force: set once at start from the flag
/// (owner: `lib::run`; never changes afterwards); empty: the gate is off.
static GATE_TAINT: OnceLock<String> = OnceLock::new();

/// Sets the start-up gate's taint key; the first call wins (at start).
pub fn gate_taint_key(key: String) {
    let _ = GATE_TAINT.set(key);
}

/// The start-up gate's taint key ("" when the gate is off).
pub fn gate_taint() -> &'static str {
    GATE_TAINT.get_or_init(|| nodeimage_api::gate::DEFAULT_TAINT_KEY.to_string())
}

/// Whether a Node carries the start-up gate's taint (the gate being on).
pub fn is_gated(n: &Node) -> bool {
    let key = gate_taint();
    !key.is_empty()
        && nodeimage_api::gate::has_taint(n.spec.as_ref().and_then(|s| s.taints.as_deref()), key)
}

fn skipped() -> &'static [(String, String)] {
    SKIPPED.get_or_init(|| {
        crate::flags::DEFAULT_SKIPPED_NODE_LABELS
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    })
}

/// Whether a Node should have a NodeImage: not skipped (virtual, Fargate,
/// Windows by default) and not being deleted.
pub fn wants_nodeimage(node: &ObjectMeta) -> bool {
    wants_nodeimage_given(node, skipped())
}

/// [`wants_nodeimage`] with the skipped labels given: the rule itself.
pub fn wants_nodeimage_given(node: &ObjectMeta, skip: &[(String, String)]) -> bool {
    let labels = node.labels.as_ref();
    let skipped = skip
        .iter()
        .any(|(k, v)| labels.and_then(|l| l.get(k)).is_some_and(|x| x == v));
    !skipped && node.deletion_timestamp.is_none()
}

/// Why a NodeImage is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Orphaned {
    /// No Node of that name exists.
    Gone,
    /// The Node is being deleted.
    Terminating,
    /// The Node gets no NodeImage: skipped by label (virtual, Fargate or
    /// Windows by default; `--skip-nodes-labelled`).
    Virtual,
}

impl Orphaned {
    /// Short text for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Orphaned::Gone => "node gone",
            Orphaned::Terminating => "node terminating",
            Orphaned::Virtual => "node is skipped by label (virtual, Fargate or Windows)",
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

/// The KubeEdge version a Node reports (`kubeletVersion` ending in
/// `-kubeedge-vX.Y.Z`), which NodeUpgradeJob compares with its target.
pub fn kubeedge_version(n: &Node) -> Option<String> {
    let v = &n.status.as_ref()?.node_info.as_ref()?.kubelet_version;
    nodeimage_api::kubeedge::kubeedge_version_of_kubelet(v)
}

/// Keeps only what the plans read of a Node: labels, deletion, creation
/// time, the Ready condition's status, `nodeInfo.kubeletVersion` (where
/// KubeEdge nodes report their version), whether it is cordoned, and the
/// taints that keep Pods off it (NoSchedule and NoExecute: the start-up
/// gate's, and those pre-download's placement reads; `engine::placement`).
pub fn trim_node(n: &mut Node) {
    n.metadata.managed_fields = None;
    n.metadata.annotations = None;
    n.metadata.owner_references = None;
    n.spec = n.spec.take().and_then(|s| {
        let taints: Vec<_> = s
            .taints
            .into_iter()
            .flatten()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .map(|t| k8s_openapi::api::core::v1::Taint {
                time_added: None,
                ..t
            })
            .collect();
        let cordoned = s.unschedulable.filter(|u| *u);
        (!taints.is_empty() || cordoned.is_some()).then(|| NodeSpec {
            taints: (!taints.is_empty()).then_some(taints),
            unschedulable: cordoned,
            ..Default::default()
        })
    });
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
    /// Label key and value of virtual-kubelet nodes.
    pub(crate) const VIRTUAL_KUBELET: (&str, &str) = ("type", "virtual-kubelet");

    pub(crate) fn terminating(mut m: ObjectMeta) -> ObjectMeta {
        m.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{VIRTUAL_KUBELET, meta, terminating};
    use super::*;

    #[test]
    fn skipped_nodes_table() {
        let defaults: Vec<(String, String)> = crate::flags::DEFAULT_SKIPPED_NODE_LABELS
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let gpu = vec![("pool".to_string(), "gpu".to_string())];
        let cases: Vec<(&str, ObjectMeta, &[(String, String)], bool)> = vec![
            (
                "a linux node",
                meta(&[("kubernetes.io/os", "linux")]),
                &defaults,
                true,
            ),
            (
                "virtual-kubelet",
                meta(&[VIRTUAL_KUBELET]),
                &defaults,
                false,
            ),
            (
                "EKS Fargate",
                meta(&[("eks.amazonaws.com/compute-type", "fargate")]),
                &defaults,
                false,
            ),
            (
                "EKS EC2",
                meta(&[("eks.amazonaws.com/compute-type", "ec2")]),
                &defaults,
                true,
            ),
            (
                "Windows",
                meta(&[("kubernetes.io/os", "windows")]),
                &defaults,
                false,
            ),
            ("no labels at all", ObjectMeta::default(), &defaults, true),
            ("terminating", terminating(meta(&[])), &defaults, false),
            (
                "nothing skipped",
                meta(&[("kubernetes.io/os", "windows")]),
                &[],
                true,
            ),
            ("another list", meta(&[("pool", "gpu")]), &gpu, false),
            (
                "another list, a Windows node",
                meta(&[("kubernetes.io/os", "windows")]),
                &gpu,
                true,
            ),
        ];
        for (name, node, skip, want) in cases {
            assert_eq!(wants_nodeimage_given(&node, skip), want, "{name}");
        }
    }

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

    /// A Node as the API server serves it, with every part a kubelet fills
    /// in, so that trimming has something to drop.
    fn full_node(
        labels: serde_json::Value,
        ready: &str,
        kubelet_version: &str,
        deleting: bool,
    ) -> Node {
        let gate = nodeimage_api::gate::DEFAULT_TAINT_KEY;
        let taints = if labels.get("gated").is_some() {
            serde_json::json!([{"key": "k", "effect": "NoSchedule"}, {"key": gate, "effect": "NoSchedule", "value": "x"}])
        } else {
            serde_json::json!([{"key": "k", "effect": "NoSchedule"}])
        };
        let mut node: Node = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "node-1",
                "uid": "5f0c",
                "resourceVersion": "42",
                "creationTimestamp": "2026-11-26T09:00:00Z",
                "labels": labels,
                "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Thing", "name": "t", "uid": "u"}],
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "spec": {"podCIDR": "10.0.0.0/24", "taints": taints},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": ready, "message": "kubelet is posting ready status",
                     "lastHeartbeatTime": "2026-11-26T10:00:00Z",
                     "lastTransitionTime": "2026-11-26T09:00:00Z"},
                    {"type": "DiskPressure", "status": "True"}
                ],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "capacity": {"cpu": "2"},
                "images": [{"names": ["registry.example/app:v1"], "sizeBytes": 1000}],
                "nodeInfo": {
                    "kubeletVersion": kubelet_version, "architecture": "amd64",
                    "bootID": "b", "containerRuntimeVersion": "containerd://1.6",
                    "kernelVersion": "6", "kubeProxyVersion": "", "machineID": "m",
                    "operatingSystem": "linux", "osImage": "Debian", "systemUUID": "s"
                }
            }
        }))
        .expect("a valid Node");
        if deleting {
            node.metadata = terminating(node.metadata);
        }
        node
    }

    /// The Node cache holds trimmed Nodes (`trim_node`, fed by the watch):
    /// every decision that reads a Node must answer the same on the trimmed
    /// copy as on the Node the API server served.
    #[test]
    fn trimming_keeps_every_field_a_decision_reads() {
        use crate::controllers::nodemirror::decide::{Ownership, mirror};
        let (vk, vv) = VIRTUAL_KUBELET;
        let nodes = [
            full_node(serde_json::json!({"zone": "a"}), "True", "v1.33.1", false),
            full_node(serde_json::json!({}), "False", "v1.33.1", false),
            full_node(serde_json::json!({"zone": "b"}), "Unknown", "", false),
            full_node(serde_json::json!({vk: vv}), "True", "v1.33.1", false),
            full_node(
                serde_json::json!({"node-role.kubernetes.io/edge": ""}),
                "True",
                "v1.29.5-kubeedge-v1.20.0",
                false,
            ),
            full_node(serde_json::json!({"zone": "a"}), "True", "v1.33.1", true),
            full_node(serde_json::json!({"gated": "1"}), "False", "v1.33.1", false),
        ];
        let nodeimage = meta(&[("zone", "old")]);
        for full in nodes {
            let mut trimmed = full.clone();
            trim_node(&mut trimmed);
            let name = format!("{:?}", full.metadata.labels);
            assert_eq!(node_info(&trimmed), node_info(&full), "{name}");
            assert_eq!(
                kubeedge_version(&trimmed),
                kubeedge_version(&full),
                "{name}"
            );
            assert_eq!(
                wants_nodeimage(&trimmed.metadata),
                wants_nodeimage(&full.metadata),
                "{name}"
            );
            assert_eq!(
                orphaned(&nodeimage, Some(&trimmed.metadata), true),
                orphaned(&nodeimage, Some(&full.metadata), true),
                "{name}"
            );
            for ni in [None, Some(&nodeimage)] {
                let owned = Ownership::default();
                assert_eq!(
                    mirror(&trimmed.metadata, ni, &owned),
                    mirror(&full.metadata, ni, &owned),
                    "{name}"
                );
            }
            assert_eq!(trimmed.metadata.name, full.metadata.name, "{name}");
            assert_eq!(is_gated(&trimmed), is_gated(&full), "{name}");
            assert_eq!(
                trimmed.metadata.creation_timestamp, full.metadata.creation_timestamp,
                "{name}"
            );
            // What trimming is for: the parts no decision reads are gone.
            let spec = trimmed.spec.as_ref().expect("the taints are kept");
            assert!(spec.pod_cidr.is_none(), "{name}");
            let placement = crate::engine::placement::Placement::default();
            assert_eq!(
                placement.misfit(&trimmed),
                placement.misfit(&full),
                "{name}"
            );
            assert!(trimmed.metadata.managed_fields.is_none());
            let status = trimmed.status.as_ref().expect("status kept");
            assert!(status.images.is_none() && status.addresses.is_none());
            assert_eq!(status.conditions.as_ref().map(Vec::len), Some(1), "{name}");
        }
    }
}
