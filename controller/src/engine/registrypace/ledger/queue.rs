//! The ledger's queue of waiting jobs: what each registry's view holds for
//! the rule, the cap of a job's plan, its reservations and wants, and whom
//! a plan or a freed slot wakes.

use super::super::load::{self, Load};
use super::super::rule::{self, JobOrder, RegistryView, Waiter};
use super::{Ledger, PacedJob, Reservation, Want};
use crate::engine::rollout::{Cap, Entry};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

impl Ledger {
    /// The jobs waiting for `registry`, as the rule sees them.
    fn waiters(&self, registry: &str) -> Vec<Waiter> {
        let jobs = self.waiting.get(registry).into_iter().flatten();
        jobs.map(|(o, w)| Waiter {
            order: o.clone(),
            tenant: w.job.tenant(),
            wants: w.nodes,
        })
        .collect()
    }

    /// What `job` may start under the limits of `limited` (from the loads
    /// in `last`), and per registry its slots and why it would wait.
    pub(super) fn cap(
        &self,
        job: &PacedJob,
        limited: &BTreeMap<String, usize>,
    ) -> (Cap, Vec<(usize, String)>) {
        let mut slots = usize::MAX;
        let mut riding: Option<BTreeSet<String>> = None;
        let mut held = Vec::new();
        let empty = Load::default();
        for (registry, limit) in limited {
            let load = self.last.get(registry).unwrap_or(&empty);
            let waiting = self.waiters(registry);
            let own = self
                .waiting
                .get(registry)
                .and_then(|jobs| jobs.get(&job.order))
                .map_or(usize::MAX, |w| w.nodes);
            let me = Waiter {
                order: job.order.clone(),
                tenant: job.tenant(),
                wants: own,
            };
            let (tenants, served) = (load.held(), self.served_of(registry));
            let view = view(*limit, load, &waiting, &tenants, &served);
            let n = rule::admit(&me, &view);
            slots = slots.min(n);
            held.push((n, rule::wait_reason(registry, &me, &view)));
            let here = if load.rate_limited {
                BTreeSet::new()
            } else {
                load.pulling.clone()
            };
            riding = Some(match riding {
                None => here,
                Some(r) => r.intersection(&here).cloned().collect(),
            });
        }
        let cap = Cap {
            slots,
            riding: riding.unwrap_or_default(),
        };
        (cap, held)
    }

    fn served_of(&self, registry: &str) -> BTreeMap<String, u64> {
        self.served.get(registry).cloned().unwrap_or_default()
    }

    pub(super) fn is_waiting(&self, job: &JobOrder) -> bool {
        self.waiting.values().any(|jobs| jobs.contains_key(job))
    }

    /// Reserves each started node for each entry on a limited registry,
    /// and counts it in the registry's last load at once.
    pub(super) fn reserve(
        &mut self,
        job: &PacedJob,
        nodes: &[String],
        entries: &[Entry],
        limited: &BTreeMap<String, usize>,
        now: DateTime<Utc>,
    ) {
        let made = reservations(job, nodes, entries, limited, now);
        for r in &made {
            let last = self.last.entry(r.registry.clone()).or_default();
            last.add(&r.node, Some(&r.tenant));
        }
        self.reserved.extend(made);
    }

