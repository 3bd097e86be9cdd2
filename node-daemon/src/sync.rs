//! The daemon's loop: watch this node's NodeImage, plan which pulls to start
//! or cancel, keep the status writer and the pins informed, and pull again
//! the images that left the node while a finished tag still wants them
//! (`presence`).

use crate::decode::{self, Decoded};
use crate::desired::{self, PullTask, Reported, TagKey};
use crate::presence::{self, Expected, Losses, Lost};
use crate::pull;
use crate::runtime::ContainerRuntime;
use crate::worker::{self, Workers};
use futures::{Stream, StreamExt};
use kube::runtime::watcher::{self, Event};
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::lenient::Lenient;
use nodeimage_ops::health::Check;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// Longest a presence check of one image may take.
const PRESENCE_TIMEOUT: Duration = Duration::from_secs(10);

mod follow;
pub use follow::{WatchEvent, watch_nodeimage};

struct Running {
    version: i64,
    handle: JoinHandle<()>,
    /// The image reference it pulls, if the entry was valid.
    reference: Option<String>,
}

/// What the last NodeImage asked for and said, for the presence checks.
#[derive(Default)]
struct Latest {
    tasks: Vec<PullTask>,
    reported: BTreeMap<TagKey, Reported>,
    /// The images removal entries with `force` name: while such an entry
    /// stands, their leaving the node is no loss to pull again for.
    forced: BTreeSet<String>,
    /// The removal entries with `block`: their images are removed again
    /// at each presence check if they came back.
    blocks: Vec<nodeimage_api::nodeimage_dev::RemovalEntry>,
}

/// What the loop keeps between events.
struct State {
    /// The tasks started, finished ones included (with their version, so
    /// they are not run again).
    running: BTreeMap<TagKey, Running>,
    /// The objects of a relist in progress.
    init: Option<Decoded>,
    /// The last reason logged for each entry that cannot be decoded.
    logged: BTreeMap<TagKey, String>,
    /// Whether the leases a previous run left have been swept (once the
    /// first NodeImage says what this run pulls); leases made since this
    /// run started are its own.
    swept: bool,
    /// When this run started.
    run_started: std::time::SystemTime,
    /// What the last NodeImage asked for and said.
    latest: Latest,
    /// How often each entry version lost its image.
    losses: Losses,
    /// Where the start-up gate hears of each NodeImage (its note).
    notes: crate::gate::Notes,
    /// The tasks serving the NodeImage's removal entries.
    removals: crate::removal::serve::Removals,
    /// The last reason logged for each removal entry that cannot be decoded.
    logged_removals: BTreeMap<String, String>,
}

/// Follows `node`'s NodeImage as `stream` delivers it until `stop` flips,
/// running pulls as the spec asks; every `presence_every` (None: never)
/// looks for images that left.
pub async fn run<R: ContainerRuntime>(
    stream: impl Stream<Item = WatchEvent> + Send,
    node: String,
    workers: Workers<R>,
    synced: Check,
    presence_every: Option<Duration>,
    notes: crate::gate::Notes,
    mut stop: watch::Receiver<bool>,
) {
    tokio::pin!(stream);
    let mut st = State {
        running: BTreeMap::new(),
        init: None,
        logged: BTreeMap::new(),
        swept: false,
        run_started: std::time::SystemTime::now(),
        latest: Latest::default(),
        losses: Losses::default(),
        notes,
        removals: Default::default(),
        logged_removals: BTreeMap::new(),
    };
    let (gone_tx, mut gone_rx) = mpsc::unbounded_channel::<Vec<Expected>>();
    // Without checks the timer still needs a period the clock can hold.
    let mut presence_tick =
        tokio::time::interval(presence_every.unwrap_or(Duration::from_secs(86_400)));
    presence_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    presence_tick.reset();
    loop {
        let event = tokio::select! {
            e = stream.next() => e,
            _ = presence_tick.tick(), if presence_every.is_some() => {
                check_presence(&workers, &st.latest, &st.running, &gone_tx);
                st.removals.sweep_blocks(&workers.deps, &st.latest.blocks, &st.latest.tasks, &st.latest.reported);
                continue;
            }
            Some(gone) = gone_rx.recv() => {
                pull_again(&workers, gone, &st.latest, &mut st.running, &mut st.losses);
                continue;
            }
            _ = stop.changed() => break,
        };
        let Some(event) = event else { break };
        st.on_event(&workers, &node, &synced, event);
    }
    st.removals.stop();
    for (_, r) in st.running {
        r.handle.abort();
    }
}

