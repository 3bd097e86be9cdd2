//! The sync loop over the in-memory runtime (`runtime::fake`), fed its
//! NodeImage events from a channel instead of a cluster, with tokio's
//! clock paused so presence checks and waits take no real time. The
//! status the loop's own writer would publish is echoed back through the
//! channel (`echo`), as the watch brings it back on a node.

use super::*;
use crate::deps::Deps;
use crate::desired::TagKey;
use crate::presence::{MAX_REPULLS, give_up_message, repull_note};
use crate::runtime::fake::{Answer, Call, FakeRuntime};
use futures::channel::mpsc::{UnboundedSender, unbounded};
use nodeimage_api::kruise::{ImagePullPhase, ImageTagStatus};
use serde_json::{Value, json};
use std::sync::Arc;

const NAME: &str = "127.0.0.1:5000/app";
const IMAGE: &str = "127.0.0.1:5000/app:v1";
const OTHER: &str = "127.0.0.1:5000/other";
const PRESENCE: Duration = Duration::from_secs(10);

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn key(name: &str) -> TagKey {
    TagKey {
        image: name.into(),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    }
}

/// What every task shares, over `runtime`, with one pull slot (a task
/// that is not cancelled keeps it, so the next pull could not start).
fn deps(runtime: FakeRuntime) -> Arc<Deps<FakeRuntime>> {
    Arc::new(Deps::for_tests(runtime, 1))
}

/// `ni` as the watch delivers it.
fn lenient(ni: &NodeImage) -> Lenient<NodeImage> {
    Lenient {
        metadata: ni.metadata.clone(),
        object: Ok(ni.clone()),
    }
}

/// A running sync loop and its ends.
struct Loop {
    rt: FakeRuntime,
    deps: Arc<Deps<FakeRuntime>>,
    events: UnboundedSender<WatchEvent>,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    /// The NodeImage last sent, to echo its status on.
    last: Option<NodeImage>,
    /// resourceVersions handed out so far.
    rv: u64,
}

/// Starts the loop over `rt`; `presence_every` as the flag sets it.
async fn start(rt: FakeRuntime, presence_every: Option<Duration>) -> Loop {
    let deps = deps(rt.clone());
    let workers = Workers {
        deps: deps.clone(),
        upgrades: Arc::new(crate::upgrade::Settings {
            enabled: false,
            tool_path: "keadm".into(),
            work_dir: std::env::temp_dir(),
            version_source: crate::upgrade::version::VersionSource::Kubelet,
            exec_prefix: vec![],
            node_name: "n1".into(),
            lock: tokio::sync::Mutex::new(()),
        }),
        verifier: None,
    };
    let (events, rx) = unbounded();
    let (stop, stop_rx) = watch::channel(false);
    let (notes, _) = watch::channel(None);
    let synced = nodeimage_ops::health::Readiness::default()
        .check("synced")
        .await;
    let task = tokio::spawn(run(
        rx,
        "n1".into(),
        workers,
        synced,
        presence_every,
        notes,
        stop_rx,
    ));
    Loop {
        rt,
        deps,
        events,
        stop,
        task,
        last: None,
        rv: 0,
    }
}

/// A tag entry of `version`.
fn entry(version: i64) -> Value {
    json!({"tag": "v1", "version": version, "pullPolicy": {"backoffLimit": 0}})
}

impl Loop {
    /// The NodeImage with `images` as its spec and `status` (None: none).
    fn nodeimage(&mut self, images: Value, status: Option<Value>) -> NodeImage {
        self.rv += 1;
        let mut obj = json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": self.rv.to_string()},
            "spec": {"images": images},
        });
        if let Some(st) = status {
            obj["status"] = st;
        }
        serde_json::from_value(obj).expect("a NodeImage")
    }

    fn send(&mut self, event: Event<Lenient<NodeImage>>) {
        self.events
            .unbounded_send(Ok(event))
            .expect("the loop listens");
    }

    /// The first list of the watch: `ni` is the object.
    async fn listed(&mut self, ni: NodeImage) {
        self.send(Event::Init);
        self.send(Event::InitApply(lenient(&ni)));
        self.send(Event::InitDone);
        self.last = Some(ni);
        settle().await;
    }

    /// The watch delivers `ni`.
    async fn applied(&mut self, ni: NodeImage) {
        self.send(Event::Apply(lenient(&ni)));
        self.last = Some(ni);
        settle().await;
    }

    /// The status the daemon's writer would publish now, brought back by
    /// the watch on the NodeImage last sent (its own write's echo).
    async fn echo(&mut self) {
        let mut ni = self.last.clone().expect("a NodeImage was sent");
        let live: BTreeMap<TagKey, ImageTagStatus> = [key(NAME), key(OTHER)]
            .into_iter()
            .filter_map(|k| self.deps.status.live(&k).map(|st| (k, st)))
            .collect();
        ni.status = Some(crate::status::build(&ni, &live, None));
        self.rv += 1;
        ni.metadata.resource_version = Some(self.rv.to_string());
        self.applied(ni).await;
    }

    fn live(&self, name: &str) -> Option<ImageTagStatus> {
        self.deps.status.live(&key(name))
    }

    fn phase(&self, name: &str) -> Option<ImagePullPhase> {
        self.live(name).map(|l| l.phase)
    }

    fn calls_of(&self, f: impl Fn(&Call) -> bool) -> Vec<Call> {
        self.rt.calls().into_iter().filter(|c| f(c)).collect()
    }

    fn lease_ends(&self) -> usize {
        self.calls_of(|c| *c == Call::EndLease(IMAGE.into())).len()
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        tokio::time::timeout(s(60), self.task)
            .await
            .expect("the loop stops")
            .expect("the loop did not panic");
    }
}

