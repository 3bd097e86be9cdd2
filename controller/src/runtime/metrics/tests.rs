use super::*;
use crate::runtime::readers::{Listed, RegistryGauge, RegistryReport, Scraped, Synced};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{self, Store};
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::{ImagePullJob, ImagePullJobSpec, ImagePullJobStatus};
use nodeimage_api::kubeedge::{
    ImagePrePullJob, ImagePrePullJobStatus, ImagePrePullStatus, TaskStatus,
};

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

/// A listed store of `objects`.
fn listed<K>(objects: Vec<K>) -> Listed<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store::<K>();
    for o in objects {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(o));
    }
    Listed {
        store,
        synced: Synced::done(),
    }
}

/// A store not listed yet.
fn unlisted<K>() -> Listed<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, _writer): (Store<K>, _) = reflector::store::<K>();
    Listed {
        store,
        synced: Synced::default(),
    }
}

/// Caches none of which is listed yet, with `registries` as the pacing.
fn unlisted_caches(registries: RegistryReport) -> Scraped {
    Scraped {
        nodeimages: unlisted(),
        nodes: unlisted(),
        image_pull_jobs: unlisted(),
        image_pre_pull_jobs: unlisted(),
        node_upgrade_jobs: unlisted(),
        image_removal_jobs: unlisted(),
        registries,
    }
}

#[test]
fn renders_without_caches_and_counts_reconciles() {
    let m = Metrics::default();
    let caches = Arc::new(unlisted_caches(Arc::new(Vec::new)));
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(&mut r, caches, nodeimage_api::gate::DEFAULT_TAINT_KEY);
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
    let m = Metrics::default();
    let mut j = ImagePullJob::new(
        "j",
        ImagePullJobSpec {
            image: "nginx".into(),
            template: Default::default(),
        },
    );
    j.metadata.namespace = Some("ns".into());
    let caches = Scraped {
        nodeimages: listed(vec![NodeImage::new("n", Default::default())]),
        nodes: listed(Vec::<Node>::new()),
        image_pull_jobs: listed(vec![j]),
        image_pre_pull_jobs: unlisted(),
        node_upgrade_jobs: unlisted(),
        image_removal_jobs: unlisted(),
        registries: Arc::new(|| {
            vec![RegistryGauge {
                registry: "docker.io".into(),
                in_flight: 3,
                limit: Some(5),
                rate_limited: true,
                jobs_waiting: 2,
            }]
        }),
    };
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(
        &mut r,
        Arc::new(caches),
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
    let rows: Arc<std::sync::Mutex<Vec<RegistryGauge>>> = Arc::default();
    let report = rows.clone();
    let report: RegistryReport =
        Arc::new(move || report.lock().map(|r| r.clone()).unwrap_or_default());
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(
        &mut r,
        Arc::new(unlisted_caches(report)),
        nodeimage_api::gate::DEFAULT_TAINT_KEY,
    );
    let text = nodeimage_ops::metrics::render(&r);
    assert!(
        !text.lines().any(|l| l.starts_with("nodeimage_registry_")),
        "no registry paced, no series:\n{text}"
    );
    let row = |registry: &str, in_flight, limit, rate_limited, jobs_waiting| RegistryGauge {
        registry: registry.into(),
        in_flight,
        limit,
        rate_limited,
        jobs_waiting,
    };
    if let Ok(mut rows) = rows.lock() {
        *rows = vec![
            row("docker.io", 3, Some(5), true, 2),
            row("quay.io", 1, None, false, 0),
        ];
    }
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
