//! The OpenKruise kinds, group `apps.kruise.io` (served as v1alpha1 and v1beta1).

pub mod common;
pub mod imagepulljob;
pub mod nodeimage;

pub use common::{ImagePullPolicy, SandboxConfig};
pub use imagepulljob::{
    CompletionPolicy, CompletionPolicyType, FailedImageStatus, ImageListPullJob,
    ImageListPullJobSpec, ImageListPullJobStatus, ImagePullJob, ImagePullJobNodeSelector,
    ImagePullJobSpec, ImagePullJobStatus, ImagePullJobTemplate, PullPolicy,
};
pub use nodeimage::{
    AgentUse, FAKE_NODEIMAGE_LABEL, ImagePullPhase, ImageSpec, ImageStatus, ImageTagPullPolicy,
    ImageTagSpec, ImageTagStatus, NodeImage, NodeImageSpec, NodeImageStatus, Purpose,
    ReferenceObject, SharedPolicy, SyncStatus, TagP2p, TagStatusFields, TagUpgrade,
    TagUpgradeStatus, UpgradeState, WaveRole,
};

/// The finalizer OpenKruise's controller puts on the jobs it runs; nodeimage
/// lets it go when such a job is deleted.
pub const DELETION_PROTECTION_FINALIZER: &str = "apps.kruise.io/deletion-protection";
