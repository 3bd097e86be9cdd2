use super::*;
use crate::engine::nodetasks::fixtures::{self, World, at, ready, sea_of, tuple};
use crate::messages::cap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodeimage_api::kruise::{ImagePullPhase, ImageTagStatus};
use nodeimage_api::kubeedge::{ImagePrePullJobSpec, ImagePrePullTemplate};

const IMG_A: &str = "127.0.0.1:5000/a:v1";
const IMG_B: &str = "127.0.0.1:5000/b:v1";
const UID: &str = "uid-job";

fn job(images: &[&str], nodes: &[&str]) -> ImagePrePullJob {
    let mut j = ImagePrePullJob::new(
        "ppj",
        ImagePrePullJobSpec {
            image_pre_pull_template: ImagePrePullTemplate {
                images: images.iter().map(|s| s.to_string()).collect(),
                task: fixtures::on_nodes(nodes),
                ..Default::default()
            },
        },
    );
    j.metadata.uid = Some(UID.into());
    j
}

fn with(mut j: ImagePrePullJob, f: impl FnOnce(&mut ImagePrePullTemplate)) -> ImagePrePullJob {
    f(&mut j.spec.image_pre_pull_template);
    j
}

/// What a node's NodeImage holds for the job: per image of the job, None
/// (no entry) or the entry with an optional reported phase and message.
type Tag<'a> = (&'a str, Option<(Option<ImagePullPhase>, &'a str)>);

fn nodeimage(name: &str, created: i64, tags: &[Tag<'_>]) -> Arc<NodeImage> {
    let owner = ObjectReference {
        uid: Some(UID.into()),
        ..Default::default()
    };
    let entries = tags.iter().filter_map(|(image, entry)| {
        let (phase, message) = entry.as_ref()?;
        let e = crate::engine::rollout::entry_for(image).unwrap_or_else(|e| panic!("{e}"));
        let report = phase.map(|phase| ImageTagStatus {
            tag: e.tag.as_str().into(),
            phase,
            version: Some(0),
            message: (!message.is_empty()).then(|| (*message).into()),
            ..Default::default()
        });
        Some((
            e.image,
            fixtures::tag_entry(&e.tag, created, owner.clone()),
            report,
        ))
    });
    fixtures::nodeimage_with(name, entries.collect())
}

/// Ready nodes with empty NodeImages.
fn world(names: &[&str]) -> World {
    World::ready(names, |n| nodeimage(n, 0, &[]))
}

trait Plans {
    fn plan(&self, j: &ImagePrePullJob, now: i64) -> Plan;
    fn plan_with(&self, j: &ImagePrePullJob, now: i64, secrets: Secrets) -> Plan;
    fn plan_capped(&self, j: &ImagePrePullJob, now: i64, cap: Option<usize>) -> Plan;
}

impl Plans for World {
    fn plan(&self, j: &ImagePrePullJob, now: i64) -> Plan {
        self.plan_with(j, now, Secrets::None)
    }

    fn plan_with(&self, j: &ImagePrePullJob, now: i64, secrets: Secrets) -> Plan {
        plan(Inputs {
            job: j,
            nodes: &self.nodes,
            nodeimages: &self.nodeimages,
            edge_only: true,
            registry_cap: None,
            secrets,
            p2p: &Ok(Default::default()),
            now: at(now),
        })
    }

    fn plan_capped(&self, j: &ImagePrePullJob, now: i64, cap: Option<usize>) -> Plan {
        plan(Inputs {
            job: j,
            nodes: &self.nodes,
            nodeimages: &self.nodeimages,
            edge_only: true,
            registry_cap: cap.map(crate::engine::rollout::Cap::new).as_ref(),
            secrets: Secrets::None,
            p2p: &Ok(Default::default()),
            now: at(now),
        })
    }
}

fn recorded(j: ImagePrePullJob, p: &Plan) -> ImagePrePullJob {
    fixtures::recorded(j, &p.status)
}

fn node<'a>(p: &'a Plan, name: &str) -> &'a TaskStatus {
    let rows = p.status.status.iter().flatten();
    fixtures::task_of(rows.filter_map(|r| r.node_status.as_ref()), name)
}

