//! Narrow JSON merge patches (RFC 7386) with an optimistic-concurrency
//! precondition, and entry writes guarded by the images they change (RFC 6902).
//!
//! A merge patch cannot replace a map: keys missing from the patch are kept.
//! So the patch is the difference between what was read and what is
//! planned, with `null` for removed keys. Carrying the `resourceVersion`
//! that was read makes the server refuse the patch (409 Conflict) if anyone
//! wrote in between, so the difference is applied to exactly the state it
//! was computed from.

use serde::Serialize;
use serde_json::{Map, Value, json};

/// Why a patch could not be built.
#[derive(Debug, thiserror::Error)]
#[error("serialising the planned {what}: {source}")]
pub struct PatchError {
    what: &'static str,
    #[source]
    source: serde_json::Error,
}

impl PatchError {
    /// Serialising `what` failed with `source`.
    pub fn new(what: &'static str, source: serde_json::Error) -> Self {
        Self { what, source }
    }
}

/// The merge patch that turns `old` into `new`, or `None` if they are equal.
/// Objects are diffed key by key; anything else (arrays included) is replaced.
pub fn merge_diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for key in o.keys().filter(|k| !n.contains_key(*k)) {
                patch.insert(key.clone(), Value::Null);
            }
            for (key, value) in n {
                let change = match o.get(key) {
                    Some(before) => merge_diff(before, value),
                    None => Some(value.clone()),
                };
                if let Some(change) = change {
                    patch.insert(key.clone(), change);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        _ => Some(new.clone()),
    }
}

/// A merge patch setting `path` (e.g. `["spec", "images"]`) from `old` to
/// `new`, guarded by `resource_version`; `None` when nothing differs.
pub fn guarded<T: Serialize>(
    what: &'static str,
    resource_version: Option<&str>,
    path: &[&str],
    old: &T,
    new: &T,
) -> Result<Option<Value>, PatchError> {
    let to_value = |v: &T| serde_json::to_value(v).map_err(|source| PatchError { what, source });
    let Some(mut body) = merge_diff(&to_value(old)?, &to_value(new)?) else {
        return Ok(None);
    };
    for key in path.iter().rev() {
        body = json!({ *key: body });
    }
    if let Value::Object(map) = &mut body {
        map.insert(
            "metadata".into(),
            json!({ "resourceVersion": resource_version }),
        );
    }
    Ok(Some(body))
}

/// The clearing of managed fields every spec write carries (the NodeImage
/// contract's patch module says why).
pub use nodeimage_api::kruise::nodeimage::patch::clearing_managed_fields;

/// The entry write that turns `old.images` into `new`, one image at a time,
/// each tested as read ([`nodeimage_api::kruise::nodeimage::patch::images_patch`]),
/// clearing the managed fields
/// ([`nodeimage_api::kruise::nodeimage::patch::no_managed_fields`]).
pub fn images_tested(
    old: &nodeimage_api::kruise::NodeImageSpec,
    new: &std::collections::BTreeMap<
        nodeimage_api::interned::SharedStr,
        nodeimage_api::kruise::ImageSpec,
    >,
) -> Result<json_patch::Patch, PatchError> {
    let mut ops =
        nodeimage_api::kruise::nodeimage::patch::images_patch(old, new).map_err(|source| {
            PatchError {
                what: "spec.images",
                source,
            }
        })?;
    if let Value::Array(ops) = &mut ops {
        ops.push(nodeimage_api::kruise::nodeimage::patch::clear_managed_fields_op());
    }
    serde_json::from_value(ops).map_err(|source| PatchError {
        what: "JSON patch",
        source,
    })
}

/// The operations that turn `old.removals` into `new` (nothing when they
/// are equal; an empty list removes the field), the stored list tested as
/// read when there is one. Only the controller writes `spec.removals`,
/// through its one node writer, so an absent list is added without a test.
pub fn removals_ops(
    old: &nodeimage_api::kruise::NodeImageSpec,
    new: &[nodeimage_api::nodeimage_dev::RemovalEntry],
) -> Result<Vec<Value>, PatchError> {
    let what = "spec.removals";
    let to_value = |v: &[nodeimage_api::nodeimage_dev::RemovalEntry]| {
        serde_json::to_value(v).map_err(|source| PatchError { what, source })
    };
    let path = "/spec/removals";
    Ok(match old.removals.as_deref() {
        None if new.is_empty() => vec![],
        None => vec![json!({"op": "add", "path": path, "value": to_value(new)?})],
        Some(was) if was == new => vec![],
        Some(was) => {
            let test = json!({"op": "test", "path": path, "value": to_value(was)?});
            if new.is_empty() {
                vec![test, json!({"op": "remove", "path": path})]
            } else {
                vec![
                    test,
                    json!({"op": "replace", "path": path, "value": to_value(new)?}),
                ]
            }
        }
    })
}

/// One spec write: the image edits (`images_tested`, when they change
/// anything) and the removal edits ([`removals_ops`]), clearing the managed
/// fields.
pub fn spec_tested(
    old: &nodeimage_api::kruise::NodeImageSpec,
    images: &std::collections::BTreeMap<
        nodeimage_api::interned::SharedStr,
        nodeimage_api::kruise::ImageSpec,
    >,
    removals: &[nodeimage_api::nodeimage_dev::RemovalEntry],
) -> Result<json_patch::Patch, PatchError> {
    let images_same = match &old.images {
        Some(before) => before == images,
        None => images.is_empty(),
    };
    let mut ops = if images_same {
        vec![nodeimage_api::kruise::nodeimage::patch::clear_managed_fields_op()]
    } else {
        let patch = images_tested(old, images)?;
        match serde_json::to_value(patch) {
            Ok(Value::Array(ops)) => ops,
            Ok(_) => vec![],
            Err(source) => {
                return Err(PatchError {
                    what: "JSON patch",
                    source,
                });
            }
        }
    };
    ops.extend(removals_ops(old, removals)?);
    serde_json::from_value(Value::Array(ops)).map_err(|source| PatchError {
        what: "JSON patch",
        source,
    })
}

mod raw;
pub use raw::guarded_raw;

#[cfg(test)]
mod tests;
