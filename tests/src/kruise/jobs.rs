//! OpenKruise jobs read and awaited: status counts, completion, waits
//! that say what the NodeImages held when they time out.

use super::entries::nodeimages_summary;
use super::kubectl::get;
use crate::Cluster;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Kind names as `kubectl` resources.
pub const IPJ: &str = "imagepulljobs.apps.kruise.io";
/// ImageListPullJob resource.
pub const ILPJ: &str = "imagelistpulljobs.apps.kruise.io";

/// A job's status field as an integer (0 when absent).
pub fn count(job: &Value, field: &str) -> i64 {
    job["status"][field].as_i64().unwrap_or(0)
}

/// Whether a job's status has a completionTime.
pub fn completed(job: &Value) -> bool {
    job["status"]["completionTime"].is_string()
}

/// Short text of a job's status, for failure messages.
pub fn describe(job: &Value) -> String {
    format!(
        "{}/{}: {}",
        job["metadata"]["namespace"].as_str().unwrap_or("?"),
        job["metadata"]["name"].as_str().unwrap_or("?"),
        job["status"]
    )
}

/// Polls a job until `done` holds; panics after `timeout` with the job's
/// last status and the NodeImages' entries for `image_key` (if given).
pub fn wait_job(
    c: &Cluster,
    resource: &str,
    ns: &str,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    let mut last = None;
    loop {
        if let Some(job) = get(c, resource, Some(ns), name) {
            if done(&job) {
                return job;
            }
            last = Some(job);
        }
        if start.elapsed() > timeout {
            panic!(
                "timed out after {timeout:?} waiting for {resource} {ns}/{name} to be {what}; last seen: {}\nNodeImages:\n{}",
                last.map(|j| describe(&j))
                    .unwrap_or_else(|| "does not exist".into()),
                nodeimages_summary(c)
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Waits until an object is gone.
pub fn wait_gone(c: &Cluster, resource: &str, ns: &str, name: &str, timeout: Duration) {
    let start = Instant::now();
    loop {
        let Some(obj) = get(c, resource, Some(ns), name) else {
            return;
        };
        if start.elapsed() > timeout {
            panic!(
                "{resource} {ns}/{name} still exists after {timeout:?}: metadata {} status {}",
                obj["metadata"], obj["status"]
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
