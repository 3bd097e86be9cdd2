//! What registry pacing remembers between plans, and the shell that runs a
//! job's plan under the rule. Two stores, one owner (this module):
//! - reservations: entries a plan started that the NodeImage cache does not
//!   show yet (without them, two jobs planning one after the other both see
//!   the same free slot). Dropped when the cache shows the entry owned by
//!   the job, when the job's write fails, or [`RESERVATION_BOUND`] after.
//! - wants: jobs waiting for a registry and how many nodes each would start
//!   (the queue in order of creation). Replaced at each plan of the job,
//!   dropped when it wants nothing, when it is deleted, or
//!   [`WANT_BOUND`] after its last plan.
//!
//! A plan of a job with a limited registry runs under one lock, from
//! counting the slots to recording its reservations; plans of jobs without
//! one never take it.

use super::Limits;
use super::load::{self, Load};
use super::rule::{self, JobOrder, RegistryView};
use crate::engine::jobevents::JobEvent;
use crate::engine::rollout::{Entry, Starts};
use crate::runtime::metrics::RegistryGauge;
use chrono::{DateTime, TimeDelta, Utc};
use kube::runtime::reflector::Store;
use nodeimage_api::kruise::NodeImage;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How soon a job that waits for a registry looks again (a slot freed by
/// another job's node does not wake it).
pub const PACE_RETRY: Duration = Duration::from_secs(2);
/// How long a reservation counts at most (the cache shows a write within
/// milliseconds; a lost watch event must not hold a slot for good).
pub const RESERVATION_BOUND: TimeDelta = TimeDelta::seconds(30);
/// How long a job's want counts after its last plan (a waiting job plans
/// again every [`PACE_RETRY`]).
pub const WANT_BOUND: TimeDelta = TimeDelta::seconds(30);

/// Registry limits, the NodeImage cache, and what pacing remembers.
pub struct RegistryPacing {
    limits: Limits,
    nodeimages: Store<NodeImage>,
    ledger: Mutex<Ledger>,
}

#[derive(Debug, Default)]
struct Ledger {
    reserved: Vec<Reservation>,
    waiting: BTreeMap<String, BTreeMap<JobOrder, Want>>,
}

#[derive(Debug, Clone)]
struct Reservation {
    uid: String,
    node: String,
    entry: Entry,
    registry: String,
    at: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy)]
