//! What registry pacing remembers between plans, and the shell that runs a
//! job's plan under the rule. Its stores, one owner (this module):
//! - reservations: entries a plan started that the NodeImage cache does not
//!   show yet (without them, two jobs planning one after the other both see
//!   the same free slot). Dropped when the cache shows the entry owned by
//!   the job, when the job's write fails, or [`RESERVATION_BOUND`] after.
//! - wants: jobs waiting for a registry and how many nodes each would start.
//!   Replaced at each plan of the job, dropped when it wants nothing, when
//!   it is deleted, or [`WANT_BOUND`] after its last plan.
//! - served: when each waiting tenant last got a new slot on a registry
//!   (the round-robin's turn). Dropped with the tenant's last want there.
//! - last loads: each limited registry's pulling nodes as the last plan
//!   (or reservation) saw them, so that a NodeImage change can tell a freed
//!   slot (`handoff`). Replaced at each plan of a job on the registry.
//! - node loads (`load::LoadMemo`): what each NodeImage showed of the
//!   registries at its resourceVersion, so a plan reads only the NodeImages
//!   that changed. Replaced when a node's resourceVersion moves, dropped at
//!   the first plan whose snapshot lacks the node.
//! - peer starts: entries a plan started on nodes that fetch from peers
//!   (P2P waves, `Starts::from_peers`). A node whose every unfinished entry
//!   on a registry is one of these does not count against that registry.
//!   Dropped when the cache shows the entry finished, when it does not
//!   show it [`RESERVATION_BOUND`] after the start, when the job's write
//!   fails or when the job is forgotten. Lost with the controller (its
//!   nodes then count against the registry until they finish: the safe
//!   side).
//!
//! A plan of a job with a limited registry runs under one lock, from
//! counting the slots to recording its reservations; plans of jobs without
//! one never take it.

use super::Limits;
use super::load::{self, Load};
use super::rule::{self, JobOrder};
use crate::engine::jobevents::JobEvent;
use crate::engine::rollout::{Cap, Entry, Starts};
use crate::runtime::readers::RegistryGauge;
use chrono::{DateTime, TimeDelta, Utc};
use kube::runtime::reflector::Store;
use nodeimage_api::kruise::NodeImage;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How soon a job that waits for a registry looks again if nothing wakes
/// it: a safety net only, as a freed slot wakes the jobs it goes to
/// (`handoff`).
pub const PACE_RETRY: Duration = Duration::from_secs(10);
/// How long a reservation counts at most (the cache shows a write within
/// milliseconds; a lost watch event must not hold a slot for good).
pub const RESERVATION_BOUND: TimeDelta = TimeDelta::seconds(30);
/// How long a job's want counts after its last plan (a waiting job plans
/// again at least every [`PACE_RETRY`]).
pub const WANT_BOUND: TimeDelta = TimeDelta::seconds(30);

/// Registry limits, the NodeImage cache, and what pacing remembers.
pub struct RegistryPacing {
    pub(super) limits: Limits,
    nodeimages: Store<NodeImage>,
    ledger: Mutex<Ledger>,
    pub(super) wakers: Mutex<BTreeMap<&'static str, Waker>>,
}

/// Wakes one job of a kind, by namespace and name (`handoff`).
pub type Waker = Box<dyn Fn(Option<&str>, &str) + Send + Sync>;

