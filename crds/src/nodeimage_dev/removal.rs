//! What a node reports for one image of a removal entry: the words the
//! daemon writes, the controller counts and the kubectl plugin shows,
//! written once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The outcome of one image of a removal entry on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RemovalResult {
    /// The runtime removed it.
    Removed,
    /// No image on the node answers the reference.
    NotPresent,
    /// A container (running or exited) was created from it; kept.
    InUse,
    /// Kept by a rule (`SkipReason`).
    Skipped,
    /// The runtime refused or failed the removal.
    Failed,
}

impl RemovalResult {
    /// Whether the image is off the node (the node's part is done).
    pub fn is_gone(self) -> bool {
        matches!(self, RemovalResult::Removed | RemovalResult::NotPresent)
    }

    /// Whether the node kept the image on purpose (not a failure).
    pub fn is_kept(self) -> bool {
        matches!(self, RemovalResult::InUse | RemovalResult::Skipped)
    }
}

/// Why a node kept an image a removal entry names, without trying.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SkipReason {
    /// It is the runtime's sandbox (pause) image, which every Pod needs.
    Sandbox,
    /// Someone other than nodeimage pinned it (the runtime, an operator).
    PinnedByOther,
    /// It carries names the job does not list, which CRI RemoveImage would
    /// take with it.
    OtherNames,
    /// A live pull entry on the node wants it, and the job does not force.
    WantedByPull,
}

impl SkipReason {
    /// What the reason means, for the result's message.
    pub fn meaning(self) -> &'static str {
        match self {
            SkipReason::Sandbox => {
                "it is the runtime's sandbox (pause) image, which every Pod needs"
            }
            SkipReason::PinnedByOther => {
                "it is pinned, and not by nodeimage (the runtime or an operator pinned it)"
            }
            SkipReason::OtherNames => {
                "it also carries names this job does not list, and removing it would remove them"
            }
            SkipReason::WantedByPull => {
                "a live pull entry on this node wants it (set force to remove it anyway)"
            }
        }
    }
}
