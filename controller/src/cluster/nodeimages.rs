//! The one NodeImage cache of this binary. Housekeeping and every job
//! controller read NodeImages; one watch and one store serve them all, and
//! each gets its own wakeup stream. (Separate caches held a copy of every
//! NodeImage per controller and decoded each node's status writes once per
//! controller.) The node mirror reads the watch's events as metadata
//! ([`NodeImages::subscribe_meta`]: it needs deletions, which the shared
//! stream does not carry) and records what it owns of each NodeImage before
//! the projection drops it ([`NodeImages::observe`]).

use crate::cluster::watch::{self, SyncSignals, Synced};
use crate::runtime::lifecycle;
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::ImageStatus;
use nodeimage_api::kruise::nodeimage::salvage;
use nodeimage_ops::health::Readiness;
use std::sync::Arc;
use tokio::sync::{mpsc, watch as signal};

/// Wakeups a subscriber may fall behind by before the watch waits for it.
const BUFFER: usize = 1024;

/// What sees each NodeImage whole, before the projection.
type Observer = Box<dyn FnMut(&NodeImage) + Send>;

/// The shared store and what its watch needs to run.
pub struct NodeImages {
    /// Every NodeImage, projected onto what the controller reads ([`compact`]).
    pub store: Store<NodeImage>,
    /// Set once the store holds a complete list.
    pub synced: Synced,
    writer: Writer<NodeImage>,
    observers: Vec<Observer>,
    meta_subscribers: Vec<mpsc::Sender<watcher::Event<PartialObjectMeta<NodeImage>>>>,
}

/// What one controller reads of the shared cache.
pub struct Subscription {
    /// Every NodeImage, projected onto what the controller reads ([`compact`]).
    pub store: Store<NodeImage>,
    /// Set once the store holds a complete list.
    pub synced: Synced,
    /// NodeImages as they change.
    pub changes: BoxStream<'static, Arc<NodeImage>>,
}

impl NodeImages {
    /// An empty store; [`NodeImages::run`] fills it.
    pub fn new() -> Self {
        let (store, writer) = reflector::store_shared(BUFFER);
        Self {
            store,
            synced: Synced::default(),
            writer,
            observers: Vec::new(),
            meta_subscribers: Vec::new(),
        }
    }

    /// Lets `observe` see each NodeImage whole, before [`compact`] drops
    /// what the store need not keep. Call before [`NodeImages::run`].
    pub fn observe(&mut self, observe: impl FnMut(&NodeImage) + Send + 'static) {
        self.observers.push(Box::new(observe));
    }

    /// The watch's events, deletions and list markers included, as each
    /// NodeImage's (projected) metadata, after the store applied them.
    /// Subscribe before [`NodeImages::run`]; keep reading, or the watch
    /// waits.
    pub fn subscribe_meta(
        &mut self,
    ) -> mpsc::Receiver<watcher::Event<PartialObjectMeta<NodeImage>>> {
        let (tx, rx) = mpsc::channel(128);
        self.meta_subscribers.push(tx);
        rx
    }

    /// The store, and a stream of NodeImages as they change (every one
    /// after each (re)list). Subscribe before [`NodeImages::run`] starts, so
    /// nothing is missed; a subscriber must keep reading its stream, or the
    /// watch waits for it.
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            store: self.store.clone(),
            synced: self.synced.clone(),
            changes: futures::stream::iter(self.writer.subscribe())
                .flatten()
                .boxed(),
        }
    }

    /// Watches NodeImages into the store until `stop` turns true.
    pub async fn run(
        self,
        ctx: crate::runtime::context::Context,
        readiness: Readiness,
        stop: signal::Receiver<bool>,
    ) {
        let signals = SyncSignals {
            synced: self.synced.clone(),
            check: readiness.check("nodeimages-synced").await,
            relisted: None,
            optional: false,
        };
        let mut observers = self.observers;
        let trim = move |ni: &mut NodeImage| {
            for observe in &mut observers {
                observe(ni);
            }
            compact(ni);
        };
        let subscribers = self.meta_subscribers;
        watch::reflect_salvaged(
            "nodeimages",
            ctx.client.clone(),
            crate::cluster::skipped::Skipped::new(&ctx, "NodeImage", None),
            salvage::marked_explained,
            self.writer,
            trim,
            signals,
        )
        .take_until(lifecycle::stopped(stop))
        .for_each(|event| {
            let subscribers = &subscribers;
            async move {
                if subscribers.is_empty() {
                    return;
                }
                let meta = metadata_of(event);
                for tx in subscribers {
                    // A subscriber that has stopped needs nothing more.
                    let _ = tx.send(meta.clone()).await;
                }
            }
        })
        .await;
        tracing::info!("nodeimage watch stopped");
    }
}