struct Want {
    nodes: usize,
    at: DateTime<Utc>,
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
        }
    }

    /// Runs a job's `plan` with the number of nodes it may start (`None`
    /// when none of its `entries` is on a limited registry), then reserves
    /// the nodes it started and records what it still wants.
    pub fn plan<P: Starting>(
        &self,
        job: &JobOrder,
        entries: &[Entry],
        now: DateTime<Utc>,
        plan: impl FnOnce(Option<usize>) -> P,
    ) -> Paced<P> {
        if !self.limits.any() {
            return Paced::free(plan(None));
        }
        let limited: BTreeMap<String, usize> = entries
            .iter()
            .filter_map(|e| load::registry_of(&e.image))
            .map(|r| (self.limits.of(&r), r))
            .filter(|(limit, _)| *limit > 0)
            .map(|(limit, r)| (r, limit))
            .collect();
        if limited.is_empty() {
            return Paced::free(plan(None));
        }
        let mut ledger = self.lock();
        let loads = self.settle(&mut ledger, now, |r| limited.contains_key(r));
        let mut cap = usize::MAX;
        let mut held = Vec::new();
        for (registry, limit) in &limited {
            let waiting = ledger.waiting_for(registry);
            let view = view(*limit, loads.get(registry), &waiting);
            let slots = rule::admit(job, &view);
            cap = cap.min(slots);
            held.push((slots, rule::wait_reason(registry, job, &view)));
        }
        let p = plan(Some(cap));
        let s = p.starts();
        let was_waiting = ledger.is_waiting(job);
        ledger.reserve(&job.uid, &s.nodes, entries, &limited, now);
        let unmet = s.wanted.saturating_sub(s.nodes.len());
        ledger.want(job, limited.keys(), unmet, now);
        let waiting: Vec<String> = held
            .into_iter()
            .filter(|(slots, _)| unmet > 0 && *slots < s.wanted)
            .map(|(_, reason)| reason)
            .collect();
        drop(ledger);
        Paced {
            plan: p,
            newly_waiting: !waiting.is_empty() && !was_waiting,
            waiting,
        }
    }

    /// Drops the reservations of the job with `uid`: its entry writes failed.
    pub fn write_failed(&self, uid: &str) {
        self.lock().reserved.retain(|r| r.uid != uid);
    }

    /// Forgets the job with `uid`: it is being deleted.
    pub fn forget(&self, uid: &str) {
        let mut ledger = self.lock();
        ledger.reserved.retain(|r| r.uid != uid);
        for jobs in ledger.waiting.values_mut() {
            jobs.retain(|o, _| o.uid != uid);
        }
        ledger.waiting.retain(|_, jobs| !jobs.is_empty());
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
        let mut loads = load::loads(snapshot.iter().map(|n| n.as_ref()), &keep);
        let reserved: BTreeSet<&str> = ledger.reserved.iter().map(|r| r.node.as_str()).collect();
        let by_name: BTreeMap<&str, &NodeImage> = snapshot
            .iter()
            .filter_map(|n| Some((n.metadata.name.as_deref()?, n.as_ref())))
            .filter(|(name, _)| reserved.contains(name))
            .collect();
        ledger.reserved.retain(|r| {
            now - r.at < RESERVATION_BOUND && !shows(by_name.get(r.node.as_str()), &r.entry, &r.uid)
        });
        for r in ledger.reserved.iter().filter(|r| keep(r.registry.as_str())) {
            let load = loads.entry(r.registry.clone()).or_default();
            load.pulling.insert(r.node.clone());
        }
        for jobs in ledger.waiting.values_mut() {
            jobs.retain(|_, w| now - w.at < WANT_BOUND);
        }
        ledger.waiting.retain(|_, jobs| !jobs.is_empty());
        loads
    }

    fn lock(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Whether `ni` (a node's NodeImage as the snapshot shows it) holds `entry`
/// owned by the job `uid`.
fn shows(ni: Option<&&NodeImage>, entry: &Entry, uid: &str) -> bool {
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
            t.tag == entry.tag
                && t.owner_references
                    .iter()
                    .flatten()
                    .any(|o| o.uid.as_deref() == Some(uid))
        })
    })
}

/// What the rule sees of one limited registry.
fn view<'a>(
    limit: usize,
    load: Option<&Load>,
    waiting: &'a [(JobOrder, usize)],
) -> RegistryView<'a> {
    RegistryView {
        limit,
        in_flight: load.map_or(0, |l| l.pulling.len()),
        rate_limited: load.is_some_and(|l| l.rate_limited),
        waiting,
    }
}

impl Ledger {
    /// The jobs waiting for `registry`, oldest first.
    fn waiting_for(&self, registry: &str) -> Vec<(JobOrder, usize)> {
        let jobs = self.waiting.get(registry).into_iter().flatten();
        jobs.map(|(o, w)| (o.clone(), w.nodes)).collect()
    }

    fn is_waiting(&self, job: &JobOrder) -> bool {
        self.waiting.values().any(|jobs| jobs.contains_key(job))
    }

    /// Reserves each started node for each entry on a limited registry.
    fn reserve(
        &mut self,
        uid: &str,
        nodes: &[String],
        entries: &[Entry],
        limited: &BTreeMap<String, usize>,
        now: DateTime<Utc>,
    ) {
        for entry in entries {
            let Some(registry) = load::registry_of(&entry.image) else {
                continue;
            };
            if !limited.contains_key(&registry) {
                continue;
            }
            self.reserved.extend(nodes.iter().map(|node| Reservation {
                uid: uid.to_string(),
                node: node.clone(),
                entry: entry.clone(),
                registry: registry.clone(),
                at: now,
            }));
        }
    }

    /// Records that `job` wants `nodes` more nodes on each of `registries`
    /// (none: it waits for none of them).
    fn want<'a>(
        &mut self,
        job: &JobOrder,
        registries: impl Iterator<Item = &'a String>,
        nodes: usize,
        at: DateTime<Utc>,
    ) {
        for registry in registries {
            let jobs = self.waiting.entry(registry.clone()).or_default();
            if nodes == 0 {
                jobs.remove(job);
            } else {
                jobs.insert(job.clone(), Want { nodes, at });
            }
        }
        self.waiting.retain(|_, jobs| !jobs.is_empty());
    }
}
