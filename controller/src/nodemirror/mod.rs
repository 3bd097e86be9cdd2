//! The node mirror: every Node gets a NodeImage of the same name carrying
//! the Node's labels. (Deleting the NodeImage of a gone Node is done by
//! housekeeping, which reconciles NodeImages; a controller of Nodes is never
//! called for a Node that no longer exists.)

pub mod decide;
mod reconcile;

use crate::context::Context;
use crate::lifecycle;
use crate::nodecache::NodeSubscription;
use crate::watch::{self, SyncSignals, Synced};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher;
use nodeimage_api::NodeImage;
use nodeimage_ops::health::Readiness;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Runs the node mirror until `stop` turns true.
pub async fn run(
    ctx: Context,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
    nodes: NodeSubscription,
) {
    let client = ctx.client.clone();

    let NodeSubscription {
        store: nodes,
        events,
        ..
    } = nodes;
    let node_events = NodeSubscription::event_stream(events).filter_map(|event| {
        std::future::ready(match event {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                Some(Ok::<_, watcher::Error>(n))
            }
            _ => None,
        })
    });

    let nodeimages_synced = Synced::default();
    let (nodeimages, nodeimage_writer) = reflector::store::<PartialObjectMeta<NodeImage>>();
    // Node status writes change a NodeImage all the time; only a change of
    // what the mirror compares (labels, its own field ownership, deletion)
    // or a deletion wakes the Node.
    let nodeimage_events = watch::reflect(
        "nodeimages (mirror)",
        Api::all(client),
        nodeimage_writer,
        keep_mirror_fields,
        SyncSignals {
            synced: nodeimages_synced.clone(),
            check: readiness.check("mirror-nodeimages-synced").await,
            relisted: None,
        },
    )
    .filter_map(watch::changes_only(MirrorKey::of));

    let state = Arc::new(reconcile::State {
        ctx,
        nodeimages,
        nodeimages_synced,
    });
    tracing::info!("node mirror starting");
    Controller::for_stream(node_events, nodes)
        .with_config(lifecycle::controller_config())
        .watches_stream(nodeimage_events, |ni: PartialObjectMeta<NodeImage>| {
            Some(ObjectRef::<Node>::new(&ni.name_any()))
        })
        .graceful_shutdown_on(lifecycle::stopped(stop))
        .run(reconcile::reconcile, reconcile::error_policy, state)
        .for_each(|result| {
            lifecycle::log_outcome("node mirror", result);
            std::future::ready(())
        })
        .await;
    tracing::info!("node mirror stopped");
}

/// Keeps only the mirror's own managed-field entries, which tell which
/// labels it set; the rest is not needed in the cache.
fn keep_mirror_fields(ni: &mut PartialObjectMeta<NodeImage>) {
    if let Some(fields) = ni.metadata.managed_fields.as_mut() {
        fields.retain(|f| f.manager.as_deref() == Some(decide::FIELD_MANAGER));
    }
}

/// What the mirror reads of a NodeImage.
struct MirrorKey {
    labels: BTreeMap<String, String>,
    fields: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry>>,
    deleting: bool,
}

/// Managed-field entries hold JSON (no `Hash`): their serialized form is
/// hashed, which serde_json writes with sorted keys.
impl std::hash::Hash for MirrorKey {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.labels.hash(h);
        self.deleting.hash(h);
        serde_json::to_string(&self.fields)
            .unwrap_or_default()
            .hash(h);
    }
}

impl MirrorKey {
    fn of(ni: &PartialObjectMeta<NodeImage>) -> Self {
        Self {
            labels: ni.labels().clone(),
            fields: ni.metadata.managed_fields.clone().map(|mut f| {
                // The time moves with every write of the same fields.
                f.iter_mut().for_each(|e| e.time = None);
                f
            }),
            deleting: ni.metadata.deletion_timestamp.is_some(),
        }
    }
}
