//! A NodeImage as far as it decodes. A value stored before a schema bound
//! existed, or a hand-edited field of the wrong type, must fail only the
//! entry it sits in: the daemon fails that tag with the reason, and the
//! controller keeps reading and writing every other image of the node while
//! it leaves the image holding the bad entry exactly as stored. Pure: no
//! I/O here.

use super::{
    ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImage, NodeImageSpec,
    NodeImageStatus, Purpose,
};
use crate::interned::SharedStr;
use crate::lenient::Lenient;
use crate::nodeimage_dev::{RemovalEntry, RemovalStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// Annotation on the controller's in-memory copy of a NodeImage (never
/// written to the API server): the image keys holding an entry that does
/// not decode, as a JSON list. The controller's writes leave these images
/// as they are stored.
pub const UNREADABLE_IMAGES: &str = "nodeimage.dev/unreadable-images";

/// Annotation on the controller's in-memory copy of a NodeImage (never
/// written): the removal entries that do not decode, by their `job`, as a
/// JSON list. The controller's writes then leave `spec.removals` as stored.
pub const UNREADABLE_REMOVALS: &str = "nodeimage.dev/unreadable-removals";

/// An entry that does not decode: its image key, its `tag` field (or
/// `<entry N>` when even that is missing) and its `purpose` (Pull unless it
/// reads as another).
pub type EntryKey = (String, String, Purpose);

/// A NodeImage as far as it decodes, and why each other entry does not.
#[derive(Debug)]
pub struct Salvaged {
    /// The object, with each undecodable entry reduced to its tag and version.
    pub nodeimage: NodeImage,
    /// The reason of each entry that does not decode.
    pub invalid: BTreeMap<EntryKey, String>,
    /// The reason of each removal entry that does not decode, by its `job`
    /// field (or `<removal N>`); such entries are left out of `nodeimage`.
    pub invalid_removals: BTreeMap<String, String>,
}

/// Decodes what the API server sent, entry by entry where the whole object
/// does not decode.
pub fn lenient(l: Lenient<NodeImage>) -> Salvaged {
    match l.object {
        Ok(nodeimage) => Salvaged {
            nodeimage,
            invalid: BTreeMap::new(),
            invalid_removals: BTreeMap::new(),
        },
        Err(bad) => salvage(l.metadata, &bad.raw),
    }
}

/// [`lenient`], with the images holding undecodable entries named in
/// [`UNREADABLE_IMAGES`] (and that annotation removed when there are none,
/// whoever wrote it): what the controller keeps in memory.
pub fn marked(l: Lenient<NodeImage>) -> NodeImage {
    marked_explained(l).0
}

/// [`marked`], with one line naming each entry that does not decode and
/// why (None when every entry decodes), for the controller's report.
pub fn marked_explained(l: Lenient<NodeImage>) -> (NodeImage, Option<String>) {
    let Salvaged {
        mut nodeimage,
        invalid,
        invalid_removals,
    } = lenient(l);
    let reasons: Vec<String> = invalid
        .values()
        .chain(invalid_removals.values())
        .cloned()
        .collect();
    let explained = (!reasons.is_empty()).then(|| reasons.join("; "));
    let images: BTreeSet<&str> = invalid.keys().map(|(image, _, _)| image.as_str()).collect();
    let annotations = nodeimage.metadata.annotations.get_or_insert_default();
    match serde_json::to_string(&images) {
        Ok(list) if !images.is_empty() => {
            annotations.insert(UNREADABLE_IMAGES.to_string(), list);
        }
        _ => {
            annotations.remove(UNREADABLE_IMAGES);
        }
    }
    let jobs: Vec<&String> = invalid_removals.keys().collect();
    match serde_json::to_string(&jobs) {
        Ok(list) if !jobs.is_empty() => {
            annotations.insert(UNREADABLE_REMOVALS.to_string(), list);
        }
        _ => {
            annotations.remove(UNREADABLE_REMOVALS);
        }
    }
    (nodeimage, explained)
}

/// The image keys [`marked`] named on `ni`.
pub fn unreadable_images(ni: &NodeImage) -> BTreeSet<String> {
    ni.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(UNREADABLE_IMAGES))
        .and_then(|list| serde_json::from_str(list).ok())
        .unwrap_or_default()
}

