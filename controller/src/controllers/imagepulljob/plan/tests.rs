use super::*;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodeimage_api::kruise::{
    CompletionPolicy, ImagePullJobNodeSelector, ImagePullJobSpec, ImagePullPhase, ImageSpec,
    ImageStatus, ImageTagSpec, ImageTagStatus, NodeImageSpec, NodeImageStatus,
};

fn now(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(s, 0).unwrap_or_default()
}

fn job(par: i32, cp: CompletionPolicy) -> ImagePullJob {
    let mut j = ImagePullJob::new(
        "j",
        ImagePullJobSpec {
            image: "127.0.0.1:5000/test:v1".into(),
            template: Default::default(),
        },
    );
    j.metadata.namespace = Some("ns".into());
    j.metadata.uid = Some("uid-j".into());
    j.spec.template.parallelism = Some(IntOrString::Int(par));
    j.spec.template.completion_policy = Some(cp);
    j
}

fn node(name: &str, labels: &[(&str, &str)], phase: Option<ImagePullPhase>) -> Arc<NodeImage> {
    let mut ni = NodeImage::new(name, NodeImageSpec::default());
    ni.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    if let Some(phase) = phase {
        let tag = ImageTagSpec {
            tag: "v1".into(),
            version: Some(0),
            owner_references: Some(
                vec![ObjectReference {
                    uid: Some("uid-j".into()),
                    ..Default::default()
                }]
                .into(),
            ),
            created_at: Some(api_time(now(100))),
            ..Default::default()
        };
        ni.spec.images = Some(BTreeMap::from([(
            "127.0.0.1:5000/test".into(),
            ImageSpec {
                tags: vec![tag],
                ..Default::default()
            },
        )]));
        ni.status = Some(NodeImageStatus {
            image_statuses: Some(BTreeMap::from([(
                "127.0.0.1:5000/test".into(),
                ImageStatus {
                    tags: vec![ImageTagStatus {
                        tag: "v1".into(),
                        phase,
                        version: Some(0),
                        message: (phase == ImagePullPhase::Failed)
                            .then(|| "401 Unauthorized".into()),
                        ..Default::default()
                    }],
                },
            )])),
            ..Default::default()
        });
    }
    Arc::new(ni)
}

fn run(j: &ImagePullJob, nodes: &[Arc<NodeImage>], at: i64) -> Plan {
    run_at(j, nodes, &Ok(Default::default()), at)
}

fn run_at(
    j: &ImagePullJob,
    nodes: &[Arc<NodeImage>],
    p2p: &Result<Observed, String>,
    at: i64,
) -> Plan {
    plan(Inputs {
        job: j,
        nodeimages: nodes,
        pods: &[],
        nodes: &[],
        secrets: vec![],
        missing_secrets: vec![],
        refused_secrets: vec![],
        gate_refusal: None,
        registry_cap: None,
        follow: Default::default(),
        p2p,
        now: now(at),
    })
}