impl State {
    /// Acts on one event of the watch.
    fn on_event<R: ContainerRuntime>(
        &mut self,
        workers: &Workers<R>,
        node: &str,
        synced: &Check,
        event: Result<Event<Lenient<NodeImage>>, watcher::Error>,
    ) {
        match event {
            Ok(Event::Apply(ni)) => {
                synced.set(true);
                self.applied(workers, decode::nodeimage(ni), false);
            }
            Ok(Event::Delete(_)) => {
                tracing::warn!(node = %node, "NodeImage deleted; stopping every pull");
                self.deleted(workers);
            }
            Ok(Event::Init) => self.init = None,
            Ok(Event::InitApply(ni)) => self.init = Some(decode::nodeimage(ni)),
            Ok(Event::InitDone) => {
                synced.set(true);
                match self.init.take() {
                    Some(ni) => self.applied(workers, ni, true),
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

    /// Acts on the NodeImage as it is now.
    fn applied<R: ContainerRuntime>(
        &mut self,
        workers: &Workers<R>,
        decoded: Decoded,
        relisted: bool,
    ) {
        let note = decoded.nodeimage.metadata.annotations.as_ref();
        let note = note
            .and_then(|a| a.get(nodeimage_api::gate::STARTUP_GATE))
            .cloned();
        for (job, reason) in &decoded.invalid_removals {
            if self.logged_removals.get(job) != Some(reason) {
                tracing::warn!(%job, %reason, "removal entry cannot be decoded; left out");
            }
        }
        self.logged_removals.clone_from(&decoded.invalid_removals);
        let ni = &decoded.nodeimage;
        let removal_entries = ni.spec.removals.clone().unwrap_or_default();
        let answered = ni.status.as_ref().and_then(|s| s.removals.clone());
        self.latest = apply(
            workers,
            decoded,
            relisted,
            &mut self.running,
            &mut self.logged,
        );
        // Every valid pull the spec lists is wanted on the node: pinned,
        // within the budget.
        let wanted = crate::pins::wanted(&self.latest.tasks, note.as_deref());
        workers.deps.pins.want(wanted);
        self.latest.forced = crate::removal::serve::forced(&removal_entries);
        self.latest.blocks = crate::removal::block::observe(&workers.deps, &removal_entries);
        if let Some(verifier) = &workers.verifier {
            verifier.publish(&removal_entries);
        }
        self.removals.apply(
            &workers.deps,
            &removal_entries,
            answered.as_deref().unwrap_or_default(),
            &self.latest.tasks,
            &self.latest.reported,
        );
        self.notes.send_replace(note);
        self.losses.retain(&self.latest.tasks);
        sweep_once(workers, &self.running, &mut self.swept, self.run_started);
    }

    /// The NodeImage is gone: every pull stops and nothing is wanted.
    fn deleted<R: ContainerRuntime>(&mut self, workers: &Workers<R>) {
        self.notes.send_replace(None);
        self.removals.stop();
        for (_, r) in std::mem::take(&mut self.running) {
            r.handle.abort();
            end_lease_after(workers, r);
        }
        workers.deps.status.forget();
        self.latest = Latest::default();
        self.losses.retain(&[]);
        workers.deps.pins.want(crate::pins::Wanted::new());
    }
}

/// Acts on a NodeImage from the watch (`relisted`: from a relist, the
/// current object rather than the next event); returns what it asked for.
fn apply<R: ContainerRuntime>(
    workers: &Workers<R>,
    decoded: Decoded,
    relisted: bool,
    running: &mut BTreeMap<TagKey, Running>,
    logged: &mut BTreeMap<TagKey, String>,
) -> Latest {
    let Decoded {
        nodeimage: ni,
        invalid,
        ..
    } = decoded;
    for (tag, reason) in &invalid {
        if logged.get(tag) != Some(reason) {
            tracing::warn!(%tag, %reason, "NodeImage entry cannot be decoded; failing it alone");
        }
    }
    logged.clone_from(&invalid);
    let mut tasks = desired::tasks(&ni);
    decode::mark_invalid(&mut tasks, &invalid);
    crate::removal::block::mark_blocked(
        &mut tasks,
        ni.spec.removals.as_deref().unwrap_or_default(),
    );
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
        start(workers, task, running);
    }
    Latest {
        tasks,
        reported,
        forced: BTreeSet::new(),
        blocks: Vec::new(),
    }
}

/// Starts `task`'s worker and records it as running.
fn start<R: ContainerRuntime>(
    workers: &Workers<R>,
    task: PullTask,
    running: &mut BTreeMap<TagKey, Running>,
) {
    track(running, task, |t| workers.spawn(t));
}

/// Runs `task` through `spawn` and records it as running.
fn track(
    running: &mut BTreeMap<TagKey, Running>,
    task: PullTask,
    spawn: impl FnOnce(PullTask) -> JoinHandle<()>,
) {
    let key = task.key.clone();
    let version = task.version;
    let reference = task.target.as_ref().ok().map(|t| t.image.pull_ref());
    let handle = spawn(task);
    running.insert(
        key,
        Running {
            version,
            handle,
            reference,
        },
    );
}

/// The entries a task is working on now.
fn busy(running: &BTreeMap<TagKey, Running>) -> BTreeSet<TagKey> {
    running
        .iter()
        .filter(|(_, r)| !r.handle.is_finished())
        .map(|(k, _)| k.clone())
        .collect()
}

/// Asks CRI, off the loop, whether each image a finished tag reported
/// Succeeded is still on the node; sends back the ones that are not.
fn check_presence<R: ContainerRuntime>(
    workers: &Workers<R>,
    latest: &Latest,
    running: &BTreeMap<TagKey, Running>,
    gone_tx: &mpsc::UnboundedSender<Vec<Expected>>,
) {
    let mut expected = presence::expected(&latest.tasks, &latest.reported, &busy(running));
    expected.retain(|e| !latest.forced.contains(&e.reference));
    if expected.is_empty() {
        return;
    }
    let deps = workers.deps.clone();
    let tx = gone_tx.clone();
    tokio::spawn(async move {
        let mut gone = Vec::new();
        for e in expected {
            let status =
                tokio::time::timeout(PRESENCE_TIMEOUT, deps.runtime.image_status(&e.reference));
            match status.await {
                Ok(Ok(None)) => gone.push(e),
                Ok(Ok(Some(_))) => {}
                Ok(Err(_)) | Err(_) => deps.metrics.cri_error("ImageStatus"),
            }
        }
        if !gone.is_empty() {
            let _ = tx.send(gone);
        }
    });
}

/// Pulls again the images that left while their entries still want them
/// (a bounded number of times per entry version), or fails the tag.
fn pull_again<R: ContainerRuntime>(
    workers: &Workers<R>,
    gone: Vec<Expected>,
    latest: &Latest,
    running: &mut BTreeMap<TagKey, Running>,
    losses: &mut Losses,
) {
    let busy = busy(running);
    for e in gone {
        // The spec may have moved on while CRI was asked.
        let Some(task) = latest
            .tasks
            .iter()
            .find(|t| t.key == e.key && t.version == e.version && !busy.contains(&t.key))
        else {
            continue;
        };
        let deps = workers.deps.clone();
        deps.metrics.images_lost.inc();
        let mut task = task.clone();
        match losses.record(&e.key, e.version) {
            Lost::Repull(n) => {
                let note = presence::repull_note(n);
                tracing::warn!(tag = %e.key, image = %e.reference, times = n, "image left the node; pulling it again");
                let event_note = format!("Image {} left the node: {note}", e.key);
                tokio::spawn(async move {
                    crate::report::event(
                        &deps,
                        kube::runtime::events::EventType::Warning,
                        "ImageLost",
                        "Check",
                        event_note,
                    )
                    .await;
                });
                task.note = Some(note);
                start_shown(workers, task, running);
            }
            Lost::GiveUp(n) => {
                tracing::warn!(tag = %e.key, image = %e.reference, times = n, "image left the node again; failing the tag");
                let handle = tokio::spawn(async move {
                    worker::fail(&task, &deps, "lost", presence::give_up_message(n)).await;
                });
                running.insert(
                    e.key.clone(),
                    Running {
                        version: e.version,
                        handle,
                        reference: None,
                    },
                );
            }
        }
    }
}

/// Longest a re-pull waits for its loss to be written before it starts.
const SHOW_TIMEOUT: Duration = Duration::from_secs(5);

/// Starts the re-pull of a lost image once the tag's Waiting, with the loss
/// note, is written (or after [`SHOW_TIMEOUT`]): a re-pull that ends within
/// the status writer's gathering window would otherwise never show the loss
/// in status, which then kept saying Succeeded through it.
fn start_shown<R: ContainerRuntime>(
    workers: &Workers<R>,
    task: PullTask,
    running: &mut BTreeMap<TagKey, Running>,
) {
    let deps = workers.deps.clone();
    let upgrades = workers.upgrades.clone();
    track(running, task, |task| {
        tokio::spawn(async move {
            deps.status.report(
                &task.key,
                nodeimage_api::kruise::ImageTagStatus {
                    tag: task.key.tag.as_str().into(),
                    purpose: task.key.purpose,
                    phase: nodeimage_api::kruise::ImagePullPhase::Waiting,
                    version: Some(task.version),
                    message: task.note.as_deref().map(Into::into),
                    ..Default::default()
                },
            );
            let shown = |ni: &NodeImage| {
                desired::reported(ni)
                    .get(&task.key)
                    .is_some_and(|r| r.answers(&task) && !r.phase().is_finished())
            };
            if !deps.status.wait_observed(shown, SHOW_TIMEOUT).await {
                tracing::debug!(tag = %task.key, "the loss was not seen written in time; pulling again anyway");
            }
            worker::run(task, deps, upgrades).await;
        })
    });
}

/// Ends the resume lease of an aborted pull once the pull is gone, so it
/// cannot hold its blobs again.
fn end_lease_after<R: ContainerRuntime>(workers: &Workers<R>, r: Running) {
    let Some(reference) = r.reference else { return };
    tokio::spawn(pull::end_lease_when_gone(
        workers.deps.clone(),
        r.handle,
        reference,
    ));
}

/// Once per run, after the first NodeImage is acted on: ends the leases a
/// previous run left for images this run does not pull (`sweep_leases`).
fn sweep_once<R: ContainerRuntime>(
    workers: &Workers<R>,
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
    tokio::spawn(deps.runtime.sweep_leases(&deps.node, pulling, run_started));
}

#[cfg(test)]
mod tests;
