//! What a workload annotated for pre-download needs next: one ImagePullJob
//! per image of its pod template that some of its Pods do not run yet,
//! onto the nodes running its Pods (its selector as the job's podSelector)
//! and, for a Deployment or StatefulSet, the nodes its new Pods may land on
//! (its template's placement, bounded); with the pull secrets its new Pods
//! will carry; kept in step with the workload's edits; none once every Pod
//! runs the template's images (the rollout is over), when the annotation
//! goes, or when the platform team does not allow its namespace. Pure.

use super::settings::{self, Settings, Switch};
use super::workload::{Kind, Workload};
use crate::engine::jobevents::JobEvent;
use crate::engine::placement::{self, Placement};
use crate::engine::podimages::{self as images, Wanted};
use crate::engine::rollout;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::core::SelectorExt;
use nodeimage_api::kruise::{
    CompletionPolicy, CompletionPolicyType, ImagePullJob, ImagePullJobSpec, ImagePullJobTemplate,
    ImagePullPolicy, PullPolicy,
};
use nodeimage_api::predownload as names;
use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// A Pod of the workload's namespace, as far as pre-download cares.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PodView {
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Running or about to (not finished, not being deleted).
    pub active: bool,
    /// Its Ready condition is True.
    pub ready: bool,
    /// The images it runs or mounts.
    pub images: BTreeSet<String>,
    /// The node it is bound to, if any.
    pub node: Option<String>,
}

/// A pre-download job the workload owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedJob {
    /// Its name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Already being deleted (its cleanup finalizer still holds it).
    pub deleting: bool,
    /// Its `pullSecrets` (immutable: a change makes the job again).
    pub pull_secrets: Vec<String>,
    /// Its `parallelism`.
    pub parallelism: Option<IntOrString>,
    /// Its placement annotation, if any.
    pub placement: Option<String>,
    /// Its P2P annotations (`nodeimage.dev/p2p-*`).
    pub p2p: BTreeMap<String, String>,
}

/// The workload's ServiceAccount, as far as its new Pods' pull secrets go
/// (the API server gives a Pod its ServiceAccount's `imagePullSecrets`
/// only when the Pod names none itself).
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Account {
    /// Not read: the template names its own pull secrets.
    #[default]
    Unread,
    /// Its `imagePullSecrets`.
    Secrets(Vec<String>),
    /// It could not be read, with why.
    Unknown(String),
}

/// What the plan reads.
pub struct Inputs<'a> {
    /// The workload.
    pub workload: &'a Workload,
    /// The Pods of its namespace.
    pub pods: &'a [PodView],
    /// The pre-download jobs it owns.
    pub jobs: &'a [OwnedJob],
    /// Whether the platform team lets this namespace's workloads pre-download.
    pub allowed: bool,
    /// Its ServiceAccount's pull secrets.
    pub account: &'a Account,
    /// Every Node, trimmed (where a new Pod may land).
    pub nodes: &'a [Arc<Node>],
    /// At most this many nodes beyond those of its Pods
    /// (`--predownload-max-extra-nodes`).
    pub max_extra_nodes: u32,
}

/// A live job brought in step with its workload.
#[derive(Clone, Debug, PartialEq)]
pub struct JobUpdate {
    /// The job.
    pub name: String,
    /// Its new `parallelism`.
    pub parallelism: i32,
    /// Its new placement annotation (None: removed).
    pub placement: Option<String>,
    /// Its new P2P annotations, the workload's (the others are removed).
    pub p2p: BTreeMap<String, String>,
}

/// What to do.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Jobs to create.
    pub create: Vec<ImagePullJob>,
    /// Jobs to delete, with why (for the log and the event).
    pub delete: Vec<(String, String)>,
    /// Jobs whose parallelism or placement follow the workload's edits.
    pub update: Vec<JobUpdate>,
    /// Events on the workload.
    pub events: Vec<JobEvent>,
    /// Some image waits for ready Pods of the new template.
    pub waiting: bool,
}

/// Event reason when a job is made (OpenKruise's).
pub const REASON_CREATED: &str = "CreatedImagePullJob";
/// Event reason when a job is removed.
pub const REASON_DELETED: &str = "DeletedImagePullJob";
/// Event reason for an annotation or image that cannot be used.
pub const REASON_INVALID: &str = "PreDownloadInvalid";
/// Event reason when the platform team does not allow the namespace.
pub const REASON_REFUSED: &str = "PreDownloadRefused";

