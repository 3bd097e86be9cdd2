use super::*;
use crate::engine::conditions::condition_of;
use chrono::TimeZone;
use nodeimage_api::kruise::{ImagePullJobNodeSelector, NodeImageStatus};
use nodeimage_api::nodeimage_dev::imageremovaljob::BLOCKING;
use nodeimage_api::nodeimage_dev::{ImageRemoval, ImageRemovalJobSpec, RemovalResult, SkipReason};

const IMG: &str =
    "r.example/app@sha256:0000000000000000000000000000000000000000000000000000000000000001";
const UID: &str = "uid-irj";

fn t(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + secs, 0)
        .single()
        .unwrap_or_default()
}

fn job(f: impl FnOnce(&mut ImageRemovalJobSpec)) -> ImageRemovalJob {
    let mut spec = ImageRemovalJobSpec {
        images: vec![IMG.into()],
        selector: None,
        parallelism: Some(2),
        active_deadline_seconds: None,
        ttl_seconds_after_finished: None,
        force: None,
        block: None,
    };
    f(&mut spec);
    let mut j = ImageRemovalJob::new("cve", spec);
    j.metadata.uid = Some(UID.into());
    j
}

/// The job after a look whose status was written (what the next look reads).
fn after(mut j: ImageRemovalJob, p: &Plan) -> ImageRemovalJob {
    j.status = Some(p.status.clone());
    j
}

fn node(ready: bool, labels: &[(&str, &str)]) -> NodeInfo {
    NodeInfo {
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ready,
        wants_nodeimage: true,
    }
}