/// Lets every task run until all wait (the paused clock moves only when
/// nothing else can).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(5)).await;
}

/// Waits (on the paused clock) until `cond` holds; fails after a virtual minute.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + s(60);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An image that leaves the node after Succeeded is seen by the presence
/// check: the tag goes back to Pulling with the re-pull note and is pulled
/// again, at most MAX_REPULLS times per entry version; the next loss fails
/// the tag with the reason, and nothing is pulled again.
#[tokio::test(start_paused = true)]
async fn a_lost_image_is_pulled_again_then_the_tag_fails() {
    let rt = FakeRuntime::default();
    let mut l = start(rt.clone(), Some(PRESENCE)).await;
    let ni = l.nodeimage(json!({NAME: {"tags": [entry(1)]}}), None);
    l.listed(ni).await;
    until("the first pull succeeds", || {
        l.phase(NAME) == Some(ImagePullPhase::Succeeded)
    })
    .await;
    assert_eq!(rt.pull_count(), 1);
    l.echo().await;
    for n in 1..=MAX_REPULLS {
        // The re-pull takes a second, so its Pulling shows.
        rt.pulls([Answer::Ok(s(1))]);
        rt.remove(IMAGE);
        until("the tag is Pulling again", || {
            l.phase(NAME) == Some(ImagePullPhase::Pulling)
        })
        .await;
        let live = l.live(NAME).expect("a live status");
        assert_eq!(
            live.message.as_deref(),
            Some(repull_note(n).as_str()),
            "re-pull {n}"
        );
        until("the re-pull succeeds", || {
            l.phase(NAME) == Some(ImagePullPhase::Succeeded)
        })
        .await;
        assert_eq!(rt.pull_count(), 1 + n as usize, "re-pull {n}");
        l.echo().await;
    }
    rt.remove(IMAGE);
    until("the tag fails", || {
        l.phase(NAME) == Some(ImagePullPhase::Failed)
    })
    .await;
    let live = l.live(NAME).expect("a live status");
    assert_eq!(
        live.message.as_deref(),
        Some(give_up_message(MAX_REPULLS + 1).as_str())
    );
    l.echo().await;
    tokio::time::sleep(PRESENCE * 3).await;
    assert_eq!(
        rt.pull_count(),
        1 + MAX_REPULLS as usize,
        "no pull after giving up"
    );
    assert_eq!(l.deps.metrics.images_lost.get(), u64::from(MAX_REPULLS) + 1);
    l.stop().await;
}

/// A new version of an entry cancels the pull of the old one (which would
/// otherwise keep the node's only pull slot) and pulls for the new one;
/// the partial blobs' lease is kept for the pull that replaces it.
#[tokio::test(start_paused = true)]
async fn a_superseded_entry_cancels_the_old_task() {
    let rt = FakeRuntime::default();
    rt.pulls([Answer::Hang, Answer::Ok(s(1))]);
    let mut l = start(rt.clone(), None).await;
    let ni = l.nodeimage(json!({NAME: {"tags": [entry(1)]}}), None);
    l.listed(ni).await;
    until("the first pull starts", || rt.pull_count() == 1).await;
    let ni = l.nodeimage(json!({NAME: {"tags": [entry(2)]}}), None);
    l.applied(ni).await;
    until("the new version succeeds", || {
        l.live(NAME)
            .is_some_and(|s| s.version == Some(2) && s.phase == ImagePullPhase::Succeeded)
    })
    .await;
    assert_eq!(rt.pull_count(), 2, "one pull per version");
    tokio::time::sleep(s(60)).await;
    let live = l.live(NAME).expect("a live status");
    assert_eq!(live.version, Some(2), "the old task never reports again");
    // Only the new pull's outcome ends the lease, once.
    assert_eq!(l.lease_ends(), 1);
    l.stop().await;
}

