//! Pre-download for native workloads: a Deployment, StatefulSet or
//! DaemonSet annotated `nodeimage.dev/image-predownload: "true"` gets one
//! ImagePullJob per image of its pod template that some of its Pods do not
//! run yet, onto the nodes of its Pods; the jobs go when every Pod runs the
//! template's images, when the annotation goes, or with the workload.
//! Decisions in `plan` (settings from annotations in `settings`, the
//! workload's shape in `workload`); this shell reads the workload, its Pods
//! (the ImagePullJob controller's Pod cache) and its jobs, and writes.
//!
//! A workload is woken when it changes (its status too: a rollout's
//! progress shows there), when one of its jobs changes, and every
//! [`RECHECK`] while it has jobs or pending images, since Pod changes do
//! not wake it.

pub mod plan;
pub mod settings;
pub mod workload;

use crate::engine::jobevents::JobEvent;
use crate::engine::jobshell::{Error, api_err, publish_on};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};
use nodeimage_api::ImagePullJob;
use nodeimage_api::predownload as names;
use nodeimage_ops::health::Readiness;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch as signal;
use workload::AsWorkload;

/// How often a workload with jobs or pending images is looked at again.
pub const RECHECK: Duration = Duration::from_secs(30);

/// What one kind's reconciler reads.
struct State {
    ctx: Context,
    /// This kind's pre-download jobs (labelled with their workload's UID).
    jobs: Store<ImagePullJob>,
}

/// Runs pre-download for the three kinds until `stop` turns true; does
/// nothing when the controller allows it in no namespace.
pub async fn run(ctx: Context, readiness: Readiness, stop: signal::Receiver<bool>) {
    if ctx.policy.predownload_namespaces
        == crate::runtime::policy::Namespaces::Only(Default::default())
    {
        tracing::info!("pre-download off: --predownload-namespaces allows no namespace");
        return;
    }
    tokio::join!(
        run_kind::<Deployment>(ctx.clone(), readiness.clone(), stop.clone()),
        run_kind::<StatefulSet>(ctx.clone(), readiness.clone(), stop.clone()),
        run_kind::<DaemonSet>(ctx, readiness, stop),
    );
}

async fn run_kind<K>(ctx: Context, readiness: Readiness, stop: signal::Receiver<bool>)
where
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
        Api::<K>::all(client.clone()),
        watcher::Config::default().page_size(100),
    )
    .default_backoff()
    .modify(|w: &mut K| w.trim())
    .reflect(writer)
    .applied_objects();
    let (jobs, jobs_writer) = reflector::store::<ImagePullJob>();
    let kind = K::KIND.name();
    let job_events = watcher(
        Api::<ImagePullJob>::all(client),
        watcher::Config::default().labels(names::WORKLOAD_UID_LABEL),
    )
    .default_backoff()
    .reflect(jobs_writer)
    .touched_objects()
    .filter(move |r| {
        let ours = r
            .as_ref()
            .is_ok_and(|j| j.owner_references().iter().any(|o| o.kind == kind));
        std::future::ready(ours)
    });
    let controller = Controller::for_stream(trigger, workloads).owns_stream(job_events);
    ready.set(true);
    let state = Arc::new(State { ctx, jobs });
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
    let Some(pods) = ctx.stores.pods.get() else {
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    // Resolves once the Pod cache has its first list (an error only when
    // its writer is gone, at shutdown).
    let _ = pods.wait_until_ready().await;
    let views: Vec<plan::PodView> = pods
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(w.namespace.as_str()))
        .map(|p| pod_view(p))
        .collect();
    let allowed = ctx.policy.predownload_namespaces.contains(&w.namespace);
    let p = plan::plan(&w, &views, &jobs, allowed);
    let mut events = p.events.clone();
    let written = apply(ctx, &w, &p, &mut events).await;
    publish_on(ctx, &obj.object_ref(&()), "PreDownload", &events).await;
    written?;
    let busy = p.waiting || !p.create.is_empty() || jobs.len() > p.delete.len();
    Ok(if busy {
        Action::requeue(RECHECK)
    } else {
        Action::await_change()
    })
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
    }
}

fn error_policy<K>(obj: Arc<K>, error: &Error, _state: Arc<State>) -> Action
where
    K: AsWorkload + Resource<DynamicType = ()>,
{
    tracing::warn!(kind = K::KIND.name(), workload = %obj.name_any(), namespace = ?obj.namespace(), error = %error, "pre-download reconcile failed; retrying");
    Action::requeue(Duration::from_secs(15))
}