fn row<'a>(p: &'a Plan, name: &str) -> &'a ImagePrePullStatus {
    p.status
        .status
        .iter()
        .flatten()
        .find(|r| row_name(r) == Some(name))
        .unwrap_or_else(|| panic!("{name} not in status"))
}

/// (state, event, action, reason) of a node.
fn sea(p: &Plan, name: &str) -> (String, String, String, String) {
    sea_of(node(p, name))
}

#[test]
fn selection_table() {
    let mut w = world(&["n1", "n2", "n3"]);
    w.nodes.insert("down".into(), {
        let mut n = ready(&[]);
        n.ready = false;
        n
    });
    w.nodes.insert("virtual".into(), {
        let mut n = ready(&[]);
        n.wants_nodeimage = false;
        n
    });
    for n in ["n1", "n3"] {
        if let Some(node) = w.nodes.get_mut(n) {
            node.labels.insert("zone".into(), "a".into());
        }
    }

    // nodeNames keep their order and drop duplicates.
    let j = job(&[IMG_A], &["n3", "n1", "n3"]);
    assert_eq!(
        select_nodes(&j, &w.nodes),
        Ok(vec!["n3".into(), "n1".into()])
    );
    // labelSelector: matching Nodes, sorted.
    let j = with(job(&[IMG_A], &[]), |t| {
        t.task.node_names = None;
        t.task.label_selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("zone".into(), "a".into())])),
            ..Default::default()
        });
    });
    assert_eq!(
        select_nodes(&j, &w.nodes),
        Ok(vec!["n1".into(), "n3".into()])
    );

    // Named nodes that are missing, not ready or virtual fail at once, in
    // the status, with their reason; the others proceed.
    let j = with(
        job(&[IMG_A], &["n1", "ghost", "down", "virtual", "n2"]),
        |t| {
            t.task.concurrency = Some(5);
            t.task.failure_tolerate = Some("1".into());
        },
    );
    let p = w.plan(&j, 0);
    let names: Vec<&str> = p
        .status
        .status
        .iter()
        .flatten()
        .filter_map(row_name)
        .collect();
    assert_eq!(names, vec!["n1", "ghost", "down", "virtual", "n2"]);
    assert_eq!(
        sea(&p, "ghost"),
        tuple("Failed", "Init", "Failure", "not found")
    );
    assert_eq!(
        sea(&p, "down"),
        tuple("Failed", "Init", "Failure", "not ready")
    );
    assert!(sea(&p, "virtual").3.starts_with("not ready"));
    assert_eq!(sea(&p, "n1"), tuple("Pulling", "Pull", "", ""));
    assert_eq!(p.write_to, vec!["n1", "n2"]);
    assert_eq!(p.status.job.state.as_deref(), Some("Pulling"));
    let failed: Vec<&JobEvent> = p
        .events
        .iter()
        .filter(|e| e.reason == "NodeFailed")
        .collect();
    assert_eq!(failed.len(), 3);
    assert!(failed[0].note.contains("ghost") && failed[0].note.contains("not found"));
    assert!(p.events.iter().any(|e| e.reason == "Started"));

    // A selector matching nothing fails the job.
    let j = with(job(&[IMG_A], &[]), |t| {
        t.task.node_names = None;
        t.task.label_selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("zone".into(), "none".into())])),
            ..Default::default()
        });
    });
    let p = w.plan(&j, 0);
    assert_eq!(p.status.job.state.as_deref(), Some("Failed"));
    assert_eq!(
        p.status.job.reason.as_deref(),
        Some("no node matches labelSelector")
    );

    // A Ready node whose NodeImage the mirror has not created yet waits.
    let mut w2 = world(&["n1"]);
    w2.nodes.insert("new".into(), ready(&[]));
    let p = w2.plan(
        &with(job(&[IMG_A], &["new", "n1"]), |t| {
            t.task.concurrency = Some(2)
        }),
        0,
    );
    assert_eq!(p.write_to, vec!["n1"]);
    assert_eq!(sea(&p, "new").0, "Init");
    assert_eq!(p.requeue_after, Some(NODEIMAGE_WAIT));
}