/// Decides the workload's pre-download jobs.
pub fn plan(inp: &Inputs<'_>) -> Plan {
    let (w, jobs) = (inp.workload, inp.jobs);
    let mut p = Plan::default();
    let s = settings::read(&w.annotations);
    if w.deleting {
        drop_all(&mut p, jobs, "the workload is being deleted");
        return p;
    }
    let wanted = w.pod_spec.as_ref().map(images::wanted).unwrap_or_default();
    let selected = match selected_pods(w, inp.pods) {
        Ok(s) => s,
        Err(e) => {
            drop_all(&mut p, jobs, "its selector is invalid");
            if s.switch == Switch::On {
                p.events.push(JobEvent::warning(REASON_INVALID, e));
            }
            return p;
        }
    };
    let pending: Vec<&Wanted> = wanted
        .iter()
        .filter(|i| selected.iter().any(|pod| !pod.images.contains(&i.image)))
        .collect();
    if let Some((why, event)) = switched_off(w, &s, inp.allowed) {
        drop_all(&mut p, jobs, why);
        // Said only while a rollout is pending, when it matters.
        p.events.extend(event.filter(|_| !pending.is_empty()));
        return p;
    }
    drop_done(&mut p, jobs, &pending);
    if pending.is_empty() {
        return p;
    }
    let needed = s.min_updated_ready.of(w.desired);
    let ready_new = selected
        .iter()
        .filter(|pod| pod.ready && wanted.iter().all(|i| pod.images.contains(&i.image)))
        .count();
    if i64::try_from(ready_new).unwrap_or(i64::MAX) < i64::from(needed) {
        p.waiting = true;
        return p;
    }
    let desired = Desired::of(inp, &s, &selected);
    follow_edits(&mut p, jobs, &pending, &desired);
    create_missing(&mut p, w, &s, &desired, jobs, pending);
    if !p.create.is_empty() || !p.update.is_empty() {
        // Said with the change they affect, not on every look.
        let mut said = problems(&s, inp.account, w);
        said.append(&mut p.events);
        p.events = said;
    }
    p
}

/// What every pending image's job should look like now.
struct Desired {
    /// The pull secrets the new Pods will carry.
    secrets: Vec<String>,
    /// Where new Pods may land (None for a DaemonSet: its own nodes).
    placement: Option<Placement>,
    /// Nodes pulling at once.
    parallelism: i32,
    /// The workload's P2P annotations (`engine::p2p`), which its jobs carry.
    p2p: BTreeMap<String, String>,
}

impl Desired {
    fn of(inp: &Inputs<'_>, s: &Settings, selected: &[&PodView]) -> Self {
        let w = inp.workload;
        let own: Vec<String> = w
            .pod_spec
            .iter()
            .flat_map(|spec| spec.image_pull_secrets.iter().flatten())
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
            .collect();
        let secrets = match (own.is_empty(), inp.account) {
            (true, Account::Secrets(sa)) => sa.clone(),
            _ => own,
        };
        let placement = match (w.kind, &w.pod_spec) {
            (Some(Kind::Deployment | Kind::StatefulSet), Some(spec)) => {
                Some(Placement::of(spec, inp.max_extra_nodes))
            }
            _ => None,
        };
        let taken: BTreeSet<String> = selected.iter().filter_map(|p| p.node.clone()).collect();
        let extra = placement.as_ref().map_or(0, |pl| {
            let nodes = inp
                .nodes
                .iter()
                .filter(|n| crate::nodeimage::nodes::wants_nodeimage(&n.metadata))
                .map(AsRef::as_ref);
            placement::extra_nodes(pl, &w.uid, nodes, &taken).len()
        });
        let p2p = (nodeimage_api::p2p::ALL.iter())
            .filter_map(|k| Some((k.to_string(), w.annotations.get(*k)?.clone())))
            .collect();
        Desired {
            secrets,
            parallelism: s.parallelism.of(taken.len() + extra),
            placement,
            p2p,
        }
    }

    fn placement_annotation(&self) -> Option<String> {
        self.placement.as_ref().map(Placement::to_annotation)
    }
}

