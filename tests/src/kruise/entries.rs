//! NodeImage tag entries as the jobs' tests read them: a job's entry and
//! phase on a node, and a summary of every NodeImage for failure messages.

use super::kubectl::{list, parse};
use crate::Cluster;
use serde_json::Value;

/// Every NodeImage.
pub fn nodeimages(c: &Cluster) -> Vec<Value> {
    list(c, "nodeimages.apps.kruise.io", None, &[])
}

/// The NodeImage named `name` out of a list.
pub fn find<'a>(list: &'a [Value], name: &str) -> Option<&'a Value> {
    list.iter().find(|n| n["metadata"]["name"] == name)
}

/// The spec tag entry of `image`/`tag`.
pub fn spec_tag<'a>(ni: &'a Value, image: &str, tag: &str) -> Option<&'a Value> {
    crate::nodeimage::spec_tag(ni, image, tag)
}

/// The status entry of `image`/`tag`.
pub fn status_tag<'a>(ni: &'a Value, image: &str, tag: &str) -> Option<&'a Value> {
    crate::nodeimage::tag_status(ni, image, tag)
}

/// Whether the tag entry lists the owner with `uid`.
pub fn owned_by(tag: &Value, uid: &str) -> bool {
    tag["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|o| o["uid"] == uid)
}

/// Whether `image` (the NodeImage key) has any tag in the NodeImage's spec.
pub fn image_in_spec(ni: &Value, image: &str) -> bool {
    ni["spec"]["images"].get(image).is_some()
}

/// Where the job with `uid` stands on this NodeImage for `image`/`tag`:
/// None when it owns no entry, else the phase of the status entry of the
/// entry's version ("" when the node has not reported that version yet).
pub fn job_phase(ni: &Value, image: &str, tag: &str, uid: &str) -> Option<String> {
    let t = spec_tag(ni, image, tag).filter(|t| owned_by(t, uid))?;
    let version = t["version"].as_i64().unwrap_or(0);
    Some(
        status_tag(ni, image, tag)
            .filter(|s| s["version"].as_i64().unwrap_or(0) == version)
            .and_then(|s| s["phase"].as_str())
            .unwrap_or_default()
            .to_string(),
    )
}

/// Whether a phase from [`job_phase`] means the node is still working.
pub fn is_pulling(phase: &str) -> bool {
    !matches!(phase, "Succeeded" | "Failed")
}

/// One line per NodeImage with its tag entries and statuses, for failure messages.
pub fn nodeimages_summary(c: &Cluster) -> String {
    let r = c.kubectl(&["get", "nodeimages.apps.kruise.io", "-o", "json"], None);
    if !r.success {
        return format!("(cannot list NodeImages: {})", r.stderr);
    }
    parse(&r.stdout)["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|n| {
            format!(
                "  {}: spec {} status {}",
                n["metadata"]["name"].as_str().unwrap_or("?"),
                n["spec"]["images"],
                n["status"]["imageStatuses"]
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn job_phases() {
        let ni = json!({
            "spec": {"images": {"r/a": {"tags": [
                {"tag": "v1", "version": 2, "ownerReferences": [{"uid": "u1"}]},
            ]}}},
            "status": {"imageStatuses": {"r/a": {"tags": [
                {"tag": "v1", "version": 1, "phase": "Succeeded"},
            ]}}},
        });
        assert_eq!(job_phase(&ni, "r/a", "v1", "u1").as_deref(), Some(""));
        assert_eq!(job_phase(&ni, "r/a", "v1", "u2"), None);
        assert!(is_pulling(""));
        let mut done = ni.clone();
        done["status"]["imageStatuses"]["r/a"]["tags"][0]["version"] = json!(2);
        assert_eq!(
            job_phase(&done, "r/a", "v1", "u1").as_deref(),
            Some("Succeeded")
        );
        assert!(!is_pulling("Succeeded"));
    }
}
