//! Which wanted images keep their pins when the node's pin budget is short:
//! the one rule, pure. Pinned images are bytes kubelet's image GC can never
//! free, so they get at most a share of the image filesystem; the images
//! on the node that the spec wants claim it in rank order (see [`decide`]),
//! and those that do not fit stay on the node unpinned, saying why.

use k8s_openapi::jiff::Timestamp;
use nodeimage_api::kruise::nodeimage::pins::NotPinned;
use std::collections::{BTreeMap, BTreeSet};

/// One image on the node that a tag entry wants, as the rule sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Candidate {
    /// The image reference (as pinned).
    pub reference: String,
    /// Its size as the runtime reports it; None when it reports none (0).
    pub size: Option<u64>,
    /// Listed in the NodeImage's start-up gate note: the node waits for it.
    pub gating: bool,
    /// Wanted by a cluster-scoped job (ImagePrePullJob, NodeUpgradeJob),
    /// which only the platform team can create.
    pub cluster_job: bool,
    /// When the oldest entry wanting it was written, if known.
    pub created_at: Option<Timestamp>,
}

/// The rule's answer for one pass.
#[derive(Debug, Default, PartialEq)]
pub struct Decision {
    /// The images to keep pinned.
    pub pin: BTreeSet<String>,
    /// The images left unpinned, and why.
    pub left_out: BTreeMap<String, NotPinned>,
}

/// The budget in bytes: `percent` of the image filesystem; None when its
/// size is unknown (or reported as 0).
pub fn budget_bytes(capacity: Option<u64>, percent: f64) -> Option<u64> {
    let capacity = capacity.filter(|c| *c > 0)?;
    // An f64 holds any disk size to well within a byte per GiB; the cast
    // saturates.
    Some((capacity as f64 * percent / 100.0).floor() as u64)
}

/// The order in which images claim the budget: gating images first, then
/// those of cluster-scoped jobs, then the oldest entry first (an unknown
/// age last), then by reference.
fn rank(c: &Candidate) -> (bool, bool, bool, Option<Timestamp>, &str) {
    (
        !c.gating,
        !c.cluster_job,
        c.created_at.is_none(),
        c.created_at,
        &c.reference,
    )
}