/// An entry removed mid-pull: its task is cancelled (the slot frees for
/// another image), its live status goes, and its lease ends once the task
/// is gone.
#[tokio::test(start_paused = true)]
async fn a_removed_entry_cancels_its_task_and_ends_its_lease() {
    let rt = FakeRuntime::default();
    rt.pulls([Answer::Hang]);
    let mut l = start(rt.clone(), None).await;
    let ni = l.nodeimage(json!({NAME: {"tags": [entry(1)]}}), None);
    l.listed(ni).await;
    until("the pull starts", || rt.pull_count() == 1).await;
    assert_eq!(l.lease_ends(), 0);
    let ni = l.nodeimage(json!({OTHER: {"tags": [entry(1)]}}), None);
    l.applied(ni).await;
    until("the lease ends", || l.lease_ends() == 1).await;
    assert_eq!(l.live(NAME), None, "the removed tag's status is dropped");
    until("the other image, behind the one slot, is pulled", || {
        l.phase(OTHER) == Some(ImagePullPhase::Succeeded)
    })
    .await;
    assert!(!l.deps.leases.in_use(IMAGE));
    l.stop().await;
}

/// The daemon's own status writes come back through the watch: neither
/// the echo of a running pull (Pulling) nor that of a finished one
/// (Succeeded) starts it again (an Always pull, which a second task would
/// pull again rather than find present).
#[tokio::test(start_paused = true)]
async fn its_own_status_write_does_not_restart_work() {
    let rt = FakeRuntime::default();
    rt.pulls([Answer::Ok(s(5))]);
    let mut l = start(rt.clone(), None).await;
    let mut always = entry(1);
    always["imagePullPolicy"] = json!("Always");
    let ni = l.nodeimage(json!({NAME: {"tags": [always]}}), None);
    l.listed(ni).await;
    until("the pull runs", || {
        l.phase(NAME) == Some(ImagePullPhase::Pulling)
    })
    .await;
    l.echo().await;
    until("the pull succeeds", || {
        l.phase(NAME) == Some(ImagePullPhase::Succeeded)
    })
    .await;
    l.echo().await;
    l.echo().await;
    tokio::time::sleep(s(60)).await;
    assert_eq!(rt.pull_count(), 1, "{:?}", rt.calls());
    assert_eq!(l.lease_ends(), 1, "the one pull ended its lease once");
    l.stop().await;
}

/// At start, once the first NodeImage is acted on, the leases a previous
/// run left are swept, keeping those of the pulls this run starts (an
/// image already pulled for its version is not); once per run.
#[tokio::test(start_paused = true)]
async fn the_first_sweep_keeps_only_the_pulls_now_running() {
    let rt = FakeRuntime::default();
    rt.pulls([Answer::Hang]);
    let mut l = start(rt.clone(), None).await;
    let done = json!({"imageStatuses": {OTHER: {"tags": [{
        "tag": "v1", "version": 1, "phase": "Succeeded", "progress": 100,
        "completionTime": "2026-11-28T00:00:00Z", "imageID": format!("{OTHER}@sha256:1"),
    }]}}});
    let images = json!({NAME: {"tags": [entry(1)]}, OTHER: {"tags": [entry(1)]}});
    let ni = l.nodeimage(images.clone(), Some(done));
    l.listed(ni).await;
    let sweeps = |l: &Loop| l.calls_of(|c| matches!(c, Call::SweepLeases(_)));
    assert_eq!(sweeps(&l), vec![Call::SweepLeases(vec![IMAGE.into()])]);
    assert_eq!(rt.pull_count(), 1, "the finished tag is not pulled again");
    let ni = l.nodeimage(images, None);
    l.applied(ni).await;
    l.echo().await;
    assert_eq!(sweeps(&l).len(), 1, "one sweep per run");
    l.stop().await;

    // A runtime without leases (CRI alone) has none to sweep.
    let rt = FakeRuntime::default();
    rt.cri_only();
    let mut l = start(rt.clone(), None).await;
    let ni = l.nodeimage(json!({NAME: {"tags": [entry(1)]}}), None);
    l.listed(ni).await;
    assert!(sweeps(&l).is_empty());
    l.stop().await;
}

mod removals;
