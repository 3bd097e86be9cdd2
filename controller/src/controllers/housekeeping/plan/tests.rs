//! Table tests of the housekeeping plan.

use super::*;
use nodeimage_api::interned::SharedStr;
use nodeimage_api::kruise::ImageTagPullPolicy;

/// The instant the fixtures are written relative to.
fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600, 0).expect("valid") // 2026-01-01T00:00:00Z
}

fn at(offset_secs: i64) -> DateTime<Utc> {
    t0() + TimeDelta::seconds(offset_secs)
}

/// Owners named `gone…` are gone, `unsynced…` unknown, anything else exists.
struct FakeOwners;

impl OwnerLookup for FakeOwners {
    fn state(&self, owner: &ObjectReference) -> OwnerState {
        match owner.name.as_deref() {
            Some(n) if n.starts_with("gone") => OwnerState::Gone,
            Some(n) if n.starts_with("unsynced") => OwnerState::Unknown,
            _ => OwnerState::Exists,
        }
    }
}

/// A spec tag fixture, `image:tag`.
#[derive(Clone)]
struct Tag {
    image: &'static str,
    spec: ImageTagSpec,
}

fn tag(image_tag: &'static str) -> Tag {
    let (image, t) = image_tag.split_once(':').expect("image:tag");
    Tag {
        image,
        spec: ImageTagSpec {
            tag: t.to_string().into(),
            created_at: Some(api_time(t0())),
            ..Default::default()
        },
    }
}

impl Tag {
    fn created(mut self, offset: Option<i64>) -> Self {
        self.spec.created_at = offset.map(|o| api_time(at(o)));
        self
    }
    fn version(mut self, v: i64) -> Self {
        self.spec.version = Some(v);
        self
    }
    fn policy(&mut self) -> &mut ImageTagPullPolicy {
        self.spec.pull_policy.get_or_insert_with(Default::default)
    }
    fn ttl(mut self, secs: i32) -> Self {
        self.policy().ttl_seconds_after_finished = Some(secs);
        self
    }
    fn deadline(mut self, secs: i64) -> Self {
        self.policy().active_deadline_seconds = Some(secs);
        self
    }
    fn owners(mut self, names: &[&str]) -> Self {
        self.spec.owner_references = Some(
            names
                .iter()
                .map(|n| ObjectReference {
                    kind: Some("ImagePullJob".into()),
                    namespace: Some("default".into()),
                    name: Some((*n).into()),
                    uid: Some(format!("uid-{n}")),
                    ..Default::default()
                })
                .collect(),
        );
        self
    }
}

/// A status entry fixture, `image:tag`.
#[derive(Clone)]
struct Report {
    image: &'static str,
    status: ImageTagStatus,
}

fn report(image_tag: &'static str, phase: ImagePullPhase) -> Report {
    let (image, t) = image_tag.split_once(':').expect("image:tag");
    Report {
        image,
        status: ImageTagStatus {
            tag: t.to_string().into(),
            phase,
            ..Default::default()
        },
    }
}

impl Report {
    fn version(mut self, v: i64) -> Self {
        self.status.version = Some(v);
        self
    }
    fn completed(mut self, offset: i64) -> Self {
        self.status.completion_time = Some(api_time(at(offset)));
        self
    }
}

/// A NodeImage with these tags and, when `reports` is given, a status with
/// those entries and counts as a daemon would have written them.
fn nodeimage(tags: &[Tag], reports: Option<&[Report]>) -> NodeImage {
    let mut images: BTreeMap<SharedStr, ImageSpec> = BTreeMap::new();
    for t in tags {
        images
            .entry(t.image.to_string().into())
            .or_default()
            .tags
            .push(t.spec.clone());
    }
    let mut ni = NodeImage::new(
        "node-1",
        NodeImageSpec {
            images: Some(images),
            removals: None,
        },
    );
    ni.status = reports.map(|reports| {
        let mut statuses: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
        for r in reports {
            statuses
                .entry(r.image.to_string().into())
                .or_default()
                .tags
                .push(r.status.clone());
        }
        let mut status = NodeImageStatus {
            image_statuses: Some(statuses),
            ..Default::default()
        };
        status.recount(&ni.spec);
        status
    });
    ni
}

