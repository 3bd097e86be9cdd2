//! Pre-download for native workloads: a Deployment, StatefulSet or
//! DaemonSet annotated `nodeimage.dev/image-predownload: "true"` gets one
//! ImagePullJob per image of its pod template that some of its Pods do not
//! run yet, onto the nodes of its Pods and (Deployment, StatefulSet) the
//! nodes its new Pods may land on; the jobs go when every Pod runs the
//! template's images, when the annotation goes, or with the workload.
//! Decisions in `plan` (settings from annotations in `settings`, the
//! workload's shape in `workload`, where a template fits in
//! `engine::placement`); this shell reads the workload, its Pods (the
//! shared Pod cache), the shared Node cache, its ServiceAccount and its
//! jobs, and writes.
//!
//! A workload is woken when it changes (its status too: a rollout's
//! progress shows there), when one of its jobs changes, when a Pod its
//! selector matches changes (a new Pod bound to a node, a Pod that now
//! runs the new images), and every [`RECHECK`] while it has jobs or pending
//! images, for what no event says (a Node that now fits its template).

pub mod plan;
pub mod settings;
pub mod workload;

#[cfg(test)]
mod tests;

use crate::cluster::cache::{Subscription, touched};
use crate::cluster::podcache::PodSubscription;
use crate::engine::jobevents::JobEvent;
use crate::engine::jobshell::{Error, api_err, publish_on};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use nodeimage_api::ImagePullJob;
use nodeimage_api::predownload as names;
use nodeimage_ops::health::Readiness;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch as signal;
use workload::AsWorkload;

/// How often a workload with jobs or pending images is looked at again,
/// beside the events that wake it.
pub const RECHECK: Duration = Duration::from_secs(120);

/// What one kind's reconciler reads.
struct State {
    ctx: Context,
    /// Every ImagePullJob (the shared cache; a workload's are those it owns).
    jobs: Store<ImagePullJob>,
    /// Every Node, trimmed (the shared Node cache).
    nodes: Store<Node>,
    /// Every Pod, trimmed (the shared Pod cache).
    pods: Store<Pod>,
}

/// What one workload kind's pre-download reads of the shared caches: the
/// Pods and the ImagePullJobs (its own are those it owns).
pub struct Feed {
    /// Every Pod, trimmed, and their changes.
    pub pods: PodSubscription,
    /// Every ImagePullJob, and their changes.
    pub jobs: Subscription<ImagePullJob>,
}

/// The shared caches' subscriptions, one per workload kind.
pub struct Feeds {
    /// For Deployments.
    pub deployments: Feed,
    /// For StatefulSets.
    pub statefulsets: Feed,
    /// For DaemonSets.
    pub daemonsets: Feed,
}

/// Runs pre-download for the three kinds until `stop` turns true; does
/// nothing when the controller allows it in no namespace.
pub async fn run(
    ctx: Context,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
    nodes: Store<Node>,
    feeds: Feeds,
) {
    if ctx.policy.predownload_namespaces
        == crate::runtime::policy::Namespaces::Only(Default::default())
    {
        tracing::info!("pre-download off: --predownload-namespaces allows no namespace");
        return;
    }
    tokio::join!(
        run_kind::<Deployment>(
            ctx.clone(),
            readiness.clone(),
            stop.clone(),
            nodes.clone(),
            feeds.deployments
        ),
        run_kind::<StatefulSet>(
            ctx.clone(),
            readiness.clone(),
            stop.clone(),
            nodes.clone(),
            feeds.statefulsets
        ),
        run_kind::<DaemonSet>(ctx, readiness, stop, nodes, feeds.daemonsets),
    );
}

async fn run_kind<K>(
    ctx: Context,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
    nodes: Store<Node>,
    feed: Feed,
) where
    K: AsWorkload
        + Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
{
    let client = ctx.client.clone();
    let ready = readiness
        .check(match K::KIND {
            workload::Kind::Deployment => "predownload-deployments-synced",
            workload::Kind::StatefulSet => "predownload-statefulsets-synced",
            workload::Kind::DaemonSet => "predownload-daemonsets-synced",
        })
        .await;
    let (workloads, writer) = reflector::store::<K>();
    let trigger = watcher(
        Api::<K>::all(client),
        watcher::Config::default().page_size(100),
    )
    .default_backoff()
    .modify(|w: &mut K| w.trim())
    .reflect(writer)
    .applied_objects();
    ready.set(true);
    follow(ctx, stop, nodes, feed, workloads, trigger).await;
}

