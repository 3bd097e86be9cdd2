//! Which nodes an ImagePullJob selects: by pods (podSelector), by name,
//! by NodeImage labels, or all. Pure.

use crate::engine::rollout;
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

/// The nodes a job selects, sorted by name; only nodes with a NodeImage count.
pub fn select_nodes(
    job: &ImagePullJob,
    nodeimages: &[Arc<NodeImage>],
    pods: &[PodInfo],
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
        return Ok(out.into_iter().collect());
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
        && select_nodes(job, std::slice::from_ref(ni), &[]).is_ok_and(|s| !s.is_empty())
}
