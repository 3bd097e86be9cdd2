//! The reconcile skeleton every job kind runs: metrics, the finalizer
//! branch (clean up, then let the job go), waiting for the caches, then the
//! kind's plan; and the error policy.
//!
//! kube's `runtime::finalizer` helper is not used: it removes the finalizer
//! with a JSON Patch `test` of its index and fails on a job already gone,
//! where ours is a merge patch guarded by the resourceVersion that treats a
//! job already gone as released.

use super::requeue::{self, Classify, NOT_SYNCED_RETRY};
use super::{Error, JobKind, JobReconciler};
use crate::cluster::tagwrites;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use std::sync::Arc;

/// Reconciles one job: the finalizer branch, then the kind's plan.
pub async fn reconcile<R: JobReconciler>(job: Arc<R::Job>, r: Arc<R>) -> Result<Action, Error> {
    let shared = r.shared();
    let _timer = shared.ctx.metrics.reconcile(R::Job::KIND);
    let api = R::Job::api(shared.ctx.client.clone(), &job);
    let has_finalizer = job.finalizers().iter().any(|f| f == R::FINALIZER);
    if job.meta().deletion_timestamp.is_some() {
        let upstream = job
            .finalizers()
            .iter()
            .any(|f| R::UPSTREAM_FINALIZERS.contains(&f.as_str()));
        if !has_finalizer && !upstream {
            return Ok(Action::await_change());
        }
        if has_finalizer {
            // Cleanup reads the NodeImage cache: an empty cache that has not
            // been listed yet would release nothing.
            if !shared.nodeimages_synced.get() {
                return Ok(Action::requeue(NOT_SYNCED_RETRY));
            }
            r.cleanup(&job).await?;
        }
        let mut remove = vec![R::FINALIZER];
        remove.extend(R::UPSTREAM_FINALIZERS);
        tagwrites::edit_finalizers(&api, job.as_ref(), None, &remove).await?;
        tracing::info!(kind = R::Job::KIND, job = %ObjectRef::from_obj(job.as_ref()), upstream_finalizers = upstream, "job deleted: its entries are released");
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        tagwrites::set_finalizer(&api, job.as_ref(), R::FINALIZER, true).await?;
        // The patch wakes us again with the new object.
        return Ok(Action::await_change());
    }
    // Selection and counts read the caches: an empty cache that has not
    // been listed yet would mean "no nodes".
    if !r.synced() {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    r.apply(job).await
}

/// Logs the failure and retries: a conflict soon (re-plan), else after a while.
pub fn error_policy<R: JobReconciler>(job: Arc<R::Job>, error: &Error, r: Arc<R>) -> Action {
    retry(job.as_ref(), error, &r.shared().ctx)
}

/// The error policy of every job kind, [`requeue::after_failure`]: a
/// conflict is retried soon (re-plan), any other failure is counted,
/// logged and retried later.
pub fn retry<K: JobKind>(job: &K, error: &Error, ctx: &crate::runtime::context::Context) -> Action {
    let job = ObjectRef::from_obj(job);
    requeue::after_failure(&ctx.metrics, K::KIND, &job, error, error.failure())
}

#[cfg(test)]
mod tests;
