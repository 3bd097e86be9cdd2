//! Writes of the NodeImage contract, as JSON Patches (RFC 6902) that carry
//! their own guard: the daemons' status write, tested against what its
//! entries were built from, and the controller's entry writes, tested image
//! by image; and the clearing of managed fields every spec write carries.

use super::spec::{ImageSpec, NodeImage, NodeImageSpec};
use super::status::NodeImageStatus;
use crate::interned::SharedStr;
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// How a status write is guarded against the object having moved on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusGuard {
    /// Tests only what the written entries were built from, so the
    /// controller's entry writes for other images do not void it.
    Entries,
    /// Tests the whole spec's generation: the fallback when the spec as
    /// decoded may not match the stored JSON (a salvaged NodeImage).
    Generation,
}

/// The daemons' status write (the NodeImage write contract): the JSON Patch
/// that writes `new` as the whole status, guarded as [`StatusGuard::Entries`]
/// says:
/// - `metadata.uid`: the object is the one observed, not a recreation;
/// - `status.desired` as observed: no other writer (the controller's
///   housekeeping, which removes entries) changed the status meanwhile;
/// - for each image whose entry this write changes, the name and version of
///   every spec tag it was built from, at its index.
///
/// A tag added to the spec meanwhile does not void the write: the status
/// then predates that tag, as it does between any spec edit and the next
/// status write, and the answer (which carries the new spec) makes the
/// writer build again. A guard on the generation would be voided by every
/// entry write the controller makes for any image of the node.
pub fn guarded_status_patch(ni: &NodeImage, new: &NodeImageStatus) -> Value {
    guarded_status_patch_with(ni, new, StatusGuard::Entries)
}

/// [`guarded_status_patch`] with the guard chosen by the caller.
pub fn guarded_status_patch_with(
    ni: &NodeImage,
    new: &NodeImageStatus,
    guard: StatusGuard,
) -> Value {
    let status = serde_json::to_value(new).unwrap_or_else(|_| json!({}));
    let mut ops = Vec::new();
    match (guard, ni.metadata.generation, &ni.metadata.resource_version) {
        (StatusGuard::Entries, _, _) => {
            if let Some(uid) = &ni.metadata.uid {
                ops.push(json!({"op": "test", "path": "/metadata/uid", "value": uid}));
            }
            if let Some(old) = &ni.status {
                ops.push(json!({"op": "test", "path": "/status/desired", "value": old.desired}));
            }
            let old_entries = ni.status.as_ref().and_then(|s| s.image_statuses.as_ref());
            let specs = ni.spec.images.as_ref();
            for (image, entry) in new.image_statuses.iter().flatten() {
                if old_entries.and_then(|m| m.get(image)) == Some(entry) {
                    continue;
                }
                let Some(spec) = specs.and_then(|m| m.get(image)) else {
                    continue;
                };
                let base = format!("/spec/images/{}/tags", pointer_segment(image));
                for (i, t) in spec.tags.iter().enumerate() {
                    ops.push(
                        json!({"op": "test", "path": format!("{base}/{i}/tag"), "value": t.tag}),
                    );
                    if let Some(v) = t.version {
                        ops.push(json!({"op": "test", "path": format!("{base}/{i}/version"), "value": v}));
                    }
                }
            }
        }
        (StatusGuard::Generation, Some(g), _) => {
            ops.push(json!({"op": "test", "path": "/metadata/generation", "value": g}));
        }
        (StatusGuard::Generation, None, rv) => {
            ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
        }
    }
    ops.push(json!({"op": "add", "path": "/status", "value": status}));
    Value::Array(ops)
}

/// The JSON Patch (RFC 6902) that turns `old.images` into `new`, one image
/// at a time: each image that differs is `test`ed as it was read (`null` for
/// one that was not there: the API server's `test` of an absent key against
/// `null` passes), then set or removed. An entry write for one image sends
/// that image twice instead of the whole spec, and a
/// concurrent write to another image does not void it. With no images map
/// yet, the whole spec is tested and the map set.
pub fn images_patch(
    old: &NodeImageSpec,
    new: &BTreeMap<SharedStr, ImageSpec>,
) -> Result<Value, serde_json::Error> {
    let Some(before) = &old.images else {
        return Ok(json!([
            {"op": "test", "path": "/spec", "value": serde_json::to_value(old)?},
            {"op": "add", "path": "/spec/images", "value": serde_json::to_value(new)?},
        ]));
    };
    let mut keys: Vec<&SharedStr> = before.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut ops = Vec::new();
    for key in keys {
        let (was, now) = (before.get(key), new.get(key));
        if was == now {
            continue;
        }
        let path = format!("/spec/images/{}", pointer_segment(key));
        let was = match was {
            Some(v) => serde_json::to_value(v)?,
            None => Value::Null,
        };
        ops.push(json!({"op": "test", "path": path, "value": was}));
        ops.push(match now {
            Some(v) => json!({"op": "add", "path": path, "value": serde_json::to_value(v)?}),
            None => json!({"op": "remove", "path": path}),
        });
    }
    Ok(Value::Array(ops))
}

/// One JSON Pointer segment (RFC 6901): image names carry `/`.
fn pointer_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The value of `metadata.managedFields` that clears them: a list of one
/// empty entry (an empty list would leave them as they are).
///
/// Every write the controller makes to a NodeImage's spec carries it. Once
/// cleared, the API server records no managed fields for Update writes (the
/// daemons' and the controller's JSON and merge patches), so a NodeImage
/// stays without them. They were a large share of a stored NodeImage and of
/// the API server's CPU on every write (docs/benchmarks.md, "API server cost
/// per NodeImage write"). Nothing reads them: the node mirror records the
/// labels it owns in an annotation instead.
pub fn no_managed_fields() -> Value {
    json!([{}])
}

/// Adds the clearing of managed fields to a merge patch of the main resource.
pub fn clearing_managed_fields(mut body: Value) -> Value {
    if let Value::Object(map) = &mut body {
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        if let Value::Object(meta) = meta {
            meta.insert("managedFields".into(), no_managed_fields());
        }
    }
    body
}

/// The JSON Patch operation that clears managed fields, last in an entry
/// write ([`images_patch`]).
pub fn clear_managed_fields_op() -> Value {
    json!({"op": "add", "path": "/metadata/managedFields", "value": no_managed_fields()})
}

#[cfg(test)]
mod tests;