#[test]
fn selection_table() {
    let nodes = vec![
        node("n1", &[("zone", "a")], None),
        node("n2", &[("zone", "b")], None),
        node("n3", &[("zone", "a")], None),
    ];
    let mut j = job(1, CompletionPolicy::default());
    assert_eq!(
        select_nodes(&j, &nodes, &[], &[]),
        Ok(vec!["n1".into(), "n2".into(), "n3".into()])
    );
    j.spec.template.selector = Some(ImagePullJobNodeSelector {
        names: Some(vec!["n3".into(), "missing".into(), "n1".into()]),
        ..Default::default()
    });
    assert_eq!(
        select_nodes(&j, &nodes, &[], &[]),
        Ok(vec!["n1".into(), "n3".into()])
    );
    j.spec.template.selector = Some(ImagePullJobNodeSelector {
        match_labels: Some(BTreeMap::from([("zone".into(), "b".into())])),
        ..Default::default()
    });
    assert_eq!(select_nodes(&j, &nodes, &[], &[]), Ok(vec!["n2".into()]));
    j.spec.template.selector = None;
    j.spec.template.pod_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
        ..Default::default()
    });
    let pod = |labels: &[(&str, &str)], node: Option<&str>, active: bool| PodInfo {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        node_name: node.map(str::to_string),
        active,
    };
    let pods = vec![
        pod(&[("app", "web")], Some("n3"), true),
        pod(&[("app", "web")], None, true),
        pod(&[("app", "web")], Some("n1"), false),
        pod(&[("app", "db")], Some("n2"), true),
        pod(&[("app", "web")], Some("gone"), true),
    ];
    assert_eq!(select_nodes(&j, &nodes, &pods, &[]), Ok(vec!["n3".into()]));

    // A pre-download's placement adds the nodes its template fits: the
    // Pods' nodes first, then the others (with a NodeImage, Ready, not
    // tainted against it), at most its bound.
    use crate::engine::placement::Placement;
    use nodeimage_api::predownload::{PLACEMENT_ANNOTATION, WORKLOAD_UID_LABEL};
    let mut with_n4 = nodes.clone();
    with_n4.push(node("n4", &[], None));
    let kube_node = |name: &str, pool: &str, taint: bool| {
        Arc::new(
            serde_json::from_value::<k8s_openapi::api::core::v1::Node>(serde_json::json!({
                "metadata": {"name": name, "labels": {"pool": pool}},
                "spec": {"taints": if taint { serde_json::json!([{"key": "k", "effect": "NoSchedule"}]) } else { serde_json::json!([]) }},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}
            }))
            .expect("a Node"),
        )
    };
    let cluster = vec![
        kube_node("n1", "a", false),
        kube_node("n2", "a", true),
        kube_node("n3", "a", false),
        kube_node("n4", "b", false),
        kube_node("no-nodeimage", "a", false),
    ];
    let mut placed = j.clone();
    let placement = Placement {
        node_selector: [("pool".to_string(), "a".to_string())].into(),
        max_extra_nodes: 5,
        ..Default::default()
    };
    placed.metadata.annotations =
        Some([(PLACEMENT_ANNOTATION.to_string(), placement.to_annotation())].into());
    placed.metadata.labels = Some([(WORKLOAD_UID_LABEL.to_string(), "w".to_string())].into());
    assert_eq!(
        select_nodes(&placed, &with_n4, &pods, &cluster),
        Ok(vec!["n3".into(), "n1".into()]),
        "n3 runs a Pod; n1 fits; n2 is tainted, n4 in another pool, one node has no NodeImage"
    );
    let none = Placement {
        max_extra_nodes: 0,
        ..placement.clone()
    };
    placed.metadata.annotations =
        Some([(PLACEMENT_ANNOTATION.to_string(), none.to_annotation())].into());
    assert_eq!(
        select_nodes(&placed, &with_n4, &pods, &cluster),
        Ok(vec!["n3".into()]),
        "a bound of 0 keeps to the Pods' nodes"
    );
    placed.metadata.annotations =
        Some([(PLACEMENT_ANNOTATION.to_string(), "{".to_string())].into());
    let err = select_nodes(&placed, &with_n4, &pods, &cluster).expect_err("a bad annotation");
    assert!(err.contains(PLACEMENT_ANNOTATION), "{err}");
}

#[test]
fn registry_cap_cuts_the_starts() {
    let j = job(3, CompletionPolicy::default());
    let fresh: Vec<_> = ["n1", "n2", "n3"].map(|n| node(n, &[], None)).into();
    let capped = |cap: Option<usize>| {
        plan(Inputs {
            job: &j,
            nodeimages: &fresh,
            pods: &[],
            nodes: &[],
            secrets: vec![],
            missing_secrets: vec![],
            refused_secrets: vec![],
            gate_refusal: None,
            registry_cap: cap.map(crate::engine::rollout::Cap::new).as_ref(),
            follow: Default::default(),
            p2p: &Ok(Default::default()),
            now: now(200),
        })
    };
    let p = capped(Some(1));
    assert_eq!(p.write_to, vec!["n1"]);
    assert_eq!(
        (p.starts.wanted, p.starts.nodes),
        (3, vec!["n1".to_string()])
    );
    assert_eq!(p.status.active, 1);
    let p = capped(Some(0));
    assert!(p.write_to.is_empty() && p.request.is_none());
    assert_eq!(p.starts.wanted, 3);
    assert_eq!(capped(None).write_to.len(), 3);
    assert_eq!(entries(&j).len(), 1);
}