/// Whether [`marked`] found a removal entry on `ni` that does not decode
/// (its `spec.removals` is then left as stored).
pub fn removals_unreadable(ni: &NodeImage) -> bool {
    ni.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(UNREADABLE_REMOVALS))
}

/// Puts back into `new` each image that [`marked`] named on `ni`, as it is
/// in `old`: the one rule by which the controller's writes leave an image
/// holding an undecodable entry as stored (the salvaged copy lacks the
/// entry's fields, and writing it would drop them). Returns the images whose
/// edits were undone.
pub fn keep_unreadable(
    ni: &NodeImage,
    old: &BTreeMap<SharedStr, ImageSpec>,
    new: &mut BTreeMap<SharedStr, ImageSpec>,
) -> Vec<String> {
    let mut undone = Vec::new();
    for image in unreadable_images(ni) {
        let key = SharedStr::new(&image);
        let before = old.get(&key);
        if new.get(&key) == before {
            continue;
        }
        match before {
            Some(spec) => new.insert(key, spec.clone()),
            None => new.remove(&key),
        };
        undone.push(image);
    }
    undone
}

/// Every entry of `raw` that decodes; each other one reduced to its tag and
/// version, with its reason.
pub fn salvage(metadata: ObjectMeta, raw: &Value) -> Salvaged {
    let mut invalid = BTreeMap::new();
    let mut images = BTreeMap::new();
    for (name, image) in raw
        .pointer("/spec/images")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Ok(spec) = ImageSpec::deserialize(image) {
            images.insert(SharedStr::new(name), spec);
            continue;
        }
        // Image-level fields (secrets, sandbox) decoded apart from the tags.
        let mut shell = image.clone();
        if let Some(obj) = shell.as_object_mut() {
            obj.insert("tags".into(), Value::Array(Vec::new()));
        }
        let image_level = ImageSpec::deserialize(&shell);
        let mut tags = Vec::new();
        for (i, t) in image
            .get("tags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let tag = t
                .get("tag")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("<entry {i}>"));
            let purpose = t
                .get("purpose")
                .and_then(|p| Purpose::deserialize(p).ok())
                .unwrap_or_default();
            let decoded = match &image_level {
                Ok(_) => ImageTagSpec::deserialize(t).map_err(|e| e.to_string()),
                Err(e) => Err(format!("image fields: {e}")),
            };
            match decoded {
                Ok(spec) => tags.push(spec),
                Err(reason) => {
                    invalid.insert(
                        (name.clone(), tag.clone(), purpose),
                        format!("invalid entry spec.images[{name:?}].tags[{i}]: {reason}"),
                    );
                    tags.push(ImageTagSpec {
                        tag: tag.into(),
                        purpose,
                        version: t.get("version").and_then(Value::as_i64),
                        ..Default::default()
                    });
                }
            }
        }
        let mut spec = image_level.unwrap_or_default();
        spec.tags = tags;
        images.insert(SharedStr::new(name), spec);
    }
    let (removals, invalid_removals) = salvage_removals(raw.pointer("/spec/removals"));
    let status = raw.get("status").map(salvage_status);
    Salvaged {
        nodeimage: NodeImage {
            metadata,
            spec: NodeImageSpec {
                images: Some(images),
                removals,
            },
            status,
        },
        invalid,
        invalid_removals,
    }
}

/// The removal entries that decode, and why each other one does not.
fn salvage_removals(raw: Option<&Value>) -> (Option<Vec<RemovalEntry>>, BTreeMap<String, String>) {
    let Some(list) = raw.and_then(Value::as_array) else {
        return (None, BTreeMap::new());
    };
    let mut good = Vec::new();
    let mut bad = BTreeMap::new();
    for (i, r) in list.iter().enumerate() {
        match RemovalEntry::deserialize(r) {
            Ok(entry) => good.push(entry),
            Err(e) => {
                let job = r
                    .get("job")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("<removal {i}>"));
                bad.insert(job, format!("invalid entry spec.removals[{i}]: {e}"));
            }
        }
    }
    (Some(good), bad)
}

