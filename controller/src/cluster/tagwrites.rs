//! The writes a job controller makes outside its own status: edits of a
//! NodeImage's `spec.images` (its tag entries) guarded by the spec the edit
//! was computed from, and its finalizer.
//! Shared shell for the job kinds; the edits themselves are in `entries`.

use crate::nodeimage::patch::{self, PatchError};
use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use nodeimage_api::interned::SharedStr;
use nodeimage_api::kruise::nodeimage::contract::is_stale_write;
use nodeimage_api::kruise::nodeimage::salvage;
use nodeimage_api::kruise::{ImageSpec, NodeImage, NodeImageSpec};
use nodeimage_api::lenient::Lenient;
use nodeimage_api::nodeimage_dev::RemovalEntry;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use tokio::sync::{Semaphore, oneshot};

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Someone wrote the object between our read and our write; re-plan.
    #[error("{0} changed while writing; retrying")]
    Conflict(String),
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The patch could not be built.
    #[error(transparent)]
    Patch(#[from] PatchError),
    /// The write that carried this edit together with others failed.
    #[error(transparent)]
    Shared(Arc<WriteError>),
}

/// Tries an entry write makes before giving up with a conflict: the first
/// from the cache, the rest from fresh reads, the last guarded by
/// resourceVersion (in case the spec read back never compares equal).
const ATTEMPTS: usize = 4;

/// Applies `edit` to a copy of `ni`'s `spec.images` and `edit_removals` to
/// one of its `spec.removals` and, if they change anything, writes the
/// images they changed, each guarded by that image as it was read (JSON
/// Patch `test`s, so the node's status writes and entry writes for other
/// images do not void it), and the removal list guarded as read. When an
/// image moved (another writer), the edits are redone on a fresh read. A
/// NodeImage that is gone is not an error (its node left). Returns the
/// object as written, if a write was made.
async fn edit_images(
    client: &kube::Client,
    ni: &NodeImage,
    what: &str,
    edit: impl Fn(&NodeImage, &mut BTreeMap<SharedStr, ImageSpec>) -> bool,
    edit_removals: impl Fn(&NodeImage, &mut Vec<RemovalEntry>) -> bool,
) -> Result<Option<NodeImage>, WriteError> {
    let node = ni.name_any();
    // Read back leniently: an entry that does not decode must not fail the
    // writes of every other image on the node (`salvage`).
    let api: Api<Lenient<NodeImage>> = Api::all(client.clone());
    let api_err = |source| WriteError::Api {
        action: format!("{what} in NodeImage {node}"),
        source,
    };
    let mut fresh: Option<NodeImage> = None;
    for attempt in 1..=ATTEMPTS {
        let current = fresh.as_ref().unwrap_or(ni);
        let old = current.spec.images.clone().unwrap_or_default();
        let mut new = old.clone();
        let images_edited = edit(current, &mut new);
        let old_removals = current.spec.removals.clone().unwrap_or_default();
        let mut removals = old_removals.clone();
        if edit_removals(current, &mut removals) && salvage::removals_unreadable(current) {
            tracing::warn!(nodeimage = %node, "removal entries not written: spec.removals holds an entry nodeimage cannot read, and is left as stored until it is fixed");
            removals.clone_from(&old_removals);
        }
        if images_edited {
            let undone = salvage::keep_unreadable(current, &old, &mut new);
            if !undone.is_empty() {
                tracing::warn!(nodeimage = %node, images = ?undone, "not written: these images hold an entry nodeimage cannot read, and are left as stored until it is fixed");
            }
        }
        if old == new && old_removals == removals {
            return Ok(None);
        }
        let result = if attempt < ATTEMPTS {
            let body = patch::spec_tested(&current.spec, &new, &removals)?;
            api.patch(&node, &PatchParams::default(), &Patch::Json::<()>(body))
                .await
        } else {
            tracing::info!(nodeimage = %node, attempts = ATTEMPTS - 1, "spec kept moving under an entry write; guarding the last try by resourceVersion");
            let body = last_try(current, (&old, &new), (&old_removals, &removals))?;
            api.patch(&node, &PatchParams::default(), &Patch::Merge(&body))
                .await
        };
        match result {
            Ok(written) => return Ok(Some(salvage::marked(written))),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(kube::Error::Api(e)) if is_stale_write(&e) => {
                tracing::debug!(nodeimage = %node, attempt, "spec moved under an entry write; reading it again");
            }
            Err(source) => return Err(api_err(source)),
        }
        match api.get_opt(&node).await {
            Ok(Some(n)) => fresh = Some(salvage::marked(n)),
            Ok(None) => return Ok(None),
            Err(source) => return Err(api_err(source)),
        }
    }
    Err(WriteError::Conflict(format!("NodeImage {node}")))
}

