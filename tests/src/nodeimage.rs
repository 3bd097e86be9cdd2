//! Reading NodeImages as a user does (`kubectl get -o json`), waiting for a
//! tag to reach a phase, and checking on every observed status that the
//! counts match the tag statuses.

use crate::{Cluster, KubectlResult};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Label that keeps the node mirror from deleting a NodeImage without a Node.
pub const FAKE_LABEL: &str = "apps.kruise.io/fake-nodeimage";

/// The counts fields of a status, in this order.
pub const COUNTS: [&str; 5] = ["desired", "waiting", "pulling", "succeeded", "failed"];

fn phase_index(phase: &str) -> Option<usize> {
    match phase {
        "Waiting" => Some(1),
        "Pulling" => Some(2),
        "Succeeded" => Some(3),
        "Failed" => Some(4),
        _ => None,
    }
}

/// Checks that a NodeImage's counts match its tag statuses:
/// `waiting + pulling + succeeded + failed == desired`, and either the counts
/// are exactly the phases of the status entries (`desired` = number of
/// entries), or they are what counting each spec tag by the phase of its
/// entry of the same version gives (a spec tag without one counts as
/// waiting), the definition shared by every status writer. A spec tag
/// without an entry may be left out: the status may predate the spec edit.
pub fn check_counts(obj: &Value) -> Result<(), String> {
    let Some(status) = obj.get("status").filter(|s| !s.is_null()) else {
        return Ok(());
    };
    let name = obj["metadata"]["name"].as_str().unwrap_or("?");
    let rv = obj["metadata"]["resourceVersion"].as_str().unwrap_or("?");
    let fail = |why: String| {
        Err(format!(
            "NodeImage {name} (resourceVersion {rv}): {why}\nspec: {}\nstatus: {}",
            obj["spec"], status
        ))
    };
    let entries: Vec<(&str, &Value)> = status["imageStatuses"]
        .as_object()
        .into_iter()
        .flatten()
        .flat_map(|(image, st)| {
            st["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |t| (image.as_str(), t))
        })
        .collect();
    let mut counts = [0i64; 5];
    for (i, field) in COUNTS.iter().enumerate() {
        match status.get(*field).and_then(Value::as_i64) {
            Some(n) => counts[i] = n,
            None if entries.is_empty() && status.get(*field).is_none() => {}
            None => return fail(format!("status.{field} is missing")),
        }
    }
    if counts[1] + counts[2] + counts[3] + counts[4] != counts[0] {
        return fail(format!(
            "waiting+pulling+succeeded+failed = {} but desired = {}",
            counts[1] + counts[2] + counts[3] + counts[4],
            counts[0]
        ));
    }
    // (a) exactly the phases of the entries.
    let mut by_entries = [0i64; 5];
    for (image, t) in &entries {
        let phase = t["phase"].as_str().unwrap_or_default();
        match phase_index(phase) {
            Some(i) => by_entries[i] += 1,
            None => return fail(format!("{image}:{} has unknown phase {phase:?}", t["tag"])),
        }
        by_entries[0] += 1;
    }
    if by_entries == counts {
        return Ok(());
    }
    // (b) each spec tag by the phase of its entry of the same version.
    let mut by_spec = [0i64; 5];
    let mut unwritten = 0i64;
    for (image, spec) in obj["spec"]["images"].as_object().into_iter().flatten() {
        for tag in spec["tags"].as_array().into_iter().flatten() {
            let version = tag["version"].as_i64().unwrap_or(0);
            let entry = entries.iter().find(|(i, t)| {
                *i == image
                    && t["tag"] == tag["tag"]
                    && t["version"].as_i64().unwrap_or(0) == version
            });
            let has_entry = entry.is_some();
            let phase = entry
                .and_then(|(_, t)| t["phase"].as_str())
                .and_then(phase_index)
                .unwrap_or(1);
            by_spec[phase] += 1;
            by_spec[0] += 1;
            if !has_entry {
                unwritten += 1;
            }
        }
    }
    if by_spec == counts {
        return Ok(());
    }
    // (c) as (b), for a status written before the last spec edit: a spec tag
    // that has no entry yet may be missing from the waiting count. A user's
    // spec patch makes a version that keeps the old status until the daemon
    // sees the edit, and a poll can land in between.
    if counts[2..] == by_spec[2..] && (by_spec[1] - unwritten..=by_spec[1]).contains(&counts[1]) {
        return Ok(());
    }
    fail(format!(
        "counts [desired, waiting, pulling, succeeded, failed] = {counts:?} match neither the status entries {by_entries:?} nor the spec tags by entry phase {by_spec:?}"
    ))
}

thread_local! {
    /// Count mismatches [`get`] saw on this thread (each test has its own).
    static MISMATCHES: std::cell::RefCell<BTreeMap<String, String>> =
        const { std::cell::RefCell::new(BTreeMap::new()) };
}

/// Panics with every count mismatch that [`get`] saw on this thread (so in
/// this test), and forgets them. Tests call it at their end, after their own
/// checks, so that a wrong count does not hide what else happened.
pub fn assert_observed_counts_matched() {
    let seen = MISMATCHES.with(|m| std::mem::take(&mut *m.borrow_mut()));
    assert!(
        seen.is_empty(),
        "{} observed NodeImage version(s) had counts not matching their tag statuses:\n{}",
        seen.len(),
        seen.values()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A NodeImage as JSON, or None when it does not exist. A version whose
/// counts do not match its tag statuses is recorded for
/// [`assert_observed_counts_matched`].
pub fn get(c: &Cluster, name: &str) -> Option<Value> {
    let obj = c.get_json(&["nodeimage", name])?;
    if let Err(e) = check_counts(&obj) {
        let key = format!(
            "{name}@{}",
            obj["metadata"]["resourceVersion"].as_str().unwrap_or("?")
        );
        MISMATCHES.with(|m| {
            m.borrow_mut().entry(key).or_insert(e);
        });
    }
    Some(obj)
}

/// The status entry of `image`/`tag`, if any.
pub fn tag_status<'a>(obj: &'a Value, image: &str, tag: &str) -> Option<&'a Value> {
    obj["status"]["imageStatuses"]
        .get(image)?
        .get("tags")?
        .as_array()?
        .iter()
        .find(|t| t["tag"] == tag)
}

/// The spec entry of `image`/`tag`, if any.
pub fn spec_tag<'a>(obj: &'a Value, image: &str, tag: &str) -> Option<&'a Value> {
    obj["spec"]["images"]
        .get(image)?
        .get("tags")?
        .as_array()?
        .iter()
        .find(|t| t["tag"] == tag)
}

