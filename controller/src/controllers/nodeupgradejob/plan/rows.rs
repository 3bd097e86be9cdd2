//! NodeUpgradeJob's per-node rows in v1alpha2's shape, and how they are
//! shortened to fit the status budget. Pure.

use super::{event, state};
use crate::engine::nodetasks::{self, rows_size, v1alpha2};
use crate::messages::cap;
use nodeimage_api::kubeedge::{TaskStatus, UpgradeNodeStatus};

/// The actions of NodeUpgradeJob's v1alpha2 flow, by the v1alpha1 event
/// that reports each (nodeimage asks for no confirmation in between).
const FLOW: &[v1alpha2::Step] = &[
    (event::CHECK, "Check"),
    (event::BACKUP, "BackUp"),
    (event::UPGRADE, "Upgrade"),
    (event::ROLLBACK, "RollBack"),
];

/// The rows with their v1alpha2 fields: phase, action flow (a rollback
/// follows a failed upgrade) and, on a node that upgraded, its versions.
pub fn v1alpha2_rows(
    rows: Vec<TaskStatus>,
    version: &str,
    historic: Option<&str>,
) -> Vec<UpgradeNodeStatus> {
    rows.into_iter()
        .map(|task| {
            let mut flow = v1alpha2::action_flow(&task, FLOW);
            let rolled_back = task.phase.event.as_deref() == Some(event::ROLLBACK);
            if let Some(upgrade) = flow
                .iter_mut()
                .find(|a| rolled_back && a.action.as_deref() == Some("Upgrade"))
            {
                upgrade.status = Some(v1alpha2::condition_status(false));
            }
            let upgraded = task.phase.state.as_deref() == Some(state::SUCCESSFUL);
            UpgradeNodeStatus {
                phase: Some(v1alpha2::node_phase(&task)),
                action_flow: (!flow.is_empty()).then_some(flow),
                current_version: upgraded.then(|| version.to_string()),
                historic_version: historic.filter(|_| upgraded).map(str::to_string),
                task,
            }
        })
        .collect()
}

/// Shortens reasons until the rows fit `budget` bytes: successful
/// nodes lose theirs, then failure reasons are cut to 64 characters, then
/// every reason and time goes.
pub fn summarise(rows: &mut [TaskStatus], budget: usize) {
    let steps: [fn(&mut TaskStatus); 3] = [
        |r| {
            if r.phase.state.as_deref() == Some(state::SUCCESSFUL) {
                r.phase.reason = None;
            }
        },
        |r| r.phase.reason = r.phase.reason.as_deref().map(|s| cap(s, 64)),
        |r| {
            r.phase.reason = None;
            r.phase.time = None;
        },
    ];
    // The v1alpha2 fields ride on the same rows, about doubling them.
    nodetasks::fit(rows, &steps, budget, |r, _| 2 * rows_size(r));
}