fn run(ni: &NodeImage, now: i64) -> Plan {
    run_since(ni, now, None)
}

/// As [`run`], with orphaned status entries first seen at `since`.
fn run_since(ni: &NodeImage, now: i64, since: Option<i64>) -> Plan {
    plan(
        ni,
        &Inputs {
            now: at(now),
            response_timeout: TimeDelta::minutes(10),
            owners: &FakeOwners,
            orphans_since: since.map(at),
        },
    )
}

/// `image:tag` of every tag in the planned spec (the current one if unchanged).
fn spec_tags(ni: &NodeImage, p: &Plan) -> Vec<String> {
    let images = p
        .images
        .clone()
        .unwrap_or_else(|| ni.spec.images.clone().unwrap_or_default());
    images
        .iter()
        .flat_map(|(i, img)| img.tags.iter().map(move |t| format!("{i}:{}", t.tag)))
        .collect()
}

/// `image:tag=Phase` of every status entry in the planned status.
fn status_tags(ni: &NodeImage, p: &Plan) -> Vec<String> {
    let status = p
        .status
        .clone()
        .or_else(|| ni.status.clone())
        .unwrap_or_default();
    status
        .image_statuses
        .unwrap_or_default()
        .iter()
        .flat_map(|(i, s)| {
            s.tags
                .iter()
                .map(move |t| format!("{i}:{}={:?}", t.tag, t.phase))
        })
        .collect()
}

struct Case {
    name: &'static str,
    tags: Vec<Tag>,
    reports: Option<Vec<Report>>,
    now: i64,
    want_spec: &'static [&'static str],
    want_status: &'static [&'static str],
    want_failures: &'static [&'static str],
    want_requeue_secs: u64,
    want_spec_write: bool,
    want_status_write: bool,
}

