//! A registry that answers 429: the pull path waits for it without
//! spending an attempt, every pull from it waits, others go on.

use super::*;
use crate::metrics::RegistryLabels;
use crate::ratelimit::{CAP, jitter, wait_after};
use nodeimage_api::kruise::{ImagePullPhase, ImageTagStatus};

/// The registry of [`IMAGE`].
const REGISTRY: &str = "127.0.0.1:5000";
/// What containerd prints when resolving a tag is refused with 429.
const SAID_429: &str = "failed to pull and unpack image \"127.0.0.1:5000/app:v1\": failed to resolve reference \"127.0.0.1:5000/app:v1\": unexpected status from HEAD request to http://127.0.0.1:5000/v2/app/manifests/v1: 429 Too Many Requests";

fn limited() -> Answer {
    Answer::Err(RuntimeError::RateLimited(SAID_429.into()), Duration::ZERO)
}

/// The wait of the `round`-th 429 in a row on node n1 (the tests' node).
fn wait(round: u32) -> Duration {
    wait_after(round, None, jitter("n1", REGISTRY, round))
}

/// Whole seconds of `d`, rounded up, as a waiting tag shows them.
fn shown(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn key_of(name: &str) -> TagKey {
    TagKey {
        image: name.into(),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    }
}

/// An Always pull of `reference` (`<name>:v1`) with no retries.
fn target_of(reference: &str) -> Target {
    Target {
        image: ImageRef::parse(reference).expect("a reference"),
        ..target(0)
    }
}

/// The pull path of `name:v1` in its own task.
fn spawn_pull(
    deps: &Arc<Deps<FakeRuntime>>,
    name: &'static str,
    deadline: Option<Instant>,
) -> tokio::task::JoinHandle<Pulled> {
    let deps = deps.clone();
    tokio::spawn(async move {
        let mut rep = Reporter::new(&*deps, key_of(name), 1);
        let t = target_of(&format!("{name}:v1"));
        tokio::time::timeout(s(3600), in_slot(&mut rep, &t, deadline, |_| {}))
            .await
            .expect("the pull path ends")
    })
}

fn rate_limited_count(deps: &Deps<FakeRuntime>, registry: &str) -> u64 {
    let labels = RegistryLabels {
        registry: registry.into(),
    };
    deps.metrics
        .registry_rate_limited
        .get_or_create(&labels)
        .get()
}

fn waiting_for(deps: &Deps<FakeRuntime>, registry: &str) -> i64 {
    let labels = RegistryLabels {
        registry: registry.into(),
    };
    deps.metrics.registry_waiting.get_or_create(&labels).get()
}

fn pulled_refs(rt: &FakeRuntime) -> Vec<String> {
    rt.calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Pull(reference, _) => Some(reference),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_429_spends_no_attempt_and_a_success_starts_over() {
    let rt = FakeRuntime::default();
    rt.pulls([limited(), limited(), ok()]);
    let deps = deps(rt.clone(), 1);
    let started = Instant::now();
    // One attempt only (backoffLimit 0): a 429 that spent it would fail the tag.
    let pulled = pull_once(&deps, &target(0), None).await;
    assert_eq!(reason(&pulled.outcome), "pulled", "{:?}", pulled.outcome);
    assert_eq!(rt.pull_count(), 3);
    assert_eq!(
        started.elapsed(),
        wait(1) + wait(2),
        "the second wait was longer"
    );
    assert!(wait(2) > wait(1));
    assert_eq!(rate_limited_count(&deps, REGISTRY), 2);
    assert_eq!(waiting_for(&deps, REGISTRY), 0);
    assert!(
        deps.rate_limits.is_empty(),
        "the success forgot the registry"
    );

    // The next 429 waits the first wait again.
    rt.pulls([limited(), ok()]);
    let again = Instant::now();
    let pulled = pull_once(&deps, &target(0), None).await;
    assert_eq!(reason(&pulled.outcome), "pulled");
    assert_eq!(again.elapsed(), wait(1));
}

#[tokio::test(start_paused = true)]
async fn the_wait_grows_and_is_capped() {
    let rt = FakeRuntime::default();
    rt.pulls((0..9).map(|_| limited()));
    let deps = deps(rt.clone(), 1);
    let started = Instant::now();
    let pulled = pull_once(&deps, &target(0), None).await;
    assert_eq!(reason(&pulled.outcome), "pulled");
    assert_eq!(rt.pull_count(), 10);
    let waits: Vec<Duration> = (1..=9).map(wait).collect();
    assert_eq!(started.elapsed(), waits.iter().sum::<Duration>());
    assert!(waits.windows(2).take(5).all(|w| w[1] > w[0]), "{waits:?}");
    assert!(waits.iter().all(|w| *w <= CAP), "{waits:?}");
    assert!(waits[8] >= CAP - CAP / 5, "{waits:?}");
}

#[tokio::test(start_paused = true)]
async fn the_waiting_tag_says_exactly_the_rate_limited_message() {
    let body = "unexpected status from GET request to http://127.0.0.1:5000/v2/app/blobs/sha256:1: 429 Too Many Requests\ntoomanyrequests: You have reached your pull rate limit.";
    // (what the runtime said, the registry's words in the message)
    let table = [
        (SAID_429, "429 Too Many Requests"),
        (
            body,
            "toomanyrequests: You have reached your pull rate limit.",
        ),
    ];
    for (said, words) in table {
        let rt = FakeRuntime::default();
        rt.pulls([Answer::Err(
            RuntimeError::RateLimited(said.into()),
            Duration::ZERO,
        )]);
        let deps = deps(rt.clone(), 1);
        let task = spawn_pull(&deps, NAME, None);
        tokio::time::sleep(s(1)).await;
        let st = deps.status.live(&key()).expect("a status");
        assert_eq!(st.phase, ImagePullPhase::Waiting, "{st:?}");
        let want = ImageTagStatus::rate_limited_message(REGISTRY, shown(wait(1)), words);
        assert_eq!(st.message.as_deref(), Some(want.as_str()));
        assert_eq!(st.rate_limited_by(), Some(REGISTRY));
        assert_eq!(waiting_for(&deps, REGISTRY), 1);
        let pulled = task.await.expect("the task ends");
        assert_eq!(reason(&pulled.outcome), "pulled");
    }
}

#[tokio::test(start_paused = true)]
async fn pulls_from_that_registry_wait_and_others_go_on() {
    let other_here = "127.0.0.1:5000/other";
    let elsewhere = "quay.io/team/b";
    let rt = FakeRuntime::default();
    rt.pulls([limited()]);
    // One slot: the limited pull must give it back for the others to run.
    let deps = deps(rt.clone(), 1);
    let started = Instant::now();
    let first = spawn_pull(&deps, NAME, None);
    tokio::time::sleep(s(1)).await;
    let same = spawn_pull(&deps, other_here, None);
    let other = spawn_pull(&deps, elsewhere, None);
    let other = other.await.expect("the task ends");
    assert_eq!(reason(&other.outcome), "pulled");
    assert_eq!(
        started.elapsed(),
        s(1),
        "the other registry's pull ran at once"
    );
    assert_eq!(pulled_refs(&rt), [IMAGE, "quay.io/team/b:v1"]);

    let st = deps.status.live(&key_of(other_here)).expect("a status");
    assert_eq!(st.rate_limited_by(), Some(REGISTRY), "{st:?}");
    let want = ImageTagStatus::rate_limited_message(
        REGISTRY,
        shown(wait(1) - s(1)),
        "429 Too Many Requests",
    );
    assert_eq!(st.message.as_deref(), Some(want.as_str()));
    assert_eq!(waiting_for(&deps, REGISTRY), 2);
    assert_eq!(
        deps.metrics.in_flight.get(),
        0,
        "nobody holds a slot while waiting"
    );

    for task in [first, same] {
        let pulled = task.await.expect("the task ends");
        assert_eq!(reason(&pulled.outcome), "pulled");
    }
    assert_eq!(
        started.elapsed(),
        wait(1),
        "both asked again when the wait ended"
    );
    assert_eq!(rt.pull_count(), 4);
    assert_eq!(rate_limited_count(&deps, REGISTRY), 1);
    assert_eq!(rate_limited_count(&deps, "quay.io"), 0);
    assert_eq!(waiting_for(&deps, REGISTRY), 0);
}

#[tokio::test(start_paused = true)]
async fn a_tag_queued_for_a_slot_after_the_wait_no_longer_says_rate_limited() {
    let rt = FakeRuntime::default();
    let deps = deps(rt.clone(), 1);
    let until = deps
        .rate_limits
        .limited(REGISTRY, "429 Too Many Requests", None, Instant::now());
    let busy = deps.slots.clone().acquire_owned().await.expect("a slot");
    let task = spawn_pull(&deps, NAME, None);
    tokio::time::sleep_until(until + s(1)).await;
    let st = deps.status.live(&key()).expect("a status");
    assert_eq!(st.phase, ImagePullPhase::Waiting, "{st:?}");
    assert_eq!(st.message, None, "{st:?}");
    assert_eq!(rt.pull_count(), 0, "queued for the slot");
    drop(busy);
    let pulled = task.await.expect("the task ends");
    assert_eq!(reason(&pulled.outcome), "pulled");
}

#[tokio::test(start_paused = true)]
async fn the_deadline_applies_while_waiting() {
    let rt = FakeRuntime::default();
    rt.pulls([limited(), limited()]);
    let deps = deps(rt.clone(), 1);
    let started = Instant::now();
    assert!(wait(1) > s(3));
    let pulled = pull_once(&deps, &target(5), Some(started + s(3))).await;
    assert_eq!(reason(&pulled.outcome), "deadline");
    assert_eq!(
        message(&pulled.outcome),
        "exceeded activeDeadlineSeconds (30s) while waiting for registry 127.0.0.1:5000, \
         which rate-limited the pull; last error: 429 Too Many Requests"
    );
    assert_eq!(started.elapsed(), s(3), "failed at the deadline");
    assert_eq!(rt.pull_count(), 1, "not asked again before the wait ended");
    assert_eq!(waiting_for(&deps, REGISTRY), 0);
    assert_eq!(deps.slots.available_permits(), 1);
    assert_eq!(lease_ends(&rt), 1);
}

#[tokio::test(start_paused = true)]
async fn stopping_while_waiting_leaves_nothing_behind() {
    let rt = FakeRuntime::default();
    rt.pulls([limited()]);
    let deps = deps(rt.clone(), 1);
    let task = spawn_pull(&deps, NAME, None);
    tokio::time::sleep(s(1)).await;
    assert_eq!(waiting_for(&deps, REGISTRY), 1);
    // The daemon aborts its tasks when it stops (sync.rs).
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    assert_eq!(waiting_for(&deps, REGISTRY), 0);
    assert_eq!(deps.metrics.in_flight.get(), 0);
    assert_eq!(deps.metrics.waiting.get(), 0);
    assert_eq!(deps.slots.available_permits(), 1);
    assert!(!deps.leases.in_use(IMAGE), "its lease share ended");
    assert_eq!(rt.pull_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_present_image_does_not_wait_for_its_registry() {
    let rt = FakeRuntime::default();
    rt.present(IMAGE);
    let deps = deps(rt.clone(), 1);
    deps.rate_limits
        .limited(REGISTRY, "429 Too Many Requests", None, Instant::now());
    let mut t = target(0);
    t.mode = PullMode::IfNotPresent;
    let started = Instant::now();
    let pulled = pull_once(&deps, &t, None).await;
    assert_eq!(reason(&pulled.outcome), "present");
    assert_eq!(started.elapsed(), Duration::ZERO);
}