/// Walks the candidates in rank order; each one whose size fits in what
/// is left of `budget` is pinned, one that does not fit is left out and the
/// walk goes on (a smaller image after it may still fit). An image of
/// unknown size is never pinned (it cannot be counted); with no budget
/// (the image filesystem's size unknown) nothing is. `percent` is only
/// for the messages.
pub fn decide(candidates: &[Candidate], budget: Option<u64>, percent: f64) -> Decision {
    let mut ranked: Vec<&Candidate> = candidates.iter().collect();
    ranked.sort_by(|a, b| rank(a).cmp(&rank(b)));
    let mut left = budget;
    let mut d = Decision::default();
    for c in ranked {
        let verdict = match (c.size, left) {
            (None, _) => Err(NotPinned::UnknownSize),
            (_, None) => Err(NotPinned::UnknownCapacity),
            (Some(size), Some(room)) if size <= room => {
                left = Some(room - size);
                Ok(())
            }
            (Some(_), Some(_)) => Err(NotPinned::OverBudget { percent }),
        };
        match verdict {
            Ok(()) => {
                d.pin.insert(c.reference.clone());
            }
            Err(why) => {
                d.left_out.insert(c.reference.clone(), why);
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, size, gating, cluster job, created at second).
    type Row = (&'static str, Option<u64>, bool, bool, Option<i64>);

    fn candidates(rows: &[Row]) -> Vec<Candidate> {
        rows.iter()
            .map(|(r, size, gating, cluster_job, at)| Candidate {
                reference: r.to_string(),
                size: *size,
                gating: *gating,
                cluster_job: *cluster_job,
                created_at: at.and_then(|s| Timestamp::from_second(s).ok()),
            })
            .collect()
    }

    #[test]
    fn the_budget_goes_by_rank_and_what_does_not_fit_is_left_out() {
        let over = NotPinned::OverBudget { percent: 40.0 };
        // (case, candidates, budget, pinned, left out)
        type Case = (
            &'static str,
            Vec<Row>,
            Option<u64>,
            Vec<&'static str>,
            Vec<(&'static str, NotPinned)>,
        );
        let cases: Vec<Case> = vec![
            (
                "all fit",
                vec![
                    ("a", Some(10), false, false, Some(1)),
                    ("b", Some(20), false, false, Some(2)),
                ],
                Some(30),
                vec!["a", "b"],
                vec![],
            ),
            (
                "the oldest entry first",
                vec![
                    ("new", Some(10), false, false, Some(9)),
                    ("old", Some(10), false, false, Some(1)),
                ],
                Some(15),
                vec!["old"],
                vec![("new", over)],
            ),
            (
                "a cluster-scoped job's image before an older namespaced one",
                vec![
                    ("ns", Some(10), false, false, Some(1)),
                    ("ippj", Some(10), false, true, Some(9)),
                ],
                Some(10),
                vec!["ippj"],
                vec![("ns", over)],
            ),
            (
                "a gating image before everything",
                vec![
                    ("ippj", Some(10), false, true, Some(1)),
                    ("gate", Some(10), true, false, Some(9)),
                ],
                Some(10),
                vec!["gate"],
                vec![("ippj", over)],
            ),
            (
                "ties by reference; an unknown age last",
                vec![
                    ("b", Some(10), false, false, Some(5)),
                    ("a", Some(10), false, false, Some(5)),
                    ("undated", Some(10), false, false, None),
                ],
                Some(20),
                vec!["a", "b"],
                vec![("undated", over)],
            ),
            (
                "a smaller image after one that does not fit still fits",
                vec![
                    ("big", Some(100), false, false, Some(1)),
                    ("small", Some(5), false, false, Some(2)),
                ],
                Some(50),
                vec!["small"],
                vec![("big", over)],
            ),
            (
                "an image exactly the size of what is left fits",
                vec![
                    ("a", Some(30), false, false, Some(1)),
                    ("b", Some(20), false, false, Some(2)),
                ],
                Some(50),
                vec!["a", "b"],
                vec![],
            ),
            (
                "an unknown size is never pinned and takes nothing",
                vec![
                    ("nosize", None, true, true, Some(1)),
                    ("b", Some(20), false, false, Some(2)),
                ],
                Some(20),
                vec!["b"],
                vec![("nosize", NotPinned::UnknownSize)],
            ),
            (
                "an unknown image filesystem pins nothing",
                vec![
                    ("a", Some(1), true, false, Some(1)),
                    ("nosize", None, false, false, Some(2)),
                ],
                None,
                vec![],
                vec![
                    ("a", NotPinned::UnknownCapacity),
                    ("nosize", NotPinned::UnknownSize),
                ],
            ),
            ("nothing wanted", vec![], Some(0), vec![], vec![]),
        ];
        for (name, rows, budget, pin, left_out) in cases {
            let d = decide(&candidates(&rows), budget, 40.0);
            assert_eq!(
                d,
                Decision {
                    pin: pin.iter().map(|s| s.to_string()).collect(),
                    left_out: left_out.iter().map(|(r, w)| (r.to_string(), *w)).collect(),
                },
                "{name}"
            );
        }
    }

    #[test]
    fn the_budget_is_a_share_of_a_known_filesystem() {
        let cases = [
            (Some(1000), 40.0, Some(400)),
            (Some(1000), 100.0, Some(1000)),
            (Some(1000), 0.05, Some(0)),
            (Some(270_553_174_016), 0.5, Some(1_352_765_870)),
            (Some(u64::MAX), 100.0, Some(u64::MAX)),
            (Some(0), 40.0, None),
            (None, 40.0, None),
        ];
        for (capacity, percent, want) in cases {
            assert_eq!(
                budget_bytes(capacity, percent),
                want,
                "{capacity:?} at {percent}%"
            );
        }
    }
}