#[test]
fn plan_table() {
    use ImagePullPhase::*;
    let hour = 3600;
    let hours = |n: i64| n * 3600;
    let cases = vec![
        Case {
            name: "nothing to do writes nothing and rechecks in an hour",
            tags: vec![tag("nginx:1.25")],
            reports: Some(vec![report("nginx:1.25", Succeeded).completed(10)]),
            now: 100,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Succeeded"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "createdAt is filled with now",
            tags: vec![tag("nginx:1.25").created(None)],
            reports: Some(vec![report("nginx:1.25", Pulling)]),
            now: 100,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Pulling"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: true,
            want_status_write: false,
        },
        Case {
            name: "createdAt filled starts the response timeout from now",
            tags: vec![tag("nginx:1.25").created(None)],
            reports: Some(vec![]),
            now: 100,
            want_spec: &["nginx:1.25"],
            want_status: &[],
            want_failures: &[],
            want_requeue_secs: 600,
            want_spec_write: true,
            want_status_write: false,
        },
        Case {
            name: "TTL not yet passed: kept, requeued for the expiry",
            tags: vec![tag("nginx:1.25").ttl(60)],
            reports: Some(vec![report("nginx:1.25", Succeeded).completed(10)]),
            now: 30,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Succeeded"],
            want_failures: &[],
            want_requeue_secs: 40,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "TTL just passed: removed from spec, image emptied, its status entry left to the node",
            tags: vec![tag("nginx:1.25").ttl(60)],
            reports: Some(vec![report("nginx:1.25", Succeeded).completed(10)]),
            now: 70,
            want_spec: &[],
            want_status: &["nginx:1.25=Succeeded"],
            want_failures: &[],
            want_requeue_secs: 600,
            want_spec_write: true,
            want_status_write: false,
        },
        Case {
            name: "TTL long passed on a failed pull: removed, other tag of the image stays",
            tags: vec![tag("nginx:1.25").ttl(5), tag("nginx:1.26")],
            reports: Some(vec![
                report("nginx:1.25", Failed).completed(10),
                report("nginx:1.26", Pulling),
            ]),
            now: hours(10),
            want_spec: &["nginx:1.26"],
            want_status: &["nginx:1.25=Failed", "nginx:1.26=Pulling"],
            want_failures: &[],
            want_requeue_secs: 600,
            want_spec_write: true,
            want_status_write: false,
        },
        Case {
            name: "TTL counts only for a status of the same version",
            tags: vec![tag("nginx:1.25").version(2).ttl(5)],
            reports: Some(vec![
                report("nginx:1.25", Succeeded).version(1).completed(10),
            ]),
            now: 100,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Succeeded"],
            want_failures: &[],
            want_requeue_secs: 500,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "absent version equals version 0",
            tags: vec![tag("nginx:1.25").ttl(5)],
            reports: Some(vec![
                report("nginx:1.25", Succeeded).version(0).completed(10),
            ]),
            now: 100,
            want_spec: &[],
            want_status: &["nginx:1.25=Succeeded"],
            want_failures: &[],
            want_requeue_secs: 600,
            want_spec_write: true,
            want_status_write: false,
        },
        Case {
            name: "finished without TTL stays",
            tags: vec![tag("nginx:1.25")],
            reports: Some(vec![report("nginx:1.25", Failed).completed(10)]),
            now: hours(100),
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Failed"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "gone owner dropped, live owner kept",
            tags: vec![tag("nginx:1.25").owners(&["gone-a", "job-b"])],
            reports: Some(vec![report("nginx:1.25", Pulling)]),
            now: 100,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Pulling"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: true,
            want_status_write: false,
        },
        Case {
            name: "last owner gone removes the tag even while pulling",
            tags: vec![tag("nginx:1.25").owners(&["gone-a"]), tag("redis:7")],
            reports: Some(vec![
                report("nginx:1.25", Pulling),
                report("redis:7", Pulling),
            ]),
            now: 100,
            want_spec: &["redis:7"],
            want_status: &["nginx:1.25=Pulling", "redis:7=Pulling"],
            want_failures: &[],
            want_requeue_secs: 600,
            want_spec_write: true,
            want_status_write: false,
        },
        Case {
            name: "owner in an unsynced store is kept",
            tags: vec![tag("nginx:1.25").owners(&["unsynced-a"])],
            reports: Some(vec![report("nginx:1.25", Pulling)]),
            now: 100,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Pulling"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "hand-written tag without owners stays until its TTL",
            tags: vec![tag("nginx:1.25").ttl(300)],
            reports: Some(vec![report("nginx:1.25", Succeeded).completed(0)]),
            now: 299,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Succeeded"],
            want_failures: &[],
            want_requeue_secs: 1,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "response timeout not yet reached",
            tags: vec![tag("nginx:1.25").version(3)],
            reports: Some(vec![]),
            now: 599,
            want_spec: &["nginx:1.25"],
            want_status: &[],
            want_failures: &[],
            want_requeue_secs: 1,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "response timeout reached: marked Failed, TTL then runs from now",
            tags: vec![tag("nginx:1.25").version(3).ttl(30)],
            reports: Some(vec![
                report("nginx:1.25", Succeeded).version(2).completed(-50),
            ]),
            now: 600,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Failed"],
            want_failures: &["node did not respond within 10m0s (no status for version 3)"],
            want_requeue_secs: 30,
            want_spec_write: false,
            want_status_write: true,
        },
        Case {
            name: "response timeout without any status yet creates the status",
            tags: vec![tag("nginx:1.25")],
            reports: None,
            now: 700,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Failed"],
            want_failures: &["node did not respond within 10m0s (no status for version 0)"],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: true,
        },
        Case {
            name: "a reported version is not subject to the response timeout",
            tags: vec![tag("nginx:1.25")],
            reports: Some(vec![report("nginx:1.25", Waiting)]),
            now: hours(10),
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Waiting"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "active deadline plus grace not yet passed",
            tags: vec![tag("nginx:1.25").deadline(60)],
            reports: Some(vec![report("nginx:1.25", Pulling)]),
            now: 64,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Pulling"],
            want_failures: &[],
            want_requeue_secs: 1,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "active deadline passed: marked Failed",
            tags: vec![tag("nginx:1.25").deadline(60)],
            reports: Some(vec![report("nginx:1.25", Pulling)]),
            now: 65,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Failed"],
            want_failures: &["pull did not finish within activeDeadlineSeconds (60s) of createdAt"],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: true,
        },
        Case {
            name: "deadline shorter than the response timeout wins when nothing reported",
            tags: vec![tag("nginx:1.25").deadline(60)],
            reports: Some(vec![]),
            now: 700,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Failed"],
            want_failures: &["pull did not finish within activeDeadlineSeconds (60s) of createdAt"],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: true,
        },
        Case {
            name: "finished tag is not failed by its deadline",
            tags: vec![tag("nginx:1.25").deadline(60)],
            reports: Some(vec![report("nginx:1.25", Succeeded).completed(30)]),
            now: hours(10),
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Succeeded"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "requeue at the earliest due time across tags",
            tags: vec![
                tag("a:1").ttl(500),
                tag("b:1").deadline(100),
                tag("c:1").created(Some(50)),
            ],
            reports: Some(vec![
                report("a:1", Succeeded).completed(0),
                report("b:1", Pulling),
            ]),
            now: 20,
            want_spec: &["a:1", "b:1", "c:1"],
            want_status: &["a:1=Succeeded", "b:1=Pulling"],
            want_failures: &[],
            want_requeue_secs: 85, // b: 0 + 100 + 5 grace
            want_spec_write: false,
            want_status_write: false,
        },
        Case {
            name: "image with no tags is removed",
            tags: vec![tag("nginx:1.25")],
            reports: Some(vec![report("nginx:1.25", Pulling)]),
            now: 10,
            want_spec: &["nginx:1.25"],
            want_status: &["nginx:1.25=Pulling"],
            want_failures: &[],
            want_requeue_secs: hour,
            want_spec_write: true, // set up below with an extra empty image
            want_status_write: false,
        },
        Case {
            name: "status entries of tags no longer in spec are left to the node",
            tags: vec![tag("nginx:1.25")],
            reports: Some(vec![
                report("nginx:1.25", Pulling),
                report("nginx:old", Succeeded).completed(0),
                report("gone:1", Failed).completed(0),
            ]),
            now: 10,
            want_spec: &["nginx:1.25"],
            want_status: &["gone:1=Failed", "nginx:1.25=Pulling", "nginx:old=Succeeded"],
            want_failures: &[],
            want_requeue_secs: 600,
            want_spec_write: false,
            want_status_write: false,
        },
    ];

    for case in cases {
        let mut ni = nodeimage(&case.tags, case.reports.as_deref());
        if case.name == "image with no tags is removed"
            && let Some(images) = ni.spec.images.as_mut()
        {
            images.insert("empty".into(), ImageSpec::default());
        }
        let p = run(&ni, case.now);
        let name = case.name;
        assert_eq!(spec_tags(&ni, &p), case.want_spec, "{name}: spec");
        assert_eq!(status_tags(&ni, &p), case.want_status, "{name}: status");
        let messages: Vec<&str> = p.failures.iter().map(|f| f.message.as_str()).collect();
        assert_eq!(messages, case.want_failures, "{name}: failures");
        assert_eq!(
            p.requeue_after,
            Duration::from_secs(case.want_requeue_secs),
            "{name}: requeue"
        );
        assert_eq!(
            p.images.is_some(),
            case.want_spec_write,
            "{name}: spec write"
        );
        assert_eq!(
            p.status.is_some(),
            case.want_status_write,
            "{name}: status write"
        );
        if let Some(status) = &p.status {
            let mut recounted = status.clone();
            let spec = NodeImageSpec {
                images: p.images.clone().or_else(|| ni.spec.images.clone()),
                removals: None,
            };
            recounted.recount(&spec);
            assert_eq!(&recounted, status, "{name}: counts consistent");
        }
        // Applying the plan and planning again at the same instant is a no-op.
        let mut after = ni.clone();
        if let Some(images) = p.images.clone() {
            after.spec.images = Some(images);
        }
        if let Some(status) = p.status.clone() {
            after.status = Some(status);
        }
        assert!(run(&after, case.now).is_noop(), "{name}: idempotent");
    }
}

