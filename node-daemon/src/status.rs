//! The NodeImage status the daemon publishes: one entry per tag in spec, from
//! the live state of its pull, else what status already said for the same
//! version, else Waiting; and counts that always match the entries. Pure.

use crate::desired::TagKey;
use nodeimage_api::kruise::{ImagePullPhase, ImageTagStatus, NodeImage, NodeImageStatus};
use std::collections::BTreeMap;

/// Builds the status to publish; `pin_notes` are the messages of tags whose
/// images the pin budget leaves unpinned (see [`with_pin_note`]), None
/// until the pinning task has said (messages then stay as they are).
pub fn build(
    ni: &NodeImage,
    live: &BTreeMap<TagKey, ImageTagStatus>,
    pin_notes: Option<&BTreeMap<TagKey, String>>,
) -> NodeImageStatus {
    nodeimage_api::kruise::nodeimage::contract::status_for_spec(ni, |image, t, observed| {
        let version = t.version.unwrap_or(0);
        let key = TagKey {
            image: image.to_string(),
            tag: t.tag.to_string(),
            purpose: t.purpose,
        };
        let entry = live
            .get(&key)
            .filter(|l| l.answers(t))
            .or(observed)
            .cloned()
            .unwrap_or_else(|| ImageTagStatus {
                tag: t.tag.clone(),
                purpose: t.purpose,
                phase: ImagePullPhase::Waiting,
                version: Some(version),
                ..Default::default()
            });
        match pin_notes {
            Some(notes) => with_pin_note(entry, notes.get(&key)),
            None => entry,
        }
    })
}

/// A Succeeded tag says why its image is not pinned while the budget leaves
/// it out, and stops saying so once it is pinned again; the phase stays
/// (the pull worked) and no other message is replaced.
fn with_pin_note(mut entry: ImageTagStatus, note: Option<&String>) -> ImageTagStatus {
    if entry.phase != ImagePullPhase::Succeeded {
        return entry;
    }
    match note {
        Some(n) if entry.message.is_none() || entry.says_not_pinned() => {
            entry.message = Some(n.as_str().into());
        }
        None if entry.says_not_pinned() => entry.message = None,
        _ => {}
    }
    entry
}

