use super::*;
use crate::engine::nodetasks::fixtures::{self, World, at, cloud, sea_of, tuple};
use crate::messages::cap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use nodeimage_api::kruise::{ImagePullPhase, ImageTagSpec, TagUpgradeStatus};
use nodeimage_api::kubeedge::NodeUpgradeJobSpec;

const UID: &str = "uid-upgrade";
const IMAGE: &str = "kubeedge/installation-package";
const V: &str = "v1.17.0";

fn job(nodes: &[&str]) -> NodeUpgradeJob {
    let mut j = NodeUpgradeJob::new(
        "up",
        NodeUpgradeJobSpec {
            version: Some(V.into()),
            task: fixtures::on_nodes(nodes),
            ..Default::default()
        },
    );
    j.metadata.uid = Some(UID.into());
    j
}

fn with(mut j: NodeUpgradeJob, f: impl FnOnce(&mut NodeUpgradeJobSpec)) -> NodeUpgradeJob {
    f(&mut j.spec);
    j
}

/// What a node reports on the job's entry.
#[derive(Clone, Default)]
struct Report {
    phase: Option<ImagePullPhase>,
    state: Option<UpgradeState>,
    message: Option<&'static str>,
    progress: Option<i32>,
    from: Option<&'static str>,
    to: Option<&'static str>,
}

fn rep(phase: ImagePullPhase, state: Option<UpgradeState>) -> Report {
    Report {
        phase: Some(phase),
        state,
        ..Default::default()
    }
}

/// A NodeImage holding the job's entry (written at `created`) with `report`,
/// or no entry when `created` is None.
fn nodeimage(name: &str, created: Option<i64>, report: Option<Report>) -> Arc<NodeImage> {
    let Some(c) = created else {
        return fixtures::nodeimage_with(name, Vec::new());
    };
    let owner = ObjectReference {
        kind: Some(KIND.into()),
        name: Some("up".into()),
        uid: Some(UID.into()),
        ..Default::default()
    };
    let entry = ImageTagSpec {
        purpose: Purpose::Upgrade,
        upgrade: Some(Box::new(TagUpgrade {
            await_confirmation: false,
            version: V.into(),
            job: "up".into(),
            image_digests: None,
        })),
        ..fixtures::tag_entry(V, c, owner)
    };
    let status = report.map(|r| ImageTagStatus {
        tag: V.into(),
        purpose: Purpose::Upgrade,
        version: Some(0),
        phase: r.phase.unwrap_or_default(),
        message: r.message.map(Into::into),
        progress: r.progress,
        upgrade: TagUpgradeStatus {
            state: r.state,
            from_version: r.from.map(Into::into),
            to_version: r.to.map(Into::into),
            ..Default::default()
        }
        .boxed(),
        ..Default::default()
    });
    fixtures::nodeimage_with(name, vec![(IMAGE.into(), entry, status)])
}

/// Ready nodes with empty NodeImages.
fn world(names: &[&str]) -> World {
    World::ready(names, |n| nodeimage(n, None, None))
}

trait Plans {
    fn plan(&self, j: &NodeUpgradeJob, now: i64) -> Plan;
}

impl Plans for World {
    fn plan(&self, j: &NodeUpgradeJob, now: i64) -> Plan {
        plan(Inputs {
            job: j,
            nodes: &self.nodes,
            versions: &self.versions,
            nodeimages: &self.nodeimages,
            edge_only: true,
            upgrade_images: &UpgradeImages::default(),
            registry_cap: None,
            now: at(now),
        })
    }
}

fn recorded(j: NodeUpgradeJob, p: &Plan) -> NodeUpgradeJob {
    fixtures::recorded(j, &p.status)
}

fn node<'a>(p: &'a Plan, name: &str) -> &'a TaskStatus {
    let rows = p.status.node_status.iter().flatten();
    fixtures::task_of(rows.map(|s| &s.task), name)
}

/// (state, event, action, reason) of a node.
fn sea(p: &Plan, name: &str) -> (String, String, String, String) {
    sea_of(node(p, name))
}

fn job_sea(p: &Plan) -> (String, String, String) {
    (
        p.status.job.state.clone().unwrap_or_default(),
        p.status.job.event.clone().unwrap_or_default(),
        p.status.job.action.clone().unwrap_or_default(),
    )
}

