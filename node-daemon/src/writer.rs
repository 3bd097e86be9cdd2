//! Publishes the NodeImage status: coalesces reports from the pull workers,
//! writes phase changes within a fraction of a second, progress at most about
//! once a second, and nothing when nothing changed. Writes are JSON Patches
//! of the status subresource guarded by what their entries were built from
//! (see `status::guarded_patch_with`), or by the spec's generation where that
//! guard cannot hold.

use crate::desired::TagKey;
use crate::status;
use nodeimage_api::kruise::nodeimage::StatusGuard;
use nodeimage_api::kruise::{ImageTagStatus, NodeImage};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

/// Quiet time that gathers simultaneous phase changes into one write (the
/// tags a spec change starts report within a few milliseconds of each
/// other); short, since it is added to a Succeeded a watcher waits for.
/// Skipped when nothing is left to gather: no spec change waits for its
/// tags' first reports and every tag has finished (`StatusHandle::quiet`).
const COALESCE: Duration = Duration::from_millis(30);
/// Least time between writes that only move progress.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// Longest a status write may take before it is given up and tried again.
/// The API client has no read timeout, and one request that never answers
/// would otherwise freeze every tag's status on this node.
const WRITE_TIMEOUT: Duration = Duration::from_secs(20);

/// Pause before writing again on top of an object read after a refused
/// write: the spec is moving, and further changes may follow at once.
const REWRITE_PAUSE: Duration = Duration::from_millis(100);

/// How long the object our own write returned outranks watch events that do
/// not carry its resourceVersion. Watch events arrive in order, so until the
/// watch delivers our write, what it delivers is older; the bound covers a
/// write whose event never comes (a relist replaced it), and a wrong guess
/// costs one refused write or one write built on an older spec, which the
/// answer (carrying the newer spec) makes the writer redo.
const OWN_WRITE_PRECEDENCE: Duration = Duration::from_secs(5);

#[derive(Default)]
struct Inner {
    observed: Option<NodeImage>,
    /// resourceVersion of the object our last request returned while the
    /// watch has not delivered it, and when it came. resourceVersions are
    /// opaque: compared for equality only.
    own_write: Option<(String, Instant)>,
    /// While a request of ours is in flight: the resourceVersions the watch
    /// delivered meanwhile. If the answer's version is among them, the watch
    /// got there first and what we observe is as new or newer.
    seen_during_request: Option<Vec<String>>,
    live: BTreeMap<TagKey, ImageTagStatus>,
    urgent: bool,
    /// A spec change not written since: its tags' first reports follow
    /// within milliseconds.
    spec_pending: bool,
    pending: bool,
    /// A generation at which a write guarded by its entries was refused
    /// although the spec had not moved: the spec as decoded does not match
    /// the stored JSON (a salvaged entry), so writes at this generation
    /// test the generation instead.
    generation_guard: Option<i64>,
}

/// Where an observed NodeImage came from.
#[derive(Clone, Copy)]
enum Source {
    Watch,
    Relist,
    /// The answer to a request of ours (a write, or a read after a refused
    /// write).
    Response,
}

/// Handle that workers and the watch loop report through.
#[derive(Clone, Default)]
pub struct StatusHandle {
    inner: Arc<Mutex<Inner>>,
    notify: Arc<Notify>,
    /// Woken whenever a newer NodeImage is observed.
    seen: Arc<Notify>,
}

