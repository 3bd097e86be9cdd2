//! When a reconcile looks again, for every controller: after a success, at
//! the plan's due time; after a failure, by the one retry policy (a write
//! conflict soon, to re-plan; any other failure after a while); and while a
//! cache is still being listed.

use crate::runtime::metrics::Metrics;
use kube::runtime::controller::Action;
use nodeimage_api::kruise::nodeimage::contract::is_stale_write;
use std::fmt::Display;
use std::time::Duration;

/// What kind of failure a reconcile ended in, as the retry policy tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// Someone wrote the object between our read and our write: re-plan.
    Conflict,
    /// Anything else.
    Other,
}

impl Failure {
    /// A conflict when `conflict`, else another failure.
    pub fn of(conflict: bool) -> Self {
        if conflict {
            Failure::Conflict
        } else {
            Failure::Other
        }
    }
}

/// What the retry policy reads of a reconcile's error: every controller's
/// error type says here whether it is a stale write or another failure.
pub trait Classify {
    /// A conflict (a write refused because the object moved on) or another failure.
    fn failure(&self) -> Failure;
}

/// How every controller classes a failed API call: a write refused because
/// the object moved on ([`is_stale_write`]) is a conflict, anything else not.
pub fn failure_of(error: &kube::Error) -> Failure {
    Failure::of(matches!(error, kube::Error::Api(s) if is_stale_write(s)))
}

/// How soon a reconcile looks again while a cache is still being listed.
pub const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);
/// How soon after a write conflicted (re-plan); the conflicting write's
/// own watch event usually wakes it sooner.
pub const CONFLICT_RETRY: Duration = Duration::from_secs(1);
/// How soon after any other failure.
pub const ERROR_RETRY: Duration = Duration::from_secs(5);

/// How soon a reconcile that ended in `failure` is tried again.
pub fn retry_after(failure: Failure) -> Duration {
    match failure {
        Failure::Conflict => CONFLICT_RETRY,
        Failure::Other => ERROR_RETRY,
    }
}

/// The retry policy's action for a failed reconcile of `object` (a `kind`):
/// a conflict is a retry, logged at debug level; any other failure is an
/// error, counted in `metrics` and logged as a warning.
pub fn after_failure(
    metrics: &Metrics,
    kind: &'static str,
    object: &dyn Display,
    error: &dyn Display,
    failure: Failure,
) -> Action {
    let wait = retry_after(failure);
    match failure {
        Failure::Conflict => {
            tracing::debug!(kind, %object, %error, "write conflict; re-planning");
        }
        Failure::Other => {
            metrics.error(kind);
            tracing::warn!(kind, %object, %error, retry_s = wait.as_secs(), "reconcile failed; retrying");
        }
    }
    Action::requeue(wait)
}

/// The action after a successful reconcile: look again after `due`, else
/// only when something changes.
pub fn after_success(due: Option<Duration>) -> Action {
    due.map(Action::requeue)
        .unwrap_or_else(Action::await_change)
}

#[cfg(test)]
mod tests;
