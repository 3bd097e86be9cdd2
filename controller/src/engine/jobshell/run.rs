//! Running a job kind's controller: the wakeups every kind shares (a
//! NodeImage tag it owns changed), the KubeEdge kinds' Node watch, and the
//! shell's reconcile and error policy handed to the one controller runner
//! (`runtime::lifecycle::run_controller`).

use super::{Caches, JobKind, JobReconciler, Shared};
use crate::cluster::nodecache::NodeSubscription;
use crate::cluster::nodeimages::Subscription;
use crate::cluster::podcache::PodSubscription;
use crate::cluster::wakeups::TagChanges;
use crate::cluster::watch::{self, Synced};
use crate::engine::registrypace::{Paced, PacedJob, Starting};
use crate::engine::rollout::Entry;
use crate::nodeimage::nodes::{NodeInfo, node_info};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use nodeimage_api::NodeImage;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use tokio::sync::watch as signal;

/// Makes sure the namespace of the daemons' secret copies exists; without
/// it, `what` fails until it does (logged, not fatal).
pub async fn ensure_secrets_namespace(ctx: &Context, what: &'static str) {
    if let Err(e) =
        crate::engine::pullsecrets::ensure_namespace(&ctx.client, &ctx.secrets_namespace).await
    {
        tracing::warn!(namespace = %ctx.secrets_namespace, error = %e, what, "cannot ensure the daemons' secrets namespace; these secrets will fail until it exists");
    }
}

/// Maps a NodeImage change to the jobs of kind `K` owning a changed tag.
pub fn wake_owners<K: JobKind>(
    changes: TagChanges,
) -> impl Fn(Arc<NodeImage>) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |ni| {
        changes
            .owners(&ni)
            .into_iter()
            .map(|(ns, name)| match ns {
                Some(ns) => ObjectRef::new(&name).within(&ns),
                None => ObjectRef::new(&name),
            })
            .collect()
    }
}

/// Runs a job kind's `controller` with the shell's reconcile and error
/// policy, through the one runner every controller uses, until `stop`
/// turns true.
pub async fn drive<R: JobReconciler>(
    controller: Controller<R::Job>,
    stop: signal::Receiver<bool>,
    state: Arc<R>,
) {
    lifecycle::run_controller(
        R::Job::NAME,
        controller,
        super::reconcile,
        super::error_policy,
        state,
        stop,
    )
    .await;
}

/// What a KubeEdge node-task reconciler reads: the shared caches and the Nodes.
pub struct NodeJobs<K> {
    /// Context and NodeImages.
    pub shared: Shared,
    /// Every Node, trimmed to labels, Ready and the kubelet version.
    pub nodes: Store<Node>,
    /// Whether `nodes` has been listed.
    pub nodes_synced: Synced,
    /// When each job's status was last written (ImagePrePullJob holds
    /// writes back that change no job state).
    pub status_pace: crate::engine::pace::StatusPace,
    /// Every Pod, trimmed, for a kind whose jobs may wait for a P2P agent
    /// (`engine::p2p`; `None`: the kind reads no Pods).
    pub pods: Option<(Store<k8s_openapi::api::core::v1::Pod>, Synced)>,
    kind: PhantomData<fn() -> K>,
}

impl<K> NodeJobs<K> {
    /// The Nodes as the plans read them, and the NodeImages, by name.
    pub fn snapshot(&self) -> (BTreeMap<String, NodeInfo>, BTreeMap<String, Arc<NodeImage>>) {
        let nodes = self.nodes.state();
        let nodes = nodes.iter().map(|n| (n.name_any(), node_info(n)));
        let nodeimages = self.shared.nodeimages.state().into_iter();
        (
            nodes.collect(),
            nodeimages.map(|ni| (ni.name_any(), ni)).collect(),
        )
    }
}

impl<K: JobKind> NodeJobs<K> {
    /// Runs the `plan` of `job` (of `entries`) under registry pacing, over
    /// a [`snapshot`](Self::snapshot) taken now, which is dropped before
    /// any write is awaited: held, it would keep each NodeImage as it was
    /// alive while the cache moves on.
    pub fn plan<P: Starting>(
        &self,
        job: &K,
        entries: &[Entry],
        now: DateTime<Utc>,
        plan: impl FnOnce(&Snapshot<'_>) -> P,
    ) -> Paced<P> {
        let paced = PacedJob::of(K::KIND, job.meta());
        self.shared
            .pacing
            .plan(&paced, entries, now, |registry_cap| {
                let (nodes, nodeimages) = self.snapshot();
                plan(&Snapshot {
                    nodes: &nodes,
                    nodeimages: &nodeimages,
                    edge_only: self.shared.ctx.kubeedge_edge_only,
                    registry_cap,
                })
            })
    }
}

/// What a KubeEdge plan reads of the cluster, by name.
pub struct Snapshot<'a> {
    /// Every Node, as the plans read them.
    pub nodes: &'a BTreeMap<String, NodeInfo>,
    /// Every NodeImage.
    pub nodeimages: &'a BTreeMap<String, Arc<NodeImage>>,
    /// Only KubeEdge edge nodes take part.
    pub edge_only: bool,
    /// Most nodes the job may start by its registries' free slots.
    pub registry_cap: Option<&'a crate::engine::rollout::Cap>,
}

