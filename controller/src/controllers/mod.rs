//! The controllers, one per resource they reconcile, each with only what is
//! its own: the job kinds (OpenKruise's ImagePullJob and ImageListPullJob,
//! KubeEdge's ImagePrePullJob and NodeUpgradeJob, nodeimage's
//! ImageRemovalJob: a pure `plan` and the
//! `reconcile` that feeds it and applies it through the job shell), and the
//! NodeImage's own two: one NodeImage per Node (`nodemirror`) and the tag
//! entries' lifetime (`housekeeping`: TTLs, nodes that never answer,
//! orphaned status entries); and the node start-up gate (`startupgate`:
//! new nodes take Pods once their gating images are there); and pre-download
//! for native workloads (`predownload`: ImagePullJobs made for a
//! Deployment's, StatefulSet's or DaemonSet's new images); and Eraser's
//! exclusion list of the images nodeimage pins (`eraserlist`).

pub mod eraserlist;
pub mod housekeeping;
pub mod imagelistpulljob;
pub mod imageprepulljob;
pub mod imagepulljob;
pub mod imageremovaljob;
pub mod nodemirror;
pub mod nodeupgradejob;
pub mod predownload;
pub mod startupgate;
