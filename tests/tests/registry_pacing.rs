//! Registry pacing end to end, on the local cluster's three real nodes and
//! the shared controller, which `tests/nodeimage.sh start` runs with a
//! limit of one pulling node on one registry host of its own
//! (`--registry-max-pulls-for <NODEIMAGE_PACED_REGISTRY>=1`). This test
//! starts a slow proxy on that host in front of the cluster registry;
//! no other test names it, so the limit holds back nobody else.
//!
//! Three ImagePullJobs, each free to pull on all three nodes at once,
//! pull three images through it. The daemons' own timestamps (each tag's
//! `startTime` and `completionTime`) must show one node pulling at a time
//! (a node pulling several images counts once), and every job must
//! complete. Then two namespaces share the limit: a job of the second
//! namespace gets the freed slot while an older job of the first still
//! waits for more.
//!
//! Both tests use the one paced host and its limit, so they run one after
//! the other (`SERIAL`).

use k8s_openapi::jiff::Timestamp;
use nodeimage_tests::kruise::{self, IPJ, SlowRegistry, TestNs, completed, count};
use nodeimage_tests::{Cluster, http};
use serde_json::{Value, json};
use std::sync::Mutex;
use std::time::Duration;

/// The paced host and its limit are shared: one test at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Nine pulls one after the other, each a few seconds, with the
/// controller's hand-over between them.
const TIMEOUT: Duration = Duration::from_secs(300);
/// Proxy rate: 6 MB images take about two seconds each, alone.
const BYTES_PER_SECOND: u64 = 3_000_000;
const IMAGE_BYTES: usize = 6 << 20;

/// One pull on one node, as its daemon reported it.
struct Pull {
    node: String,
    image: String,
    start: i64,
    end: i64,
}

impl std::fmt::Display for Pull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (n, i, s, e) = (&self.node, &self.image, self.start, self.end);
        write!(f, "{n} pulled {i} from {s} to {e}")
    }
}

fn seconds(v: &Value) -> Option<i64> {
    v.as_str()?.parse::<Timestamp>().ok().map(|t| t.as_second())
}

/// The pulls of `image` (a NodeImage key, tag v1) on `nodes`, from status.
fn pulls_of(c: &Cluster, image: &str, nodes: &[String]) -> Vec<Pull> {
    let all = kruise::nodeimages(c);
    nodes
        .iter()
        .map(|n| {
            let ni = kruise::find(&all, n).unwrap_or_else(|| panic!("no NodeImage {n}"));
            let st = kruise::status_tag(ni, image, "v1")
                .unwrap_or_else(|| panic!("{n} reports nothing of {image}: {}", ni["status"]));
            assert_eq!(st["phase"], "Succeeded", "{n} {image}: {st}");
            let (start, end) = (seconds(&st["startTime"]), seconds(&st["completionTime"]));
            let (Some(start), Some(end)) = (start, end) else {
                panic!("{n} {image}: no startTime or completionTime: {st}");
            };
            Pull {
                node: n.clone(),
                image: image.to_string(),
                start,
                end,
            }
        })
        .collect()
}

/// The paced host (its limit is one pulling node) and a slow proxy on it
/// in front of the cluster registry.
fn paced_host(c: &Cluster) -> (String, SlowRegistry) {
    let paced = c
        .nodeimage_vars()
        .get("NODEIMAGE_PACED_REGISTRY")
        .cloned()
        .expect("NODEIMAGE_PACED_REGISTRY: restart nodeimage with tests/nodeimage.sh start");
    let slow = SlowRegistry::start_on(c, &paced, &c.var("NODEIMAGE_REGISTRY"), BYTES_PER_SECOND);
    (paced, slow)
}

/// The cluster's three shared nodes.
fn three_nodes(c: &Cluster) -> Vec<String> {
    let nodes: Vec<String> = c.nodes().into_iter().take(3).collect();
    assert_eq!(nodes.len(), 3, "the cluster has three nodes");
    nodes
}

