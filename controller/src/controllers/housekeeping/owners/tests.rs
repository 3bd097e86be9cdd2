use super::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use nodeimage_api::kruise::{ImageSpec, ImageTagSpec};

fn meta(ns: Option<&str>, name: &str, uid: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: ns.map(Into::into),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

fn pull_job(ns: &str, name: &str, uid: &str) -> ImagePullJob {
    let spec = nodeimage_api::kruise::ImagePullJobSpec {
        image: "nginx".into(),
        template: Default::default(),
    };
    let mut j = ImagePullJob::new(name, spec);
    j.metadata = meta(Some(ns), name, uid);
    j
}

fn pre_pull_job(name: &str, uid: &str) -> ImagePrePullJob {
    let mut j = ImagePrePullJob::new(name, Default::default());
    j.metadata = meta(None, name, uid);
    j
}

fn removal_job(name: &str, uid: &str) -> ImageRemovalJob {
    let spec = serde_json::from_value(serde_json::json!({"images": ["r.example/app:v1"]}))
        .expect("an ImageRemovalJob spec");
    let mut j = ImageRemovalJob::new(name, spec);
    j.metadata = meta(None, name, uid);
    j
}

/// A cache of `jobs`; `undecodable` is the uid of a job that exists but
/// does not decode.
fn cache<K: Resource<DynamicType = ()> + Clone + 'static>(
    jobs: Vec<K>,
    synced: bool,
    undecodable: &'static str,
) -> JobCache<K> {
    let mut writer = Writer::<K>::default();
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
        undecodable: std::sync::Arc::new(move |uid| uid == undecodable),
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
        image_pull_jobs: cache(vec![pull_job("ns", "pull", "u1")], true, "u5"),
        image_pre_pull_jobs: cache(vec![pre_pull_job("prepull", "u2")], true, ""),
        node_upgrade_jobs: cache(vec![], false, ""),
        image_removal_jobs: cache(vec![removal_job("cve", "u6")], true, ""),
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
            "stored but undecodable: still an owner",
            owner(None, "ImagePullJob", Some("ns"), "broken", "u5"),
            Exists,
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
            "removal job exists",
            owner(
                Some("nodeimage.dev/v1alpha1"),
                "ImageRemovalJob",
                None,
                "cve",
                "u6",
            ),
            Exists,
        ),
        (
            "removal job gone",
            owner(
                Some("nodeimage.dev/v1alpha1"),
                "ImageRemovalJob",
                None,
                "old",
                "u7",
            ),
            Gone,
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
        "nginx".into(),
        ImageSpec {
            tags: vec![
                ImageTagSpec {
                    tag: "1".into(),
                    ..Default::default()
                },
                ImageTagSpec {
                    tag: "2".into(),
                    owner_references: Some(
                        vec![owner(None, "ImagePullJob", Some("ns"), "j", "u1")].into(),
                    ),
                    ..Default::default()
                },
            ],
            ..Default::default()
        },
    );
    let spec = NodeImageSpec {
        images: Some(images),
        removals: None,
    };
    assert!(has_owner_uid(&spec, "u1"));
    assert!(!has_owner_uid(&spec, "u2"));
    assert!(!has_owner_uid(&NodeImageSpec::default(), "u1"));
}