impl StatusHandle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves plain data; keep going with it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the latest NodeImage seen by the watch, in event order. A
    /// spec change is urgent (new tags must show as Waiting at once);
    /// anything else is rate-limited.
    pub fn observe(&self, ni: NodeImage) {
        self.update(ni, Source::Watch);
    }

    /// Records the NodeImage a relist of the watch brought: the current
    /// object, whatever we wrote before.
    pub fn observe_relisted(&self, ni: NodeImage) {
        self.update(ni, Source::Relist);
    }

    /// Marks the start of a request whose answer will be observed.
    fn request_started(&self) {
        self.lock().seen_during_request = Some(Vec::new());
    }

    /// Marks the end of a request that brought no object.
    fn request_failed(&self) {
        self.lock().seen_during_request = None;
    }

    /// Records the object a request of ours returned (our write's result,
    /// or a fresh read); nothing new to write unless its spec is new.
    fn observe_response(&self, ni: NodeImage) {
        self.update(ni, Source::Response);
    }

    fn update(&self, ni: NodeImage, source: Source) {
        let mut g = self.lock();
        let rv = ni.metadata.resource_version.clone();
        let take = match source {
            Source::Relist => {
                g.own_write = None;
                true
            }
            Source::Response => {
                let delivered = g.seen_during_request.take().unwrap_or_default();
                let seen = g
                    .observed
                    .as_ref()
                    .and_then(|o| o.metadata.resource_version.as_ref());
                match rv {
                    // The watch already delivered this version (a write that
                    // changed nothing returns the one we hold; a fast watch
                    // may bring our write's event before its answer): what
                    // we observe is as new or newer. Taking the answer would
                    // step back to an older object, whose event never comes
                    // again.
                    Some(rv) if seen == Some(&rv) || delivered.contains(&rv) => {
                        g.own_write = None;
                        false
                    }
                    Some(rv) => {
                        g.own_write = Some((rv, Instant::now()));
                        true
                    }
                    None => true,
                }
            }
            Source::Watch => {
                if let (Some(seen), Some(rv)) = (g.seen_during_request.as_mut(), &rv) {
                    seen.push(rv.clone());
                }
                match &g.own_write {
                    Some((own, _)) if rv.as_ref() == Some(own) => {
                        g.own_write = None;
                        true
                    }
                    Some((_, at)) if at.elapsed() < OWN_WRITE_PRECEDENCE => false,
                    _ => {
                        g.own_write = None;
                        true
                    }
                }
            }
        };
        if take {
            let spec_changed = g.observed.as_ref().is_none_or(|o| o.spec != ni.spec);
            g.observed = Some(ni);
            self.seen.notify_waiters();
            // An answer may carry a spec newer than any event seen yet
            // (the events before it are then skipped): rebuild for it too.
            if !matches!(source, Source::Response) || spec_changed {
                g.pending = true;
                g.urgent |= spec_changed;
                g.spec_pending |= spec_changed;
                drop(g);
                self.notify.notify_one();
            }
        }
    }

    /// Forgets the NodeImage (it was deleted).
    pub fn forget(&self) {
        let mut g = self.lock();
        g.observed = None;
        g.own_write = None;
        g.generation_guard = None;
        g.live.clear();
    }

    /// Reports a tag's state; phase, version or message changes are urgent.
    pub fn report(&self, key: &TagKey, st: ImageTagStatus) {
        let mut g = self.lock();
        let urgent = match g.live.get(key) {
            Some(old) => {
                old.phase != st.phase || old.version != st.version || old.message != st.message
            }
            None => true,
        };
        let changed = g.live.get(key) != Some(&st);
        g.live.insert(key.clone(), st);
        if changed {
            g.pending = true;
            g.urgent |= urgent;
            drop(g);
            self.notify.notify_one();
        }
    }

    /// Drops a tag's live state (its pull was cancelled).
    pub fn clear(&self, key: &TagKey) {
        let mut g = self.lock();
        if g.live.remove(key).is_some() {
            g.pending = true;
            g.urgent = true;
            drop(g);
            self.notify.notify_one();
        }
    }

    /// The NodeImage last seen.
    pub fn observed(&self) -> Option<NodeImage> {
        self.lock().observed.clone()
    }

    /// Waits until the NodeImage seen (from the watch or our own writes)
    /// satisfies `pred`; false after `timeout`. Used to record a step in the
    /// API before running it.
    pub async fn wait_observed(
        &self,
        pred: impl Fn(&NodeImage) -> bool,
        timeout: Duration,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let seen = self.seen.notified();
            tokio::pin!(seen);
            seen.as_mut().enable();
            if self.lock().observed.as_ref().is_some_and(&pred) {
                return true;
            }
            if tokio::time::timeout_at(deadline, seen).await.is_err() {
                return false;
            }
        }
    }

    /// Takes what should be written now, if anything differs from the observed status.
    fn take(&self) -> Option<(NodeImage, StatusGuard, serde_json::Value)> {
        let mut g = self.lock();
        g.pending = false;
        g.urgent = false;
        g.spec_pending = false;
        let ni = g.observed.clone()?;
        let new = status::build(&ni, &g.live);
        if ni.status.as_ref() == Some(&new) {
            return None;
        }
        let guard = match (g.generation_guard, ni.metadata.generation) {
            (Some(at), Some(now)) if at == now => StatusGuard::Generation,
            _ => StatusGuard::Entries,
        };
        let patch = status::guarded_patch_with(&ni, &new, guard);
        Some((ni, guard, patch))
    }

    /// After a refused write built on `wrote_on`, with `current` read since:
    /// an entries guard refused while the spec stayed the same cannot pass
    /// at this generation, so the generation guards there instead.
    fn note_refusal(&self, wrote_on: &NodeImage, guard: StatusGuard, current: &NodeImage) {
        let same_spec = wrote_on.metadata.uid == current.metadata.uid
            && wrote_on.metadata.generation.is_some()
            && wrote_on.metadata.generation == current.metadata.generation;
        if guard == StatusGuard::Entries && same_spec {
            let generation = current.metadata.generation;
            tracing::info!(
                ?generation,
                "status write refused on an unchanged spec; guarding by the generation at this one"
            );
            self.lock().generation_guard = generation;
        }
    }

    fn state(&self) -> (bool, bool) {
        let g = self.lock();
        (g.pending, g.urgent)
    }

    /// Nothing is about to report: no spec change waits for its tags' first
    /// reports, and every tag's pull has finished. A change now is the last
    /// of its burst, so waiting to gather more would only delay it.
    fn quiet(&self) -> bool {
        let g = self.lock();
        !g.spec_pending && g.live.values().all(|s| s.phase.is_finished())
    }
}