/// A job as pacing knows it: its place in the queue, its tenant, and its
/// kind, namespace and name to wake it by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PacedJob {
    /// Its place among the jobs of its tenant.
    pub order: JobOrder,
    /// Its kind (cluster-scoped kinds are tenants of their own).
    pub kind: &'static str,
    /// Its namespace, for namespaced kinds.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl PacedJob {
    /// The job of `kind` with `meta`.
    pub fn of(
        kind: &'static str,
        meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    ) -> Self {
        PacedJob {
            order: JobOrder::of(meta),
            kind,
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// Its tenant (`rule::tenant`).
    pub fn tenant(&self) -> String {
        rule::tenant(self.namespace.as_deref(), self.kind)
    }
}

#[derive(Debug, Default)]
pub(super) struct Ledger {
    pub(super) reserved: Vec<Reservation>,
    pub(super) waiting: BTreeMap<String, BTreeMap<JobOrder, Want>>,
    served: BTreeMap<String, BTreeMap<String, u64>>,
    serves: u64,
    pub(super) last: BTreeMap<String, Load>,
    memo: load::LoadMemo,
    pub(super) peers: Vec<Reservation>,
}

#[derive(Debug, Clone)]
pub(super) struct Reservation {
    pub(super) uid: String,
    pub(super) node: String,
    pub(super) entry: Entry,
    pub(super) registry: String,
    tenant: String,
    at: DateTime<Utc>,
}

#[derive(Debug, Clone)]
pub(super) struct Want {
    nodes: usize,
    at: DateTime<Utc>,
    pub(super) job: Arc<PacedJob>,
}

/// A plan that starts nodes: which, and how many its own budget wanted.
pub trait Starting {
    /// The plan's starts.
    fn starts(&self) -> &Starts;
}

impl Starting for Starts {
    fn starts(&self) -> &Starts {
        self
    }
}

/// A plan run under registry pacing, with why the job waits, if it does.
#[derive(Debug)]
pub struct Paced<P> {
    /// The kind's plan, its starts cut to the registries' free slots.
    pub plan: P,
    /// Why nodes the job wanted to start wait, one reason per registry
    /// that held them back; empty when none waits.
    pub waiting: Vec<String>,
    /// The job began waiting in this plan (its event is published once).
    pub newly_waiting: bool,
}

impl<P> Paced<P> {
    fn free(plan: P) -> Self {
        Paced {
            plan,
            waiting: vec![],
            newly_waiting: false,
        }
    }

    /// The plan, when the job looks again (its plan's `requeue` within
    /// [`Paced::look_again`]) and the pacing's events.
    pub fn split(
        self,
        requeue: impl FnOnce(&P) -> Option<Duration>,
    ) -> (P, Option<Duration>, Vec<JobEvent>) {
        let (look_again, events) = (self.look_again(requeue(&self.plan)), self.events());
        (self.plan, look_again, events)
    }

    /// The event of a job that began waiting for a registry.
    pub fn events(&self) -> Vec<JobEvent> {
        if !self.newly_waiting {
            return vec![];
        }
        vec![JobEvent::normal("RegistryWait", self.waiting.join("; "))]
    }

    /// When the job looks again: as its plan says, and within
    /// [`PACE_RETRY`] while it waits for a registry.
    pub fn look_again(&self, planned: Option<Duration>) -> Option<Duration> {
        if self.waiting.is_empty() {
            return planned;
        }
        Some(planned.map_or(PACE_RETRY, |d| d.min(PACE_RETRY)))
    }
}

impl RegistryPacing {
    /// Pacing with `limits` over the shared NodeImage cache.
    pub fn new(limits: Limits, nodeimages: Store<NodeImage>) -> Self {
        RegistryPacing {
            limits,
            nodeimages,
            ledger: Mutex::default(),
            wakers: Mutex::default(),
        }
    }

    /// Runs a job's `plan` with what it may start (`None` when none of its
    /// `entries` is on a limited registry), then reserves the nodes it
    /// started, records what it still wants and wakes the jobs this plan
    /// left slots or rides for.
    pub fn plan<P: Starting>(
        &self,
        job: &PacedJob,
        entries: &[Entry],
        now: DateTime<Utc>,
        plan: impl FnOnce(Option<&Cap>) -> P,
    ) -> Paced<P> {
        let limited = self.limited(entries);
        if limited.is_empty() {
            return Paced::free(plan(None));
        }
        let mut ledger = self.lock();
        let loads = self.settle(&mut ledger, now, |r| limited.contains_key(r));
        for registry in limited.keys() {
            let load = loads.get(registry).cloned().unwrap_or_default();
            ledger.last.insert(registry.clone(), load);
        }
        let (cap, held) = ledger.cap(job, &limited);
        let p = plan(Some(&cap));
        let s = p.starts();
        let was_waiting = ledger.is_waiting(&job.order);
        let from_registry: Vec<String> = s
            .nodes
            .iter()
            .filter(|n| !s.from_peers.contains(*n))
            .cloned()
            .collect();
        let took_new = from_registry.iter().any(|n| !cap.riding.contains(n));
        ledger.reserve(job, &from_registry, entries, &limited, now);
        ledger.started_from_peers(job, &s.from_peers, entries, &limited, now);
        if took_new {
            ledger.served_now(&job.tenant(), limited.keys());
        }
        let unmet = s.wanted.saturating_sub(s.nodes.len());
        ledger.want(job, limited.keys(), unmet, now);
        let waiting: Vec<String> = held
            .into_iter()
            .filter(|(slots, _)| unmet > 0 && *slots < s.wanted)
            .map(|(_, reason)| reason)
            .collect();
        // Whom to wake: riders when it took new nodes; the jobs free slots
        // go to when it took some or let its claim go. A plan that changed
        // nothing wakes nobody (two jobs held by another registry would
        // otherwise wake each other for good).
        let changed = took_new || (was_waiting && unmet == 0);
        let wake = ledger.to_wake(&job.order, &limited, took_new, changed);
        drop(ledger);
        self.wake(&wake);
        Paced {
            plan: p,
            newly_waiting: !waiting.is_empty() && !was_waiting,
            waiting,
        }
    }

    /// The limited registries of `entries`, with their limits.
    fn limited(&self, entries: &[Entry]) -> BTreeMap<String, usize> {
        if !self.limits.any() {
            return BTreeMap::new();
        }
        entries
            .iter()
            .filter_map(|e| load::registry_of(&e.image))
            .map(|r| (self.limits.of(&r), r))
            .filter(|(limit, _)| *limit > 0)
            .map(|(limit, r)| (r, limit))
            .collect()
    }

    /// Drops the reservations of the job with `uid`: its entry writes failed.
    pub fn write_failed(&self, uid: &str) {
        let mut ledger = self.lock();
        ledger.reserved.retain(|r| r.uid != uid);
        ledger.peers.retain(|r| r.uid != uid);
    }

    /// Forgets the job with `uid` (it is being deleted), and wakes the jobs
    /// the slots it wanted now go to.
    pub fn forget(&self, uid: &str) {
        let mut ledger = self.lock();
        ledger.reserved.retain(|r| r.uid != uid);
        ledger.peers.retain(|r| r.uid != uid);
        let mut left = Vec::new();
        for (registry, jobs) in ledger.waiting.iter_mut() {
            let before = jobs.len();
            jobs.retain(|o, _| o.uid != uid);
            if jobs.len() < before {
                left.push(registry.clone());
            }
        }
        ledger.waiting.retain(|_, jobs| !jobs.is_empty());
        let wake: Vec<Arc<PacedJob>> = left
            .iter()
            .flat_map(|r| ledger.next_up(r, self.limits.of(r)))
            .collect();
        drop(ledger);
        self.wake(&wake);
    }

    /// Every registry with nodes pulling, a configured limit or waiting
    /// jobs, for the metrics.
    pub fn report(&self, now: DateTime<Utc>) -> Vec<RegistryGauge> {
        let mut ledger = self.lock();
        let loads = self.settle(&mut ledger, now, |_| true);
        let mut names: BTreeSet<&str> = loads.keys().map(String::as_str).collect();
        names.extend(self.limits.per_host.keys().map(String::as_str));
        names.extend(ledger.waiting.keys().map(String::as_str));
        names
            .into_iter()
            .map(|r| RegistryGauge {
                registry: r.to_string(),
                in_flight: loads.get(r).map_or(0, |l| l.pulling.len()),
                limit: Some(self.limits.of(r)).filter(|n| *n > 0),
                rate_limited: loads.get(r).is_some_and(|l| l.rate_limited),
                jobs_waiting: ledger.waiting.get(r).map_or(0, BTreeMap::len),
            })
            .collect()
    }

    /// The registries' loads (of those `keep` accepts) from the cache and
    /// the reservations still pending; drops reservations the cache shows
    /// and stale ones, and wants past their bound.
    fn settle(
        &self,
        ledger: &mut Ledger,
        now: DateTime<Utc>,
        keep: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, Load> {
        // One snapshot for both the loads and the reservations it shows: a
        // reservation dropped because a later read shows its entry, while
        // the loads come from an earlier one, would count that node nowhere.
        let snapshot = self.nodeimages.state();
        let mut loads = ledger.memo.loads(&snapshot, &keep);
        let reserved: BTreeSet<&str> = ledger.reserved.iter().map(|r| r.node.as_str()).collect();
        let by_name: BTreeMap<&str, &NodeImage> = snapshot
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
            .filter(|(name, _)| reserved.contains(name))
            .collect();
        ledger.reserved.retain(|r| {
            now - r.at < RESERVATION_BOUND
                && !shows(by_name.get(r.node.as_str()).copied(), &r.entry, &r.uid)
        });
        for r in ledger.reserved.iter().filter(|r| keep(r.registry.as_str())) {
            let load = loads.entry(r.registry.clone()).or_default();
            load.add(&r.node, Some(&r.tenant));
        }
        peers::settle(ledger, &snapshot, &mut loads, now);
        for jobs in ledger.waiting.values_mut() {
            jobs.retain(|_, w| now - w.at < WANT_BOUND);
        }
        ledger.waiting.retain(|_, jobs| !jobs.is_empty());
        ledger.forget_served();
        loads
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `ni` (a node's NodeImage as a snapshot shows it) holds `entry`
/// owned by the job `uid`.
pub(super) fn shows(ni: Option<&NodeImage>, entry: &Entry, uid: &str) -> bool {
    let Some(ni) = ni else {
        return false;
    };
    let image = ni
        .spec
        .images
        .as_ref()
        .and_then(|m| m.get(entry.image.as_str()));
    image.is_some_and(|i| {
        i.tags.iter().any(|t| {
            t.is_keyed(&entry.tag, entry.purpose)
                && t.owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid.as_deref() == Some(uid))
        })
    })
}

mod peers;
mod queue;