/// The last try of an entry write: a merge patch of the images and the
/// removal list, guarded by the resourceVersion read.
fn last_try(
    current: &NodeImage,
    images: (
        &BTreeMap<SharedStr, ImageSpec>,
        &BTreeMap<SharedStr, ImageSpec>,
    ),
    removals: (&Vec<RemovalEntry>, &Vec<RemovalEntry>),
) -> Result<serde_json::Value, WriteError> {
    let rv = current.resource_version();
    let mut body = patch::guarded(
        "spec.images",
        rv.as_deref(),
        &["spec", "images"],
        images.0,
        images.1,
    )?
    .unwrap_or_else(|| serde_json::json!({"metadata": {"resourceVersion": rv}, "spec": {}}));
    if removals.0 != removals.1 {
        let value = if removals.1.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::to_value(removals.1)
                .map_err(|source| WriteError::Patch(PatchError::new("spec.removals", source)))?
        };
        if let Some(spec) = body.get_mut("spec").and_then(|s| s.as_object_mut()) {
            spec.insert("removals".into(), value);
        }
    }
    Ok(patch::clearing_managed_fields(body))
}

mod release;
pub use release::{release_all, release_on, release_removals};

/// An edit of a NodeImage's `spec.images` given the object it applies to;
/// returns whether it changed anything.
pub type Edit = Box<dyn Fn(&NodeImage, &mut BTreeMap<SharedStr, ImageSpec>) -> bool + Send + Sync>;

/// An edit of a NodeImage's `spec.removals` given the object it applies
/// to; returns whether it changed anything.
pub type RemovalEdit = Box<dyn Fn(&NodeImage, &mut Vec<RemovalEntry>) -> bool + Send + Sync>;

/// One edit waiting for a node's next write.
enum Pending {
    Images(Edit),
    Removals(RemovalEdit),
}

/// The one writer of tag entries for the whole binary. Each job hands its
/// edits for a node to it; the edits that arrive while a write to that node
/// is in flight go out together in the next write, from the newest spec
/// known: the shared cache's, or our own last write's while the cache has
/// not caught up with it. (Jobs writing on their own void each other's
/// writes: a hundred jobs starting together all add entries to the same
/// first nodes.)
#[derive(Clone)]
pub struct NodeWriter {
    client: kube::Client,
    cache: Store<NodeImage>,
    slots: Arc<Mutex<HashMap<String, Slot>>>,
    in_flight: Arc<Semaphore>,
}

/// NodeImage writes in flight at once, over all nodes. Each write sends and
/// re-stores a whole NodeImage (its whole spec); a thousand at once
/// (a deleted job leaving every node) swamp the API server, while edits that
/// wait for a slot are batched into fewer writes.
const WRITES_IN_FLIGHT: usize = 16;

/// How long a node's first edit waits for others before its write goes out.
/// Jobs that share nodes plan on the same NodeImage event up to a few
/// hundred milliseconds apart on a busy controller; written one by one,
/// their entries reach the node in separate writes, the node reports each
/// separately, and the jobs drift apart for the rest of the rollout. Waiting
/// keeps them in step: a third of the writes at 10 jobs × 1,000 nodes
/// (docs/benchmarks.md, "Side by side"), for a delay small beside any pull.
const GATHER: std::time::Duration = std::time::Duration::from_millis(300);

/// One node's queue.
#[derive(Default)]
struct Slot {
    pending: Vec<(Pending, oneshot::Sender<Result<(), WriteError>>)>,
    /// Whether a task is writing this node's edits.
    running: bool,
    /// Our last write (without status), until the cache holds it.
    written: Option<Arc<NodeImage>>,
}