#[test]
#[ignore = "needs the local cluster (tests/cluster/up.sh) and nodeimage (tests/nodeimage.sh start)"]
fn a_registry_limit_of_one_pulls_on_one_node_at_a_time() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::load();
    let (paced, slow) = paced_host(&c);
    let ns = TestNs::create(&c, "e2e-pace");
    let nodes = three_nodes(&c);
    let reg = kruise::registry(&c);
    let mut images = Vec::new();
    for i in 0..3 {
        let pushed = kruise::push_unique(&reg, &format!("pace{i}"), IMAGE_BYTES);
        let image = kruise::via(&pushed, &slow.host());
        let job = json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJob",
            "metadata": {"name": format!("pace-{i}"), "namespace": ns.name},
            "spec": {
                "image": format!("{}:v1", image.name),
                "parallelism": 3,
                "selector": {"names": nodes},
                "pullPolicy": {"timeoutSeconds": 120, "backoffLimit": 1},
                "completionPolicy": {"type": "Always"},
            },
        });
        kruise::create(&c, &job);
        images.push(image.name);
    }
    for i in 0..3 {
        let job = kruise::wait_job(
            &c,
            IPJ,
            &ns.name,
            &format!("pace-{i}"),
            "completed",
            TIMEOUT,
            completed,
        );
        let got = (count(&job, "succeeded"), count(&job, "failed"));
        assert_eq!(got, (3, 0), "{}", kruise::describe(&job));
    }

    let pulls: Vec<Pull> = images
        .iter()
        .flat_map(|i| pulls_of(&c, i, &nodes))
        .collect();
    let all: Vec<String> = pulls.iter().map(Pull::to_string).collect();
    eprintln!("pulls from {paced} (Unix seconds):\n{}", all.join("\n"));
    // Each node pulls from its first start to its last end; no two nodes
    // at once.
    let mut spans: Vec<(i64, i64, &str)> = nodes
        .iter()
        .filter_map(|n| {
            let mine = pulls.iter().filter(|p| p.node == *n);
            let start = mine.clone().map(|p| p.start).min()?;
            let end = mine.map(|p| p.end).max()?;
            Some((start, end, n.as_str()))
        })
        .collect();
    spans.sort();
    for pair in spans.windows(2) {
        let ((_, a_end, a), (b_start, _, b)) = (pair[0], pair[1]);
        assert!(
            b_start >= a_end,
            "{a} and {b} pulled from {paced} at once; all pulls (Unix seconds):\n{}",
            all.join("\n")
        );
    }
    // The jobs created after the first waited, and said so.
    let waited = (0..3).any(|i| {
        kruise::events_of(&c, &ns.name, &format!("pace-{i}"))
            .iter()
            .any(|e| e["reason"] == "RegistryWait")
    });
    assert!(waited, "no job published a RegistryWait event");
    // The controller exports the limit of the host.
    let health = c
        .nodeimage_vars()
        .get("NODEIMAGE_CONTROLLER_HEALTH")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:18080".into());
    let text = http::scrape(&format!("http://{health}/metrics"));
    let series = format!("nodeimage_registry_pull_limit{{registry=\"{paced}\"}}");
    assert_eq!(
        http::metric_value(&text, &series),
        Some(1.0),
        "{series} in:\n{text}"
    );
}

/// An ImagePullJob `name` in `ns` of `image` on `nodes`, all at once.
fn job_on(ns: &str, name: &str, image: &str, nodes: &[String]) -> Value {
    json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "image": format!("{image}:v1"),
            "parallelism": nodes.len(),
            "selector": {"names": nodes},
            "pullPolicy": {"timeoutSeconds": 120, "backoffLimit": 1},
            "completionPolicy": {"type": "Always"},
        },
    })
}

