//! ImagePullJob (one image over a set of nodes) and ImageListPullJob (a list
//! of images, one child ImagePullJob each), as OpenKruise defines them.

use super::common::{ImagePullPolicy, SandboxConfig};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Pull one image onto a set of nodes.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "ImagePullJob",
    namespaced,
    status = "ImagePullJobStatus",
    shortname = "ipj",
    category = "prepull",
    doc = "ImagePullJob pulls one image onto the nodes it selects, a bounded number of nodes at a time.",
    printcolumn = r#"{"name":"TOTAL","type":"integer","jsonPath":".status.desired","description":"Nodes selected"}"#,
    printcolumn = r#"{"name":"ACTIVE","type":"integer","jsonPath":".status.active","description":"Nodes pulling now"}"#,
    printcolumn = r#"{"name":"SUCCEED","type":"integer","jsonPath":".status.succeeded","description":"Nodes that pulled the image"}"#,
    printcolumn = r#"{"name":"FAILED","type":"integer","jsonPath":".status.failed","description":"Nodes that failed"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"MESSAGE","type":"string","jsonPath":".status.message","description":"How far along the job is"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(has(self.selector) && has(self.podSelector))",
        "message": "spec.selector and spec.podSelector are mutually exclusive: set at most one"
    },
    {
        "rule": "!has(self.completionPolicy) || !has(self.completionPolicy.activeDeadlineSeconds) || self.completionPolicy.activeDeadlineSeconds >= ((has(self.pullPolicy) && has(self.pullPolicy.timeoutSeconds)) ? self.pullPolicy.timeoutSeconds : 600)",
        "message": "spec.completionPolicy.activeDeadlineSeconds must not be less than spec.pullPolicy.timeoutSeconds (default 600)"
    },
    {
        "rule": "(has(self.pullSecrets) ? self.pullSecrets : []) == (has(oldSelf.pullSecrets) ? oldSelf.pullSecrets : [])",
        "message": "spec.pullSecrets is immutable"
    }
]))]
pub struct ImagePullJobSpec {
    /// The image to pull, such as `nginx:1.25` or `registry.example.com/app@sha256:…`.
    #[schemars(schema_with = "crate::reference::image_schema")]
    pub image: String,
    /// Where and how to pull.
    #[serde(flatten)]
    pub template: ImagePullJobTemplate,
}

/// Where and how to pull; shared by ImagePullJob and ImageListPullJob.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobTemplate {
    /// Names of Secrets in the job's namespace with registry credentials.
    /// Cannot change after creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::job_pull_secrets")]
    pub pull_secrets: Option<Vec<String>>,
    /// Which nodes pull: by name or by node labels (not both). Unset: every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ImagePullJobNodeSelector>,
    /// Pull on the nodes running active, scheduled pods that match these
    /// labels in the job's namespace. Mutually exclusive with selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::job_pod_selector")]
    pub pod_selector: Option<LabelSelector>,
    /// How many nodes pull at once. An integer (0 pauses the job); no percentages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "default" = 1,
        "x-kubernetes-validations" = [
            {
                "rule": "type(self) == int || !self.endsWith('%')",
                "message": "spec.parallelism does not support percentage values"
            },
            {
                "rule": "type(self) == int || self.endsWith('%') || self.matches('^[0-9]+$')",
                "message": "spec.parallelism must be a valid integer"
            },
            {
                "rule": "type(self) == string || self >= 0",
                "message": "spec.parallelism must be non-negative"
            },
            {
                "rule": "type(self) == string ? (!self.matches('^[0-9]+$') || (size(self) <= 10 && int(self) <= 2147483647)) : self <= 2147483647",
                "message": "spec.parallelism must be at most 2147483647"
            }
        ]
    ))]
    pub parallelism: Option<IntOrString>,
    /// Per-node pull timeout and retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub pull_policy: Option<PullPolicy>,
    /// When the job counts as complete, and how long it lives after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub completion_policy: Option<CompletionPolicy>,
    /// Pod-like metadata passed to the container runtime with each pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,
    /// `IfNotPresent` (default) or `Always`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "IfNotPresent"))]
    pub image_pull_policy: Option<ImagePullPolicy>,
}

