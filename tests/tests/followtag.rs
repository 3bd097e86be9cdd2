//! Tags that move (annotation `nodeimage.dev/follow-tag`), end to end: a
//! tag re-pushed with new content is pulled again on every node its jobs
//! select, with one digest lookup per interval at the registry for every
//! job following it, and the nodes' status shows the new digest; a
//! refused annotation and a registry that does not answer are said, and
//! nothing else stops.
//!
//! The registry is the test's own (`TestRegistry`), so its access log holds
//! only this test's requests; the controller's lookups are told from the
//! nodes' pulls by their User-Agent.

use nodeimage_tests::kruise::{self, IPJ, TestNs, count};
use nodeimage_tests::process::TestRegistry;
use nodeimage_tests::registry::{PushedImage, Registry};
use nodeimage_tests::{Cluster, random_suffix};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const FOLLOW_TAG: &str = "nodeimage.dev/follow-tag";
const FOLLOWED_DIGEST: &str = "nodeimage.dev/followed-digest";
const LOOKUP_AGENT: &str = "(follow-tag)";
/// The annotation's smallest interval, used here.
const INTERVAL: Duration = Duration::from_secs(60);

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ni-e2e-follow-")
        .tempdir_in("/tmp")
        .expect("create a temporary directory")
}

fn job(ns: &str, name: &str, image: &str, every: &str, nodes: &[String]) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": ns, "annotations": {FOLLOW_TAG: every}},
        "spec": {
            "image": image,
            "selector": {"names": nodes},
            "parallelism": 3,
            "pullPolicy": {"timeoutSeconds": 60, "backoffLimit": 1},
            "completionPolicy": {"type": "Never"},
        },
    })
}

/// The controller's digest lookups of `repository:stable` in the access log.
fn lookups(reg: &TestRegistry, repository: &str) -> Vec<String> {
    reg.requests(&format!("HEAD /v2/{repository}/manifests/stable "))
        .into_iter()
        .filter(|l| l.contains(LOOKUP_AGENT))
        .collect()
}

/// Seconds since the epoch of an access-log line's `[28/Nov/2026:23:41:08 +0000]`.
fn logged_at(line: &str) -> i64 {
    let stamp = line
        .split_once('[')
        .and_then(|(_, r)| r.split_once(' '))
        .map(|(s, _)| s)
        .unwrap_or_else(|| panic!("no time in {line}"));
    let f: Vec<&str> = stamp.split(['/', ':']).collect();
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let num = |i: usize| -> i64 { f[i].parse().unwrap_or_else(|_| panic!("bad time {stamp}")) };
    let month = months.iter().position(|m| *m == f[1]).expect("month") as i64 + 1;
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m, d) = (num(2) - i64::from(month <= 2), month, num(0));
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    days * 86_400 + num(3) * 3600 + num(4) * 60 + num(5)
}

/// Waits until every node in `nodes` reports `image:stable` Succeeded with
/// `image`'s digest as its imageID; returns when.
fn wait_nodes_hold(c: &Cluster, image: &PushedImage, nodes: &[String], timeout: Duration) {
    kruise::eventually(
        &format!(
            "{nodes:?} to report {} for {}:stable",
            image.digest, image.name
        ),
        timeout,
        || {
            let all = kruise::nodeimages(c);
            for n in nodes {
                let ni = kruise::find(&all, n).ok_or(format!("no NodeImage {n}"))?;
                let st = kruise::status_tag(ni, &image.name, "stable")
                    .ok_or(format!("{n}: no status yet"))?;
                if st["phase"] != "Succeeded" || st["imageID"] != image.by_digest().as_str() {
                    return Err(format!("{n}: {st}"));
                }
            }
            Ok(())
        },
    )
}

fn annotation(c: &Cluster, ns: &str, name: &str, key: &str) -> Option<String> {
    let j = kruise::get(c, IPJ, Some(ns), name)?;
    j["metadata"]["annotations"][key]
        .as_str()
        .map(str::to_string)
}

fn wait_annotation(c: &Cluster, ns: &str, name: &str, key: &str, want: &str, timeout: Duration) {
    kruise::eventually(
        &format!("{ns}/{name} {key}={want}"),
        timeout,
        || match annotation(c, ns, name, key) {
            Some(v) if v == want => Ok(()),
            other => Err(format!("{other:?}")),
        },
    )
}

