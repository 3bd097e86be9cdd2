//! Tags that move: the annotations by which an ImagePullJob (or an
//! ImageListPullJob, whose children carry it on) asks that its tag follow
//! the registry, and those by which the controller says what the job
//! follows. Names only: the rules are the controller's
//! (`engine::followtag`).

/// On an ImagePullJob or ImageListPullJob: how often the controller looks
/// up the tag's digest, as a duration (`10m`, `1h`); at least a minute.
/// Absent: the tag is not followed (as upstream).
pub const FOLLOW_TAG: &str = "nodeimage.dev/follow-tag";

/// Written by the controller on a following job: the manifest digest
/// (`sha256:…`) of the tag at its last successful lookup, which the job's
/// nodes are asked to hold.
pub const FOLLOWED_DIGEST: &str = "nodeimage.dev/followed-digest";

/// Written by the controller on a following job: when (RFC 3339) the tag
/// was last seen to move; every tag entry of the job created before then is
/// pulled again. Absent until the tag first moves.
pub const MOVED_AT: &str = "nodeimage.dev/tag-moved-at";

/// Smallest interval `FOLLOW_TAG` accepts, in seconds.
pub const MIN_INTERVAL_SECONDS: u64 = 60;

/// Largest interval `FOLLOW_TAG` accepts, in seconds (a week).
pub const MAX_INTERVAL_SECONDS: u64 = 7 * 24 * 3600;
