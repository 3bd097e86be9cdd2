//! Watches that feed a reflector store and say when that store is synced.
//!
//! Decisions such as "this owner is gone" or "this node is gone" may only be
//! taken from a store that has completed its first list; an empty store that
//! has not been listed yet means nothing. Each watch here carries a
//! [`Synced`] flag for the decision code and a readiness check for `/readyz`,
//! and can announce every completed (re)list so the controller re-examines
//! everything a re-list may have changed silently (objects deleted while the
//! watch was down produce no delete event).

use crate::cluster::skipped::Skipped;
use futures::channel::mpsc::UnboundedSender;
use futures::{Stream, StreamExt};
use kube::Resource;
use kube::api::Api;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use nodeimage_api::lenient::Lenient;
use nodeimage_ops::health::Check;
use serde::de::DeserializeOwned;
use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::{Hash, Hasher};

pub use crate::runtime::readers::Synced;

/// Where a watch reports that its store is synced.
pub struct SyncSignals {
    /// Set for the decision code.
    pub synced: Synced,
    /// Set for `/readyz`.
    pub check: Check,
    /// Told of every completed (re)list, when the owner wants to re-examine
    /// everything then.
    pub relisted: Option<UnboundedSender<()>>,
    /// A kind this binary serves beside the others but must not wait for:
    /// while the API server refuses to list it (403: the chart's RBAC
    /// predates it; 404: its CRD is not applied) `/readyz` does not wait for
    /// it; the store stays unsynced, so nothing is decided from it.
    pub optional: bool,
}

/// Watches `api` into `writer` (after `trim` drops what the store need not
/// keep), logging watch errors and retrying with backoff, and yields the
/// watch events once the store has applied them.
pub fn reflect<K, F>(
    what: &'static str,
    api: Api<K>,
    writer: Writer<K>,
    trim: F,
    signals: SyncSignals,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: FnMut(&mut K) + Send + 'static,
{
    watcher(api, watcher::Config::default().page_size(LIST_PAGE))
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .filter_map(signalled(what, signals))
}

/// [`reflect`] for a kind whose objects may not decode: those are skipped
/// and reported by `skipped` ([`decoded`]); the others fill the store.
pub fn reflect_decoded<K, F>(
    what: &'static str,
    client: kube::Client,
    skipped: Skipped,
    writer: Writer<K>,
    trim: F,
    signals: SyncSignals,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: FnMut(&mut K) + Send + 'static,
{
    decoded(client, skipped)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .filter_map(signalled(what, signals))
}

/// Objects per list page, for every watch here. A page is decoded whole
/// before its objects are trimmed for a store: kube's default of 500 large
/// NodeImages made a peak that glibc then keeps (docs/benchmarks.md,
/// "Controller memory").
const LIST_PAGE: u32 = 100;

/// A watch of every object of kind `K` that never fails because one object
/// does not decode: such objects are skipped and reported by `skipped`, and
/// the stream carries the others (with watch errors, for a backoff).
pub fn decoded<K>(
    client: kube::Client,
    skipped: Skipped,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = watcher::Config::default().page_size(LIST_PAGE);
    watcher(Api::<Lenient<K>>::all(client), config).filter_map(move |event| {
        std::future::ready(match event {
            Ok(e) => skipped.filter(e).map(Ok),
            Err(e) => Some(Err(e)),
        })
    })
}

/// The objects of kind `K` that decode, into `writer`, as a trigger stream
/// for `Controller::for_stream` (what `Controller::new` does, but through
/// [`decoded`]).
pub fn controller_trigger<K>(
    client: kube::Client,
    writer: Writer<K>,
    skipped: Skipped,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    decoded(client, skipped)
        .default_backoff()
        .reflect(writer)
        .applied_objects()
}

/// A controller's trigger stream without the job's status-only changes: a
/// job is woken when its generation (spec, and deletion), finalizers,
/// labels or annotations change, not by its own status writes. Everything
/// it reads of the status is in the store when something else wakes it.
pub fn spec_changes<K>(
    trigger: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
) -> impl Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    use kube::runtime::{Predicate, predicates};
    // Deletion bumps the generation of an object with finalizers; the
    // deletion mark is compared too, so no server detail decides it.
    let deleting = |o: &K| Some(u64::from(o.meta().deletion_timestamp.is_some()));
    let what = (predicates::generation::<K>)
        .combine(predicates::finalizers::<K>)
        .combine(predicates::labels::<K>)
        .combine(predicates::annotations::<K>)
        .combine(deleting);
    trigger.predicate_filter(what, Default::default())
}

/// [`reflect`] into a shared store (whose subscribers are woken by every
/// applied object, and by every object after each (re)list), for a kind
/// whose undecodable objects are kept as `salvage` rebuilds them (see
/// [`Skipped::salvage`]): one bad entry must not hide its whole object.
pub fn reflect_salvaged<K, F>(
    what: &'static str,
    client: kube::Client,
    skipped: Skipped,
    salvage: fn(Lenient<K>) -> (K, Option<String>),
    writer: Writer<K>,
    trim: F,
    signals: SyncSignals,
) -> impl Stream<Item = watcher::Event<K>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    F: FnMut(&mut K) + Send + 'static,
{
    let config = watcher::Config::default().page_size(LIST_PAGE);
    watcher(Api::<Lenient<K>>::all(client), config)
        .map(move |event| event.map(|e| skipped.salvage(e, salvage)))
        .default_backoff()
        .modify(trim)
        .reflect_shared(writer)
        .filter_map(signalled(what, signals))
}

/// Sets the sync signals on each completed list, logs watch errors (the
/// watcher retries with backoff), and passes the events on.
fn signalled<K>(
    what: &'static str,
    signals: SyncSignals,
) -> impl FnMut(Result<watcher::Event<K>, watcher::Error>) -> std::future::Ready<Option<watcher::Event<K>>>
{
    let mut told = false;
    move |event| {
        let out = match event {
            Err(error) if signals.optional && !signals.synced.get() && unavailable(&error) => {
                signals.check.set(true);
                if !std::mem::replace(&mut told, true) {
                    tracing::warn!(watch = what, %error, "this kind cannot be listed: it is not served until the chart's CRD and RBAC for it are applied; every other kind is served meanwhile");
                }
                None
            }
            Ok(watcher::Event::InitDone) => {
                if !signals.synced.get() {
                    tracing::info!(watch = what, "cache synced");
                }
                signals.synced.set();
                signals.check.set(true);
                if let Some(tx) = &signals.relisted {
                    let _ = tx.unbounded_send(());
                }
                Some(watcher::Event::InitDone)
            }
            Ok(event) => Some(event),
            Err(error) => {
                tracing::warn!(watch = what, %error, "watch failed; retrying with backoff");
                None
            }
        };
        std::future::ready(out)
    }
}

/// Whether a watch `error` says the kind cannot be listed at all: refused
/// (403) or not served (404).
fn unavailable(error: &watcher::Error) -> bool {
    let code = match error {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => return false,
    };
    code == 403 || code == 404
}

/// A filter for [`reflect`]'s events that passes on an applied object only
/// when `key` (what the consumer reads of it) changed since its last event,
/// and every deletion. Watches whose objects change often in ways a
/// controller does not read (status writes) wake it only for what it reads.
///
/// Only a 64-bit fingerprint of each object's key is kept, not the key: a
/// copy of every label map per watch grows with the cluster. Two keys
/// with the same fingerprint (odds of 2^-64 per change) would hide that
/// change until the object's next one.
pub fn changes_only<K, Key>(
    key: impl Fn(&K) -> Key,
) -> impl FnMut(watcher::Event<K>) -> std::future::Ready<Option<Result<K, watcher::Error>>>
where
    K: Resource,
    Key: Hash,
{
    let mut seen: HashMap<String, u64> = HashMap::new();
    move |event| {
        std::future::ready(match event {
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                let name = obj.meta().name.clone().unwrap_or_default();
                let k = fingerprint(&key(&obj));
                let changed = seen.get(&name) != Some(&k);
                seen.insert(name, k);
                changed.then_some(Ok(obj))
            }
            watcher::Event::Delete(obj) => {
                seen.remove(obj.meta().name.as_deref().unwrap_or_default());
                Some(Ok(obj))
            }
            _ => None,
        })
    }
}

