//! Upper bounds of every number the API accepts, so that nothing the API
//! server admits can overflow the Rust field that holds it or the time
//! arithmetic done with it. The CRD schemas use these; docs/api.md lists them.

/// Largest value of every `int32` field (counts, retries, parallelism,
/// seconds fields typed `int32`): what the Rust `i32` field holds, which is
/// also the limit upstream's Go `int32` fields have.
pub const INT32_MAX: i64 = i32::MAX as i64;

/// Largest value of a seconds field typed `int64` (`activeDeadlineSeconds`,
/// KubeEdge `timeoutSeconds`): 2,147,483,647 s (68 years). Upstream leaves
/// these unbounded; a bound keeps deadline arithmetic (plus grace periods,
/// in milliseconds, from a timestamp) far inside what the clocks can hold.
pub const SECONDS_MAX: i64 = i32::MAX as i64;

/// Largest tag `version` (2^53 − 1): bumped by one per re-pull, read exactly
/// by every JSON client, and far from `i64` overflow.
pub const VERSION_MAX: i64 = (1 << 53) - 1;

/// Most node names a job may list.
pub const NODE_NAMES_MAX: u32 = 10_000;

/// Most pull secrets a job or a NodeImage image may list.
pub const PULL_SECRETS_MAX: u32 = 128;

/// Most labels or expressions in a label selector.
pub const SELECTOR_TERMS_MAX: u32 = 64;

/// Most values in one label selector expression.
pub const SELECTOR_VALUES_MAX: u32 = 256;

/// Most tags one NodeImage image may list.
pub const TAGS_MAX: u32 = 1_024;

/// Most check items a KubeEdge job may list.
pub const CHECK_ITEMS_MAX: u32 = 16;

/// Longest check item name.
pub const CHECK_ITEM_CHARS_MAX: u32 = 64;

/// How a digest is written: `sha256:` and 64 lower-case hex digits.
pub const DIGEST_PATTERN: &str = "^sha256:[0-9a-f]{64}$";

/// Most images one removal entry may list (each is a removal decision on
/// the node, and one result in its status).
pub const REMOVAL_IMAGES_MAX: u32 = 64;

/// Most removal entries one NodeImage may hold: with 64 images each, the
/// most the API server's CEL cost budget admits for the reference rule
/// (10 is refused).
pub const REMOVALS_PER_NODE_MAX: u32 = 8;

/// Most blocked references one node may have at once, over every block job.
pub const BLOCKED_PER_NODE_MAX: u32 = 256;

/// Most node names an ImageRemovalJob's `failedNodes` lists (the count and
/// the message say how many more failed).
pub const FAILED_NODES_LISTED_MAX: u32 = 1_000;
