//! The node start-up gate: the names both binaries and the chart agree on,
//! and the rules they share. A job annotated [`GATE_NEW_NODES`] names images
//! that a node registering with the start-up taint must hold before it
//! takes Pods; the controller writes what gates each node into its NodeImage
//! ([`STARTUP_GATE`], a [`GateNote`]); the daemon, or the controller after
//! the bound, removes exactly that taint ([`untaint_patch`]).

use k8s_openapi::api::core::v1::Taint;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// On an ImagePullJob, ImageListPullJob or ImagePrePullJob: `"true"` makes
/// its images gate new nodes (an annotation, so upstream manifests stay valid).
pub const GATE_NEW_NODES: &str = "nodeimage.dev/gate-new-nodes";

/// The taint nodes register with by default while their images are missing.
pub const DEFAULT_TAINT_KEY: &str = "nodeimage.dev/images-pending";

/// The effect of the start-up taint the documentation tells nodes to use.
pub const TAINT_EFFECT: &str = "NoSchedule";

/// On a NodeImage: what gates its node, written by the controller and read
/// by the node's daemon (JSON of a [`GateNote`]).
pub const STARTUP_GATE: &str = "nodeimage.dev/startup-gate";

/// Event reason when a gate opens because every gating image is present.
pub const REASON_READY: &str = "StartupGateOpened";

/// Event reason when a gate opens because its bound passed first.
pub const REASON_TIMEOUT: &str = "StartupGateTimedOut";

/// What gates one node: the taint to remove, the images it waits for, and
/// when the controller removes the taint anyway.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GateNote {
    /// The key of the start-up taint.
    pub taint: String,
    /// Image references that must be present on the node, sorted.
    pub images: Vec<String>,
    /// RFC 3339 time after which the controller opens the gate anyway.
    pub deadline: String,
}

impl GateNote {
    /// The note as the annotation's value.
    pub fn to_annotation(&self) -> String {
        // A struct of strings always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The note a NodeImage's annotations carry: None without one, an
    /// error when it does not parse.
    pub fn of(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Option<Result<Self, serde_json::Error>> {
        annotations?
            .get(STARTUP_GATE)
            .map(|v| serde_json::from_str(v))
    }
}

/// Whether a job's annotations mark its images as gating new nodes.
pub fn is_gating(annotations: &BTreeMap<String, String>) -> bool {
    annotations
        .get(GATE_NEW_NODES)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
}

/// Whether `taints` hold a taint with key `key`.
pub fn has_taint(taints: Option<&[Taint]>, key: &str) -> bool {
    taints.is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// The JSON Patch that removes every taint with key `key` from a Node whose
/// taints were read as `taints`: a `test` of the list as read, then the list
/// without them, so a concurrent change of the taints fails the write (read
/// again and redo) instead of being lost. None when there is no such taint.
pub fn untaint_patch(taints: &[Taint], key: &str) -> Option<Value> {
    if !taints.iter().any(|t| t.key == key) {
        return None;
    }
    let kept: Vec<&Taint> = taints.iter().filter(|t| t.key != key).collect();
    Some(json!([
        {"op": "test", "path": "/spec/taints", "value": taints},
        {"op": "replace", "path": "/spec/taints", "value": kept},
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        }
    }

    #[test]
    fn gating_annotation_table() {
        let cases = [
            (Some("true"), true),
            (Some("True"), true),
            (Some(" true "), true),
            (Some("false"), false),
            (Some(""), false),
            (Some("yes"), false),
            (None, false),
        ];
        for (value, want) in cases {
            let mut a = BTreeMap::new();
            if let Some(v) = value {
                a.insert(GATE_NEW_NODES.to_string(), v.to_string());
            }
            assert_eq!(is_gating(&a), want, "{value:?}");
        }
    }

    #[test]
    fn note_round_trips_and_bad_notes_are_errors() {
        let note = GateNote {
            taint: DEFAULT_TAINT_KEY.into(),
            images: vec!["a:1".into(), "b:2".into()],
            deadline: "2026-01-01T00:00:00Z".into(),
        };
        let a = BTreeMap::from([(STARTUP_GATE.to_string(), note.to_annotation())]);
        assert_eq!(GateNote::of(Some(&a)).map(|r| r.ok()), Some(Some(note)));
        let bad = BTreeMap::from([(STARTUP_GATE.to_string(), "{".to_string())]);
        assert!(matches!(GateNote::of(Some(&bad)), Some(Err(_))));
        assert!(GateNote::of(None).is_none());
        assert!(GateNote::of(Some(&BTreeMap::new())).is_none());
    }

    #[test]
    fn untaint_removes_only_the_gate_and_tests_the_list() {
        let gate = taint(DEFAULT_TAINT_KEY, "NoSchedule");
        let other = taint("dedicated", "NoExecute");
        let both = vec![
            other.clone(),
            gate.clone(),
            taint(DEFAULT_TAINT_KEY, "NoExecute"),
        ];
        let patch = untaint_patch(&both, DEFAULT_TAINT_KEY);
        assert_eq!(
            patch,
            Some(json!([
                {"op": "test", "path": "/spec/taints", "value": both},
                {"op": "replace", "path": "/spec/taints", "value": [other]},
            ]))
        );
        assert_eq!(
            untaint_patch(std::slice::from_ref(&other), DEFAULT_TAINT_KEY),
            None
        );
        assert_eq!(untaint_patch(&[], DEFAULT_TAINT_KEY), None);
        let only = untaint_patch(&[gate], DEFAULT_TAINT_KEY);
        assert_eq!(only.as_ref().map(|p| &p[1]["value"]), Some(&json!([])));
        assert!(has_taint(Some(&both), DEFAULT_TAINT_KEY));
        assert!(!has_taint(Some(&[other]), DEFAULT_TAINT_KEY));
        assert!(!has_taint(None, DEFAULT_TAINT_KEY));
    }
}