fn wait_event(c: &Cluster, ns: &str, name: &str, reason: &str, timeout: Duration) -> String {
    kruise::eventually(&format!("event {reason} on {ns}/{name}"), timeout, || {
        kruise::events_of(c, ns, name)
            .into_iter()
            .find(|e| e["reason"] == reason)
            .map(|e| e["message"].as_str().unwrap_or_default().to_string())
            .ok_or_else(|| "not yet".to_string())
    })
}

/// Two jobs (two namespaces, one on every node, one on a single node)
/// follow one tag every minute. The tag is re-pushed with new content:
/// within an interval both jobs say TagMoved (old and new digest), every
/// node pulls it again and reports the new digest, and the registry saw
/// one lookup per interval for both jobs together (never one per node or
/// per job). Then the registry stops: the next lookup's failure is a
/// Warning, the jobs keep the digest they follow.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_moved_tag_is_pulled_again_everywhere_with_one_lookup_per_interval() {
    let c = Cluster::load();
    let nodes = c.nodes();
    let dir = temp_dir();
    let mut reg = TestRegistry::start(dir.path());
    let r = Registry::new(&reg.host());
    let repo = format!("follow-{}", &random_suffix()[..8]);
    let first = r
        .push_image(&repo, Some("stable"), 4096)
        .expect("push the first image");
    let (ns_a, ns_b) = (
        TestNs::create(&c, "e2e-follow-a"),
        TestNs::create(&c, "e2e-follow-b"),
    );
    let reference = first.reference();
    kruise::create(&c, &job(&ns_a.name, "all", &reference, "1m", &nodes));
    kruise::create(&c, &job(&ns_b.name, "one", &reference, "1m", &nodes[..1]));
    wait_nodes_hold(&c, &first, &nodes, Duration::from_secs(120));
    for (ns, name) in [(&ns_a.name, "all"), (&ns_b.name, "one")] {
        wait_annotation(
            &c,
            ns,
            name,
            FOLLOWED_DIGEST,
            &first.digest,
            Duration::from_secs(30),
        );
        let said = wait_event(&c, ns, name, "TagFollowed", Duration::from_secs(30));
        assert!(said.contains(&first.digest), "{said}");
    }
    let early = lookups(&reg, &repo);
    assert_eq!(early.len(), 1, "one lookup for both jobs: {early:#?}");

    let moved = Instant::now();
    let second = r
        .push_image(&repo, Some("stable"), 4096)
        .expect("push the second image");
    assert_ne!(first.digest, second.digest);
    // The next lookup is due at most an interval after the first; the
    // nodes pull then.
    let bound = INTERVAL + Duration::from_secs(60);
    wait_nodes_hold(&c, &second, &nodes, bound);
    let took = moved.elapsed();
    for (ns, name) in [(&ns_a.name, "all"), (&ns_b.name, "one")] {
        wait_annotation(
            &c,
            ns,
            name,
            FOLLOWED_DIGEST,
            &second.digest,
            Duration::from_secs(10),
        );
        let said = wait_event(&c, ns, name, "TagMoved", Duration::from_secs(10));
        assert!(
            said.contains(&first.digest) && said.contains(&second.digest),
            "TagMoved names the old and new digest: {said}"
        );
        let j = kruise::get(&c, IPJ, Some(ns), name).expect("job exists");
        assert_eq!(count(&j, "failed"), 0, "{j}");
    }

    // Stop the registry: the next lookup fails, said as a Warning.
    reg.stop();
    let failed = wait_event(
        &c,
        &ns_a.name,
        "all",
        "TagLookupFailed",
        INTERVAL + Duration::from_secs(30),
    );
    assert!(failed.contains(&repo), "{failed}");
    assert_eq!(
        annotation(&c, &ns_a.name, "all", FOLLOWED_DIGEST).as_deref(),
        Some(second.digest.as_str()),
        "a failed lookup keeps the followed digest"
    );

    // One lookup per interval, for both jobs: consecutive lookups are an
    // interval apart (the log has whole seconds), and there are no more
    // than the time allows.
    let all = lookups(&reg, &repo);
    let times: Vec<i64> = all.iter().map(|l| logged_at(l)).collect();
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= INTERVAL.as_secs() as i64 - 1,
            "lookups {gap}s apart, less than the interval: {all:#?}"
        );
    }
    let span = times.last().unwrap_or(&0) - times.first().unwrap_or(&0);
    assert!(
        times.len() as i64 <= span / INTERVAL.as_secs() as i64 + 1,
        "{} lookups in {span}s: {all:#?}",
        times.len()
    );
    eprintln!(
        "followtag: nodes held the moved tag {took:?} after the push; {} lookups over {span}s",
        times.len()
    );
}