fn reasons(p: &Plan) -> Vec<&'static str> {
    p.events.iter().map(|e| e.reason).collect()
}

#[test]
fn entry_replaces_the_tag_and_defaults_the_image() {
    let cases: Vec<(Option<&str>, Result<(&str, &str), &str>)> = vec![
        (None, Ok((IMAGE, V))),
        (Some(""), Ok((IMAGE, V))),
        (
            Some("127.0.0.1:5000/team/installation-package:v0.0.1"),
            Ok(("127.0.0.1:5000/team/installation-package", V)),
        ),
        (
            Some(
                "docker.io/kubeedge/installation-package@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            ),
            Ok((IMAGE, V)),
        ),
        (Some("Not An Image"), Err("spec.image")),
    ];
    for (image, want) in cases {
        let j = with(job(&["n1"]), |s| s.image = image.map(str::to_string));
        match (upgrade_entry(&j, &UpgradeImages::Any), want) {
            (Ok(e), Ok((i, t))) => assert_eq!((e.image.as_str(), e.tag.as_str()), (i, t)),
            (Err(e), Err(w)) => assert!(e.contains(w), "{e}"),
            (got, want) => panic!("{image:?}: got {got:?}, want {want:?}"),
        }
    }
    let j = with(job(&["n1"]), |s| s.version = Some("1.17".into()));
    assert!(upgrade_entry(&j, &UpgradeImages::Any).is_err());
    let p = world(&["n1"]).plan(&j, 0);
    assert_eq!(
        job_sea(&p),
        ("Failed".into(), "Init".into(), "Failure".into())
    );
    assert!(p.finished && p.write_to.is_empty());
}

/// An image outside `--upgrade-images` fails the job before any node acts:
/// no entry is written, the reason and the Warning event name the image and
/// the flag; an allowed one starts the nodes.
#[test]
fn an_image_outside_the_allowed_list_is_refused_before_any_node_acts() {
    let w = world(&["n1", "n2"]);
    let allowed = |list: &[&str]| {
        let items: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        UpgradeImages::from_list(&items).expect("a valid list")
    };
    let cases: Vec<(Vec<&str>, Option<&str>, bool)> = vec![
        (vec![IMAGE], None, true),
        (
            vec![IMAGE],
            Some("kubeedge/installation-package:v9.9.9"),
            true,
        ),
        (
            vec![IMAGE],
            Some("evil.example.com/kubeedge/installation-package"),
            false,
        ),
        (
            vec![IMAGE],
            Some("127.0.0.1:5000/e2e/installation-package"),
            false,
        ),
        (
            vec!["127.0.0.1:5000/*"],
            Some("127.0.0.1:5000/e2e/installation-package"),
            true,
        ),
        (vec!["127.0.0.1:5000/*"], None, false),
        (vec![""], None, false),
    ];
    for (list, image, starts) in cases {
        let set = allowed(&list);
        let j = with(job(&["n1", "n2"]), |s| s.image = image.map(str::to_string));
        let p = plan(Inputs {
            job: &j,
            nodes: &w.nodes,
            versions: &w.versions,
            nodeimages: &w.nodeimages,
            edge_only: true,
            upgrade_images: &set,
            registry_cap: None,
            now: at(0),
        });
        if starts {
            assert_eq!(p.write_to, vec!["n1"], "{list:?} {image:?}");
            continue;
        }
        assert!(
            p.write_to.is_empty() && p.request.is_none(),
            "{list:?} {image:?}"
        );
        assert_eq!(
            job_sea(&p),
            ("Failed".into(), "Init".into(), "Failure".into()),
            "{image:?}"
        );
        assert!(p.finished);
        let reason = p.status.job.reason.clone().unwrap_or_default();
        assert!(
            reason.contains("is not an allowed upgrade image"),
            "{reason}"
        );
        assert!(reason.contains("--upgrade-images"), "{reason}");
        assert!(reason.contains(image.unwrap_or(IMAGE)), "{reason}");
        let warned = p.events.iter().any(|e| e.note.contains(&reason));
        assert!(warned, "{:?}", p.events);
        let failed = p
            .status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Failed" && c.status == "True");
        assert!(failed, "{:?}", p.status.conditions);
    }
}

/// `imageDigestGatter` reaches every node's entry as the digests to check;
/// a gatter that names no usable digest fails the job before any node acts.
#[test]
fn the_digest_gatter_goes_to_the_entry_or_fails_the_job() {
    use nodeimage_api::kubeedge::{ImageDigestGatter, RegistryApi};
    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let w = world(&["n1"]);
    let registry_only = ImageDigestGatter {
        registry_api: Some(RegistryApi {
            host: "r.example.com".into(),
            token: "secret-token".into(),
        }),
        ..Default::default()
    };
    let v1 = ImageDigestGatter {
        value: Some(A.into()),
        ..registry_only.clone()
    };
    let v2 = ImageDigestGatter {
        amd64: Some(A.into()),
        arm64: Some(String::new()),
        ..Default::default()
    };
    let malformed = ImageDigestGatter {
        amd64: Some("sha256:nope".into()),
        ..Default::default()
    };
    let digests = |any: Option<&str>, amd64: Option<&str>| UpgradeDigests {
        any: any.map(Into::into),
        amd64: amd64.map(Into::into),
        arm64: None,
    };
    let cases: Vec<(
        Option<ImageDigestGatter>,
        Result<Option<UpgradeDigests>, &str>,
    )> = vec![
        (None, Ok(None)),
        (Some(v1), Ok(Some(digests(Some(A), None)))),
        (Some(v2), Ok(Some(digests(None, Some(A))))),
        (
            Some(registry_only),
            Err("registryAPI alone is not supported"),
        ),
        (Some(malformed), Err("spec.imageDigestGatter.amd64")),
    ];
    for (g, want) in cases {
        let j = with(job(&["n1"]), |s| s.image_digest_gatter = g.clone());
        let p = w.plan(&j, 0);
        match want {
            Ok(d) => {
                let (_, up) = p.request.clone().expect("the entry");
                assert_eq!(up.image_digests, d, "{g:?}");
                assert_eq!(p.write_to, vec!["n1"]);
            }
            Err(why) => {
                assert!(p.write_to.is_empty() && p.request.is_none(), "{g:?}");
                assert_eq!(
                    job_sea(&p),
                    ("Failed".into(), "Init".into(), "Failure".into())
                );
                let reason = p.status.job.reason.clone().unwrap_or_default();
                assert!(reason.contains(why), "{reason}");
                assert!(!reason.contains("secret-token"), "{reason}");
            }
        }
    }
}

#[test]
fn selection_and_nodes_that_cannot_start() {
    let mut w = world(&["n1", "n2", "n3", "n4"]);
    if let Some(n) = w.nodes.get_mut("n2") {
        n.ready = false;
    }
    if let Some(n) = w.nodes.get_mut("n4") {
        n.wants_nodeimage = false;
    }
    for name in ["n1", "n3"] {
        if let Some(n) = w.nodes.get_mut(name) {
            n.labels.insert("edge".into(), "yes".into());
        }
    }

    let j = with(job(&["n3", "missing", "n2", "n3", "n4"]), |s| {
        s.task.concurrency = Some(5);
        s.task.failure_tolerate = Some("1".into());
    });
    let p = w.plan(&j, 0);
    let order: Vec<String> = p
        .status
        .node_status
        .iter()
        .flatten()
        .filter_map(|t| t.task.node_name.clone())
        .collect();
    assert_eq!(order, vec!["n3", "missing", "n2", "n4"]);
    assert_eq!(
        sea(&p, "missing"),
        tuple("Failed", "Init", "Failure", "not found")
    );
    assert_eq!(
        sea(&p, "n2"),
        tuple("Failed", "Init", "Failure", "not ready")
    );
    assert_eq!(sea(&p, "n4").0, "Failed");
    assert_eq!(p.write_to, vec!["n3"]);

    let j = with(job(&[]), |s| {
        s.task.node_names = None;
        s.task.label_selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("edge".into(), "yes".into())])),
            ..Default::default()
        });
    });
    let p = w.plan(&j, 0);
    let order: Vec<String> = p
        .status
        .node_status
        .iter()
        .flatten()
        .filter_map(|t| t.task.node_name.clone())
        .collect();
    assert_eq!(order, vec!["n1", "n3"]);

    let j = with(job(&[]), |s| s.task.node_names = None);
    assert_eq!(w.plan(&j, 0).status.job.state.as_deref(), Some("Failed"));
    let j = with(job(&[]), |s| {
        s.task.node_names = None;
        s.task.label_selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("edge".into(), "no".into())])),
            ..Default::default()
        });
    });
    let p = w.plan(&j, 0);
    assert_eq!(
        p.status.job.reason.as_deref(),
        Some("no node matches labelSelector")
    );
}

