//! Objects that do not decode into their Rust type (a value stored before a
//! schema bound existed, say) are skipped, never allowed to stop a list or a
//! watch: every other object of the kind keeps reconciling. Each skipped
//! object is reported once per generation: one log line, a Warning event
//! `InvalidObject` on it, a status message where its kind has one, and the
//! `nodeimage_controller_invalid_objects` gauge while it exists.

use crate::runtime::context::Context;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::watcher;
use nodeimage_api::lenient::Lenient;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Event reason on an object that cannot be decoded.
pub const REASON: &str = "InvalidObject";

/// Tracks and reports the undecodable objects of one kind.
#[derive(Clone)]
pub struct Skipped {
    kind: &'static str,
    status_field: Option<&'static str>,
    ctx: Context,
    /// uid (or key) → generation already reported.
    seen: Arc<Mutex<HashMap<String, i64>>>,
}

/// What [`Skipped::sort`] decided about one object.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Decoded: pass it on (and forget an earlier report).
    Keep,
    /// Not decodable, already reported at this generation.
    Quiet,
    /// Not decodable and new (or changed): report it.
    Report,
}

/// Pure bookkeeping: whether an object (by id and generation) is reported.
fn verdict(seen: &mut HashMap<String, i64>, id: &str, generation: i64, ok: bool) -> Verdict {
    if ok {
        seen.remove(id);
        return Verdict::Keep;
    }
    if seen.insert(id.to_string(), generation) == Some(generation) {
        Verdict::Quiet
    } else {
        Verdict::Report
    }
}

impl Skipped {
    /// A tracker for `kind`; `status_field` names the free-text status field
    /// the reason is written to (`message`, `reason`), if the kind has one.
    pub fn new(ctx: &Context, kind: &'static str, status_field: Option<&'static str>) -> Self {
        ctx.metrics.invalid_objects(kind, 0);
        Self {
            kind,
            status_field,
            ctx: ctx.clone(),
            seen: Arc::default(),
        }
    }

