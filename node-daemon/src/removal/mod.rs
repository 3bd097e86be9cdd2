//! Removing images from this node (ImageRemovalJob, docs/removal-design.md):
//! `decide`, the one rule of what goes and what stays, pure over a snapshot
//! of the node; `run`, the shell that reads the node through the runtime
//! seam, takes this daemon's pins off and removes. Not wired into the sync
//! loop yet: the NodeImage fields that carry removal entries do not exist
//! on this branch.

pub mod decide;
pub mod run;