#[test]
fn rollout_respects_parallelism_and_completes() {
    use ImagePullPhase::*;
    let j = job(1, CompletionPolicy::default());
    let fresh = vec![
        node("n1", &[], None),
        node("n2", &[], None),
        node("n3", &[], None),
    ];
    let p = run(&j, &fresh, 200);
    assert_eq!(p.write_to, vec!["n1"]);
    assert_eq!((p.status.desired, p.status.active), (3, 1));
    assert!(p.events.iter().any(|e| e.reason == "Started"));

    let one_pulling = vec![
        node("n1", &[], Some(Pulling)),
        node("n2", &[], None),
        node("n3", &[], None),
    ];
    let p = run(&j, &one_pulling, 200);
    assert_eq!(p.write_to, vec!["n1"], "no new node while one pulls");

    let one_done = vec![
        node("n1", &[], Some(Succeeded)),
        node("n2", &[], None),
        node("n3", &[], None),
    ];
    let p = run(&j, &one_done, 200);
    assert_eq!(
        p.write_to,
        vec!["n1", "n2"],
        "n1 keeps its entry in step; n2 starts"
    );
    assert_eq!(p.status.succeeded, 1);

    let mut j2 = job(
        3,
        CompletionPolicy {
            ttl_seconds_after_finished: Some(30),
            ..Default::default()
        },
    );
    j2.status = Some(ImagePullJobStatus {
        start_time: Some(api_time(now(150))),
        ..Default::default()
    });
    let all_done = vec![
        node("n1", &[], Some(Succeeded)),
        node("n2", &[], Some(Failed)),
        node("n3", &[], Some(Succeeded)),
    ];
    let p = run(&j2, &all_done, 200);
    assert!(p.status.completion_time.is_some());
    assert_eq!((p.status.succeeded, p.status.failed), (2, 1));
    assert_eq!(p.status.failed_nodes, Some(vec!["n2".to_string()]));
    assert!(
        p.events
            .iter()
            .any(|e| e.reason == "NodeFailed" && e.note.contains("401"))
    );
    assert!(p.events.iter().any(|e| e.reason == "Completed"));
    assert_eq!(p.requeue_after, Some(std::time::Duration::from_secs(30)));

    // After completion: wait for the TTL, then delete.
    let mut done = j2.clone();
    done.status = Some(p.status);
    assert!(!run(&done, &all_done, 210).delete);
    assert!(run(&done, &all_done, 230).delete);
}

#[test]
fn paused_deadline_and_never() {
    use ImagePullPhase::*;
    let fresh = vec![node("n1", &[], None), node("n2", &[], None)];
    let p = run(&job(0, CompletionPolicy::default()), &fresh, 10);
    assert!(p.write_to.is_empty());
    // OpenKruise's words: a paused job is running with no progress yet.
    assert_eq!(
        p.status.message.as_deref(),
        Some("job is running, progress 0.0%")
    );

    let mut j = job(
        1,
        CompletionPolicy {
            active_deadline_seconds: Some(700),
            ..Default::default()
        },
    );
    j.status = Some(ImagePullJobStatus {
        start_time: Some(api_time(now(0))),
        ..Default::default()
    });
    let p = run(
        &j,
        &[
            node("n1", &[], Some(Succeeded)),
            node("n2", &[], Some(Pulling)),
        ],
        700,
    );
    assert!(p.status.completion_time.is_some());
    assert_eq!(p.status.failed, 1);
    assert_eq!(
        p.status.message.as_deref(),
        Some("job exceeds activeDeadlineSeconds")
    );

    let never = job(
        5,
        CompletionPolicy {
            type_: Some(CompletionPolicyType::Never),
            ..Default::default()
        },
    );
    let p = run(&never, &[node("n1", &[], Some(Succeeded))], 10);
    assert!(
        p.status.completion_time.is_none(),
        "Never jobs never complete"
    );
    assert_eq!(p.requeue_after, Some(NEVER_RESYNC));
    let pol = entry_pull_policy(&never);
    assert_eq!(
        pol.ttl_seconds_after_finished,
        Some(NEVER_ENTRY_TTL_SECONDS)
    );
    assert_eq!(
        pol.active_deadline_seconds,
        Some(NEVER_MIN_DEADLINE_SECONDS)
    );
}

