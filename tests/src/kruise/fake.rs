//! NodeImages without a Node or daemon, failed by hand as upstream's
//! `FailNodeImageFast` does.

use super::entries::status_tag;
use super::kubectl::get;
use crate::{Cluster, random_suffix};
use serde_json::json;
use std::process::Command;

/// Label that marks a NodeImage without a Node (and without a daemon).
pub const FAKE_LABEL: &str = crate::nodeimage::FAKE_LABEL;

/// A NodeImage without a Node or daemon (label `apps.kruise.io/fake-nodeimage`),
/// deleted when dropped.
pub struct FakeNodeImage {
    c: Cluster,
    /// Its name (`e2e-fake-…`).
    pub name: String,
}

impl FakeNodeImage {
    /// Creates `e2e-fake-<random>` with an empty spec.
    pub fn create(c: &Cluster) -> FakeNodeImage {
        let name = format!("e2e-fake-{}", random_suffix());
        crate::nodeimage::create_fake(c, &name, &Default::default(), json!({}));
        FakeNodeImage { c: c.clone(), name }
    }

    /// Upstream's `FailNodeImageFast`: every spec tag of the NodeImage that
    /// has no finished status for its version gets a Failed status, as if
    /// its node had failed the pull. Returns how many tags were failed.
    pub fn fail_unfinished(&self, message: &str) -> usize {
        for _ in 0..10 {
            let Some(ni) = get(&self.c, "nodeimages.apps.kruise.io", None, &self.name) else {
                return 0;
            };
            let now = chrono_now();
            let mut statuses = serde_json::Map::new();
            let (mut failed_now, mut counts) = (0usize, [0i64; 5]);
            for (image, spec) in ni["spec"]["images"].as_object().into_iter().flatten() {
                let mut tags = Vec::new();
                for t in spec["tags"].as_array().into_iter().flatten() {
                    let version = t["version"].as_i64().unwrap_or(0);
                    let tag = t["tag"].as_str().unwrap_or_default();
                    let old = status_tag(&ni, image, tag)
                        .filter(|s| s["version"].as_i64().unwrap_or(0) == version)
                        .filter(|s| matches!(s["phase"].as_str(), Some("Succeeded" | "Failed")))
                        .cloned();
                    let entry = old.unwrap_or_else(|| {
                        failed_now += 1;
                        json!({
                            "tag": tag, "phase": "Failed", "version": version,
                            "progress": 0, "startTime": now, "completionTime": now,
                            "message": message,
                        })
                    });
                    counts[0] += 1;
                    counts[if entry["phase"] == "Succeeded" { 3 } else { 4 }] += 1;
                    tags.push(entry);
                }
                statuses.insert(image.clone(), json!({ "tags": tags }));
            }
            if failed_now == 0 {
                return 0;
            }
            let patch = json!({
                "metadata": {"resourceVersion": ni["metadata"]["resourceVersion"]},
                "status": {
                    "desired": counts[0], "waiting": 0, "pulling": 0,
                    "succeeded": counts[3], "failed": counts[4],
                    "imageStatuses": statuses,
                },
            });
            let r = self.c.kubectl(
                &[
                    "patch",
                    "nodeimages.apps.kruise.io",
                    &self.name,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &patch.to_string(),
                ],
                None,
            );
            if r.success {
                return failed_now;
            }
            assert!(
                r.stderr.contains("Conflict") || r.stderr.contains("modified"),
                "failing the tags of {}: {}",
                self.name,
                r.stderr
            );
        }
        panic!("failing the tags of {}: conflicts kept coming", self.name);
    }
}

impl Drop for FakeNodeImage {
    fn drop(&mut self) {
        crate::nodeimage::delete(&self.c, &self.name);
    }
}

/// Now as an RFC 3339 timestamp (seconds), as the API prints times.
pub fn chrono_now() -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .expect("date runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}
