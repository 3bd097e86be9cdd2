//! Helpers every controller of this binary runs with: the stop signal as a
//! future, and logging of what a controller's run stream reports.

use kube::runtime::controller;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::watch;

/// Most reconciles the per-node controllers (node mirror, housekeeping) run
/// at once. A (re)list wakes every Node or NodeImage (5,000 at start):
/// unbounded, each wakeup's reconcile and its request are in flight
/// together. The job controllers stay unbounded: a 100-job rollout must not
/// wait behind 16 slow reconciles.
pub const RECONCILE_CONCURRENCY: u16 = 16;

/// The settings of the per-node controllers (node mirror, housekeeping).
pub fn controller_config() -> controller::Config {
    controller::Config::default().concurrency(RECONCILE_CONCURRENCY)
}

/// Resolves once `stop` turns true (or its sender is gone), for
/// `Controller::graceful_shutdown_on`.
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    while !*stop.borrow_and_update() {
        if stop.changed().await.is_err() {
            return;
        }
    }
}

/// Logs what a controller's run stream reports besides successful
/// reconciles: reconcile errors are logged by the error policy already, and
/// a trigger for an object no longer cached is expected after deletions.
pub fn log_outcome<K, E, Q>(
    controller: &'static str,
    result: Result<(ObjectRef<K>, controller::Action), controller::Error<E, Q>>,
) where
    K: kube::Resource,
    E: std::error::Error,
    Q: std::error::Error,
{
    match result {
        Ok(_) => {}
        Err(controller::Error::ObjectNotFound(obj)) => {
            tracing::debug!(controller, object = %obj, "trigger for an object no longer cached");
        }
        Err(controller::Error::ReconcilerFailed(..)) => {}
        Err(error) => tracing::warn!(controller, %error, "controller error"),
    }
}
