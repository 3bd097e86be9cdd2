//! One cache per kind: one watch and one store, trimmed to what any of its
//! readers reads, built by the wiring (`lib.rs`) and handed to each reader
//! with its own stream of the watch's events, deletions included. A reader
//! never makes a second watch of a kind another reader already has.

use crate::cluster::skipped::Skipped;
use crate::cluster::watch::{self, SyncSignals, Synced};
use crate::runtime::lifecycle;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::watcher;
use nodeimage_ops::health::Readiness;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use tokio::sync::{mpsc, watch as signal};

/// Events a subscriber may fall behind by before the watch waits for it.
const BUFFER: usize = 128;

/// A kind's shared store and what its watch needs to run.
pub struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    what: &'static str,
    check: &'static str,
    trim: fn(&mut K),
    /// Where undecodable objects are reported (`None`: the kind's schema is
    /// Kubernetes' own, every object decodes).
    skipped: Option<Skipped>,
    store: Store<K>,
    writer: Writer<K>,
    synced: Synced,
    subscribers: Vec<mpsc::Sender<watcher::Event<K>>>,
    /// `/readyz` does not wait for it while it cannot be listed
    /// ([`SyncSignals::optional`](crate::cluster::watch::SyncSignals)).
    optional: bool,
}

/// What one reader gets of a shared cache.
pub struct Subscription<K: Resource<DynamicType = ()> + Clone + 'static> {
    /// Every object, trimmed to what the readers read.
    pub store: Store<K>,
    /// Set once the store holds a complete list.
    pub synced: Synced,
    /// The kind's skipped objects (lenient caches only): stored, existing,
    /// but in no store because they do not decode.
    pub undecodable: Option<Skipped>,
    /// The watch's events (applied, deleted, list markers), after the store
    /// applied them.
    pub events: mpsc::Receiver<watcher::Event<K>>,
}

/// The events of a subscription as a stream.
pub fn event_stream<K: Send + 'static>(
    events: mpsc::Receiver<watcher::Event<K>>,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static {
    futures::stream::unfold(events, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    })
}

/// The objects a subscription's events applied (listed ones too) or
/// deleted, as a controller's wake-up stream reads them (list markers
/// dropped).
pub fn touched<K: Send + 'static>(
    events: mpsc::Receiver<watcher::Event<K>>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    event_stream(events).filter_map(|e| {
        std::future::ready(match e {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) | watcher::Event::Delete(o) => {
                Some(Ok(o))
            }
            _ => None,
        })
    })
}

/// The objects a subscription's events applied (listed ones too), as a
/// controller of the kind reads them: a deleted object has nothing left to
/// reconcile (what it owned is released while it is being deleted).
pub fn applied<K: Send + 'static>(
    events: mpsc::Receiver<watcher::Event<K>>,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static {
    event_stream(events).filter_map(|e| {
        std::future::ready(match e {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => Some(Ok(o)),
            _ => None,
        })
    })
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    /// An empty cache named `what` in logs, whose first list sets the
    /// readiness check `check`, keeping of each object what `trim` leaves;
    /// [`Cache::run`] fills it.
    pub fn new(what: &'static str, check: &'static str, trim: fn(&mut K)) -> Self {
        let (store, writer) = reflector::store();
        Self {
            what,
            check,
            trim,
            skipped: None,
            store,
            writer,
            synced: Synced::default(),
            subscribers: Vec::new(),
            optional: false,
        }
    }

    /// This cache, which `/readyz` does not wait for while the API server
    /// refuses to list its kind or does not serve it (a kind newer than the
    /// chart's RBAC or CRDs): every other kind is served meanwhile.
    pub fn optional(self) -> Self {
        Self {
            optional: true,
            ..self
        }
    }

    /// An empty cache of a kind whose stored objects may not decode (a
    /// custom resource stored before a schema bound existed): those are
    /// skipped and reported by `skipped`, never allowed to stop the watch.
    pub fn lenient(
        what: &'static str,
        check: &'static str,
        trim: fn(&mut K),
        skipped: Skipped,
    ) -> Self {
        Self {
            skipped: Some(skipped),
            ..Self::new(what, check, trim)
        }
    }

    /// Set once the store holds a complete list.
    pub fn synced(&self) -> Synced {
        self.synced.clone()
    }

    /// A new subscriber. Subscribe before [`Cache::run`] starts, and keep
    /// reading the events: the watch waits for the slowest subscriber.
    pub fn subscribe(&mut self) -> Subscription<K> {
        let (tx, rx) = mpsc::channel(BUFFER);
        self.subscribers.push(tx);
        Subscription {
            store: self.store.clone(),
            synced: self.synced.clone(),
            undecodable: self.skipped.clone(),
            events: rx,
        }
    }

    /// The store alone, for a reader that needs no events (it reads the
    /// objects when its own wake-ups come).
    pub fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// Watches the kind into the store until `stop` turns true, passing
    /// every event on to each subscriber.
    pub async fn run(
        self,
        client: kube::Client,
        readiness: Readiness,
        stop: signal::Receiver<bool>,
    ) {
        let signals = SyncSignals {
            synced: self.synced.clone(),
            check: readiness.check(self.check).await,
            relisted: None,
            optional: self.optional,
        };
        let (what, subscribers) = (self.what, self.subscribers);
        let events = match self.skipped {
            None => watch::reflect(what, Api::all(client), self.writer, self.trim, signals).boxed(),
            Some(skipped) => {
                watch::reflect_decoded(what, client, skipped, self.writer, self.trim, signals)
                    .boxed()
            }
        };
        events
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
        tracing::info!(cache = what, "watch stopped");
    }
}
