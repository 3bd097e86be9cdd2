//! A pull from a registry that rate-limited this node (`ratelimit`): the
//! 429 is recorded, counted and logged once; every pull from that registry
//! then waits, `Waiting` with [`ImageTagStatus::rate_limited_message`]
//! (which the controller reads to start fewer pulls from it), without its
//! slot and without spending an attempt, until the wait ends or the tag's
//! deadline does.

use super::deadline_message;
use super::slot::{SlotHold, no_slot_outcome};
use crate::desired::Target;
use crate::metrics::{GaugeGuard, RegistryLabels};
use crate::ratelimit;
use crate::report::{Outcome, Reporter, truncate};
use nodeimage_api::kruise::{ImagePullPhase, ImageTagStatus};
use tokio::time::Instant;

/// Records that the tag's registry rate-limited its pull, which the
/// runtime reported as `message`.
pub(super) fn record<R>(rep: &Reporter<'_, R>, t: &Target, message: &str) {
    let deps = rep.deps;
    let registry = t.image.registry.as_str();
    let said = truncate(ratelimit::what_it_said(message), ratelimit::SAID_MAX);
    let now = Instant::now();
    let until = deps
        .rate_limits
        .limited(registry, &said, ratelimit::retry_after(message), now);
    deps.metrics
        .registry_rate_limited
        .get_or_create(&labels(registry))
        .inc();
    tracing::warn!(
        tag = %rep.key,
        registry,
        wait_seconds = whole_seconds(until, now),
        said = %said,
        "registry rate-limited the pull; waiting without spending an attempt"
    );
}

/// Waits while the tag's registry rate-limits this node, giving back
/// `slot` meanwhile and taking it again after (when one was held); the
/// tag's failure when its deadline comes first or the daemon stops.
pub(super) async fn wait_for_registry<R>(
    rep: &Reporter<'_, R>,
    t: &Target,
    deadline: Option<Instant>,
    slot: &mut SlotHold,
) -> Result<(), Outcome> {
    let deps = rep.deps;
    let registry = t.image.registry.as_str();
    let Some(first) = deps.rate_limits.hold(registry, Instant::now()) else {
        return Ok(());
    };
    let had_slot = slot.held();
    slot.release();
    let _waiting = GaugeGuard::new(
        &deps
            .metrics
            .registry_waiting
            .get_or_create(&labels(registry)),
    );
    let mut hold = Some(first);
    while let Some(h) = hold {
        let now = Instant::now();
        let message =
            ImageTagStatus::rate_limited_message(registry, whole_seconds(h.until, now), &h.said);
        rep.send(ImagePullPhase::Waiting, 0, Some(message));
        if deadline.is_some_and(|d| d <= h.until) {
            super::sleep_until(deadline).await;
            let during = format!("waiting for registry {registry}, which rate-limited the pull");
            return Err(Outcome::failed(
                "deadline",
                format!("{}; last error: {}", deadline_message(t, &during), h.said),
            ));
        }
        tokio::time::sleep_until(h.until).await;
        // Another pull may have been limited again meanwhile.
        hold = deps.rate_limits.hold(registry, Instant::now());
    }
    // The message no longer holds: the tag pulls again, or queues for a slot.
    if had_slot {
        slot.take(deps, deadline)
            .await
            .map_err(|why| no_slot_outcome(t, why))?;
        rep.send(ImagePullPhase::Pulling, 0, None);
    } else {
        rep.send(ImagePullPhase::Waiting, 0, None);
    }
    Ok(())
}

/// The metric labels of `registry`.
fn labels(registry: &str) -> RegistryLabels {
    RegistryLabels {
        registry: registry.to_string(),
    }
}

/// Seconds from `now` to `until`, rounded up (a wait is never shown as 0 s).
fn whole_seconds(until: Instant, now: Instant) -> u64 {
    let left = until.saturating_duration_since(now);
    left.as_secs() + u64::from(left.subsec_nanos() > 0)
}