#[test]
fn concurrency_one_upgrades_in_order_and_maps_each_step() {
    let mut w = world(&["n1", "n2", "n3"]);
    let j = job(&["n1", "n2", "n3"]);

    // First look: n1 starts, the others wait.
    let p = w.plan(&j, 0);
    assert_eq!(p.write_to, vec!["n1"]);
    let (req, up) = p.request.clone().expect("a request");
    assert_eq!((req.image.as_str(), req.tag.as_str()), (IMAGE, V));
    assert_eq!(
        up,
        TagUpgrade {
            await_confirmation: false,
            version: V.into(),
            job: "up".into(),
            image_digests: None,
        }
    );
    assert_eq!(req.owner.kind.as_deref(), Some(KIND));
    assert_eq!(req.pull_policy.active_deadline_seconds, None);
    assert_eq!(req.pull_policy.timeout_seconds, Some(300));
    assert_eq!(reasons(&p), vec!["Started"]);
    assert_eq!(sea(&p, "n1"), tuple("Checking", "Check", "", ""));
    assert_eq!(sea(&p, "n2"), tuple("Init", "", "", ""));
    assert_eq!(
        job_sea(&p),
        ("Upgrading".into(), "Upgrade".into(), "".into())
    );
    let mut j = recorded(j, &p);

    // n1 walks through the daemon's steps; n2 and n3 keep waiting.
    use ImagePullPhase::*;
    use UpgradeState::*;
    let steps: Vec<(Report, (&str, &str, &str, &str))> = vec![
        (
            rep(ImagePullPhase::Pulling, Some(Checking)),
            ("Checking", "Check", "", ""),
        ),
        (
            Report {
                progress: Some(40),
                ..rep(ImagePullPhase::Pulling, Some(UpgradeState::Pulling))
            },
            (
                "Checking",
                "Check",
                "",
                "pulling kubeedge/installation-package:v1.17.0 (40%)",
            ),
        ),
        (
            rep(ImagePullPhase::Pulling, Some(BackingUp)),
            ("BackingUp", "BackUp", "", ""),
        ),
        (
            rep(ImagePullPhase::Pulling, Some(Upgrading)),
            ("Upgrading", "Upgrade", "", ""),
        ),
        (
            Report {
                from: Some("v1.16.0"),
                to: Some(V),
                ..rep(Succeeded, Some(Successful))
            },
            (
                "Successful",
                "Upgrade",
                "Success",
                "upgraded from v1.16.0 to v1.17.0",
            ),
        ),
    ];
    for (i, (report, want)) in steps.into_iter().enumerate() {
        w.set(nodeimage("n1", Some(0), Some(report)));
        let p = w.plan(&j, 10 + i as i64);
        assert_eq!(
            sea(&p, "n1"),
            tuple(want.0, want.1, want.2, want.3),
            "step {i}"
        );
        if want.0 != "Successful" {
            assert_eq!(p.write_to, vec!["n1"], "step {i}: only n1 works");
            assert!(p.events.is_empty(), "step {i}: {:?}", p.events);
        } else {
            assert_eq!(p.write_to, vec!["n2"], "n2 starts when n1 is done");
            assert_eq!(reasons(&p), vec!["NodeUpgraded"]);
            assert_eq!(p.status.current_version.as_deref(), Some(V));
            assert_eq!(p.status.historic_version.as_deref(), Some("v1.16.0"));
            assert!(p.release_from.is_empty(), "not recorded yet");
        }
        j = recorded(j, &p);
    }
    // Recorded: n1's entry is taken back.
    w.set(nodeimage("n2", Some(20), None));
    let p = w.plan(&j, 20);
    assert_eq!(p.release_from, vec!["n1"]);
    assert_eq!(sea(&p, "n2").0, "Checking");
    assert_eq!(sea(&p, "n3").0, "Init");
}

