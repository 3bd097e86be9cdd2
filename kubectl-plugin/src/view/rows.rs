//! The rows of a view: one per node, from the NodeImage tag entries the job
//! owns and the node's answer to each, then corrected by the job's own
//! record of its nodes. Which entry answers which, and which phases and
//! KubeEdge states are final, is the NodeImage contract's to say.

use super::{ImageRow, NodeRow, Phase};
use kube::ResourceExt;
use nodeimage_api::kruise::nodeimage::contract::{TaskEnd, task_end};
use nodeimage_api::kruise::{
    AgentUse, ImagePullPhase, ImageTagSpec, ImageTagStatus, NodeImage, TagP2p, WaveRole,
};
use nodeimage_api::kubeedge::TaskStatus;
use std::collections::{BTreeMap, BTreeSet};

/// Rows of the nodes whose NodeImage has tag entries owned by one of `owners`.
pub(super) fn rows_from_nodeimages(
    nodeimages: &[NodeImage],
    owners: &BTreeSet<String>,
) -> BTreeMap<String, NodeRow> {
    let mut rows = BTreeMap::new();
    for ni in nodeimages {
        let mut images = Vec::new();
        for (image, spec) in ni.spec.images.iter().flatten() {
            for tag in spec.tags.iter().filter(|t| owned(t, owners)) {
                let status = ni.status.as_ref().and_then(|s| s.entry_for(image, tag));
                images.push(image_row(image, tag, status));
            }
        }
        if !images.is_empty() {
            let node = ni.name_any();
            rows.insert(node.clone(), node_row(node, images));
        }
    }
    rows
}

fn owned(tag: &ImageTagSpec, owners: &BTreeSet<String>) -> bool {
    tag.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid.as_ref().is_some_and(|u| owners.contains(u)))
}

/// `name:tag`, or `name@digest` when the tag is a digest.
pub(super) fn reference(image: &str, tag: &str) -> String {
    let is_digest = tag
        .split_once(':')
        .is_some_and(|(alg, hex)| !alg.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()));
    if is_digest {
        format!("{image}@{tag}")
    } else {
        format!("{image}:{tag}")
    }
}

fn image_row(image: &str, tag: &ImageTagSpec, status: Option<&ImageTagStatus>) -> ImageRow {
    let pull = status.map_or(ImagePullPhase::Waiting, |s| s.phase);
    let progress = match pull {
        ImagePullPhase::Succeeded => 100,
        _ => status.and_then(|s| s.progress).unwrap_or(0).clamp(0, 100),
    };
    ImageRow {
        image: reference(image, &tag.tag),
        phase: pull.into(),
        progress,
        image_id: status
            .and_then(|s| s.image_id.as_deref().map(String::from))
            .filter(|s| !s.is_empty()),
        message: status
            .and_then(|s| s.message.as_deref().map(String::from))
            .filter(|s| !s.is_empty()),
        upgrade_state: status
            .and_then(|s| s.upgrade_state())
            .map(|u| u.to_string()),
        p2p: tag.p2p.as_deref().and_then(p2p_text),
    }
}

/// A tag's P2P start in a few words: `seed zone=a` (from the registry),
/// `peers(2) zone=a` (two nodes of its domain held the image), then
/// `agent` (its agent was Ready) or `direct` (it was not, within the wait).
pub(super) fn p2p_text(p: &TagP2p) -> Option<String> {
    let wave = p.wave.map(|w| match (w, p.holders) {
        (WaveRole::Seed, _) => "seed".to_string(),
        (WaveRole::Peers, Some(n)) => format!("peers({n})"),
        (WaveRole::Peers, None) => "peers".to_string(),
    });
    let agent = p.agent.map(|a| match a {
        AgentUse::Ready => "agent",
        AgentUse::Direct => "direct",
    });
    let parts: Vec<String> = [wave, p.domain.clone(), agent.map(String::from)]
        .into_iter()
        .flatten()
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}

fn node_row(node: String, images: Vec<ImageRow>) -> NodeRow {
    let all_finished = images.iter().all(|i| i.phase.finished());
    let phase = if all_finished {
        if images.iter().any(|i| i.phase == Phase::Failed) {
            Phase::Failed
        } else {
            Phase::Succeeded
        }
    } else if images.iter().any(|i| i.phase == Phase::Pulling) {
        Phase::Pulling
    } else {
        Phase::Waiting
    };
    let total: i64 = images.iter().map(|i| i64::from(i.progress)).sum();
    let progress = i32::try_from(total / i64::try_from(images.len().max(1)).unwrap_or(1))
        .unwrap_or(0)
        .clamp(0, 100);
    let image_id = match images.as_slice() {
        [one] => one.image_id.clone(),
        _ => None,
    };
    let message = images
        .iter()
        .find(|i| i.phase == Phase::Failed && i.message.is_some())
        .or_else(|| images.iter().find(|i| i.message.is_some()))
        .and_then(|i| i.message.clone())
        .or_else(|| {
            images
                .iter()
                .find_map(|i| i.upgrade_state.as_ref().map(|u| format!("upgrade: {u}")))
        });
    let p2p = images.iter().find_map(|i| i.p2p.clone());
    NodeRow {
        node,
        phase,
        progress,
        image_id,
        message,
        images,
        p2p,
    }
}

/// A row for a node the job lists but that has no entries (yet, or any more).
fn bare_row(node: String, phase: Phase, message: Option<String>) -> NodeRow {
    NodeRow {
        node,
        phase,
        progress: 0,
        image_id: None,
        message,
        images: Vec::new(),
        p2p: None,
    }
}

/// Marks the nodes an OpenKruise job records as failed.
pub(super) fn mark_failed<'a>(
    rows: &mut BTreeMap<String, NodeRow>,
    nodes: impl Iterator<Item = &'a String>,
) {
    for node in nodes {
        let row = rows.entry(node.clone()).or_insert_with(|| {
            let message = Some("failed (recorded in the job's status)".into());
            bare_row(node.clone(), Phase::Failed, message)
        });
        row.phase = Phase::Failed;
    }
}

/// Applies a KubeEdge job's per-node record: final states win, and nodes the
/// job lists without entries yet show as Pending.
pub(super) fn apply_task_statuses<'a>(
    rows: &mut BTreeMap<String, NodeRow>,
    nodes: impl Iterator<Item = &'a TaskStatus>,
) {
    for t in nodes {
        let Some(node) = t.node_name.clone().filter(|n| !n.is_empty()) else {
            continue;
        };
        let row = rows
            .entry(node.clone())
            .or_insert_with(|| bare_row(node, Phase::Pending, None));
        match task_end(t.phase.state.as_deref()) {
            Some(TaskEnd::Successful) => {
                row.phase = Phase::Succeeded;
                row.progress = 100;
            }
            Some(TaskEnd::Failed) => {
                row.phase = Phase::Failed;
                if let Some(reason) = t.phase.reason.clone().filter(|r| !r.is_empty()) {
                    row.message = Some(reason);
                }
            }
            None => {}
        }
    }
}
