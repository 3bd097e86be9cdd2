use super::*;
use crate::controllers::predownload::workload::Kind;
use k8s_openapi::api::core::v1::{
    Container, ImageVolumeSource, LocalObjectReference, PodSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

fn container(image: &str, policy: Option<&str>) -> Container {
    Container {
        name: "c".into(),
        image: Some(image.into()),
        image_pull_policy: policy.map(str::to_string),
        ..Default::default()
    }
}

fn workload(images: &[&str], annotations: &[(&str, &str)]) -> Workload {
    Workload {
        kind: Some(Kind::Deployment),
        namespace: "team".into(),
        name: "web".into(),
        uid: "uid-web".into(),
        annotations: annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
            ..Default::default()
        }),
        pod_spec: Some(PodSpec {
            containers: images.iter().map(|i| container(i, None)).collect(),
            image_pull_secrets: Some(vec![LocalObjectReference {
                name: "regcred".into(),
            }]),
            ..Default::default()
        }),
        desired: 2,
        deleting: false,
    }
}

const ON: (&str, &str) = (names::ENABLED, "true");

fn pod(app: &str, images: &[&str], ready: bool) -> PodView {
    PodView {
        labels: BTreeMap::from([("app".into(), app.into())]),
        active: true,
        ready,
        images: images.iter().map(|s| s.to_string()).collect(),
    }
}

fn owned(w: &Workload, image: &str) -> OwnedJob {
    OwnedJob {
        name: job_name(w, image),
        image: image.into(),
        deleting: false,
    }
}

fn created(p: &Plan) -> Vec<String> {
    p.create.iter().map(|j| j.spec.image.clone()).collect()
}

fn deleted(p: &Plan) -> Vec<String> {
    p.delete.iter().map(|(n, _)| n.clone()).collect()
}

fn reasons(p: &Plan) -> Vec<&'static str> {
    p.events.iter().map(|e| e.reason).collect()
}

#[test]
fn a_new_image_that_pods_do_not_run_gets_one_job() {
    let w = workload(&["reg/app:v2", "reg/side:1"], &[ON]);
    let pods = [
        pod("web", &["reg/app:v1", "reg/side:1"], true),
        pod("web", &["reg/app:v1", "reg/side:1"], true),
        pod("other", &["reg/x:1"], true),
    ];
    let p = plan(&w, &pods, &[], true);
    assert_eq!(created(&p), ["reg/app:v2"]);
    assert_eq!(reasons(&p), [REASON_CREATED]);
    let j = &p.create[0];
    let t = &j.spec.template;
    assert_eq!(t.pod_selector, w.selector);
    assert_eq!(t.pull_secrets, Some(vec!["regcred".to_string()]));
    assert_eq!(t.parallelism, Some(IntOrString::Int(1)));
    let pp = t.pull_policy.clone().unwrap_or_default();
    assert_eq!((pp.timeout_seconds, pp.backoff_limit), (Some(300), Some(1)));
    let cp = t.completion_policy.clone().unwrap_or_default();
    assert_eq!(cp.type_, Some(CompletionPolicyType::Always));
    assert_eq!(cp.ttl_seconds_after_finished, None);
    assert_eq!(t.image_pull_policy, None);
    let owner = &j.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Deployment", "uid-web")
    );
    assert_eq!(
        j.metadata.labels.clone().unwrap_or_default()[names::WORKLOAD_UID_LABEL],
        "uid-web"
    );
    assert_eq!(j.metadata.namespace.as_deref(), Some("team"));
}

#[test]
fn switch_and_policy_table() {
    // (annotations, allowed, jobs created, events)
    let cases: [(&[(&str, &str)], bool, usize, &[&str]); 6] = [
        (&[], true, 0, &[]),
        (&[(names::ENABLED, "false")], true, 0, &[]),
        (&[(names::ENABLED, "TRUE")], true, 1, &[REASON_CREATED]),
        (&[(names::ENABLED, "yes")], true, 0, &[REASON_INVALID]),
        (&[ON], false, 0, &[REASON_REFUSED]),
        (
            &[ON, (names::PARALLELISM, "many")],
            true,
            1,
            &[REASON_INVALID, REASON_CREATED],
        ),
    ];
    for (annotations, allowed, n, events) in cases {
        let w = workload(&["reg/app:v2"], annotations);
        let p = plan(&w, &[pod("web", &["reg/app:v1"], true)], &[], allowed);
        assert_eq!(p.create.len(), n, "{annotations:?} allowed={allowed}");
        assert_eq!(reasons(&p), events, "{annotations:?} allowed={allowed}");
    }
}