/// The status entries that decode; the daemon rewrites the rest.
fn salvage_status(raw: &Value) -> NodeImageStatus {
    if let Ok(s) = NodeImageStatus::deserialize(raw) {
        return s;
    }
    let removals = raw.get("removals").and_then(Value::as_array).map(|list| {
        list.iter()
            .filter_map(|r| RemovalStatus::deserialize(r).ok())
            .collect()
    });
    let mut statuses = BTreeMap::new();
    for (name, image) in raw
        .get("imageStatuses")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let tags: Vec<ImageTagStatus> = image
            .get("tags")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| ImageTagStatus::deserialize(t).ok())
            .collect();
        statuses.insert(SharedStr::new(name), ImageStatus { tags });
    }
    NodeImageStatus {
        image_statuses: Some(statuses),
        removals,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lenient_of(v: Value) -> Lenient<NodeImage> {
        Lenient::from_value(v)
    }

    #[test]
    fn marks_only_the_images_holding_a_bad_entry() {
        let (ni, explained) = marked_explained(lenient_of(json!({
            "metadata": {"name": "node-1", "annotations": {UNREADABLE_IMAGES: "[\"forged\"]"}},
            "spec": {"images": {
                "bad": {"tags": [{"tag": "v1", "pullPolicy": {"timeoutSeconds": 4294967296u64}}, {"tag": "v2"}]},
                "fine": {"tags": [{"tag": "x"}]},
            }},
        })));
        assert_eq!(
            unreadable_images(&ni),
            BTreeSet::from(["bad".to_string()]),
            "the bad image, and not what the stored annotation said"
        );
        let explained = explained.expect("the bad entry is explained");
        assert!(
            explained.contains(r#"spec.images["bad"].tags[0]"#) && explained.contains("4294967296"),
            "{explained}"
        );
        let images = ni.spec.images.as_ref().expect("images");
        assert_eq!(images["bad"].tags.len(), 2, "both entries kept");
        assert_eq!(images["fine"].tags[0].tag.as_str(), "x");
    }

    #[test]
    fn writes_leave_unreadable_images_as_stored() {
        let ni = marked(lenient_of(json!({
            "metadata": {"name": "node-1"},
            "spec": {"images": {
                "bad": {"tags": [{"tag": "v1", "pullPolicy": {"timeoutSeconds": 4294967296u64}}]},
                "fine": {"tags": [{"tag": "x"}]},
            }},
        })));
        let old = ni.spec.images.clone().expect("images");
        let spec = |tag: &str| ImageSpec {
            tags: vec![ImageTagSpec {
                tag: tag.into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        // (case, edit, images undone, images the write keeps)
        type Edit = fn(&mut BTreeMap<SharedStr, ImageSpec>, &dyn Fn(&str) -> ImageSpec);
        let cases: [(&str, Edit, &[&str], &[&str]); 4] = [
            (
                "another image is added",
                |n, s| {
                    n.insert("new".into(), s("v1"));
                },
                &[],
                &["bad", "fine", "new"],
            ),
            (
                "a fine image is removed",
                |n, _| {
                    n.remove("fine");
                },
                &[],
                &["bad"],
            ),
            (
                "the bad image is edited",
                |n, s| {
                    n.insert("bad".into(), s("v2"));
                },
                &["bad"],
                &["bad", "fine"],
            ),
            (
                "the bad image is removed",
                |n, _| {
                    n.remove("bad");
                },
                &["bad"],
                &["bad", "fine"],
            ),
        ];
        for (case, edit, undone, kept) in cases {
            let mut new = old.clone();
            edit(&mut new, &spec);
            assert_eq!(keep_unreadable(&ni, &old, &mut new), undone, "{case}");
            let keys: Vec<&str> = new.keys().map(SharedStr::as_str).collect();
            assert_eq!(keys, kept, "{case}");
            assert_eq!(new.get("bad"), old.get("bad"), "{case}: bad as read");
        }
    }

    #[test]
    fn a_good_object_carries_no_mark_even_if_stored_with_one() {
        let ni = marked(lenient_of(json!({
            "metadata": {"name": "node-1", "annotations": {UNREADABLE_IMAGES: "[\"fine\"]"}},
            "spec": {"images": {"fine": {"tags": [{"tag": "x"}]}}},
        })));
        assert!(unreadable_images(&ni).is_empty());
        assert!(
            !ni.metadata
                .annotations
                .unwrap_or_default()
                .contains_key(UNREADABLE_IMAGES)
        );
    }
}
