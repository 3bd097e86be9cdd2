//! Removing images from this node (ImageRemovalJob, docs/removal-design.md):
//! `decide`, the one rule of what goes and what stays, pure over a snapshot
//! of the node; `run`, the shell that reads the node through the runtime
//! seam, takes this daemon's pins off and removes; `serve`, which runs the
//! NodeImage's removal entries (`spec.removals`) and reports their answers;
//! `block`, which fails pull entries of the digests a block entry names;
//! `verifier`, the same block enforced by containerd on every pull.

pub mod block;
pub mod decide;
pub mod run;
pub mod serve;
pub mod verifier;