#[test]
fn annotations_set_parallelism_and_timeout() {
    let w = workload(
        &["reg/app:v2"],
        &[
            ON,
            (names::PARALLELISM, "50"),
            (names::TIMEOUT_SECONDS, "900"),
        ],
    );
    let p = plan(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
    let t = &p.create[0].spec.template;
    assert_eq!(t.parallelism, Some(IntOrString::Int(50)));
    assert_eq!(
        t.pull_policy.clone().unwrap_or_default().timeout_seconds,
        Some(900)
    );
}

#[test]
fn the_rollout_over_removes_the_jobs_and_creates_none() {
    let w = workload(&["reg/app:v2"], &[ON]);
    let pods = [
        pod("web", &["reg/app:v2"], true),
        pod("web", &["reg/app:v2"], false),
    ];
    let jobs = [owned(&w, "reg/app:v2")];
    let p = plan(&w, &pods, &jobs, true);
    assert!(p.create.is_empty());
    assert_eq!(deleted(&p), [jobs[0].name.clone()]);
    assert!(p.delete[0].1.contains("rollout is over"));
}

#[test]
fn an_existing_job_is_not_made_twice_and_a_replaced_image_loses_its_job() {
    let w = workload(&["reg/app:v3"], &[ON]);
    let pods = [pod("web", &["reg/app:v1"], true)];
    let jobs = [owned(&w, "reg/app:v2"), owned(&w, "reg/app:v3")];
    let p = plan(&w, &pods, &jobs, true);
    assert!(p.create.is_empty());
    assert_eq!(deleted(&p), [jobs[0].name.clone()]);
}

#[test]
fn a_job_being_deleted_is_neither_deleted_again_nor_made_twice() {
    let w = workload(&["reg/app:v2"], &[ON]);
    let mut off = w.clone();
    off.annotations.clear();
    let mut going = owned(&w, "reg/app:v2");
    going.deleting = true;
    let (old, new) = (
        pod("web", &["reg/app:v1"], true),
        pod("web", &["reg/app:v2"], true),
    );
    // (workload, its Pods): the rollout over, the image still pending, pre-download off.
    for (w, pods) in [(&w, &new), (&w, &old), (&off, &old)] {
        let p = plan(
            w,
            std::slice::from_ref(pods),
            std::slice::from_ref(&going),
            true,
        );
        assert!(p.delete.is_empty(), "{pods:?}: {:?}", p.delete);
        assert!(p.create.is_empty() && p.events.is_empty(), "{pods:?}");
    }
}

#[test]
fn off_refused_or_deleting_removes_every_job() {
    let base = workload(&["reg/app:v2"], &[ON]);
    let jobs = [owned(&base, "reg/app:v2")];
    let pods = [pod("web", &["reg/app:v1"], true)];
    let mut off = base.clone();
    off.annotations.clear();
    let mut deleting = base.clone();
    deleting.deleting = true;
    for (w, allowed) in [(&off, true), (&base, false), (&deleting, true)] {
        let p = plan(w, &pods, &jobs, allowed);
        assert_eq!(deleted(&p), [jobs[0].name.clone()], "{w:?} {allowed}");
        assert!(p.create.is_empty());
    }
}

#[test]
fn no_pods_means_nothing_to_pre_download() {
    let w = workload(&["reg/app:v2"], &[ON]);
    let p = plan(&w, &[pod("other", &["reg/app:v1"], true)], &[], true);
    assert!(p.create.is_empty() && p.events.is_empty());
    let mut gone = pod("web", &["reg/app:v1"], true);
    gone.active = false;
    assert!(plan(&w, &[gone], &[], true).create.is_empty());
}

#[test]
fn min_updated_ready_pods_holds_until_enough_new_pods_are_ready() {
    // desired 2: "1" needs one, "50%" needs one, "100%" needs two.
    let cases = [
        ("1", 0, true),
        ("1", 1, false),
        ("50%", 1, false),
        ("100%", 1, true),
        ("100%", 2, false),
    ];
    for (min, ready_new, waits) in cases {
        let w = workload(&["reg/app:v2"], &[ON, (names::MIN_UPDATED_READY_PODS, min)]);
        let mut pods = vec![pod("web", &["reg/app:v1"], true)];
        pods.extend((0..ready_new).map(|_| pod("web", &["reg/app:v2"], true)));
        pods.push(pod("web", &["reg/app:v2"], false));
        let p = plan(&w, &pods, &[], true);
        assert_eq!(p.waiting, waits, "min {min} with {ready_new} ready");
        assert_eq!(
            p.create.is_empty(),
            waits,
            "min {min} with {ready_new} ready"
        );
    }
}

#[test]
fn init_containers_sidecars_and_image_volumes_count() {
    let mut w = workload(&["reg/app:v1"], &[ON]);
    if let Some(spec) = w.pod_spec.as_mut() {
        spec.init_containers = Some(vec![
            container("reg/init:2", None),
            container("reg/never:1", Some("Never")),
        ]);
        spec.volumes = Some(vec![Volume {
            name: "weights".into(),
            image: Some(ImageVolumeSource {
                reference: Some("reg/model:7".into()),
                pull_policy: Some("Always".into()),
            }),
            ..Default::default()
        }]);
    }
    let p = plan(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
    assert_eq!(created(&p), ["reg/init:2", "reg/model:7"]);
    let always: Vec<_> = p
        .create
        .iter()
        .map(|j| j.spec.template.image_pull_policy)
        .collect();
    assert_eq!(always, [None, Some(ImagePullPolicy::Always)]);
}

#[test]
fn an_invalid_reference_is_reported_and_the_others_go_on() {
    let w = workload(&["reg/app:v2", "UPPER/Case::bad"], &[ON]);
    let p = plan(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
    assert_eq!(created(&p), ["reg/app:v2"]);
    assert_eq!(reasons(&p), [REASON_CREATED, REASON_INVALID]);
}

#[test]
fn a_missing_or_empty_selector_is_reported_not_acted_on() {
    let mut w = workload(&["reg/app:v2"], &[ON]);
    w.selector = Some(LabelSelector::default());
    let p = plan(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
    assert!(p.create.is_empty());
    assert_eq!(reasons(&p), [REASON_INVALID]);
    w.selector = None;
    assert_eq!(reasons(&plan(&w, &[], &[], true)), [REASON_INVALID]);
}

#[test]
fn job_names_are_short_valid_and_distinct_per_kind_and_image() {
    let mut w = workload(&["a"], &[ON]);
    w.name = format!("{}-.x", "n".repeat(39));
    let a = job_name(&w, "reg/app:v1");
    assert!(
        a.len() <= 63 && !a.contains("-.") && !a.contains(".-"),
        "{a}"
    );
    assert_ne!(a, job_name(&w, "reg/app:v2"));
    let mut s = w.clone();
    s.kind = Some(Kind::StatefulSet);
    assert_ne!(a, job_name(&s, "reg/app:v1"));
    assert_eq!(a, job_name(&w, "reg/app:v1"));
}

#[test]
fn default_pull_policies_follow_kubelet() {
    let spec = PodSpec {
        containers: vec![
            container("reg/a", None),
            container("reg/b:latest", None),
            container("reg:5000/c:1", None),
            container(
                "reg/d@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                None,
            ),
        ],
        ..Default::default()
    };
    let always: Vec<bool> = images::wanted(&spec).iter().map(|w| w.always).collect();
    assert_eq!(always, [true, true, false, false]);
}

#[test]
fn a_job_being_deleted_is_not_deleted_again_nor_made_twice() {
    let w = workload(&["reg/app:v2"], &[ON]);
    let mut going = owned(&w, "reg/app:v2");
    going.deleting = true;
    // Rollout over: nothing to delete again.
    let p = plan(
        &w,
        &[pod("web", &["reg/app:v2"], true)],
        &[going.clone()],
        true,
    );
    assert!(p.delete.is_empty() && p.create.is_empty());
    // Pending again (a quick rollback): wait until it is gone.
    let p = plan(&w, &[pod("web", &["reg/app:v1"], true)], &[going], true);
    assert!(p.delete.is_empty() && p.create.is_empty());
}
