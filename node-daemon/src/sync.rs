//! The daemon's loop: watch this node's NodeImage, plan which pulls to start
//! or cancel, and keep the status writer informed.

use crate::desired::{self, TagKey};
use crate::worker::{self, Deps};
use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use nodeimage_api::kruise::NodeImage;
use nodeimage_ops::health::Check;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

struct Running {
    version: i64,
    handle: JoinHandle<()>,
}

/// Watches `node`'s NodeImage until `stop` flips, running pulls as the spec asks.
pub async fn run(
    api: kube::Api<NodeImage>,
    node: String,
    deps: Arc<Deps>,
    synced: Check,
    mut stop: watch::Receiver<bool>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let stream = watcher::watcher(api, config).default_backoff();
    tokio::pin!(stream);
    let mut running: BTreeMap<TagKey, Running> = BTreeMap::new();
    let mut init: Option<NodeImage> = None;
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = stop.changed() => break,
        };
        let Some(event) = event else { break };
        match event {
            Ok(Event::Apply(ni)) => {
                synced.set(true);
                apply(&deps, ni, &mut running);
            }
            Ok(Event::Delete(_)) => {
                tracing::warn!(node = %node, "NodeImage deleted; stopping every pull");
                for (_, r) in std::mem::take(&mut running) {
                    r.handle.abort();
                }
                deps.status.forget();
            }
            Ok(Event::Init) => init = None,
            Ok(Event::InitApply(ni)) => init = Some(ni),
            Ok(Event::InitDone) => {
                synced.set(true);
                match init.take() {
                    Some(ni) => apply(&deps, ni, &mut running),
                    None => {
                        tracing::warn!(node = %node, "no NodeImage for this node yet; waiting for the controller to create it")
                    }
                }
            }
            Err(e) => {
                synced.set(false);
                tracing::warn!(error = %e, "NodeImage watch failed; retrying");
            }
        }
    }
    for (_, r) in running {
        r.handle.abort();
    }
}

fn apply(deps: &Arc<Deps>, ni: NodeImage, running: &mut BTreeMap<TagKey, Running>) {
    let tasks = desired::tasks(&ni);
    let reported = desired::reported(&ni);
    deps.status.observe(ni);
    // Finished workers stay listed with their version so they are not re-run;
    // only the plan decides what to restart.
    let versions: BTreeMap<TagKey, i64> = running
        .iter()
        .map(|(k, r)| (k.clone(), r.version))
        .collect();
    let plan = desired::plan(&tasks, &reported, &versions);
    for key in plan.cancel {
        if let Some(r) = running.remove(&key) {
            if !r.handle.is_finished() {
                tracing::info!(tag = %key, "pull cancelled: entry removed or superseded");
            }
            r.handle.abort();
        }
        deps.status.clear(&key);
    }
    for task in plan.start {
        let key = task.key.clone();
        let version = task.version;
        let handle = tokio::spawn(worker::run(task, deps.clone()));
        running.insert(key, Running { version, handle });
    }
}
