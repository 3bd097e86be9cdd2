use super::*;
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
        status: Some(vec![node("Successful"), node("failed"), node("pulling")]),
        ..Default::default()
    });
    let c = image_pre_pull_job_counts(&p);
    assert_eq!(
        (c.desired, c.active, c.succeeded, c.failed, c.phase),
        (3, 1, 1, 1, "Failed")
    );
}

#[test]
fn renders_without_caches_and_counts_reconciles() {
    let m = Metrics::default();
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(&mut r);
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

#[test]
fn dashboard_queries_exported_metrics() {
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    let m = Metrics::default();
    let mut r = nodeimage_ops::metrics::registry("controller");
    m.register(&mut r);
    for kind in ["ImagePullJob", "NodeImage"] {
        drop(m.reconcile(kind));
        m.error(kind);
    }
    m.response_timeouts.inc();
    let (ni_store, mut ni_writer) = reflector::store::<NodeImage>();
    ni_writer.apply_watcher_event(&Event::Apply(NodeImage::new("n", Default::default())));
    let _ = m.caches.nodeimages.set(ni_store);
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
    let _ = m.caches.image_pull_jobs.set(job_store);

    let exported = nodeimage_ops::metrics::exported_names(&nodeimage_ops::metrics::render(&r));
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
    let ours = |q: &String| {
        q.starts_with("nodeimage_controller_")
            || q.starts_with("nodeimage_job")
            || q.starts_with("nodeimage_nodeimages")
    };
    assert!(
        queried.iter().any(ours),
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