impl NodeWriter {
    /// A writer with no queues, reading the shared NodeImage cache.
    pub fn new(client: kube::Client, cache: Store<NodeImage>) -> Self {
        Self {
            client,
            cache,
            slots: Arc::default(),
            in_flight: Arc::new(Semaphore::new(WRITES_IN_FLIGHT)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `edit` to NodeImage `ni` (a cached copy) in the next write to
    /// that node, and waits for that write.
    pub async fn edit(&self, ni: Arc<NodeImage>, edit: Edit) -> Result<(), WriteError> {
        self.queue(ni, Pending::Images(edit)).await
    }

    /// Applies `edit` to the removal entries of NodeImage `ni` in the next
    /// write to that node (with any tag entry edits), and waits for it.
    pub async fn edit_removals(
        &self,
        ni: Arc<NodeImage>,
        edit: RemovalEdit,
    ) -> Result<(), WriteError> {
        self.queue(ni, Pending::Removals(edit)).await
    }

    async fn queue(&self, ni: Arc<NodeImage>, edit: Pending) -> Result<(), WriteError> {
        let node = ni.name_any();
        let (done, result) = oneshot::channel();
        let start = {
            let mut slots = self.lock();
            let slot = slots.entry(node.clone()).or_default();
            slot.pending.push((edit, done));
            !std::mem::replace(&mut slot.running, true)
        };
        if start {
            tokio::spawn(self.clone().drain(node.clone(), ni));
        } else {
            // The running drain reads the cache; this copy would only keep
            // an older generation alive while the edit waits.
            drop(ni);
        }
        result
            .await
            .unwrap_or_else(|_| Err(WriteError::Conflict(format!("NodeImage {node}"))))
    }

    /// Writes the node's pending edits, a batch at a time, until none are
    /// left.
    async fn drain(self, node: String, mut seen: Arc<NodeImage>) {
        tokio::time::sleep(GATHER).await;
        loop {
            // Wait for a slot before taking the batch, so edits queue up meanwhile.
            let _permit = self.in_flight.clone().acquire_owned().await;
            // The cache applies watch events in order, so its copy is never
            // older than the one a job handed in (which came from it).
            if let Some(cached) = self.cache.get(&ObjectRef::new(&node)) {
                seen = cached;
            }
            let (batch, base) = {
                let mut slots = self.lock();
                let Some(slot) = slots.get_mut(&node) else {
                    return;
                };
                if slot.written.as_ref().is_some_and(|w| caught_up(w, &seen)) {
                    slot.written = None;
                }
                if slot.pending.is_empty() {
                    slot.running = false;
                    if slot.written.is_none() {
                        slots.remove(&node);
                    }
                    return;
                }
                // Our write is newer than the cache: its spec, the cache's status.
                let base = match &slot.written {
                    Some(w) => {
                        let mut base = seen.as_ref().clone();
                        base.spec = w.spec.clone();
                        base.metadata.resource_version = w.metadata.resource_version.clone();
                        Arc::new(base)
                    }
                    None => seen.clone(),
                };
                (std::mem::take(&mut slot.pending), base)
            };
            let (edits, waiters): (Vec<Pending>, Vec<_>) = batch.into_iter().unzip();
            let images = |current: &NodeImage, images: &mut BTreeMap<SharedStr, ImageSpec>| {
                edits.iter().fold(false, |changed, edit| match edit {
                    Pending::Images(edit) => edit(current, images) | changed,
                    Pending::Removals(_) => changed,
                })
            };
            let removals = |current: &NodeImage, removals: &mut Vec<RemovalEntry>| {
                edits.iter().fold(false, |changed, edit| match edit {
                    Pending::Removals(edit) => edit(current, removals) | changed,
                    Pending::Images(_) => changed,
                })
            };
            let result =
                edit_images(&self.client, &base, "writing entries", images, removals).await;
            let outcome = match result {
                Ok(written) => {
                    if let Some(mut written) = written {
                        // Only its spec and version are read; the status is the
                        // cache's. Trimmed as the cache's copies are (decoded
                        // managed fields outweigh the spec): every node written
                        // waits here until the watch catches up.
                        written.status = None;
                        crate::cluster::nodeimages::compact(&mut written);
                        if let Some(slot) = self.lock().get_mut(&node) {
                            slot.written = Some(Arc::new(written));
                        }
                    }
                    Ok(())
                }
                Err(e) => Err(Arc::new(e)),
            };
            for waiter in waiters {
                let _ = waiter.send(match &outcome {
                    Ok(()) => Ok(()),
                    Err(e) => Err(match e.as_ref() {
                        WriteError::Conflict(n) => WriteError::Conflict(n.clone()),
                        _ => WriteError::Shared(e.clone()),
                    }),
                });
            }
        }
    }
}

impl NodeWriter {
    /// Our last write to `node`, while the cache has not caught up with it.
    pub fn written(&self, node: &str) -> Option<Arc<NodeImage>> {
        self.lock().get(node)?.written.clone()
    }

    /// The nodes whose newest known spec (our last write while the cache
    /// has not caught up with it, else the cache's) passes `holds`: a job
    /// taking its entries back must see those it wrote a moment before,
    /// which the cache may not show yet (a soak left such removal entries
    /// behind a deleted job).
    pub fn holding(&self, holds: impl Fn(&NodeImageSpec) -> bool) -> Vec<String> {
        // Copied out, so that no write waits for the lock during the scan.
        let written: Vec<(String, Arc<NodeImage>)> = (self.lock().iter())
            .filter_map(|(node, slot)| Some((node.clone(), slot.written.clone()?)))
            .collect();
        let cached = self.cache.state();
        holding(cached.iter().map(|ni| ni.as_ref()), &written, holds)
    }
}

/// The names of the NodeImages in `cached`, or of our last writes
/// `written`, whose spec passes `holds`, each once and sorted.
fn holding<'a>(
    cached: impl Iterator<Item = &'a NodeImage>,
    written: &'a [(String, Arc<NodeImage>)],
    holds: impl Fn(&NodeImageSpec) -> bool,
) -> Vec<String> {
    let written = written.iter().map(|(node, w)| (node.as_str(), &w.spec));
    let names: std::collections::BTreeSet<&str> = cached
        .filter_map(|ni| Some((ni.metadata.name.as_deref()?, &ni.spec)))
        .chain(written)
        .filter(|(_, spec)| holds(spec))
        .map(|(node, _)| node)
        .collect();
    names.into_iter().map(str::to_string).collect()
}

impl NodeWriter {
    /// Forgets each node's last write as soon as the shared cache holds it,
    /// until `changes` ends: a node's spec is then kept twice only while the
    /// watch lags behind our write (kept until the node's next edit, these
    /// copies were a large share of the controller's peak memory:
    /// docs/benchmarks.md, "Controller memory").
    pub async fn follow(self, changes: futures::stream::BoxStream<'static, Arc<NodeImage>>) {
        changes
            .for_each(|ni| {
                self.forget_if_cached(&ni);
                std::future::ready(())
            })
            .await;
    }

    fn forget_if_cached(&self, cached: &NodeImage) {
        forget_if_cached(&mut self.lock(), cached);
    }
}

/// Drops the last write of `cached`'s node once `cached` holds it, and the
/// node's queue with it when nothing is being written there.
fn forget_if_cached(slots: &mut HashMap<String, Slot>, cached: &NodeImage) {
    let Some(node) = cached.metadata.name.as_deref() else {
        return;
    };
    let Some(slot) = slots.get_mut(node) else {
        return;
    };
    if slot.written.as_ref().is_some_and(|w| caught_up(w, cached)) {
        slot.written = None;
        if !slot.running {
            slots.remove(node);
        }
    }
}

/// Whether the cache holds our last write: the cached copy is that write
/// (same resourceVersion) or carries the spec we wrote (a status write came
/// on top). resourceVersions are opaque: compared for equality only.
fn caught_up(written: &NodeImage, cached: &NodeImage) -> bool {
    written.resource_version() == cached.resource_version() || written.spec == cached.spec
}

/// Adds (`present`) or removes `finalizer` on `obj`, guarded by its
/// resourceVersion. A removal from an object that is gone succeeds.
pub async fn set_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    present: bool,
) -> Result<(), WriteError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    if present {
        edit_finalizers(api, obj, Some(finalizer), &[]).await
    } else {
        edit_finalizers(api, obj, None, &[finalizer]).await
    }
}