/// Where status writes go.
pub trait StatusSink: Send + Sync + 'static {
    /// Applies a status JSON Patch; returns the updated object.
    fn patch(
        &self,
        name: &str,
        patch: serde_json::Value,
    ) -> impl std::future::Future<Output = Result<NodeImage, kube::Error>> + Send;

    /// Reads the object as it is now (after a write was refused).
    fn get(
        &self,
        name: &str,
    ) -> impl std::future::Future<Output = Result<NodeImage, kube::Error>> + Send;
}

/// The answer is decoded entry by entry (see `decode`), so a NodeImage with
/// an entry that does not decode still takes status writes.
impl StatusSink for kube::Api<nodeimage_api::lenient::Lenient<NodeImage>> {
    async fn patch(&self, name: &str, patch: serde_json::Value) -> Result<NodeImage, kube::Error> {
        let ops: json_patch::Patch =
            serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
        self.patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Json::<()>(ops),
        )
        .await
        .map(|l| crate::decode::nodeimage(l).nodeimage)
    }

    async fn get(&self, name: &str) -> Result<NodeImage, kube::Error> {
        kube::Api::get(self, name)
            .await
            .map(|l| crate::decode::nodeimage(l).nodeimage)
    }
}

/// Runs the writer until `stop` flips to true, then makes a last write.
pub async fn run(
    handle: StatusHandle,
    sink: impl StatusSink,
    name: String,
    errors: prometheus_client::metrics::counter::Counter,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_write = Instant::now() - PROGRESS_INTERVAL;
    loop {
        let (pending, urgent) = handle.state();
        if !pending {
            tokio::select! {
                _ = handle.notify.notified() => {},
                _ = stop.changed() => {},
            }
            if *stop.borrow() {
                break;
            }
            continue;
        }
        if urgent {
            if !handle.quiet() {
                tokio::time::sleep(COALESCE).await;
            }
        } else {
            // A phase change while progress waits out its interval must not
            // wait with it: wake on every report and look again.
            tokio::select! {
                _ = tokio::time::sleep_until(last_write + PROGRESS_INTERVAL) => {},
                _ = handle.notify.notified() => continue,
                _ = stop.changed() => {},
            }
        }
        write_once(&handle, &sink, &name, &errors, &mut last_write).await;
        if *stop.borrow() {
            break;
        }
    }
    write_once(&handle, &sink, &name, &errors, &mut last_write).await;
}

