//! Status tells the truth about images that leave the node. A tag reported
//! Succeeded says its image is on the node; kubelet's image GC (on a
//! runtime without pins), `crictl rmi` or a cleaned disk can take it away
//! afterwards. The sync loop asks CRI `ImageStatus` for every such tag
//! every `--presence-check-seconds`; an image gone while its entry still
//! wants it is counted (`nodeimage_daemon_images_lost_total`), announced
//! (Warning event `ImageLost`) and pulled again, at most [`MAX_REPULLS`]
//! times per entry version, so a fight with kubelet's GC shows and ends:
//! after that the tag fails with the reason.
//!
//! State: how often each entry version lost its image, owned by the sync
//! loop and forgotten when the entry leaves the spec or changes version.

use crate::desired::{PullTask, Reported, TagKey};
use nodeimage_api::kruise::ImagePullPhase;
use std::collections::{BTreeMap, BTreeSet};

/// Pulls again after an image left, per entry version.
pub const MAX_REPULLS: u32 = 3;

/// A tag whose image should be on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The entry.
    pub key: TagKey,
    /// The entry's version.
    pub version: i64,
    /// The reference CRI knows the image by.
    pub reference: String,
}

/// Tags to look for: pulls (not upgrades) whose status says Succeeded for
/// the entry's version, and that no task is working on now.
pub fn expected(
    tasks: &[PullTask],
    reported: &BTreeMap<TagKey, Reported>,
    busy: &BTreeSet<TagKey>,
) -> Vec<Expected> {
    tasks
        .iter()
        .filter(|t| !busy.contains(&t.key))
        .filter(|t| {
            reported.get(&t.key).is_some_and(|r| {
                r.answers(t) && r.phase() == ImagePullPhase::Succeeded && r.completed()
            })
        })
        .filter_map(|t| {
            let target = t.target.as_ref().ok().filter(|t| t.upgrade.is_none())?;
            Some(Expected {
                key: t.key.clone(),
                version: t.version,
                reference: target.image.pull_ref(),
            })
        })
        .collect()
}

/// What to do about an image that left the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Pull it again; this is the n-th time.
    Repull(u32),
    /// It left more than [`MAX_REPULLS`] times: fail the tag.
    GiveUp(u32),
}

/// Remembers how often each entry version lost its image.
#[derive(Debug, Default)]
pub struct Losses(BTreeMap<(TagKey, i64), u32>);

impl Losses {
    /// Counts a loss and says what to do.
    pub fn record(&mut self, key: &TagKey, version: i64) -> Lost {
        let n = self.0.entry((key.clone(), version)).or_default();
        *n = n.saturating_add(1);
        if *n <= MAX_REPULLS {
            Lost::Repull(*n)
        } else {
            Lost::GiveUp(*n)
        }
    }

    /// Forgets entries no longer in the spec at their version.
    pub fn retain(&mut self, tasks: &[PullTask]) {
        let live: BTreeSet<(&TagKey, i64)> = tasks.iter().map(|t| (&t.key, t.version)).collect();
        self.0.retain(|(k, v), _| live.contains(&(k, *v)));
    }
}

/// The message a tag shows while its lost image is pulled again.
pub fn repull_note(n: u32) -> String {
    format!(
        "the image left the node (kubelet's image GC or a removal by hand); pulling it again ({n} of {MAX_REPULLS})"
    )
}

/// The failure of a tag whose image kept leaving.
pub fn give_up_message(n: u32) -> String {
    format!(
        "the image left the node {n} times after it was pulled (kubelet's image GC or a removal by hand); not pulled again for this entry version"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired;
    use nodeimage_api::kruise::NodeImage;

    fn nodeimage(spec: serde_json::Value, status: serde_json::Value) -> NodeImage {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {"name": "n1"},
            "spec": {"images": spec},
            "status": {"imageStatuses": status},
        }))
        .expect("valid NodeImage")
    }

    #[test]
    fn only_finished_succeeded_pulls_of_the_current_version_are_expected() {
        let ni = nodeimage(
            serde_json::json!({
                "r/a": {"tags": [{"tag": "v1", "version": 2}]},
                "r/b": {"tags": [{"tag": "v1", "version": 1}]},
                "r/c": {"tags": [{"tag": "v1"}]},
                "r/d": {"tags": [{"tag": "v1"}]},
                "r/e": {"tags": [{"tag": "v1"}]},
            }),
            serde_json::json!({
                "r/a": {"tags": [{"tag": "v1", "version": 2, "phase": "Succeeded", "completionTime": "2026-11-26T10:00:00Z"}]},
                "r/b": {"tags": [{"tag": "v1", "version": 0, "phase": "Succeeded", "completionTime": "2026-11-26T10:00:00Z"}]},
                "r/c": {"tags": [{"tag": "v1", "phase": "Failed", "completionTime": "2026-11-26T10:00:00Z"}]},
                "r/d": {"tags": [{"tag": "v1", "phase": "Pulling"}]},
                "r/e": {"tags": [{"tag": "v1", "phase": "Succeeded", "completionTime": "2026-11-26T10:00:00Z"}]},
            }),
        );
        let tasks = desired::tasks(&ni);
        let reported = desired::reported(&ni);
        let busy: BTreeSet<TagKey> = tasks
            .iter()
            .filter(|t| t.key.image == "r/e")
            .map(|t| t.key.clone())
            .collect();
        let got: Vec<String> = expected(&tasks, &reported, &busy)
            .into_iter()
            .map(|e| e.reference)
            .collect();
        assert_eq!(got, ["docker.io/r/a:v1"]);
    }

    #[test]
    fn a_lost_image_is_pulled_again_a_bounded_number_of_times() {
        let key = TagKey {
            image: "r/a".into(),
            tag: "v1".into(),
            purpose: nodeimage_api::kruise::Purpose::Pull,
        };
        let mut losses = Losses::default();
        let got: Vec<Lost> = (0..5).map(|_| losses.record(&key, 1)).collect();
        assert_eq!(
            got,
            [
                Lost::Repull(1),
                Lost::Repull(2),
                Lost::Repull(3),
                Lost::GiveUp(4),
                Lost::GiveUp(5)
            ]
        );
        assert_eq!(
            losses.record(&key, 2),
            Lost::Repull(1),
            "a new version starts over"
        );
        losses.retain(&[]);
        assert_eq!(
            losses.record(&key, 1),
            Lost::Repull(1),
            "forgotten with its entry"
        );
    }
}
