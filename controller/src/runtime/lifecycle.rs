//! How every controller of this binary runs: the one runner
//! ([`run_controller`]: start, reconcile, error policy, stop, the same log
//! lines for all), the stop signal as a future, and the per-node settings.

use futures::{StreamExt, TryFuture};
use kube::Resource;
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::reflector::ObjectRef;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
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

/// Runs `controller` with `reconcile` and `error_policy` over `state` until
/// `stop` turns true: every controller (the job kinds, housekeeping, the
/// node mirror) starts, reports and stops the same way, logged as `name`.
pub async fn run_controller<K, S, F>(
    name: &'static str,
    controller: Controller<K>,
    reconcile: impl FnMut(Arc<K>, Arc<S>) -> F,
    error_policy: impl Fn(Arc<K>, &F::Error, Arc<S>) -> Action,
    state: Arc<S>,
    stop: watch::Receiver<bool>,
) where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: TryFuture<Ok = Action> + Send + 'static,
    F::Error: std::error::Error + Send + 'static,
{
    tracing::info!("{name} controller starting");
    controller
        .graceful_shutdown_on(stopped(stop))
        .run(reconcile, error_policy, state)
        .for_each(|result| {
            log_outcome(name, result);
            std::future::ready(())
        })
        .await;
    tracing::info!("{name} controller stopped");
}

/// Logs what a controller's run stream reports besides successful
/// reconciles: reconcile errors are logged by the error policy already, and
/// a trigger for an object no longer cached is expected after deletions.
fn log_outcome<K, E, Q>(
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