    /// Records that `tenant` just got new slots on `registries` (it goes
    /// behind the other waiting tenants in the round-robin).
    pub(super) fn served_now<'a>(
        &mut self,
        tenant: &str,
        registries: impl Iterator<Item = &'a String>,
    ) {
        self.serves += 1;
        for registry in registries {
            let served = self.served.entry(registry.clone()).or_default();
            served.insert(tenant.to_string(), self.serves);
        }
    }

    /// Forgets the turns of tenants no longer waiting for a registry.
    pub(super) fn forget_served(&mut self) {
        let waiting = &self.waiting;
        self.served.retain(|registry, tenants| {
            let jobs = waiting.get(registry);
            tenants.retain(|t, _| jobs.is_some_and(|j| j.values().any(|w| w.job.tenant() == *t)));
            !tenants.is_empty()
        });
    }

    /// Records that `job` wants `nodes` more nodes on each of `registries`
    /// (none: it waits for none of them).
    pub(super) fn want<'a>(
        &mut self,
        job: &PacedJob,
        registries: impl Iterator<Item = &'a String>,
        nodes: usize,
        at: DateTime<Utc>,
    ) {
        let shared = Arc::new(job.clone());
        for registry in registries {
            let jobs = self.waiting.entry(registry.clone()).or_default();
            if nodes == 0 {
                jobs.remove(&job.order);
            } else {
                let job = shared.clone();
                jobs.insert(job.order.clone(), Want { nodes, at, job });
            }
        }
        self.waiting.retain(|_, jobs| !jobs.is_empty());
    }

    /// Whom a plan of `job` wakes: when it took new nodes, every other job
    /// waiting on those registries (they may ride the same nodes, in the
    /// same writes); when it `changed` what it holds or wants, the jobs any
    /// slots left free go to.
    pub(super) fn to_wake(
        &self,
        job: &JobOrder,
        limited: &BTreeMap<String, usize>,
        took_new: bool,
        changed: bool,
    ) -> Vec<Arc<PacedJob>> {
        let mut out: BTreeMap<JobOrder, Arc<PacedJob>> = BTreeMap::new();
        for (registry, limit) in limited {
            if took_new {
                let jobs = self.waiting.get(registry).into_iter().flatten();
                out.extend(jobs.map(|(o, w)| (o.clone(), w.job.clone())));
            }
            if changed {
                for j in self.next_up(registry, *limit) {
                    out.insert(j.order.clone(), j);
                }
            }
        }
        out.remove(job);
        out.into_values().collect()
    }

    /// The waiting jobs the free slots of `registry` (by its last load) go
    /// to now.
    pub(in crate::engine::registrypace) fn next_up(
        &self,
        registry: &str,
        limit: usize,
    ) -> Vec<Arc<PacedJob>> {
        let Some(jobs) = self.waiting.get(registry) else {
            return vec![];
        };
        let empty = Load::default();
        let load = self.last.get(registry).unwrap_or(&empty);
        if load.pulling.len() >= limit {
            return vec![];
        }
        let waiting = self.waiters(registry);
        let (tenants, served) = (load.held(), self.served_of(registry));
        let view = view(limit, load, &waiting, &tenants, &served);
        rule::next_up(&view)
            .into_iter()
            .filter_map(|o| jobs.get(&o).map(|w| w.job.clone()))
            .collect()
    }

    /// Takes `node` out of the last load of `registry`: it no longer pulls
    /// from it.
    pub(in crate::engine::registrypace) fn freed(&mut self, registry: &str, node: &str) {
        if let Some(load) = self.last.get_mut(registry) {
            load.pulling.remove(node);
            for nodes in load.tenants.values_mut() {
                nodes.remove(node);
            }
            load.tenants.retain(|_, nodes| !nodes.is_empty());
        }
    }
}

/// What the rule sees of one limited registry.
fn view<'a>(
    limit: usize,
    load: &Load,
    waiting: &'a [Waiter],
    held: &'a BTreeMap<String, usize>,
    served: &'a BTreeMap<String, u64>,
) -> RegistryView<'a> {
    RegistryView {
        limit,
        in_flight: load.pulling.len(),
        rate_limited: load.rate_limited,
        waiting,
        held,
        served,
    }
}

/// One reservation of `job` per node of `nodes` and entry of `entries` on a
/// limited registry (registry slots and peer starts alike).
pub(super) fn reservations<'a>(
    job: &PacedJob,
    nodes: impl IntoIterator<Item = &'a String> + Clone,
    entries: &[Entry],
    limited: &BTreeMap<String, usize>,
    now: DateTime<Utc>,
) -> Vec<Reservation> {
    let tenant = job.tenant();
    let mut out = Vec::new();
    for entry in entries {
        let Some(registry) = load::registry_of(&entry.image) else {
            continue;
        };
        if !limited.contains_key(&registry) {
            continue;
        }
        out.extend(nodes.clone().into_iter().map(|node| Reservation {
            uid: job.order.uid.clone(),
            node: node.clone(),
            entry: entry.clone(),
            registry: registry.clone(),
            tenant: tenant.clone(),
            at: now,
        }));
    }
    out
}