#[test]
fn entry_ttl_follows_job_settings() {
    let j = job(
        1,
        CompletionPolicy {
            ttl_seconds_after_finished: Some(20),
            ..Default::default()
        },
    );
    assert_eq!(entry_pull_policy(&j).ttl_seconds_after_finished, Some(320));
    let j = job(
        1,
        CompletionPolicy {
            active_deadline_seconds: Some(1200),
            ..Default::default()
        },
    );
    assert_eq!(entry_pull_policy(&j).ttl_seconds_after_finished, Some(1500));
    assert_eq!(entry_pull_policy(&j).active_deadline_seconds, Some(1200));
    let j = job(1, CompletionPolicy::default());
    assert_eq!(
        entry_pull_policy(&j).ttl_seconds_after_finished,
        Some(600 * 4 + 300)
    );
}

#[test]
fn missing_secrets_are_named() {
    let j = job(1, CompletionPolicy::default());
    let p = plan(Inputs {
        job: &j,
        nodeimages: &[node("n1", &[], None)],
        pods: &[],
        nodes: &[],
        secrets: vec![],
        missing_secrets: vec!["ns/absent".into()],
        refused_secrets: vec![],
        gate_refusal: None,
        registry_cap: None,
        follow: Default::default(),
        p2p: &Ok(Default::default()),
        now: now(1),
    });
    assert!(
        p.status
            .message
            .as_deref()
            .is_some_and(|m| m.contains("ns/absent"))
    );
}

#[test]
fn refused_secrets_fail_the_unfinished_nodes_and_start_none() {
    let why = "pull secret ns/tls has type kubernetes.io/tls, not a registry credential";
    let j = job(3, CompletionPolicy::default());
    let nodes = [
        node("n1", &[], Some(ImagePullPhase::Succeeded)),
        node("n2", &[], None),
        node("n3", &[], None),
    ];
    let p = plan(Inputs {
        job: &j,
        nodeimages: &nodes,
        pods: &[],
        nodes: &[],
        secrets: vec![],
        missing_secrets: vec![],
        refused_secrets: vec![why.into()],
        gate_refusal: None,
        registry_cap: None,
        follow: Default::default(),
        p2p: &Ok(Default::default()),
        now: now(1),
    });
    assert!(p.starts.nodes.is_empty(), "{:?}", p.starts);
    assert_eq!(p.status.succeeded, 1);
    assert_eq!(p.status.failed, 2);
    assert!(p.status.completion_time.is_some());
    assert!(p.status.message.as_deref().is_some_and(|m| m.contains(why)));
    let refused: Vec<_> = p
        .events
        .iter()
        .filter(|e| e.reason == "PullSecretRefused")
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", p.events);
    assert!(refused[0].warning && refused[0].note.contains(why));
    let failed = p.events.iter().filter(|e| e.reason == "NodeFailed");
    assert!(failed.clone().count() == 2 && failed.into_iter().all(|e| e.note.contains(why)));
}

#[test]
fn messages_are_openkruise_words() {
    let t = |desired: usize, succeeded: usize, failed: usize| Tally {
        desired,
        succeeded,
        failed: (0..failed).map(|i| (format!("f{i}"), "x".into())).collect(),
        ..Default::default()
    };
    let cases = [
        (t(3, 1, 1), false, false, "job is running, progress 66.7%"),
        (t(3, 0, 0), false, false, "job is running, progress 0.0%"),
        (t(0, 0, 0), false, false, "job is running, no progress"),
        (t(2, 2, 0), true, false, "job has completed"),
        (t(2, 1, 1), true, false, "job has completed"),
        (t(0, 0, 0), true, false, "job has completed"),
        (t(2, 1, 1), true, true, "job exceeds activeDeadlineSeconds"),
    ];
    for (tally, complete, deadline, want) in cases {
        assert_eq!(
            status_message(&tally, complete, deadline),
            want,
            "{tally:?}"
        );
    }
}

#[test]
fn look_again_table() {
    use std::time::Duration;
    let secs = Duration::from_secs;
    let done = Some(api_time(now(1)));
    // (completed, the plan's due time, when the job looks again)
    let cases = [
        (None, None, Some(RUNNING_RESYNC)),
        (None, Some(secs(10)), Some(secs(10))),
        (None, Some(NEVER_RESYNC), Some(RUNNING_RESYNC)),
        (done.clone(), None, None),
        (done.clone(), Some(secs(300)), Some(secs(300))),
    ];
    for (completion_time, requeue_after, want) in cases {
        let p = Plan {
            requeue_after,
            ..Plan::only(
                ImagePullJobStatus {
                    completion_time: completion_time.clone(),
                    ..Default::default()
                },
                vec![],
            )
        };
        assert_eq!(
            p.look_again(),
            want,
            "{completion_time:?} {requeue_after:?}"
        );
    }
}

