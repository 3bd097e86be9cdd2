//! The one NodeImage cache of this binary. Housekeeping and every job
//! controller read NodeImages; one watch and one store serve them all, and
//! each gets its own wakeup stream. (Separate caches held a copy of every
//! NodeImage per controller and decoded each node's status writes once per
//! controller.) The node mirror keeps its own metadata-only watch: it needs
//! deletions, which a shared stream does not carry.

use crate::lifecycle;
use crate::watch::{self, SyncSignals, Synced};
use futures::StreamExt;
use futures::stream::BoxStream;
use kube::runtime::reflector::{self, Store, store::Writer};
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::ImageStatus;
use nodeimage_ops::health::Readiness;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Wakeups a subscriber may fall behind by before the watch waits for it.
const BUFFER: usize = 1024;

/// The shared store and what its watch needs to run.
pub struct NodeImages {
    /// Every NodeImage, without managed fields and annotations.
    pub store: Store<NodeImage>,
    /// Set once the store holds a complete list.
    pub synced: Synced,
    writer: Writer<NodeImage>,
}

/// What one controller reads of the shared cache.
pub struct Subscription {
    /// Every NodeImage, without managed fields and annotations.
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
        }
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
        ctx: crate::context::Context,
        readiness: Readiness,
        stop: signal::Receiver<bool>,
    ) {
        let signals = SyncSignals {
            synced: self.synced.clone(),
            check: readiness.check("nodeimages-synced").await,
            relisted: None,
        };
        watch::reflect_shared(
            "nodeimages",
            ctx.client.clone(),
            crate::skipped::Skipped::new(&ctx, "NodeImage", None),
            self.writer,
            compact,
            signals,
        )
        .take_until(lifecycle::stopped(stop))
        .for_each(|_| std::future::ready(()))
        .await;
        tracing::info!("nodeimage watch stopped");
    }
}

/// Trims a decoded NodeImage to what the controller reads: no managed
/// fields (decoded, four times the spec) and no annotations (nothing here
/// reads a NodeImage's; the node mirror's record of its labels cost ~0.7 KB
/// per cached NodeImage, a map node and two strings), and lists at their
/// length. Decoding grows each list to at least four items, and most images
/// have one tag: at 100 images a node's cached copy was 226 KB, 97 KB of it
/// in use.
pub fn compact(ni: &mut NodeImage) {
    ni.metadata.managed_fields = None;
    ni.metadata.annotations = None;
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
    let statuses = ni.status.as_mut().and_then(|s| s.image_statuses.as_mut());
    for ImageStatus { tags } in statuses.into_iter().flat_map(|m| m.values_mut()) {
        tags.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacting_keeps_spec_status_and_labels_and_drops_spare_capacity() {
        let json = serde_json::json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "NodeImage",
            "metadata": {
                "name": "n1",
                "resourceVersion": "7",
                "labels": {"zone": "a"},
                "annotations": {"nodeimage.dev/mirrored-labels": "zone"},
                "managedFields": [{"manager": "m", "operation": "Update"}]
            },
            "spec": {"images": {"img": {
                "pullSecrets": [{"namespace": "ns", "name": "s"}],
                "tags": [{
                    "tag": "v1", "version": 2, "createdAt": "2026-11-25T10:00:00Z",
                    "checkItems": ["disk"],
                    "imagePullPolicy": "Always",
                    "pullPolicy": {"ttlSecondsAfterFinished": 60, "activeDeadlineSeconds": 9},
                    "ownerReferences": [{"kind": "ImagePullJob", "name": "j", "uid": "u"}]
                }]
            }}},
            "status": {"desired": 1, "imageStatuses": {"img": {"tags": [{
                "tag": "v1", "phase": "Failed", "version": 2, "message": "m",
                "imageID": "img@sha256:1", "progress": 5,
                "startTime": "2026-11-25T10:00:01Z", "completionTime": "2026-11-25T10:00:02Z"
            }]}}}
        });
        let decoded: NodeImage = serde_json::from_value(json).unwrap();
        let mut compacted = decoded.clone();
        compact(&mut compacted);
        let mut expected = decoded;
        expected.metadata.managed_fields = None;
        expected.metadata.annotations = None;
        assert_eq!(
            serde_json::to_value(&compacted).unwrap(),
            serde_json::to_value(&expected).unwrap()
        );
        assert_eq!(compacted.spec, expected.spec);
        assert_eq!(compacted.status, expected.status);
        let image = &compacted.spec.images.as_ref().unwrap()["img"];
        assert_eq!(image.tags.capacity(), 1);
        let status = compacted
            .status
            .as_ref()
            .unwrap()
            .image_statuses
            .as_ref()
            .unwrap();
        assert_eq!(status["img"].tags.capacity(), 1);
    }
}
