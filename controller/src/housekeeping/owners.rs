//! "Does this owner still exist with this UID", answered from caches of the
//! three job kinds that own NodeImage tags.

use super::plan::{OwnerLookup, OwnerState};
use crate::watch::Synced;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store};
use nodeimage_api::kruise::NodeImageSpec;
use nodeimage_api::{ImagePrePullJob, ImagePullJob, NodeUpgradeJob};

/// A cache of one job kind's metadata and whether it has been listed.
pub struct JobCache<K: Resource<DynamicType = ()> + 'static> {
    /// Metadata of every job of the kind.
    pub store: Store<PartialObjectMeta<K>>,
    /// Whether `store` has been listed.
    pub synced: Synced,
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
            None => OwnerState::Gone,
            Some(job) => match owner.uid.as_deref() {
                Some(uid) if job.metadata.uid.as_deref() != Some(uid) => OwnerState::Gone,
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
            _ => OwnerState::Unknown,
        }
    }
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
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::api::PartialObjectMetaExt;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;
    use nodeimage_api::kruise::{ImageSpec, ImageTagSpec};

    fn job_meta<K: Resource<DynamicType = ()>>(
        ns: Option<&str>,
        name: &str,
        uid: &str,
    ) -> PartialObjectMeta<K> {
        ObjectMeta {
            name: Some(name.into()),
            namespace: ns.map(Into::into),
            uid: Some(uid.into()),
            ..Default::default()
        }
        .into_response_partial()
    }

    fn cache<K: Resource<DynamicType = ()> + Clone + 'static>(
        jobs: Vec<PartialObjectMeta<K>>,
        synced: bool,
    ) -> JobCache<K> {
        let mut writer = Writer::<PartialObjectMeta<K>>::default();
        writer.apply_watcher_event(&watcher::Event::Init);
        for j in jobs {
            writer.apply_watcher_event(&watcher::Event::InitApply(j));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        JobCache {
            store: writer.as_reader(),
            synced: if synced {
                Synced::done()
            } else {
                Synced::default()
            },
        }
    }

    fn owner(
        api_version: Option<&str>,
        kind: &str,
        ns: Option<&str>,
        name: &str,
        uid: &str,
    ) -> ObjectReference {
        ObjectReference {
            api_version: api_version.map(Into::into),
            kind: Some(kind.into()),
            namespace: ns.map(Into::into),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[test]
    fn owner_state_table() {
        let caches = OwnerCaches {
            image_pull_jobs: cache(vec![job_meta(Some("ns"), "pull", "u1")], true),
            image_pre_pull_jobs: cache(vec![job_meta(None, "prepull", "u2")], true),
            node_upgrade_jobs: cache(vec![], false),
        };
        use OwnerState::*;
        let cases = [
            (
                "pull job exists",
                owner(None, "ImagePullJob", Some("ns"), "pull", "u1"),
                Exists,
            ),
            (
                "with matching apiVersion",
                owner(
                    Some("apps.kruise.io/v1alpha1"),
                    "ImagePullJob",
                    Some("ns"),
                    "pull",
                    "u1",
                ),
                Exists,
            ),
            (
                "recreated with another uid",
                owner(None, "ImagePullJob", Some("ns"), "pull", "u9"),
                Gone,
            ),
            (
                "other namespace",
                owner(None, "ImagePullJob", Some("other"), "pull", "u1"),
                Gone,
            ),
            (
                "missing",
                owner(None, "ImagePullJob", Some("ns"), "nope", "u1"),
                Gone,
            ),
            (
                "namespaced kind without namespace",
                owner(None, "ImagePullJob", None, "pull", "u1"),
                Unknown,
            ),
            (
                "cluster-scoped exists",
                owner(None, "ImagePrePullJob", None, "prepull", "u2"),
                Exists,
            ),
            (
                "cluster-scoped missing",
                owner(None, "ImagePrePullJob", None, "x", "u2"),
                Gone,
            ),
            (
                "store not synced",
                owner(None, "NodeUpgradeJob", None, "x", "u3"),
                Unknown,
            ),
            (
                "unknown kind",
                owner(None, "Deployment", Some("ns"), "d", "u4"),
                Unknown,
            ),
            (
                "known kind of another group",
                owner(
                    Some("example.com/v1"),
                    "ImagePullJob",
                    Some("ns"),
                    "nope",
                    "u1",
                ),
                Unknown,
            ),
        ];
        for (name, o, want) in cases {
            assert_eq!(caches.state(&o), want, "{name}");
        }
    }

    #[test]
    fn has_owner_uid_finds_any_tag() {
        let mut images = std::collections::BTreeMap::new();
        images.insert(
            "nginx".to_string(),
            ImageSpec {
                tags: vec![
                    ImageTagSpec {
                        tag: "1".into(),
                        ..Default::default()
                    },
                    ImageTagSpec {
                        tag: "2".into(),
                        owner_references: Some(vec![owner(
                            None,
                            "ImagePullJob",
                            Some("ns"),
                            "j",
                            "u1",
                        )]),
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
        );
        let spec = NodeImageSpec {
            images: Some(images),
        };
        assert!(has_owner_uid(&spec, "u1"));
        assert!(!has_owner_uid(&spec, "u2"));
        assert!(!has_owner_uid(&NodeImageSpec::default(), "u1"));
    }
}