/// One workload kind's pre-download over its workloads (`trigger`, already
/// reflected into `workloads`) and the shared caches' feed.
async fn follow<K, S>(
    ctx: Context,
    stop: signal::Receiver<bool>,
    nodes: Store<Node>,
    feed: Feed,
    workloads: Store<K>,
    trigger: S,
) where
    K: AsWorkload
        + Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static,
    S: futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static,
{
    let Feed { pods, jobs } = feed;
    let kind = K::KIND.name();
    let job_events = touched(jobs.events).filter(move |r| {
        let ours = r.as_ref().is_ok_and(|j| {
            j.labels().contains_key(names::WORKLOAD_UID_LABEL)
                && j.owner_references().iter().any(|o| o.kind == kind)
        });
        std::future::ready(ours)
    });
    let jobs = jobs.store;
    let pod_events = touched(pods.events);
    let controller = Controller::for_stream(trigger, workloads.clone())
        .owns_stream(job_events)
        .watches_stream(pod_events, on_pod(workloads));
    let state = Arc::new(State {
        ctx,
        jobs,
        nodes,
        pods: pods.store,
    });
    lifecycle::run_controller(
        "predownload",
        controller,
        reconcile::<K>,
        error_policy::<K>,
        state,
        stop,
    )
    .await;
}

async fn reconcile<K>(obj: Arc<K>, state: Arc<State>) -> Result<Action, Error>
where
    K: AsWorkload + Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
{
    let ctx = &state.ctx;
    let _timer = ctx.metrics.reconcile("Predownload");
    let w = obj.workload();
    let jobs = owned_jobs(&state.jobs, &w);
    let asks = !matches!(settings::read(&w.annotations).switch, settings::Switch::Off);
    if !asks && jobs.is_empty() {
        return Ok(Action::await_change());
    }
    // Resolves once the Pod cache has its first list (an error only when
    // its writer is gone, at shutdown).
    let _ = state.pods.wait_until_ready().await;
    let views: Vec<plan::PodView> = state
        .pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(w.namespace.as_str()))
        .map(|p| pod_view(p))
        .collect();
    let allowed = ctx.policy.predownload_namespaces.contains(&w.namespace);
    let account = service_account(ctx, &w).await;
    let nodes = state.nodes.state();
    let p = plan::plan(&plan::Inputs {
        workload: &w,
        pods: &views,
        jobs: &jobs,
        allowed,
        account: &account,
        nodes: &nodes,
        max_extra_nodes: ctx.predownload_max_extra_nodes,
    });
    let mut events = p.events.clone();
    let written = apply(ctx, &w, &p, &mut events).await;
    count_refusals(ctx, &events);
    publish_on(ctx, &obj.object_ref(&()), "PreDownload", &events).await;
    written?;
    let live = jobs.iter().filter(|j| !j.deleting).count();
    let busy = p.waiting || !p.create.is_empty() || live > p.delete.len();
    Ok(if busy {
        Action::requeue(RECHECK)
    } else {
        Action::await_change()
    })
}

/// A changed Pod wakes the workloads of its namespace that ask for
/// pre-download and whose selector matches it.
fn on_pod<K>(workloads: Store<K>) -> impl Fn(Pod) -> Vec<ObjectRef<K>> + Send + Sync + 'static
where
    K: AsWorkload + Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    move |pod| {
        let ns = pod.namespace().unwrap_or_default();
        workloads
            .state()
            .iter()
            .filter(|k| k.meta().namespace.as_deref() == Some(ns.as_str()))
            .filter(|k| {
                let none = BTreeMap::new();
                let annotations = k.meta().annotations.as_ref().unwrap_or(&none);
                let asks = !matches!(settings::read(annotations).switch, settings::Switch::Off);
                asks && plan::selects(&k.workload(), pod.labels())
            })
            .map(|k| ObjectRef::from_obj(k.as_ref()))
            .collect()
    }
}

/// The pull secrets of the workload's ServiceAccount, read only when its
/// template names none (the API server gives its Pods the account's then).
async fn service_account(ctx: &Context, w: &workload::Workload) -> plan::Account {
    let spec = w.pod_spec.as_ref();
    let own = spec
        .and_then(|s| s.image_pull_secrets.as_ref())
        .is_some_and(|l| l.iter().any(|r| !r.name.is_empty()));
    if own {
        return plan::Account::Unread;
    }
    let name = spec
        .and_then(|s| s.service_account_name.clone().or(s.service_account.clone()))
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "default".to_string());
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &w.namespace);
    match api.get_opt(&name).await {
        Ok(Some(sa)) => plan::Account::Secrets(
            sa.image_pull_secrets
                .into_iter()
                .flatten()
                .map(|r| r.name)
                .filter(|n| !n.is_empty())
                .collect(),
        ),
        Ok(None) => {
            plan::Account::Unknown(format!("ServiceAccount {}/{name} not found", w.namespace))
        }
        Err(e) => {
            tracing::warn!(workload = %w.describe(), namespace = %w.namespace, account = %name, error = %e, "reading the workload's ServiceAccount failed");
            plan::Account::Unknown(format!(
                "reading ServiceAccount {}/{name}: {e}",
                w.namespace
            ))
        }
    }
}

/// Counts the refusals among the events about to be published.
fn count_refusals(ctx: &Context, events: &[JobEvent]) {
    for e in events {
        match e.reason {
            plan::REASON_REFUSED => ctx.metrics.predownload.refusal("refused"),
            plan::REASON_INVALID => ctx.metrics.predownload.refusal("invalid"),
            _ => {}
        }
    }
}

