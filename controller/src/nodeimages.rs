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
use nodeimage_ops::health::Readiness;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Wakeups a subscriber may fall behind by before the watch waits for it.
const BUFFER: usize = 1024;

/// The shared store and what its watch needs to run.
pub struct NodeImages {
    /// Every NodeImage, without managed fields.
    pub store: Store<NodeImage>,
    /// Set once the store holds a complete list.
    pub synced: Synced,
    writer: Writer<NodeImage>,
}

/// What one controller reads of the shared cache.
pub struct Subscription {
    /// Every NodeImage, without managed fields.
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
            watch::without_managed_fields,
            signals,
        )
        .take_until(lifecycle::stopped(stop))
        .for_each(|_| std::future::ready(()))
        .await;
        tracing::info!("nodeimage watch stopped");
    }
}
