//! The status writer's rules over recording sinks, with tokio's clock paused.

use super::*;
use nodeimage_api::kruise::{ImagePullPhase, ImageSpec, ImageTagSpec, NodeImageSpec};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Default)]
struct Recorder {
    writes: Arc<AtomicUsize>,
    last: Arc<Mutex<Option<serde_json::Value>>>,
}

impl Recorder {
    /// How many writes it took.
    fn writes(&self) -> usize {
        self.writes.load(Ordering::SeqCst)
    }

    /// The last patch written (null before any).
    fn last_patch(&self) -> serde_json::Value {
        self.last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }
}

impl StatusSink for Recorder {
    async fn patch(&self, _: &str, patch: serde_json::Value) -> Result<NodeImage, kube::Error> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        let mut ni = node_image("2");
        let status = serde_json::from_value(written(&patch).clone()).unwrap_or_default();
        ni.status = Some(status);
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(patch);
        Ok(ni)
    }

    async fn get(&self, _: &str) -> Result<NodeImage, kube::Error> {
        Ok(node_image("2"))
    }
}

/// The status a patch writes (its last op).
fn written(patch: &serde_json::Value) -> &serde_json::Value {
    patch
        .as_array()
        .and_then(|ops| ops.last())
        .filter(|op| op["path"] == "/status")
        .map_or(&serde_json::Value::Null, |op| &op["value"])
}

/// The `test` ops of a patch, as (path, value).
fn tests_of(patch: &serde_json::Value) -> Vec<(String, serde_json::Value)> {
    patch
        .as_array()
        .into_iter()
        .flatten()
        .filter(|op| op["op"] == "test")
        .map(|op| {
            (
                op["path"].as_str().unwrap_or("").to_string(),
                op["value"].clone(),
            )
        })
        .collect()
}

fn node_image(rv: &str) -> NodeImage {
    node_image_with(rv, &["1"])
}

