//! Running nodeimage for real: the metrics operators scrape follow pulls and
//! jobs (and a job's series go with it), and with leader election only one
//! of two controllers reconciles until it dies and the other takes over.

use nodeimage_tests::process::Daemon;
use nodeimage_tests::registry::Registry;
use nodeimage_tests::{Cleanup, Cluster, http, nodeimage, unique, wait_for};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(180);

fn controller_metrics_url(c: &Cluster) -> String {
    format!("http://{}/metrics", c.controller_health())
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn metrics_follow_pulls_and_jobs() {
    let c = Cluster::load();
    let mut cleanup = Cleanup::default();
    let tmp = tempdir("metrics");
    let node = unique("e2e-metrics");
    let ns = unique("e2e-metrics");

    // A test-owned daemon for a fake NodeImage: its counters are ours alone.
    let registry = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let image = registry
        .push_image(&unique("e2e-metrics"), Some("v1"), 256 * 1024)
        .expect("push a fresh image");
    nodeimage::create_fake(&c, &node, &BTreeMap::new(), json!({}));
    {
        let (c2, n) = (c.clone(), node.clone());
        cleanup.defer("delete the fake NodeImage", move || {
            nodeimage::delete(&c2, &n)
        });
    }
    let mut daemon = Daemon::start(&c, &node, &c.socket(0), &tmp, &[]);
    daemon.wait_readyz(200, LONG);
    nodeimage::set_image(
        &c,
        &node,
        &image.name,
        json!({"tags": [{"tag": "v1", "pullPolicy": {"ttlSecondsAfterFinished": 600}}]}),
    );
    nodeimage::wait_phase(
        &c,
        nodeimage::Tag {
            ni: &node,
            image: &image.name,
            tag: "v1",
        },
        0,
        "Succeeded",
        LONG,
    );
    let url = format!("http://127.0.0.1:{}/metrics", daemon.health_port);
    let text = wait_for("the daemon's pull counter", LONG, || {
        let t = http::scrape(&url);
        (http::metric_value(
            &t,
            r#"nodeimage_daemon_pulls_total{result="succeeded",reason="pulled"}"#,
        ) == Some(1.0))
        .then_some(t)
    });
    assert_eq!(
        http::metric_value(
            &text,
            r#"nodeimage_daemon_pull_duration_seconds_count{result="succeeded"}"#
        ),
        Some(1.0),
        "{text}"
    );
    assert!(
        http::metric_value(&text, "nodeimage_daemon_pulled_bytes_total").is_some_and(|b| b > 0.0),
        "{text}"
    );
    assert_eq!(
        http::metric_value(&text, "nodeimage_daemon_pulls_in_flight"),
        Some(0.0),
        "{text}"
    );
    assert!(text.contains("nodeimage_build_info{"), "{text}");
    assert!(text.contains("process_resident_memory_bytes"), "{text}");

    // An ImagePullJob over that NodeImage: the controller's gauges show it,
    // and its series go when the job goes.
    c.kubectl_ok(&["create", "namespace", &ns], None);
    {
        let (c2, n) = (c.clone(), ns.clone());
        cleanup.defer("delete the namespace", move || {
            let _ = c2.kubectl(&["delete", "namespace", &n, "--wait=false"], None);
        });
    }
    let job = json!({
        "apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "ImagePullJob",
        "metadata": {"name": "metrics-job", "namespace": ns},
        "spec": {
            "image": format!("{}:v1", image.name),
            "selector": {"names": [node]},
            "imagePullPolicy": "Always",
            "completionPolicy": {"type": "Always"},
        },
    });
    c.kubectl_ok(&["create", "-f", "-"], Some(&job.to_string()));
    let curl = controller_metrics_url(&c);
    let series = |state: &str| {
        format!(
            r#"nodeimage_job_nodes{{kind="ImagePullJob",namespace="{ns}",name="metrics-job",state="{state}"}}"#
        )
    };
    let text = wait_for("the job's succeeded gauge", LONG, || {
        let t = http::scrape(&curl);
        (http::metric_value(&t, &series("succeeded")) == Some(1.0)).then_some(t)
    });
    assert_eq!(
        http::metric_value(&text, &series("desired")),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        http::metric_value(&text, &series("failed")),
        Some(0.0),
        "{text}"
    );
    assert!(
        http::metric_value(
            &text,
            r#"nodeimage_controller_reconciles_total{kind="ImagePullJob"}"#
        )
        .is_some_and(|v| v >= 1.0),
        "{text}"
    );
    assert!(
        text.contains(r#"nodeimage_jobs{kind="ImagePullJob",phase="Succeeded"}"#),
        "{text}"
    );
    // The job's pull went through our daemon again (Always).
    wait_for("the second pull", LONG, || {
        (http::metric_value(
            &http::scrape(&url),
            r#"nodeimage_daemon_pulls_total{result="succeeded",reason="pulled"}"#,
        ) == Some(2.0))
        .then_some(())
    });

    c.kubectl_ok(&["delete", "imagepulljob", "metrics-job", "-n", &ns], None);
    wait_for("the job's series to go", LONG, || {
        (!http::scrape(&curl).contains(&format!(r#"namespace="{ns}""#))).then_some(())
    });
    daemon.kill();
}

/// A controller started by this test, killed when dropped.
struct Controller {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Controller {
    fn start(c: &Cluster, identity: &str, lease: &str, dir: &std::path::Path) -> Controller {
        let port = nodeimage_tests::free_port();
        let log = dir.join(format!("{identity}.log"));
        let out = std::fs::File::create(&log).expect("create log");
        let err = out.try_clone().expect("clone log handle");
        let child = Command::new(c.nodeimage_bin().join("nodeimage-controller"))
            .args([
                "--kubeconfig",
                &c.var("KUBECONFIG"),
                "--health-addr",
                &format!("127.0.0.1:{port}"),
                "--leader-elect",
                "--leader-election-lease",
                lease,
                "--leader-election-lease-seconds",
                "6",
            ])
            .env("POD_NAME", identity)
            .env("POD_NAMESPACE", "default")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("start nodeimage-controller");
        Controller { child, port, log }
    }

    fn reconciles(&self) -> f64 {
        let text = http::scrape(&format!("http://127.0.0.1:{}/metrics", self.port));
        text.lines()
            .filter(|l| l.starts_with("nodeimage_controller_reconciles_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn leader_gauge(&self) -> Option<f64> {
        let text = http::scrape(&format!("http://127.0.0.1:{}/metrics", self.port));
        http::metric_value(&text, "nodeimage_controller_leader")
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.kill();
    }
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn only_the_leader_reconciles_and_a_standby_takes_over() {
    let c = Cluster::load();
    let tmp = tempdir("leader");
    let lease = unique("e2e-lease");
    let a = Controller::start(&c, "e2e-ctl-a", &lease, &tmp);
    let b = Controller::start(&c, "e2e-ctl-b", &lease, &tmp);
    let holder = || {
        let r = c.kubectl(
            &[
                "get",
                "lease",
                &lease,
                "-n",
                "default",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
            None,
        );
        r.success
            .then(|| r.stdout.trim().to_string())
            .filter(|h| !h.is_empty())
    };
    let first = wait_for("a leader", LONG, holder);
    let (mut leader, standby) = if first == "e2e-ctl-a" { (a, b) } else { (b, a) };
    // The leader reconciles (there are Nodes and NodeImages to mirror); the
    // standby does nothing.
    wait_for("the leader to reconcile", LONG, || {
        (leader.reconciles() > 0.0).then_some(())
    });
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(
        standby.reconciles(),
        0.0,
        "the standby reconciled:\n{}",
        standby.log_text()
    );
    assert!(standby.log_text().contains("waiting to lead"));
    assert_eq!(leader.leader_gauge(), Some(1.0), "the leader says so");
    assert_eq!(standby.leader_gauge(), Some(0.0), "the standby says so");

    // Kill the leader: the standby takes the lease and starts working.
    leader.kill();
    let second = wait_for("the standby to take over", LONG, || {
        holder().filter(|h| *h != first)
    });
    assert_ne!(second, first);
    wait_for("the new leader to reconcile", LONG, || {
        (standby.reconciles() > 0.0).then_some(())
    });
    assert!(
        standby
            .log_text()
            .contains("leading: starting the controllers")
    );
    assert_eq!(standby.leader_gauge(), Some(1.0), "the new leader says so");
    let _ = c.kubectl(&["delete", "lease", &lease, "-n", "default"], None);
}

fn tempdir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(&format!("nodeimage-{what}")));
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Runs `promtool check metrics` on an exposition; Err with its output.
fn promtool_check(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("promtool (Debian package prometheus) must be installed: {e}"))?;
    child
        .stdin
        .take()
        .ok_or("no stdin")?
        .write_all(text.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Prometheus' plain-text format by default (what `promtool check metrics`
/// and every Prometheus read), OpenMetrics when the scraper prefers it; every
/// labelled counter exists before its first increment.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn metrics_speak_both_formats_and_pass_promtool() {
    let c = Cluster::load();
    let base: u16 = c
        .nodeimage_vars()
        .get("NODEIMAGE_DAEMON_HEALTH_BASE")
        .and_then(|b| b.parse().ok())
        .unwrap_or(18100);
    let urls = [
        controller_metrics_url(&c),
        format!("http://127.0.0.1:{}/metrics", base + 1),
    ];
    let prometheus_accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    for url in &urls {
        for accept in [None, Some("text/plain;version=0.0.4"), Some("*/*")] {
            let headers: Vec<(&str, &str)> = accept.iter().map(|a| ("Accept", *a)).collect();
            let r = http::request("GET", url, &headers, &[]).expect("scrape");
            let ct = r.header("content-type").unwrap_or_default().to_string();
            assert!(
                ct.starts_with("text/plain; version=0.0.4"),
                "{url} {accept:?}: {ct}"
            );
            let text = r.text();
            if let Err(e) = promtool_check(&text) {
                panic!("promtool check metrics on {url} (Accept {accept:?}):\n{e}\n---\n{text}");
            }
        }
        let r = http::request("GET", url, &[("Accept", prometheus_accept)], &[]).expect("scrape");
        let ct = r.header("content-type").unwrap_or_default().to_string();
        assert!(
            ct.starts_with("application/openmetrics-text"),
            "{url}: {ct}"
        );
        let text = r.text();
        assert!(
            text.trim_end().ends_with("# EOF"),
            "{url}: OpenMetrics ends with # EOF"
        );
        // Every sample belongs to a family declared with # TYPE.
        let families: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        for sample in text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let name = sample.split(['{', ' ']).next().unwrap_or_default();
            assert!(
                families.iter().any(|f| name.starts_with(f)),
                "{url}: sample {name} has no # TYPE"
            );
        }
    }
    // Counters exist at 0 before their first increment.
    let controller = http::scrape(&urls[0]);
    assert!(
        http::metric_value(
            &controller,
            "nodeimage_controller_reconcile_errors_total{kind=\"NodeUpgradeJob\"}"
        )
        .is_some(),
        "{controller}"
    );
    let daemon = http::scrape(&urls[1]);
    for series in [
        "nodeimage_daemon_pulls_total{result=\"failed\",reason=\"unauthorized\"}",
        "nodeimage_daemon_check_failures_total{item=\"mem\"}",
        "nodeimage_daemon_cri_errors_total{call=\"PullImage\"}",
    ] {
        assert!(
            http::metric_value(&daemon, series).is_some(),
            "{series} missing:\n{daemon}"
        );
    }
}
