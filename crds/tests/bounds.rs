//! Every integer the API accepts is bounded in the schema: a value the API
//! server admits must fit the Rust field that decodes it and the time
//! arithmetic done with it. This walks the generated schemas of every kind
//! and every served version, so a new integer field without bounds fails here.

use nodeimage_api::limits::{INT32_MAX, SECONDS_MAX, VERSION_MAX};
use serde_json::Value;

/// Every integer (and int-or-string) field under `schema`, with its path.
fn integers<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if obj.get("type").and_then(Value::as_str) == Some("integer")
        || obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
    {
        out.push((path.clone(), schema));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            integers(v, format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = obj.get("items") {
        integers(items, format!("{path}[]"), out);
    }
    if let Some(extra) = obj.get("additionalProperties") {
        integers(extra, format!("{path}{{}}"), out);
    }
}

#[test]
fn every_integer_field_is_bounded() {
    let mut checked = 0;
    let mut problems = Vec::new();
    for (file, crd) in nodeimage_api::crdgen::all() {
        let crd = serde_json::to_value(&crd).expect("CRD serialises");
        for version in crd["spec"]["versions"].as_array().expect("versions") {
            let schema = &version["schema"]["openAPIV3Schema"];
            let mut fields = Vec::new();
            integers(schema, String::new(), &mut fields);
            for (path, field) in fields {
                checked += 1;
                let what = format!("{file} {}{path}", version["name"]);
                if field.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
                    // No numeric keywords apply to both forms: a CEL rule
                    // must bound the integer and the string form.
                    let bounded = field["x-kubernetes-validations"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|r| {
                            let rule = r["rule"].as_str().unwrap_or_default();
                            rule.contains(&format!("<= {INT32_MAX}")) && rule.contains("int(self)")
                        });
                    if !bounded {
                        problems.push(format!("{what}: int-or-string without a CEL bound"));
                    }
                    continue;
                }
                let (Some(min), Some(max)) = (field["minimum"].as_f64(), field["maximum"].as_f64())
                else {
                    problems.push(format!("{what}: missing minimum or maximum"));
                    continue;
                };
                let limit = match field["format"].as_str() {
                    Some("int32") => INT32_MAX,
                    Some("int64") => SECONDS_MAX.max(VERSION_MAX),
                    other => {
                        problems.push(format!(
                            "{what}: integer without int32/int64 format ({other:?})"
                        ));
                        continue;
                    }
                };
                if min < 0.0 || max > limit as f64 || min > max {
                    problems.push(format!(
                        "{what}: bounds [{min}, {max}] outside [0, {limit}]"
                    ));
                }
                // Seconds typed int64 must fit the deadline arithmetic bound.
                if path.ends_with("Seconds") && max > SECONDS_MAX as f64 {
                    problems.push(format!("{what}: seconds above {SECONDS_MAX}"));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "unbounded integers:\n{}",
        problems.join("\n")
    );
    // 5 kinds, OpenKruise ones in two versions: make sure the walk saw them.
    assert!(
        checked >= 60,
        "only {checked} integer fields seen; is the walk broken?"
    );
}
