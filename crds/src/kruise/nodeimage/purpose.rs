//! Which request a NodeImage tag entry carries: the second key of an
//! image's `tags`, beside `tag` (spec and status both name it).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which request a tag entry carries, and so which requesters its status
/// answers (nodeimage extension; the contract in `contract.rs`).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
)]
pub enum Purpose {
    /// Hold the image: ImagePullJob, ImageListPullJob, ImagePrePullJob, or a
    /// hand-written entry. OpenKruise's only meaning.
    #[default]
    Pull,
    /// Pull the image and run the node-agent upgrade it ships (NodeUpgradeJob).
    Upgrade,
}

impl Purpose {
    /// Whether this is the default, [`Purpose::Pull`] (status leaves it out).
    pub fn is_pull(&self) -> bool {
        *self == Purpose::Pull
    }

    /// The name as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Purpose::Pull => "Pull",
            Purpose::Upgrade => "Upgrade",
        }
    }
}
