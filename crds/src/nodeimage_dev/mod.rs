//! nodeimage's own kinds, group `nodeimage.dev` (the domain of every
//! nodeimage label and annotation): what neither OpenKruise nor KubeEdge
//! has, such as removing images from nodes.

pub mod imageremovaljob;
pub mod nodeentry;
pub mod removal;

pub use imageremovaljob::{ImageRemovalJob, ImageRemovalJobSpec, ImageRemovalJobStatus};
pub use nodeentry::{ImageRemoval, NodeRemoval, RemovalEntry, RemovalStatus, answer_to};
pub use removal::{RemovalResult, SkipReason};

/// The API group of nodeimage's own kinds.
pub const GROUP: &str = "nodeimage.dev";