/// Jobs whose pull secrets no longer match are made again (the field is
/// immutable); the others take the workload's parallelism, placement and
/// P2P annotations.
fn follow_edits(p: &mut Plan, jobs: &[OwnedJob], pending: &[&Wanted], d: &Desired) {
    let pending: BTreeSet<&str> = pending.iter().map(|i| i.image.as_str()).collect();
    let placement = d.placement_annotation();
    for j in jobs
        .iter()
        .filter(|j| !j.deleting && pending.contains(j.image.as_str()))
    {
        if j.pull_secrets != d.secrets {
            p.delete.push((
                j.name.clone(),
                format!(
                    "the pull secrets its new Pods carry changed to [{}]; it is made again with them",
                    d.secrets.join(", ")
                ),
            ));
        } else if j.parallelism != Some(IntOrString::Int(d.parallelism))
            || j.placement != placement
            || j.p2p != d.p2p
        {
            p.update.push(JobUpdate {
                name: j.name.clone(),
                parallelism: d.parallelism,
                placement: placement.clone(),
                p2p: d.p2p.clone(),
            });
        }
    }
}

/// Warnings about the workload's settings and ServiceAccount.
fn problems(s: &Settings, account: &Account, w: &Workload) -> Vec<JobEvent> {
    let mut out = Vec::new();
    if !s.problems.is_empty() {
        out.push(JobEvent::warning(REASON_INVALID, s.problems.join("; ")));
    }
    if let Account::Unknown(why) = account {
        out.push(JobEvent::warning(
            REASON_INVALID,
            format!(
                "the ServiceAccount of {} could not be read ({why}); its jobs pull without its pull secrets",
                w.describe()
            ),
        ));
    }
    out
}

/// Deletes every job not already going.
fn drop_all(p: &mut Plan, jobs: &[OwnedJob], why: &str) {
    for j in jobs.iter().filter(|j| !j.deleting) {
        p.delete.push((j.name.clone(), why.to_string()));
    }
}

/// Why pre-download is off for `w`, with the event that says so (if any);
/// None when it is on.
fn switched_off(
    w: &Workload,
    s: &Settings,
    allowed: bool,
) -> Option<(&'static str, Option<JobEvent>)> {
    match (&s.switch, allowed) {
        (Switch::Off, _) => Some(("pre-download is off for the workload", None)),
        (Switch::Odd(v), _) => Some((
            "pre-download is off for the workload",
            Some(JobEvent::warning(
                REASON_INVALID,
                format!(
                    "{}: {v:?} is neither \"true\" nor \"false\"; pre-download stays off",
                    names::ENABLED
                ),
            )),
        )),
        (Switch::On, false) => Some((
            "the controller does not allow pre-download in this namespace",
            Some(JobEvent::warning(
                REASON_REFUSED,
                format!(
                    "pre-download is not allowed in namespace {} (the controller's --predownload-namespaces); the new Pods pull their images themselves",
                    w.namespace
                ),
            )),
        )),
        (Switch::On, true) => None,
    }
}

/// Deletes the jobs whose image is no longer pending.
fn drop_done(p: &mut Plan, jobs: &[OwnedJob], pending: &[&Wanted]) {
    let pending_images: BTreeSet<&str> = pending.iter().map(|i| i.image.as_str()).collect();
    let why = if pending.is_empty() {
        "every Pod runs the template's images (the rollout is over)"
    } else {
        "its image is no longer pending"
    };
    for j in jobs.iter().filter(|j| !j.deleting) {
        if !pending_images.contains(j.image.as_str()) {
            p.delete.push((j.name.clone(), why.to_string()));
        }
    }
}

/// Makes a job for each pending image that has none. A job still being
/// deleted holds its name: its image is made again once it is gone (its
/// deletion wakes the workload).
fn create_missing(
    p: &mut Plan,
    w: &Workload,
    s: &Settings,
    d: &Desired,
    jobs: &[OwnedJob],
    pending: Vec<&Wanted>,
) {
    let have: BTreeSet<&str> = jobs.iter().map(|j| j.image.as_str()).collect();
    for image in pending
        .into_iter()
        .filter(|i| !have.contains(i.image.as_str()))
    {
        if let Err(e) = ImageRef::parse(&image.image) {
            p.events.push(JobEvent::warning(
                REASON_INVALID,
                format!("image {:?} is not pre-downloaded: {e}", image.image),
            ));
            continue;
        }
        let job = job_for(w, image, s, d);
        let onto = if d.placement.is_some() {
            "onto the nodes of its Pods and the nodes its new Pods may land on"
        } else {
            "onto the nodes of its Pods"
        };
        p.events.push(JobEvent::normal(
            REASON_CREATED,
            format!(
                "created ImagePullJob {} to pre-download {} {onto}",
                job.metadata.name.as_deref().unwrap_or_default(),
                image.image
            ),
        ));
        p.create.push(job);
    }
}

