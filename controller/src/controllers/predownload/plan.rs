//! What a workload annotated for pre-download needs next: one ImagePullJob
//! per image of its pod template that some of its Pods do not run yet,
//! onto the nodes running its Pods (its selector as the job's podSelector);
//! none once every Pod runs the template's images (the rollout is over),
//! when the annotation goes, or when the platform team does not allow its
//! namespace. Pure.

use super::settings::{self, Settings, Switch};
use super::workload::Workload;
use crate::engine::jobevents::JobEvent;
use crate::engine::podimages::{self as images, Wanted};
use crate::engine::rollout;
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
}

/// A pre-download job the workload owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedJob {
    /// Its name.
    pub name: String,
    /// Its image.
    pub image: String,
    /// Being deleted already (its finalizer is releasing its entries, and
    /// its updates wake the workload): the plan does not delete it again,
    /// but counts it as made (no twin).
    pub deleting: bool,
}

/// What to do.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Jobs to create.
    pub create: Vec<ImagePullJob>,
    /// Jobs to delete, with why (for the log and the event).
    pub delete: Vec<(String, String)>,
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

/// Decides the workload's pre-download jobs. `allowed`: whether the
/// platform team lets this namespace's workloads pre-download.
pub fn plan(w: &Workload, pods: &[PodView], jobs: &[OwnedJob], allowed: bool) -> Plan {
    let mut p = Plan::default();
    let s = settings::read(&w.annotations);
    let drop_all = |p: &mut Plan, why: &str| {
        for j in jobs.iter().filter(|j| !j.deleting) {
            p.delete.push((j.name.clone(), why.to_string()));
        }
    };
    if w.deleting {
        drop_all(&mut p, "the workload is being deleted");
        return p;
    }
    let wanted = w.pod_spec.as_ref().map(images::wanted).unwrap_or_default();
    let selected = match selected_pods(w, pods) {
        Ok(s) => s,
        Err(e) => {
            drop_all(&mut p, "its selector is invalid");
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
    match (&s.switch, allowed) {
        (Switch::Off, _) => {
            drop_all(&mut p, "pre-download is off for the workload");
            return p;
        }
        (Switch::Odd(v), _) => {
            drop_all(&mut p, "pre-download is off for the workload");
            if !pending.is_empty() {
                p.events.push(JobEvent::warning(
                    REASON_INVALID,
                    format!(
                        "{}: {v:?} is neither \"true\" nor \"false\"; pre-download stays off",
                        names::ENABLED
                    ),
                ));
            }
            return p;
        }
        (Switch::On, false) => {
            drop_all(
                &mut p,
                "the controller does not allow pre-download in this namespace",
            );
            if !pending.is_empty() {
                p.events.push(JobEvent::warning(
                    REASON_REFUSED,
                    format!(
                        "pre-download is not allowed in namespace {} (the controller's --predownload-namespaces); the new Pods pull their images themselves",
                        w.namespace
                    ),
                ));
            }
            return p;
        }
        (Switch::On, true) => {}
    }
    let pending_images: BTreeSet<&str> = pending.iter().map(|i| i.image.as_str()).collect();
    for j in jobs.iter().filter(|j| !j.deleting) {
        if !pending_images.contains(j.image.as_str()) {
            let why = if pending.is_empty() {
                "every Pod runs the template's images (the rollout is over)"
            } else {
                "its image is no longer pending"
            };
            p.delete.push((j.name.clone(), why.to_string()));
        }
    }
    if pending.is_empty() {
        return p;
    }
    if !s.problems.is_empty() {
        p.events
            .push(JobEvent::warning(REASON_INVALID, s.problems.join("; ")));
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
        let job = job_for(w, image, &s);
        p.events.push(JobEvent::normal(
            REASON_CREATED,
            format!(
                "created ImagePullJob {} to pre-download {} onto the nodes of its Pods",
                job.metadata.name.as_deref().unwrap_or_default(),
                image.image
            ),
        ));
        p.create.push(job);
    }
    p
}

/// The active Pods the workload's selector matches.
fn selected_pods<'a>(w: &Workload, pods: &'a [PodView]) -> Result<Vec<&'a PodView>, String> {
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
    let sel = rollout::selector(sel).map_err(|e| format!("spec.selector: {e}"))?;
    Ok(pods
        .iter()
        .filter(|p| p.active && sel.matches(&p.labels))
        .collect())
}

/// The job pre-downloading `image` for `w`: onto the nodes of its Pods,
/// with its pull secrets and OpenKruise's settings for workload jobs, and
/// no TTL (it goes when the rollout is over, or with the workload).
pub fn job_for(w: &Workload, image: &Wanted, s: &Settings) -> ImagePullJob {
    let pull_secrets: Vec<String> = w
        .pod_spec
        .iter()
        .flat_map(|spec| spec.image_pull_secrets.iter().flatten())
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    ImagePullJob {
        metadata: ObjectMeta {
            name: Some(job_name(w, &image.image)),
            namespace: Some(w.namespace.clone()),
            labels: Some(BTreeMap::from([(
                names::WORKLOAD_UID_LABEL.to_string(),
                w.uid.clone(),
            )])),
            annotations: Some(BTreeMap::from([(
                names::WORKLOAD_ANNOTATION.to_string(),
                w.describe(),
            )])),
            owner_references: Some(vec![w.owner_reference()]),
            ..Default::default()
        },
        spec: ImagePullJobSpec {
            image: image.image.clone(),
            template: ImagePullJobTemplate {
                pull_secrets: (!pull_secrets.is_empty()).then_some(pull_secrets),
                pod_selector: w.selector.clone(),
                parallelism: Some(IntOrString::Int(s.parallelism)),
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