    /// Passes on the decoded objects of a watch event; reports the others.
    pub fn filter<K>(&self, event: watcher::Event<Lenient<K>>) -> Option<watcher::Event<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        match event {
            watcher::Event::Apply(l) => self.decoded(l).map(watcher::Event::Apply),
            watcher::Event::InitApply(l) => self.decoded(l).map(watcher::Event::InitApply),
            watcher::Event::Delete(l) => {
                self.forget(&l);
                l.object.ok().map(watcher::Event::Delete)
            }
            watcher::Event::Init => Some(watcher::Event::Init),
            watcher::Event::InitDone => Some(watcher::Event::InitDone),
        }
    }

    /// [`Skipped::filter`] for a kind whose undecodable objects are still
    /// read in part: such an object is passed on as `salvage` rebuilds it
    /// from what decodes, and reported once per generation as a skipped one
    /// is (the gauge counts it while it stays so).
    pub fn salvage<K>(
        &self,
        event: watcher::Event<Lenient<K>>,
        salvage: fn(Lenient<K>) -> (K, Option<String>),
    ) -> watcher::Event<K>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let one = |l: Lenient<K>| {
            let (id, meta) = (Self::id(&l), l.metadata.clone());
            let whole = l
                .object
                .as_ref()
                .err()
                .map(|invalid| invalid.reason.clone());
            let (object, parts) = salvage(l);
            match whole {
                None => self.forget_id(&id),
                Some(reason) => self.report_part::<K>(&meta, &id, &parts.unwrap_or(reason)),
            }
            object
        };
        match event {
            watcher::Event::Apply(l) => watcher::Event::Apply(one(l)),
            watcher::Event::InitApply(l) => watcher::Event::InitApply(one(l)),
            watcher::Event::Delete(l) => {
                self.forget(&l);
                watcher::Event::Delete(salvage(l).0)
            }
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitDone => watcher::Event::InitDone,
        }
    }

    /// Counts an object read only in part and, once per generation, says so.
    fn report_part<K>(&self, meta: &kube::api::ObjectMeta, id: &str, reason: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        let generation = meta.generation.unwrap_or(0);
        let (v, count) = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            let v = verdict(&mut seen, id, generation, false);
            (v, seen.len())
        };
        self.ctx.metrics.invalid_objects(self.kind, count);
        if v != Verdict::Report {
            return;
        }
        tracing::warn!(
            kind = self.kind,
            object = %l_key(meta),
            generation,
            %reason,
            "an object decodes only in part; nodeimage leaves the rest of it as stored"
        );
        let note = format!(
            "nodeimage cannot read part of this object and leaves that part as it is: {reason}"
        );
        let this = self.clone();
        let meta = meta.clone();
        tokio::spawn(async move { this.publish_note::<K>(meta, note).await });
    }

    /// Whether the object with this uid is stored but skipped now (it does
    /// not decode): it exists, though no store holds it.
    pub fn holds(&self, uid: &str) -> bool {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.contains_key(uid)
    }

    fn id<K>(l: &Lenient<K>) -> String {
        l.metadata.uid.clone().unwrap_or_else(|| l.key())
    }

    fn forget<K>(&self, l: &Lenient<K>) {
        self.forget_id(&Self::id(l));
    }

    fn forget_id(&self, id: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if seen.remove(id).is_some() {
            self.ctx.metrics.invalid_objects(self.kind, seen.len());
        }
    }

    fn decoded<K>(&self, l: Lenient<K>) -> Option<K>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let generation = l.metadata.generation.unwrap_or(0);
        let (v, count) = {
            let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
            let v = verdict(&mut seen, &Self::id(&l), generation, l.object.is_ok());
            (v, seen.len())
        };
        self.ctx.metrics.invalid_objects(self.kind, count);
        match (v, l.object) {
            (Verdict::Keep, Ok(obj)) => Some(obj),
            (Verdict::Report, Err(invalid)) => {
                tracing::warn!(
                    kind = self.kind,
                    object = %l_key(&l.metadata),
                    generation,
                    reason = %invalid.reason,
                    "skipping an object that cannot be decoded; every other object is still reconciled"
                );
                let this = self.clone();
                let meta = l.metadata;
                tokio::spawn(async move { this.publish::<K>(meta, invalid.reason).await });
                None
            }
            _ => None,
        }
    }

    /// Warning event and status message on the skipped object.
    async fn publish<K>(&self, meta: kube::api::ObjectMeta, reason: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let note = format!("nodeimage cannot read this object and skips it: {reason}");
        self.publish_note::<K>(meta, note).await;
    }

    /// Warning event `note` and status message on an object of kind `K`.
    async fn publish_note<K>(&self, meta: kube::api::ObjectMeta, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: meta.name.clone(),
            namespace: meta.namespace.clone(),
            uid: meta.uid.clone(),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: REASON.into(),
            note: Some(crate::messages::cap(&note, 1000)),
            action: "Decode".into(),
            secondary: None,
        };
        if let Err(e) = self.ctx.recorder().publish(&event, &reference).await {
            tracing::warn!(kind = self.kind, error = %e, "cannot record the InvalidObject event");
        }
        let (Some(field), Some(name)) = (self.status_field, meta.name.as_deref()) else {
            return;
        };
        let ar = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = match meta.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(self.ctx.client.clone(), ns, &ar),
            None => Api::all_with(self.ctx.client.clone(), &ar),
        };
        let patch = json!({ "status": { field: note } });
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(kind = self.kind, object = %l_key(&meta), error = %e, "cannot write the status message of an invalid object");
        }
    }
}

fn l_key(meta: &kube::api::ObjectMeta) -> String {
    match (&meta.namespace, &meta.name) {
        (Some(ns), Some(n)) => format!("{ns}/{n}"),
        (_, Some(n)) => n.clone(),
        _ => "<unnamed>".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_once_per_generation_and_forgets_when_fixed() {
        let mut seen = HashMap::new();
        // (step, id, generation, decodes, expected)
        let steps = [
            ("first bad sight", "a", 1, false, Verdict::Report),
            (
                "same generation again (status write, relist)",
                "a",
                1,
                false,
                Verdict::Quiet,
            ),
            ("another bad object", "b", 4, false, Verdict::Report),
            ("spec edited, still bad", "a", 2, false, Verdict::Report),
            ("fixed", "a", 3, true, Verdict::Keep),
            ("bad again after the fix", "a", 4, false, Verdict::Report),
            ("good objects pass", "c", 1, true, Verdict::Keep),
        ];
        for (step, id, generation, ok, want) in steps {
            assert_eq!(verdict(&mut seen, id, generation, ok), want, "{step}");
        }
        assert_eq!(seen.len(), 2, "a and b are still skipped");
    }
}
