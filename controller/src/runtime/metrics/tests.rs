use super::*;
use crate::runtime::stores::RegistryGauge;
use k8s_openapi::api::core::v1::Node;
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::{ImagePullJobSpec, ImagePullJobStatus};
use nodeimage_api::kubeedge::{ImagePrePullJobStatus, ImagePrePullStatus, TaskStatus};

#[test]
fn job_counts_and_phases() {
    let mut j = ImagePullJob::new(
        "j",
        ImagePullJobSpec {
            image: "nginx".into(),
            template: Default::default(),
        },
    );
    j.metadata.namespace = Some("ns".into());
    j.status = Some(ImagePullJobStatus {
        desired: 3,
        active: 1,
        succeeded: 2,
        ..Default::default()
    });
    let c = image_pull_job_counts(&j);
    assert_eq!(
        (c.desired, c.active, c.succeeded, c.failed, c.phase),
        (3, 1, 2, 0, "Running")
    );

    let mut p = ImagePrePullJob::new("p", Default::default());
    let node = |state: &str| ImagePrePullStatus {
        node_status: Some(TaskStatus {
            phase: nodeimage_api::kubeedge::JobState {
                state: Some(state.into()),
                ..Default::default()
            },
            ..Default::default()
        }),
        image_status: None,
    };
    p.status = Some(ImagePrePullJobStatus {
        job: nodeimage_api::kubeedge::JobState {
            state: Some("Failed".into()),
            ..Default::default()
        },
        // States as the contract spells them (`task_end`); anything else,
        // "failed" in lower case too, is a task still running.
        status: Some(vec![
            node("Successful"),
            node("Failed"),
            node("pulling"),
            node("failed"),
        ]),
        ..Default::default()
    });
    let c = image_pre_pull_job_counts(&p);
    assert_eq!(
        (c.desired, c.active, c.succeeded, c.failed, c.phase),
        (4, 2, 1, 1, "Failed")
    );
}

