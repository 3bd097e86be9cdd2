//! Publishes the NodeImage status: coalesces reports from the pull workers,
//! writes ends (Succeeded, Failed) and new messages within a fraction of a
//! second, new work (a spec change, a pull starting) after
//! [`START_HOLD`] unless it ended meanwhile (then once, with its end),
//! progress at most about once a second, and nothing when nothing changed. Writes are JSON Patches
//! of the status subresource guarded by what their entries were built from
//! (see `status::guarded_patch_with`), or by the spec's generation where that
//! guard cannot hold.

use crate::desired::TagKey;
use crate::status;
use nodeimage_api::kruise::nodeimage::contract::START_HOLD;
use nodeimage_api::kruise::nodeimage::patch::StatusGuard;
use nodeimage_api::kruise::{ImageTagStatus, NodeImage};
use nodeimage_api::nodeimage_dev::RemovalStatus;
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
    /// Answers to removal entries not seen written yet (one per job and uid).
    removals: Vec<RemovalStatus>,
    /// Messages of tags whose images the pin budget leaves unpinned.
    pin_notes: Option<BTreeMap<TagKey, String>>,
    urgent: bool,
    /// When the oldest report of new work not written since came (a spec
    /// change, a tag starting): it is written [`START_HOLD`] after, or
    /// sooner with an urgent change.
    held_since: Option<Instant>,
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
                if spec_changed {
                    g.spec_pending = true;
                    g.held_since.get_or_insert_with(Instant::now);
                }
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
        g.removals.clear();
    }

    /// Reports a tag's state: new work (a first Waiting or Pulling) is held,
    /// any other phase, version or message change is urgent, progress waits
    /// for its interval.
    pub fn report(&self, key: &TagKey, st: ImageTagStatus) {
        let mut g = self.lock();
        let change = Change::of(g.live.get(key), &st);
        let changed = g.live.get(key) != Some(&st);
        g.live.insert(key.clone(), st);
        if !changed {
            return;
        }
        if change == Change::Start {
            g.held_since.get_or_insert_with(Instant::now);
        }
        self.wake(g, change == Change::Urgent);
    }

    /// Drops a tag's live state (its pull was cancelled).
    pub fn clear(&self, key: &TagKey) {
        let mut g = self.lock();
        if g.live.remove(key).is_some() {
            self.wake(g, true);
        }
    }

    /// The messages of the tags whose images the pin budget leaves
    /// unpinned (replaces the previous ones; see `status::build`).
    pub fn pin_notes(&self, notes: BTreeMap<TagKey, String>) {
        let mut g = self.lock();
        if g.pin_notes.as_ref() != Some(&notes) {
            g.pin_notes = Some(notes);
            self.wake(g, true);
        }
    }

    /// Marks a write pending (urgent or not) and wakes the writer.
    fn wake(&self, mut g: std::sync::MutexGuard<'_, Inner>, urgent: bool) {
        g.pending = true;
        g.urgent |= urgent;
        drop(g);
        self.notify.notify_one();
    }

    /// A tag's live state as last reported, for unit tests of reporters.
    #[cfg(test)]
    pub fn live(&self, key: &TagKey) -> Option<ImageTagStatus> {
        self.lock().live.get(key).cloned()
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
        g.held_since = None;
        let ni = g.observed.clone()?;
        let mut new = status::build(&ni, &g.live, g.pin_notes.as_ref());
        new.removals = removals::answers(&ni, &mut g.removals);
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

    fn state(&self) -> (bool, bool, Option<Instant>) {
        let g = self.lock();
        (g.pending, g.urgent, g.held_since)
    }

    /// Nothing is about to report: no spec change waits for its tags' first
    /// reports, and every tag's pull has finished. A change now is the last
    /// of its burst, so waiting to gather more would only delay it.
    fn quiet(&self) -> bool {
        let g = self.lock();
        !g.spec_pending && g.live.values().all(|s| s.phase.is_finished())
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
        let (pending, urgent, held_since) = handle.state();
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
        } else if let Some(since) = held_since {
            // New work waits for its hold; an end arriving meanwhile cuts
            // it short (and carries the start with it).
            tokio::select! {
                _ = tokio::time::sleep_until(since + START_HOLD) => {},
                _ = handle.notify.notified() => continue,
                _ = stop.changed() => {},
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
        tracing::warn!(
            timeout_secs = WRITE_TIMEOUT.as_secs(),
            "status write got no answer in time; retrying"
        );
        return failed_request(handle, errors).await;
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
            if nodeimage_api::kruise::nodeimage::contract::is_stale_write(&e) =>
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
            tracing::warn!(error = %e, "status write failed; retrying");
            failed_request(handle, errors).await;
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
            tracing::warn!(error = %e, "reading the NodeImage after a refused write failed; retrying");
            failed_request(handle, errors).await;
        }
        Err(_) => {
            tracing::warn!(
                timeout_secs = WRITE_TIMEOUT.as_secs(),
                "reading the NodeImage after a refused write got no answer in time; retrying"
            );
            failed_request(handle, errors).await;
        }
    }
}

/// A request that brought no object: counted as an error, and the write
/// tried again a second later.
async fn failed_request(
    handle: &StatusHandle,
    errors: &prometheus_client::metrics::counter::Counter,
) {
    handle.request_failed();
    errors.inc();
    retry_later(handle, Duration::from_secs(1)).await;
}

async fn retry_later(handle: &StatusHandle, after: Duration) {
    tokio::time::sleep(after).await;
    let mut g = handle.lock();
    g.pending = true;
    g.urgent = true;
}

mod change;
mod sink;

use change::Change;
pub use sink::StatusSink;

mod removals;

#[cfg(test)]
mod tests;