#[test]
fn failures_map_to_their_step_and_rollback_is_a_failure() {
    use ImagePullPhase::*;
    use UpgradeState::*;
    let cases: Vec<(&str, Report, (&str, &str, &str), &str)> = vec![
        (
            "rolled back",
            Report {
                message: Some("upgrade failed, rolled back: boom"),
                ..rep(Failed, Some(RolledBack))
            },
            ("Failed", "Rollback", "Success"),
            "NodeRolledBack",
        ),
        (
            "rollback failed too",
            Report {
                message: Some("upgrade failed: boom; rollback failed too: bang"),
                ..rep(Failed, Some(RollingBack))
            },
            ("Failed", "Rollback", "Failure"),
            "NodeFailed",
        ),
        (
            "backup failed",
            Report {
                message: Some("backup failed: no space"),
                ..rep(Failed, Some(BackingUp))
            },
            ("Failed", "BackUp", "Failure"),
            "NodeFailed",
        ),
        (
            "upgrades disabled",
            Report {
                message: Some("upgrades are disabled on this node"),
                ..rep(Failed, Some(Checking))
            },
            ("Failed", "Check", "Failure"),
            "NodeFailed",
        ),
        (
            "pull failed",
            Report {
                message: Some("pull failed after 3 attempts: not found"),
                ..rep(Failed, Some(UpgradeState::Pulling))
            },
            ("Failed", "Check", "Failure"),
            "NodeFailed",
        ),
        (
            "a daemon that does not know upgrades",
            rep(Succeeded, None),
            ("Failed", "Check", "Failure"),
            "NodeFailed",
        ),
        (
            "node did not respond (housekeeping)",
            Report {
                message: Some("node did not respond within 10m0s"),
                ..rep(Failed, None)
            },
            ("Failed", "TimeOut", "Failure"),
            "NodeFailed",
        ),
    ];
    for (name, report, want, event) in cases {
        let w = {
            let mut w = world(&["n1"]);
            w.set(nodeimage("n1", Some(0), Some(report.clone())));
            w
        };
        let j = recorded(job(&["n1"]), &world(&["n1"]).plan(&job(&["n1"]), 0));
        let p = w.plan(&j, 5);
        let got = sea(&p, "n1");
        assert_eq!(
            (got.0.as_str(), got.1.as_str(), got.2.as_str()),
            want,
            "{name}"
        );
        let expected_reason = report.message.unwrap_or(NO_UPGRADE_SUPPORT);
        assert_eq!(got.3, expected_reason, "{name}");
        assert_eq!(reasons(&p), vec![event, "Finished"], "{name}");
        assert_eq!(p.status.job.state.as_deref(), Some("Failed"), "{name}");
        assert_eq!(p.status.current_version, None, "{name}");
    }
}

