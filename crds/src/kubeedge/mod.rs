//! The KubeEdge node-task kinds, group `operations.kubeedge.io`, served as
//! v1alpha1 and v1alpha2 (stored, as KubeEdge 1.21+ stores them) with one
//! schema, the union of both: the specs are alike, and each status carries
//! v1alpha1's state/event/action fields beside v1alpha2's phase and
//! per-node action flow, so an object reads in either version and tools of
//! either see the fields they know.

pub mod digest;
pub mod imageprepulljob;
pub mod nodeupgradejob;
pub mod task;

pub use imageprepulljob::{
    ImagePrePullJob, ImagePrePullJobSpec, ImagePrePullJobStatus, ImagePrePullNodeStatus,
    ImagePrePullStatus, ImagePrePullTemplate, ImageStatus as PrePullImageStatus,
    NodeImageStatus as PrePullNodeImageStatus,
};
pub use nodeupgradejob::{
    CONFIRM_ANNOTATION, DEFAULT_UPGRADE_IMAGE, ImageDigestGatter, NodeUpgradeJob,
    NodeUpgradeJobSpec, NodeUpgradeJobStatus, RegistryApi, UpgradeNodeStatus, first_version_in,
    is_version, kubeedge_version_of_kubelet,
};

pub use digest::{UpgradeDigests, go_arch, is_digest, upgrade_digests};
pub use task::{NodeTaskSpec, PrePullFields, TaskFields, UpgradeFields};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Status of one node's task, in the v1alpha1 state/event/action shape.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// Name of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Where the node's task stands: state, event, action, reason, time.
    #[serde(flatten)]
    pub phase: JobState,
}

/// The finalizer KubeEdge's controller-manager puts on ImagePrePullJobs.
pub const IMAGEPREPULLJOB_FINALIZER: &str = "kubeedge.io/imageprepulljob-controller";
/// The finalizer KubeEdge's controller-manager puts on NodeUpgradeJobs.
pub const NODEUPGRADEJOB_FINALIZER: &str = "kubeedge.io/nodeupgradejob-controller";

/// Where a KubeEdge job, or one node's task, stands in v1alpha1's shape:
/// state, event, action, reason and time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobState {
    /// v1alpha1 state, such as Init, Checking, Pulling, Upgrading, Successful or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// The step the state refers to: Init, Check, Pull, BackUp, Upgrade, Rollback or TimeOut.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Outcome: Success or Failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Why it failed, how far along it is, or other details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the state last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// One action a node ran, in v1alpha2's per-node `actionFlow`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ActionFlow {
    /// The action: Check or Pull (ImagePrePullJob); Check, WaitingConfirmation,
    /// BackUp, Upgrade or RollBack (NodeUpgradeJob).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Whether it succeeded: "True" or "False".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Why it failed, or other details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it finished (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
}

/// v1alpha1 states both kinds spell alike, of a job and of one node's task
/// (each kind adds the states of its own steps). Which are final is decided
/// by [`crate::kruise::nodeimage::contract::task_end`].
pub mod state {
    /// Not started yet.
    pub const INIT: &str = "Init";
    /// Done (job: within the failure tolerance).
    pub const SUCCESSFUL: &str = "Successful";
    /// Done with a failure (job: above the failure tolerance).
    pub const FAILED: &str = "Failed";
}

/// v1alpha2 job phases.
pub mod phase {
    /// Nodes selected, none started.
    pub const INIT: &str = "Init";
    /// Nodes working.
    pub const IN_PROGRESS: &str = "InProgress";
    /// Done within the failure tolerance.
    pub const COMPLETED: &str = "Completed";
    /// Done beyond the failure tolerance, or could not start.
    pub const FAILURE: &str = "Failure";
}

/// v1alpha2 node phases.
pub mod node_phase {
    /// Waiting to start.
    pub const PENDING: &str = "Pending";
    /// Working.
    pub const IN_PROGRESS: &str = "InProgress";
    /// Done.
    pub const SUCCESSFUL: &str = "Successful";
    /// Failed.
    pub const FAILURE: &str = "Failure";
    /// Did not report in time.
    pub const UNKNOWN: &str = "Unknown";
}
