//! The pull path's rules over the in-memory runtime (`runtime::fake`), with
//! tokio's clock paused so waits and deadlines take no real time.

use super::*;
use crate::credentials::Credential;
use crate::desired::TagKey;
use crate::runtime::fake::{Answer, Call, FakeRuntime};
use nodeimage_api::reference::ImageRef;

mod rate_limited;

const IMAGE: &str = "127.0.0.1:5000/app:v1";
const NAME: &str = "127.0.0.1:5000/app";

fn unavailable() -> Answer {
    Answer::Err(
        RuntimeError::Unavailable("connection refused".into()),
        Duration::ZERO,
    )
}

fn refused() -> Answer {
    Answer::Err(
        RuntimeError::Other("manifest unknown".into()),
        Duration::ZERO,
    )
}

fn ok() -> Answer {
    Answer::Ok(Duration::ZERO)
}

fn s(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

fn key() -> TagKey {
    TagKey {
        image: NAME.into(),
        tag: "v1".into(),
        purpose: nodeimage_api::kruise::Purpose::Pull,
    }
}

/// What the pull path shares, over `runtime`, with `slots` pull slots.
fn deps(runtime: FakeRuntime, slots: usize) -> Arc<Deps<FakeRuntime>> {
    Arc::new(Deps::for_tests(runtime, slots))
}

/// An Always pull of [`IMAGE`] with `backoff_limit` retries.
fn target(backoff_limit: u32) -> Target {
    Target {
        image: ImageRef::parse(IMAGE).expect("a reference"),
        mode: PullMode::Always,
        timeout: s(600),
        backoff_limit,
        active_deadline: Some(s(30)),
        secrets: vec![],
        requesters: vec![],
        sandbox: Default::default(),
        check_items: vec![],
        upgrade: None,
    }
}

/// Runs the pull path once; a path that never ends fails the test (after
/// an hour of the paused clock) instead of hanging it.
async fn pull_once(deps: &Deps<FakeRuntime>, t: &Target, deadline: Option<Instant>) -> Pulled {
    let mut rep = Reporter::new(deps, key(), 1);
    let path = in_slot(&mut rep, t, deadline, |_| {});
    tokio::time::timeout(s(3600), path)
        .await
        .expect("the pull path ends")
}

fn reason(o: &Outcome) -> &'static str {
    match o {
        Outcome::Succeeded { pulled: true, .. } => "pulled",
        Outcome::Succeeded { pulled: false, .. } => "present",
        Outcome::Failed { reason, .. } => reason,
    }
}

fn message(o: &Outcome) -> String {
    match o {
        Outcome::Succeeded { id, .. } => id.clone(),
        Outcome::Failed { message, .. } => message.clone(),
    }
}

fn lease_ends(rt: &FakeRuntime) -> usize {
    rt.calls()
        .iter()
        .filter(|c| **c == Call::EndLease(IMAGE.into()))
        .count()
}

