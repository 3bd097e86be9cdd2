//! Every change to any NodeImage, in the API server's order.

use super::entries::nodeimages;
use crate::Cluster;
use serde_json::Value;
use std::time::Duration;

/// Every change to any NodeImage, in the order the API server made them
/// (one `kubectl get nodeimages --watch` stream), from the moment it starts.
/// Replaying the changes gives the state of all NodeImages after each one.
/// Stops the watch when dropped.
pub struct NodeImageHistory {
    child: std::process::Child,
    events: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
}

impl NodeImageHistory {
    /// Starts watching; returns once the current NodeImages have been seen.
    pub fn start(c: &Cluster) -> NodeImageHistory {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = events.clone();
        let args = [
            "get",
            "nodeimages.apps.kruise.io",
            "-o",
            "json",
            "--watch",
            "--output-watch-events",
        ];
        let child = c.kubectl_watch(&args, move |ev| {
            let kind = ev["type"].as_str().unwrap_or_default().to_string();
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((kind, ev["object"].clone()));
        });
        let h = NodeImageHistory { child, events };
        let existing = nodeimages(c).len();
        crate::wait_for(
            "the NodeImage watch to list the current NodeImages",
            Duration::from_secs(60),
            || (h.events().len() >= existing).then_some(()),
        );
        h
    }

    /// The (type, object) events so far.
    pub fn events(&self) -> Vec<(String, Value)> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replays the events; `check` sees every NodeImage (by name) as it was
    /// after each event, and the resourceVersion of that event.
    pub fn replay(
        &self,
        mut check: impl FnMut(&std::collections::BTreeMap<String, Value>, &str),
    ) -> usize {
        let mut state = std::collections::BTreeMap::new();
        let events = self.events();
        for (kind, obj) in &events {
            let name = obj["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if kind == "DELETED" {
                state.remove(&name);
            } else {
                state.insert(name, obj.clone());
            }
            check(
                &state,
                obj["metadata"]["resourceVersion"].as_str().unwrap_or("?"),
            );
        }
        events.len()
    }
}

impl Drop for NodeImageHistory {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
