//! The KubeEdge node-task kinds, group `operations.kubeedge.io`, version v1alpha1.

pub mod imageprepulljob;
pub mod nodeupgradejob;

pub use imageprepulljob::{
    ImagePrePullJob, ImagePrePullJobSpec, ImagePrePullJobStatus, ImagePrePullStatus,
    ImagePrePullTemplate, ImageStatus as PrePullImageStatus,
};
pub use nodeupgradejob::{
    DEFAULT_UPGRADE_IMAGE, ImageDigestGatter, NodeUpgradeJob, NodeUpgradeJobSpec,
    NodeUpgradeJobStatus, RegistryApi, first_version_in, is_version, kubeedge_version_of_kubelet,
};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Status of one node's task, in the v1alpha1 state/event/action shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Name of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Phase of the node's task, such as Checking, Pulling, Successful or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The step the state refers to: Init, Check, Pull, BackUp, Upgrade, Rollback or TimeOut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Outcome of the step: Success or Failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Why the node failed, or other details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the state last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}
