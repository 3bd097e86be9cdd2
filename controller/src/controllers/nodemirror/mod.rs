//! The node mirror: every Node gets a NodeImage of the same name carrying
//! the Node's labels. (Deleting the NodeImage of a gone Node is done by
//! housekeeping, which reconciles NodeImages; a controller of Nodes is never
//! called for a Node that no longer exists.)

pub mod decide;
mod reconcile;

use crate::cluster::cache;
use crate::cluster::nodecache::NodeSubscription;
use crate::cluster::watch::{self, Synced};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use decide::Ownership;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::PartialObjectMeta;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use nodeimage_api::NodeImage;
use reconcile::{error_policy, reconcile};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, watch as signal};

/// The node mirror's controller name in logs.
const NAME: &str = "node mirror";

/// What the node mirror reads of the shared NodeImage cache.
pub struct NodeImageFeed {
    /// Every NodeImage (projected: labels and deletion are what it reads).
    pub store: Store<NodeImage>,
    /// Whether `store` has been listed.
    pub synced: Synced,
    /// The watch's events as metadata, deletions included.
    pub events: mpsc::Receiver<watcher::Event<PartialObjectMeta<NodeImage>>>,
    /// What each NodeImage records of the mirror's labels, filled as the
    /// cache sees each NodeImage whole ([`Owned::record`]).
    pub owned: Owned,
}

/// Runs the node mirror until `stop` turns true.
pub async fn run(
    ctx: Context,
    stop: signal::Receiver<bool>,
    nodes: NodeSubscription,
    nodeimages: NodeImageFeed,
) {
    let NodeSubscription {
        store: nodes,
        events,
        ..
    } = nodes;
    let node_events = cache::event_stream(events).filter_map(|event| {
        std::future::ready(match event {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                Some(Ok::<_, watcher::Error>(n))
            }
            _ => None,
        })
    });

    // Node status writes change a NodeImage all the time; only a change of
    // what the mirror compares (labels, its record of them, deletion) or a
    // deletion wakes the Node.
    let NodeImageFeed {
        store: listed,
        synced: nodeimages_synced,
        events,
        owned,
    } = nodeimages;
    let (forget, key_of) = (owned.clone(), owned.clone());
    let nodeimages = listed.clone();
    let nodeimage_events = cache::event_stream(events)
        .inspect(move |event| match event {
            watcher::Event::Delete(ni) => forget.remove(&ni.name_any()),
            watcher::Event::InitDone => {
                forget.retain(|name| listed.get(&ObjectRef::new(name)).is_some())
            }
            _ => {}
        })
        .filter_map(watch::changes_only(
            move |ni: &PartialObjectMeta<NodeImage>| MirrorKey::of(ni, &key_of),
        ));

    let state = Arc::new(reconcile::State {
        ctx,
        nodeimages,
        nodeimages_synced,
        owned,
    });
    let controller = Controller::for_stream(node_events, nodes)
        .with_config(lifecycle::controller_config())
        .watches_stream(nodeimage_events, |ni: PartialObjectMeta<NodeImage>| {
            Some(ObjectRef::<Node>::new(&ni.name_any()))
        });
    lifecycle::run_controller(NAME, controller, reconcile, error_policy, state, stop).await;
}

/// What each NodeImage records of the mirror's labels (its annotation, and
/// keys an earlier version applied), read from its metadata as the shared
/// cache sees it whole: the cached NodeImages keep neither that annotation
/// nor managed fields (both cost more than the rest of the metadata:
/// docs/benchmarks.md, "Controller memory"). Only NodeImages that record
/// something have an entry; one goes with its NodeImage, or at the relist
/// that finds it gone (this module's stream).
#[derive(Clone, Default)]
pub struct Owned(Arc<Mutex<HashMap<String, Ownership>>>);

impl Owned {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Ownership>> {
        // Plain data: a panic elsewhere cannot leave it half-written.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what `ni` (whole, as stored) says the mirror owns.
    pub fn record(&self, ni: &NodeImage) {
        let now = Ownership::of(&ni.metadata);
        let cleared = ni
            .metadata
            .managed_fields
            .as_ref()
            .is_none_or(Vec::is_empty);
        let mut all = self.lock();
        let owned = match ni.metadata.name.as_ref() {
            Some(name) => now.carried_over(all.get(name), cleared),
            None => now,
        };
        match ni.metadata.name.as_ref() {
            Some(name) if owned.is_empty() => {
                all.remove(name);
            }
            Some(name) => {
                all.insert(name.clone(), owned);
            }
            None => {}
        }
    }

    /// What NodeImage `name` records of the mirror's labels.
    pub fn of(&self, name: &str) -> Ownership {
        self.lock().get(name).cloned().unwrap_or_default()
    }

    fn remove(&self, name: &str) {
        self.lock().remove(name);
    }

    /// Keeps only the NodeImages `keep` says still exist (after a relist).
    fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|name, _| keep(name));
    }
}

/// What the mirror reads of a NodeImage.
#[derive(Hash)]
struct MirrorKey {
    labels: BTreeMap<String, String>,
    owned: Ownership,
    deleting: bool,
}

impl MirrorKey {
    fn of(ni: &PartialObjectMeta<NodeImage>, owned: &Owned) -> Self {
        Self {
            labels: ni.labels().clone(),
            owned: owned.of(&ni.name_any()),
            deleting: ni.metadata.deletion_timestamp.is_some(),
        }
    }
}