#[test]
fn nodes_at_the_version_are_skipped_and_versions_recorded() {
    let mut w = world(&["n1", "n2"]);
    w.version("n1", V).version("n2", "v1.15.1");
    let j = with(job(&["n1", "n2"]), |s| s.task.concurrency = Some(2));
    let p = w.plan(&j, 0);
    assert_eq!(
        sea(&p, "n1"),
        tuple(
            "Successful",
            "Check",
            "Success",
            "already at v1.17.0 (the Node's kubeletVersion); nothing to do"
        )
    );
    assert_eq!(p.write_to, vec!["n2"], "nothing is written for n1");
    assert_eq!(reasons(&p), vec!["Started", "NodeUpgraded"]);
    assert_eq!(p.status.current_version.as_deref(), Some(V));
    assert_eq!(p.status.historic_version.as_deref(), Some("v1.15.1"));
    let j = recorded(j, &p);

    // n2's daemon finds it at the version too (version file).
    w.set(nodeimage(
        "n2",
        Some(0),
        Some(Report {
            message: Some("already at v1.17.0; nothing to do"),
            from: Some(V),
            to: Some(V),
            ..rep(ImagePullPhase::Succeeded, Some(UpgradeState::Successful))
        }),
    ));
    // Its Node now reports the new version: the historic one is kept.
    w.version("n2", V);
    let p = w.plan(&j, 3);
    assert_eq!(
        sea(&p, "n2"),
        tuple(
            "Successful",
            "Upgrade",
            "Success",
            "already at v1.17.0; nothing to do"
        )
    );
    assert_eq!(
        job_sea(&p),
        ("Successful".into(), "Upgrade".into(), "Success".into())
    );
    assert_eq!(p.status.historic_version.as_deref(), Some("v1.15.1"));
    assert_eq!(p.status.job.reason, None);
}