/// Whether the workload's selector (a usable one) matches `labels`: a
/// change of that Pod may change the workload's plan.
pub fn selects(w: &Workload, labels: &BTreeMap<String, String>) -> bool {
    selector_of(w).is_ok_and(|sel| sel.matches(labels))
}

/// The workload's Pod selector, refused when missing, empty (every Pod of
/// the namespace) or invalid.
fn selector_of(w: &Workload) -> Result<kube::core::Selector, String> {
    let Some(sel) = w.selector.clone() else {
        return Err(format!("{} has no spec.selector", w.describe()));
    };
    if sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && sel.match_expressions.as_ref().is_none_or(|m| m.is_empty())
    {
        return Err(format!(
            "{} has an empty spec.selector, which would select every Pod of the namespace",
            w.describe()
        ));
    }
    rollout::selector(sel).map_err(|e| format!("spec.selector: {e}"))
}

/// The active Pods the workload's selector matches.
fn selected_pods<'a>(w: &Workload, pods: &'a [PodView]) -> Result<Vec<&'a PodView>, String> {
    let sel = selector_of(w)?;
    Ok(pods
        .iter()
        .filter(|p| p.active && sel.matches(&p.labels))
        .collect())
}

/// The job pre-downloading `image` for `w`: onto the nodes of its Pods
/// (and where its new Pods may land), with the pull secrets its new Pods
/// carry and OpenKruise's settings for workload jobs, and no TTL (it goes
/// when the rollout is over, or with the workload).
fn job_for(w: &Workload, image: &Wanted, s: &Settings, d: &Desired) -> ImagePullJob {
    let mut annotations = BTreeMap::from([(names::WORKLOAD_ANNOTATION.to_string(), w.describe())]);
    if let Some(p) = d.placement_annotation() {
        annotations.insert(names::PLACEMENT_ANNOTATION.to_string(), p);
    }
    // The workload's P2P settings go with its jobs (`engine::p2p`).
    annotations.extend(d.p2p.clone());
    ImagePullJob {
        metadata: ObjectMeta {
            name: Some(job_name(w, &image.image)),
            namespace: Some(w.namespace.clone()),
            labels: Some(BTreeMap::from([(
                names::WORKLOAD_UID_LABEL.to_string(),
                w.uid.clone(),
            )])),
            annotations: Some(annotations),
            owner_references: Some(vec![w.owner_reference()]),
            ..Default::default()
        },
        spec: ImagePullJobSpec {
            image: image.image.clone(),
            template: ImagePullJobTemplate {
                pull_secrets: (!d.secrets.is_empty()).then(|| d.secrets.clone()),
                pod_selector: w.selector.clone(),
                parallelism: Some(IntOrString::Int(d.parallelism)),
                pull_policy: Some(PullPolicy {
                    timeout_seconds: Some(s.timeout_seconds),
                    backoff_limit: Some(settings::BACKOFF_LIMIT),
                }),
                completion_policy: Some(CompletionPolicy {
                    type_: Some(CompletionPolicyType::Always),
                    ..Default::default()
                }),
                image_pull_policy: image.always.then_some(ImagePullPolicy::Always),
                ..Default::default()
            },
        },
        status: None,
    }
}

/// `<workload, at most 40 characters>-<kind>-<hash of kind, name and image>`:
/// one name per workload and image, so a second create of the same job
/// fails as "already exists" instead of making a twin.
pub fn job_name(w: &Workload, image: &str) -> String {
    let kind = w.kind.map_or("w", |k| k.short());
    let mut base: String = w.name.chars().take(40).collect();
    while base.ends_with(['-', '.']) {
        base.pop();
    }
    let key = format!("{kind}/{}/{image}", w.name);
    let h = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{base}-{kind}-{:010x}", h & 0xff_ffff_ffff)
}

#[cfg(test)]
mod tests;
