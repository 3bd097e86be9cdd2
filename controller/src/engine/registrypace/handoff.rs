//! The hand-off of a freed slot: when a node stops pulling from a limited
//! registry (its entry finished, or went), the waiting jobs the slot goes
//! to by the rule are woken at once, through each kind's controller. A
//! waiting job also looks again every `PACE_RETRY` as a safety net.

use super::ledger::{PacedJob, RegistryPacing, Waker, shows};
use super::load;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use nodeimage_api::kruise::NodeImage;
use std::sync::Arc;

impl RegistryPacing {
    /// The jobs of `kind` pacing wakes (a freed slot goes to them, or they
    /// may ride nodes another job just started), for that kind's controller
    /// (`Controller::reconcile_on`).
    pub fn wakeups<K>(
        &self,
        kind: &'static str,
    ) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + 'static,
    {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<ObjectRef<K>>();
        let waker: Waker = Box::new(move |namespace, name| {
            let job = ObjectRef::new(name);
            let _ = tx.send(match namespace {
                Some(ns) => job.within(ns),
                None => job,
            });
        });
        self.wakers_lock().insert(kind, waker);
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) })
    }

    /// Wakes `jobs` through their kinds' controllers.
    pub(super) fn wake(&self, jobs: &[Arc<PacedJob>]) {
        if jobs.is_empty() {
            return;
        }
        let wakers = self.wakers_lock();
        for job in jobs {
            if let Some(wake) = wakers.get(job.kind) {
                tracing::debug!(kind = job.kind, namespace = ?job.namespace, name = %job.name, "registry pacing: waking a waiting job");
                wake(job.namespace.as_deref(), &job.name);
            }
        }
    }

    /// Follows the NodeImages as they change, handing each freed slot on,
    /// until `changes` ends.
    pub async fn follow(
        self: Arc<Self>,
        changes: futures::stream::BoxStream<'static, Arc<NodeImage>>,
    ) {
        changes
            .for_each(|ni| {
                self.seen(&ni);
                std::future::ready(())
            })
            .await;
    }

    /// Wakes the jobs the slots `ni`'s node held go to, if it no longer
    /// pulls from registries it pulled from at the last plan and jobs wait
    /// for them.
    pub(super) fn seen(&self, ni: &NodeImage) {
        let Some(name) = ni.metadata.name.as_deref() else {
            return;
        };
        let mut ledger = self.lock();
        if ledger.waiting.is_empty() {
            return;
        }
        let was: Vec<String> = ledger
            .last
            .iter()
            .filter(|(r, l)| l.pulling.contains(name) && ledger.waiting.contains_key(*r))
            .map(|(r, _)| r.clone())
            .collect();
        if was.is_empty() {
            return;
        }
        // This node's reservations it shows are done (a later snapshot
        // shows them too), so they do not hold its slot.
        ledger
            .reserved
            .retain(|r| r.node != name || !shows(Some(ni), &r.entry, &r.uid));
        let now = load::loads(std::iter::once(ni), |r| was.iter().any(|w| w == r));
        let mut wake = Vec::new();
        for registry in was {
            let pulling = now.get(&registry).is_some_and(|l| l.pulling.contains(name));
            let reserved = ledger
                .reserved
                .iter()
                .any(|r| r.node == name && r.registry == registry);
            if pulling || reserved {
                continue;
            }
            ledger.freed(&registry, name);
            wake.extend(ledger.next_up(&registry, self.limits.of(&registry)));
        }
        drop(ledger);
        self.wake(&wake);
    }

    fn wakers_lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<&'static str, Waker>> {
        self.wakers.lock().unwrap_or_else(|e| e.into_inner())
    }
}
