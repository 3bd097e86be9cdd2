//! The one Node cache of this binary. The node mirror, housekeeping and the
//! KubeEdge job kinds read Nodes through one watch and one store, trimmed to
//! what any of them reads (`nodes::trim_node`), and each gets its own stream
//! of the watch's events, deletions included. (Four caches held four copies
//! of every Node; docs/benchmarks.md, "Controller memory".)

use crate::cluster::watch::{self, SyncSignals, Synced};
use crate::runtime::lifecycle;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use nodeimage_ops::health::Readiness;
use tokio::sync::{mpsc, watch as signal};

/// Events a subscriber may fall behind by before the watch waits for it.
const BUFFER: usize = 128;

/// The shared Node store and what its watch needs to run.
pub struct Nodes {
    store: Store<Node>,
    writer: Writer<Node>,
    synced: Synced,
    subscribers: Vec<mpsc::Sender<watcher::Event<Node>>>,
}

/// What one controller reads of the shared Node cache.
pub struct NodeSubscription {
    /// Every Node, trimmed to what the controllers read.
    pub store: Store<Node>,
    /// Set once the store holds a complete list.
    pub synced: Synced,
    /// The watch's events (applied, deleted, list markers), after the store
    /// applied them.
    pub events: mpsc::Receiver<watcher::Event<Node>>,
}

impl NodeSubscription {
    /// The events as a stream.
    pub fn event_stream(
        events: mpsc::Receiver<watcher::Event<Node>>,
    ) -> impl Stream<Item = watcher::Event<Node>> + Send + 'static {
        futures::stream::unfold(events, |mut rx| async move {
            rx.recv().await.map(|event| (event, rx))
        })
    }
}

impl Nodes {
    /// An empty store; [`Nodes::run`] fills it.
    pub fn new() -> Self {
        let (store, writer) = reflector::store();
        Self {
            store,
            writer,
            synced: Synced::default(),
            subscribers: Vec::new(),
        }
    }

    /// A new subscriber. Subscribe before [`Nodes::run`] starts, and keep
    /// reading the events: the watch waits for the slowest subscriber.
    pub fn subscribe(&mut self) -> NodeSubscription {
        let (tx, rx) = mpsc::channel(BUFFER);
        self.subscribers.push(tx);
        NodeSubscription {
            store: self.store.clone(),
            synced: self.synced.clone(),
            events: rx,
        }
    }

    /// The store alone, for a reader that needs no events (it reads the
    /// Nodes when its own wake-ups come).
    pub fn store(&self) -> Store<Node> {
        self.store.clone()
    }

    /// Watches Nodes into the store until `stop` turns true, passing every
    /// event on to each subscriber.
    pub async fn run(
        self,
        client: kube::Client,
        readiness: Readiness,
        stop: signal::Receiver<bool>,
    ) {
        let signals = SyncSignals {
            synced: self.synced.clone(),
            check: readiness.check("nodes-synced").await,
            relisted: None,
        };
        let subscribers = self.subscribers;
        watch::reflect(
            "nodes",
            Api::all(client),
            self.writer,
            crate::nodeimage::nodes::trim_node,
            signals,
        )
        .take_until(lifecycle::stopped(stop))
        .for_each(|event| {
            let subscribers = &subscribers;
            async move {
                for tx in subscribers {
                    // A subscriber that has stopped needs nothing more.
                    let _ = tx.send(event.clone()).await;
                }
            }
        })
        .await;
        tracing::info!("node watch stopped");
    }
}