/// The pre-download jobs `w` owns, from this kind's job cache.
fn owned_jobs(jobs: &Store<ImagePullJob>, w: &workload::Workload) -> Vec<plan::OwnedJob> {
    jobs.state()
        .iter()
        .filter(|j| j.namespace().as_deref() == Some(w.namespace.as_str()))
        .filter(|j| j.owner_references().iter().any(|o| o.uid == w.uid))
        .map(|j| plan::OwnedJob {
            name: j.name_any(),
            image: j.spec.image.clone(),
            deleting: j.metadata.deletion_timestamp.is_some(),
            pull_secrets: j.spec.template.pull_secrets.clone().unwrap_or_default(),
            parallelism: j.spec.template.parallelism.clone(),
            placement: j.annotations().get(names::PLACEMENT_ANNOTATION).cloned(),
            p2p: (nodeimage_api::p2p::ALL.iter())
                .filter_map(|k| Some((k.to_string(), j.annotations().get(*k)?.clone())))
                .collect(),
        })
        .collect()
}

/// Creates and deletes the plan's jobs, adding to `events` what happened
/// (a name taken by a job the workload does not own is reported, not
/// retried as an error).
async fn apply(
    ctx: &Context,
    w: &workload::Workload,
    p: &plan::Plan,
    events: &mut Vec<JobEvent>,
) -> Result<(), Error> {
    let (who, ns) = (w.describe(), w.namespace.as_str());
    let api: Api<ImagePullJob> = Api::namespaced(ctx.client.clone(), ns);
    for job in &p.create {
        let (name, image) = (job.name_any(), job.spec.image.as_str());
        match api.create(&PostParams::default(), job).await {
            Ok(_) => {
                ctx.metrics.predownload.job("created", 1);
                tracing::info!(workload = %who, namespace = %ns, job = %name, %image, "pre-download job created")
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                tracing::warn!(workload = %who, namespace = %ns, job = %name, "pre-download job name taken by a job this workload does not own");
                events.retain(|e| !(e.reason == plan::REASON_CREATED && e.note.contains(&name)));
                events.push(JobEvent::warning(
                    plan::REASON_INVALID,
                    format!("ImagePullJob {name} exists and is not this workload's; {image} is not pre-downloaded"),
                ));
            }
            Err(e) => {
                return Err(api_err(format!(
                    "creating pre-download job {ns}/{name} for {who}"
                ))(e));
            }
        }
    }
    for (name, why) in &p.delete {
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {
                ctx.metrics.predownload.job("deleted", 1);
                tracing::info!(workload = %who, namespace = %ns, job = %name, reason = %why, "pre-download job deleted");
                events.push(JobEvent::normal(
                    plan::REASON_DELETED,
                    format!("deleted ImagePullJob {name}: {why}"),
                ));
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(api_err(format!(
                    "deleting pre-download job {ns}/{name} of {who}"
                ))(e));
            }
        }
    }
    update(ctx, &api, w, &p.update).await
}

/// Brings live jobs in step with their workload: parallelism, placement
/// and P2P annotations (a P2P key the workload no longer has is removed).
async fn update(
    ctx: &Context,
    api: &Api<ImagePullJob>,
    w: &workload::Workload,
    updates: &[plan::JobUpdate],
) -> Result<(), Error> {
    for u in updates {
        let mut annotations = serde_json::Map::new();
        annotations.insert(
            names::PLACEMENT_ANNOTATION.into(),
            u.placement.clone().into(),
        );
        for key in nodeimage_api::p2p::ALL {
            annotations.insert(key.to_string(), u.p2p.get(key).cloned().into());
        }
        let body = serde_json::json!({
            "metadata": {"annotations": annotations},
            "spec": {"parallelism": u.parallelism},
        });
        match api
            .patch(&u.name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                ctx.metrics.predownload.job("updated", 1);
                tracing::info!(workload = %w.describe(), namespace = %w.namespace, job = %u.name, parallelism = u.parallelism, "pre-download job follows its workload");
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(api_err(format!(
                    "updating pre-download job {}/{} of {}",
                    w.namespace,
                    u.name,
                    w.describe()
                ))(e));
            }
        }
    }
    Ok(())
}

/// A Pod as the plan reads it.
fn pod_view(p: &Pod) -> plan::PodView {
    let status = p.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    plan::PodView {
        labels: p.labels().clone(),
        active: p.metadata.deletion_timestamp.is_none()
            && !matches!(phase, Some("Succeeded" | "Failed")),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        images: p
            .spec
            .as_ref()
            .map(crate::engine::podimages::used)
            .unwrap_or_default(),
        node: p.spec.as_ref().and_then(|s| s.node_name.clone()),
    }
}

/// The one failure policy of every controller (`jobshell::requeue`).
fn error_policy<K>(obj: Arc<K>, error: &Error, state: Arc<State>) -> Action
where
    K: AsWorkload + Resource<DynamicType = ()>,
{
    use crate::engine::jobshell::requeue::{self, Classify};
    let what = format!(
        "{} {}/{}",
        K::KIND.name(),
        obj.namespace().unwrap_or_default(),
        obj.name_any()
    );
    requeue::after_failure(
        &state.ctx.metrics,
        "Predownload",
        &what,
        error,
        error.failure(),
    )
}
