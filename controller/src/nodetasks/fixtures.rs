//! Test fixtures both KubeEdge kinds' plan tests build their worlds from.

use crate::nodes::NodeInfo;
use chrono::{DateTime, Utc};
use nodeimage_api::kruise::{ImageSpec, ImageStatus, NodeImage, NodeImageSpec, NodeImageStatus};
use nodeimage_api::kubeedge::TaskStatus;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `s` seconds after a fixed instant.
pub fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap_or_default()
}

/// A Ready edge node that gets a NodeImage, with `labels` besides the edge label.
pub fn ready(labels: &[(&str, &str)]) -> NodeInfo {
    let mut n = cloud(labels);
    n.labels
        .insert(crate::rollout::EDGE_NODE_LABEL.into(), String::new());
    n
}

/// A Ready node that is no edge node, with `labels`.
pub fn cloud(labels: &[(&str, &str)]) -> NodeInfo {
    NodeInfo {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ready: true,
        wants_nodeimage: true,
    }
}

/// A NodeImage `name` holding `images` and reporting `statuses`.
pub fn nodeimage_of(
    name: &str,
    images: BTreeMap<String, ImageSpec>,
    statuses: BTreeMap<String, ImageStatus>,
) -> Arc<NodeImage> {
    let mut ni = NodeImage::new(
        name,
        NodeImageSpec {
            images: Some(images),
        },
    );
    ni.status = Some(NodeImageStatus {
        image_statuses: Some(statuses),
        ..Default::default()
    });
    Arc::new(ni)
}

/// (state, event, action, reason) of a node row.
pub fn sea_of(s: &TaskStatus) -> (String, String, String, String) {
    (
        s.state.clone().unwrap_or_default(),
        s.event.clone().unwrap_or_default(),
        s.action.clone().unwrap_or_default(),
        s.reason.clone().unwrap_or_default(),
    )
}

/// An expected (state, event, action, reason).
pub fn tuple(s: &str, e: &str, a: &str, r: &str) -> (String, String, String, String) {
    (s.into(), e.into(), a.into(), r.into())
}

/// Feeds a plan's status back into the job, as the API would.
pub fn recorded<J: kube::core::object::HasStatus>(mut job: J, status: &J::Status) -> J
where
    J::Status: Clone,
{
    *job.status_mut() = Some(status.clone());
    job
}

/// The task status of node `name` among `tasks`; panics naming the node.
pub fn task_of<'a>(mut tasks: impl Iterator<Item = &'a TaskStatus>, name: &str) -> &'a TaskStatus {
    tasks
        .find(|s| s.node_name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("{name} not in the status"))
}
