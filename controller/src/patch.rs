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

/// The value of `metadata.managedFields` that clears them: a list of one
/// empty entry (an empty list would leave them as they are).
///
/// Every write the controller makes to a NodeImage's spec carries it. Once
/// cleared, the API server records no managed fields for Update writes (the
/// daemons' and the controller's JSON and merge patches), so a NodeImage
/// stays without them. They were a large share of a stored NodeImage
/// (mostly the controller's per-tag keys) and of the API server's CPU on
/// every write (docs/benchmarks.md, "API server cost per NodeImage write").
/// Nothing reads them: the node mirror records the labels it owns in an
/// annotation instead.
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

/// The entry write that turns `old.images` into `new`, one image at a time,
/// each tested as read ([`nodeimage_api::kruise::nodeimage::images_patch`]),
/// clearing the managed fields ([`no_managed_fields`]).
pub fn images_tested(
    old: &nodeimage_api::kruise::NodeImageSpec,
    new: &std::collections::BTreeMap<
        nodeimage_api::shared::SharedStr,
        nodeimage_api::kruise::ImageSpec,
    >,
) -> Result<json_patch::Patch, PatchError> {
    let mut ops =
        nodeimage_api::kruise::nodeimage::images_patch(old, new).map_err(|source| PatchError {
            what: "spec.images",
            source,
        })?;
    if let Value::Array(ops) = &mut ops {
        let clear =
            json!({"op": "add", "path": "/metadata/managedFields", "value": no_managed_fields()});
        ops.push(clear);
    }
    serde_json::from_value(ops).map_err(|source| PatchError {
        what: "JSON patch",
        source,
    })
}

#[cfg(test)]
mod tests;
