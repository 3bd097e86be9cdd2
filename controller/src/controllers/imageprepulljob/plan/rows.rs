//! ImagePrePullJob's per-node rows in v1alpha2's shape, and how far they
//! are summarised to fit the status budget. Pure.

use super::{Summary, state};
use crate::engine::nodetasks::{self, v1alpha2};
use nodeimage_api::kubeedge::{ImagePrePullNodeStatus, ImagePrePullStatus, PrePullNodeImageStatus};

/// The actions of ImagePrePullJob's v1alpha2 flow.
const FLOW: &[v1alpha2::Step] = &[(super::event::CHECK, "Check"), (super::event::PULL, "Pull")];

/// The v1alpha2 `nodeStatus` for the v1alpha1 rows, cut as far as they were.
pub fn v1alpha2_rows(rows: &[ImagePrePullStatus], summary: Summary) -> Vec<ImagePrePullNodeStatus> {
    rows.iter()
        .filter_map(|r| {
            let t = r.node_status.as_ref()?;
            let flow = v1alpha2::action_flow(t, FLOW);
            Some(ImagePrePullNodeStatus {
                node_name: t.node_name.clone(),
                phase: Some(v1alpha2::node_phase(t)),
                action_flow: (summary < Summary::Minimal && !flow.is_empty()).then_some(flow),
                reason: t.phase.reason.clone(),
                image_status: r.image_status.as_ref().map(|images| {
                    images
                        .iter()
                        .map(|i| PrePullNodeImageStatus {
                            image: i.image.clone(),
                            status: Some(v1alpha2::condition_status(
                                i.state.as_deref() == Some(state::SUCCESSFUL),
                            )),
                            reason: i.reason.clone(),
                        })
                        .collect()
                }),
            })
        })
        .collect()
}

/// How far `taken` summarising steps go.
fn summary_of(taken: usize) -> Summary {
    match taken {
        0 => Summary::Full,
        1 => Summary::NoSuccessfulImages,
        2 => Summary::NoImages,
        3 => Summary::Minimal,
        _ => Summary::Tiny,
    }
}

/// Cuts per-node detail, step by step, until the rows fit
/// `budget` bytes; returns how far it went.
pub fn summarise(rows: &mut [ImagePrePullStatus], budget: usize) -> Summary {
    let steps: [fn(&mut ImagePrePullStatus); 4] = [
        |r| {
            if r.node_status
                .as_ref()
                .and_then(|s| s.phase.state.as_deref())
                == Some(state::SUCCESSFUL)
            {
                r.image_status = None;
            }
        },
        |r| r.image_status = None,
        |r| {
            if let Some(s) = r.node_status.as_mut() {
                s.phase.reason = None;
                s.phase.time = None;
            }
        },
        |r| {
            if let Some(s) = r.node_status.as_mut() {
                s.phase.event = None;
                s.phase.action = None;
            }
        },
    ];
    // Both shapes count: the v1alpha1 rows and the v1alpha2 rows made from them.
    let size = |r: &[ImagePrePullStatus], taken: usize| {
        nodetasks::rows_size(r) + nodetasks::rows_size(&v1alpha2_rows(r, summary_of(taken)))
    };
    summary_of(nodetasks::fit(rows, &steps, budget, size))
}