/// A refused interval and a digest-pinned image: a Warning naming the
/// annotation, and the job pulls as it would without it.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn refused_annotations_are_said_and_the_job_goes_on() {
    let c = Cluster::load();
    let node = c.nodes()[..1].to_vec();
    let ns = TestNs::create(&c, "e2e-follow-bad");
    let image = kruise::push_unique(&kruise::registry(&c), "follow-bad", 4096);
    let cases = [
        ("short", image.reference(), "30s", "outside"),
        ("word", image.reference(), "often", "is not a duration"),
        ("pinned", image.by_digest(), "1m", "pinned by digest"),
    ];
    for (name, reference, every, _) in &cases {
        kruise::create(&c, &job(&ns.name, name, reference, every, &node));
    }
    for (name, _, _, word) in &cases {
        let said = wait_event(
            &c,
            &ns.name,
            name,
            "FollowTagRefused",
            Duration::from_secs(60),
        );
        assert!(
            said.contains(FOLLOW_TAG) && said.contains(word),
            "{name}: {said}"
        );
        kruise::wait_job(
            &c,
            IPJ,
            &ns.name,
            name,
            "succeeded=1",
            Duration::from_secs(120),
            |j| count(j, "succeeded") == 1,
        );
        assert_eq!(
            annotation(&c, &ns.name, name, FOLLOWED_DIGEST),
            None,
            "{name}"
        );
    }
}

/// On the registry that needs Basic auth: a job with a pull secret for it
/// follows its tag (the lookup answers the challenge with the secret's
/// credentials); a job without one is told the registry refused the lookup
/// (401), and still runs (its nodes fail to pull without credentials, as
/// they would without the annotation).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn lookups_use_the_jobs_pull_secret_and_say_a_refusal() {
    let c = Cluster::load();
    let node = c.nodes()[..1].to_vec();
    let ns = TestNs::create(&c, "e2e-follow-auth");
    let reg = kruise::auth_registry(&c);
    let image = kruise::push_unique(&reg, "follow-auth", 4096);
    let host = c.var("NODEIMAGE_AUTH_REGISTRY");
    let payload = kruise::docker_config_json(
        &[&host],
        &c.var("NODEIMAGE_AUTH_USER"),
        &c.var("NODEIMAGE_AUTH_PASSWORD"),
    );
    kruise::put_secret(
        &c,
        &ns.name,
        "creds",
        "kubernetes.io/dockerconfigjson",
        ".dockerconfigjson",
        &payload,
        false,
    );
    let mut with = job(&ns.name, "with", &image.reference(), "1m", &node);
    with["spec"]["pullSecrets"] = json!(["creds"]);
    kruise::create(&c, &with);
    kruise::create(
        &c,
        &job(&ns.name, "without", &image.reference(), "1m", &node),
    );

    wait_annotation(
        &c,
        &ns.name,
        "with",
        FOLLOWED_DIGEST,
        &image.digest,
        Duration::from_secs(60),
    );
    let said = wait_event(&c, &ns.name, "with", "TagFollowed", Duration::from_secs(10));
    assert!(said.contains(&image.digest), "{said}");
    kruise::wait_job(
        &c,
        IPJ,
        &ns.name,
        "with",
        "succeeded=1",
        Duration::from_secs(120),
        |j| count(j, "succeeded") == 1,
    );

    let refused = wait_event(
        &c,
        &ns.name,
        "without",
        "TagLookupFailed",
        Duration::from_secs(60),
    );
    assert!(
        refused.contains("HTTP 401") && refused.contains("unauthorized"),
        "{refused}"
    );
    assert_eq!(annotation(&c, &ns.name, "without", FOLLOWED_DIGEST), None);
    let status = annotation(&c, &ns.name, "without", "nodeimage.dev/follow-tag-status");
    assert!(
        status
            .as_deref()
            .is_some_and(|s| s.starts_with("lookup failed:")),
        "{status:?}"
    );
}