/// A watch event with each NodeImage reduced to its metadata.
fn metadata_of(event: watcher::Event<NodeImage>) -> watcher::Event<PartialObjectMeta<NodeImage>> {
    use kube::api::PartialObjectMetaExt;
    match event {
        watcher::Event::Apply(ni) => watcher::Event::Apply(ni.metadata.into_response_partial()),
        watcher::Event::InitApply(ni) => {
            watcher::Event::InitApply(ni.metadata.into_response_partial())
        }
        watcher::Event::Delete(ni) => watcher::Event::Delete(ni.metadata.into_response_partial()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// Projects a decoded NodeImage onto what the controller reads, before the
/// store keeps it: its name, uid, resourceVersion, labels and deletion (and
/// the small metadata fields kept as decoded), the whole spec (an entry
/// write `test`s each image it changes as read) and the whole status but
/// `firstSyncStatus` (housekeeping's status writes are built from it; every
/// tag status field feeds a job's status or a wakeup), the start-up
/// gate's note (`nodeimage_api::gate::STARTUP_GATE`, on gated nodes only)
/// and the images no write may touch (`salvage::UNREADABLE_IMAGES`, set in
/// memory only, on NodeImages with entries that do not decode).
/// Dropped: managed fields (decoded, larger than the spec), the other
/// annotations (the node mirror's record of its labels), creation time, owner references, finalizers, and
/// lists' spare capacity: decoding grows each list to at least four items,
/// and most images have one tag (what each costs: docs/benchmarks.md,
/// "Controller memory").
pub fn compact(ni: &mut NodeImage) {
    let meta = &mut ni.metadata;
    meta.managed_fields = None;
    meta.annotations = meta.annotations.take().and_then(|mut a| {
        let kept: std::collections::BTreeMap<_, _> = [
            nodeimage_api::gate::STARTUP_GATE,
            salvage::UNREADABLE_IMAGES,
        ]
        .into_iter()
        .filter_map(|k| a.remove_entry(k))
        .collect();
        (!kept.is_empty()).then_some(kept)
    });
    meta.creation_timestamp = None;
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    for image in ni.spec.images.iter_mut().flat_map(|m| m.values_mut()) {
        image.tags.shrink_to_fit();
        if let Some(secrets) = image.pull_secrets.as_mut() {
            secrets.shrink_to_fit();
        }
        for tag in &mut image.tags {
            if let Some(items) = tag.check_items.as_mut() {
                items.shrink_to_fit();
            }
        }
    }
    if let Some(status) = ni.status.as_mut() {
        status.first_sync_status = None;
        let images = status
            .image_statuses
            .iter_mut()
            .flat_map(|m| m.values_mut());
        for ImageStatus { tags } in images {
            tags.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field a decision reads survives the projection unchanged;
    /// the rest is gone. Decisions read NodeImages only from this cache, so
    /// a field dropped here that a decision read would make it wrong.
    #[test]
    fn the_projection_keeps_every_field_a_decision_reads() {
        let json = serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {
                "name": "n1",
                "uid": "0c5e",
                "resourceVersion": "7",
                "generation": 3,
                "creationTimestamp": "2026-11-25T09:00:00Z",
                "deletionTimestamp": "2026-11-25T11:00:00Z",
                "finalizers": ["example.com/keep"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n1", "uid": "n"}],
                "labels": {"zone": "a"},
                "annotations": {"nodeimage.dev/mirrored-labels": "zone",
                                "nodeimage.dev/startup-gate": "{}"},
                "managedFields": [{"manager": "m", "operation": "Update"}]
            },
            "spec": {"images": {
                "img": {
                    "pullSecrets": [{"namespace": "ns", "name": "s"}],
                    "sandboxConfig": {"labels": {"l": "1"}, "annotations": {"a": "2"}},
                    "tags": [{
                        "tag": "v1", "version": 2, "createdAt": "2026-11-25T10:00:00Z",
                        "checkItems": ["disk"],
                        "imagePullPolicy": "Always",
                        "pullPolicy": {"ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 9,
                                       "timeoutSeconds": 30, "backoffLimit": 2},
                        "ownerReferences": [{"kind": "ImagePullJob", "name": "j", "uid": "u"}]
                    }, {"tag": "v2"}]
                },
                "edge": {"tags": [{
                    "tag": "v1.20.0", "version": 1,
                    "upgrade": {"version": "v1.20.0", "job": "up", "awaitConfirmation": true}
                }]}
            }},
            "status": {
                "desired": 3, "succeeded": 1, "failed": 1, "pulling": 1, "waiting": 0,
                "firstSyncStatus": {"syncAt": "2026-11-25T09:00:01Z", "status": "synced", "message": "x"},
                "imageStatuses": {
                    "img": {"tags": [{
                        "tag": "v1", "phase": "Failed", "version": 2, "message": "m",
                        "imageID": "img@sha256:1", "progress": 5,
                        "startTime": "2026-11-25T10:00:01Z", "completionTime": "2026-11-25T10:00:02Z"
                    }, {"tag": "v2", "phase": "Succeeded", "progress": 100}]},
                    "edge": {"tags": [{
                        "tag": "v1.20.0", "phase": "Pulling", "version": 1,
                        "upgradeState": "WaitingConfirmation", "upgradeLog": "/var/log/up.log",
                        "fromVersion": "v1.19.0", "toVersion": "v1.20.0"
                    }]}
                }
            }
        });
        let decoded: NodeImage = serde_json::from_value(json).unwrap();
        let mut projected = decoded.clone();
        compact(&mut projected);

        // What decisions read, unchanged.
        let (m, d) = (&projected.metadata, &decoded.metadata);
        assert_eq!(m.name, d.name);
        assert_eq!(m.uid, d.uid);
        assert_eq!(m.resource_version, d.resource_version);
        assert_eq!(m.labels, d.labels);
        assert_eq!(m.deletion_timestamp, d.deletion_timestamp);
        assert_eq!(
            nodeimage_api::gate::GateNote::of(m.annotations.as_ref()).is_some(),
            nodeimage_api::gate::GateNote::of(d.annotations.as_ref()).is_some()
        );
        assert_eq!(projected.spec, decoded.spec);
        let mut status = decoded.status.clone().unwrap();
        status.first_sync_status = None;
        assert_eq!(projected.status.as_ref(), Some(&status));
        let edge = &projected
            .status
            .as_ref()
            .unwrap()
            .image_statuses
            .as_ref()
            .unwrap()["edge"];
        assert!(edge.tags[0].upgrade.is_some(), "upgrade state kept");

        // What nothing reads, gone.
        assert!(m.managed_fields.is_none());
        assert_eq!(m.annotations.as_ref().map(|a| a.len()), Some(1));
        assert!(m.creation_timestamp.is_none() && m.owner_references.is_none());
        assert!(m.finalizers.is_none());
        assert!(
            projected
                .status
                .as_ref()
                .unwrap()
                .first_sync_status
                .is_none()
        );

        // Lists at their length.
        let image = &projected.spec.images.as_ref().unwrap()["img"];
        assert_eq!(image.tags.capacity(), 2);
        let statuses = projected
            .status
            .as_ref()
            .unwrap()
            .image_statuses
            .as_ref()
            .unwrap();
        assert_eq!(statuses["img"].tags.capacity(), 2);
    }
}
