//! The one rule of registry pacing: how many nodes one job may start
//! pulling from one registry now, which waiting jobs a freed slot goes to,
//! and how to say why a job waits. Pure.
//!
//! Free slots go round-robin between tenants (a namespace; a cluster-scoped
//! kind is a tenant of its own): the next slot goes to the waiting tenant
//! with the fewest nodes pulling for it, then to the one served longest
//! ago, then to the one with the oldest waiting job; within a tenant, to
//! its oldest job that still wants nodes.

use crate::runtime::clock::instant;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use std::collections::BTreeMap;

/// A job's place in a registry's queue: older jobs first (creation time,
/// then uid, so two jobs created in the same second have a fixed order).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JobOrder {
    /// The job's creationTimestamp.
    pub created: Option<DateTime<Utc>>,
    /// The job's uid.
    pub uid: String,
}

impl JobOrder {
    /// The place of the job with `meta` (its creationTimestamp and uid).
    pub fn of(meta: &ObjectMeta) -> Self {
        JobOrder {
            created: meta.creation_timestamp.as_ref().map(instant),
            uid: meta.uid.clone().unwrap_or_default(),
        }
    }
}

/// The tenant a job's slots are counted for: its namespace, or its kind
/// for a cluster-scoped kind (kinds are capitalised, namespaces never are).
pub fn tenant(namespace: Option<&str>, kind: &str) -> String {
    namespace.map_or_else(|| kind.to_string(), str::to_string)
}

/// A job waiting for a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    /// Its place within its tenant.
    pub order: JobOrder,
    /// Its tenant ([`tenant`]).
    pub tenant: String,
    /// How many more nodes it wants to start.
    pub wants: usize,
}

/// What pacing knows of one limited registry when a job plans.
#[derive(Clone, Debug)]
pub struct RegistryView<'a> {
    /// Most nodes pulling from it at once (more than 0).
    pub limit: usize,
    /// Nodes pulling from it now: unfinished entries in the cache, and
    /// entries written that the cache does not show yet.
    pub in_flight: usize,
    /// Some tag waits because the registry answered 429.
    pub rate_limited: bool,
    /// Jobs waiting for it, in any order.
    pub waiting: &'a [Waiter],
    /// Nodes pulling from it for each tenant (a node pulling for two
    /// tenants counts for both).
    pub held: &'a BTreeMap<String, usize>,
    /// When each tenant last got a new slot on it (a rising count; absent:
    /// not since it began waiting).
    pub served: &'a BTreeMap<String, u64>,
}

/// How many of the registry's free slots each job gets, by the
/// round-robin of the module's rule. `job`, if given, takes part with its
/// own want in place of what `waiting` says of it.
pub fn shares(view: &RegistryView<'_>, job: Option<&Waiter>) -> BTreeMap<JobOrder, usize> {
    let mut out = BTreeMap::new();
    if view.rate_limited {
        return out;
    }
    // Per tenant: its jobs oldest first, with what each still wants.
    let mut tenants: BTreeMap<&str, Vec<(&JobOrder, usize)>> = BTreeMap::new();
    let others = view
        .waiting
        .iter()
        .filter(|w| job.is_none_or(|j| j.order != w.order));
    for w in others.chain(job) {
        if w.wants > 0 {
            tenants
                .entry(&w.tenant)
                .or_default()
                .push((&w.order, w.wants));
        }
    }
    for jobs in tenants.values_mut() {
        jobs.sort();
    }
    let mut held: BTreeMap<&str, usize> = tenants
        .keys()
        .map(|t| (*t, view.held.get(*t).copied().unwrap_or(0)))
        .collect();
    let mut served: BTreeMap<&str, u64> = tenants
        .keys()
        .map(|t| (*t, view.served.get(*t).copied().unwrap_or(0)))
        .collect();
    let mut next_serve = served.values().max().copied().unwrap_or(0);
    let mut free = view.limit.saturating_sub(view.in_flight);
    while free > 0 {
        let pick = tenants
            .iter()
            .filter_map(|(t, jobs)| Some((*t, jobs.iter().find(|(_, w)| *w > 0)?.0)))
            .min_by_key(|(t, oldest)| (held[t], served[t], (*oldest).clone(), *t));
        let Some((tenant, _)) = pick else { break };
        let Some(slot) = tenants
            .get_mut(tenant)
            .and_then(|jobs| jobs.iter_mut().find(|(_, w)| *w > 0))
        else {
            break;
        };
        slot.1 -= 1;
        *out.entry(slot.0.clone()).or_insert(0) += 1;
        *held.entry(tenant).or_insert(0) += 1;
        next_serve += 1;
        served.insert(tenant, next_serve);
        free -= 1;
    }
    out
}

/// How many nodes `job` may start pulling from the registry of `view`
/// (beyond nodes already pulling from it): none while it rate-limits,
/// else its share of the free slots.
pub fn admit(job: &Waiter, view: &RegistryView<'_>) -> usize {
    shares(view, Some(job))
        .get(&job.order)
        .copied()
        .unwrap_or(0)
}

/// The waiting jobs that free slots would go to now (whom a freed slot
/// wakes), fairest first.
pub fn next_up(view: &RegistryView<'_>) -> Vec<JobOrder> {
    shares(view, None).into_keys().collect()
}

/// Why `job` waits for `registry` (what [`admit`] saw), for its events.
pub fn wait_reason(registry: &str, job: &Waiter, view: &RegistryView<'_>) -> String {
    if view.rate_limited {
        return format!(
            "waiting for registry {registry}: rate-limited (it answered 429 Too Many Requests); no new pulls from it until no tag waits for it"
        );
    }
    let others = view.waiting.iter().filter(|w| w.order != job.order).count();
    let mut reason = format!(
        "waiting for registry {registry}: {} of {} pulling",
        view.in_flight, view.limit
    );
    if others > 0 {
        reason.push_str(&format!(
            ", {others} other job(s) waiting (slots go round-robin by namespace)"
        ));
    }
    reason
}

#[cfg(test)]
mod tests;