impl<K> Caches for NodeJobs<K> {
    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn synced(&self) -> bool {
        let pods = self.pods.as_ref().is_none_or(|(_, synced)| synced.get());
        self.nodes_synced.get() && self.shared.nodeimages_synced.get() && pods
    }
}

/// What the wiring hands every job kind's controller: the shared caches it
/// reads, the one entry writer and the one registry pacing.
pub struct JobInputs<K: kube::Resource<DynamicType = ()> + Clone + 'static> {
    /// The controller's context (client, settings, metrics).
    pub ctx: Context,
    /// The one writer of tag entries.
    pub writer: crate::cluster::tagwrites::NodeWriter,
    /// The one registry pacing.
    pub pacing: Arc<crate::engine::registrypace::RegistryPacing>,
    /// The NodeImage cache, subscribed.
    pub nodeimages: Subscription,
    /// This kind's cache, subscribed.
    pub jobs: crate::cluster::cache::Subscription<K>,
}

/// Maps a NodeImage change to the jobs of kind `K` it concerns.
pub type OwnersOf<K> = Box<dyn Fn(Arc<NodeImage>) -> Vec<ObjectRef<K>> + Send + Sync>;

/// The jobs of kind `K` owning a tag that changed (the tag entry kinds).
pub fn tag_owners<K: JobKind>() -> OwnersOf<K> {
    Box::new(wake_owners::<K>(TagChanges::new(
        K::KIND,
        crate::engine::nodetasks::GROUP,
    )))
}

/// How a cluster-scoped node-task kind's controller is wired.
pub struct NodeTaskWiring<K: JobKind, Key> {
    /// What of a Node its plan reads: only changes of it wake running jobs.
    pub node_key: fn(&Node) -> Key,
    /// Whether a job has finished (finished jobs ignore Node changes).
    pub is_finished: fn(&K) -> bool,
    /// Which jobs a NodeImage change concerns.
    pub owners: fn() -> OwnersOf<K>,
}

/// Runs a KubeEdge node-task kind's controller until `stop` turns true. A
/// job is woken when it changes, when a NodeImage holding one of its tags
/// changes, when what its plan reads of a Node changes or a Node goes
/// (running jobs only), when its plan's due time comes, and, for a kind
/// given the Pods, when a Pod of its P2P agent changes.
pub async fn run_node_tasks<K, Key>(
    w: NodeTaskWiring<K, Key>,
    inputs: JobInputs<K>,
    nodes: NodeSubscription,
    pods: Option<PodSubscription>,
    stop: signal::Receiver<bool>,
) where
    K: JobKind,
    NodeJobs<K>: JobReconciler<Job = K>,
    Key: std::hash::Hash + Send + 'static,
{
    let JobInputs {
        ctx,
        writer,
        pacing,
        nodeimages,
        jobs,
    } = inputs;
    let NodeSubscription {
        store: nodes,
        synced: nodes_synced,
        events,
        ..
    } = nodes;
    let node_events =
        crate::cluster::cache::event_stream(events).filter_map(watch::changes_only(w.node_key));
    ensure_secrets_namespace(&ctx, "image secrets").await;
    let default_agent = ctx.p2p_agent.clone();
    let (pods, pod_events) = match pods {
        Some(p) => (Some((p.store, p.synced)), Some(p.events)),
        None => (None, None),
    };
    let trigger = crate::cluster::cache::applied(jobs.events);
    let jobs = jobs.store;
    let controller = Controller::for_stream(trigger, jobs.clone());
    let state = Arc::new(NodeJobs {
        shared: Shared {
            ctx,
            writer,
            nodeimages: nodeimages.store,
            nodeimages_synced: nodeimages.synced,
            pacing,
        },
        nodes,
        nodes_synced,
        status_pace: Default::default(),
        pods,
        kind: PhantomData,
    });
    let is_finished = w.is_finished;
    let paced = state.shared.pacing.wakeups::<K>(K::KIND);
    let controller = controller
        .reconcile_on(paced)
        .watches_shared_stream(nodeimages.changes, (w.owners)())
        .watches_stream(node_events, {
            let jobs = jobs.clone();
            move |_: Node| {
                jobs.state()
                    .iter()
                    .filter(|j| !is_finished(j))
                    .map(|j| ObjectRef::from_obj(j.as_ref()))
                    .collect::<Vec<_>>()
            }
        });
    let Some(pod_events) = pod_events else {
        return drive(controller, stop, state).await;
    };
    let wakes = agent_wakes(jobs, is_finished, default_agent);
    let controller = controller.watches_stream(crate::cluster::cache::touched(pod_events), wakes);
    drive(controller, stop, state).await;
}

/// A changed Pod wakes the unfinished jobs whose P2P agent it is.
fn agent_wakes<K: JobKind>(
    jobs: Store<K>,
    is_finished: fn(&K) -> bool,
    default_agent: Option<String>,
) -> impl Fn(k8s_openapi::api::core::v1::Pod) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |pod| {
        let agent = crate::engine::p2p::observe::agent_pod(&pod);
        let default = default_agent.as_deref();
        jobs.state()
            .iter()
            .filter(|j| !is_finished(j))
            .filter(|j| crate::engine::p2p::observe::is_agent_for(j.annotations(), default, &agent))
            .map(|j| ObjectRef::from_obj(j.as_ref()))
            .collect()
    }
}