/// The status write: the NodeImage write contract lives with the API types,
/// where the simulator of tests/src/bin/ni-sim.rs uses it too.
pub use nodeimage_api::kruise::nodeimage::patch::guarded_status_patch_with as guarded_patch_with;

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::interned::SharedStr;
    use nodeimage_api::kruise::ImageStatus;
    use nodeimage_api::kruise::{ImageSpec, ImageTagSpec, NodeImageSpec};

    fn ni(tags: &[(&str, &str, i64)], status: &[(&str, &str, i64, ImagePullPhase)]) -> NodeImage {
        let mut images: BTreeMap<SharedStr, ImageSpec> = BTreeMap::new();
        for (i, t, v) in tags {
            images
                .entry(SharedStr::new(i))
                .or_default()
                .tags
                .push(ImageTagSpec {
                    tag: SharedStr::new(t),
                    version: Some(*v),
                    ..Default::default()
                });
        }
        let mut obj = NodeImage::new(
            "n",
            NodeImageSpec {
                images: Some(images),
                removals: None,
            },
        );
        let mut st: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
        for (i, t, v, p) in status {
            st.entry(SharedStr::new(i))
                .or_default()
                .tags
                .push(ImageTagStatus {
                    tag: SharedStr::new(t),
                    version: Some(*v),
                    phase: *p,
                    ..Default::default()
                });
        }
        obj.status = Some(NodeImageStatus {
            image_statuses: Some(st),
            ..Default::default()
        });
        obj
    }

    fn phases(s: &NodeImageStatus) -> Vec<(String, String, ImagePullPhase)> {
        s.image_statuses
            .iter()
            .flatten()
            .flat_map(|(i, st)| {
                st.tags
                    .iter()
                    .map(move |t| (i.to_string(), t.tag.to_string(), t.phase))
            })
            .collect()
    }

    #[test]
    fn entries_come_from_live_then_observed_then_waiting() {
        use ImagePullPhase::*;
        let obj = ni(
            &[("a", "1", 0), ("a", "2", 1), ("b", "1", 0), ("c", "1", 0)],
            &[
                ("a", "2", 1, Succeeded),
                ("b", "1", 5, Failed),
                ("gone", "1", 0, Failed),
            ],
        );
        let live = BTreeMap::from([
            (
                TagKey {
                    image: "a".into(),
                    tag: "1".into(),
                    purpose: nodeimage_api::kruise::Purpose::Pull,
                },
                ImageTagStatus {
                    tag: "1".into(),
                    phase: Pulling,
                    version: Some(0),
                    progress: Some(40),
                    ..Default::default()
                },
            ),
            (
                TagKey {
                    image: "c".into(),
                    tag: "1".into(),
                    purpose: nodeimage_api::kruise::Purpose::Pull,
                },
                // Live state of an older version is ignored.
                ImageTagStatus {
                    tag: "1".into(),
                    phase: Succeeded,
                    version: Some(7),
                    ..Default::default()
                },
            ),
        ]);
        let s = build(&obj, &live, None);
        assert_eq!(
            phases(&s),
            vec![
                ("a".into(), "1".into(), Pulling),
                ("a".into(), "2".into(), Succeeded),
                ("b".into(), "1".into(), Waiting),
                ("c".into(), "1".into(), Waiting),
            ]
        );
        assert_eq!(
            (s.desired, s.waiting, s.pulling, s.succeeded, s.failed),
            (4, Some(2), Some(1), Some(1), Some(0))
        );
        let patch = guarded_patch_with(
            &obj,
            &s,
            nodeimage_api::kruise::nodeimage::patch::StatusGuard::Entries,
        );
        assert_eq!(patch[0]["op"], "test");
        let last = patch.as_array().and_then(|ops| ops.last());
        let written = last.map(|op| &op["value"]);
        assert_eq!(
            last.map(|op| &op["path"]),
            Some(&serde_json::json!("/status"))
        );
        assert!(written.is_some_and(|w| w["imageStatuses"].get("gone").is_none()));
        assert!(written.is_some_and(|w| w["imageStatuses"]["a"].is_object()));
    }

    #[test]
    fn empty_spec_gives_zero_counts() {
        let s = build(&ni(&[], &[]), &BTreeMap::new(), None);
        assert_eq!(s.desired, 0);
        assert_eq!(s.succeeded, Some(0));
        assert!(s.image_statuses.is_none());
    }

    #[test]
    fn a_succeeded_tag_says_why_its_image_is_not_pinned_until_it_is() {
        use ImagePullPhase::*;
        use nodeimage_api::kruise::nodeimage::pins::NotPinned;
        let note = NotPinned::OverBudget { percent: 1.0 }.message();
        let key = |i: &str| TagKey {
            image: i.into(),
            tag: "1".into(),
            purpose: nodeimage_api::kruise::Purpose::Pull,
        };
        let obj = ni(
            &[("a", "1", 0), ("b", "1", 0), ("c", "1", 0), ("d", "1", 0)],
            &[
                ("a", "1", 0, Succeeded),
                ("b", "1", 0, Pulling),
                ("d", "1", 0, Succeeded),
            ],
        );
        let notes = BTreeMap::from([
            (key("a"), note.clone()),
            (key("b"), note.clone()),
            (key("c"), note.clone()),
        ]);
        let s = build(&obj, &BTreeMap::new(), Some(&notes));
        let message = |s: &NodeImageStatus, i: &str| {
            s.image_statuses
                .as_ref()
                .and_then(|m| m.get(i))
                .and_then(|st| st.tags[0].message.as_ref().map(|m| m.to_string()))
        };
        assert_eq!(message(&s, "a"), Some(note.clone()), "Succeeded: says so");
        assert_eq!(message(&s, "b"), None, "still pulling: nothing to pin yet");
        assert_eq!(message(&s, "c"), None, "Waiting");
        assert_eq!(s.succeeded, Some(2), "the phase stays Succeeded");
        // Pinned again: the message goes, from what status said as well.
        let mut written = obj.clone();
        written.status = Some(s);
        // Before the pinning task has said anything (a restart), it stays.
        let kept = build(&written, &BTreeMap::new(), None);
        assert_eq!(message(&kept, "a"), Some(note.clone()));
        let s = build(&written, &BTreeMap::new(), Some(&BTreeMap::new()));
        assert_eq!(message(&s, "a"), None);
        // Another message of a Succeeded tag is left alone.
        let mut other = ImageTagStatus {
            tag: "1".into(),
            phase: Succeeded,
            message: Some("pulled again".into()),
            ..Default::default()
        };
        other = with_pin_note(other, Some(&note));
        assert_eq!(other.message.as_deref(), Some("pulled again"));
        assert_eq!(
            with_pin_note(other, None).message.as_deref(),
            Some("pulled again")
        );
    }
}