#[test]
fn concurrency_budget() {
    use ImagePullPhase::*;
    let j = job(&[IMG_A, IMG_B], &["n1", "n2", "n3"]);
    let mut w = world(&["n1", "n2", "n3"]);

    // (step, n1 tags, expected write_to, expected node states)
    let p = w.plan(&j, 0);
    assert_eq!(p.write_to, vec!["n1"], "concurrency defaults to 1");
    assert_eq!(p.requests.len(), 2, "one entry per image");
    assert_eq!(
        [sea(&p, "n1").0, sea(&p, "n2").0, sea(&p, "n3").0],
        ["Pulling", "Init", "Init"]
    );
    let j = recorded(j, &p);

    // n1 working (one image done, one pulling): nobody else starts.
    w.set(nodeimage(
        "n1",
        0,
        &[
            (IMG_A, Some((Some(Succeeded), ""))),
            (IMG_B, Some((Some(Pulling), ""))),
        ],
    ));
    let p = w.plan(&j, 5);
    assert_eq!(p.write_to, vec!["n1"]);
    assert_eq!(
        row(&p, "n1").image_status.as_ref().map(Vec::len),
        Some(1),
        "finished images are listed while the node works"
    );
    let j = recorded(j, &p);

    // n1 done: n2 starts in the same plan.
    w.set(nodeimage(
        "n1",
        0,
        &[
            (IMG_A, Some((Some(Succeeded), ""))),
            (IMG_B, Some((Some(Succeeded), ""))),
        ],
    ));
    let p = w.plan(&j, 10);
    assert_eq!(p.write_to, vec!["n2"]);
    assert_eq!(sea(&p, "n1"), tuple("Successful", "Pull", "Success", ""));
    assert_eq!(sea(&p, "n2").0, "Pulling");
    assert_eq!(p.status.job.state.as_deref(), Some("Pulling"));

    // concurrency 2: two at once.
    let j2 = with(job(&[IMG_A], &["n1", "n2", "n3"]), |t| {
        t.task.concurrency = Some(2)
    });
    let p = world(&["n1", "n2", "n3"]).plan(&j2, 0);
    assert_eq!(p.write_to, vec!["n1", "n2"]);
}

#[test]
fn registry_cap_cuts_the_starts() {
    let j = with(
        job(&[IMG_A, IMG_B, "127.0.0.1:5000/a:v1"], &["n1", "n2", "n3"]),
        |t| t.task.concurrency = Some(3),
    );
    assert_eq!(entries(&j).len(), 2, "distinct entries, for pacing");
    let w = world(&["n1", "n2", "n3"]);
    let p = w.plan_capped(&j, 0, Some(1));
    assert_eq!(p.write_to, vec!["n1"]);
    assert_eq!((p.starts.wanted, p.starts.nodes.len()), (3, 1));
    assert_eq!(
        [sea(&p, "n1").0, sea(&p, "n2").0, sea(&p, "n3").0],
        ["Pulling", "Init", "Init"],
        "the held nodes wait, they do not fail"
    );
    let p = w.plan_capped(&j, 0, Some(0));
    assert!(p.write_to.is_empty() && p.requests.is_empty());
    assert_eq!(p.starts.wanted, 3);
    assert_eq!(w.plan_capped(&j, 0, None).write_to.len(), 3);
}