/// A node's NodeImage: whether it holds the job's entry, and the answer's
/// results if it answered.
#[derive(Clone, Copy)]
enum Holds {
    Nothing,
    Entry,
    Answer(&'static [(RemovalResult, i64)]),
    /// Full of other jobs' entries.
    Full,
}

fn nodeimage(name: &str, holds: Holds) -> Arc<NodeImage> {
    let mut ni = NodeImage::new(name, Default::default());
    let mine = RemovalEntry {
        job: "cve".into(),
        uid: UID.into(),
        images: vec![IMG.into()],
        ..Default::default()
    };
    match holds {
        Holds::Nothing => {}
        Holds::Entry => ni.spec.removals = Some(vec![mine]),
        Holds::Answer(results) => {
            ni.spec.removals = Some(vec![mine]);
            ni.status = Some(NodeImageStatus {
                removals: Some(vec![RemovalStatus {
                    job: "cve".into(),
                    uid: UID.into(),
                    images: results
                        .iter()
                        .map(|(r, bytes)| ImageRemoval {
                            image: IMG.into(),
                            result: *r,
                            reason: (*r == RemovalResult::Skipped).then_some(SkipReason::Sandbox),
                            bytes_freed: (*bytes > 0).then_some(*bytes),
                            message: Some(format!("{r:?} here")),
                        })
                        .collect(),
                    completion_time: None,
                }]),
                ..Default::default()
            });
        }
        Holds::Full => {
            ni.spec.removals = Some(
                (0..removals::PER_NODE)
                    .map(|i| RemovalEntry {
                        job: format!("other-{i}"),
                        uid: format!("u{i}"),
                        images: vec![IMG.into()],
                        ..Default::default()
                    })
                    .collect(),
            );
        }
    }
    Arc::new(ni)
}

struct World {
    nodes: BTreeMap<String, NodeInfo>,
    nodeimages: BTreeMap<String, Arc<NodeImage>>,
}

fn world(nodes: &[(&str, bool, Holds)]) -> World {
    World {
        nodes: nodes
            .iter()
            .map(|(n, ready, _)| (n.to_string(), node(*ready, &[("pool", "a")])))
            .collect(),
        nodeimages: nodes
            .iter()
            .map(|(n, _, h)| (n.to_string(), nodeimage(n, *h)))
            .collect(),
    }
}

fn run(j: &ImageRemovalJob, w: &World, now: DateTime<Utc>) -> Plan {
    plan(Inputs {
        job: j,
        nodes: &w.nodes,
        nodeimages: &w.nodeimages,
        now,
    })
}

fn counts(s: &ImageRemovalJobStatus) -> (i32, i32, i32, i32, i32) {
    (s.desired, s.active, s.succeeded, s.kept, s.failed)
}

#[test]
fn nodes_take_turns_and_count_by_their_answers() {
    use Holds::*;
    use RemovalResult::*;
    let removed: &[(RemovalResult, i64)] = &[(Removed, 100)];
    let gone: &[(RemovalResult, i64)] = &[(NotPresent, 0)];
    let in_use: &[(RemovalResult, i64)] = &[(InUse, 0)];
    let failed: &[(RemovalResult, i64)] = &[(Failed, 0)];
    type Row = (
        &'static str,
        Vec<(&'static str, bool, Holds)>,
        Vec<&'static str>,
        (i32, i32, i32, i32, i32),
        bool,
    );
    let rows: Vec<Row> = vec![
        (
            "a new job starts parallelism nodes, in name order",
            vec![
                ("n1", true, Nothing),
                ("n2", true, Nothing),
                ("n3", true, Nothing),
            ],
            vec!["n1", "n2"],
            (3, 2, 0, 0, 0),
            false,
        ),
        (
            "an unanswered entry holds a turn",
            vec![
                ("n1", true, Entry),
                ("n2", true, Nothing),
                ("n3", true, Nothing),
            ],
            vec!["n2"],
            (3, 2, 0, 0, 0),
            false,
        ),
        (
            "answers free turns, and count",
            vec![
                ("n1", true, Answer(removed)),
                ("n2", true, Answer(in_use)),
                ("n3", true, Nothing),
            ],
            vec!["n3"],
            (3, 1, 1, 1, 0),
            false,
        ),
        (
            "a node that is not ready waits; others go past it",
            vec![("n1", false, Nothing), ("n2", true, Nothing)],
            vec!["n2"],
            (2, 1, 0, 0, 0),
            false,
        ),
        (
            "a node whose removal places are taken waits",
            vec![("n1", true, Full), ("n2", true, Answer(gone))],
            vec![],
            (2, 0, 1, 0, 0),
            false,
        ),
        (
            "every node answered: the job ends",
            vec![("n1", true, Answer(removed)), ("n2", true, Answer(failed))],
            vec![],
            (2, 0, 1, 0, 1),
            true,
        ),
    ];
    for (name, nodes, want_writes, want_counts, want_finished) in rows {
        let w = world(&nodes);
        let p = run(&job(|_| {}), &w, t(0));
        assert_eq!(p.write_to, want_writes, "{name}");
        assert_eq!(counts(&p.status), want_counts, "{name}");
        assert_eq!(p.finished, want_finished, "{name}");
    }
}

#[test]
fn the_status_explains_itself() {
    use Holds::*;
    use RemovalResult::*;
    let w = world(&[
        ("n1", true, Answer(&[(Removed, 100), (NotPresent, 0)])),
        ("n2", true, Answer(&[(Removed, 50), (InUse, 0)])),
        ("n3", true, Answer(&[(Failed, 0)])),
        ("n4", true, Full),
    ]);
    let p = run(&job(|_| {}), &w, t(0));
    assert_eq!(p.status.bytes_freed, 150);
    assert_eq!(p.status.failed_nodes, Some(vec!["n3".to_string()]));
    let m = p.status.message.clone().unwrap_or_default();
    for part in [
        "3 of 4 nodes done",
        "1 removed every image, 1 kept some, 1 failed",
        "150 bytes freed",
        "waiting: n4: its 8 removal places are taken (by other-0",
        &format!("kept: n2: {IMG} InUse: InUse here"),
        &format!("failed: n3: {IMG} Failed: Failed here"),
    ] {
        assert!(m.contains(part), "{part:?} in {m:?}");
    }
}

#[test]
fn named_nodes_keep_their_order_and_a_missing_one_fails() {
    let w = world(&[("n1", true, Holds::Nothing), ("n2", true, Holds::Nothing)]);
    let j = job(|s| {
        s.selector = Some(ImagePullJobNodeSelector {
            names: Some(vec!["n2".into(), "gone".into(), "n1".into()]),
            ..Default::default()
        });
        s.parallelism = Some(1);
    });
    let p = run(&j, &w, t(0));
    assert_eq!(p.write_to, vec!["n2".to_string()]);
    assert_eq!(p.status.failed_nodes, Some(vec!["gone".to_string()]));
    assert!(
        p.events.iter().any(
            |e| e.reason == "NodeFailed" && e.note.contains("Node gone failed: node not found")
        ),
        "{:?}",
        p.events
    );
}

#[test]
fn labels_select_and_no_selector_takes_every_node() {
    let mut w = world(&[("n1", true, Holds::Nothing), ("n2", true, Holds::Nothing)]);
    if let Some(n) = w.nodes.get_mut("n2") {
        n.labels.insert("pool".into(), "b".into());
        n.wants_nodeimage = true;
    }
    w.nodes.insert(
        "virtual".into(),
        NodeInfo {
            wants_nodeimage: false,
            ..node(true, &[("pool", "a")])
        },
    );
    let by_label = job(|s| {
        s.selector = Some(ImagePullJobNodeSelector {
            match_labels: Some([("pool".to_string(), "b".to_string())].into()),
            ..Default::default()
        });
    });
    assert_eq!(run(&by_label, &w, t(0)).write_to, vec!["n2".to_string()]);
    let all = run(&job(|_| {}), &w, t(0));
    assert_eq!(
        all.status.desired, 2,
        "a node without a NodeImage is not selected"
    );
}

#[test]
fn the_deadline_fails_the_nodes_that_did_not_answer() {
    let w = world(&[
        ("n1", true, Holds::Answer(&[(RemovalResult::Removed, 1)])),
        ("n2", true, Holds::Entry),
        ("n3", false, Holds::Nothing),
    ]);
    let j = job(|s| s.active_deadline_seconds = Some(60));
    let first = run(&j, &w, t(0));
    assert!(!first.finished);
    assert_eq!(
        first.requeue_after,
        Some(Duration::from_secs(60)),
        "the deadline is the next due time"
    );
    let j = after(j, &first);
    let late = run(&j, &w, t(61));
    assert!(late.finished);
    assert!(late.write_to.is_empty());
    assert_eq!(counts(&late.status), (3, 0, 1, 0, 2));
    let m = late.status.message.clone().unwrap_or_default();
    assert!(m.starts_with("activeDeadlineSeconds (60s) passed"), "{m}");
    let failed = condition_of(late.status.conditions.as_ref(), "Failed");
    assert_eq!(failed.map(|(s, _)| s), Some("True".to_string()));
    assert!(late.events.iter().any(|e| e.reason == "Failed"));
}

#[test]
fn conditions_events_and_the_end() {
    use RemovalResult::*;
    let w0 = world(&[("n1", true, Holds::Nothing)]);
    let j = job(|s| s.ttl_seconds_after_finished = Some(30));
    let first = run(&j, &w0, t(0));
    assert_eq!(first.events.first().map(|e| e.reason), Some("Started"));
    let progressing = condition_of(first.status.conditions.as_ref(), "Progressing");
    assert_eq!(progressing.map(|(s, _)| s), Some("True".to_string()));
    let j = after(j, &first);
    let w1 = world(&[("n1", true, Holds::Answer(&[(InUse, 0)]))]);
    let done = run(&j, &w1, t(10));
    assert!(done.finished);
    assert_eq!(
        done.events.iter().map(|e| e.reason).collect::<Vec<_>>(),
        vec!["Completed"]
    );
    let reason = done
        .status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Complete")
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(reason, Some(("True".into(), "SomeImagesKept".into())));
    assert!(!done.delete);
    assert_eq!(
        done.requeue_after,
        Some(Duration::from_secs(30)),
        "the TTL, not a periodic look"
    );
    let j = after(j, &done);
    let again = run(&j, &w1, t(40));
    assert!(again.delete, "the TTL passed");
    assert!(again.events.is_empty(), "nothing new to say");
    assert_eq!(again.status.completion_time, done.status.completion_time);
}

#[test]
fn a_finished_block_job_serves_nodes_that_join_later() {
    let j = job(|s| s.block = Some(true));
    let w = world(&[("n1", true, Holds::Answer(&[(RemovalResult::Removed, 1)]))]);
    let done = run(&j, &w, t(0));
    assert!(done.finished);
    let blocking = condition_of(done.status.conditions.as_ref(), BLOCKING);
    assert_eq!(blocking.clone().map(|(s, _)| s), Some("True".to_string()));
    let j = after(j, &done);
    let w = world(&[
        ("n1", true, Holds::Answer(&[(RemovalResult::Removed, 1)])),
        ("n2", true, Holds::Nothing),
    ]);
    let later = run(&j, &w, t(100));
    assert_eq!(later.write_to, vec!["n2".to_string()]);
    assert_eq!(later.status.completion_time, done.status.completion_time);
    assert_eq!(
        condition_of(later.status.conditions.as_ref(), BLOCKING),
        blocking,
        "since the first look"
    );
    assert_eq!(later.requeue_after, Some(LOOK_AGAIN));
    // A finished job without block writes nowhere, whatever joins, and
    // keeps its record when a node's entry goes (wiped by hand).
    let plain = after(job(|_| {}), &done);
    let settled = run(&plain, &w, t(100));
    assert!(settled.write_to.is_empty());
    let wiped = world(&[("n1", true, Holds::Nothing)]);
    assert_eq!(
        run(&plain, &wiped, t(100)).status,
        done.status,
        "the record stays"
    );
}

#[test]
fn the_entry_carries_the_job() {
    let j = job(|s| {
        s.force = Some(true);
        s.block = Some(true);
    });
    let e = entry(&j, t(5));
    assert_eq!((e.job.as_str(), e.uid.as_str()), ("cve", UID));
    assert_eq!(e.images, vec![IMG.to_string()]);
    assert!(e.force && e.block);
    assert_eq!(e.created_at, Some(clock::api_time(t(5))));
}
