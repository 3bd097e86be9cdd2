//! ImagePullJob's shell against a scripted API: it applies what the plan
//! decided, in order, and guards the finalizer write with the job as its
//! status write left it.

use super::*;
use crate::engine::jobshell::scripted::{Reply, Script, Seen};
use kube::runtime::reflector;
use nodeimage_api::kruise::{DELETION_PROTECTION_FINALIZER, ImagePullJobSpec};
use serde_json::{Value, json};

/// Job `ns/j` at resourceVersion `rv`, holding our finalizer and OpenKruise's.
fn job(rv: &str) -> ImagePullJob {
    let spec = ImagePullJobSpec {
        image: "registry.example/app:v1".into(),
        template: Default::default(),
    };
    let mut j = ImagePullJob::new("j", spec);
    j.metadata.namespace = Some("ns".into());
    j.metadata.uid = Some("uid-j".into());
    j.metadata.resource_version = Some(rv.into());
    j.metadata.finalizers = Some(vec![
        FINALIZER.to_string(),
        DELETION_PROTECTION_FINALIZER.to_string(),
    ]);
    j
}

/// The reconciler over a scripted API, every cache listed (and empty).
fn state(replies: Vec<Reply>) -> (State, Script) {
    let (ctx, nodeimages, api) = Script::context(replies);
    let shared = Shared {
        writer: crate::cluster::tagwrites::NodeWriter::new(ctx.client.clone(), nodeimages.clone()),
        pacing: std::sync::Arc::new(crate::engine::registrypace::RegistryPacing::new(
            Default::default(),
            nodeimages.clone(),
        )),
        ctx,
        nodeimages,
        nodeimages_synced: Synced::done(),
    };
    let state = State {
        shared,
        pods: reflector::store::<Pod>().0,
        pods_synced: Synced::done(),
        nodes: reflector::store().0,
        jobs: reflector::store::<ImagePullJob>().0,
        follow: crate::engine::followtag::FollowTags::new(
            Default::default(),
            crate::runtime::metrics::Metrics::default(),
        ),
    };
    (state, api)
}

fn event() -> Reply {
    Reply(
        201,
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
               "metadata": {"name": "j.1", "namespace": "ns"},
               "eventTime": "2026-01-01T00:00:00.000000Z"}),
    )
}

/// The replies to a job completing at its first look: its status write,
/// two events, the list of secret copies (none), its finalizer write.
fn completing() -> Vec<Reply> {
    let no_copies = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                           "metadata": {}, "items": []});
    vec![
        Reply::ok(&job("8")),
        event(),
        event(),
        Reply(200, no_copies),
        Reply::ok(&job("9")),
    ]
}

#[tokio::test]
async fn a_job_that_completes_is_written_announced_released_and_let_go() {
    // No node selected: the job completes at its first look.
    let (state, api) = state(completing());
    let action = state.apply(Arc::new(job("7"))).await.expect("applied");
    assert_eq!(action, Action::await_change(), "completed, without a TTL");

    let seen = api.seen();
    let jobs = ImagePullJob::url_path(&(), Some("ns"));
    let secrets_ns = &state.shared.ctx.secrets_namespace;
    let route = |s: &Seen| (s.method.clone(), s.path.clone());
    assert_eq!(
        seen.iter().map(route).collect::<Vec<_>>(),
        vec![
            ("PATCH".into(), format!("{jobs}/j/status")),
            (
                "POST".into(),
                "/apis/events.k8s.io/v1/namespaces/ns/events".into()
            ),
            (
                "POST".into(),
                "/apis/events.k8s.io/v1/namespaces/ns/events".into()
            ),
            (
                "GET".into(),
                format!("/api/v1/namespaces/{secrets_ns}/secrets")
            ),
            ("PATCH".into(), format!("{jobs}/j")),
        ]
    );
    let status = &seen[0].body["status"];
    assert_eq!(status["message"], "job has completed");
    assert!(status["completionTime"].is_string());
    let reasons: Vec<&Value> = seen[1..3].iter().map(|s| &s.body["reason"]).collect();
    assert_eq!(reasons, [&json!("Started"), &json!("Completed")]);
    // The finalizer goes from the job as the status write returned it.
    assert_eq!(
        seen[4].body,
        json!({"metadata": {"resourceVersion": "8", "finalizers": [FINALIZER]}})
    );
    assert!(api.finished());
}

#[tokio::test]
async fn a_completed_job_planned_again_writes_nothing() {
    let (state, api) = state(completing());
    state.apply(Arc::new(job("7"))).await.expect("applied");
    let written: ImagePullJob = {
        let mut j = job("9");
        j.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
        j.status = serde_json::from_value(api.seen()[0].body["status"].clone()).ok();
        j
    };
    let (state, api) = self::state(vec![]);
    let action = state.apply(Arc::new(written)).await.expect("applied");
    assert_eq!(action, Action::await_change());
    assert_eq!(api.seen(), vec![]);
}
