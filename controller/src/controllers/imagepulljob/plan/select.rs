//! Which nodes an ImagePullJob selects: by pods (podSelector, and with a
//! pre-download's placement the nodes its template fits), by name, by
//! NodeImage labels, or all. Pure.

use crate::engine::placement::{self, Placement};
use crate::engine::rollout;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::ResourceExt;
use kube::core::SelectorExt;
use nodeimage_api::kruise::{ImagePullJob, NodeImage};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A pod, as far as node selection cares.
#[derive(Clone, Debug, PartialEq)]
pub struct PodInfo {
    /// Pod labels.
    pub labels: BTreeMap<String, String>,
    /// Node it is scheduled to, if any.
    pub node_name: Option<String>,
    /// Still running or about to (not Succeeded/Failed, not being deleted).
    pub active: bool,
}

/// The nodes a job selects, sorted by name; only nodes with a NodeImage
/// count. A podSelector job lists the nodes of its Pods first, then those
/// its placement annotation adds (see [`placement_nodes`]).
pub fn select_nodes(
    job: &ImagePullJob,
    nodeimages: &[Arc<NodeImage>],
    pods: &[PodInfo],
    nodes: &[Arc<Node>],
) -> Result<Vec<String>, String> {
    let t = &job.spec.template;
    let mut out: BTreeSet<String> = BTreeSet::new();
    let have: BTreeSet<String> = nodeimages.iter().map(|n| n.name_any()).collect();
    if let Some(ps) = &t.pod_selector {
        let sel = rollout::selector(ps.clone()).map_err(|e| format!("invalid podSelector: {e}"))?;
        for p in pods.iter().filter(|p| p.active) {
            if let Some(node) = &p.node_name
                && sel.matches(&p.labels)
                && have.contains(node)
            {
                out.insert(node.clone());
            }
        }
        let extra = placement_nodes(job, nodes, &have, &out)?;
        return Ok(out.into_iter().chain(extra).collect());
    }
    match &t.selector {
        Some(s) if s.names.as_ref().is_some_and(|n| !n.is_empty()) => {
            for n in s.names.iter().flatten() {
                if have.contains(n) {
                    out.insert(n.clone());
                }
            }
        }
        Some(s) => {
            let sel = rollout::selector(LabelSelector {
                match_labels: s.match_labels.clone(),
                match_expressions: s.match_expressions.clone(),
            })
            .map_err(|e| format!("invalid selector: {e}"))?;
            out.extend(
                nodeimages
                    .iter()
                    .filter(|ni| sel.matches(ni.labels()))
                    .map(|ni| ni.name_any()),
            );
        }
        None => out.extend(have),
    }
    Ok(out.into_iter().collect())
}

/// Whether an unfinished job selects `ni` by name or labels (podSelector
/// jobs are woken by their pods instead).
pub fn selects(job: &ImagePullJob, ni: &Arc<NodeImage>) -> bool {
    job.status
        .as_ref()
        .is_none_or(|s| s.completion_time.is_none())
        && job.spec.template.pod_selector.is_none()
        && select_nodes(job, std::slice::from_ref(ni), &[], &[]).is_ok_and(|s| !s.is_empty())
}

/// The nodes a pre-download job's placement annotation adds to those of
/// its Pods (`taken`): the nodes with a NodeImage that its workload's
/// template fits, at most its bound, ranked per workload
/// (`engine::placement`, the rule's home). None without the annotation; an
/// annotation that does not parse fails the job's selection with why.
pub fn placement_nodes(
    job: &ImagePullJob,
    nodes: &[Arc<Node>],
    have: &BTreeSet<String>,
    taken: &BTreeSet<String>,
) -> Result<Vec<String>, String> {
    use nodeimage_api::predownload as names;
    let Some(value) = job.annotations().get(names::PLACEMENT_ANNOTATION) else {
        return Ok(vec![]);
    };
    let p = Placement::from_annotation(value)
        .map_err(|e| format!("invalid annotation {}: {e}", names::PLACEMENT_ANNOTATION))?;
    let seed = job
        .labels()
        .get(names::WORKLOAD_UID_LABEL)
        .cloned()
        .or_else(|| job.uid())
        .unwrap_or_default();
    let with_nodeimage = nodes
        .iter()
        .filter(|n| have.contains(&n.name_any()))
        .map(AsRef::as_ref);
    Ok(placement::extra_nodes(&p, &seed, with_nodeimage, taken))
}
