//! Where a pod template can be scheduled, as kube-scheduler's filters decide
//! it from the Node alone: `nodeSelector`, required node affinity, taints
//! against tolerations (NoSchedule and NoExecute), cordoned nodes, and a
//! Ready condition. Pre-download pulls onto these nodes beside the nodes
//! of the workload's Pods, so that new Pods find their images wherever they
//! land. Resources, ports, volumes and inter-pod (anti-)affinity depend on
//! what else runs there and are not judged: a node that passes here may
//! still be refused by the scheduler. Pure.

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PodSpec, Taint, Toleration,
};
use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The taint kube-scheduler treats a cordoned node (`spec.unschedulable`) as carrying.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// What of a pod template decides the nodes it may land on, and how many
/// such nodes (beyond those of its Pods) pre-download pulls onto. Carried
/// as JSON in a pre-download job's annotation
/// (`nodeimage_api::predownload::PLACEMENT_ANNOTATION`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// The template's `nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// The template's required node affinity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required: Option<NodeSelector>,
    /// The template's tolerations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// At most this many nodes beyond those of the workload's Pods.
    pub max_extra_nodes: u32,
}

impl Placement {
    /// The placement of a pod template's spec, with the bound on extra nodes.
    pub fn of(spec: &PodSpec, max_extra_nodes: u32) -> Self {
        Placement {
            node_selector: spec.node_selector.clone().unwrap_or_default(),
            required: required_affinity(spec),
            tolerations: spec.tolerations.clone().unwrap_or_default(),
            max_extra_nodes,
        }
    }

    /// The annotation's value (JSON).
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads an annotation's value; the error says what is wrong with it.
    pub fn from_annotation(value: &str) -> Result<Self, String> {
        serde_json::from_str(value).map_err(|e| e.to_string())
    }

    /// Why the template cannot land on `node`, or None when it can.
    pub fn misfit(&self, node: &Node) -> Option<Misfit> {
        let labels = node.labels();
        if !ready(node) {
            return Some(Misfit::NotReady);
        }
        if let Some((k, v)) = self
            .node_selector
            .iter()
            .find(|(k, v)| labels.get(*k) != Some(*v))
        {
            return Some(Misfit::NodeSelector(format!("{k}={v}")));
        }
        if let Some(req) = &self.required
            && !req
                .node_selector_terms
                .iter()
                .any(|t| term_matches(t, &node.name_any(), labels))
        {
            return Some(Misfit::Affinity);
        }
        let spec = node.spec.as_ref();
        if spec.and_then(|s| s.unschedulable).unwrap_or(false) {
            let cordon = Taint {
                key: UNSCHEDULABLE_TAINT.into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            };
            if !self.tolerations.iter().any(|t| tolerates(t, &cordon)) {
                return Some(Misfit::Cordoned);
            }
        }
        spec.and_then(|s| s.taints.as_ref())
            .into_iter()
            .flatten()
            .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
            .find(|taint| !self.tolerations.iter().any(|t| tolerates(t, taint)))
            .map(|t| {
                Misfit::Taint(format!(
                    "{}={}:{}",
                    t.key,
                    t.value.as_deref().unwrap_or(""),
                    t.effect
                ))
            })
    }
}

/// The required node affinity of a pod spec, the part placement reads.
pub fn required_affinity(spec: &PodSpec) -> Option<NodeSelector> {
    let node = spec.affinity.as_ref()?.node_affinity.as_ref()?;
    node.required_during_scheduling_ignored_during_execution
        .clone()
}

/// Why a template cannot land on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Misfit {
    /// The node's Ready condition is not True.
    NotReady,
    /// A `nodeSelector` pair the node lacks.
    NodeSelector(String),
    /// No term of the required node affinity matches.
    Affinity,
    /// The node is cordoned and the template does not tolerate it.
    Cordoned,
    /// A taint the template does not tolerate.
    Taint(String),
}

/// Whether the Node's Ready condition is True.
fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
        .is_some_and(|c| c.status == "True")
}

/// A term matches when each of its requirements does; an empty term
/// matches no node (as the scheduler reads it).
fn term_matches(t: &NodeSelectorTerm, name: &str, labels: &BTreeMap<String, String>) -> bool {
    let exprs = t.match_expressions.as_deref().unwrap_or_default();
    let fields = t.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    exprs
        .iter()
        .all(|r| requirement_matches(r, labels.get(&r.key)))
        && fields
            .iter()
            .all(|r| r.key == "metadata.name" && requirement_matches(r, Some(&name.to_string())))
}

/// One requirement against the value the node has for its key.
fn requirement_matches(r: &NodeSelectorRequirement, value: Option<&String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let number = |s: &str| s.trim().parse::<i64>().ok();
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(have), Some(bound)) = (
                value.and_then(|v| number(v)),
                values.first().and_then(|v| number(v)),
            ) else {
                return false;
            };
            if r.operator == "Gt" {
                have > bound
            } else {
                have < bound
            }
        }
        _ => false,
    }
}

/// Whether a toleration tolerates a taint (kube-scheduler's rule).
pub fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    let effect_ok = t
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    if !effect_ok {
        return false;
    }
    let key = t.key.as_deref().unwrap_or("");
    match t.operator.as_deref().unwrap_or("Equal") {
        "Exists" => key.is_empty() || key == taint.key,
        "Equal" | "" => {
            key == taint.key
                && t.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        _ => false,
    }
}

/// The nodes beyond `taken` that `placement` fits, at most its bound, in
/// an order of their own for each `seed` (the workload's UID): two
/// workloads' pre-downloads spread over different nodes, and one
/// workload's choice stays the same from one reconcile to the next.
pub fn extra_nodes<'a>(
    placement: &Placement,
    seed: &str,
    nodes: impl IntoIterator<Item = &'a Node>,
    taken: &std::collections::BTreeSet<String>,
) -> Vec<String> {
    let mut fit: Vec<(u64, String)> = nodes
        .into_iter()
        .filter(|n| placement.misfit(n).is_none())
        .map(|n| n.name_any())
        .filter(|n| !taken.contains(n))
        .map(|n| (rank(seed, &n), n))
        .collect();
    fit.sort();
    fit.into_iter()
        .take(placement.max_extra_nodes as usize)
        .map(|(_, n)| n)
        .collect()
}

/// A stable pseudo-random rank of `seed/node`: FNV-1a, then splitmix64's
/// finaliser. FNV-1a alone leaves its high bits to the names' common
/// prefix, so sorting by it kept names like `node-0101` … `node-0200`
/// together (the 1,000-node benchmark's first run picked none of them).
fn rank(seed: &str, node: &str) -> u64 {
    let h = format!("{seed}/{node}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

#[cfg(test)]
mod tests;
