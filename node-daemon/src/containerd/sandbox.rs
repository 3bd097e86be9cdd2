//! The sandbox (pause) image as containerd's verbose CRI status names it:
//! the `config` entry of the status info is the CRI plugin's configuration
//! as JSON. containerd 1.x writes `sandboxImage` there; a configuration
//! that carries pinned images (`pinnedImages` or, without a JSON name,
//! `PinnedImages`) names it under `sandbox`. Whether containerd 2.x's
//! status carries either is still to be checked on the test stack; where
//! it names none, the removal rule relies on the runtime's own pin of its
//! sandbox image and on the daemon's `--sandbox-image` (added with the
//! wiring).

use serde_json::Value;
use std::collections::HashMap;

/// The sandbox image the status info names, if it names one.
pub(crate) fn from_status_info(info: &HashMap<String, String>) -> Option<String> {
    let config: Value = serde_json::from_str(info.get("config")?).ok()?;
    let named = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    named(&config["sandboxImage"])
        .or_else(|| named(&config["pinnedImages"]["sandbox"]))
        .or_else(|| named(&config["PinnedImages"]["sandbox"]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_each_spelling_and_nothing_else() {
        let cases = [
            (
                Some(r#"{"sandboxImage":"registry.k8s.io/pause:3.8","enableSelinux":false}"#),
                Some("registry.k8s.io/pause:3.8"),
            ),
            (
                Some(r#"{"pinnedImages":{"sandbox":"registry.k8s.io/pause:3.10"}}"#),
                Some("registry.k8s.io/pause:3.10"),
            ),
            (
                Some(r#"{"PinnedImages":{"sandbox":"registry.k8s.io/pause:3.10"}}"#),
                Some("registry.k8s.io/pause:3.10"),
            ),
            (Some(r#"{"sandboxImage":""}"#), None),
            (Some(r#"{"containerd":{"snapshotter":"overlayfs"}}"#), None),
            (Some("not json"), None),
            (None, None),
        ];
        for (config, want) in cases {
            let mut info = HashMap::new();
            info.insert("golang".to_string(), "\"go1.24\"".to_string());
            if let Some(c) = config {
                info.insert("config".to_string(), c.to_string());
            }
            assert_eq!(from_status_info(&info).as_deref(), want, "{config:?}");
        }
    }
}