/// One tag entry: NodeImage name, image key and tag.
#[derive(Clone, Copy, Debug)]
pub struct Tag<'a> {
    /// NodeImage name.
    pub ni: &'a str,
    /// Key of `spec.images`.
    pub image: &'a str,
    /// The tag (or digest).
    pub tag: &'a str,
}

/// Polls the NodeImage until the status entry of the tag satisfies `done`;
/// returns (object, entry). `fail_fast` turns an observed entry into an
/// immediate panic (e.g. Failed while waiting for Succeeded).
pub fn wait_tag(
    c: &Cluster,
    t: Tag<'_>,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Value) -> bool,
    fail_fast: impl Fn(&Value) -> bool,
) -> (Value, Value) {
    let Tag { ni, image, tag } = t;
    let start = Instant::now();
    let mut last: Option<Value> = None;
    loop {
        if let Some(obj) = get(c, ni) {
            if let Some(t) = tag_status(&obj, image, tag) {
                if done(t) {
                    let t = t.clone();
                    return (obj, t);
                }
                if fail_fast(t) {
                    panic!("{ni} {image}:{tag}: gave up waiting for {what}: {t}");
                }
            }
            last = Some(obj);
        }
        if start.elapsed() > timeout {
            let entry = last.as_ref().and_then(|o| tag_status(o, image, tag));
            panic!(
                "timed out after {timeout:?} waiting for {ni} {image}:{tag} to be {what}; entry: {}; NodeImage: {}",
                entry
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "none".into()),
                last.map(|o| o.to_string())
                    .unwrap_or_else(|| "does not exist".into())
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Waits until the tag is in `phase` for spec version `version`. Panics
/// early when it finishes in the other terminal phase.
pub fn wait_phase(c: &Cluster, t: Tag<'_>, version: i64, phase: &str, timeout: Duration) -> Value {
    let same_version = |t: &Value| t["version"].as_i64().unwrap_or(0) == version;
    let terminal = matches!(phase, "Succeeded" | "Failed");
    wait_tag(
        c,
        t,
        &format!("{phase} (version {version})"),
        timeout,
        |t| same_version(t) && t["phase"] == phase,
        |t| {
            terminal
                && same_version(t)
                && t["phase"] != phase
                && matches!(t["phase"].as_str(), Some("Succeeded" | "Failed"))
        },
    )
    .1
}

/// `kubectl patch nodeimage NAME --type=merge -p PATCH`.
pub fn merge_patch(c: &Cluster, name: &str, patch: &Value) -> KubectlResult {
    c.kubectl(
        &[
            "patch",
            "nodeimage",
            name,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ],
        None,
    )
}

/// Merge-patches `spec.images[image]` of `name` to `value`; panics on failure.
pub fn set_image(c: &Cluster, name: &str, image: &str, value: Value) {
    let r = merge_patch(c, name, &json!({"spec": {"images": {image: value}}}));
    assert!(
        r.success,
        "patch nodeimage {name} image {image}: {}",
        r.stderr
    );
}

/// Removes image keys from a NodeImage's spec (no panics: for cleanup).
pub fn remove_images(c: &Cluster, name: &str, images: &[String]) {
    let nulls: serde_json::Map<String, Value> =
        images.iter().map(|i| (i.clone(), Value::Null)).collect();
    let r = merge_patch(c, name, &json!({"spec": {"images": nulls}}));
    if !r.success && !r.stderr.contains("NotFound") {
        eprintln!(
            "cleanup: removing {images:?} from nodeimage {name}: {}",
            r.stderr
        );
    }
}

/// Waits, at most `timeout`, until NodeImage `name` has no status entry for
/// any of `images` (its daemon has seen them leave the spec), or is gone.
/// No panics: for cleanup, before the pulled images are removed, so that the
/// daemon never sees an image it still wants leave (it would pull it again).
pub fn wait_status_without(c: &Cluster, name: &str, images: &[String], timeout: Duration) {
    let start = Instant::now();
    while start.elapsed() < timeout {
        let r = c.kubectl(&["get", "nodeimage", name, "-o", "json"], None);
        if !r.success {
            return;
        }
        let Ok(obj) = serde_json::from_str::<Value>(&r.stdout) else {
            return;
        };
        if images
            .iter()
            .all(|i| obj["status"]["imageStatuses"].get(i).is_none())
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    eprintln!("cleanup: {name} still reports {images:?} after {timeout:?}");
}

/// Creates a NodeImage labelled fake (no Node behind it) with `spec`.
pub fn create_fake(c: &Cluster, name: &str, labels: &BTreeMap<&str, &str>, spec: Value) {
    let mut all: serde_json::Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    all.insert(FAKE_LABEL.into(), json!("true"));
    let obj = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "NodeImage",
        "metadata": {"name": name, "labels": all},
        "spec": spec,
    });
    c.kubectl_ok(&["create", "-f", "-"], Some(&obj.to_string()));
}

/// Deletes a NodeImage (no panics: for cleanup).
pub fn delete(c: &Cluster, name: &str) {
    c.delete_quietly(&["nodeimage", name]);
}

/// Events (core/v1 view, all namespaces) whose message contains `needle`.
pub fn events_mentioning(c: &Cluster, needle: &str) -> Vec<Value> {
    let out = c.kubectl_ok(&["get", "events", "-A", "-o", "json"], None);
    let list: Value = serde_json::from_str(&out).expect("kubectl prints JSON");
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["message"].as_str().is_some_and(|m| m.contains(needle)))
        .cloned()
        .collect()
}

/// Every version of a NodeImage seen by `kubectl get --watch`, each checked
/// with [`check_counts`] as it arrives. Stops the watch when dropped.
pub struct Watch {
    child: Child,
    seen: Arc<Mutex<Vec<Value>>>,
    violations: Arc<Mutex<Vec<String>>>,
}

impl Watch {
    /// Starts watching NodeImage `name` (which must exist).
    pub fn start(c: &Cluster, name: &str) -> Watch {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let violations = Arc::new(Mutex::new(Vec::new()));
        let (s, v) = (seen.clone(), violations.clone());
        let args = ["get", "nodeimage", name, "-o", "json", "--watch"];
        let child = c.kubectl_watch(&args, move |obj| {
            if let Err(e) = check_counts(&obj) {
                v.lock().unwrap_or_else(|p| p.into_inner()).push(e);
            }
            s.lock().unwrap_or_else(|p| p.into_inner()).push(obj);
        });
        Watch {
            child,
            seen,
            violations,
        }
    }

    /// Versions seen so far.
    pub fn seen(&self) -> Vec<Value> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Panics if any seen version had counts not matching its tag statuses;
    /// returns how many versions were checked.
    pub fn assert_counts_matched(&self) -> usize {
        let v = self
            .violations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        assert!(v.is_empty(), "counts mismatch:\n{}", v.join("\n"));
        self.seen().len()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tag entries of `node`'s NodeImage owned by `uid` (none when the
/// NodeImage is missing).
pub fn entries_owned_by(c: &Cluster, node: &str, uid: &str) -> Vec<Value> {
    let Some(ni) = get(c, node) else {
        return vec![];
    };
    ni["spec"]["images"]
        .as_object()
        .into_iter()
        .flat_map(|m| m.values())
        .flat_map(|i| i["tags"].as_array().cloned().unwrap_or_default())
        .filter(|t| {
            t["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["uid"] == uid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ni(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "n", "resourceVersion": "1"}, "spec": spec, "status": status})
    }

    #[test]
    fn counts_checks() {
        let spec = json!({"images": {"a": {"tags": [{"tag": "1"}, {"tag": "2", "version": 1}]}}});
        let entries = json!({"a": {"tags": [
            {"tag": "1", "phase": "Succeeded", "version": 0},
            {"tag": "2", "phase": "Pulling", "version": 1},
        ]}});
        let counts = |d, w, p, s, f| json!({"desired": d, "waiting": w, "pulling": p, "succeeded": s, "failed": f, "imageStatuses": entries});
        assert!(check_counts(&ni(spec.clone(), counts(2, 0, 1, 1, 0))).is_ok());
        assert!(check_counts(&ni(spec.clone(), counts(2, 1, 0, 1, 0))).is_err());
        assert!(check_counts(&ni(spec.clone(), counts(2, 0, 1, 0, 0))).is_err());
        // Spec moved on (tag 2 bumped to version 2): the written counts are
        // still those of the entries.
        let newer = json!({"images": {"a": {"tags": [{"tag": "1"}, {"tag": "2", "version": 2}]}}});
        assert!(check_counts(&ni(newer.clone(), counts(2, 0, 1, 1, 0))).is_ok());
        // A writer that counts by spec: tag 2 of version 2 has no entry yet.
        assert!(check_counts(&ni(newer, counts(2, 1, 0, 1, 0))).is_ok());
        // No status yet.
        assert!(check_counts(&json!({"metadata": {}, "spec": spec})).is_ok());
        // A user added tag 3 after the status was written (seen in CI): the
        // new tag, without an entry, is not counted yet.
        let added = json!({"images": {"a": {"tags": [{"tag": "1"}, {"tag": "2", "version": 1}, {"tag": "3"}]}}});
        assert!(check_counts(&ni(added.clone(), counts(2, 0, 1, 1, 0))).is_ok());
        assert!(check_counts(&ni(added.clone(), counts(3, 1, 1, 1, 0))).is_ok());
        // ...but a tag with an entry must be counted by its phase.
        assert!(check_counts(&ni(added.clone(), counts(2, 1, 0, 1, 0))).is_err());
        assert!(check_counts(&ni(added, counts(4, 2, 1, 1, 0))).is_err());
    }
}
