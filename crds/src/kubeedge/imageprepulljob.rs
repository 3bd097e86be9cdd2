//! ImagePrePullJob: KubeEdge's batch image pre-pull over edge nodes.

use super::task::{NodeTaskSpec, PrePullFields};
use super::{ActionFlow, JobState, TaskStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Pre-pull a list of images onto a set of nodes.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha1",
    kind = "ImagePrePullJob",
    status = "ImagePrePullJobStatus",
    shortname = "ippj",
    category = "prepull",
    doc = "ImagePrePullJob pre-pulls a list of images onto the nodes it names or selects, with checks, a concurrency limit and a failure tolerance.",
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".status.state","description":"State of the job (v1alpha1)"}"#,
    printcolumn = r#"{"name":"EVENT","type":"string","jsonPath":".status.event","description":"Step the state refers to (v1alpha1)"}"#,
    printcolumn = r#"{"name":"REASON","type":"string","jsonPath":".status.reason","priority":1}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullJobSpec {
    /// What to pull, where, and how.
    pub image_pre_pull_template: ImagePrePullTemplate,
}

/// What to pull, where, and how.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.nodeNames) && size(self.nodeNames) > 0) != has(self.labelSelector)",
    "message": "exactly one of spec.imagePrePullTemplate.nodeNames and spec.imagePrePullTemplate.labelSelector must be set"
}]))]
pub struct ImagePrePullTemplate {
    /// The images to pre-pull (a repeated image is pulled once).
    #[schemars(schema_with = "crate::reference::image_repeatable_list_schema")]
    pub images: Vec<String>,
    /// Which nodes, checks, tolerance, concurrency and per-node limit.
    #[serde(flatten)]
    pub task: NodeTaskSpec<PrePullFields>,
    /// Secret with registry credentials, as `namespace/name`. It must be of type
    /// kubernetes.io/dockerconfigjson.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::namespaced_secret")]
    pub image_secrets: Option<String>,
    /// Retries of a failed pull on a node (default 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX), extend("default" = 0))]
    pub retry_times: Option<i32>,
}

/// Status of an ImagePrePullJob: v1alpha1's fields and v1alpha2's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullJobStatus {
    /// v1alpha2 phase of the job: Init, InProgress, Completed or Failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// v1alpha2: one entry per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_status: Option<Vec<ImagePrePullNodeStatus>>,
    /// v1alpha1: state, event, action, reason, time.
    #[serde(flatten)]
    pub job: JobState,
    /// v1alpha1: one entry per node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Vec<ImagePrePullStatus>>,
    /// Standard conditions (Complete, Failed, Progressing), for `kubectl wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::conditions::schema")]
    pub conditions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
}

/// The pre-pull status of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullStatus {
    /// The node's task status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_status: Option<TaskStatus>,
    /// One entry per image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_status: Option<Vec<ImageStatus>>,
}

/// The pre-pull status of one image on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    /// The image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// successful or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Why the pull failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// v1alpha2: the pre-pull status of one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePrePullNodeStatus {
    /// Name of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Pending, InProgress, Successful, Failure or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The actions the node ran, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_flow: Option<Vec<ActionFlow>>,
    /// Why the node failed, or other details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// One entry per image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_status: Option<Vec<NodeImageStatus>>,
}

/// v1alpha2: the pull of one image on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageStatus {
    /// The image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Whether it was pulled: "True" or "False".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Why the pull failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
