//! Reads this node's NodeImage even when parts of it do not decode (a value
//! stored before a schema bound existed, a hand-edited field of the wrong
//! type): every entry that decodes is served, and each one that does not
//! becomes a task that fails with the decoder's reason (the salvage rule is
//! the API crate's `kruise::nodeimage::salvage`, which the controller's
//! cache follows too). Pure: no I/O here.

use crate::desired::{PullTask, TagKey};
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::kruise::nodeimage::salvage;
use nodeimage_api::lenient::Lenient;
use std::collections::BTreeMap;

/// A NodeImage as far as it decodes, and why each other entry does not.
#[derive(Debug)]
pub struct Decoded {
    /// The object, with undecodable entries reduced to their tag and version.
    pub nodeimage: NodeImage,
    /// The reason of each entry that does not decode.
    pub invalid: BTreeMap<TagKey, String>,
    /// The reason of each removal entry that does not decode, by job name
    /// (such entries are left out of `nodeimage`).
    pub invalid_removals: BTreeMap<String, String>,
}

/// Decodes what the watch delivered, salvaging entry by entry if needed.
pub fn nodeimage(l: Lenient<NodeImage>) -> Decoded {
    let salvaged = salvage::lenient(l);
    Decoded {
        nodeimage: salvaged.nodeimage,
        invalid_removals: salvaged.invalid_removals,
        invalid: salvaged
            .invalid
            .into_iter()
            .map(|((image, tag, purpose), reason)| {
                (
                    TagKey {
                        image,
                        tag,
                        purpose,
                    },
                    reason,
                )
            })
            .collect(),
    }
}

/// Makes the task of each undecodable entry fail with its reason.
pub fn mark_invalid(tasks: &mut [PullTask], invalid: &BTreeMap<TagKey, String>) {
    for task in tasks {
        if let Some(reason) = invalid.get(&task.key) {
            task.target = Err(reason.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired;
    use serde_json::{Value, json};

    fn decode(v: Value) -> Decoded {
        nodeimage(Lenient::from_value(v))
    }

    #[test]
    fn bad_entries_fail_alone() {
        let d = decode(json!({
            "metadata": {"name": "node-1"},
            "spec": {"images": {
                "127.0.0.1:5000/test": {"tags": [
                    {"tag": "v1"},
                    {"tag": "v2", "pullPolicy": {"activeDeadlineSeconds": 1e30}},
                    {"tag": "v3", "version": 4294967296u64, "pullPolicy": {"timeoutSeconds": 4294967296u64}},
                ]},
                "127.0.0.1:5000/other": {"pullSecrets": "not-a-list", "tags": [{"tag": "a"}]},
                "127.0.0.1:5000/fine": {"tags": [{"tag": "x"}]},
            }},
            "status": {"desired": 3, "imageStatuses": {
                "127.0.0.1:5000/test": {"tags": [
                    {"tag": "v1", "phase": "Succeeded", "version": 0},
                    {"tag": "v2", "phase": "Exploded"},
                ]},
            }},
        }));
        let key = |i: &str, t: &str| TagKey {
            image: i.into(),
            tag: t.into(),
            purpose: nodeimage_api::kruise::Purpose::Pull,
        };
        // (entry, fails with a reason containing)
        let cases = [
            (key("127.0.0.1:5000/test", "v1"), None),
            (key("127.0.0.1:5000/test", "v2"), Some("tags[1]")),
            (key("127.0.0.1:5000/test", "v3"), Some("4294967296")),
            (key("127.0.0.1:5000/other", "a"), Some("image fields")),
            (key("127.0.0.1:5000/fine", "x"), None),
        ];
        let mut tasks = desired::tasks(&d.nodeimage);
        mark_invalid(&mut tasks, &d.invalid);
        assert_eq!(tasks.len(), cases.len(), "every entry is still a task");
        for (k, want) in cases {
            let task = tasks.iter().find(|t| t.key == k).expect("task for entry");
            match want {
                None => assert!(task.target.is_ok(), "{k}: {:?}", task.target),
                Some(part) => {
                    let reason = task.target.clone().expect_err("fails");
                    assert!(reason.contains(part), "{k}: {reason}");
                }
            }
        }
        // The version of a bad entry is kept, so its status is tied to it.
        let v3 = tasks
            .iter()
            .find(|t| t.key == key("127.0.0.1:5000/test", "v3"))
            .expect("v3");
        assert_eq!(v3.version, 4294967296);
        // Status entries that decode are kept; the others are dropped.
        let reported = desired::reported(&d.nodeimage);
        assert!(reported.contains_key(&key("127.0.0.1:5000/test", "v1")));
        assert!(!reported.contains_key(&key("127.0.0.1:5000/test", "v2")));
    }

    #[test]
    fn a_good_object_is_untouched() {
        let d = decode(json!({
            "metadata": {"name": "node-1"},
            "spec": {"images": {"nginx": {"tags": [{"tag": "1.25"}]}}},
        }));
        assert!(d.invalid.is_empty());
        assert_eq!(d.nodeimage.metadata.name.as_deref(), Some("node-1"));
    }
}
