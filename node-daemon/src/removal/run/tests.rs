use super::*;
use crate::runtime::fake::{Call, FakeRuntime};

const NODE: &str = "node-1";

fn facts(wanted: Vec<Wanting>) -> NodeFacts {
    NodeFacts {
        name: NODE.into(),
        sandbox: Some("registry.k8s.io/pause:3.10".into()),
        wanted,
    }
}

fn entry(images: &[&str], force: bool) -> Entry {
    Entry {
        images: images.iter().map(|i| i.to_string()).collect(),
        force,
        block: false,
    }
}

fn removals(rt: &FakeRuntime) -> Vec<Call> {
    rt.calls()
        .into_iter()
        .filter(|c| matches!(c, Call::RemoveImage(_) | Call::Pin(..)))
        .collect()
}

fn results(out: &[ImageOutcome]) -> Vec<(RemovalResult, u64)> {
    out.iter().map(|o| (o.result, o.bytes_freed)).collect()
}

#[tokio::test]
async fn an_unused_image_goes_and_its_bytes_are_counted() {
    let rt = FakeRuntime::default();
    rt.image("reg.io/app:v1", "sha256:app", 100)
        .image("reg.io/keep:v1", "sha256:keep", 50);
    let out = remove(
        &rt,
        &facts(vec![]),
        &entry(&["reg.io/app:v1", "reg.io/gone:v1"], false),
    )
    .await
    .expect("decided");
    assert_eq!(
        results(&out),
        [
            (RemovalResult::Removed, 100),
            (RemovalResult::NotPresent, 0)
        ]
    );
    assert_eq!(removals(&rt), [Call::RemoveImage("sha256:app".into())]);
    let left = rt.list_images().await.expect("listed");
    assert_eq!(left.len(), 1, "nothing else touched: {left:?}");
    assert_eq!(left[0].id, "sha256:keep");
}

#[tokio::test]
async fn our_pin_comes_off_first_when_forced() {
    let rt = FakeRuntime::default();
    rt.pinned("reg.io/pre:v1", NODE)
        .image("reg.io/pre:v1", "sha256:pre", 40);
    let wanted = vec![Wanting {
        reference: "reg.io/pre:v1".into(),
        resolved: None,
        owners: vec!["ImagePullJob team-a/pre".into()],
    }];
    let kept = remove(
        &rt,
        &facts(wanted.clone()),
        &entry(&["reg.io/pre:v1"], false),
    )
    .await
    .expect("decided");
    assert_eq!(kept[0].reason, Some(SkipReason::WantedByPull));
    assert!(
        kept[0].message.contains("ImagePullJob team-a/pre"),
        "{}",
        kept[0].message
    );
    assert_eq!(removals(&rt), [], "nothing touched without force");
    let out = remove(&rt, &facts(wanted), &entry(&["reg.io/pre:v1"], true))
        .await
        .expect("decided");
    assert_eq!(results(&out), [(RemovalResult::Removed, 40)]);
    assert_eq!(
        removals(&rt),
        [
            Call::Pin("reg.io/pre:v1".into(), false),
            Call::RemoveImage("sha256:pre".into())
        ]
    );
}

#[tokio::test]
async fn a_refusal_is_the_nodes_failure_with_the_runtimes_words() {
    let rt = FakeRuntime::default();
    rt.image("reg.io/app:v1", "sha256:app", 100).refuse_removal(
        "sha256:app",
        RuntimeError::Other("image is being used by a running container".into()),
    );
    let out = remove(&rt, &facts(vec![]), &entry(&["reg.io/app:v1"], false))
        .await
        .expect("decided");
    assert_eq!(results(&out), [(RemovalResult::Failed, 0)]);
    assert_eq!(
        out[0].message,
        "the runtime did not remove image sha256:app: image is being used by a running container"
    );
}

#[tokio::test]
async fn in_use_images_and_the_sandbox_are_never_asked_to_go() {
    let rt = FakeRuntime::default();
    rt.image("reg.io/web:v1", "sha256:web", 10)
        .image("reg.io/web:stable", "sha256:web", 10)
        .image("registry.k8s.io/pause:3.10", "sha256:pause", 1)
        .container("default/web-1/web", "exited", "sha256:web");
    let images = [
        "reg.io/web:stable",
        "reg.io/web:v1",
        "registry.k8s.io/pause:3.10",
    ];
    let out = remove(&rt, &facts(vec![]), &entry(&images, true))
        .await
        .expect("decided");
    let got: Vec<(RemovalResult, Option<SkipReason>)> =
        out.iter().map(|o| (o.result, o.reason)).collect();
    assert_eq!(
        got,
        [
            (RemovalResult::InUse, None),
            (RemovalResult::InUse, None),
            (RemovalResult::Skipped, Some(SkipReason::Sandbox))
        ]
    );
    assert!(out[0].message.contains("default/web-1/web (exited)"));
    assert_eq!(removals(&rt), []);
}

#[tokio::test]
async fn two_names_of_one_image_make_one_removal() {
    let rt = FakeRuntime::default();
    rt.image("reg.io/lib:v1", "sha256:lib", 200)
        .image("reg.io/lib:latest", "sha256:lib", 200);
    let out = remove(
        &rt,
        &facts(vec![]),
        &entry(&["reg.io/lib:v1", "reg.io/lib:latest"], false),
    )
    .await
    .expect("decided");
    assert_eq!(
        results(&out),
        [(RemovalResult::Removed, 200), (RemovalResult::Removed, 0)]
    );
    assert_eq!(out[1].message, "removed with reg.io/lib:v1 (one image)");
    assert_eq!(removals(&rt), [Call::RemoveImage("sha256:lib".into())]);
}

#[tokio::test]
async fn a_runtime_that_does_not_answer_decides_nothing() {
    let rt = FakeRuntime::default();
    rt.image("reg.io/app:v1", "sha256:app", 100).down();
    let err = remove(&rt, &facts(vec![]), &entry(&["reg.io/app:v1"], false))
        .await
        .expect_err("not decided");
    assert!(
        matches!(err, RemovalError::Images(RuntimeError::Unavailable(_))),
        "{err}"
    );
    assert_eq!(removals(&rt), []);
}

#[tokio::test]
async fn the_flag_names_the_sandbox_before_the_runtime() {
    let rt = FakeRuntime::default();
    assert_eq!(sandbox(&rt, None).await, None, "nobody says");
    rt.sandbox("registry.k8s.io/pause:3.8");
    assert_eq!(
        sandbox(&rt, None).await.as_deref(),
        Some("registry.k8s.io/pause:3.8")
    );
    assert_eq!(
        sandbox(&rt, Some("mirror.io/pause:3.10")).await.as_deref(),
        Some("mirror.io/pause:3.10")
    );
    rt.down();
    assert_eq!(
        sandbox(&rt, None).await,
        None,
        "a runtime that does not answer says nothing"
    );
}