#[test]
fn renders_without_caches_and_counts_reconciles() {
    let m = Metrics::default();
    let stores = Arc::new(Stores::default());
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(
        &mut r,
        stores.clone(),
        nodeimage_api::gate::DEFAULT_TAINT_KEY,
    );
    drop(m.reconcile("ImagePullJob"));
    m.error("ImagePullJob");
    m.response_timeouts.inc();
    let running = m.reconcile("NodeImage");
    let text = nodeimage_ops::metrics::render(&r);
    assert!(
        text.contains("nodeimage_controller_reconciles_in_progress{kind=\"NodeImage\"} 1"),
        "a running reconcile shows:\n{text}"
    );
    assert!(
        text.contains("nodeimage_controller_reconciles_total{kind=\"NodeImage\"} 0"),
        "and is not counted yet:\n{text}"
    );
    drop(running);
    let text = nodeimage_ops::metrics::render(&r);
    for needle in [
        "nodeimage_controller_reconciles_in_progress{kind=\"NodeImage\"} 0",
        "nodeimage_controller_reconciles_in_progress{kind=\"ImagePullJob\"} 0",
        "nodeimage_controller_reconciles_total{kind=\"NodeImage\"} 1",
        "nodeimage_controller_reconciles_total{kind=\"ImagePullJob\"} 1",
        "nodeimage_controller_reconcile_errors_total{kind=\"ImagePullJob\"} 1",
        "nodeimage_controller_reconcile_duration_seconds_count{kind=\"ImagePullJob\"} 1",
        "nodeimage_controller_response_timeouts_total 1",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}

/// The controller's metrics rendered with a series in every family the
/// caches feed (a labelled family is encoded only once it has one).
fn populated_render() -> String {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    let m = Metrics::default();
    let stores = Arc::new(Stores::default());
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(
        &mut r,
        stores.clone(),
        nodeimage_api::gate::DEFAULT_TAINT_KEY,
    );
    for kind in ["ImagePullJob", "NodeImage"] {
        drop(m.reconcile(kind));
        m.error(kind);
    }
    m.response_timeouts.inc();
    m.invalid_objects("ImagePullJob", 1);
    m.startup_gate_opened("timeout");
    m.startup_gate_refused("ImagePullJob");
    let (node_store, _node_writer) = reflector::store::<Node>();
    let _ = stores.nodes.set(node_store);
    let (ni_store, mut ni_writer) = reflector::store::<NodeImage>();
    ni_writer.apply_watcher_event(&Event::Apply(NodeImage::new("n", Default::default())));
    let _ = stores.nodeimages.set(ni_store);
    let (job_store, mut job_writer) = reflector::store::<ImagePullJob>();
    let mut j = ImagePullJob::new(
        "j",
        ImagePullJobSpec {
            image: "nginx".into(),
            template: Default::default(),
        },
    );
    j.metadata.namespace = Some("ns".into());
    job_writer.apply_watcher_event(&Event::Apply(j));
    let _ = stores.image_pull_jobs.set(job_store);
    let _ = stores.registries.set(Arc::new(|| {
        vec![RegistryGauge {
            registry: "docker.io".into(),
            in_flight: 3,
            limit: Some(5),
            rate_limited: true,
            jobs_waiting: 2,
        }]
    }));

    nodeimage_ops::metrics::render(&r)
}

/// The controller's own metrics, as docs/metrics.md and the chart name them.
fn ours(q: &str) -> bool {
    q.starts_with("nodeimage_controller_")
        || q.starts_with("nodeimage_job")
        || q.starts_with("nodeimage_nodeimages")
        || q.starts_with("nodeimage_registry_")
        || q.starts_with("nodeimage_startup_")
        || q.starts_with("nodeimage_predownload_")
}

/// docs/metrics.md's "Controller" table lists exactly the controller's own
/// metrics; the API client's (`nodeimage_api_*`) are nodeimage-ops'.
#[test]
fn metrics_md_lists_what_the_controller_declares() {
    let declared: std::collections::BTreeSet<String> =
        nodeimage_ops::metrics::declared_names(&populated_render())
            .into_iter()
            .filter(|n| ours(n))
            .collect();
    let doc = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/metrics.md");
    let doc = std::fs::read_to_string(doc).expect("read docs/metrics.md");
    let documented: std::collections::BTreeSet<String> =
        nodeimage_ops::metrics::documented_names(&doc, "Controller")
            .into_iter()
            .filter(|n| !n.starts_with("nodeimage_api_"))
            .collect();
    assert!(declared.len() >= 10, "declared: {declared:?}");
    assert_eq!(
        documented, declared,
        "docs/metrics.md's Controller table (left) vs the controller's metrics (right)"
    );
}

#[test]
fn dashboard_queries_exported_metrics() {
    let exported = nodeimage_ops::metrics::exported_names(&populated_render());
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/nodeimage");
    let mut text = String::new();
    for dir in ["dashboards", "templates"] {
        for entry in std::fs::read_dir(chart.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            text.push_str(&std::fs::read_to_string(entry.path()).unwrap_or_default());
        }
    }
    let queried = nodeimage_ops::metrics::queried_names(&text);
    assert!(
        queried.iter().any(|q| ours(q)),
        "the dashboard queries no controller metric: {queried:?}"
    );
    let missing: Vec<&String> = queried
        .iter()
        .filter(|q| ours(q))
        .filter(|q| !exported.contains(*q))
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not exported by the controller: {missing:?}\nexported: {exported:?}"
    );
}

#[test]
fn registry_gauges_per_registry() {
    let m = Metrics::default();
    let stores = Arc::new(Stores::default());
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(
        &mut r,
        stores.clone(),
        nodeimage_api::gate::DEFAULT_TAINT_KEY,
    );
    let text = nodeimage_ops::metrics::render(&r);
    assert!(
        !text.contains("nodeimage_registry_"),
        "no pacing, no series:\n{text}"
    );
    let _ = stores.registries.set(Arc::new(|| {
        let row = |registry: &str, in_flight, limit, rate_limited, jobs_waiting| RegistryGauge {
            registry: registry.into(),
            in_flight,
            limit,
            rate_limited,
            jobs_waiting,
        };
        vec![
            row("docker.io", 3, Some(5), true, 2),
            row("quay.io", 1, None, false, 0),
        ]
    }));
    let text = nodeimage_ops::metrics::render(&r);
    let has = |series: &str| text.lines().any(|l| l.starts_with(series));
    for series in [
        "nodeimage_registry_pulls_in_flight{registry=\"docker.io\"} 3",
        "nodeimage_registry_pulls_in_flight{registry=\"quay.io\"} 1",
        "nodeimage_registry_pull_limit{registry=\"docker.io\"} 5",
        "nodeimage_registry_rate_limited{registry=\"docker.io\"} 1",
        "nodeimage_registry_rate_limited{registry=\"quay.io\"} 0",
        "nodeimage_registry_jobs_waiting{registry=\"docker.io\"} 2",
    ] {
        assert!(has(series), "{series} missing:\n{text}");
    }
    let no_limit = [
        "nodeimage_registry_pull_limit{registry=\"quay.io\"}",
        "nodeimage_registry_jobs_waiting{registry=\"quay.io\"}",
    ];
    assert!(
        !no_limit.iter().any(|s| has(s)),
        "series without a limit:\n{text}"
    );
}