#[test]
fn node_timeout_frees_its_slot() {
    let j = with(job(&[IMG_A], &["n1", "n2"]), |t| {
        t.task.timeout_seconds = Some(20);
        t.task.failure_tolerate = Some("0.6".into());
    });
    let mut w = world(&["n1", "n2"]);
    // n1's daemon never answers: an entry without status.
    w.set(nodeimage("n1", 0, &[(IMG_A, Some((None, "")))]));
    let p = w.plan(&j, 19);
    assert!(p.write_to == vec!["n1"], "still within the timeout");
    assert_eq!(p.requeue_after, Some(Duration::from_secs(1)));
    let p = w.plan(&j, 20);
    assert_eq!(sea(&p, "n1"), fixtures::timed_out(20));
    assert_eq!(p.write_to, vec!["n2"], "the slot went to the next node");
    let imgs = row(&p, "n1").image_status.clone().unwrap_or_default();
    assert_eq!(imgs[0].state.as_deref(), Some("Failed"));

    // timeoutSeconds 0 or unset means 300.
    for t in [None, Some(0)] {
        let j = with(job(&[IMG_A], &["n1"]), |x| x.task.timeout_seconds = t);
        assert_eq!(node_timeout(&j), 300);
        let p = w.plan(&j, 299);
        assert_eq!(sea(&p, "n1").0, "Pulling");
        let p = w.plan(&j, 300);
        assert_eq!(sea(&p, "n1").1, "TimeOut");
    }

    // The daemon's own deadline message also counts as TimeOut.
    w.set(nodeimage(
        "n1",
        0,
        &[(
            IMG_A,
            Some((
                Some(ImagePullPhase::Failed),
                "exceeded activeDeadlineSeconds (20s) while pulling",
            )),
        )],
    ));
    assert_eq!(sea(&w.plan(&j, 21), "n1").1, "TimeOut");
}

#[test]
fn failure_tolerance_table() {
    use ImagePullPhase::*;
    let mut w = world(&["n1", "n2", "n3"]);
    w.set(nodeimage("n1", 0, &[(IMG_A, Some((Some(Succeeded), "")))]));
    w.set(nodeimage("n2", 0, &[(IMG_A, Some((Some(Succeeded), "")))]));
    w.set(nodeimage(
        "n3",
        0,
        &[(
            IMG_A,
            Some((Some(Failed), "check disk failed: 91% used > 80%")),
        )],
    ));
    // (failureTolerate, state, reason)
    let cases = [
        (
            Some("0"),
            "Failed",
            Some("1 of 3 nodes failed (33.3%), reaching failureTolerate 0"),
        ),
        (
            Some("0.1"),
            "Failed",
            Some("1 of 3 nodes failed (33.3%), reaching failureTolerate 0.1"),
        ),
        (
            None,
            "Failed",
            Some("1 of 3 nodes failed (33.3%), reaching failureTolerate 0.1"),
        ),
        (
            Some("0.5"),
            "Successful",
            Some("1 of 3 nodes failed (33.3%), below failureTolerate 0.5"),
        ),
    ];
    for (tol, want_state, want_reason) in cases {
        let j = with(job(&[IMG_A], &["n1", "n2", "n3"]), |t| {
            t.task.failure_tolerate = tol.map(str::to_string)
        });
        let p = w.plan(&j, 50);
        assert!(p.finished, "{tol:?}");
        assert_eq!(p.status.job.state.as_deref(), Some(want_state), "{tol:?}");
        assert_eq!(p.status.job.reason.as_deref(), want_reason, "{tol:?}");
        assert_eq!(
            sea(&p, "n3"),
            tuple(
                "Failed",
                "Check",
                "Failure",
                "check disk failed: 91% used > 80%"
            ),
            "{tol:?}"
        );
        let fin = p.events.iter().find(|e| e.reason == "Finished");
        assert!(
            fin.is_some_and(|e| e.warning == (want_state == "Failed")),
            "{tol:?}"
        );
        if want_state == "Failed" {
            assert_eq!(
                p.status.job.event.as_deref(),
                Some("Check"),
                "all failures were checks"
            );
        }
    }
    // "0" with no failure succeeds (upstream v1alpha1 fails it).
    let j = with(job(&[IMG_A], &["n1", "n2"]), |t| {
        t.task.failure_tolerate = Some("0".into())
    });
    let p = w.plan(&j, 50);
    assert_eq!(p.status.job.state.as_deref(), Some("Successful"));
    assert_eq!(p.status.job.reason, None);
    assert_eq!(p.status.job.action.as_deref(), Some("Success"));
}

