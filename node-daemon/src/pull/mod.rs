//! One tag's pull, the same for the pull worker and the upgrade flow: it
//! takes a share in the image's lease, waits for a pull slot (`slot`; or
//! the deadline), runs the node checks, honours IfNotPresent, pulls as
//! `attempts` paces it (waiting out a registry that rate-limits the node:
//! `ratelimited`), and ends its lease share whatever the outcome.

mod attempts;
mod ratelimited;
mod secrets;
mod slot;
#[cfg(test)]
mod tests;

use crate::checks;
use crate::deps::Deps;
use crate::desired::{PullMode, PullTask, Target};
use crate::metrics::ItemLabels;
use crate::report::{Outcome, Reporter};
use crate::runtime::ContainerRuntime;
use crate::runtime::RuntimeError;
use k8s_openapi::jiff::Timestamp;
use nodeimage_api::kruise::ImagePullPhase;
use nodeimage_api::kruise::nodeimage::contract::DEADLINE_EXCEEDED;
use slot::{SlotHold, no_slot_outcome};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Wait while containerd is unreachable before trying again.
const RUNTIME_RETRY: Duration = Duration::from_secs(2);

/// When a task's pull must end: `activeDeadlineSeconds` after the entry
/// was written.
/// A deadline too far away for the clock to hold is no deadline (None),
/// never a panic.
pub(crate) fn deadline_of(task: &PullTask, target: &Target) -> Option<Instant> {
    target.active_deadline.and_then(|d| {
        let created = task.created_at.unwrap_or_else(Timestamp::now);
        let elapsed =
            Duration::try_from(Timestamp::now().duration_since(created)).unwrap_or(Duration::ZERO);
        Instant::now().checked_add(d.saturating_sub(elapsed))
    })
}

/// Sleeps until `deadline`; for ever without one.
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Why a tag failed on its deadline, and what it was doing then.
pub(crate) fn deadline_message(t: &Target, during: &str) -> String {
    format!(
        "{DEADLINE_EXCEEDED} ({}s) while {during}",
        t.active_deadline.map(|d| d.as_secs()).unwrap_or(0)
    )
}

/// How a pull ended, and how long it ran once it held a slot (None when it
/// never got one).
pub(crate) struct Pulled {
    /// The pull's end.
    pub(crate) outcome: Outcome,
    /// Time from the slot to the end.
    pub(crate) elapsed: Option<Duration>,
}

/// The one pull path of the worker and the upgrade flow: a share in the
/// image's lease while the tag pulls, a slot (or the deadline while queued
/// for one, or while its registry rate-limits this node), `on_slot` once
/// the slot is held, then the pull; the lease share ends on every outcome
/// (an aborted task drops it, and the sync loop ends the lease once the
/// task is gone).
pub(crate) async fn in_slot<'a, R: ContainerRuntime>(
    rep: &mut Reporter<'a, R>,
    t: &Target,
    deadline: Option<Instant>,
    on_slot: impl FnOnce(&mut Reporter<'a, R>),
) -> Pulled {
    let deps = rep.deps;
    let lease = deps.leases.enter(t.image.pull_ref());
    let mut slot = SlotHold::default();
    let pulled = match first_slot(rep, t, deadline, &mut slot).await {
        Ok(()) => {
            let started = Instant::now();
            on_slot(rep);
            let outcome = refuse_blocked(deps, t, pull(rep, t, deadline, &mut slot).await);
            Pulled {
                outcome,
                elapsed: Some(started.elapsed()),
            }
        }
        Err(outcome) => Pulled {
            outcome,
            elapsed: None,
        },
    };
    slot.release();
    // This image's partial blobs are no longer kept (see `resume`), unless
    // another tag naming the same image still pulls it.
    lease.end(&deps.runtime, &deps.node);
    pulled
}

/// A pull that resolved to a digest a block entry names fails, naming the
/// job (a tag the block could not see before the pull); the block sweep
/// then removes the image.
fn refuse_blocked<R>(deps: &Deps<R>, t: &Target, outcome: Outcome) -> Outcome {
    let Outcome::Succeeded { id, .. } = &outcome else {
        return outcome;
    };
    let job = deps.blocked.read().ok().and_then(|b| b.get(id).cloned());
    match job {
        Some(job) => Outcome::failed(
            "blocked",
            crate::removal::block::resolved_message(&job, &t.image.pull_ref(), id),
        ),
        None => outcome,
    }
}

