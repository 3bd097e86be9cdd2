//! NodeImage: the per-node list of images to hold, and what the node reports.
//!
//! This is the one contract between the cluster and a node: the controller
//! and users write tag entries into `spec`, the node daemon writes `status`.

use super::common::SandboxConfig;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Label that protects a NodeImage without a Node from the node mirror.
pub const FAKE_NODEIMAGE_LABEL: &str = "apps.kruise.io/fake-nodeimage";

/// The images a node should hold.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "NodeImage",
    status = "NodeImageStatus",
    shortname = "ni",
    category = "prepull",
    doc = "NodeImage lists the images one node should hold and reports their pull status. One exists per Node, with the Node's name and labels.",
    printcolumn = r#"{"name":"DESIRED","type":"integer","jsonPath":".status.desired","description":"Number of image tags the node should hold"}"#,
    printcolumn = r#"{"name":"PULLING","type":"integer","jsonPath":".status.pulling","description":"Tags being pulled now"}"#,
    printcolumn = r#"{"name":"SUCCEED","type":"integer","jsonPath":".status.succeeded","description":"Tags pulled successfully"}"#,
    printcolumn = r#"{"name":"FAILED","type":"integer","jsonPath":".status.failed","description":"Tags whose pull failed"}"#,
    printcolumn = r#"{"name":"WAITING","type":"integer","jsonPath":".status.waiting","description":"Tags waiting for a pull slot","priority":1}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageSpec {
    /// Images to pull on this node, keyed by image name without tag
    /// (for example `nginx` or `registry.example.com:5000/team/app`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxProperties" = 256,
        "x-kubernetes-validations" = [{
            "rule": "self.all(name, size(name) > 0)",
            "message": "image names (the keys of spec.images) must not be empty"
        }]
    ))]
    pub images: Option<BTreeMap<String, ImageSpec>>,
}

/// One image (a repository) and the tags of it the node should hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Secrets (of type kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg)
    /// holding registry credentials for this image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secrets: Option<Vec<ReferenceObject>>,
    /// Tags of this image to pull. A tag may also be a digest such as `sha256:…`.
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["tag"]
    ))]
    pub tags: Vec<ImageTagSpec>,
    /// Pod-like metadata passed to the container runtime with each pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,
}

/// A reference to a Secret that holds registry credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceObject {
    /// Namespace of the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// How the Secret is shared (OpenKruise v1beta1 writes `batch` for shared copies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// One tag to pull, with the policy of its pull and who asked for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagSpec {
    /// The tag, or a digest such as `sha256:…`.
    #[schemars(length(min = 1))]
    pub tag: String,
    /// When this entry was written; the controller fills it if missing and
    /// measures the node's response timeout from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// Timeouts, retries and lifetime of this pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub pull_policy: Option<ImageTagPullPolicy>,
    /// The jobs that asked for this tag. When the last one is gone the tag is
    /// removed; a tag with no owners (written by hand) stays until its TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Vec<ObjectReference>>,
    /// Bumped to make the node pull this tag again; status reports which
    /// version it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub version: Option<i64>,
    /// `IfNotPresent` (default: a present image succeeds at once) or `Always`.
    /// Other values fail the tag on the node with a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// nodeimage extension (not in OpenKruise): checks the node runs before
    /// pulling, any of `disk`, `cpu`, `mem`. Written for ImagePrePullJob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("items" = {"type": "string", "enum": ["disk", "cpu", "mem"]}))]
    pub check_items: Option<Vec<String>>,
}

/// Timeouts, retries and lifetime of one tag's pull.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagPullPolicy {
    /// Limit of one pull attempt, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1), extend("default" = 600))]
    pub timeout_seconds: Option<i32>,
    /// Retries after a failed attempt (so at most backoffLimit + 1 attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0), extend("default" = 3))]
    pub backoff_limit: Option<i32>,
    /// Seconds after the pull finished (succeeded or failed) before the
    /// entry is removed from spec and status. Unset: the entry stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Limit of the whole pull, all attempts included, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub active_deadline_seconds: Option<i64>,
}

/// What the node reports about its images.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageStatus {
    /// Number of tags in spec.
    #[serde(default)]
    pub desired: i32,
    /// Tags pulled successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub succeeded: Option<i32>,
    /// Tags whose pull failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<i32>,
    /// Tags being pulled now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pulling: Option<i32>,
    /// Tags waiting for a pull slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<i32>,
    /// Per image name, the status of each tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_statuses: Option<BTreeMap<String, ImageStatus>>,
    /// Whether the daemon's first sync of images already on the node worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sync_status: Option<SyncStatus>,
}

/// Status of the tags of one image.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    /// One entry per tag in spec.
    pub tags: Vec<ImageTagStatus>,
}

/// Phase of one tag's pull.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPhase {
    /// Queued behind other pulls.
    #[default]
    Waiting,
    /// Being pulled.
    Pulling,
    /// Pulled; the image is on the node.
    Succeeded,
    /// Gave up; `message` says why.
    Failed,
}

impl ImagePullPhase {
    /// Whether the pull has finished, successfully or not.
    pub fn is_finished(self) -> bool {
        matches!(self, ImagePullPhase::Succeeded | ImagePullPhase::Failed)
    }
}

/// Status of one tag on the node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagStatus {
    /// The tag (or digest) this entry reports on.
    pub tag: String,
    /// Waiting, Pulling, Succeeded or Failed.
    pub phase: ImagePullPhase,
    /// Percentage of bytes pulled, 0–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub progress: Option<i32>,
    /// When the pull started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the pull finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The spec version this entry answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// Repository digest of what was pulled (`name@sha256:…`).
    #[serde(rename = "imageID", default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Details, such as the registry's reason for a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Result of the daemon's first sync.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// When the sync ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_at: Option<Time>,
    /// Outcome of the sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Details of the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
