//! The defaults of pull policies and KubeEdge job fields, in one place: the
//! controller fills them in where a field is unset, and the node daemon
//! reads a tag entry's unset pull policy with the same values. (The CRD
//! schemas state the same numbers as `default`s for `kubectl explain`.)

/// Limit of one pull attempt, in seconds, when `pullPolicy.timeoutSeconds` is unset.
pub const PULL_TIMEOUT_SECONDS: i32 = 600;
/// Retries after a failed attempt when `pullPolicy.backoffLimit` is unset.
pub const PULL_BACKOFF_LIMIT: i32 = 3;
/// Node timeout of the KubeEdge kinds when `timeoutSeconds` is unset or 0.
pub const KUBEEDGE_TIMEOUT_SECONDS: i64 = 300;
/// `failureTolerate` of the KubeEdge kinds when unset.
pub const FAILURE_TOLERATE: f64 = 0.1;