/// The tag's first slot; an Always pull, which will ask the registry, first
/// waits while its registry rate-limits this node (IfNotPresent looks for
/// the image first, and waits only before it asks the registry).
async fn first_slot<R>(
    rep: &Reporter<'_, R>,
    t: &Target,
    deadline: Option<Instant>,
    slot: &mut SlotHold,
) -> Result<(), Outcome> {
    if t.mode == PullMode::Always {
        ratelimited::wait_for_registry(rep, t, deadline, slot).await?;
    }
    slot.take(rep.deps, deadline)
        .await
        .map_err(|why| no_slot_outcome(t, why))
}

/// Runs the entry's node checks (ImagePrePullJob's checkItems), counting a
/// failure by its item; the failure's reason.
pub(crate) async fn run_checks<R: ContainerRuntime>(
    deps: &Deps<R>,
    items: &[String],
) -> Result<(), String> {
    if items.is_empty() {
        return Ok(());
    }
    checks::run(items, &deps.runtime, &deps.thresholds)
        .await
        .map_err(|f| {
            deps.metrics
                .check_failures
                .get_or_create(&ItemLabels { item: f.item })
                .inc();
            f.reason
        })
}

/// Checks, then pulls (unless present and IfNotPresent), with retries.
async fn pull<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    t: &Target,
    deadline: Option<Instant>,
    slot: &mut SlotHold,
) -> Outcome {
    let deps = rep.deps;
    if let Err(reason) = run_checks(deps, &t.check_items).await {
        return Outcome::failed("check", reason);
    }
    if t.mode == PullMode::IfNotPresent
        && let Some(present) = if_present(rep, t, deadline).await
    {
        return present;
    }
    let creds = attempts::Credentials::load(deps, t).await;
    // Partial blobs are kept between attempts and across a restart of the
    // daemon until the tag's pull ends (see `resume`); on CRI alone there
    // is no lease to keep them (and no progress to read).
    let mut keeper = deps.runtime.keeper(&deps.node, &t.image.pull_ref());
    let job = attempts::Pull {
        rep,
        t,
        deadline,
        creds,
    };
    attempts::attempt_pulls(&job, &mut keeper, slot).await
}

/// IfNotPresent: a present image succeeds without contacting the registry.
/// None when it is not present (pull it).
async fn if_present<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    t: &Target,
    deadline: Option<Instant>,
) -> Option<Outcome> {
    let deps = rep.deps;
    let reference = t.image.pull_ref();
    loop {
        let err = match deps.runtime.image_status(&reference).await {
            Ok(Some(img)) => {
                let id = img.repo_digest_for(&t.image.name());
                return Some(Outcome::Succeeded { id, pulled: false });
            }
            Ok(None) => return None,
            Err(e) => e,
        };
        deps.metrics.cri_error("ImageStatus");
        let RuntimeError::Unavailable(m) = err else {
            let message = format!("checking whether {reference} is present: {err}");
            return Some(Outcome::failed("error", message));
        };
        if !wait_for_runtime(rep, &m, deadline).await {
            return Some(unavailable_past_deadline(t));
        }
    }
}

/// Waits out a runtime outage, reporting why; false if the deadline passed.
async fn wait_for_runtime<R>(rep: &Reporter<'_, R>, msg: &str, deadline: Option<Instant>) -> bool {
    rep.send(
        ImagePullPhase::Waiting,
        0,
        Some(format!("{msg}; waiting for containerd")),
    );
    let wake = Instant::now() + RUNTIME_RETRY;
    !matches!(deadline, Some(d) if d <= wake) && {
        tokio::time::sleep_until(wake).await;
        true
    }
}

/// The failure of a tag whose deadline came while the runtime was away.
fn unavailable_past_deadline(t: &Target) -> Outcome {
    Outcome::failed(
        "unavailable",
        deadline_message(t, "containerd was unavailable"),
    )
}

/// Ends the lease of an aborted pull's image once its task is gone (so it
/// cannot hold blobs again), unless another task still pulls the image.
pub(crate) async fn end_lease_when_gone<R: ContainerRuntime>(
    deps: Arc<Deps<R>>,
    task: JoinHandle<()>,
    reference: String,
) {
    let _ = task.await;
    if !deps.leases.in_use(&reference) {
        // Best effort: a lease not ended expires on its own.
        let _ = deps.runtime.end_lease(&deps.node, reference).await;
    }
}