#[test]
#[ignore = "needs the local cluster (tests/cluster/up.sh) and nodeimage (tests/nodeimage.sh start)"]
fn two_namespaces_share_a_limit_of_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::load();
    let (paced, slow) = paced_host(&c);
    let nodes = three_nodes(&c);
    let (first, second) = (
        TestNs::create(&c, "e2e-pace-a"),
        TestNs::create(&c, "e2e-pace-b"),
    );
    let reg = kruise::registry(&c);
    let image = |name: &str| {
        let pushed = kruise::push_unique(&reg, name, IMAGE_BYTES);
        kruise::via(&pushed, &slow.host()).name
    };
    let (big, small) = (image("share-a"), image("share-b"));
    // The first namespace's job wants two nodes; it gets the only slot.
    let two = nodes[..2].to_vec();
    kruise::create(&c, &job_on(&first.name, "big", &big, &two));
    kruise::wait_job(&c, IPJ, &first.name, "big", "pulling", TIMEOUT, |j| {
        count(j, "active") >= 1
    });
    // Younger, by a whole second of creationTimestamp.
    std::thread::sleep(Duration::from_millis(1100));
    let third = nodes[2..].to_vec();
    kruise::create(&c, &job_on(&second.name, "small", &small, &third));
    for (ns, name) in [(&second.name, "small"), (&first.name, "big")] {
        let job = kruise::wait_job(&c, IPJ, ns, name, "completed", TIMEOUT, completed);
        assert_eq!(count(&job, "failed"), 0, "{}", kruise::describe(&job));
    }
    let mut big_pulls = pulls_of(&c, &big, &two);
    big_pulls.sort_by_key(|p| p.start);
    let small_pull = pulls_of(&c, &small, &third).remove(0);
    let all: Vec<String> = big_pulls
        .iter()
        .chain([&small_pull])
        .map(Pull::to_string)
        .collect();
    eprintln!("pulls from {paced} (Unix seconds):\n{}", all.join("\n"));
    // Oldest first across namespaces would pull both of the older job's
    // nodes before the other namespace's one.
    let last_big = &big_pulls[1];
    assert!(
        small_pull.start < last_big.start && small_pull.end <= last_big.start,
        "the second namespace waited for the older job of the first: {}",
        all.join("; ")
    );
}

/// Issue 52: pacing knows the waves. With a limit of one on the paced
/// host, a job of one seed and fan-out 3 pulls on the seed alone; once the
/// seed holds the image, the two others start together (the waves start
/// them from peers, which take no slot of the registry) where plain
/// pacing would start one at a time. No P2P engine runs here, so their
/// bytes still come through the paced host: what is shown is the
/// controller's hand-out, not the bytes.
#[test]
#[ignore = "needs the local cluster (tests/cluster/up.sh) and nodeimage (tests/nodeimage.sh start)"]
fn a_wave_from_peers_takes_no_slot_of_a_limit_of_one() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let c = Cluster::load();
    let (paced, slow) = paced_host(&c);
    let ns = TestNs::create(&c, "e2e-pace-waves");
    let nodes = three_nodes(&c);
    let pushed = kruise::push_unique(&kruise::registry(&c), "pace-waves", IMAGE_BYTES);
    let image = kruise::via(&pushed, &slow.host());
    let mut job = job_on(&ns.name, "waves", &image.name, &nodes);
    job["metadata"]["annotations"] = json!({
        "nodeimage.dev/p2p-seeds": "1",
        "nodeimage.dev/p2p-fan-out": "3",
    });
    kruise::create(&c, &job);
    let done = kruise::wait_job(&c, IPJ, &ns.name, "waves", "completed", TIMEOUT, completed);
    assert_eq!(count(&done, "succeeded"), 3, "{}", kruise::describe(&done));
    let mut pulls = pulls_of(&c, &image.name, &nodes);
    pulls.sort_by_key(|p| (p.start, p.end));
    let all: Vec<String> = pulls.iter().map(Pull::to_string).collect();
    let all = all.join("\n");
    eprintln!("pulls from {paced} (Unix seconds):\n{all}");
    let (seed, a, b) = (&pulls[0], &pulls[1], &pulls[2]);
    assert!(
        a.start >= seed.end && b.start >= seed.end,
        "the seed pulled alone first:\n{all}"
    );
    assert!(
        b.start < a.end,
        "the two nodes started from peers pulled at once, beyond the limit of one:\n{all}"
    );
}