/// A fingerprint of `key`, stable within this process.
fn fingerprint(key: &impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

/// Drops all managed-field entries: stores that never look at field
/// ownership need not hold them.
pub fn without_managed_fields<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(name: &str, value: &str) -> ConfigMap {
        let mut c = ConfigMap::default();
        c.metadata.name = Some(name.into());
        c.data = Some([("k".to_string(), value.to_string())].into());
        c
    }

    fn refused(code: u16) -> watcher::Error {
        let status = kube::core::Status {
            code,
            ..Default::default()
        };
        watcher::Error::InitialListFailed(kube::Error::Api(Box::new(status)))
    }

    /// Whether `/readyz` passes after `errors` on a watch (`optional` or not).
    fn ready_after(optional: bool, errors: Vec<watcher::Error>) -> (bool, bool) {
        futures::executor::block_on(async {
            let readiness = nodeimage_ops::health::Readiness::default();
            let signals = SyncSignals {
                synced: Synced::default(),
                check: readiness.check("kind-synced").await,
                relisted: None,
                optional,
            };
            let synced = signals.synced.clone();
            let mut f = signalled::<ConfigMap>("kinds", signals);
            for e in errors {
                let _ = f(Err(e)).await;
            }
            (readiness.failing().await.is_empty(), synced.get())
        })
    }

    #[test]
    fn an_optional_kind_that_cannot_be_listed_does_not_hold_readiness() {
        let rows: Vec<(&str, bool, Vec<watcher::Error>, bool)> = vec![
            ("required kind, forbidden", false, vec![refused(403)], false),
            ("optional kind, forbidden", true, vec![refused(403)], true),
            (
                "optional kind, not served",
                true,
                vec![refused(404), refused(404)],
                true,
            ),
            (
                "optional kind, server error",
                true,
                vec![refused(500)],
                false,
            ),
            ("optional kind, no error yet", true, vec![], false),
        ];
        for (name, optional, errors, want) in rows {
            let (ready, synced) = ready_after(optional, errors);
            assert_eq!(ready, want, "{name}");
            assert!(
                !synced,
                "{name}: nothing is decided from a store never listed"
            );
        }
    }

    #[test]
    fn changes_only_passes_key_changes_and_deletions() {
        let mut filter = changes_only(|c: &ConfigMap| c.data.clone());
        let mut passes =
            |e| futures::executor::block_on(filter(e)).is_some_and(|r: Result<_, _>| r.is_ok());
        let cases = [
            ("first sight", watcher::Event::InitApply(cm("a", "1")), true),
            ("same key again", watcher::Event::Apply(cm("a", "1")), false),
            ("another object", watcher::Event::Apply(cm("b", "1")), true),
            ("key changed", watcher::Event::Apply(cm("a", "2")), true),
            ("deleted", watcher::Event::Delete(cm("a", "2")), true),
            (
                "back after deletion",
                watcher::Event::Apply(cm("a", "2")),
                true,
            ),
            ("list markers", watcher::Event::InitDone, false),
        ];
        for (name, event, want) in cases {
            assert_eq!(passes(event), want, "{name}");
        }
    }
}