/// A NodeImage with these tags of image `a`.
fn node_image_with(rv: &str, tags: &[&str]) -> NodeImage {
    let mut images = BTreeMap::new();
    images.insert(
        "a".into(),
        ImageSpec {
            tags: tags
                .iter()
                .map(|t| ImageTagSpec {
                    tag: (*t).into(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        },
    );
    let mut ni = NodeImage::new(
        "n",
        NodeImageSpec {
            images: Some(images),
            removals: None,
        },
    );
    ni.metadata.resource_version = Some(rv.into());
    ni
}

/// Tag `tag` of image `a`.
fn key(tag: &str) -> TagKey {
    TagKey {
        image: "a".into(),
        tag: tag.into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    }
}

/// Tag `tag`'s status in `phase`, at entry version 0.
fn status(tag: &str, phase: ImagePullPhase, progress: Option<i32>) -> ImageTagStatus {
    ImageTagStatus {
        tag: tag.into(),
        phase,
        version: Some(0),
        progress,
        ..Default::default()
    }
}

/// Stops a writer started by [`start`] and waits for its last write.
async fn stop(tx: watch::Sender<bool>, task: tokio::task::JoinHandle<()>) {
    let _ = tx.send(true);
    let _ = task.await;
}

/// A writer on `sink`, with its handle, stop switch and task.
fn start(
    sink: impl StatusSink,
    errors: prometheus_client::metrics::counter::Counter,
) -> (
    StatusHandle,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let h = StatusHandle::default();
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(run(h.clone(), sink, "n".into(), errors, rx));
    (h, tx, task)
}

/// A writer on `sink` whose watch brought `ni` and nothing after it,
/// `wait` ago.
async fn after_watching<S: StatusSink + Clone>(
    sink: S,
    ni: NodeImage,
    wait: Duration,
) -> (
    S,
    StatusHandle,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (h, tx, task) = start(sink.clone(), Default::default());
    h.observe(ni);
    tokio::time::sleep(wait).await;
    (sink, h, tx, task)
}

#[tokio::test(start_paused = true)]
async fn coalesces_and_skips_unchanged_writes() {
    let (sink, h, tx, task) =
        after_watching(Recorder::default(), node_image("1"), Duration::from_secs(2)).await;
    assert_eq!(sink.writes(), 1, "the Waiting entry is written");

    let key = key("1");
    // Ten progress reports in one second make at most two writes.
    h.report(&key, status("1", ImagePullPhase::Pulling, Some(0)));
    for p in 1..=10 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        h.report(&key, status("1", ImagePullPhase::Pulling, Some(p * 9)));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let writes = sink.writes();
    assert!((2..=4).contains(&writes), "{writes} writes");
    // Nothing changed: nothing written.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(sink.writes(), writes);
    stop(tx, task).await;
    let last = sink.last_patch();
    assert_eq!(
        written(&last)["imageStatuses"]["a"]["tags"][0]["progress"],
        90
    );
    assert_eq!(last[0]["op"], "test", "guarded");
}

/// Never answers its first write; records the rest.
#[derive(Clone, Default)]
struct HangsOnce {
    calls: Arc<AtomicUsize>,
    inner: Recorder,
}

impl StatusSink for HangsOnce {
    async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<NodeImage, kube::Error> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            std::future::pending::<()>().await;
        }
        self.inner.patch(name, patch).await
    }

    async fn get(&self, name: &str) -> Result<NodeImage, kube::Error> {
        self.inner.get(name).await
    }
}

/// Refuses every write guarded by its entries while `refuse` holds
/// (a failed `test`), and serves the object at `serve_generation`.
#[derive(Clone)]
struct Refuses {
    patches: Arc<Mutex<Vec<serde_json::Value>>>,
    gets: Arc<AtomicUsize>,
    /// Refuse the first write only (the spec moved on), or every write
    /// that does not test the generation (the spec as decoded cannot
    /// match the stored one).
    only_first: bool,
    serve_generation: i64,
}

impl Refuses {
    fn new(only_first: bool, serve_generation: i64) -> Self {
        Self {
            patches: Default::default(),
            gets: Default::default(),
            only_first,
            serve_generation,
        }
    }

    fn patches(&self) -> Vec<serde_json::Value> {
        self.patches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl StatusSink for Refuses {
    async fn patch(&self, _: &str, patch: serde_json::Value) -> Result<NodeImage, kube::Error> {
        let n = {
            let mut p = self.patches.lock().unwrap_or_else(|p| p.into_inner());
            p.push(patch.clone());
            p.len()
        };
        let by_generation = tests_of(&patch)
            .iter()
            .any(|(path, _)| path == "/metadata/generation");
        let refuse = if self.only_first {
            n == 1
        } else {
            !by_generation
        };
        if refuse {
            return Err(kube::Error::Api(Box::new(kube::core::Status {
                code: 422,
                message: "the server rejected our request due to an error in our request".into(),
                ..Default::default()
            })));
        }
        let mut ni = with_generation("w", self.serve_generation);
        ni.status = serde_json::from_value(written(&patch).clone()).ok();
        Ok(ni)
    }

    async fn get(&self, _: &str) -> Result<NodeImage, kube::Error> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        Ok(with_generation("g", self.serve_generation))
    }
}

fn with_generation(rv: &str, generation: i64) -> NodeImage {
    let mut ni = node_image(rv);
    ni.metadata.generation = Some(generation);
    ni.metadata.uid = Some("u".into());
    ni
}

/// A writer on `sink` whose watch brought generation 1 and nothing after
/// it, `secs` seconds ago.
async fn refusing(
    sink: Refuses,
    secs: u64,
) -> (
    Refuses,
    StatusHandle,
    watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let ni = with_generation("1", 1);
    after_watching(sink, ni, Duration::from_secs(secs)).await
}

#[tokio::test(start_paused = true)]
async fn a_refused_write_reads_the_object_again_and_writes_on_top_of_it() {
    let (sink, _h, tx, task) = refusing(Refuses::new(true, 2), 2).await;
    let patches = sink.patches();
    assert_eq!(
        sink.gets.load(Ordering::SeqCst),
        1,
        "read once after the refusal"
    );
    assert_eq!(patches.len(), 2, "{patches:?}");
    // Both guarded by the entries they write, since the spec moved on
    // between them (generation 1, then 2).
    for p in &patches {
        let tests = tests_of(p);
        assert!(tests.contains(&("/metadata/uid".into(), "u".into())), "{p}");
        assert!(
            tests.contains(&("/spec/images/a/tags/0/tag".into(), "1".into())),
            "{p}"
        );
        assert!(
            !tests.iter().any(|(path, _)| path == "/metadata/generation"),
            "{p}"
        );
    }
    stop(tx, task).await;
}

#[tokio::test(start_paused = true)]
async fn an_entries_guard_refused_on_an_unchanged_spec_falls_back_to_the_generation() {
    let (sink, h, tx, task) = refusing(Refuses::new(false, 1), 3).await;
    let patches = sink.patches();
    assert_eq!(patches.len(), 2, "{patches:?}");
    assert_eq!(
        tests_of(&patches[1]),
        vec![("/metadata/generation".to_string(), serde_json::json!(1))],
        "the second write tests the generation it was refused at"
    );
    // A new generation tries the entries guard again (once our own
    // write no longer outranks the watch).
    tokio::time::sleep(OWN_WRITE_PRECEDENCE).await;
    h.observe(with_generation("3", 2));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let patches = sink.patches();
    assert!(patches.len() >= 3, "{patches:?}");
    assert!(
        tests_of(&patches[2])
            .iter()
            .any(|(path, _)| path == "/metadata/uid"),
        "{}",
        patches[2]
    );
    stop(tx, task).await;
}

#[tokio::test(start_paused = true)]
async fn a_write_that_never_answers_is_given_up_and_tried_again() {
    let sink = HangsOnce::default();
    let errors = prometheus_client::metrics::counter::Counter::default();
    let (h, tx, task) = start(sink.clone(), errors.clone());
    h.observe(node_image("1"));
    tokio::time::sleep(WRITE_TIMEOUT / 2).await;
    assert_eq!(sink.inner.writes(), 0, "first write hangs");
    tokio::time::sleep(WRITE_TIMEOUT).await;
    assert_eq!(sink.inner.writes(), 1, "written by the second try");
    assert_eq!(errors.get(), 1, "the hung write is counted as an error");
    stop(tx, task).await;
}

#[tokio::test(start_paused = true)]
async fn a_phase_change_does_not_wait_for_the_progress_interval() {
    let (sink, h, tx, task) = after_watching(
        Recorder::default(),
        node_image("1"),
        Duration::from_millis(500),
    )
    .await;
    let key = key("1");
    let pulling = |progress| status("1", ImagePullPhase::Pulling, Some(progress));
    h.report(&key, pulling(0));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = sink.writes();
    // Progress now waits for the interval ...
    h.report(&key, pulling(50));
    tokio::time::sleep(Duration::from_millis(50)).await;
    // ... and success arrives while it waits: written after the
    // coalescing pause, not at the end of the progress interval.
    h.report(&key, status("1", ImagePullPhase::Succeeded, Some(100)));
    tokio::time::sleep(COALESCE + Duration::from_millis(50)).await;
    assert_eq!(
        sink.writes(),
        before + 1,
        "Succeeded written within the coalescing pause"
    );
    stop(tx, task).await;
}

/// The coalescing pause gathers a burst of reports; the last pull of a
/// burst ending has nothing left to gather and is written at once, while
/// one ending beside a running pull still waits for the pause.
#[tokio::test(start_paused = true)]
async fn only_the_last_pull_to_end_skips_the_coalescing_pause() {
    let ni = node_image_with("1", &["1", "2"]);
    let (sink, h, tx, task) =
        after_watching(Recorder::default(), ni, Duration::from_millis(500)).await;
    let st = |tag: &str, phase| status(tag, phase, None);
    h.report(&key("1"), st("1", ImagePullPhase::Pulling));
    h.report(&key("2"), st("2", ImagePullPhase::Pulling));
    // Both pulls outlast the hold: their start is written.
    tokio::time::sleep(START_HOLD).await;
    let writes = || sink.writes();
    let before = writes();

    // Tag 2 still pulls: tag 1's success waits for the pause.
    h.report(&key("1"), st("1", ImagePullPhase::Succeeded));
    tokio::time::sleep(COALESCE / 2).await;
    assert_eq!(writes(), before, "not written before the pause ends");
    tokio::time::sleep(COALESCE).await;
    assert_eq!(writes(), before + 1, "written after the pause");

    // Tag 2 is the last: written without the pause.
    h.report(&key("2"), st("2", ImagePullPhase::Failed));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(writes(), before + 2, "the last one is written at once");

    // A spec change is held for its tags' first reports.
    h.observe(node_image_with("2", &["1", "2", "3"]));
    tokio::time::sleep(COALESCE).await;
    assert_eq!(writes(), before + 2, "a spec change is held");
    tokio::time::sleep(START_HOLD).await;
    assert_eq!(writes(), before + 3, "the new tag's Waiting is written");
    let last = sink.last_patch();
    assert_eq!(
        written(&last)["imageStatuses"]["a"]["tags"][0]["phase"],
        "Succeeded"
    );
    stop(tx, task).await;
}

#[tokio::test(start_paused = true)]
async fn waits_until_the_observed_object_satisfies_a_predicate() {
    let h = StatusHandle::default();
    let has_rv = |rv: &'static str| {
        move |ni: &NodeImage| ni.metadata.resource_version.as_deref() == Some(rv)
    };
    // Nothing observed: times out.
    assert!(!h.wait_observed(has_rv("1"), Duration::from_secs(1)).await);
    h.observe(node_image("1"));
    assert!(h.wait_observed(has_rv("1"), Duration::from_secs(1)).await);
    // A later object wakes the waiter.
    let h2 = h.clone();
    let waiter =
        tokio::spawn(async move { h2.wait_observed(has_rv("3"), Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.observe(node_image("2"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.observe(node_image("3"));
    assert!(waiter.await.unwrap_or(false));
    // Watch events are taken in order: resourceVersions are opaque.
    h.observe(node_image("2"));
    assert!(h.wait_observed(has_rv("2"), Duration::from_secs(1)).await);
}

fn rv_of(h: &StatusHandle) -> Option<String> {
    h.observed().and_then(|o| o.metadata.resource_version)
}

/// One step of a scenario of what the handle is told, or a check of what
/// it holds.
enum Step {
    /// The watch delivers this resourceVersion.
    Watch(&'static str),
    /// A request of ours starts.
    Started,
    /// A request of ours answers with this resourceVersion.
    Response(&'static str),
    /// A relist brings this resourceVersion.
    Relist(&'static str),
    /// Time passes.
    Pass(Duration),
    /// The handle holds this resourceVersion now.
    Holds(&'static str),
}

#[tokio::test(start_paused = true)]
async fn the_newest_object_is_kept_whatever_order_it_comes_in() {
    use Step::*;
    let cases: [(&str, Vec<Step>); 4] = [
        (
            // The watch delivers our write ("w") and a newer change ("x")
            // before the write's answer is read; then events keep being
            // taken: nothing waits for "w" again.
            "an answer the watch already delivered does not step back",
            vec![
                Watch("a"),
                Started,
                Watch("w"),
                Watch("x"),
                Response("w"),
                Holds("x"),
                Watch("y"),
                Holds("y"),
            ],
        ),
        (
            // An event from before our write (any version but ours) is
            // older; our write's own event says the watch caught up.
            "our write outranks the watch until the watch delivers it",
            vec![
                Watch("a"),
                Response("c"),
                Watch("b"),
                Holds("c"),
                Watch("c"),
                Watch("d"),
                Holds("d"),
            ],
        ),
        (
            "our write's precedence ends on a relist or after its bound",
            vec![
                Watch("a"),
                Response("c"),
                Relist("z"),
                Holds("z"),
                Response("y"),
                Watch("x"),
                Holds("y"),
                Pass(OWN_WRITE_PRECEDENCE),
                Watch("x"),
                Holds("x"),
            ],
        ),
        (
            // The server returned the version we hold: no event will follow.
            "a write that changed nothing waits for no event",
            vec![Watch("a"), Response("a"), Watch("b"), Holds("b")],
        ),
    ];
    for (name, steps) in cases {
        let h = StatusHandle::default();
        for step in steps {
            match step {
                Watch(rv) => h.observe(node_image(rv)),
                Started => h.request_started(),
                Response(rv) => h.observe_response(node_image(rv)),
                Relist(rv) => h.observe_relisted(node_image(rv)),
                Pass(d) => tokio::time::advance(d).await,
                Holds(rv) => assert_eq!(rv_of(&h).as_deref(), Some(rv), "{name}"),
            }
        }
    }
}

/// New work is held: a pull that ends within [`START_HOLD`] of the spec
/// change that asked for it is written once, with its end; one that
/// outlasts it shows Pulling at the hold, then its end at once.
#[tokio::test(start_paused = true)]
async fn a_pull_that_ends_within_the_hold_is_written_once() {
    let (sink, h, tx, task) =
        after_watching(Recorder::default(), node_image("1"), Duration::from_secs(2)).await;
    let before = sink.writes();
    let phase_written =
        || written(&sink.last_patch())["imageStatuses"]["a"]["tags"][1]["phase"].clone();

    // Tag 2 arrives and is pulled in half the hold: one write, Succeeded.
    h.observe(node_image_with("2", &["1", "2"]));
    h.report(&key("2"), status("2", ImagePullPhase::Waiting, None));
    h.report(&key("2"), status("2", ImagePullPhase::Pulling, Some(0)));
    tokio::time::sleep(START_HOLD / 2).await;
    assert_eq!(sink.writes(), before, "the start is held");
    h.report(&key("2"), status("2", ImagePullPhase::Succeeded, Some(100)));
    tokio::time::sleep(START_HOLD * 3).await;
    assert_eq!(sink.writes(), before + 1, "written once");
    assert_eq!(phase_written(), "Succeeded");

    // Tag 3 outlasts the hold: Pulling at the hold, then Failed. (The
    // recorder answers every write with resourceVersion 2, which the
    // handle then holds already.)
    h.observe(node_image_with("2", &["1", "2", "3"]));
    h.report(&key("3"), status("3", ImagePullPhase::Pulling, Some(0)));
    tokio::time::sleep(START_HOLD - COALESCE).await;
    assert_eq!(sink.writes(), before + 1, "held until the hold ends");
    tokio::time::sleep(COALESCE * 2).await;
    assert_eq!(sink.writes(), before + 2, "Pulling written at the hold");
    let tag3 = || written(&sink.last_patch())["imageStatuses"]["a"]["tags"][2]["phase"].clone();
    assert_eq!(tag3(), "Pulling");
    tokio::time::sleep(START_HOLD / 2).await;
    h.report(&key("3"), status("3", ImagePullPhase::Failed, None));
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(sink.writes(), before + 3, "an end is written at once");
    assert_eq!(tag3(), "Failed");
    stop(tx, task).await;
}

/// What makes a report urgent, held or progress only.
#[test]
fn changes_are_classified_by_what_moved() {
    use ImagePullPhase::{Failed, Pulling, Succeeded, Waiting};
    let st = |phase, message: Option<&str>| ImageTagStatus {
        message: message.map(Into::into),
        ..status("1", phase, None)
    };
    // An upgrade entry that moved to its next step (the phase stays).
    let stepped = |mut s: ImageTagStatus| {
        s.upgrade = nodeimage_api::kruise::TagUpgradeStatus {
            state: Some(nodeimage_api::kruise::UpgradeState::Upgrading),
            ..Default::default()
        }
        .boxed();
        s
    };
    let cases = [
        (None, st(Waiting, None), Change::Start),
        (None, st(Pulling, None), Change::Start),
        (None, st(Waiting, Some("a note")), Change::Start),
        (None, st(Succeeded, None), Change::Urgent),
        (None, st(Failed, Some("x")), Change::Urgent),
        (Some(st(Waiting, None)), st(Pulling, None), Change::Start),
        (
            Some(st(Waiting, None)),
            st(Waiting, Some("rate limited")),
            Change::Urgent,
        ),
        (Some(st(Pulling, None)), st(Succeeded, None), Change::Urgent),
        (
            Some(st(Pulling, None)),
            st(Waiting, Some("waiting for containerd")),
            Change::Urgent,
        ),
        (Some(st(Pulling, None)), st(Pulling, None), Change::Progress),
        (Some(st(Succeeded, None)), st(Pulling, None), Change::Urgent),
        (
            Some(st(Pulling, None)),
            stepped(st(Pulling, None)),
            Change::Urgent,
        ),
    ];
    for (old, new, want) in cases {
        assert_eq!(Change::of(old.as_ref(), &new), want, "{old:?} -> {new:?}");
    }
}