#[test]
fn timeouts_free_the_slot_and_the_job_still_finishes() {
    let mut w = world(&["n1", "n2"]);
    let j = with(job(&["n1", "n2"]), |s| {
        s.task.timeout_seconds = Some(30);
        s.task.failure_tolerate = Some("0.6".into());
    });
    let p = w.plan(&j, 0);
    assert_eq!(p.write_to, vec!["n1"]);
    assert_eq!(p.requeue_after, Some(Duration::from_secs(30)));
    let j = recorded(j, &p);
    // n1's daemon never answers.
    w.set(nodeimage("n1", Some(0), None));
    let p = w.plan(&j, 10);
    assert_eq!(sea(&p, "n1").0, "Checking");
    assert_eq!(p.requeue_after, Some(Duration::from_secs(20)));
    let p = w.plan(&j, 30);
    assert_eq!(sea(&p, "n1"), fixtures::timed_out(30));
    assert_eq!(p.write_to, vec!["n2"]);
    let j = recorded(j, &p);
    w.set(nodeimage(
        "n2",
        Some(30),
        Some(rep(
            ImagePullPhase::Succeeded,
            Some(UpgradeState::Successful),
        )),
    ));
    let p = w.plan(&j, 40);
    assert!(p.finished);
    assert_eq!(p.release_from, vec!["n1"], "the timed-out node stops");
    // Tolerance 0.6: 1 of 2 failed is tolerated.
    assert_eq!(
        job_sea(&p),
        ("Successful".into(), "Upgrade".into(), "Success".into())
    );
    assert_eq!(
        p.status.job.reason.as_deref(),
        Some("1 of 2 nodes failed (50.0%), below failureTolerate 0.6")
    );
    let j = recorded(j, &p);
    // Finished: nothing more, every entry goes back.
    let p = w.plan(&j, 50);
    assert!(p.finished && p.events.is_empty() && p.request.is_none());
    assert_eq!(p.release_from, vec!["n1", "n2"]);
}

#[test]
fn failure_tolerance_table() {
    // 1 of 2 nodes fails: KubeEdge fails the job at exactly the tolerance.
    for (tolerate, want) in [
        (Some("0.5"), "Failed"),
        (Some("0.51"), "Successful"),
        (Some("0"), "Failed"),
        (None, "Failed"),
        (Some("1"), "Successful"),
    ] {
        let mut w = world(&["n1", "n2"]);
        let j = with(job(&["n1", "n2"]), |s| {
            s.task.concurrency = Some(2);
            s.task.failure_tolerate = tolerate.map(str::to_string);
        });
        let j = recorded(j.clone(), &w.plan(&j, 0));
        w.set(nodeimage(
            "n1",
            Some(0),
            Some(rep(
                ImagePullPhase::Succeeded,
                Some(UpgradeState::Successful),
            )),
        ));
        w.set(nodeimage(
            "n2",
            Some(0),
            Some(Report {
                message: Some("upgrade failed, rolled back: x"),
                ..rep(ImagePullPhase::Failed, Some(UpgradeState::RolledBack))
            }),
        ));
        let p = w.plan(&j, 5);
        assert_eq!(p.status.job.state.as_deref(), Some(want), "{tolerate:?}");
        assert_eq!(
            reasons(&p),
            vec!["NodeUpgraded", "NodeRolledBack", "Finished"]
        );
    }
}

#[test]
fn node_times_stay_while_the_phase_does() {
    let mut w = world(&["n1"]);
    let j = job(&["n1"]);
    let p = w.plan(&j, 0);
    let t0 = node(&p, "n1").phase.time.clone();
    assert_eq!(t0, Some(rfc3339(at(0))));
    let j = recorded(j, &p);
    w.set(nodeimage(
        "n1",
        Some(0),
        Some(rep(ImagePullPhase::Pulling, Some(UpgradeState::Checking))),
    ));
    let p = w.plan(&j, 7);
    assert_eq!(node(&p, "n1").phase.time, t0, "still Checking");
    let j = recorded(j, &p);
    w.set(nodeimage(
        "n1",
        Some(0),
        Some(rep(ImagePullPhase::Pulling, Some(UpgradeState::Upgrading))),
    ));
    let p = w.plan(&j, 9);
    assert_eq!(node(&p, "n1").phase.time, Some(rfc3339(at(9))));
    assert_eq!(
        p.status.job.time,
        j.status.as_ref().and_then(|s| s.job.time.clone())
    );
}