pub use crate::nodeselector::ImagePullJobNodeSelector;

/// Per-node pull timeout and retries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullPolicy {
    /// Limit of one pull attempt on a node, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::INT32_MAX), extend("default" = crate::defaults::PULL_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<i32>,
    /// Retries after a failed attempt on a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX), extend("default" = crate::defaults::PULL_BACKOFF_LIMIT))]
    pub backoff_limit: Option<i32>,
}

/// Whether a job completes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum CompletionPolicyType {
    /// Completes when every node has succeeded or failed, or at the deadline.
    #[default]
    Always,
    /// Never completes; nodes pull again about once a day.
    Never,
}

/// When the job counts as complete, and how long it lives after.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.type) || self.type != 'Never' || (!has(self.activeDeadlineSeconds) && !has(self.ttlSecondsAfterFinished))",
    "message": "spec.completionPolicy: activeDeadlineSeconds and ttlSecondsAfterFinished only work with type Always"
}]))]
pub struct CompletionPolicy {
    /// `Always` (default) or `Never`.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "Always"))]
    pub type_: Option<CompletionPolicyType>,
    /// Limit of the whole job, in seconds; nodes unfinished then count as failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::SECONDS_MAX))]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after completion before the job is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// How far along an ImagePullJob is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobStatus {
    /// When the job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Nodes selected.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub desired: i32,
    /// Nodes pulling now.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub active: i32,
    /// Nodes that pulled the image.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub succeeded: i32,
    /// Nodes that failed.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub failed: i32,
    /// How far along the job is, or why it is stuck.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Names of the nodes that failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_nodes: Option<Vec<String>>,
    /// Standard conditions (Complete, Failed, Progressing), for `kubectl wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::conditions::schema")]
    pub conditions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
}

/// Pull a list of images onto a set of nodes, one child ImagePullJob per image.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "ImageListPullJob",
    namespaced,
    status = "ImageListPullJobStatus",
    shortname = "ilpj",
    category = "prepull",
    doc = "ImageListPullJob pulls a list of images onto the nodes it selects through one ImagePullJob per image.",
    printcolumn = r#"{"name":"TOTAL","type":"integer","jsonPath":".status.desired","description":"Images in the list"}"#,
    printcolumn = r#"{"name":"SUCCEEDED","type":"integer","jsonPath":".status.succeeded","description":"Images pulled on every selected node"}"#,
    printcolumn = r#"{"name":"COMPLETED","type":"integer","jsonPath":".status.completed","description":"Images whose job has finished"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "!(has(self.selector) && has(self.podSelector))",
        "message": "spec.selector and spec.podSelector are mutually exclusive: set at most one"
    },
    {
        "rule": "(has(self.pullSecrets) ? self.pullSecrets : []) == (has(oldSelf.pullSecrets) ? oldSelf.pullSecrets : [])",
        "message": "spec.pullSecrets is immutable"
    }
]))]
pub struct ImageListPullJobSpec {
    /// The images to pull (1–255, no duplicates).
    #[schemars(schema_with = "crate::reference::image_list_schema")]
    pub images: Vec<String>,
    /// Where and how to pull; copied into each child ImagePullJob.
    #[serde(flatten)]
    pub template: ImagePullJobTemplate,
}

/// How far along an ImageListPullJob is.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageListPullJobStatus {
    /// When the job started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When every child job had completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Images in the list.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub desired: i32,
    /// Child jobs with nodes pulling.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub active: i32,
    /// Child jobs that have finished.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub completed: i32,
    /// Child jobs that succeeded on every node.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub succeeded: i32,
    /// The children with failed nodes, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_image_statuses: Option<Vec<FailedImageStatus>>,
    /// Standard conditions (Complete, Failed, Progressing), for `kubectl wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::conditions::schema")]
    pub conditions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
}

/// An image whose child job had failures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailedImageStatus {
    /// Name of the child ImagePullJob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_job: Option<String>,
    /// The image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
