//! Tags that move: a job annotated `nodeimage.dev/follow-tag` has its tag's
//! digest looked up at that interval, once per tag for every job following
//! it (never per node), and its nodes pull the tag again when the digest
//! changed. `rule` decides (pure), `lookups` is the memory of lookups,
//! `registry` the HTTP, `transport` the way out (proxies, as the nodes);
//! this shell reads the job's secrets and the node credentials of kubelet's
//! plugins, looks up when due, counts, and hands the verdict to the job's
//! reconcile.

pub mod lookups;
pub mod registry;
pub mod rule;
pub mod transport;

use crate::runtime::metrics::Metrics;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use nodeimage_api::credentials::{Credential, matching, parse_secret};
use nodeimage_api::noproxy::Proxies;
use nodeimage_api::reference::ImageRef;
use nodeimage_ops::credproviders::Providers;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub use rule::{Ask, Verdict};

/// The job as following reads it.
pub struct Job<'a> {
    /// Its namespace (where its pull secrets are).
    pub namespace: &'a str,
    /// Its annotations.
    pub annotations: &'a BTreeMap<String, String>,
    /// Its image (`spec.image`).
    pub image: &'a str,
    /// Its pull secrets' names.
    pub pull_secrets: &'a [String],
    /// It has completed (an `Always` job): its tag is no longer followed.
    pub completed: bool,
}

/// How lookups reach registries, and with which node credentials: what
/// the nodes have (their proxies, kubelet's credential-provider plugins).
#[derive(Clone, Default)]
pub struct Reach {
    /// Registries (`host:port`) reached over plain HTTP, beside loopback ones.
    pub http_registries: Vec<String>,
    /// `HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`.
    pub proxies: Proxies,
    /// kubelet's credential-provider plugins, if configured.
    pub providers: Option<Arc<Providers>>,
}

/// Following tags for one controller: the lookups' memory and the client.
pub struct FollowTags {
    lookups: lookups::Lookups,
    registry: Result<registry::Registry, registry::LookupError>,
    providers: Option<Arc<Providers>>,
    metrics: Metrics,
}

impl FollowTags {
    /// Looking up as `reach` says, counted in `metrics`.
    pub fn new(reach: Reach, metrics: Metrics) -> Self {
        let registry = registry::Registry::new(reach.http_registries, reach.proxies);
        if let Err(e) = &registry {
            tracing::error!(error = %e, "followed tags cannot be looked up");
        }
        FollowTags {
            lookups: lookups::Lookups::default(),
            registry,
            providers: reach.providers,
            metrics,
        }
    }

    /// What `job` does about its tag now: looks the tag up if due (one
    /// lookup per tag and interval, whichever job asks first), and says
    /// what to write and publish, and when to look again.
    pub async fn follow(
        &self,
        client: &kube::Client,
        job: Job<'_>,
        now: DateTime<Utc>,
    ) -> (Verdict, Option<Duration>) {
        let ask = rule::ask(job.annotations, job.image);
        let mut seen = rule::Seen::default();
        let mut next = None;
        if let (Ask::Follow { image, interval }, false) = (&ask, job.completed) {
            let key = lookups::key(&image.pull_ref(), job.namespace, job.pull_secrets);
            let claim = self.lookups.claim(&key, *interval, now);
            next = Some(claim.next);
            seen.digest = claim.digest;
            seen.failure = claim.failure;
            if claim.look_up {
                let found = self.look_up(client, &job, image).await;
                self.metrics
                    .followtag_lookup(found.as_ref().map_or_else(|(r, _)| *r, |_| "found"));
                match found.map_err(|(_, why)| why) {
                    Ok(digest) => {
                        tracing::info!(tag = %image.pull_ref(), %digest, "followed tag looked up");
                        self.lookups.found(&key, &digest);
                        seen.digest = Some(digest);
                        seen.failure = None;
                    }
                    Err(why) => {
                        tracing::warn!(tag = %image.pull_ref(), error = %why, "followed tag lookup failed");
                        self.lookups.failed(&key, &why);
                        seen.failure = Some(why);
                    }
                }
            }
        }
        let verdict = rule::judge(&ask, job.completed, &seen, job.annotations, now);
        (verdict, next)
    }

    /// Counts what `verdict`'s events, just published, said: a move is a
    /// digest change (counted here, not when judged, because a reconcile
    /// that fails before publishing judges again).
    pub fn published(&self, verdict: &Verdict) {
        if verdict.events.iter().any(|e| e.reason == rule::MOVED) {
            self.metrics.followtag_digest_changed();
        }
    }

    /// One lookup of `image`'s digest with the job's pull secrets, then
    /// the node credentials of kubelet's plugins (kubelet's order); a
    /// failure's metric result and text (with the secrets and plugins that
    /// gave nothing).
    async fn look_up(
        &self,
        client: &kube::Client,
        job: &Job<'_>,
        image: &ImageRef,
    ) -> Result<String, (&'static str, String)> {
        let registry = self
            .registry
            .as_ref()
            .map_err(|e| (e.result(), e.to_string()))?;
        let name = image.name();
        let (creds, mut notes) = credentials(client, job.namespace, job.pull_secrets).await;
        // The plugins' answers are already those for this image.
        let provided = match &self.providers {
            Some(p) => p.credentials(&name, &image.pull_ref()).await,
            None => Default::default(),
        };
        notes.extend(provided.notes);
        let mut usable = matching(&creds, &name);
        usable.extend(provided.creds.iter());
        registry.digest(image, &usable).await.map_err(|e| {
            let mut text = e.to_string();
            for n in notes {
                text.push_str("; ");
                text.push_str(&n);
            }
            (e.result(), text)
        })
    }
}

/// The credentials of the job's pull secrets, and notes on those that
/// could not be read (never their content).
async fn credentials(
    client: &kube::Client,
    ns: &str,
    names: &[String],
) -> (Vec<Credential>, Vec<String>) {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let (mut creds, mut notes) = (vec![], vec![]);
    for name in names {
        let path = format!("{ns}/{name}");
        match api.get_opt(name).await {
            Ok(Some(s)) => {
                let data: BTreeMap<String, Vec<u8>> = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                match parse_secret(&path, s.type_.as_deref(), &data) {
                    Ok(c) => creds.extend(c),
                    Err(e) => notes.push(e.to_string()),
                }
            }
            Ok(None) => notes.push(format!("pull secret {path} not found")),
            Err(e) => notes.push(format!("pull secret {path} unreadable: {e}")),
        }
    }
    (creds, notes)
}

/// The merge patch writing `verdict`'s annotations, guarded by
/// `resource_version` when given (None: nothing to write).
pub fn annotations_patch(
    verdict: &Verdict,
    resource_version: Option<String>,
) -> Option<serde_json::Value> {
    if verdict.annotations.is_empty() {
        return None;
    }
    let map: serde_json::Map<String, serde_json::Value> = verdict
        .annotations
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                v.clone().map_or(serde_json::Value::Null, Into::into),
            )
        })
        .collect();
    let mut metadata = serde_json::json!({"annotations": map});
    if let Some(rv) = resource_version {
        metadata["resourceVersion"] = rv.into();
    }
    Some(serde_json::json!({ "metadata": metadata }))
}