#[test]
fn status_shape_matches_the_guide() {
    use ImagePullPhase::*;
    let mut w = world(&["edge-1"]);
    w.set(nodeimage(
        "edge-1",
        0,
        &[(IMG_A, Some((Some(Succeeded), "")))],
    ));
    let j = job(&[IMG_A], &["edge-1"]);
    let p = w.plan(&j, 7);
    // The guide's shape, beside nodeimage's own `conditions` (at the plan's time).
    let complete =
        crate::engine::conditions::condition_of(p.status.conditions.as_ref(), "Complete");
    assert_eq!(
        complete,
        Some(("True".into(), crate::runtime::clock::api_time(at(7))))
    );
    let got = serde_json::to_value(ImagePrePullJobStatus {
        conditions: None,
        ..p.status.clone()
    })
    .unwrap_or_default();
    let want = serde_json::json!({
        "action": "Success",
        "event": "Pull",
        "state": "Successful",
        "phase": "Completed",
        "nodeStatus": [{
            "nodeName": "edge-1",
            "phase": "Successful",
            "actionFlow": [
                {"action": "Check", "status": "True"},
                {"action": "Pull", "status": "True", "time": "2023-11-14T22:13:27Z"}
            ],
            "imageStatus": [{"image": IMG_A, "status": "True"}]
        }],
        "status": [{
            "imageStatus": [{"image": IMG_A, "state": "Successful"}],
            "nodeStatus": {
                "action": "Success",
                "event": "Pull",
                "nodeName": "edge-1",
                "state": "Successful",
                "time": "2023-11-14T22:13:27Z"
            }
        }],
        "time": "2023-11-14T22:13:27Z"
    });
    assert_eq!(got, want);

    // A pull failure: node Pull/Failure with the registry's reason, and the
    // image's own reason.
    let why = "pull failed after 3 attempts: 127.0.0.1:5000/a:v1: not found";
    w.set(nodeimage(
        "edge-1",
        0,
        &[(IMG_A, Some((Some(Failed), why)))],
    ));
    let p = w.plan(&j, 7);
    assert_eq!(sea(&p, "edge-1"), tuple("Failed", "Pull", "Failure", why));
    let img = &row(&p, "edge-1").image_status.clone().unwrap_or_default()[0];
    assert_eq!(
        (img.state.as_deref(), img.reason.as_deref()),
        (Some("Failed"), Some(why))
    );
    assert_eq!(
        p.status.job.reason.as_deref(),
        Some("1 of 1 nodes failed (100.0%), reaching failureTolerate 0.1")
    );
}

#[test]
fn entries_carry_the_job_settings() {
    let j = with(job(&[IMG_A, "nginx"], &["n1"]), |t| {
        t.retry_times = Some(2);
        t.task.timeout_seconds = Some(120);
        t.task.check_items = Some(vec!["disk".into(), "mem".into()]);
    });
    let secret = ReferenceObject {
        namespace: Some("nodeimage-secrets".into()),
        name: Some("default.my-secret-1234".into()),
        mode: None,
    };
    let p = world(&["n1"]).plan_with(&j, 0, Secrets::Copied(vec![secret.clone()]));
    let r = &p.requests[0];
    assert_eq!(
        (r.image.as_str(), r.tag.as_str()),
        ("127.0.0.1:5000/a", "v1")
    );
    assert_eq!(p.requests[1].image, "nginx");
    assert_eq!(r.owner.api_version.as_deref(), Some(API_VERSION));
    assert_eq!(r.owner.kind.as_deref(), Some("ImagePrePullJob"));
    assert_eq!(r.owner.uid.as_deref(), Some(UID));
    assert_eq!(r.owner.namespace, None);
    assert_eq!(
        r.pull_policy,
        ImageTagPullPolicy {
            timeout_seconds: Some(120),
            backoff_limit: Some(2),
            ttl_seconds_after_finished: Some(420),
            active_deadline_seconds: Some(120),
        }
    );
    assert_eq!(r.image_pull_policy.as_deref(), Some("IfNotPresent"));
    assert_eq!(r.check_items, Some(vec!["disk".into(), "mem".into()]));
    assert_eq!(r.secrets, vec![secret]);
    // checkItems unset: none, as KubeEdge runs (its documented "disk" is not applied).
    assert!(check_items(&job(&[IMG_A], &["n1"])).is_empty());
    let none = with(job(&[IMG_A], &["n1"]), |t| {
        t.task.check_items = Some(vec![])
    });
    assert_eq!(world(&["n1"]).plan(&none, 0).requests[0].check_items, None);
}

