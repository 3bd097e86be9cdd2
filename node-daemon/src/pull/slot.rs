//! A tag's pull slot: taken in order (counted as waiting meanwhile), held
//! while the tag pulls (counted as in flight), given back while it waits
//! for a registry that rate-limited the node, so pulls from other
//! registries are not held up, and taken again after.

use super::{deadline_message, sleep_until};
use crate::deps::Deps;
use crate::desired::Target;
use crate::metrics::GaugeGuard;
use crate::report::Outcome;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;

/// The slot a tag holds, if any; dropping it gives the slot back.
#[derive(Default)]
pub(crate) struct SlotHold {
    /// The slot, while held.
    permit: Option<OwnedSemaphorePermit>,
    /// The in-flight count, while held.
    running: Option<GaugeGuard>,
}

/// Why no slot was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoSlot {
    /// The deadline passed in the queue.
    PastDeadline,
    /// The slots were closed (the daemon stops).
    Closed,
}

impl SlotHold {
    /// Waits in order for a slot (or the deadline) and holds it.
    pub(crate) async fn take<R>(
        &mut self,
        deps: &Deps<R>,
        deadline: Option<Instant>,
    ) -> Result<(), NoSlot> {
        if self.permit.is_some() {
            return Ok(());
        }
        let permit = {
            let _waiting = GaugeGuard::new(&deps.metrics.waiting);
            tokio::select! {
                p = deps.slots.clone().acquire_owned() => p.map_err(|_| NoSlot::Closed)?,
                _ = sleep_until(deadline) => return Err(NoSlot::PastDeadline),
            }
        };
        self.permit = Some(permit);
        self.running = Some(GaugeGuard::new(&deps.metrics.in_flight));
        Ok(())
    }

    /// Gives the slot back, if held.
    pub(crate) fn release(&mut self) {
        self.running = None;
        self.permit = None;
    }

    /// Whether the slot is held.
    pub(crate) fn held(&self) -> bool {
        self.permit.is_some()
    }
}

/// The outcome of a tag that got no slot.
pub(crate) fn no_slot_outcome(t: &Target, why: NoSlot) -> Outcome {
    match why {
        NoSlot::PastDeadline => {
            Outcome::failed("deadline", deadline_message(t, "waiting for a pull slot"))
        }
        NoSlot::Closed => Outcome::failed("error", "the daemon is stopping"),
    }
}
