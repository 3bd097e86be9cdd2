//! The removal answers the writer holds until they are written: reported by
//! the removal tasks, written at once, and forgotten when their entry
//! leaves the spec.

use super::StatusHandle;
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::kruise::nodeimage::contract::removal_answers;
use nodeimage_api::nodeimage_dev::RemovalStatus;

impl StatusHandle {
    /// Reports a node's answer to a removal entry; written at once.
    pub fn report_removal(&self, answer: RemovalStatus) {
        let mut g = self.lock();
        g.removals.retain(|r| r.job != answer.job);
        g.removals.push(answer);
        self.wake(g, true);
    }

    /// The answer to a removal entry reported and not yet dropped, if any.
    pub fn removal_answer(&self, job: &str, uid: &str) -> Option<RemovalStatus> {
        self.lock()
            .removals
            .iter()
            .find(|r| r.job == job && r.uid == uid)
            .cloned()
    }
}

/// The answers to write on `ni`: the reported ones first, else what its
/// status says; reported answers whose entry left the spec are dropped.
pub(super) fn answers(ni: &NodeImage, live: &mut Vec<RemovalStatus>) -> Option<Vec<RemovalStatus>> {
    let entries = ni.spec.removals.as_deref().unwrap_or_default();
    live.retain(|r| entries.iter().any(|e| r.answers(e)));
    removal_answers(ni, live)
}