#[test]
fn missing_secret_fails_nodes_not_started() {
    let j = with(job(&[IMG_A], &["n1", "n2"]), |t| {
        t.image_secrets = Some("default/absent".into())
    });
    let mut w = world(&["n1", "n2"]);
    w.set(nodeimage("n1", 0, &[(IMG_A, Some((None, "")))]));
    let why = "image secret default/absent not found";
    let p = w.plan_with(&j, 1, Secrets::Missing(why.into()));
    assert_eq!(sea(&p, "n1").0, "Pulling", "a started node carries on");
    assert_eq!(sea(&p, "n2"), tuple("Failed", "Init", "Failure", why));
    let p = world(&["n1"]).plan_with(
        &with(job(&[IMG_A], &["n1"]), |t| {
            t.image_secrets = Some("default/absent".into())
        }),
        1,
        Secrets::Missing(why.into()),
    );
    assert_eq!(p.status.job.state.as_deref(), Some("Failed"));
    assert_eq!(p.status.job.event.as_deref(), Some("Init"));
    assert!(p.write_to.is_empty());
}

#[test]
fn results_are_final_and_finished_jobs_are_not_rerun() {
    use ImagePullPhase::*;
    let mut w = world(&["n1", "n2"]);
    w.set(nodeimage("n1", 0, &[(IMG_A, Some((Some(Succeeded), "")))]));
    let j = job(&[IMG_A], &["n1", "n2"]);
    let p = w.plan(&j, 10);
    assert_eq!(p.write_to, vec!["n2"]);
    let j = recorded(j, &p);

    // n1's entry expired (TTL) and n1 went NotReady: its result stands.
    w.set(nodeimage("n1", 0, &[]));
    if let Some(n) = w.nodes.get_mut("n1") {
        n.ready = false;
    }
    w.set(nodeimage("n2", 10, &[(IMG_A, Some((Some(Pulling), "")))]));
    let p = w.plan(&j, 20);
    assert_eq!(sea(&p, "n1").0, "Successful");
    assert_eq!(
        node(&p, "n1").phase.time.as_deref(),
        Some(rfc3339(at(10)).as_str())
    );
    assert_eq!(p.write_to, vec!["n2"], "n1 is not started again");
    assert_eq!(
        node(&p, "n2").phase.time.as_deref(),
        Some(rfc3339(at(10)).as_str()),
        "a working node's time is its start"
    );
    let j = recorded(j, &p);

    // n2 finishes: the job is done, once.
    w.set(nodeimage("n2", 10, &[(IMG_A, Some((Some(Succeeded), "")))]));
    let p = w.plan(&j, 30);
    assert!(p.finished);
    assert_eq!(p.status.job.state.as_deref(), Some("Successful"));
    assert_eq!(p.requeue_after, None);
    assert!(p.events.iter().any(|e| e.reason == "Finished"));
    assert!(!p.events.iter().any(|e| e.reason == "Started"));
    let done = recorded(j, &p);

    // An edit of a finished job (new images, other nodes) changes nothing.
    let edited = with(done.clone(), |t| {
        t.images.push(IMG_B.into());
        t.task.node_names = Some(vec!["n3".into()]);
    });
    let p = w.plan(&edited, 40);
    assert_eq!(Some(&p.status), done.status.as_ref());
    assert!(p.write_to.is_empty() && p.requests.is_empty() && p.events.is_empty());
    assert!(p.finished);

    // A running job's node set is the recorded one, whatever the edit.
    let running = with(job(&[IMG_A], &["n1", "n2"]), |t| {
        t.task.node_names = Some(vec!["n9".into()])
    });
    let mut running = running;
    running.status = Some(ImagePrePullJobStatus {
        job: nodeimage_api::kubeedge::JobState {
            state: Some("Pulling".into()),
            ..Default::default()
        },
        status: Some(vec![ImagePrePullStatus {
            node_status: Some(TaskStatus {
                node_name: Some("n2".into()),
                phase: nodeimage_api::kubeedge::JobState {
                    state: Some("Init".into()),
                    ..Default::default()
                },
            }),
            image_status: None,
        }]),
        ..Default::default()
    });
    let p = w.plan(&running, 40);
    let names: Vec<&str> = p
        .status
        .status
        .iter()
        .flatten()
        .filter_map(row_name)
        .collect();
    assert_eq!(names, vec!["n2"]);
}