#[tokio::test(start_paused = true)]
async fn attempts_follow_the_runtimes_answers() {
    struct Case {
        name: &'static str,
        answers: Vec<Answer>,
        backoff_limit: u32,
        deadline: Option<u64>,
        want: &'static str,
        pulls: usize,
        says: &'static str,
    }
    let cases = [
        Case {
            name: "an unavailable runtime uses up no attempt",
            answers: vec![unavailable(), unavailable(), ok()],
            backoff_limit: 0,
            deadline: None,
            want: "pulled",
            pulls: 3,
            says: "127.0.0.1:5000/app@sha256:manifest",
        },
        Case {
            name: "a refusal uses up an attempt",
            answers: vec![refused()],
            backoff_limit: 0,
            deadline: None,
            want: "error",
            pulls: 1,
            says: "pull failed after 1 attempts: manifest unknown",
        },
        Case {
            name: "refusals are retried until one pull succeeds",
            answers: vec![refused(), refused(), ok()],
            backoff_limit: 3,
            deadline: None,
            want: "pulled",
            pulls: 3,
            says: "127.0.0.1:5000/app@sha256:manifest",
        },
        Case {
            name: "the attempts run out",
            answers: vec![refused(), refused(), refused()],
            backoff_limit: 2,
            deadline: None,
            want: "error",
            pulls: 3,
            says: "pull failed after 3 attempts: manifest unknown",
        },
        Case {
            name: "an attempt that hangs times out",
            answers: vec![Answer::Hang],
            backoff_limit: 0,
            deadline: None,
            want: "timeout",
            pulls: 1,
            says: "pull failed after 1 attempts: attempt timed out after 600s",
        },
        Case {
            name: "the deadline ends the retries",
            answers: vec![refused(), refused(), refused(), refused()],
            backoff_limit: 10,
            // Attempts at 0 s, 5 s and 15 s; the next would start at 35 s,
            // or, as a last chance, at 16 s: at the deadline, too late.
            deadline: Some(16),
            want: "deadline",
            pulls: 3,
            says: "exceeded activeDeadlineSeconds (30s) while retrying; last error: manifest unknown",
        },
        Case {
            name: "the deadline ends a wait for the runtime",
            answers: vec![unavailable(), unavailable(), unavailable(), unavailable()],
            backoff_limit: 10,
            // Tried at 0 s, 2 s and 4 s; the next wait would end past it.
            deadline: Some(5),
            want: "unavailable",
            pulls: 3,
            says: "exceeded activeDeadlineSeconds (30s) while containerd was unavailable",
        },
    ];
    for c in cases {
        let rt = FakeRuntime::default();
        rt.pulls(c.answers);
        let deps = deps(rt.clone(), 1);
        let deadline = c.deadline.map(|d| Instant::now() + s(d));
        let pulled = pull_once(&deps, &target(c.backoff_limit), deadline).await;
        assert_eq!(reason(&pulled.outcome), c.want, "{}", c.name);
        assert_eq!(message(&pulled.outcome), c.says, "{}", c.name);
        assert_eq!(rt.pull_count(), c.pulls, "{}", c.name);
    }
}