#[test]
fn long_reasons_are_capped_and_summarised() {
    let long = "x".repeat(5000);
    let mut rows: Vec<TaskStatus> = (0..3000)
        .map(|i| TaskStatus {
            node_name: Some(format!("node-{i:05}")),
            phase: nodeimage_api::kubeedge::JobState {
                state: Some(if i % 2 == 0 { "Successful" } else { "Failed" }.into()),
                reason: Some(cap(&long, MAX_REASON_CHARS)),
                time: Some(rfc3339(at(0))),
                ..Default::default()
            },
        })
        .collect();
    let budget = crate::engine::nodetasks::status_budget(0);
    assert!(2 * rows_size(&rows) > budget);
    summarise(&mut rows, budget);
    // The v1alpha2 fields about double the rows.
    assert!(2 * rows_size(&rows) <= budget);
    assert!(
        rows.iter()
            .all(|r| r.node_name.is_some() && r.phase.state.is_some())
    );
}

/// n1 failed its upgrade (rolled back).
fn rolled_back() -> Option<Report> {
    Some(Report {
        message: Some("upgrade failed, rolled back: x"),
        ..rep(ImagePullPhase::Failed, Some(UpgradeState::RolledBack))
    })
}

#[test]
fn failures_at_the_tolerance_start_no_more_nodes() {
    // Three nodes one at a time, tolerance 0.3: the first failure (1 >= 0.9)
    // stops the rollout, as KubeEdge v1alpha1 does; the job fails at once
    // since no node is working.
    let mut w = world(&["n1", "n2", "n3"]);
    let j = with(job(&["n1", "n2", "n3"]), |s| {
        s.task.failure_tolerate = Some("0.3".into());
    });
    let p = w.plan(&j, 0);
    assert_eq!(p.write_to, vec!["n1"]);
    let j = recorded(j, &p);
    w.set(nodeimage("n1", Some(0), rolled_back()));
    let p = w.plan(&j, 5);
    assert!(p.write_to.is_empty(), "no node starts past the tolerance");
    assert!(p.finished);
    assert_eq!(job_sea(&p).0, "Failed");
    assert_eq!(
        p.status.job.reason.as_deref(),
        Some("1 of 3 nodes failed (33.3%), reaching failureTolerate 0.3; 2 nodes not started")
    );
    assert_eq!(sea(&p, "n2").0, "Init");
    let row = |n: &str| {
        p.status
            .node_status
            .iter()
            .flatten()
            .find(|r| r.task.node_name.as_deref() == Some(n))
            .cloned()
            .unwrap_or_default()
    };
    assert_eq!(row("n2").phase.as_deref(), Some("Pending"));
    assert_eq!(row("n1").phase.as_deref(), Some("Failure"));
    assert_eq!(p.status.phase.as_deref(), Some("Failure"));

    // Two at a time: n1 fails while n2 works; n2 finishes, n3 never starts.
    let mut w = world(&["n1", "n2", "n3"]);
    let j = with(job(&["n1", "n2", "n3"]), |s| {
        s.task.failure_tolerate = Some("0.3".into());
        s.task.concurrency = Some(2);
    });
    let p = w.plan(&j, 0);
    assert_eq!(p.write_to, vec!["n1", "n2"]);
    let j = recorded(j, &p);
    w.set(nodeimage("n1", Some(0), rolled_back()));
    w.set(nodeimage(
        "n2",
        Some(0),
        Some(rep(ImagePullPhase::Pulling, None)),
    ));
    let p = w.plan(&j, 5);
    assert!(!p.finished, "n2 still works");
    assert_eq!(p.write_to, vec!["n2"]);
    assert!(
        p.status
            .job
            .reason
            .as_deref()
            .is_some_and(|r| r.ends_with("failureTolerate reached: starting no more nodes")),
        "{:?}",
        p.status.job.reason
    );
    let j = recorded(j, &p);
    w.set(nodeimage(
        "n2",
        Some(0),
        Some(rep(
            ImagePullPhase::Succeeded,
            Some(UpgradeState::Successful),
        )),
    ));
    let p = w.plan(&j, 10);
    assert!(p.finished && p.write_to.is_empty());
    assert_eq!(job_sea(&p).0, "Failed");
    assert_eq!(sea(&p, "n3").0, "Init");
}

