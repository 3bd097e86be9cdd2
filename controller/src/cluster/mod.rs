//! What the controller remembers of the cluster and how it writes back to
//! NodeImages: one cache per kind (`cache`: Nodes in `nodecache`, Pods in
//! `podcache`, the job kinds in `jobcaches`), the one NodeImage cache and
//! its projection (`nodeimages`), the watches that feed them (`watch`), the
//! memory that turns a change into the few jobs it concerns (`wakeups`),
//! undecodable objects (`skipped`) and the one writer of tag entries
//! (`tagwrites`). Each store, its bound and its forget rule are listed in
//! docs/architecture.md ("What the controller remembers").

pub mod cache;
pub mod jobcaches;
pub mod nodecache;
pub mod nodeimages;
pub mod podcache;
pub mod skipped;
pub mod tagwrites;
pub mod wakeups;
pub mod watch;