#[test]
fn status_of_5000_nodes_fits_in_1_mib() {
    let names: Vec<String> = (0..5000).map(|i| format!("edge-node-{i:05}")).collect();
    let images = [
        "registry.example.com:5000/team/application-frontend:v1.2.3",
        "registry.example.com:5000/team/application-backend:v1.2.3",
    ];
    let long = "pull failed after 3 attempts: rpc error: code = NotFound desc = failed to pull and unpack image \"registry.example.com:5000/team/application-frontend:v1.2.3\": failed to resolve reference: registry.example.com:5000/team/application-frontend:v1.2.3: not found".repeat(2);
    // (case, node phase) → the serialised job object must stay under 1 MiB.
    for (case, phase, reason) in [
        ("all successful", ImagePullPhase::Succeeded, ""),
        (
            "all failed, long reasons",
            ImagePullPhase::Failed,
            long.as_str(),
        ),
    ] {
        let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let j = with(job(&images, &name_refs), |t| {
            t.task.concurrency = Some(5000)
        });
        let mut w = world(&[]);
        for n in &names {
            w.nodes.insert(n.clone(), ready(&[]));
            w.set(nodeimage(
                n,
                0,
                &[
                    (images[0], Some((Some(phase), reason))),
                    (images[1], Some((Some(phase), reason))),
                ],
            ));
        }
        let p = w.plan(&j, 100);
        assert!(p.finished, "{case}");
        let mut obj = recorded(j, &p);
        // What kubectl apply adds: the last-applied annotation (the spec again).
        let spec = serde_json::to_string(&obj.spec).unwrap_or_default();
        obj.metadata.annotations = Some(BTreeMap::from([(
            "kubectl.kubernetes.io/last-applied-configuration".to_string(),
            spec,
        )]));
        // And the managed fields: `f:nodeNames` lists each name of the set.
        let managed: usize = names
            .iter()
            .map(|n| format!(r#""v:\"{n}\"":{{}},"#).len())
            .sum();
        let size = serde_json::to_vec(&obj)
            .map(|v| v.len())
            .unwrap_or(usize::MAX)
            + managed;
        assert!(
            size < 1000 * 1024,
            "{case}: {size} bytes, {:?}",
            p.summarised
        );
        eprintln!("{case}: {size} bytes, {:?}", p.summarised);
    }
    // A successful job of 1,000 nodes lists everything.
    let thousand: Vec<&str> = names[..1000].iter().map(String::as_str).collect();
    let j = with(job(&images, &thousand), |t| t.task.concurrency = Some(1000));
    let mut w = world(&thousand);
    for n in &thousand {
        w.set(nodeimage(
            n,
            0,
            &[
                (images[0], Some((Some(ImagePullPhase::Succeeded), ""))),
                (images[1], Some((Some(ImagePullPhase::Succeeded), ""))),
            ],
        ));
    }
    let p = w.plan(&j, 100);
    assert_eq!(p.summarised, Summary::Full);
    assert_eq!(
        row(&p, "edge-node-00999")
            .image_status
            .as_ref()
            .map(Vec::len),
        Some(2)
    );
}

#[test]
fn helpers() {
    assert_eq!(failure_event("check disk failed: 91% used > 80%"), "Check");
    assert_eq!(
        failure_event("check gpu is not supported (use disk, cpu or mem)"),
        "Check"
    );
    assert_eq!(
        failure_event("pull did not finish within activeDeadlineSeconds (20s) of createdAt"),
        "TimeOut"
    );
    assert_eq!(
        failure_event("node did not respond within 10m0s"),
        "TimeOut"
    );
    assert_eq!(failure_event("401 Unauthorized"), "Pull");
    assert_eq!(cap("abcdef", 4), "abc…");
    assert_eq!(cap("abc", 4), "abc");
    assert_eq!(rfc3339(at(0)), "2023-11-14T22:13:20Z");
}

#[test]
fn p2p_held_nodes_wait_in_init_with_the_reason() {
    use crate::engine::p2p::{observe::Observed, settings};
    let mut j = with(job(&[IMG_A], &["n1", "n2", "n3"]), |t| {
        t.task.concurrency = Some(3)
    });
    j.metadata.creation_timestamp = Some(crate::runtime::clock::api_time(at(0)));
    let w = world(&["n1", "n2", "n3"]);
    let annotations = BTreeMap::from([
        (
            nodeimage_api::p2p::AGENT.to_string(),
            "pods:p2p/app=agent".to_string(),
        ),
        (
            nodeimage_api::p2p::AGENT_MISSING.to_string(),
            "skip".to_string(),
        ),
    ]);
    let observed = Observed {
        settings: settings::read(&annotations, None).unwrap_or_default(),
        agents: BTreeMap::from([("n1".to_string(), true), ("n2".to_string(), false)]),
        ..Default::default()
    };
    let run = |p2p: &Result<Observed, String>, now: i64| {
        plan(Inputs {
            job: &j,
            nodes: &w.nodes,
            nodeimages: &w.nodeimages,
            edge_only: true,
            registry_cap: None,
            secrets: Secrets::None,
            p2p,
            now: at(now),
        })
    };
    let p = run(&Ok(observed.clone()), 10);
    assert_eq!(p.write_to, vec!["n1"]);
    // The started node's entries say its agent was Ready.
    let ready = nodeimage_api::kruise::TagP2p {
        agent: Some(nodeimage_api::kruise::AgentUse::Ready),
        ..Default::default()
    };
    assert_eq!(p.p2p, BTreeMap::from([("n1".to_string(), ready)]));
    assert_eq!(sea(&p, "n2").0, "Init");
    // The job looks again when n2's wait ends (600 s after its creation).
    let near = run(&Ok(observed.clone()), 580);
    assert_eq!(near.requeue_after, Some(std::time::Duration::from_secs(20)));
    let why = node(&p, "n2").phase.reason.clone().unwrap_or_default();
    assert!(
        why.starts_with("waits for the P2P agent Pods p2p/app=agent"),
        "{why}"
    );
    // Past the wait (600 s from the job's creation), a node without a Ready agent is skipped: it fails before it starts.
    let p = run(&Ok(observed), 10_000);
    assert_eq!(sea(&p, "n3").0, "Failed");
    let why = node(&p, "n3").phase.reason.clone().unwrap_or_default();
    assert!(why.starts_with("skipped: the P2P agent"), "{why}");
    // An invalid setting fails the job before any node starts.
    let p = run(&Err("annotation nodeimage.dev/p2p-seeds: bad".into()), 10);
    assert!(p.write_to.is_empty());
    assert_eq!(p.status.job.state.as_deref(), Some("Failed"));
}
