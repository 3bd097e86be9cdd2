use super::ledger::{PACE_RETRY, Paced, RESERVATION_BOUND};
use super::load::loads;
use super::rule::JobOrder;
use super::*;
use crate::engine::nodetasks::fixtures::{nodeimage_with, tag_entry};
use crate::engine::rollout::Cap;
use crate::engine::rollout::{Entry, Starts};
use chrono::DateTime;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher;
use nodeimage_api::kruise::{
    ImagePullPhase, ImageTagSpec, ImageTagStatus, NodeImage, TagUpgradeStatus, UpgradeState,
};

const REG: &str = "127.0.0.1:5000";

/// An ImagePullJob `uid` (also its name) in namespace `ns`, created at
/// second `created`.
fn job_in(ns: &str, created: i64, uid: &str) -> PacedJob {
    PacedJob {
        order: JobOrder {
            created: DateTime::from_timestamp(created, 0),
            uid: uid.into(),
        },
        kind: "ImagePullJob",
        namespace: Some(ns.into()),
        name: uid.into(),
    }
}

fn job(created: i64, uid: &str) -> PacedJob {
    job_in("ns", created, uid)
}

fn at(s: i64) -> chrono::DateTime<chrono::Utc> {
    DateTime::from_timestamp(1_000_000 + s, 0).unwrap_or_default()
}

fn owner(uid: &str) -> ObjectReference {
    ObjectReference {
        uid: Some(uid.into()),
        kind: Some("ImagePullJob".into()),
        namespace: Some("ns".into()),
        name: Some(uid.into()),
        ..Default::default()
    }
}

fn status(tag: &str, phase: ImagePullPhase, message: Option<String>) -> ImageTagStatus {
    ImageTagStatus {
        tag: tag.into(),
        phase,
        version: Some(0),
        message: message.map(Into::into),
        ..Default::default()
    }
}

/// A NodeImage `node` with one entry of `image:v1` (owned by `uid`, or
/// hand-written when `None`) and the node's answer, if any.
fn node(node: &str, image: &str, uid: Option<&str>, answer: Option<ImageTagStatus>) -> NodeImage {
    let spec = match uid {
        Some(uid) => tag_entry("v1", 0, owner(uid)),
        None => ImageTagSpec {
            tag: "v1".into(),
            ..Default::default()
        },
    };
    (*nodeimage_with(node, vec![(image.to_string(), spec, answer)])).clone()
}

fn upgrade(name: &str, image: &str, state: UpgradeState) -> NodeImage {
    let mut answer = status("v1", ImagePullPhase::Pulling, None);
    answer.upgrade = TagUpgradeStatus {
        state: Some(state),
        ..Default::default()
    }
    .boxed();
    node(name, image, Some("u"), Some(answer))
}