#[test]
fn the_shell_copies_secrets_only_for_a_running_job() {
    let mut j = job(1, CompletionPolicy::default());
    assert!(secrets_to_copy(&j).is_empty());
    j.spec.template.pull_secrets = Some(vec!["reg".into()]);
    assert_eq!(secrets_to_copy(&j), ["reg".to_string()]);
    j.status = Some(ImagePullJobStatus {
        completion_time: Some(api_time(now(1))),
        ..Default::default()
    });
    assert!(secrets_to_copy(&j).is_empty(), "released once completed");
}

#[test]
fn a_missing_secret_is_announced_once() {
    let mut j = job(1, CompletionPolicy::default());
    let inputs = |j: &ImagePullJob| {
        plan(Inputs {
            job: j,
            nodeimages: &[],
            pods: &[],
            nodes: &[],
            secrets: vec![],
            missing_secrets: vec!["ns/absent".into()],
            refused_secrets: vec![],
            gate_refusal: None,
            registry_cap: None,
            follow: Default::default(),
            p2p: &Ok(Default::default()),
            now: now(1),
        })
    };
    let p = inputs(&j);
    assert_eq!(p.events[0].reason, "PullSecretMissing", "{:?}", p.events);
    assert!(p.events[0].warning);
    j.status = Some(p.status);
    let again = inputs(&j);
    assert!(again.events.iter().all(|e| e.reason != "PullSecretMissing"));
}

#[test]
fn the_status_carries_conditions_at_the_plan_time() {
    use ImagePullPhase::*;
    let j = job(1, CompletionPolicy::default());
    let p = run(&j, &[node("n1", &[], Some(Succeeded))], 200);
    assert!(p.completed_now && p.completed && p.write_status);
    assert_eq!(
        crate::engine::conditions::condition_of(p.status.conditions.as_ref(), "Complete"),
        Some(("True".into(), api_time(now(200))))
    );
    // Planned again from what it wrote: nothing to write, nothing new.
    let mut done = j.clone();
    done.status = Some(p.status.clone());
    let p = run(&done, &[node("n1", &[], Some(Succeeded))], 230);
    assert!(!p.write_status && !p.completed_now && p.completed);
    assert!(p.events.is_empty());
}

#[test]
fn a_refused_gate_mark_is_said_once_when_the_job_starts() {
    let j = job(1, CompletionPolicy::default());
    let nodes = [node("n1", &[], None)];
    let at = |j: &ImagePullJob, why: Option<&str>| {
        plan(Inputs {
            job: j,
            nodeimages: &nodes,
            pods: &[],
            nodes: &[],
            secrets: vec![],
            missing_secrets: vec![],
            refused_secrets: vec![],
            gate_refusal: why.map(String::from),
            registry_cap: None,
            follow: Default::default(),
            p2p: &Ok(Default::default()),
            now: now(1),
        })
    };
    let refused = |p: &Plan| p.events.iter().filter(|e| e.reason == GATE_REFUSED).count();
    let first = at(&j, Some("namespace ns may not gate new nodes"));
    assert_eq!(refused(&first), 1, "{:?}", first.events);
    assert_eq!(refused(&at(&j, None)), 0);
    let mut started = j.clone();
    started.status = Some(first.status.clone());
    assert_eq!(refused(&at(&started, Some("again"))), 0, "said once");
}

/// A node that failed on its entry's deadline ends the job with OpenKruise's
/// deadline message even a moment before the job's own deadline as its
/// recorded start counts it (the entry was written a second earlier than
/// the start was recorded); any other failure says the job completed.
#[test]
fn a_node_out_of_time_ends_the_job_by_its_deadline() {
    // (node's failure message, the job's message)
    let cases = [
        (
            "exceeded activeDeadlineSeconds (20s) while retrying; last error: attempt timed out after 3s",
            "job exceeds activeDeadlineSeconds",
        ),
        (
            "pull did not finish within activeDeadlineSeconds (20s) of createdAt",
            "job exceeds activeDeadlineSeconds",
        ),
        ("401 Unauthorized", "job has completed"),
        (
            "node did not respond within 10m0s (no status for version 0)",
            "job has completed",
        ),
    ];
    for (failure, want) in cases {
        let mut j = job(
            1,
            CompletionPolicy {
                active_deadline_seconds: Some(20),
                ..Default::default()
            },
        );
        j.status = Some(ImagePullJobStatus {
            start_time: Some(api_time(now(1))),
            ..Default::default()
        });
        let mut ni = (*node("n1", &[], Some(ImagePullPhase::Failed))).clone();
        if let Some(status) = ni.status.as_mut() {
            for image in status
                .image_statuses
                .iter_mut()
                .flat_map(|m| m.values_mut())
            {
                image.tags[0].message = Some(failure.into());
            }
        }
        // 20 s after the entry's creation, 19 s after the recorded start.
        let p = run(&j, &[Arc::new(ni)], 20);
        assert!(p.status.completion_time.is_some(), "{failure}");
        assert_eq!(p.status.message.as_deref(), Some(want), "{failure}");
    }
}

