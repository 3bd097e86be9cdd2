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
//!
//! Lookups go where the nodes' pulls go: a registry host that only an HTTP
//! proxy resolves (`nodeimage-follow.invalid`; tests/nodeimage.sh gives the
//! controller `HTTP_PROXY` = this file's proxy, on the registry's port + 11),
//! and one whose credentials only a kubelet credential-provider plugin
//! supplies (`nodeimage-follow-auth.invalid`, the plugin and config in
//! tests/fixtures/followtag/). The simulated nodes' containerd cannot be
//! given `HTTP_PROXY` without restarting the shared cluster: they reach the
//! same proxy as a registry mirror (`certs.d/<host>/hosts.toml`), so their
//! re-pulls go through it too.

use nodeimage_tests::httpproxy::{HttpProxy, Way};
use nodeimage_tests::kruise::{self, IPJ, TestNs, count};
use nodeimage_tests::process::{Daemon, TestRegistry};
use nodeimage_tests::registry::{PushedImage, Registry};
use nodeimage_tests::{Cleanup, Cluster, http, nodeimage as ni, random_suffix, unique};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::OnceLock;
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
        // Said once per cause: the reconciles that follow the first (its
        // entries, its status) do not say it again.
        assert_eq!(
            times_said(&c, &ns.name, name, "FollowTagRefused"),
            1,
            "{name}"
        );
    }
}

/// How many times `reason` was said on `ns/name`: each Event counts its
/// repeats (`count`, which the events API fills from the series).
fn times_said(c: &Cluster, ns: &str, name: &str, reason: &str) -> u64 {
    kruise::events_of(c, ns, name)
        .iter()
        .filter(|e| e["reason"] == reason)
        .map(|e| e["count"].as_u64().unwrap_or(1).max(1))
        .sum()
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
    // The node pulls it all the same (the entry it shares with "with"
    // carries that job's secret): the reconciles its entry and status cause
    // do not say the lookup's failure again.
    kruise::wait_job(
        &c,
        IPJ,
        &ns.name,
        "without",
        "succeeded=1",
        Duration::from_secs(120),
        |j| count(j, "succeeded") == 1,
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(times_said(&c, &ns.name, "without", "TagLookupFailed"), 1);
}

/// The registry host only the proxy resolves (a `.invalid` name).
const PROXIED: &str = "nodeimage-follow.invalid";
/// The same for the auth registry, whose credentials come from the plugin.
const PROXIED_AUTH: &str = "nodeimage-follow-auth.invalid";

/// The proxy tests/nodeimage.sh names in the controller's `HTTP_PROXY`
/// (the registry's port + 11), started once for this file's tests.
fn proxy(c: &Cluster) -> &'static HttpProxy {
    static PROXY: OnceLock<HttpProxy> = OnceLock::new();
    PROXY.get_or_init(|| {
        let registry = c.var("NODEIMAGE_REGISTRY");
        let port: u16 = registry
            .rsplit_once(':')
            .and_then(|(_, p)| p.parse().ok())
            .expect("NODEIMAGE_REGISTRY has a port");
        let listen = format!("127.0.0.1:{}", port + 11);
        for _ in 0..50 {
            match HttpProxy::start_on(&listen) {
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                r => return r.unwrap_or_else(|e| panic!("start the HTTP proxy on {listen}: {e}")),
            }
        }
        panic!("{listen} stays in use")
    })
}

/// Every node's containerd reaches `host` through the proxy, as a mirror
/// (`certs.d/<host>/hosts.toml`; its own server does not resolve). Removed
/// when dropped.
struct Mirror(Vec<PathBuf>);

