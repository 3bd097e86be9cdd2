//! Pull secrets and the controller's copies of them.

use super::kubectl::list;
use super::waits::eventually;
use crate::Cluster;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};
use std::time::Duration;

/// Namespace the controller copies pull secrets into (its default).
pub const SECRETS_NS: &str = "nodeimage-secrets";
/// Label on every secret copy.
pub const COPY_LABEL: &str = "nodeimage.dev/pull-secret-copy";
/// Annotation on a copy naming its source (`namespace/name`).
pub const SOURCE_ANNOTATION: &str = "nodeimage.dev/source";
/// Annotation on a copy listing the jobs using it (`Kind/namespace/name`, comma-separated).
pub const REFERENCES_ANNOTATION: &str = "nodeimage.dev/references";

/// A `.dockerconfigjson` payload with credentials for `hosts`.
pub fn docker_config_json(hosts: &[&str], user: &str, password: &str) -> String {
    let auth = STANDARD.encode(format!("{user}:{password}"));
    let auths: serde_json::Map<String, Value> = hosts
        .iter()
        .map(|h| {
            (
                h.to_string(),
                json!({"username": user, "password": password, "auth": auth}),
            )
        })
        .collect();
    json!({ "auths": auths }).to_string()
}

/// A legacy `.dockercfg` payload (registry → credentials, no `auths`).
pub fn docker_cfg(host: &str, user: &str, password: &str) -> String {
    let auth = STANDARD.encode(format!("{user}:{password}"));
    json!({ host: {"username": user, "password": password, "auth": auth}}).to_string()
}

/// Creates (or, with `replace`, replaces) a Secret holding `payload` under
/// `key`; returns its `data` as the API stores it.
pub fn put_secret(
    c: &Cluster,
    ns: &str,
    name: &str,
    type_: &str,
    key: &str,
    payload: &str,
    replace: bool,
) -> Value {
    let obj = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns},
        "type": type_,
        "data": { key: STANDARD.encode(payload) },
    });
    let verb = if replace { "replace" } else { "create" };
    c.kubectl_ok(&[verb, "-f", "-"], Some(&obj.to_string()));
    obj["data"].clone()
}

/// The copies (in [`SECRETS_NS`]) of the secret `ns/name`.
pub fn copies_of(c: &Cluster, ns: &str, name: &str) -> Vec<Value> {
    let source = format!("{ns}/{name}");
    list(
        c,
        "secrets",
        Some(SECRETS_NS),
        &["-l", &format!("{COPY_LABEL}=true")],
    )
    .into_iter()
    .filter(|s| s["metadata"]["annotations"][SOURCE_ANNOTATION] == source.as_str())
    .collect()
}

/// The job references listed on a copy.
pub fn references(copy: &Value) -> Vec<String> {
    copy["metadata"]["annotations"][REFERENCES_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// How a copy refers to an ImagePullJob.
pub fn job_reference(ns: &str, name: &str) -> String {
    format!("ImagePullJob/{ns}/{name}")
}

/// Waits until `ns/name` has exactly one copy, named `<ns>.<name>-…`, with
/// `data` and a reference to the job `job`; returns it.
pub fn wait_copy(c: &Cluster, ns: &str, name: &str, data: &Value, job: &str) -> Value {
    let want_ref = job_reference(ns, job);
    eventually(
        &format!("a copy of secret {ns}/{name} referencing {want_ref}"),
        Duration::from_secs(60),
        || {
            let copies = copies_of(c, ns, name);
            let [copy] = copies.as_slice() else {
                return Err(format!("{} copies: {copies:?}", copies.len()));
            };
            let prefix = format!("{ns}.{name}-");
            let cname = copy["metadata"]["name"].as_str().unwrap_or_default();
            if !cname.starts_with(&prefix) {
                return Err(format!("copy is named {cname}, expected {prefix}…"));
            }
            if copy["data"] != *data {
                return Err(format!(
                    "copy data {} differs from the source's {data}",
                    copy["data"]
                ));
            }
            if !references(copy).contains(&want_ref) {
                return Err(format!("copy references {:?}", references(copy)));
            }
            Ok(copy.clone())
        },
    )
}

/// Waits until `ns/name` has no copy left.
pub fn wait_no_copy(c: &Cluster, ns: &str, name: &str, timeout: Duration) {
    eventually(
        &format!("the copy of secret {ns}/{name} to be deleted"),
        timeout,
        || {
            let copies = copies_of(c, ns, name);
            if copies.is_empty() {
                Ok(())
            } else {
                Err(format!(
                    "still there: {:?}",
                    copies
                        .iter()
                        .map(|s| (&s["metadata"]["name"], references(s)))
                        .collect::<Vec<_>>()
                ))
            }
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_configs() {
        let v: Value = serde_json::from_str(&docker_config_json(&["r:1"], "u", "p")).unwrap();
        assert_eq!(v["auths"]["r:1"]["auth"], "dTpw");
        let v: Value = serde_json::from_str(&docker_cfg("r:1", "u", "p")).unwrap();
        assert_eq!(v["r:1"]["username"], "u");
        assert!(v.get("auths").is_none());
    }
}
