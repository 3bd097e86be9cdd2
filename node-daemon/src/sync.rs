//! The daemon's loop: watch this node's NodeImage, plan which pulls to start
//! or cancel, and keep the status writer informed.

use crate::decode::{self, Decoded};
use crate::desired::{self, TagKey};
use crate::resume;
use crate::worker::Workers;
use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::lenient::Lenient;
use nodeimage_ops::health::Check;
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::watch;
use tokio::task::JoinHandle;

struct Running {
    version: i64,
    handle: JoinHandle<()>,
    /// The image reference it pulls, if the entry was valid.
    reference: Option<String>,
}

/// Watches `node`'s NodeImage until `stop` flips, running pulls as the spec asks.
pub async fn run(
    api: kube::Api<Lenient<NodeImage>>,
    node: String,
    workers: Workers,
    synced: Check,
    mut stop: watch::Receiver<bool>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    // Decoded entry by entry: a field that does not fit fails its tag, never
    // the watch (and with it every other tag of the node).
    let stream = watcher::watcher(api, config).default_backoff();
    tokio::pin!(stream);
    let mut running: BTreeMap<TagKey, Running> = BTreeMap::new();
    let mut init: Option<Decoded> = None;
    let mut logged: BTreeMap<TagKey, String> = BTreeMap::new();
    // Whether the leases a previous run left have been swept (once the
    // first NodeImage says what this run pulls); leases made since this
    // run started are its own.
    let mut swept = false;
    let run_started = std::time::SystemTime::now();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = stop.changed() => break,
        };
        let Some(event) = event else { break };
        match event {
            Ok(Event::Apply(ni)) => {
                synced.set(true);
                apply(
                    &workers,
                    decode::nodeimage(ni),
                    false,
                    &mut running,
                    &mut logged,
                );
                sweep_once(&workers, &running, &mut swept, run_started);
            }
            Ok(Event::Delete(_)) => {
                tracing::warn!(node = %node, "NodeImage deleted; stopping every pull");
                for (_, r) in std::mem::take(&mut running) {
                    r.handle.abort();
                    end_lease_after(&workers, r);
                }
                workers.deps.status.forget();
            }
            Ok(Event::Init) => init = None,
            Ok(Event::InitApply(ni)) => init = Some(decode::nodeimage(ni)),
            Ok(Event::InitDone) => {
                synced.set(true);
                match init.take() {
                    Some(ni) => {
                        apply(&workers, ni, true, &mut running, &mut logged);
                        sweep_once(&workers, &running, &mut swept, run_started);
                    }
                    None => {
                        tracing::warn!(node = %node, "no NodeImage for this node yet; waiting for the controller to create it")
                    }
                }
            }
            Err(e) => {
                synced.set(false);
                tracing::warn!(error = %e, "NodeImage watch failed; retrying with backoff");
            }
        }
    }
    for (_, r) in running {
        r.handle.abort();
    }
}

/// Acts on a NodeImage from the watch (`relisted`: from a relist, the
/// current object rather than the next event).
fn apply(
    workers: &Workers,
    decoded: Decoded,
    relisted: bool,
    running: &mut BTreeMap<TagKey, Running>,
    logged: &mut BTreeMap<TagKey, String>,
) {
    let Decoded {
        nodeimage: ni,
        invalid,
    } = decoded;
    for (tag, reason) in &invalid {
        if logged.get(tag) != Some(reason) {
            tracing::warn!(%tag, %reason, "NodeImage entry cannot be decoded; failing it alone");
        }
    }
    logged.clone_from(&invalid);
    let mut tasks = desired::tasks(&ni);
    decode::mark_invalid(&mut tasks, &invalid);
    let reported = desired::reported(&ni);
    if relisted {
        workers.deps.status.observe_relisted(ni);
    } else {
        workers.deps.status.observe(ni);
    }
    // Finished workers stay listed with their version so they are not re-run;
    // only the plan decides what to restart.
    let versions: BTreeMap<TagKey, i64> = running
        .iter()
        .map(|(k, r)| (k.clone(), r.version))
        .collect();
    let plan = desired::plan(&tasks, &reported, &versions);
    let restarted: BTreeSet<&TagKey> = plan.start.iter().map(|t| &t.key).collect();
    for key in &plan.cancel {
        if let Some(r) = running.remove(key) {
            let unfinished = !r.handle.is_finished();
            if unfinished {
                tracing::info!(tag = %key, "pull cancelled: entry removed or superseded");
            }
            r.handle.abort();
            // A removed entry's partial blobs are not kept for a later pull
            // (a superseded one's are, for the pull that replaces it). The
            // lease ends once the pull is gone, so it cannot hold them again.
            if unfinished && !restarted.contains(key) {
                end_lease_after(workers, r);
            }
        }
        workers.deps.status.clear(key);
    }
    for task in plan.start {
        let key = task.key.clone();
        let version = task.version;
        let reference = task.target.as_ref().ok().map(|t| t.image.pull_ref());
        let handle = workers.spawn(task);
        running.insert(
            key,
            Running {
                version,
                handle,
                reference,
            },
        );
    }
}

/// Ends the resume lease of an aborted pull once the pull is gone, so it
/// cannot hold its blobs again.
fn end_lease_after(workers: &Workers, r: Running) {
    let Some(reference) = r.reference else { return };
    let deps = workers.deps.clone();
    tokio::spawn(async move {
        let _ = r.handle.await;
        // Another tag naming the same image may still pull it.
        if !deps.leases.in_use(&reference) {
            resume::end(deps.runtime.channel(), deps.node.clone(), reference).await;
        }
    });
}

/// Once per run, after the first NodeImage is acted on: ends the leases a
/// previous run left for images this run does not pull (`resume::sweep`).
fn sweep_once(
    workers: &Workers,
    running: &BTreeMap<TagKey, Running>,
    swept: &mut bool,
    run_started: std::time::SystemTime,
) {
    if std::mem::replace(swept, true) {
        return;
    }
    let pulling = running
        .values()
        .filter(|r| !r.handle.is_finished())
        .filter_map(|r| r.reference.clone())
        .collect();
    let deps = &workers.deps;
    tokio::spawn(resume::sweep(
        deps.runtime.channel(),
        deps.node.clone(),
        pulling,
        run_started,
    ));
}