impl Mirror {
    fn write(c: &Cluster, host: &str, proxy: &HttpProxy) -> Mirror {
        let state = PathBuf::from(c.var("NODEIMAGE_STATE"));
        let dirs = c
            .nodes()
            .iter()
            .map(|node| {
                let dir = state.join("nodes").join(node).join("certs.d").join(host);
                std::fs::create_dir_all(&dir).expect("create certs.d dir");
                let toml = format!(
                    "# Written by tests/tests/followtag.rs\nserver = \"http://{host}\"\n\n[host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
                    proxy.addr
                );
                std::fs::write(dir.join("hosts.toml"), toml).expect("write hosts.toml");
                dir
            })
            .collect();
        Mirror(dirs)
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        for d in &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The proxy's records of `way` for `repository:stable`'s manifest on
/// `host`; with `lookup`, only the controller's lookups (else only others').
fn through(proxy: &HttpProxy, way: Way, host: &str, repository: &str, lookup: bool) -> usize {
    let path = format!("/v2/{repository}/manifests/stable");
    proxy
        .seen()
        .iter()
        .filter(|s| s.way == way && s.host == host && s.routed && s.line.contains(&path))
        .filter(|s| s.user_agent.contains(LOOKUP_AGENT) == lookup)
        .count()
}

/// The controller's followed-tag counters now: (lookups found, digest changes).
fn follow_metrics(c: &Cluster) -> (f64, f64) {
    let text = http::scrape(&format!("http://{}/metrics", c.controller_health()));
    let found = http::metric_value(
        &text,
        r#"nodeimage_controller_followtag_lookups_total{result="found"}"#,
    );
    let moved = http::metric_value(&text, "nodeimage_controller_followtag_digest_changes_total");
    match (found, moved) {
        (Some(f), Some(m)) => (f, m),
        _ => panic!("the controller's followed-tag counters are not exported at 0:\n{text}"),
    }
}

/// A followed tag on a registry that only an HTTP proxy reaches (its name
/// resolves nowhere else): the controller looks it up through
/// `HTTP_PROXY` (absolute-URL requests at the proxy), every node pulls it
/// through the same proxy, and after the tag moves every node pulls the
/// new digest; the lookup counters move with it.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_tag_behind_an_http_proxy_is_looked_up_and_pulled_through_it() {
    let c = Cluster::load();
    let nodes = c.nodes();
    let dir = temp_dir();
    let reg = TestRegistry::start(dir.path());
    let proxy = proxy(&c);
    proxy.route(PROXIED, &reg.host());
    assert!(
        std::net::TcpStream::connect((PROXIED, 80)).is_err(),
        "{PROXIED} must not be reachable without the proxy"
    );
    let _mirror = Mirror::write(&c, PROXIED, proxy);
    let r = Registry::new(&reg.host());
    let repo = format!("follow-proxied-{}", &random_suffix()[..8]);
    let push = || {
        let pushed = r.push_image(&repo, Some("stable"), 4096).expect("push");
        kruise::via(&pushed, PROXIED)
    };
    let (found_before, moved_before) = follow_metrics(&c);
    let first = push();
    let ns = TestNs::create(&c, "e2e-follow-proxy");
    kruise::create(
        &c,
        &job(&ns.name, "proxied", &first.reference(), "1m", &nodes),
    );
    wait_nodes_hold(&c, &first, &nodes, Duration::from_secs(120));
    wait_annotation(
        &c,
        &ns.name,
        "proxied",
        FOLLOWED_DIGEST,
        &first.digest,
        Duration::from_secs(30),
    );
    assert!(
        through(proxy, Way::Forward, PROXIED, &repo, true) >= 1,
        "the controller's lookup came through HTTP_PROXY: {:#?}",
        proxy.seen()
    );
    assert!(
        !lookups(&reg, &repo).is_empty(),
        "the registry answered the lookup (through the proxy)"
    );
    assert!(
        through(proxy, Way::Mirror, PROXIED, &repo, false) >= 1,
        "the nodes pulled through the proxy: {:#?}",
        proxy.seen()
    );

    let second = push();
    assert_ne!(first.digest, second.digest);
    wait_nodes_hold(&c, &second, &nodes, INTERVAL + Duration::from_secs(60));
    let said = wait_event(&c, &ns.name, "proxied", "TagMoved", Duration::from_secs(10));
    assert!(
        said.contains(&first.digest) && said.contains(&second.digest),
        "{said}"
    );
    assert!(through(proxy, Way::Forward, PROXIED, &repo, true) >= 2);
    let j = kruise::get(&c, IPJ, Some(&ns.name), "proxied").expect("job exists");
    assert_eq!(count(&j, "failed"), 0, "{j}");
    let (found, moved) = follow_metrics(&c);
    assert!(
        found - found_before >= 2.0,
        "lookups found: {found_before} -> {found}"
    );
    assert!(
        moved - moved_before >= 1.0,
        "digest changes: {moved_before} -> {moved}"
    );
}

/// A followed tag on a registry whose credentials only a kubelet
/// credential-provider plugin supplies (no pull secret anywhere): the
/// controller runs the plugin (the config tests/nodeimage.sh gives it) and
/// follows the tag; the job's nodes (a test daemon per node's containerd,
/// each for a fake NodeImage, with the same plugin) pull it with the
/// plugin's credentials, and again when the tag moves.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_tag_behind_a_credential_provider_is_followed_with_its_credentials() {
    let c = Cluster::load();
    let dir = temp_dir();
    let proxy = proxy(&c);
    proxy.route(PROXIED_AUTH, &c.var("NODEIMAGE_AUTH_REGISTRY"));
    let _mirror = Mirror::write(&c, PROXIED_AUTH, proxy);
    let reg = kruise::auth_registry(&c);
    let repo = format!("follow-cp-{}", &random_suffix()[..8]);
    let push = || {
        let pushed = reg.push_image(&repo, Some("stable"), 4096).expect("push");
        kruise::via(&pushed, PROXIED_AUTH)
    };
    let first = push();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/followtag");
    let config = dir.path().join("providers.yaml");
    std::fs::write(
        &config,
        format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: followtag-provider\n    matchImages: [\"{PROXIED_AUTH}\"]\n    defaultCacheDuration: 10s\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n    env:\n      - {{name: FOLLOWTAG_USER, value: \"{}\"}}\n      - {{name: FOLLOWTAG_PASSWORD, value: \"{}\"}}\n      - {{name: LOG, value: \"{}\"}}\n",
            c.var("NODEIMAGE_AUTH_USER"),
            c.var("NODEIMAGE_AUTH_PASSWORD"),
            dir.path().join("daemons.log").display()
        ),
    )
    .expect("write the daemons' config");
    let (config_flag, bin_flag) = (
        config.display().to_string(),
        fixtures.join("bin").display().to_string(),
    );
    let mut cleanup = Cleanup::default();
    let mut daemons = Vec::new();
    let mut names = Vec::new();
    for n in c.runtime_nodes() {
        let name = unique("e2e-follow-cp");
        ni::create_fake(&c, &name, &BTreeMap::new(), json!({}));
        let (c2, n2) = (c.clone(), name.clone());
        cleanup.defer(format!("delete nodeimage {name}"), move || {
            ni::delete(&c2, &n2)
        });
        let (sock, image) = (n.socket.clone(), first.name.clone());
        cleanup.defer(format!("remove {image} from {}", n.name), move || {
            let _ = nodeimage_tests::cri::remove_image(&sock, &format!("{image}:stable"));
        });
        let flags = [
            "--image-credential-provider-config",
            config_flag.as_str(),
            "--image-credential-provider-bin-dir",
            bin_flag.as_str(),
        ];
        daemons.push(Daemon::start(&c, &name, &n.socket, dir.path(), &flags));
        names.push(name);
    }
    let ns = TestNs::create(&c, "e2e-follow-cp");
    kruise::create(
        &c,
        &job(&ns.name, "plugin", &first.reference(), "1m", &names),
    );
    wait_nodes_hold(&c, &first, &names, Duration::from_secs(120));
    wait_annotation(
        &c,
        &ns.name,
        "plugin",
        FOLLOWED_DIGEST,
        &first.digest,
        Duration::from_secs(30),
    );
    let log = PathBuf::from(c.var("NODEIMAGE_STATE")).join("logs/followtag-provider.log");
    let asked = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        asked
            .lines()
            .any(|l| l.starts_with("nodeimage-contr") && l.contains(&repo)),
        "the controller ran the plugin for {repo}: {}:\n{asked}",
        log.display()
    );
    assert!(
        kruise::events_of(&c, &ns.name, "plugin")
            .iter()
            .all(|e| e["reason"] != "TagLookupFailed"),
        "no refused lookup"
    );

    let second = push();
    assert_ne!(first.digest, second.digest);
    wait_nodes_hold(&c, &second, &names, INTERVAL + Duration::from_secs(60));
    let said = wait_event(&c, &ns.name, "plugin", "TagMoved", Duration::from_secs(10));
    assert!(
        said.contains(&first.digest) && said.contains(&second.digest),
        "{said}"
    );
    assert!(
        through(proxy, Way::Forward, PROXIED_AUTH, &repo, true) >= 2,
        "both lookups went through the proxy: {:#?}",
        proxy.seen()
    );
    let password = c.var("NODEIMAGE_AUTH_PASSWORD");
    for d in &daemons {
        assert!(
            !d.log_text().contains(&password),
            "a daemon logged the password"
        );
    }
    drop(daemons);
    drop(cleanup);
}