/// Adds `add` and removes `remove` from `obj`'s finalizers in one write,
/// guarded by its resourceVersion; nothing when nothing changes. A removal
/// from an object that is gone succeeds.
pub async fn edit_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    add: Option<&str>,
    remove: &[&str],
) -> Result<(), WriteError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let mut fins: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| !remove.contains(&f.as_str()))
        .cloned()
        .collect();
    if let Some(f) = add.filter(|f| !fins.iter().any(|x| x == f)) {
        fins.push(f.to_string());
    }
    if fins == obj.finalizers() {
        return Ok(());
    }
    let name = obj.name_any();
    let body = serde_json::json!({"metadata": {"resourceVersion": obj.resource_version(), "finalizers": fins}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 && add.is_none() => Ok(()),
        Err(kube::Error::Api(e)) if is_stale_write(&e) => Err(WriteError::Conflict(name)),
        Err(source) => Err(WriteError::Api {
            action: match add {
                Some(f) => format!("adding finalizer {f} to {name}"),
                None => format!("removing finalizers {} of {name}", remove.join(", ")),
            },
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NodeImage at resourceVersion `rv` whose spec holds image `image`.
    fn at(rv: &str, image: &str) -> NodeImage {
        let mut ni = NodeImage::new("node-1", Default::default());
        ni.metadata.resource_version = Some(rv.into());
        ni.spec.images = Some([(image.into(), ImageSpec::default())].into());
        ni
    }

    #[test]
    fn a_write_is_forgotten_once_the_cache_holds_it() {
        let slot = |running| Slot {
            pending: Vec::new(),
            running,
            written: Some(Arc::new(at("5", "a"))),
        };
        let cases = [
            ("cache behind: kept", slot(false), at("4", "b"), true, true),
            (
                "cache holds it, idle: queue dropped",
                slot(false),
                at("9", "a"),
                false,
                false,
            ),
            (
                "cache holds it, writing: write dropped",
                slot(true),
                at("5", "a"),
                true,
                false,
            ),
        ];
        for (name, slot, cached, queue_kept, write_kept) in cases {
            let mut slots = HashMap::from([("node-1".to_string(), slot)]);
            forget_if_cached(&mut slots, &cached);
            assert_eq!(slots.contains_key("node-1"), queue_kept, "{name}");
            assert_eq!(
                slots.get("node-1").is_some_and(|s| s.written.is_some()),
                write_kept,
                "{name}"
            );
        }
        let mut other = HashMap::from([("node-2".to_string(), slot(false))]);
        forget_if_cached(&mut other, &at("5", "a"));
        assert!(other["node-2"].written.is_some(), "another node's write");
    }

    #[test]
    fn a_release_sees_our_writes_the_cache_does_not_show_yet() {
        let named = |name: &str, rv: &str, image: &str| {
            let mut ni = at(rv, image);
            ni.metadata.name = Some(name.into());
            ni
        };
        let written = |ni: NodeImage| Arc::new(ni);
        let cached = [
            named("cache-holds", "1", "a"),
            named("cache-behind", "1", "b"),
            named("neither", "1", "b"),
            named("we-took-it-out", "1", "a"),
        ];
        let slots = [
            (
                "cache-behind".to_string(),
                written(named("cache-behind", "2", "a")),
            ),
            (
                "we-took-it-out".to_string(),
                written(named("we-took-it-out", "2", "b")),
            ),
        ];
        let holds_a =
            |spec: &NodeImageSpec| spec.images.as_ref().is_some_and(|i| i.contains_key("a"));
        assert_eq!(
            holding(cached.iter(), &slots, holds_a),
            ["cache-behind", "cache-holds", "we-took-it-out"],
            "the cache's and our writes' holders, once each (a node our write emptied is looked at and left unwritten by the edit)"
        );
    }

    #[test]
    fn caught_up_compares_resource_versions_for_equality_only() {
        let cases = [
            ("same version", at("5", "a"), at("5", "a"), true),
            ("same version, other spec", at("5", "a"), at("5", "b"), true),
            ("a status write on top", at("5", "a"), at("9", "a"), true),
            ("cache behind", at("5", "a"), at("4", "b"), false),
            ("another writer after us", at("5", "a"), at("9", "b"), false),
            ("not numbers", at("x", "a"), at("y", "b"), false),
        ];
        for (name, written, cached, want) in cases {
            assert_eq!(caught_up(&written, &cached), want, "{name}");
        }
    }
}