async fn write_once(
    handle: &StatusHandle,
    sink: &impl StatusSink,
    name: &str,
    errors: &prometheus_client::metrics::counter::Counter,
    last: &mut Instant,
) {
    let Some((ni, guard, patch)) = handle.take() else {
        return;
    };
    *last = Instant::now();
    handle.request_started();
    let Ok(result) = tokio::time::timeout(WRITE_TIMEOUT, sink.patch(name, patch)).await else {
        handle.request_failed();
        tracing::warn!(
            timeout_secs = WRITE_TIMEOUT.as_secs(),
            "status write got no answer in time; retrying"
        );
        errors.inc();
        retry_later(handle, Duration::from_secs(1)).await;
        return;
    };
    match result {
        Ok(updated) => {
            let counts = updated.status.as_ref().map(|s| {
                (
                    s.desired,
                    s.waiting.unwrap_or(0),
                    s.pulling.unwrap_or(0),
                    s.succeeded.unwrap_or(0),
                    s.failed.unwrap_or(0),
                )
            });
            tracing::debug!(?counts, "status written");
            handle.observe_response(updated);
        }
        Err(kube::Error::Api(e))
            if e.code == 409 || nodeimage_api::kruise::nodeimage::is_failed_test(&e) =>
        {
            // The spec moved on since we built this status: read the object
            // as it is now and rebuild on top of it. Waiting for the watch
            // alone is not enough when what we observe is older than an
            // event it already delivered.
            handle.request_failed();
            tracing::debug!(generation = ?ni.metadata.generation, "status write refused: the object moved on; reading it again");
            reread(handle, sink, name, errors, (&ni, guard)).await;
        }
        Err(e) => {
            handle.request_failed();
            tracing::warn!(error = %e, "status write failed; retrying");
            errors.inc();
            retry_later(handle, Duration::from_secs(1)).await;
        }
    }
}

/// Reads the object after a refused write and writes again on top of it.
async fn reread(
    handle: &StatusHandle,
    sink: &impl StatusSink,
    name: &str,
    errors: &prometheus_client::metrics::counter::Counter,
    (refused, guard): (&NodeImage, StatusGuard),
) {
    handle.request_started();
    match tokio::time::timeout(WRITE_TIMEOUT, sink.get(name)).await {
        Ok(Ok(current)) => {
            handle.note_refusal(refused, guard, &current);
            handle.observe_response(current);
            retry_later(handle, REWRITE_PAUSE).await;
        }
        Ok(Err(e)) => {
            handle.request_failed();
            tracing::warn!(error = %e, "reading the NodeImage after a refused write failed; retrying");
            errors.inc();
            retry_later(handle, Duration::from_secs(1)).await;
        }
        Err(_) => {
            handle.request_failed();
            tracing::warn!(
                timeout_secs = WRITE_TIMEOUT.as_secs(),
                "reading the NodeImage after a refused write got no answer in time; retrying"
            );
            errors.inc();
            retry_later(handle, Duration::from_secs(1)).await;
        }
    }
}