#[test]
fn failed_entry_records_version_time_and_message_and_keeps_progress() {
    let mut t = tag("nginx:1.25").version(4).deadline(10);
    t.spec.created_at = Some(api_time(at(0)));
    let mut r = report("nginx:1.25", ImagePullPhase::Pulling).version(4);
    r.status.progress = Some(42);
    let ni = nodeimage(&[t], Some(&[r]));
    let p = run(&ni, 20);
    let status = p.status.expect("status written");
    let entry = &status.image_statuses.expect("statuses")["nginx"].tags[0];
    assert_eq!(entry.phase, ImagePullPhase::Failed);
    assert_eq!(entry.version, Some(4));
    assert_eq!(entry.completion_time, Some(api_time(at(20))));
    assert_eq!(entry.progress, Some(42));
    assert!(
        entry
            .message
            .as_deref()
            .unwrap_or("")
            .contains("activeDeadlineSeconds")
    );
    assert_eq!(status.failed, Some(1));
    assert_eq!(
        p.failures,
        vec![Failure {
            image: "nginx".into(),
            tag: "1.25".into(),
            version: 4,
            message: "pull did not finish within activeDeadlineSeconds (10s) of createdAt".into(),
            no_response: false,
        }]
    );
}

#[test]
fn changes_name_what_happened() {
    let ni = nodeimage(
        &[
            tag("nginx:1.25").created(None).owners(&["gone-a", "job-b"]),
            tag("redis:7").owners(&["gone-c"]),
        ],
        Some(&[]),
    );
    let p = run(&ni, 0);
    assert_eq!(
        p.changes,
        vec![
            Change::CreatedAtSet {
                image: "nginx".into(),
                tag: "1.25".into()
            },
            Change::OwnerDropped {
                image: "nginx".into(),
                tag: "1.25".into(),
                owner: "ImagePullJob default/gone-a (uid-gone-a)".into()
            },
            Change::OwnerDropped {
                image: "redis".into(),
                tag: "7".into(),
                owner: "ImagePullJob default/gone-c (uid-gone-c)".into()
            },
            Change::TagRemoved {
                image: "redis".into(),
                tag: "7".into(),
                reason: RemoveReason::OwnersGone
            },
            Change::ImageRemoved {
                image: "redis".into()
            },
        ]
    );
    let images = p.images.expect("spec written");
    let owners = images["nginx"].tags[0]
        .owner_references
        .clone()
        .unwrap_or_default();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].name.as_deref(), Some("job-b"));
}

