//! Test fixtures both KubeEdge kinds' plan tests build their worlds from.

use crate::nodeimage::nodes::NodeInfo;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::ResourceExt;
use nodeimage_api::interned::SharedStr;
use nodeimage_api::kruise::{
    ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImage, NodeImageSpec, NodeImageStatus,
};
use nodeimage_api::kubeedge::{NodeTaskSpec, TaskStatus};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The nodes, node versions and NodeImages a plan test runs over.
pub struct World {
    /// Nodes by name.
    pub nodes: BTreeMap<String, NodeInfo>,
    /// The node agent's version per node (NodeUpgradeJob).
    pub versions: BTreeMap<String, String>,
    /// NodeImages by name.
    pub nodeimages: BTreeMap<String, Arc<NodeImage>>,
}

impl World {
    /// Ready edge nodes `names`, each with the NodeImage `empty` makes for it.
    pub fn ready(names: &[&str], empty: impl Fn(&str) -> Arc<NodeImage>) -> World {
        World {
            nodes: names.iter().map(|n| (n.to_string(), ready(&[]))).collect(),
            versions: BTreeMap::new(),
            nodeimages: names.iter().map(|n| (n.to_string(), empty(n))).collect(),
        }
    }

    /// Puts (or replaces) a NodeImage.
    pub fn set(&mut self, ni: Arc<NodeImage>) -> &mut Self {
        self.nodeimages.insert(ni.name_any(), ni);
        self
    }

    /// Sets a node's agent version.
    pub fn version(&mut self, node: &str, v: &str) -> &mut Self {
        self.versions.insert(node.into(), v.into());
        self
    }
}

/// A node task over the nodes `names`, everything else default.
pub fn on_nodes<P>(names: &[&str]) -> NodeTaskSpec<P> {
    NodeTaskSpec {
        node_names: Some(names.iter().map(|s| s.to_string()).collect()),
        ..Default::default()
    }
}

/// `s` seconds after a fixed instant.
pub fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + s, 0).unwrap_or_default()
}

/// A Ready edge node that gets a NodeImage, with `labels` besides the edge label.
pub fn ready(labels: &[(&str, &str)]) -> NodeInfo {
    let mut n = cloud(labels);
    n.labels.insert(
        crate::engine::rollout::EDGE_NODE_LABEL.into(),
        String::new(),
    );
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
    images: BTreeMap<SharedStr, ImageSpec>,
    statuses: BTreeMap<SharedStr, ImageStatus>,
) -> Arc<NodeImage> {
    let mut ni = NodeImage::new(
        name,
        NodeImageSpec {
            images: Some(images),
            removals: None,
        },
    );
    ni.status = Some(NodeImageStatus {
        image_statuses: Some(statuses),
        ..Default::default()
    });
    Arc::new(ni)
}

/// A NodeImage `name` holding, per (image, entry, report), the tag entry and,
/// where given, the status the node reported for it.
pub fn nodeimage_with(
    name: &str,
    tags: Vec<(String, ImageTagSpec, Option<ImageTagStatus>)>,
) -> Arc<NodeImage> {
    let mut images: BTreeMap<SharedStr, ImageSpec> = BTreeMap::new();
    let mut statuses: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
    for (image, spec, status) in tags {
        if let Some(status) = status {
            statuses
                .entry(image.as_str().into())
                .or_default()
                .tags
                .push(status);
        }
        images.entry(image.into()).or_default().tags.push(spec);
    }
    nodeimage_of(name, images, statuses)
}

/// A tag entry written `created` seconds after [`at`]'s instant, owned by `owner`.
pub fn tag_entry(tag: &str, created: i64, owner: ObjectReference) -> ImageTagSpec {
    ImageTagSpec {
        tag: tag.into(),
        version: Some(0),
        created_at: Some(crate::runtime::clock::api_time(at(created))),
        owner_references: Some(vec![owner].into()),
        ..Default::default()
    }
}

/// (state, event, action, reason) of a node that timed out after `secs`.
pub fn timed_out(secs: u64) -> (String, String, String, String) {
    tuple(
        "Failed",
        "TimeOut",
        "Failure",
        &format!("timed out: the node did not finish within {secs}s"),
    )
}

/// (state, event, action, reason) of a node row.
pub fn sea_of(s: &TaskStatus) -> (String, String, String, String) {
    (
        s.phase.state.clone().unwrap_or_default(),
        s.phase.event.clone().unwrap_or_default(),
        s.phase.action.clone().unwrap_or_default(),
        s.phase.reason.clone().unwrap_or_default(),
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
