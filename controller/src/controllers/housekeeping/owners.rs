//! "Does this owner still exist with this UID", answered from caches of the
//! three job kinds that own NodeImage tags and of ImageRemovalJobs, which
//! own removal entries.

use super::plan::{OwnerLookup, OwnerState};
use crate::cluster::watch::Synced;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use nodeimage_api::kruise::NodeImageSpec;
use nodeimage_api::{ImagePrePullJob, ImagePullJob, ImageRemovalJob, NodeUpgradeJob};

/// Whether a uid is that of a job that exists but does not decode (the
/// shared cache skips it, so its store does not hold it).
pub type Undecodable = std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// One job kind's shared cache, whether it has been listed, and its
/// skipped jobs.
pub struct JobCache<K: Resource<DynamicType = ()> + 'static> {
    /// Every job of the kind that decodes.
    pub store: Store<K>,
    /// Whether `store` has been listed.
    pub synced: Synced,
    /// Jobs of the kind that exist but do not decode: they still own
    /// their tags.
    pub undecodable: Undecodable,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> JobCache<K> {
    /// The state of the job `owner` refers to; `namespaced` kinds need the
    /// reference's namespace.
    fn state(&self, owner: &ObjectReference, namespaced: bool) -> OwnerState {
        if !self.synced.get() {
            return OwnerState::Unknown;
        }
        let Some(name) = owner.name.as_deref() else {
            return OwnerState::Unknown;
        };
        let key = match (namespaced, owner.namespace.as_deref()) {
            (true, Some(ns)) => ObjectRef::new(name).within(ns),
            (true, None) => return OwnerState::Unknown,
            (false, _) => ObjectRef::new(name),
        };
        match self.store.get(&key) {
            None if owner.uid.as_deref().is_some_and(|u| (self.undecodable)(u)) => {
                OwnerState::Exists
            }
            None => OwnerState::Gone,
            Some(job) => match owner.uid.as_deref() {
                Some(uid) if job.meta().uid.as_deref() != Some(uid) => OwnerState::Gone,
                _ => OwnerState::Exists,
            },
        }
    }
}

/// The caches of all owner kinds.
pub struct OwnerCaches {
    /// OpenKruise ImagePullJobs (namespaced).
    pub image_pull_jobs: JobCache<ImagePullJob>,
    /// KubeEdge ImagePrePullJobs (cluster-scoped).
    pub image_pre_pull_jobs: JobCache<ImagePrePullJob>,
    /// KubeEdge NodeUpgradeJobs (cluster-scoped).
    pub node_upgrade_jobs: JobCache<NodeUpgradeJob>,
    /// ImageRemovalJobs (cluster-scoped; never synced while the controller
    /// may not list them, so their entries are then kept).
    pub image_removal_jobs: JobCache<ImageRemovalJob>,
}

/// Whether `owner` names an object of `group`: true when the reference
/// carries no apiVersion (the kind alone decides then).
fn in_group(owner: &ObjectReference, group: &str) -> bool {
    match owner.api_version.as_deref() {
        Some(av) => av.split_once('/').map(|(g, _)| g) == Some(group),
        None => true,
    }
}

impl OwnerLookup for OwnerCaches {
    fn state(&self, owner: &ObjectReference) -> OwnerState {
        match owner.kind.as_deref() {
            Some("ImagePullJob") if in_group(owner, &ImagePullJob::group(&())) => {
                self.image_pull_jobs.state(owner, true)
            }
            Some("ImagePrePullJob") if in_group(owner, &ImagePrePullJob::group(&())) => {
                self.image_pre_pull_jobs.state(owner, false)
            }
            Some("NodeUpgradeJob") if in_group(owner, &NodeUpgradeJob::group(&())) => {
                self.node_upgrade_jobs.state(owner, false)
            }
            Some("ImageRemovalJob") if in_group(owner, &ImageRemovalJob::group(&())) => {
                self.image_removal_jobs.state(owner, false)
            }
            _ => OwnerState::Unknown,
        }
    }
}

/// Whether `spec` holds a removal entry of job incarnation `uid`, to map a
/// deleted ImageRemovalJob to the NodeImages holding its entries.
pub fn has_removal_uid(spec: &NodeImageSpec, uid: &str) -> bool {
    crate::nodeimage::removals::entry_in(spec, uid).is_some()
}

/// Whether any tag in `spec` names an owner with this UID, to map a deleted
/// job to the NodeImages holding its tags.
pub fn has_owner_uid(spec: &NodeImageSpec, uid: &str) -> bool {
    spec.images.iter().flatten().any(|(_, image)| {
        image.tags.iter().any(|t| {
            t.owner_references
                .iter()
                .flatten()
                .any(|o| o.uid.as_deref() == Some(uid))
        })
    })
}

#[cfg(test)]
mod tests;