#[test]
fn empty_nodeimage_without_status_writes_nothing() {
    let ni = NodeImage::new("node-1", NodeImageSpec::default());
    let p = run(&ni, 0);
    assert!(p.is_noop());
    assert!(p.changes.is_empty());
    assert_eq!(p.requeue_after, Duration::from_secs(3600));
}

#[test]
fn a_new_tag_without_an_entry_leaves_status_to_the_daemon() {
    // The daemon reported one tag; a second was just added to the spec.
    // Recounting now would publish counts for a tag with no entry, racing
    // the daemon, so housekeeping writes no status.
    let ni = nodeimage(
        &[tag("nginx:1"), tag("redis:7")],
        Some(&[report("nginx:1", ImagePullPhase::Succeeded)
            .version(0)
            .completed(1)]),
    );
    let mut stale = ni.clone();
    if let Some(s) = stale.status.as_mut() {
        s.desired = 1;
        s.waiting = Some(0);
    }
    let p = run(&stale, 2);
    assert!(p.status.is_none(), "status written: {:?}", p.status);
}

/// Orphaned status entries (of tags no longer in spec) are dropped, and the
/// counts recomputed, only the response timeout after they were first seen.
#[test]
fn orphaned_entries_are_dropped_only_after_the_response_timeout() {
    use ImagePullPhase::*;
    let ni = nodeimage(
        &[tag("nginx:1.25")],
        Some(&[
            report("nginx:1.25", Pulling),
            report("nginx:old", Succeeded).completed(0),
            report("gone:1", Failed).completed(0),
        ]),
    );
    // (first seen, now, status after the plan, status written, requeue s, still orphaned)
    let cases: &[(Option<i64>, i64, &[&str], bool, u64, bool)] = &[
        // First sighting: kept, looked at again when due.
        (
            None,
            100,
            &["gone:1=Failed", "nginx:1.25=Pulling", "nginx:old=Succeeded"],
            false,
            600,
            true,
        ),
        // Seen 599 s ago: one second to go.
        (
            Some(1),
            600,
            &["gone:1=Failed", "nginx:1.25=Pulling", "nginx:old=Succeeded"],
            false,
            1,
            true,
        ),
        // Seen the response timeout ago: the node did not drop them.
        (Some(0), 600, &["nginx:1.25=Pulling"], true, 3600, false),
        (Some(0), 10_000, &["nginx:1.25=Pulling"], true, 3600, false),
    ];
    for (since, now, want, written, requeue, orphaned) in cases {
        let p = run_since(&ni, *now, *since);
        let what = format!("first seen {since:?}, now {now}");
        assert_eq!(status_tags(&ni, &p), *want, "{what}: status");
        assert_eq!(p.status.is_some(), *written, "{what}: status write");
        assert_eq!(
            p.requeue_after,
            Duration::from_secs(*requeue),
            "{what}: requeue"
        );
        assert_eq!(p.orphaned, *orphaned, "{what}: orphaned");
        if let Some(status) = &p.status {
            assert_eq!(status.desired, 1, "{what}: recounted");
            assert_eq!(status.pulling, Some(1), "{what}: recounted");
        }
    }
    // Nothing orphaned: nothing to remember.
    let clean = nodeimage(&[tag("nginx:1.25")], Some(&[report("nginx:1.25", Pulling)]));
    assert!(!run_since(&clean, 100, Some(0)).orphaned);
}

