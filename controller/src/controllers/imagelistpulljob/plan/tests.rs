use super::*;
use nodeimage_api::kruise::{
    CompletionPolicy, CompletionPolicyType, ImageListPullJobSpec, ImagePullJobStatus,
};

fn now(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(s, 0).unwrap_or_default()
}

fn list(images: &[&str], cp: CompletionPolicy) -> ImageListPullJob {
    let mut j = ImageListPullJob::new(
        "list",
        ImageListPullJobSpec {
            images: images.iter().map(|s| s.to_string()).collect(),
            template: ImagePullJobTemplate {
                completion_policy: Some(cp),
                ..Default::default()
            },
        },
    );
    j.metadata.namespace = Some("ns".into());
    j.metadata.uid = Some("uid-l".into());
    j
}

fn made(
    parent: &ImageListPullJob,
    image: &str,
    name: &str,
    status: Option<ImagePullJobStatus>,
) -> Arc<ImagePullJob> {
    let mut c = child(parent, image, &template_hash(&parent.spec.template));
    c.metadata.name = Some(name.into());
    c.status = status;
    Arc::new(c)
}

fn st(
    desired: i32,
    active: i32,
    succeeded: i32,
    failed: i32,
    done: bool,
) -> Option<ImagePullJobStatus> {
    Some(ImagePullJobStatus {
        desired,
        active,
        succeeded,
        failed,
        completion_time: done.then(|| api_time(now(50))),
        failed_nodes: (failed > 0).then(|| vec!["fake-node".to_string()]),
        ..Default::default()
    })
}

#[test]
fn creates_one_child_per_image_without_its_own_ttl() {
    let j = list(
        &["a:1", "b:1"],
        CompletionPolicy {
            ttl_seconds_after_finished: Some(20),
            ..Default::default()
        },
    );
    let p = plan(&j, &[], now(1));
    assert_eq!(p.create.len(), 2);
    let c = &p.create[0];
    assert_eq!(c.spec.image, "a:1");
    assert_eq!(c.owner_references()[0].controller, Some(true));
    assert_eq!(
        c.spec
            .template
            .completion_policy
            .as_ref()
            .and_then(|p| p.ttl_seconds_after_finished),
        None
    );
    assert_eq!(p.status.desired, 2);
    assert!(p.status.completion_time.is_none());
}

#[test]
fn aggregates_children_and_completes() {
    let j = list(
        &["a:1", "b:1"],
        CompletionPolicy {
            ttl_seconds_after_finished: Some(20),
            ..Default::default()
        },
    );
    let kids = vec![
        made(&j, "a:1", "list-a", st(3, 0, 3, 0, true)),
        made(&j, "b:1", "list-b", st(4, 1, 2, 1, false)),
    ];
    let p = plan(&j, &kids, now(60));
    assert!(p.create.is_empty() && p.delete.is_empty());
    assert_eq!(
        (p.status.active, p.status.completed, p.status.succeeded),
        (1, 1, 1)
    );
    assert!(p.status.completion_time.is_none());
    let failed = p.status.failed_image_statuses.clone().unwrap_or_default();
    assert_eq!(failed[0].image_pull_job.as_deref(), Some("list-b"));
    assert!(
        failed[0]
            .message
            .as_deref()
            .is_some_and(|m| m.contains("fake-node"))
    );

    let kids = vec![
        made(&j, "a:1", "list-a", st(3, 0, 3, 0, true)),
        made(&j, "b:1", "list-b", st(4, 0, 3, 1, true)),
    ];
    let p = plan(&j, &kids, now(60));
    assert!(p.completed_now);
    assert_eq!((p.status.completed, p.status.succeeded), (2, 1));
    assert_eq!(p.requeue_after, Some(std::time::Duration::from_secs(20)));
    let mut done = j.clone();
    done.status = Some(p.status);
    assert!(!plan(&done, &kids, now(70)).delete_self);
    assert!(plan(&done, &kids, now(80)).delete_self);
}

#[test]
fn never_jobs_do_not_complete_and_template_changes_recreate() {
    let j = list(
        &["a:1"],
        CompletionPolicy {
            type_: Some(CompletionPolicyType::Never),
            ..Default::default()
        },
    );
    let kids = vec![made(&j, "a:1", "list-a", st(1, 0, 1, 0, false))];
    let p = plan(&j, &kids, now(1));
    assert!(p.status.completion_time.is_none());
    assert_eq!(p.status.completed, 1);

    let mut edited = j.clone();
    edited.spec.template.parallelism =
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(5));
    let p = plan(&edited, &kids, now(1));
    assert_eq!(p.delete, vec!["list-a"]);
    assert_eq!(p.create.len(), 1);

    let mut fewer = j.clone();
    fewer.spec.images = vec!["b:1".into()];
    let p = plan(&fewer, &kids, now(1));
    assert_eq!(p.delete, vec!["list-a"]);
    assert_eq!(p.create[0].spec.image, "b:1");
}

#[test]
fn completion_is_announced_once_with_conditions_at_the_plan_time() {
    let j = list(&["a:1", "b:1"], CompletionPolicy::default());
    let kids = vec![
        made(&j, "a:1", "list-a", st(3, 0, 3, 0, true)),
        made(&j, "b:1", "list-b", st(4, 0, 3, 1, true)),
    ];
    let p = plan(&j, &kids, now(60));
    assert!(p.write_status);
    let notes: Vec<(bool, &str, &str)> = p
        .events
        .iter()
        .map(|e| (e.warning, e.reason, e.note.as_str()))
        .collect();
    assert_eq!(
        notes,
        vec![(
            true,
            "Completed",
            "Completed: 1 of 2 image(s) pulled on every node"
        )]
    );
    assert_eq!(
        crate::engine::conditions::condition_of(p.status.conditions.as_ref(), "Failed"),
        Some(("True".into(), api_time(now(60))))
    );
    let mut done = j.clone();
    done.status = Some(p.status);
    let p = plan(&done, &kids, now(70));
    assert!(!p.write_status && p.events.is_empty());
}

#[test]
fn children_carry_the_start_up_gate_mark_on() {
    use nodeimage_api::gate::{GATE_NEW_NODES, is_gating};
    let mut j = list(&["a:1"], CompletionPolicy::default());
    let hash = template_hash(&j.spec.template);
    assert!(!is_gating(child(&j, "a:1", &hash).annotations()));
    j.metadata.annotations = Some([(GATE_NEW_NODES.to_string(), "true".to_string())].into());
    let c = child(&j, "a:1", &hash);
    assert!(is_gating(c.annotations()));
    assert_eq!(
        c.annotations().get(IMAGE_ANNOTATION).map(String::as_str),
        Some("a:1")
    );
}

#[test]
fn children_carry_the_follow_tag_interval_on() {
    use nodeimage_api::followtag::FOLLOW_TAG;
    let mut j = list(&["a:stable"], CompletionPolicy::default());
    let hash = template_hash(&j.spec.template);
    let every = |c: &ImagePullJob| c.annotations().get(FOLLOW_TAG).cloned();
    assert_eq!(every(&child(&j, "a:stable", &hash)), None);
    j.metadata.annotations = Some([(FOLLOW_TAG.to_string(), "10m".to_string())].into());
    assert_eq!(every(&child(&j, "a:stable", &hash)).as_deref(), Some("10m"));
}
