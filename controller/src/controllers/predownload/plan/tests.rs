use super::*;
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
        node: None,
    }
}

/// A job the workload owns, in step with it (as the plan would make it
/// with no Nodes known).
fn owned(w: &Workload, image: &str) -> OwnedJob {
    OwnedJob {
        name: job_name(w, image),
        image: image.into(),
        deleting: false,
        pull_secrets: vec!["regcred".into()],
        parallelism: Some(IntOrString::Int(1)),
        placement: w
            .pod_spec
            .as_ref()
            .map(|s| Placement::of(s, 0).to_annotation()),
        p2p: BTreeMap::new(),
    }
}

/// The plan with no ServiceAccount read, no Nodes and no extra nodes.
fn run(w: &Workload, pods: &[PodView], jobs: &[OwnedJob], allowed: bool) -> Plan {
    plan(&Inputs {
        workload: w,
        pods,
        jobs,
        allowed,
        account: &Account::Unread,
        nodes: &[],
        max_extra_nodes: 0,
    })
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
    let p = run(&w, &pods, &[], true);
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
        let p = run(&w, &[pod("web", &["reg/app:v1"], true)], &[], allowed);
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
    let p = run(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
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
    let p = run(&w, &pods, &jobs, true);
    assert!(p.create.is_empty());
    assert_eq!(deleted(&p), [jobs[0].name.clone()]);
    assert!(p.delete[0].1.contains("rollout is over"));
}

#[test]
fn an_existing_job_is_not_made_twice_and_a_replaced_image_loses_its_job() {
    let w = workload(&["reg/app:v3"], &[ON]);
    let pods = [pod("web", &["reg/app:v1"], true)];
    let jobs = [owned(&w, "reg/app:v2"), owned(&w, "reg/app:v3")];
    let p = run(&w, &pods, &jobs, true);
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
        let p = run(
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
        let p = run(w, &pods, &jobs, allowed);
        assert_eq!(deleted(&p), [jobs[0].name.clone()], "{w:?} {allowed}");
        assert!(p.create.is_empty());
    }
}

#[test]
fn no_pods_means_nothing_to_pre_download() {
    let w = workload(&["reg/app:v2"], &[ON]);
    let p = run(&w, &[pod("other", &["reg/app:v1"], true)], &[], true);
    assert!(p.create.is_empty() && p.events.is_empty());
    let mut gone = pod("web", &["reg/app:v1"], true);
    gone.active = false;
    assert!(run(&w, &[gone], &[], true).create.is_empty());
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
        let p = run(&w, &pods, &[], true);
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
    let p = run(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
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
    let p = run(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
    assert_eq!(created(&p), ["reg/app:v2"]);
    assert_eq!(reasons(&p), [REASON_CREATED, REASON_INVALID]);
}

#[test]
fn a_missing_or_empty_selector_is_reported_not_acted_on() {
    let mut w = workload(&["reg/app:v2"], &[ON]);
    w.selector = Some(LabelSelector::default());
    let p = run(&w, &[pod("web", &["reg/app:v1"], true)], &[], true);
    assert!(p.create.is_empty());
    assert_eq!(reasons(&p), [REASON_INVALID]);
    w.selector = None;
    assert_eq!(reasons(&run(&w, &[], &[], true)), [REASON_INVALID]);
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
    let p = run(
        &w,
        &[pod("web", &["reg/app:v2"], true)],
        &[going.clone()],
        true,
    );
    assert!(p.delete.is_empty() && p.create.is_empty());
    // Pending again (a quick rollback): wait until it is gone.
    let p = run(&w, &[pod("web", &["reg/app:v1"], true)], &[going], true);
    assert!(p.delete.is_empty() && p.create.is_empty());
}

fn ready_node(name: &str, labels: &[(&str, &str)]) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": labels.iter().copied().collect::<BTreeMap<_, _>>()},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("a Node"),
    )
}

fn on_node(mut p: PodView, node: &str) -> PodView {
    p.node = Some(node.into());
    p
}

#[test]
fn the_new_pods_pull_secrets_are_the_templates_else_the_service_accounts() {
    let mut bare = workload(&["reg/app:v2"], &[ON]);
    if let Some(s) = bare.pod_spec.as_mut() {
        s.image_pull_secrets = None;
    }
    let pods = [pod("web", &["reg/app:v1"], true)];
    let with = |w: &Workload, account: &Account| {
        let p = plan(&Inputs {
            workload: w,
            pods: &pods,
            jobs: &[],
            allowed: true,
            account,
            nodes: &[],
            max_extra_nodes: 0,
        });
        let secrets = p.create[0].spec.template.pull_secrets.clone();
        (secrets, reasons(&p))
    };
    let sa = Account::Secrets(vec!["from-sa".into()]);
    let own = workload(&["reg/app:v2"], &[ON]);
    let no_secrets = Account::Secrets(vec![]);
    let unknown = Account::Unknown("ServiceAccount team/x not found".into());
    // (workload, account, the job's pullSecrets, events)
    let cases: Vec<(&str, &Workload, &Account, Option<Vec<String>>, Vec<&str>)> = vec![
        (
            "template names its own: the account's are not added (as the API server does)",
            &own,
            &sa,
            Some(vec!["regcred".into()]),
            vec![REASON_CREATED],
        ),
        (
            "template names none: the account's",
            &bare,
            &sa,
            Some(vec!["from-sa".into()]),
            vec![REASON_CREATED],
        ),
        (
            "an account without pull secrets",
            &bare,
            &no_secrets,
            None,
            vec![REASON_CREATED],
        ),
        (
            "an account that cannot be read is said, and the job goes on without",
            &bare,
            &unknown,
            None,
            vec![REASON_INVALID, REASON_CREATED],
        ),
    ];
    for (name, w, account, secrets, events) in cases {
        assert_eq!(with(w, account), (secrets, events), "{name}");
    }
}

#[test]
fn a_deployment_pulls_where_its_new_pods_may_land_and_a_daemonset_on_its_own_nodes() {
    let mut w = workload(&["reg/app:v2"], &[ON]);
    if let Some(s) = w.pod_spec.as_mut() {
        s.node_selector = Some([("pool".to_string(), "web".to_string())].into());
    }
    let nodes = [
        ready_node("n1", &[("pool", "web")]),
        ready_node("n2", &[("pool", "web")]),
        ready_node("n3", &[("pool", "web")]),
        ready_node("n4", &[("pool", "db")]),
        ready_node("n5", &[("pool", "web")]),
    ];
    let pods = [on_node(pod("web", &["reg/app:v1"], true), "n1")];
    let run_with = |w: &Workload, max: u32| {
        plan(&Inputs {
            workload: w,
            pods: &pods,
            jobs: &[],
            allowed: true,
            account: &Account::Unread,
            nodes: &nodes,
            max_extra_nodes: max,
        })
    };
    let p = run_with(&w, 100);
    let job = &p.create[0];
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    let placed = Placement::from_annotation(&annotations[names::PLACEMENT_ANNOTATION])
        .expect("the placement annotation");
    assert_eq!(
        placed.node_selector,
        [("pool".to_string(), "web".to_string())].into()
    );
    assert_eq!(placed.max_extra_nodes, 100);
    // n1 (its Pod) and n2, n3, n5 (the pool): 4 nodes, half pull at once.
    assert_eq!(job.spec.template.parallelism, Some(IntOrString::Int(2)));
    assert!(p.events[0].note.contains("may land"), "{:?}", p.events);
    // Bounded: one extra node, so 2 nodes, and half of them is 1.
    assert_eq!(
        run_with(&w, 1).create[0].spec.template.parallelism,
        Some(IntOrString::Int(1))
    );
    let mut ds = w.clone();
    ds.kind = Some(Kind::DaemonSet);
    let job = &run_with(&ds, 100).create[0];
    let annotations = job.metadata.annotations.clone().unwrap_or_default();
    assert!(!annotations.contains_key(names::PLACEMENT_ANNOTATION));
    assert_eq!(job.spec.template.parallelism, Some(IntOrString::Int(1)));
}

#[test]
fn parallelism_is_a_count_or_a_percentage_of_the_jobs_nodes() {
    use crate::controllers::predownload::settings::Parallelism;
    // (annotation, nodes of the job, parallelism, a warning)
    let cases = [
        (None, 10, 5, false),
        (None, 1, 1, false),
        (None, 0, 1, false),
        (Some("3"), 10, 3, false),
        (Some("25%"), 10, 3, false),
        (Some("100%"), 7, 7, false),
        (Some("0%"), 10, 5, true),
        (Some("101%"), 10, 5, true),
        (Some("0"), 10, 5, true),
        (Some("x%"), 10, 5, true),
    ];
    for (value, nodes, want, warned) in cases {
        let mut a = BTreeMap::from([(ON.0.to_string(), ON.1.to_string())]);
        if let Some(v) = value {
            a.insert(names::PARALLELISM.to_string(), v.to_string());
        }
        let s = settings::read(&a);
        assert_eq!(s.parallelism.of(nodes), want, "{value:?} of {nodes}");
        assert_eq!(!s.problems.is_empty(), warned, "{value:?}");
    }
    assert_eq!(Parallelism::Percent(50).of(usize::MAX), i32::MAX);
}

#[test]
fn live_jobs_follow_the_workloads_edits() {
    let w = workload(&["reg/app:v2"], &[ON]);
    let pods = [pod("web", &["reg/app:v1"], true)];
    let in_step = owned(&w, "reg/app:v2");
    let p = run(&w, &pods, std::slice::from_ref(&in_step), true);
    assert!(
        p.create.is_empty() && p.delete.is_empty() && p.update.is_empty() && p.events.is_empty()
    );

    // The template gains another pull secret: the job is made again.
    let mut more = w.clone();
    if let Some(s) = more.pod_spec.as_mut() {
        s.image_pull_secrets = Some(vec![
            LocalObjectReference {
                name: "regcred".into(),
            },
            LocalObjectReference {
                name: "mirror".into(),
            },
        ]);
    }
    let p = run(&more, &pods, std::slice::from_ref(&in_step), true);
    assert_eq!(deleted(&p), std::slice::from_ref(&in_step.name));
    assert!(p.delete[0].1.contains("regcred, mirror"), "{:?}", p.delete);
    assert!(p.create.is_empty(), "made again once the old one is gone");

    // Parallelism and placement are patched in place, and a bad
    // annotation is said with the change, once.
    let mut edited = w.clone();
    edited
        .annotations
        .insert(names::PARALLELISM.into(), "4".into());
    if let Some(s) = edited.pod_spec.as_mut() {
        s.node_selector = Some([("pool".to_string(), "b".to_string())].into());
    }
    let p = run(&edited, &pods, std::slice::from_ref(&in_step), true);
    assert_eq!(p.update.len(), 1);
    assert_eq!(p.update[0].parallelism, 4);
    let placed = Placement::from_annotation(p.update[0].placement.as_deref().unwrap_or_default());
    assert_eq!(
        placed.map(|p| p.node_selector),
        Ok([("pool".to_string(), "b".to_string())].into())
    );
    // P2P annotations added to the workload reach its live job.
    let mut seeded = w.clone();
    let seeds = nodeimage_api::p2p::SEEDS.to_string();
    seeded.annotations.insert(seeds.clone(), "2".into());
    let p = run(&seeded, &pods, std::slice::from_ref(&in_step), true);
    assert_eq!(p.update.len(), 1, "{:?}", p.update);
    assert_eq!(
        p.update[0].p2p,
        BTreeMap::from([(seeds.clone(), "2".to_string())])
    );
    // ... and taken off it again when the workload drops them.
    let with_seeds = OwnedJob {
        p2p: BTreeMap::from([(seeds, "2".to_string())]),
        ..in_step.clone()
    };
    let p = run(&w, &pods, std::slice::from_ref(&with_seeds), true);
    assert_eq!(p.update.len(), 1, "{:?}", p.update);
    assert!(p.update[0].p2p.is_empty());
    let mut bad = w.clone();
    bad.annotations
        .insert(names::PARALLELISM.into(), "lots".into());
    let p = run(&bad, &pods, std::slice::from_ref(&in_step), true);
    assert!(
        p.events.is_empty() && p.update.is_empty(),
        "nothing changed: nothing said again ({:?})",
        p.events
    );
}
