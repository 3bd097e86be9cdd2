//! The one rule of registry pacing: how many nodes one job may start
//! pulling from one registry now, and how to say why it waits. Pure.

use crate::runtime::clock::instant;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

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

/// What pacing knows of one limited registry when a job plans.
#[derive(Clone, Debug, Default)]
pub struct RegistryView<'a> {
    /// Most nodes pulling from it at once (more than 0).
    pub limit: usize,
    /// Nodes pulling from it now: unfinished entries in the cache, and
    /// entries written that the cache does not show yet.
    pub in_flight: usize,
    /// Some tag waits because the registry answered 429.
    pub rate_limited: bool,
    /// Jobs waiting for it, with how many nodes each wants to start.
    pub waiting: &'a [(JobOrder, usize)],
}

/// How many nodes `job` may start pulling from the registry of `view`:
/// none while it rate-limits, else its free slots less those the older
/// waiting jobs want (so no job starves behind younger ones).
pub fn admit(job: &JobOrder, view: &RegistryView<'_>) -> usize {
    if view.rate_limited {
        return 0;
    }
    let free = view.limit.saturating_sub(view.in_flight);
    let promised: usize = older(job, view).map(|(_, want)| *want).sum();
    free.saturating_sub(promised)
}

/// Why `job` waits for `registry` (what [`admit`] saw), for its events.
pub fn wait_reason(registry: &str, job: &JobOrder, view: &RegistryView<'_>) -> String {
    if view.rate_limited {
        return format!(
            "waiting for registry {registry}: rate-limited (it answered 429 Too Many Requests); no new pulls from it until no tag waits for it"
        );
    }
    let ahead = older(job, view).count();
    let mut reason = format!(
        "waiting for registry {registry}: {} of {} pulling",
        view.in_flight, view.limit
    );
    if ahead > 0 {
        reason.push_str(&format!(", {ahead} older job(s) first"));
    }
    reason
}

/// The jobs waiting for the registry that are older than `job`.
fn older<'a>(
    job: &'a JobOrder,
    view: &'a RegistryView<'_>,
) -> impl Iterator<Item = &'a (JobOrder, usize)> {
    view.waiting.iter().filter(move |(o, _)| o < job)
}
