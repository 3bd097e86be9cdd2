//! ImageRemovalJob: take named images off a set of nodes, and optionally
//! keep their digests off while the job exists (`block`). Cluster-scoped,
//! for the platform team only; the nodes' work and results live in their
//! NodeImages (docs/removal-design.md).

use crate::limits;
use crate::nodeselector::ImagePullJobNodeSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Remove named images from the nodes a selector picks.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "nodeimage.dev",
    version = "v1alpha1",
    kind = "ImageRemovalJob",
    status = "ImageRemovalJobStatus",
    shortname = "irj",
    category = "prepull",
    doc = "ImageRemovalJob removes the images it names from the nodes it selects, a bounded number of nodes at a time, skipping images in use, the sandbox image and images live pull jobs want; with block it keeps their digests off those nodes while it exists.",
    printcolumn = r#"{"name":"TOTAL","type":"integer","jsonPath":".status.desired","description":"Nodes selected"}"#,
    printcolumn = r#"{"name":"ACTIVE","type":"integer","jsonPath":".status.active","description":"Nodes removing now"}"#,
    printcolumn = r#"{"name":"SUCCEED","type":"integer","jsonPath":".status.succeeded","description":"Nodes where every image is gone"}"#,
    printcolumn = r#"{"name":"KEPT","type":"integer","jsonPath":".status.kept","description":"Nodes that kept an image (in use, or skipped by a rule)"}"#,
    printcolumn = r#"{"name":"FAILED","type":"integer","jsonPath":".status.failed","description":"Nodes that failed"}"#,
    printcolumn = r#"{"name":"BLOCK","type":"boolean","jsonPath":".spec.block","description":"Keeps the digests off the nodes while the job exists"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"MESSAGE","type":"string","jsonPath":".status.message","description":"How far along the job is"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "size(self.images) > 0",
        "message": "spec.images must name at least one image: an empty list removes nothing (there is no 'all images')"
    },
    {
        "rule": "!has(self.block) || !self.block || self.images.all(i, i.contains('@'))",
        "message": "spec.block needs every image in spec.images pinned by digest (name@sha256:...): a tag can move, so a block by tag would block other content tomorrow"
    },
    {
        "rule": "!has(self.block) || !self.block || !has(self.ttlSecondsAfterFinished)",
        "message": "spec.ttlSecondsAfterFinished cannot go with spec.block: deleting the job lifts the block, so a block lasts until the job is deleted by hand"
    },
    {
        "rule": "self == oldSelf",
        "message": "spec is immutable: an ImageRemovalJob cannot change after creation; delete it and create another"
    }
]))]
pub struct ImageRemovalJobSpec {
    /// The images to remove, by tag (`registry.example.com/app:v1`: what
    /// the tag names on each node) or digest (`…/app@sha256:…`: that
    /// manifest in that repository). 1–64 references, no duplicates, no
    /// wildcards.
    #[schemars(schema_with = "removal_images")]
    pub images: Vec<String>,
    /// Which nodes: by name or by node labels (not both), as ImagePullJob's
    /// selector. Unset: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ImagePullJobNodeSelector>,
    /// How many nodes remove at once (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        range(min = 1, max = limits::INT32_MAX),
        extend(
            "default" = 1,
            "x-kubernetes-validations" = [{
                "rule": "self >= 1",
                "message": "spec.parallelism must be at least 1: a removal job with no node at a time would never start"
            }]
        )
    )]
    pub parallelism: Option<i32>,
    /// Limit of the whole job, in seconds; nodes unanswered then count as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = limits::SECONDS_MAX))]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after the job finished before it is deleted (not with `block`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = limits::INT32_MAX))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Remove an image even when a live pull entry on the node wants it (the
    /// entry stays; its job may pull the image again). Never overrides the
    /// sandbox image, another's pin, or a container using the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub force: Option<bool>,
    /// Keep the listed digests off the selected nodes while the job exists:
    /// pulls of them fail there naming this job, their pins go, and nodes
    /// that join later are cleaned when their daemon starts. Deleting the
    /// job lifts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = false))]
    pub block: Option<bool>,
}

impl ImageRemovalJobSpec {
    /// Whether the job removes what live pull entries want.
    pub fn forced(&self) -> bool {
        self.force == Some(true)
    }

    /// Whether the job keeps its digests off its nodes while it exists.
    pub fn blocks(&self) -> bool {
        self.block == Some(true)
    }
}

/// `spec.images`: the project's one image reference rule on each item,
/// with a plainer word for wildcards, bounded and without duplicates.
fn removal_images(g: &mut SchemaGenerator) -> Schema {
    let mut item = crate::reference::image_schema(g);
    let wildcard = json!({
        "rule": "!self.contains('*')",
        "message": "spec.images: wildcards ('*') are not accepted; name each image by tag or digest",
    });
    if let Some(Value::Array(rules)) = item.get_mut("x-kubernetes-validations") {
        rules.insert(0, wildcard);
    }
    json_schema!({
        "description": "The images to remove, by tag or digest: 1-64 references, no duplicates, no wildcards.",
        "type": "array",
        "maxItems": limits::REMOVAL_IMAGES_MAX,
        "x-kubernetes-list-type": "set",
        "items": item,
    })
}

/// How far along an ImageRemovalJob is; the per-node results are in the
/// nodes' NodeImages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRemovalJobStatus {
    /// When the job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When every selected node had answered, or the deadline passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Nodes selected.
    #[serde(default)]
    #[schemars(range(min = 0, max = limits::INT32_MAX))]
    pub desired: i32,
    /// Nodes removing now.
    #[serde(default)]
    #[schemars(range(min = 0, max = limits::INT32_MAX))]
    pub active: i32,
    /// Nodes where every image was removed or was not there.
    #[serde(default)]
    #[schemars(range(min = 0, max = limits::INT32_MAX))]
    pub succeeded: i32,
    /// Nodes that kept some image (in use, or skipped by a rule), none failed.
    #[serde(default)]
    #[schemars(range(min = 0, max = limits::INT32_MAX))]
    pub kept: i32,
    /// Nodes where a removal failed, or that did not answer by the deadline.
    #[serde(default)]
    #[schemars(range(min = 0, max = limits::INT32_MAX))]
    pub failed: i32,
    /// Bytes the runtime reported for the images removed, over every node
    /// (saturates at 2^53 − 1).
    #[serde(default)]
    #[schemars(range(min = 0, max = limits::VERSION_MAX))]
    pub bytes_freed: i64,
    /// How far along the job is, or why it is stuck.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
    /// Names of nodes that failed (at most 1,000; `failed` counts them all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = limits::FAILED_NODES_LISTED_MAX))]
    pub failed_nodes: Option<Vec<String>>,
    /// Standard conditions (Complete, Failed, Progressing, and Blocking while
    /// a block is in force), for `kubectl wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::conditions::schema")]
    pub conditions: Option<Vec<Condition>>,
}

/// The condition a block job holds True while its block is in force.
pub const BLOCKING: &str = "Blocking";

#[cfg(test)]
mod tests;
