//! The guarded merge patch of [`super::guarded`], built from the two values'
//! JSON text instead of `serde_json::Value` trees. A job's status at 10,000
//! nodes is a few megabytes of JSON; as trees, old and new and their
//! difference held about ten times that at once on every status write
//! (the largest part of the controller's peak in the 10,000-node
//! ImagePrePullJob run, docs/scale.md). Here objects are split into their
//! members' raw text, compared member by member, and the body is written as
//! text: about three times the JSON, never a tree.

use super::PatchError;
use serde::Serialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// [`super::guarded`], as JSON text: the same body (`null` for removed
/// members, objects diffed member by member, anything else replaced whole).
pub fn guarded_raw<T: Serialize>(
    what: &'static str,
    resource_version: Option<&str>,
    path: &[&str],
    old: &T,
    new: &T,
) -> Result<Option<Box<RawValue>>, PatchError> {
    let text = |v: &T| serde_json::to_string(v).map_err(|source| PatchError { what, source });
    let (old, new) = (text(old)?, text(new)?);
    let Some(mut body) = diff(&old, &new).map_err(|source| PatchError { what, source })? else {
        return Ok(None);
    };
    for key in path.iter().rev() {
        body = format!("{{{}:{body}}}", quoted(key)?);
    }
    // The precondition, beside the outermost member.
    let rv =
        serde_json::to_string(&resource_version).map_err(|source| PatchError { what, source })?;
    if let Some(rest) = body.strip_prefix('{') {
        let sep = if rest.starts_with('}') { "" } else { "," };
        body = format!("{{\"metadata\":{{\"resourceVersion\":{rv}}}{sep}{rest}");
    }
    RawValue::from_string(body)
        .map(Some)
        .map_err(|source| PatchError { what, source })
}

fn quoted(key: &str) -> Result<String, PatchError> {
    serde_json::to_string(key).map_err(|source| PatchError {
        what: "a member name",
        source,
    })
}

/// The merge patch (as text) that turns the JSON `old` into `new`; None
/// when they are equal.
fn diff(old: &str, new: &str) -> Result<Option<String>, serde_json::Error> {
    let (o, n) = (old.trim(), new.trim());
    if !(o.starts_with('{') && n.starts_with('{')) {
        return Ok((o != n).then(|| n.to_string()));
    }
    let o: BTreeMap<String, &RawValue> = serde_json::from_str(o)?;
    let n: BTreeMap<String, &RawValue> = serde_json::from_str(n)?;
    let mut members: Vec<String> = Vec::new();
    for key in o.keys().filter(|k| !n.contains_key(*k)) {
        members.push(format!("{}:null", serde_json::to_string(key)?));
    }
    for (key, value) in &n {
        let change = match o.get(key) {
            Some(before) => diff(before.get(), value.get())?,
            None => Some(value.get().to_string()),
        };
        if let Some(change) = change {
            members.push(format!("{}:{change}", serde_json::to_string(key)?));
        }
    }
    Ok((!members.is_empty()).then(|| format!("{{{}}}", members.join(","))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// Both builders give the same body, as JSON.
    #[test]
    fn the_text_body_is_the_tree_body() {
        let rows = |n: usize, phase: &str| -> Value {
            (0..n)
                .map(|i| json!({"nodeName": format!("n{i}"), "phase": phase}))
                .collect()
        };
        let cases = [
            (json!({}), json!({})),
            (json!({"a": 1}), json!({"a": 1})),
            (
                json!({"a": 1, "b": {"c": 2, "d": 3}}),
                json!({"a": 1, "b": {"c": 2}}),
            ),
            (json!({"a": 1}), json!({"a": 2, "e": [1, 2]})),
            (
                json!({"rows": rows(3, "x"), "state": "a"}),
                json!({"rows": rows(4, "y"), "state": "a"}),
            ),
            (
                json!({"b": {"c": {"d": 1}}}),
                json!({"b": {"c": {"d": 1, "e": "q\"uote"}}}),
            ),
            (json!({"s": "x"}), json!({})),
            (Value::Null, json!({"a": 1})),
        ];
        for (old, new) in cases {
            for rv in [Some("42"), None] {
                let tree = super::super::guarded("status", rv, &["status"], &old, &new)
                    .expect("tree body");
                let text = guarded_raw("status", rv, &["status"], &old, &new)
                    .expect("text body")
                    .map(|b| serde_json::from_str::<Value>(b.get()).expect("JSON"));
                assert_eq!(text, tree, "{old} -> {new} at {rv:?}");
            }
        }
    }

    /// A body with no difference under a path still carries nothing.
    #[test]
    fn equal_values_need_no_write() {
        let v = json!({"rows": [{"nodeName": "n1"}], "state": "Pulling"});
        assert!(
            guarded_raw("status", Some("1"), &["status"], &v, &v)
                .expect("built")
                .is_none()
        );
    }
}