/// An image the cache marks unreadable (an entry of it does not decode) is
/// left as stored, spec and status, even where the plan would change it;
/// its neighbours are housekept as ever.
#[test]
fn unreadable_images_are_left_as_stored() {
    let mut ni = nodeimage(
        &[
            tag("bad:v1").created(None).owners(&["gone-job"]),
            tag("nginx:1.25").created(None),
        ],
        Some(&[report("bad:v1", ImagePullPhase::Failed)]),
    );
    ni.metadata.annotations = Some(BTreeMap::from([(
        salvage::UNREADABLE_IMAGES.to_string(),
        "[\"bad\"]".to_string(),
    )]));
    let p = run(&ni, 700);
    let images = p.images.as_ref().expect("nginx gets its createdAt");
    assert_eq!(
        images.get("bad"),
        ni.spec.images.as_ref().and_then(|i| i.get("bad")),
        "no createdAt, no owner dropped"
    );
    assert!(images["nginx"].tags[0].created_at.is_some());
    assert!(p.failures.is_empty(), "{:?}", p.failures);
    assert_eq!(status_tags(&ni, &p), ["bad:v1=Failed"]);
}

#[test]
fn removal_entries_go_with_the_job_that_wrote_them() {
    use nodeimage_api::nodeimage_dev::{RemovalEntry, RemovalWriter};
    let entry = |job: &str, by_job: bool| RemovalEntry {
        job: job.into(),
        uid: format!("uid-{job}"),
        images: vec!["r.example/app@sha256:aa".into()],
        block: true,
        written_by: by_job.then_some(RemovalWriter::ImageRemovalJob),
        ..Default::default()
    };
    // (entries: name, written by a job) -> jobs kept, None: nothing written.
    type Row<'a> = (&'a str, Vec<(&'a str, bool)>, Option<Vec<&'a str>>);
    let rows: Vec<Row<'_>> = vec![
        ("its job exists", vec![("cve", true)], None),
        ("its job is gone", vec![("gone-cve", true)], Some(vec![])),
        ("written by hand: stays", vec![("gone-hand", false)], None),
        (
            "the job cache has not synced",
            vec![("unsynced-cve", true)],
            None,
        ),
        (
            "only the gone job's entry goes",
            vec![("cve", true), ("gone-old", true), ("gone-hand", false)],
            Some(vec!["cve", "gone-hand"]),
        ),
    ];
    for (name, entries, want) in rows {
        let mut ni = nodeimage(&[], None);
        ni.spec.removals = Some(entries.iter().map(|(j, by)| entry(j, *by)).collect());
        let p = run(&ni, 0);
        let got = p
            .removals
            .as_ref()
            .map(|l| l.iter().map(|e| e.job.as_str()).collect::<Vec<_>>());
        assert_eq!(got, want, "{name}");
        let dropped = p
            .changes
            .iter()
            .filter(|c| matches!(c, Change::RemovalDropped { .. }))
            .count();
        let expected = entries.len() - want.as_ref().map_or(entries.len(), Vec::len);
        assert_eq!(dropped, expected, "{name}");
        assert_eq!(p.is_noop(), want.is_none(), "{name}");
    }
}
