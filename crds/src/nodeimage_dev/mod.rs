//! nodeimage's own API, in the domain of every nodeimage label and
//! annotation (`nodeimage.dev`): what neither OpenKruise nor KubeEdge has,
//! such as removing images from nodes. For now the removal entries of a
//! NodeImage and the words of their answers; ImageRemovalJob, which will
//! write them over a selector of nodes, is designed in
//! docs/removal-design.md.

pub mod imageremovaljob;
pub mod nodeentry;
pub mod removal;

pub use imageremovaljob::{ImageRemovalJob, ImageRemovalJobSpec, ImageRemovalJobStatus};
pub use nodeentry::{
    ImageRemoval, NodeRemoval, RemovalEntry, RemovalStatus, RemovalWriter, answer_to,
};
pub use removal::{RemovalResult, SkipReason};

/// The API group of nodeimage's own kinds.
pub const GROUP: &str = "nodeimage.dev";
