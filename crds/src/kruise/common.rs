//! Types shared by the OpenKruise kinds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Pod-like metadata attached to CRI pulls, as kubelet attaches its pod sandbox config.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxConfig {
    /// Labels passed to the runtime with each pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Annotations passed to the runtime with each pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// Whether a node pulls an image it already holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPolicy {
    /// Pull even when the image is present, to refresh a moving tag.
    Always,
    /// Succeed at once when the image is present (the default).
    IfNotPresent,
}