#[test]
fn only_edge_nodes_unless_told_otherwise() {
    let mut w = world(&["n1", "n2"]);
    w.nodes.insert("cloud".into(), cloud(&[]));
    w.set(nodeimage("cloud", None, None));
    // A selector matching every node takes only the edge nodes.
    let j = with(job(&[]), |s| {
        s.task.node_names = None;
        s.task.label_selector = Some(LabelSelector::default());
        s.task.concurrency = Some(5);
    });
    let p = w.plan(&j, 0);
    let order: Vec<String> = p
        .status
        .node_status
        .iter()
        .flatten()
        .filter_map(|t| t.task.node_name.clone())
        .collect();
    assert_eq!(order, vec!["n1", "n2"]);
    // A named cloud node fails at once with the reason.
    let j = with(job(&["cloud", "n1"]), |s| {
        s.task.concurrency = Some(5);
        s.task.failure_tolerate = Some("1".into());
    });
    let p = w.plan(&j, 0);
    assert_eq!(
        sea(&p, "cloud"),
        tuple(
            "Failed",
            "Init",
            "Failure",
            crate::engine::nodetasks::NOT_EDGE
        )
    );
    assert_eq!(p.write_to, vec!["n1"]);
    // Opted in (--kubeedge-all-nodes): the cloud node runs.
    let p = plan(Inputs {
        job: &j,
        nodes: &w.nodes,
        versions: &w.versions,
        nodeimages: &w.nodeimages,
        edge_only: false,
        upgrade_images: &UpgradeImages::default(),
        registry_cap: None,
        now: at(0),
    });
    assert_eq!(p.write_to, vec!["cloud", "n1"]);
}

#[test]
fn confirmation_table() {
    let mk = |require: Option<bool>, annotation: Option<&str>| {
        let mut j = with(job(&["n1", "n2"]), |s| s.require_confirmation = require);
        if let Some(a) = annotation {
            j.metadata.annotations = Some(BTreeMap::from([(
                CONFIRM_ANNOTATION.to_string(),
                a.to_string(),
            )]));
        }
        j
    };
    let cases = [
        (None, None, "n1", false),
        (Some(false), None, "n1", false),
        (Some(true), None, "n1", true),
        (Some(true), Some("n1"), "n1", false),
        (Some(true), Some("n1"), "n2", true),
        (Some(true), Some("n2, n1"), "n1", false),
        (Some(true), Some("*"), "n2", false),
        (Some(true), Some(""), "n1", true),
        (Some(true), Some("n10"), "n1", true),
    ];
    for (require, annotation, node, want) in cases {
        assert_eq!(
            awaits_confirmation(&mk(require, annotation), node),
            want,
            "{require:?} {annotation:?} {node}"
        );
    }
    // The plan marks the started nodes that must wait.
    let w = world(&["n1", "n2"]);
    let j = with(mk(Some(true), Some("n2")), |s| s.task.concurrency = Some(2));
    let p = w.plan(&j, 0);
    assert_eq!(p.write_to, vec!["n1", "n2"]);
    assert_eq!(p.awaiting, vec!["n1"]);
}

#[test]
fn conditions_follow_the_job_at_the_plan_time() {
    let j = job(&["n1"]);
    let w = world(&["n1"]);
    let p = w.plan(&j, 5);
    let since = |p: &Plan, t: &str| {
        crate::engine::conditions::condition_of(p.status.conditions.as_ref(), t)
    };
    let at5 = crate::runtime::clock::api_time(at(5));
    assert_eq!(since(&p, "Progressing"), Some(("True".into(), at5.clone())));
    // Still working later: the condition keeps its transition time.
    let p = w.plan(&recorded(j, &p), 9);
    assert_eq!(since(&p, "Progressing"), Some(("True".into(), at5)));
}
