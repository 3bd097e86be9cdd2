//! Peer starts (the ledger's store of that name): entries started on nodes
//! that fetch from peers. `started_from_peers` records them; `settle` drops
//! the finished and stale ones and takes a node out of a registry's load
//! while its every unfinished entry there is a peer start.

use super::super::load::{self, Load};
use super::{Ledger, PacedJob, RESERVATION_BOUND};
use crate::engine::rollout::Entry;
use chrono::{DateTime, Utc};
use nodeimage_api::kruise::NodeImage;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

impl Ledger {
    /// Records the entries of `job` started on `nodes` from peers, on the
    /// limited registries.
    pub(in super::super) fn started_from_peers(
        &mut self,
        job: &PacedJob,
        nodes: &BTreeSet<String>,
        entries: &[Entry],
        limited: &BTreeMap<String, usize>,
        now: DateTime<Utc>,
    ) {
        let made = super::queue::reservations(job, nodes, entries, limited, now);
        self.peers.extend(made);
    }
}

/// Whether `ni` shows `entry` owned by `uid` unfinished (`Some(true)`),
/// finished (`Some(false)`), or not at all (`None`).
fn unfinished(ni: Option<&NodeImage>, entry: &Entry, uid: &str) -> Option<bool> {
    let ni = ni?;
    let spec = ni.spec.images.as_ref()?.get(entry.image.as_str())?;
    let tag = spec.tags.iter().find(|t| {
        t.is_keyed(&entry.tag, entry.purpose)
            && t.owner_references
                .iter()
                .flatten()
                .any(|o| o.uid.as_deref() == Some(uid))
    })?;
    let answer = ni
        .status
        .as_ref()
        .and_then(|s| s.entry_for(&entry.image, tag));
    Some(load::may_pull(answer))
}

/// Drops the peer starts the snapshot shows finished, or does not show
/// [`RESERVATION_BOUND`] after they began; then takes out of each
/// registry's load the nodes whose every unfinished entry on it is a peer
/// start (and which no reservation holds there).
pub(super) fn settle(
    ledger: &mut Ledger,
    snapshot: &[Arc<NodeImage>],
    loads: &mut BTreeMap<String, Load>,
    now: DateTime<Utc>,
) {
    if ledger.peers.is_empty() {
        return;
    }
    let names: BTreeSet<&str> = ledger.peers.iter().map(|p| p.node.as_str()).collect();
    let by_name: BTreeMap<&str, &NodeImage> = snapshot
        .iter()
        .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
        .filter(|(name, _)| names.contains(name))
        .collect();
    ledger.peers.retain(|p| {
        match unfinished(by_name.get(p.node.as_str()).copied(), &p.entry, &p.uid) {
            Some(pulling) => pulling,
            None => now - p.at < RESERVATION_BOUND,
        }
    });
    let mut started: BTreeMap<(&str, &str), Vec<&Entry>> = BTreeMap::new();
    for p in &ledger.peers {
        started
            .entry((p.registry.as_str(), p.node.as_str()))
            .or_default()
            .push(&p.entry);
    }
    for ((registry, node), peer_entries) in started {
        let reserved = ledger
            .reserved
            .iter()
            .any(|r| r.node == node && r.registry == registry);
        let Some(ni) = by_name.get(node) else {
            continue;
        };
        let others = load::unfinished_on(ni, registry).any(|(image, tag)| {
            !peer_entries
                .iter()
                .any(|e| e.image == image && tag.is_keyed(&e.tag, e.purpose))
        });
        if let Some(l) = loads.get_mut(registry).filter(|_| !reserved && !others) {
            l.remove(node);
        }
    }
}
