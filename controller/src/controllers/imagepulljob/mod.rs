//! ImagePullJob: one image onto the nodes a job selects, a bounded number at
//! a time, through tag entries in their NodeImages. The decisions are in
//! `plan`; `reconcile` reads, calls the plan, and writes narrow patches.
//!
//! A job is woken when it changes (not by its own status writes: with a
//! hundred jobs rolling out, each status write woke its job to plan again
//! and, counts having moved meanwhile, write again), when one of its tags changes in a
//! NodeImage (see `wakeups`), when a NodeImage appears or its labels change
//! so that the job now selects it, when a pod in its namespace changes (podSelector jobs), when one
//! of its source pull secrets changes, and when its plan's due time comes.

pub mod plan;
mod reconcile;

use crate::cluster::wakeups::{LabelChanges, TagChanges};
use crate::cluster::watch;
use crate::engine::jobshell;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use nodeimage_api::{ImagePullJob, NodeImage};
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Kind name in tag owner references.
pub const KIND: &str = "ImagePullJob";

/// Runs the ImagePullJob controller until `stop` turns true. Besides what
/// every job kind reads, it reads Nodes (node selectors) and Pods (pod
/// selectors).
pub async fn run(
    inputs: jobshell::JobInputs<ImagePullJob>,
    nodes: Store<k8s_openapi::api::core::v1::Node>,
    pods: crate::cluster::podcache::PodSubscription,
    stop: signal::Receiver<bool>,
) {
    let jobshell::JobInputs {
        ctx,
        writer,
        pacing,
        nodeimages,
        jobs,
    } = inputs;
    jobshell::ensure_secrets_namespace(&ctx, "pull secrets").await;
    let client = ctx.client.clone();
    let crate::cluster::podcache::PodSubscription {
        store: pods,
        synced: pods_synced,
        events: pod_events,
        ..
    } = pods;
    let trigger = watch::spec_changes(crate::cluster::cache::applied(jobs.events));
    let jobs = jobs.store;
    let controller = Controller::for_stream(trigger, jobs.clone());
    let reach = crate::engine::followtag::Reach {
        http_registries: ctx.follow_tag_http_registries.clone(),
        proxies: nodeimage_api::noproxy::Proxies::from_env(),
        providers: ctx.follow_tag_providers.clone(),
    };
    let follow = crate::engine::followtag::FollowTags::new(reach, ctx.metrics.clone());
    let default_agent = ctx.p2p_agent.clone();
    let state = Arc::new(reconcile::State {
        follow,
        shared: crate::engine::jobshell::Shared {
            ctx,
            writer,
            nodeimages: nodeimages.store,
            nodeimages_synced: nodeimages.synced,
            pacing,
        },
        pods,
        pods_synced,
        nodes,
        jobs: jobs.clone(),
    });
    let relabelled = LabelChanges::new(state.shared.nodeimages.clone());
    let paced = state.shared.pacing.wakeups::<ImagePullJob>(KIND);
    let controller = controller
        .reconcile_on(paced)
        .watches_shared_stream(nodeimages.changes, on_nodeimage(jobs.clone(), relabelled))
        .watches_stream(
            crate::cluster::cache::touched(pod_events),
            on_pod(jobs.clone(), default_agent),
        )
        .watches_stream(secret_events(&client), on_secret(jobs));
    jobshell::drive(controller, stop, state).await;
}

/// The Secrets that changed or went, by their metadata.
fn secret_events(
    client: &kube::Client,
) -> impl Stream<Item = Result<PartialObjectMeta<Secret>, watcher::Error>> + Send + 'static {
    let api = Api::<PartialObjectMeta<Secret>>::all(client.clone());
    watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects()
        .filter_map(|r: Result<PartialObjectMeta<Secret>, watcher::Error>| {
            std::future::ready(r.ok().map(Ok))
        })
}

/// A changed NodeImage wakes the jobs owning one of its tags and, when its
/// labels changed, the jobs that now select it.
fn on_nodeimage(
    jobs: Store<ImagePullJob>,
    relabelled: LabelChanges,
) -> impl Fn(Arc<NodeImage>) -> Vec<ObjectRef<ImagePullJob>> + Send + Sync + 'static {
    let owners = jobshell::wake_owners(TagChanges::new(KIND, "apps.kruise.io"));
    move |ni| {
        let mut wake = owners(ni.clone());
        if relabelled.changed(&ni) {
            let selecting = jobs.state();
            let selecting = selecting.iter().filter(|j| plan::selects(j, &ni));
            wake.extend(selecting.map(|j| ObjectRef::from_obj(j.as_ref())));
        }
        wake
    }
}

/// A changed pod wakes the podSelector jobs of its namespace, and the
/// running jobs whose P2P agent it is.
fn on_pod(
    jobs: Store<ImagePullJob>,
    default_agent: Option<String>,
) -> impl Fn(Pod) -> Vec<ObjectRef<ImagePullJob>> + Send + Sync + 'static {
    move |pod| {
        let ns = pod.namespace();
        let agent = crate::engine::p2p::observe::agent_pod(&pod);
        let running = |j: &ImagePullJob| {
            j.status
                .as_ref()
                .is_none_or(|s| s.completion_time.is_none())
        };
        let waits = |j: &ImagePullJob| {
            running(j)
                && crate::engine::p2p::observe::is_agent_for(
                    j.annotations(),
                    default_agent.as_deref(),
                    &agent,
                )
        };
        jobs.state()
            .iter()
            .filter(|j| (j.namespace() == ns && plan::reads_pods(j)) || waits(j))
            .map(|j| ObjectRef::from_obj(j.as_ref()))
            .collect()
    }
}

/// A changed Secret wakes the jobs of its namespace that name it.
fn on_secret(
    jobs: Store<ImagePullJob>,
) -> impl Fn(PartialObjectMeta<Secret>) -> Vec<ObjectRef<ImagePullJob>> + Send + Sync + 'static {
    move |s| {
        let (ns, name) = (s.namespace(), s.name_any());
        jobs.state()
            .iter()
            .filter(|j| {
                let mut names = j.spec.template.pull_secrets.iter().flatten();
                j.namespace() == ns && names.any(|p| *p == name)
            })
            .map(|j| ObjectRef::from_obj(j.as_ref()))
            .collect()
    }
}