fn run_p2p(j: &ImagePullJob, nodes: &[Arc<NodeImage>], p2p: &Result<Observed, String>) -> Plan {
    run_at(j, nodes, p2p, 200)
}

#[test]
fn p2p_agent_holds_nodes_and_bad_annotations_start_nothing() {
    use crate::engine::p2p::settings;
    let nodes = vec![
        node("n1", &[], None),
        node("n2", &[], None),
        node("n3", &[], None),
    ];
    let j = job(3, CompletionPolicy::default());
    let annotations = BTreeMap::from([(
        nodeimage_api::p2p::AGENT.to_string(),
        "daemonset:p2p/agent".to_string(),
    )]);
    let observed = Observed {
        settings: settings::read(&annotations, None).unwrap_or_default(),
        agents: BTreeMap::from([("n1".to_string(), true), ("n2".to_string(), false)]),
        ..Default::default()
    };
    let p = run_p2p(&j, &nodes, &Ok(observed));
    // Only n1's agent is Ready: parallelism 3 starts n1 alone.
    assert_eq!(p.starts.nodes, vec!["n1".to_string()]);
    assert_eq!(p.write_to, vec!["n1".to_string()]);
    let message = p.status.message.unwrap_or_default();
    assert!(
        message
            .contains("2 node(s) held back (e.g. n2: waits for the P2P agent DaemonSet p2p/agent"),
        "{message}"
    );
    // The job looks again when the wait ends (600 s after its start at 200).
    assert!(
        p.requeue_after
            .is_some_and(|d| d <= std::time::Duration::from_secs(600))
    );

    let bad = Err(
        "annotation nodeimage.dev/p2p-seeds: \"0\" is not a whole number from 1 to 1000"
            .to_string(),
    );
    let p = run_p2p(&j, &nodes, &bad);
    assert!(p.write_to.is_empty());
    let message = p.status.message.unwrap_or_default();
    assert!(
        message.contains("annotation nodeimage.dev/p2p-seeds"),
        "{message}"
    );
}

#[test]
fn a_wave_from_peers_starts_with_no_registry_slot_free() {
    use crate::engine::p2p::settings;
    use crate::engine::rollout::Cap;
    // n1 holds the image (the seed); parallelism 3, fan-out 2: n2 may
    // start from peers, n3 waits for the next wave.
    let nodes = vec![
        node("n1", &[], Some(ImagePullPhase::Succeeded)),
        node("n2", &[], None),
        node("n3", &[], None),
    ];
    let mut j = job(3, CompletionPolicy::default());
    let annotations = BTreeMap::from([(nodeimage_api::p2p::SEEDS.to_string(), "1".to_string())]);
    j.metadata.annotations = Some(annotations.clone());
    let observed = Ok(Observed {
        settings: settings::read(&annotations, None).unwrap_or_default(),
        ..Default::default()
    });
    let with_cap = |slots: usize| {
        plan(Inputs {
            job: &j,
            nodeimages: &nodes,
            pods: &[],
            nodes: &[],
            secrets: vec![],
            missing_secrets: vec![],
            refused_secrets: vec![],
            gate_refusal: None,
            registry_cap: Some(&Cap::new(slots)),
            follow: Default::default(),
            p2p: &observed,
            now: now(200),
        })
    };
    let p = with_cap(0);
    assert_eq!(p.starts.nodes, vec!["n2".to_string()], "{:?}", p.starts);
    assert_eq!(p.starts.from_peers, ["n2".to_string()].into());
    assert!(p.write_to.contains(&"n2".to_string()));
}