#[tokio::test(start_paused = true)]
async fn if_not_present_asks_the_runtime_first() {
    // (name, present, image_status errors, want, pulls)
    let cases: [(&str, bool, Vec<RuntimeError>, &str, usize); 4] = [
        ("a present image is not pulled", true, vec![], "present", 0),
        ("an absent image is pulled", false, vec![], "pulled", 1),
        (
            "an unavailable runtime is waited for",
            true,
            vec![RuntimeError::Unavailable("down".into())],
            "present",
            0,
        ),
        (
            "another failure fails the tag",
            true,
            vec![RuntimeError::Other("boom".into())],
            "error",
            0,
        ),
    ];
    for (name, present, errors, want, pulls) in cases {
        let rt = FakeRuntime::default();
        if present {
            rt.present(IMAGE);
        }
        rt.statuses(errors);
        let deps = deps(rt.clone(), 1);
        let mut t = target(0);
        t.mode = PullMode::IfNotPresent;
        let pulled = pull_once(&deps, &t, None).await;
        assert_eq!(reason(&pulled.outcome), want, "{name}");
        assert_eq!(rt.pull_count(), pulls, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_deadline_passes_while_queued_for_a_slot() {
    let rt = FakeRuntime::default();
    let deps = deps(rt.clone(), 1);
    let _busy = deps.slots.clone().acquire_owned().await.expect("a slot");
    let started = Instant::now();
    let pulled = pull_once(&deps, &target(3), Some(started + s(5))).await;
    assert_eq!(reason(&pulled.outcome), "deadline");
    assert_eq!(
        message(&pulled.outcome),
        "exceeded activeDeadlineSeconds (30s) while waiting for a pull slot"
    );
    assert_eq!(started.elapsed(), s(5), "failed at the deadline");
    assert_eq!(pulled.elapsed, None, "it never ran");
    assert_eq!(rt.pull_count(), 0);
    assert_eq!(
        deps.metrics.waiting.get(),
        0,
        "no longer counted as waiting"
    );
}

#[tokio::test(start_paused = true)]
async fn the_lease_ends_on_every_outcome() {
    // (name, answers, backoff limit, slot taken, deadline, want)
    let cases: [(&str, Vec<Answer>, u32, bool, Option<u64>, &str); 4] = [
        ("success", vec![ok()], 0, false, None, "pulled"),
        ("failure", vec![refused()], 0, false, None, "error"),
        (
            "deadline while pulling",
            vec![Answer::Hang],
            0,
            false,
            Some(5),
            "deadline",
        ),
        (
            "deadline in the queue",
            vec![],
            0,
            true,
            Some(5),
            "deadline",
        ),
    ];
    for (name, answers, backoff_limit, taken, deadline, want) in cases {
        let rt = FakeRuntime::default();
        rt.pulls(answers);
        let deps = deps(rt.clone(), 1);
        let _busy = match taken {
            true => Some(deps.slots.clone().acquire_owned().await.expect("a slot")),
            false => None,
        };
        let deadline = deadline.map(|d| Instant::now() + s(d));
        let pulled = pull_once(&deps, &target(backoff_limit), deadline).await;
        assert_eq!(reason(&pulled.outcome), want, "{name}");
        assert_eq!(lease_ends(&rt), 1, "{name}: the lease ended once");
        assert!(!deps.leases.in_use(IMAGE), "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_pull_ends_its_lease_once_it_is_gone() {
    let rt = FakeRuntime::default();
    rt.pulls([Answer::Hang]);
    let deps = deps(rt.clone(), 1);
    let task = {
        let deps = deps.clone();
        tokio::spawn(async move {
            let _ = pull_once(&deps, &target(0), None).await;
        })
    };
    tokio::time::sleep(s(1)).await;
    assert_eq!(rt.pull_count(), 1, "pulling");
    assert!(deps.leases.in_use(IMAGE));
    task.abort();
    end_lease_when_gone(deps.clone(), task, IMAGE.into()).await;
    assert_eq!(lease_ends(&rt), 1);
    assert!(!deps.leases.in_use(IMAGE));
}

#[tokio::test(start_paused = true)]
async fn a_lease_two_tags_share_ends_with_the_last() {
    let rt = FakeRuntime::default();
    let deps = deps(rt.clone(), 1);
    let other = deps.leases.enter(IMAGE.into());
    let pulled = pull_once(&deps, &target(0), None).await;
    assert_eq!(reason(&pulled.outcome), "pulled");
    assert_eq!(lease_ends(&rt), 0, "the other tag still pulls the image");
    other.end(&deps.runtime, &deps.node);
    assert_eq!(lease_ends(&rt), 1);
}

#[tokio::test(start_paused = true)]
async fn progress_shows_only_bytes_already_held() {
    let rt = FakeRuntime::default();
    rt.pulls([Answer::Ok(Duration::from_millis(1_200))])
        .progress(&[10, 40], &["layer-sha256:a"]);
    let deps = deps(rt.clone(), 1);
    let pulled = pull_once(&deps, &target(0), None).await;
    assert_eq!(reason(&pulled.outcome), "pulled");
    let calls = rt.calls();
    let holds = calls
        .iter()
        .filter(|c| **c == Call::Hold(vec!["layer-sha256:a".into()]))
        .count();
    assert_eq!(holds, 2, "held at each sample: {calls:?}");
    let shown = deps.status.live(&key()).and_then(|st| st.progress);
    assert_eq!(shown, Some(40), "the last sample is shown");
}

#[tokio::test(start_paused = true)]
async fn on_cri_alone_nothing_is_sampled_or_held() {
    let rt = FakeRuntime::default();
    rt.cri_only()
        .pulls([Answer::Ok(s(2))])
        .progress(&[10, 40], &["layer-sha256:a"]);
    let deps = deps(rt.clone(), 1);
    let pulled = pull_once(&deps, &target(0), None).await;
    assert_eq!(reason(&pulled.outcome), "pulled");
    assert!(
        !rt.calls().iter().any(|c| matches!(c, Call::Hold(_))),
        "{:?}",
        rt.calls()
    );
    assert_eq!(deps.status.live(&key()), None, "no progress reported");
}

#[tokio::test(start_paused = true)]
async fn a_failed_check_stops_the_pull_before_the_registry() {
    let rt = FakeRuntime::default();
    let deps = deps(rt.clone(), 1);
    let mut t = target(0);
    t.check_items = vec!["gpu".into()];
    let pulled = pull_once(&deps, &t, None).await;
    assert_eq!(reason(&pulled.outcome), "check");
    assert_eq!(
        message(&pulled.outcome),
        "check gpu is not supported (use disk, cpu or mem)"
    );
    assert_eq!(rt.pull_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn the_slot_is_held_for_the_pull_only() {
    let rt = FakeRuntime::default();
    rt.pulls([Answer::Ok(s(3))]);
    let deps = deps(rt.clone(), 1);
    let mut on_slot_ran = false;
    let mut rep = Reporter::new(&*deps, key(), 1);
    let pulled = in_slot(&mut rep, &target(0), None, |_| on_slot_ran = true).await;
    assert!(on_slot_ran);
    assert_eq!(pulled.elapsed, Some(s(3)));
    assert_eq!(deps.slots.available_permits(), 1, "the slot is back");
    assert_eq!(deps.metrics.in_flight.get(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_refused_credential_moves_on_to_the_next() {
    let cred = Credential {
        registry: "127.0.0.1:5000".into(),
        username: "a".into(),
        password: "p".into(),
    };
    let unauthorized = || Answer::Err(RuntimeError::Unauthorized("401".into()), Duration::ZERO);
    // (name, answers, want, says, users tried in order)
    let cases: [(&str, Vec<Answer>, &str, &str, Vec<Option<&str>>); 3] = [
        (
            "refused: the next credential, then anonymously",
            vec![unauthorized(), ok()],
            "pulled",
            "127.0.0.1:5000/app@sha256:manifest",
            vec![Some("a"), None],
        ),
        (
            "refused by all: the unusable secrets are named",
            vec![unauthorized(), unauthorized()],
            "unauthorized",
            "pull failed after 1 attempts: unauthorized: 401 (secret ns/x is missing)",
            vec![Some("a"), None],
        ),
        (
            "another failure ends the attempt",
            vec![refused()],
            "error",
            "pull failed after 1 attempts: manifest unknown (secret ns/x is missing)",
            vec![Some("a")],
        ),
    ];
    for (name, answers, want, says, users) in cases {
        let rt = FakeRuntime::default();
        rt.pulls(answers);
        let deps = deps(rt.clone(), 1);
        let rep = Reporter::new(&*deps, key(), 1);
        let t = target(0);
        let candidates = vec![Some(cred.clone()), None];
        let job = attempts::Pull {
            rep: &rep,
            t: &t,
            deadline: None,
            creds: attempts::Credentials::new(candidates, " (secret ns/x is missing)"),
        };
        let outcome = attempts::attempt_pulls(&job, &mut None, &mut SlotHold::default()).await;
        assert_eq!(reason(&outcome), want, "{name}");
        assert_eq!(message(&outcome), says, "{name}");
        let tried: Vec<Option<String>> = rt
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Pull(_, user) => Some(user),
                _ => None,
            })
            .collect();
        let users: Vec<Option<String>> = users.iter().map(|u| u.map(str::to_string)).collect();
        assert_eq!(tried, users, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_tag_that_resolves_to_a_blocked_digest_fails_naming_the_job() {
    let rows: &[(&str, &str)] = &[
        // (what the block names, what the pull ends as)
        ("127.0.0.1:5000/app@sha256:manifest", "blocked"),
        ("127.0.0.1:5000/other@sha256:manifest", "pulled"),
        ("127.0.0.1:5000/app@sha256:another", "pulled"),
    ];
    for (blocked, want) in rows {
        let rt = FakeRuntime::default();
        let deps = deps(rt, 1);
        if let Ok(mut b) = deps.blocked.write() {
            b.insert((*blocked).to_string(), "cve-9".into());
        }
        let pulled = pull_once(&deps, &target(0), None).await;
        assert_eq!(reason(&pulled.outcome), *want, "{blocked}");
        if *want == "blocked" {
            let said = message(&pulled.outcome);
            assert!(
                said.starts_with(
                    "blocked by ImageRemovalJob cve-9: 127.0.0.1:5000/app:v1 resolves to"
                ),
                "{said}"
            );
        }
    }
}
