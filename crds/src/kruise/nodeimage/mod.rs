//! NodeImage: the per-node list of images to hold, and what the node reports.
//!
//! This is the one contract between the cluster and a node: the controller
//! and users write tag entries into `spec` ([`spec`]), the node daemon
//! writes `status` ([`status`]). The rules both sides follow live in
//! [`contract`] (which entry answers which, when a phase is final, which
//! refused writes mean "read again"), the writes that carry them in
//! [`patch`]; every consumer (controller, daemon, kubectl plugin, the tests'
//! simulator) calls these instead of restating them.

pub mod contract;
pub mod patch;
pub mod pins;
mod purpose;
pub mod salvage;
mod spec;
mod status;

// The rules and writes under the paths they had before this module was
// split, for callers not yet switched to `contract::` and `patch::` (the
// node daemon, and the e2e tests in tests/tests/nodeimage.rs).
pub use contract::{is_failed_test, status_for_spec};
pub use patch::{StatusGuard, guarded_status_patch, guarded_status_patch_with, images_patch};
pub use spec::{
    AgentUse, FAKE_NODEIMAGE_LABEL, ImageSpec, ImageTagPullPolicy, ImageTagSpec, NodeImage,
    NodeImageSpec, Purpose, ReferenceObject, SECRET_REFERENCES_ANNOTATION, SharedPolicy, TagP2p,
    TagUpgrade, WaveRole, requester_key,
};
pub use status::{
    ImagePullPhase, ImageStatus, ImageTagStatus, NodeImageStatus, SyncStatus, TagStatusFields,
    TagUpgradeStatus, UpgradeState,
};

#[cfg(test)]
mod tests;