async fn retry_later(handle: &StatusHandle, after: Duration) {
    tokio::time::sleep(after).await;
    let mut g = handle.lock();
    g.pending = true;
    g.urgent = true;
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::kruise::{ImagePullPhase, ImageSpec, ImageTagSpec, NodeImageSpec};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Clone, Default)]
    struct Recorder {
        writes: Arc<AtomicUsize>,
        last: Arc<Mutex<Option<serde_json::Value>>>,
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
            },
        );
        ni.metadata.resource_version = Some(rv.into());
        ni
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

    #[tokio::test(start_paused = true)]
    async fn coalesces_and_skips_unchanged_writes() {
        let sink = Recorder::default();
        let (h, tx, task) = start(sink.clone(), Default::default());
        h.observe(node_image("1"));
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(
            sink.writes.load(Ordering::SeqCst),
            1,
            "the Waiting entry is written"
        );

        let key = TagKey {
            image: "a".into(),
            tag: "1".into(),
        };
        // Ten progress reports in one second make at most two writes.
        h.report(
            &key,
            ImageTagStatus {
                tag: "1".into(),
                phase: ImagePullPhase::Pulling,
                version: Some(0),
                progress: Some(0),
                ..Default::default()
            },
        );
        for p in 1..=10 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            h.report(
                &key,
                ImageTagStatus {
                    tag: "1".into(),
                    phase: ImagePullPhase::Pulling,
                    version: Some(0),
                    progress: Some(p * 9),
                    ..Default::default()
                },
            );
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let writes = sink.writes.load(Ordering::SeqCst);
        assert!((2..=4).contains(&writes), "{writes} writes");
        // Nothing changed: nothing written.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(sink.writes.load(Ordering::SeqCst), writes);
        let _ = tx.send(true);
        let _ = task.await;
        let last = sink
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
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
        async fn patch(
            &self,
            name: &str,
            patch: serde_json::Value,
        ) -> Result<NodeImage, kube::Error> {
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
                    message: "the server rejected our request due to an error in our request"
                        .into(),
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

    #[tokio::test(start_paused = true)]
    async fn a_refused_write_reads_the_object_again_and_writes_on_top_of_it() {
        let sink = Refuses::new(true, 2);
        let (h, tx, task) = start(sink.clone(), Default::default());
        // The watch brings generation 1 and nothing after it.
        h.observe(with_generation("1", 1));
        tokio::time::sleep(Duration::from_secs(2)).await;
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
        let _ = tx.send(true);
        let _ = task.await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_entries_guard_refused_on_an_unchanged_spec_falls_back_to_the_generation() {
        let sink = Refuses::new(false, 1);
        let (h, tx, task) = start(sink.clone(), Default::default());
        h.observe(with_generation("1", 1));
        tokio::time::sleep(Duration::from_secs(3)).await;
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
        let _ = tx.send(true);
        let _ = task.await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_the_watch_already_delivered_does_not_step_back() {
        let h = StatusHandle::default();
        h.observe(node_image("a"));
        h.request_started();
        // The watch delivers our write ("w") and a newer change ("x") before
        // the write's answer is read.
        h.observe(node_image("w"));
        h.observe(node_image("x"));
        h.observe_response(node_image("w"));
        assert_eq!(rv_of(&h).as_deref(), Some("x"));
        // And events keep being taken: nothing waits for "w" again.
        h.observe(node_image("y"));
        assert_eq!(rv_of(&h).as_deref(), Some("y"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_never_answers_is_given_up_and_tried_again() {
        let sink = HangsOnce::default();
        let errors = prometheus_client::metrics::counter::Counter::default();
        let (h, tx, task) = start(sink.clone(), errors.clone());
        h.observe(node_image("1"));
        tokio::time::sleep(WRITE_TIMEOUT / 2).await;
        assert_eq!(
            sink.inner.writes.load(Ordering::SeqCst),
            0,
            "first write hangs"
        );
        tokio::time::sleep(WRITE_TIMEOUT).await;
        assert_eq!(
            sink.inner.writes.load(Ordering::SeqCst),
            1,
            "written by the second try"
        );
        assert_eq!(errors.get(), 1, "the hung write is counted as an error");
        let _ = tx.send(true);
        let _ = task.await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_phase_change_does_not_wait_for_the_progress_interval() {
        let sink = Recorder::default();
        let (h, tx, task) = start(sink.clone(), Default::default());
        h.observe(node_image("1"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let key = TagKey {
            image: "a".into(),
            tag: "1".into(),
        };
        let pulling = |progress| ImageTagStatus {
            tag: "1".into(),
            phase: ImagePullPhase::Pulling,
            version: Some(0),
            progress: Some(progress),
            ..Default::default()
        };
        h.report(&key, pulling(0));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = sink.writes.load(Ordering::SeqCst);
        // Progress now waits for the interval ...
        h.report(&key, pulling(50));
        tokio::time::sleep(Duration::from_millis(50)).await;
        // ... and success arrives while it waits: written after the
        // coalescing pause, not at the end of the progress interval.
        h.report(
            &key,
            ImageTagStatus {
                tag: "1".into(),
                phase: ImagePullPhase::Succeeded,
                version: Some(0),
                progress: Some(100),
                ..Default::default()
            },
        );
        tokio::time::sleep(COALESCE + Duration::from_millis(50)).await;
        assert_eq!(
            sink.writes.load(Ordering::SeqCst),
            before + 1,
            "Succeeded written within the coalescing pause"
        );
        let _ = tx.send(true);
        let _ = task.await;
    }

    /// The coalescing pause gathers a burst of reports; the last pull of a
    /// burst ending has nothing left to gather and is written at once, while
    /// one ending beside a running pull still waits for the pause.
    #[tokio::test(start_paused = true)]
    async fn only_the_last_pull_to_end_skips_the_coalescing_pause() {
        let sink = Recorder::default();
        let (h, tx, task) = start(sink.clone(), Default::default());
        h.observe(node_image_with("1", &["1", "2"]));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let key = |tag: &str| TagKey {
            image: "a".into(),
            tag: tag.into(),
        };
        let st = |tag: &str, phase| ImageTagStatus {
            tag: tag.into(),
            phase,
            version: Some(0),
            ..Default::default()
        };
        h.report(&key("1"), st("1", ImagePullPhase::Pulling));
        h.report(&key("2"), st("2", ImagePullPhase::Pulling));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let writes = || sink.writes.load(Ordering::SeqCst);
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

        // A spec change still waits for its tags' first reports.
        h.observe(node_image_with("2", &["1", "2", "3"]));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(writes(), before + 2, "a spec change waits for the pause");
        tokio::time::sleep(COALESCE).await;
        assert_eq!(writes(), before + 3, "the new tag's Waiting is written");
        let last = sink
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        assert_eq!(
            written(&last)["imageStatuses"]["a"]["tags"][0]["phase"],
            "Succeeded"
        );
        let _ = tx.send(true);
        let _ = task.await;
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
            tokio::spawn(
                async move { h2.wait_observed(has_rv("3"), Duration::from_secs(10)).await },
            );
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

    #[tokio::test(start_paused = true)]
    async fn own_write_outranks_the_watch_until_the_watch_delivers_it() {
        let h = StatusHandle::default();
        h.observe(node_image("a"));
        h.observe_response(node_image("c"));
        // An event from before our write (any version but ours) is older.
        h.observe(node_image("b"));
        assert_eq!(rv_of(&h).as_deref(), Some("c"));
        // Our write's own event: the watch has caught up.
        h.observe(node_image("c"));
        h.observe(node_image("d"));
        assert_eq!(rv_of(&h).as_deref(), Some("d"));
    }

    #[tokio::test(start_paused = true)]
    async fn own_write_precedence_ends_on_relist_or_after_its_bound() {
        let h = StatusHandle::default();
        h.observe(node_image("a"));
        h.observe_response(node_image("c"));
        h.observe_relisted(node_image("z"));
        assert_eq!(rv_of(&h).as_deref(), Some("z"));

        h.observe_response(node_image("y"));
        h.observe(node_image("x"));
        assert_eq!(rv_of(&h).as_deref(), Some("y"));
        tokio::time::advance(OWN_WRITE_PRECEDENCE).await;
        h.observe(node_image("x"));
        assert_eq!(rv_of(&h).as_deref(), Some("x"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_changed_nothing_waits_for_no_event() {
        let h = StatusHandle::default();
        h.observe(node_image("a"));
        // The server returned the version we hold: no event will follow.
        h.observe_response(node_image("a"));
        h.observe(node_image("b"));
        assert_eq!(rv_of(&h).as_deref(), Some("b"));
    }
}