fn cache(nodes: Vec<NodeImage>) -> (Store<NodeImage>, Writer<NodeImage>) {
    let mut writer = Writer::<NodeImage>::default();
    writer.apply_watcher_event(&watcher::Event::Init);
    for n in nodes {
        writer.apply_watcher_event(&watcher::Event::InitApply(n));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
    (writer.as_reader(), writer)
}

#[test]
fn loads_count_unfinished_entries_per_node() {
    let image = format!("{REG}/app");
    let limited = ImageTagStatus::rate_limited_message("index.docker.io", 5, "429");
    let nodes = [
        // Hand-written, not answered yet: pulling.
        node("n1", &image, None, None),
        // A job's entry, pulling.
        node(
            "n2",
            &image,
            Some("j"),
            Some(status("v1", ImagePullPhase::Pulling, None)),
        ),
        // Finished: not pulling.
        node(
            "n3",
            &image,
            Some("j"),
            Some(status("v1", ImagePullPhase::Succeeded, None)),
        ),
        // An upgrade past its pull, waiting for confirmation: not pulling.
        upgrade("n5", &image, UpgradeState::WaitingConfirmation),
        // An upgrade still checking (its pull comes next): pulling.
        upgrade("n6", &image, UpgradeState::Checking),
        // Docker Hub, waiting because it rate-limited (named by an alias).
        node(
            "n4",
            "nginx",
            Some("j"),
            Some(status("v1", ImagePullPhase::Waiting, Some(limited))),
        ),
    ];
    let l = loads(nodes.iter(), |_| true);
    let names = |r: &str| l[r].pulling.iter().cloned().collect::<Vec<_>>();
    assert_eq!(names(REG), vec!["n1", "n2", "n6"]);
    assert!(!l[REG].rate_limited);
    assert_eq!(names("docker.io"), vec!["n4"]);
    assert!(l["docker.io"].rate_limited);
    let only = loads(nodes.iter(), |r| r == REG);
    assert_eq!(only.keys().collect::<Vec<_>>(), vec![REG]);
}

/// The memo reads again only the NodeImages whose resourceVersion moved,
/// gives what a full read gives, and forgets the nodes that left.
#[test]
fn the_load_memo_matches_a_full_read_and_forgets_nodes_that_left() {
    use super::load::LoadMemo;
    use std::sync::Arc;
    let image = format!("{REG}/app");
    let versioned = |mut ni: NodeImage, rv: &str| {
        ni.metadata.resource_version = Some(rv.into());
        Arc::new(ni)
    };
    let pulling = |n: &str, rv: &str| {
        let st = status("v1", ImagePullPhase::Pulling, None);
        versioned(node(n, &image, Some("j"), Some(st)), rv)
    };
    let done = |n: &str, rv: &str| {
        let st = status("v1", ImagePullPhase::Succeeded, None);
        versioned(node(n, &image, Some("j"), Some(st)), rv)
    };
    let mut memo = LoadMemo::default();
    let rounds = [
        vec![pulling("n1", "1"), pulling("n2", "2")],
        // n1 finished at a new version: read again, no longer pulling.
        vec![done("n1", "3"), pulling("n2", "2")],
        // The same version with other content is not read again (a
        // resourceVersion names one content), so the memo's answer stands.
        vec![done("n1", "3"), done("n2", "2")],
        // n2 left.
        vec![done("n1", "3")],
    ];
    let expected: [&[&str]; 4] = [&["n1", "n2"], &["n2"], &["n2"], &[]];
    for (snapshot, want) in rounds.iter().zip(expected) {
        let got = memo.loads(snapshot, |_| true);
        let names: Vec<&str> = got
            .get(REG)
            .map(|l| l.pulling.iter().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(names, want);
        assert_eq!(memo.len(), snapshot.len());
    }
    // Where versions are fresh, the memo and a full read agree.
    let snapshot = [pulling("n1", "7"), done("n2", "8")];
    let full = loads(snapshot.iter().map(|n| n.as_ref()), |_| true);
    assert_eq!(memo.loads(&snapshot, |_| true), full);
    assert!(memo.loads(&snapshot, |r| r == "docker.io").is_empty());
}

#[test]
fn limits_per_host_with_aliases() {
    let l = Limits::new(0, &[("index.docker.io".into(), 2), (REG.into(), 1)]);
    assert_eq!(l.of("docker.io"), 2);
    assert_eq!(l.of("registry-1.docker.io"), 2);
    assert_eq!(l.of(REG), 1);
    assert_eq!(l.of("quay.io"), 0);
    assert!(l.any());
    assert!(!Limits::new(0, &[("quay.io".into(), 0)]).any());
    assert_eq!(Limits::new(5, &[]).of("quay.io"), 5);
}

/// A job plan that wants `wanted` of `nodes` (none started yet) and
/// starts what the cap allows, as every kind does.
fn starts(nodes: &[&str], wanted: usize) -> impl FnOnce(Option<&Cap>) -> Starts {
    use crate::engine::rollout::{NodeState, to_start_capped};
    let nodes: Vec<(String, NodeState)> = nodes
        .iter()
        .map(|n| (n.to_string(), NodeState::NotStarted))
        .collect();
    move |cap| to_start_capped(&nodes, wanted, cap)
}

/// `plan` of `job` over `entries` at second `s`, under `pacing`.
fn paced(
    pacing: &RegistryPacing,
    job: &PacedJob,
    entries: &[Entry],
    s: i64,
    plan: impl FnOnce(Option<&Cap>) -> Starts,
) -> Paced<Starts> {
    pacing.plan(job, entries, at(s), plan)
}

#[test]
fn reservations_and_the_queue_across_plans() {
    let entry = Entry {
        image: format!("{REG}/app"),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    };
    let entries = std::slice::from_ref(&entry);
    let (store, mut writer) = cache(vec![]);
    let pacing = RegistryPacing::new(Limits::new(0, &[(REG.into(), 1)]), store);
    let (old, young) = (job(100, "old"), job(200, "young"));
    let run = |j: &PacedJob, s: i64, plan| paced(&pacing, j, entries, s, plan);

    // The younger job plans first and takes the free slot.
    let p = run(&young, 0, starts(&["n1", "n2"], 2));
    assert_eq!(p.plan.nodes, vec!["n1"]);
    assert!(p.newly_waiting, "{p:?}");
    assert_eq!(p.look_again(None), Some(PACE_RETRY));
    // Its write is not in the cache yet: the slot stays taken.
    let p = run(&old, 1, starts(&["n3"], 1));
    assert!(p.plan.nodes.is_empty());
    assert_eq!(
        p.waiting,
        vec![format!(
            "waiting for registry {REG}: 1 of 1 pulling, 1 other job(s) waiting (slots go round-robin by namespace)"
        )]
    );
    // The cache shows the entry (pulling): still taken, reservation gone.
    writer.apply_watcher_event(&watcher::Event::Apply(node(
        "n1",
        &entry.image,
        Some("young"),
        None,
    )));
    let p = run(&old, 2, starts(&["n3"], 1));
    assert!(p.plan.nodes.is_empty() && !p.newly_waiting);
    // n1 finishes: the older job goes first, the younger one waits.
    let done = status("v1", ImagePullPhase::Succeeded, None);
    writer.apply_watcher_event(&watcher::Event::Apply(node(
        "n1",
        &entry.image,
        Some("young"),
        Some(done),
    )));
    let p = run(&young, 3, starts(&["n2"], 1));
    assert!(p.plan.nodes.is_empty(), "the older job wants the slot");
    assert!(
        p.waiting[0].contains("1 other job(s) waiting"),
        "{:?}",
        p.waiting
    );
    let p = run(&old, 4, starts(&["n3"], 1));
    assert_eq!(p.plan.nodes, vec!["n3"]);
    assert!(p.waiting.is_empty() && p.events().is_empty());
    // Its write fails: the slot is free again for the next in line.
    pacing.write_failed("old");
    let p = run(&young, 5, starts(&["n2"], 1));
    assert_eq!(p.plan.nodes, vec!["n2"]);
    // A reservation the cache never shows counts only up to its bound.
    let later = 5 + RESERVATION_BOUND.num_seconds();
    let p = run(&old, later, starts(&["n3"], 1));
    assert_eq!(p.plan.nodes, vec!["n3"]);
}

#[test]
fn unlimited_registries_plan_freely_and_report() {
    let limited = ImageTagStatus::rate_limited_message(REG, 5, "429");
    let (store, _writer) = cache(vec![
        node(
            "n1",
            &format!("{REG}/app"),
            None,
            Some(status("v1", ImagePullPhase::Waiting, Some(limited))),
        ),
        node("n2", "quay.io/x/y", Some("j"), None),
    ]);
    let pacing = RegistryPacing::new(Limits::new(0, &[(REG.into(), 3)]), store);
    let quay = Entry {
        image: "quay.io/x/y".into(),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    };
    let p = paced(&pacing, &job(1, "j"), &[quay], 0, starts(&["a", "b"], 2));
    assert_eq!(p.plan.nodes.len(), 2, "no limit on quay.io");
    // The hand-written entry rate-limits the limited registry.
    let app = Entry {
        image: format!("{REG}/app"),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    };
    let p = paced(&pacing, &job(2, "k"), &[app], 0, starts(&["a"], 1));
    assert!(p.plan.nodes.is_empty() && p.events()[0].note.contains("rate-limited"));
    let report = pacing.report(at(1));
    let row = |r: &str| report.iter().find(|g| g.registry == r).cloned();
    let reg = row(REG).map(|g| (g.in_flight, g.limit, g.rate_limited, g.jobs_waiting));
    assert_eq!(reg, Some((1, Some(3), true, 1)));
    let quay = row("quay.io").map(|g| (g.in_flight, g.limit, g.rate_limited, g.jobs_waiting));
    assert_eq!(quay, Some((1, None, false, 0)));
    pacing.forget("k");
    assert_eq!(
        pacing
            .report(at(2))
            .iter()
            .map(|g| g.jobs_waiting)
            .sum::<usize>(),
        0
    );
}

fn app() -> Entry {
    Entry {
        image: format!("{REG}/app"),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    }
}

#[test]
fn a_node_already_pulling_takes_more_entries_without_a_slot() {
    let (store, _writer) = cache(vec![]);
    let pacing = RegistryPacing::new(Limits::new(0, &[(REG.into(), 1)]), store);
    let (old, young) = (job(100, "old"), job(200, "young"));
    let entries = [app()];
    let p = paced(&pacing, &old, &entries, 0, starts(&["n1", "n2"], 2));
    assert_eq!(p.plan.nodes, vec!["n1"]);
    // n1 pulls from the registry already: the younger job rides it, though
    // the older one waits for the only slot.
    let p = paced(&pacing, &young, &entries, 1, starts(&["n2", "n1"], 2));
    assert_eq!(p.plan.nodes, vec!["n1"], "{p:?}");
    assert!(!p.waiting.is_empty(), "n2 still waits");
}

#[test]
fn namespaces_take_turns_while_an_older_job_waits() {
    let (store, mut writer) = cache(vec![]);
    let pacing = RegistryPacing::new(Limits::new(0, &[(REG.into(), 1)]), store);
    let mut woken = Box::pin(pacing.wakeups::<nodeimage_api::ImagePullJob>("ImagePullJob"));
    let mut next = move || {
        let mut out = vec![];
        while let Some(Some(r)) =
            futures::FutureExt::now_or_never(futures::StreamExt::next(&mut woken))
        {
            out.push(format!("{}/{}", r.namespace.unwrap_or_default(), r.name));
        }
        out
    };
    let (big, other) = (job(100, "old"), job_in("other", 200, "b"));
    let entries = [app()];
    let p = paced(&pacing, &big, &entries, 0, starts(&["n1", "n2"], 2));
    assert_eq!(p.plan.nodes, vec!["n1"]);
    let p = paced(&pacing, &other, &entries, 1, starts(&["n3"], 1));
    assert!(p.plan.nodes.is_empty() && p.newly_waiting);
    assert_eq!(next(), Vec::<String>::new(), "no slot was freed");
    let pulling = node("n1", &app().image, Some("old"), None);
    writer.apply_watcher_event(&watcher::Event::Apply(pulling.clone()));
    pacing.seen(&pulling);
    assert_eq!(next(), Vec::<String>::new(), "n1 still pulls");
    // n1 finishes: the slot goes to the other namespace, which is woken at
    // once; the older job waits its turn.
    let done = node(
        "n1",
        &app().image,
        Some("old"),
        Some(status("v1", ImagePullPhase::Succeeded, None)),
    );
    writer.apply_watcher_event(&watcher::Event::Apply(done.clone()));
    pacing.seen(&done);
    assert_eq!(next(), vec!["other/b"]);
    let p = paced(&pacing, &big, &entries, 2, starts(&["n2"], 1));
    assert!(p.plan.nodes.is_empty(), "{p:?}");
    assert_eq!(next(), Vec::<String>::new(), "a plan that changed nothing");
    let p = paced(&pacing, &other, &entries, 3, starts(&["n3"], 1));
    assert_eq!(p.plan.nodes, vec!["n3"]);
    // Its plan took a new node: the waiting job is woken to ride it.
    assert_eq!(next(), vec!["ns/old"]);
    // The other job is deleted and its entry leaves n3: the slot is handed on.
    pacing.forget("b");
    let emptied = NodeImage::new("n3", Default::default());
    writer.apply_watcher_event(&watcher::Event::Apply(emptied.clone()));
    pacing.seen(&emptied);
    assert_eq!(next(), vec!["ns/old"]);
}

#[test]
fn jobs_held_by_another_registry_do_not_wake_each_other() {
    const FULL: &str = "127.0.0.1:5001";
    let (store, _writer) = cache(vec![node("h", &format!("{FULL}/x"), None, None)]);
    let limits = Limits::new(0, &[(REG.into(), 2), (FULL.into(), 1)]);
    let pacing = RegistryPacing::new(limits, store);
    let mut woken = Box::pin(pacing.wakeups::<nodeimage_api::ImagePullJob>("ImagePullJob"));
    let both = [
        app(),
        Entry {
            image: format!("{FULL}/y"),
            tag: "v1".into(),
            purpose: nodeimage_api::kruise::Purpose::Pull,
        },
    ];
    for s in 0..3 {
        for j in [job(100, "a"), job_in("other", 200, "b")] {
            let p = paced(&pacing, &j, &both, s, starts(&["n1"], 1));
            assert!(p.plan.nodes.is_empty(), "{FULL} is full");
        }
    }
    let next = futures::FutureExt::now_or_never(futures::StreamExt::next(&mut woken));
    assert!(next.is_none(), "woken: {next:?}");
}

#[test]
fn nodes_from_peers_take_no_slot_and_do_not_count_while_they_pull() {
    use crate::engine::rollout::{NodeState, to_start_paced};
    let (store, mut writer) = cache(vec![]);
    let pacing = RegistryPacing::new(Limits::new(0, &[(REG.into(), 1)]), store);
    let (p2p, other) = (job(100, "p2p"), job_in("other", 200, "b"));
    let entries = [app()];
    let show = |w: &mut Writer<NodeImage>, n: &str, uid: &str, done: bool| {
        let answer = done.then(|| status("v1", ImagePullPhase::Succeeded, None));
        w.apply_watcher_event(&watcher::Event::Apply(node(
            n,
            &app().image,
            Some(uid),
            answer,
        )));
    };
    let in_flight = |s: i64| {
        pacing
            .report(at(s))
            .iter()
            .find(|g| g.registry == REG)
            .map_or(0, |g| g.in_flight)
    };
    // The seed takes the registry's only slot.
    let p = paced(&pacing, &p2p, &entries, 0, starts(&["n1"], 1));
    assert_eq!(p.plan.nodes, vec!["n1"]);
    show(&mut writer, "n1", "p2p", false);
    // Once a peer holds the image, the next wave starts from peers with no
    // slot free; a plain job on the same registry waits.
    let wave: Vec<(String, NodeState)> = ["n2", "n3"]
        .iter()
        .map(|n| (n.to_string(), NodeState::NotStarted))
        .collect();
    let peers = ["n2".to_string(), "n3".to_string()].into_iter().collect();
    let p = paced(&pacing, &p2p, &entries, 1, |cap| {
        to_start_paced(&wave, 2, cap, &peers)
    });
    assert_eq!(p.plan.nodes, vec!["n2", "n3"], "{p:?}");
    assert!(p.waiting.is_empty(), "{p:?}");
    let p = paced(&pacing, &other, &entries, 2, starts(&["n4"], 1));
    assert!(p.plan.nodes.is_empty(), "the seed holds the slot: {p:?}");
    // The wave's entries show, unfinished: they do not count against the
    // registry. The seed finishes: its slot goes to the plain job.
    show(&mut writer, "n2", "p2p", false);
    show(&mut writer, "n3", "p2p", false);
    show(&mut writer, "n1", "p2p", true);
    assert_eq!(in_flight(3), 0, "peers' pulls are not the registry's");
    let p = paced(&pacing, &other, &entries, 4, starts(&["n4"], 1));
    assert_eq!(p.plan.nodes, vec!["n4"], "{p:?}");
    // Finished peer starts are forgotten; so is one the cache never shows,
    // once the reservation bound has passed.
    show(&mut writer, "n2", "p2p", true);
    writer.apply_watcher_event(&watcher::Event::Apply(NodeImage::new(
        "n3",
        Default::default(),
    )));
    let _ = in_flight(5);
    assert_eq!(pacing.lock().peers.len(), 1, "n3's start is still new");
    let _ = in_flight(5 + RESERVATION_BOUND.num_seconds());
    assert!(pacing.lock().peers.is_empty());
}
