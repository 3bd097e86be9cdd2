//! The gate's bound without a controller: the controller opens a gated
//! Node once `--startup-gate-timeout` has passed since its creation, but a
//! controller that cannot run (every node gated, no pool left to schedule
//! it) would leave the node closed for good. So the node's own daemon, which
//! runs on every node whatever its taints, removes the start-up taint from
//! its own Node a minute after the bound ([`GRACE`]) if it is still there,
//! and says how long its node is overdue (a gauge an alert reads). The
//! decision is [`decide`], pure; [`run`] reads the Node and writes.

use super::look::remove_taint;
use super::node::KubeNode;
pub use super::node::Seen;
use crate::deps::Deps;
use kube::runtime::events::EventType;
use nodeimage_api::gate;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long after the bound the daemon acts: the controller, when it
/// runs, opens the gate first (with the event that names missing images).
pub const GRACE: Duration = Duration::from_secs(60);

/// How often an untainted Node is read again (a Node deleted and
/// registered again carries the taint anew): one GET per node per period.
pub const IDLE_RECHECK: Duration = Duration::from_secs(300);

/// How soon a Node that does not exist is read again: it is being
/// registered (again), and may come with the taint.
pub const ABSENT_RECHECK: Duration = Duration::from_secs(10);

/// Longest wait between two reads of a tainted Node.
pub const TAINTED_RECHECK: Duration = Duration::from_secs(60);

/// What to do after one read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Read again after this long.
    Wait(Duration),
    /// The bound and its grace passed: remove the taint now.
    Open,
}

/// The step for `seen` at `now` (seconds since the epoch) with the gate's
/// `bound`, and the seconds the node is past its bound while tainted.
pub fn decide(seen: Option<Seen>, bound: Duration, now: i64) -> (Step, u64) {
    let Some(seen) = seen else {
        return (Step::Wait(ABSENT_RECHECK), 0);
    };
    let Seen {
        created,
        tainted: true,
    } = seen
    else {
        return (Step::Wait(IDLE_RECHECK), 0);
    };
    // No creation time (never from a real API server): count from now.
    let created = created.unwrap_or(now);
    let bound_at = created.saturating_add(secs(bound));
    let act_at = bound_at.saturating_add(secs(GRACE));
    let overdue = u64::try_from(now.saturating_sub(bound_at)).unwrap_or(0);
    if now >= act_at {
        return (Step::Open, overdue);
    }
    let until = u64::try_from(act_at - now).unwrap_or(0);
    let wait = Duration::from_secs(until).min(TAINTED_RECHECK);
    (Step::Wait(wait.max(Duration::from_secs(1))), overdue)
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// Settings of the bound, from the daemon's flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Key of the start-up taint; empty: off.
    pub taint: String,
    /// The bound, from the Node's creation.
    pub timeout: Duration,
}

/// Keeps the bound on this node until `stop` turns true.
pub async fn run<R>(deps: Arc<Deps<R>>, settings: Settings, mut stop: watch::Receiver<bool>) {
    if settings.taint.is_empty() {
        return;
    }
    let node = KubeNode {
        api: kube::Api::all(deps.client.clone()),
        name: deps.node.clone(),
    };
    loop {
        let wait = match node.gate_state(&settings.taint).await {
            Ok(seen) => {
                let (step, overdue) = decide(seen, settings.timeout, now());
                tracing::debug!(
                    ?seen,
                    ?step,
                    overdue,
                    "start-up gate bound: read this node's Node"
                );
                let gauge = &deps.metrics.startup_gate_overdue_seconds;
                gauge.set(i64::try_from(overdue).unwrap_or(i64::MAX));
                match step {
                    Step::Wait(d) => d,
                    Step::Open => {
                        open(&deps, &node, &settings, overdue).await;
                        Duration::from_secs(1)
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "start-up gate bound: could not read this node's Node");
                TAINTED_RECHECK
            }
        };
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

fn now() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    since.map(secs).unwrap_or(0)
}

/// Removes the taint; says so (log line, metric, Warning event on the Node).
async fn open<R>(deps: &Arc<Deps<R>>, node: &KubeNode, settings: &Settings, overdue: u64) {
    match remove_taint(node, &settings.taint).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "start-up gate bound: could not remove the taint; trying again");
            return;
        }
    }
    deps.metrics.startup_gate_timed_out.inc();
    deps.metrics.startup_gate_overdue_seconds.set(0);
    tracing::warn!(node = %deps.node, taint = %settings.taint, overdue_s = overdue, "start-up gate opened by the node's daemon: the bound passed and no controller opened it");
    let text = format!(
        "Removed taint {} {}s after the start-up gate's bound of {}s: no controller opened it (is nodeimage's controller running?)",
        settings.taint,
        overdue,
        settings.timeout.as_secs()
    );
    super::node::publish_event(deps, EventType::Warning, gate::REASON_TIMEOUT, &text).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEN_MIN: Duration = Duration::from_secs(600);

    fn tainted(created: i64) -> Option<Seen> {
        Some(Seen {
            created: Some(created),
            tainted: true,
        })
    }

    #[test]
    fn the_bound_table() {
        let untainted = Some(Seen {
            created: Some(0),
            tainted: false,
        });
        for (seen, now, want) in [
            (None, 10_000, (Step::Wait(ABSENT_RECHECK), 0)),
            (untainted, 10_000, (Step::Wait(IDLE_RECHECK), 0)),
            // Young: wait, at most a minute at a time.
            (tainted(0), 0, (Step::Wait(TAINTED_RECHECK), 0)),
            (tainted(0), 620, (Step::Wait(Duration::from_secs(40)), 20)),
            // Past the bound, within the grace: the controller goes first.
            (tainted(0), 600, (Step::Wait(TAINTED_RECHECK), 0)),
            (tainted(0), 659, (Step::Wait(Duration::from_secs(1)), 59)),
            // Bound and grace passed: open.
            (tainted(0), 660, (Step::Open, 60)),
            (tainted(0), 5_000, (Step::Open, 4_400)),
            // A node created in the future (skewed clock) waits.
            (tainted(10_000), 0, (Step::Wait(TAINTED_RECHECK), 0)),
            // No creation time: counted from now.
            (
                Some(Seen {
                    created: None,
                    tainted: true,
                }),
                42,
                (Step::Wait(TAINTED_RECHECK), 0),
            ),
        ] {
            assert_eq!(decide(seen, TEN_MIN, now), want, "{seen:?} at {now}");
        }
        assert_eq!(decide(tainted(i64::MAX), Duration::MAX, i64::MAX).1, 0);
    }
}
