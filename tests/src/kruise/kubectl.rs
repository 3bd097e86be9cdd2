//! Objects read and written through `kubectl`, as users do: create, get,
//! list, delete, events, and the JSON kubectl prints.

use crate::Cluster;
use serde_json::Value;

/// Parses kubectl JSON output.
pub fn parse(out: &str) -> Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("kubectl printed no JSON ({e}): {out}"))
}

/// `kubectl create -f -` of one object.
pub fn create(c: &Cluster, obj: &Value) {
    c.kubectl_ok(&["create", "-f", "-"], Some(&obj.to_string()));
}

/// An object as JSON, None when it does not exist.
pub fn get(c: &Cluster, resource: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    let mut args = vec![resource, name];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    c.get_json(&args)
}

/// Every object of a resource (in `ns`, or cluster-wide).
pub fn list(c: &Cluster, resource: &str, ns: Option<&str>, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["get", resource, "-o", "json"];
    if let Some(ns) = ns {
        args.extend(["-n", ns]);
    }
    args.extend(extra);
    let v = parse(&c.kubectl_ok(&args, None));
    v["items"].as_array().cloned().unwrap_or_default()
}

/// Deletes an object without waiting (no panic: usable in cleanup).
pub fn delete(c: &Cluster, resource: &str, ns: &str, name: &str) {
    c.delete_quietly(&[resource, name, "-n", ns]);
}

/// Events (core view) in `ns` about the object `name`.
pub fn events_of(c: &Cluster, ns: &str, name: &str) -> Vec<Value> {
    list(c, "events", Some(ns), &[])
        .into_iter()
        .filter(|e| e["involvedObject"]["name"] == name)
        .collect()
}
