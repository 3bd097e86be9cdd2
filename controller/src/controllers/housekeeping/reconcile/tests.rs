//! Housekeeping's shell against a scripted API: the exact requests it makes
//! for a plan (a NodeImage whose Node is gone, a tag whose owner is gone),
//! none when there is nothing to do, and a refused stale write being a
//! retry, not an error.

use super::*;
use crate::controllers::housekeeping::owners::JobCache;
use crate::engine::jobshell::requeue::{CONFLICT_RETRY, ERROR_RETRY};
use crate::engine::jobshell::scripted::{Reply, Script, Seen};
use kube::runtime::reflector;
use kube::runtime::watcher;
use serde_json::{Value, json};

const PATH: &str = "/apis/apps.kruise.io/v1alpha1/nodeimages/n1";

/// A synced, empty cache of one job kind: every owner of that kind is gone.
fn no_jobs<K>() -> JobCache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    JobCache {
        store: reflector::store().0,
        synced: Synced::done(),
        undecodable: Arc::new(|_| false),
    }
}

/// Housekeeping over a scripted API answering `replies`, with `nodes` in
/// its (listed) Node cache and no jobs.
fn housekeeping(replies: Vec<Reply>, nodes: &[&str]) -> (Arc<State>, Script) {
    let (ctx, nodeimages, script) = Script::context(replies);
    let (store, mut writer) = reflector::store::<Node>();
    for name in nodes {
        writer.apply_watcher_event(&watcher::Event::Apply(Node {
            metadata: kube::api::ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        }));
    }
    let state = State {
        ctx,
        nodes: store,
        nodes_synced: Synced::done(),
        owners: OwnerCaches {
            image_pull_jobs: no_jobs(),
            image_pre_pull_jobs: no_jobs(),
            node_upgrade_jobs: no_jobs(),
            image_removal_jobs: no_jobs(),
        },
        orphans: Default::default(),
        nodeimages,
    };
    (Arc::new(state), script)
}

/// The tag entry `v1` of image `r/a`, owned by an ImagePullJob.
fn owned_tag() -> Value {
    json!({"tag": "v1", "purpose": "Pull", "version": 1, "createdAt": "2026-01-01T00:00:00Z",
           "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1",
               "kind": "ImagePullJob", "namespace": "ns", "name": "j", "uid": "uid-j"}]})
}

/// NodeImage `n1` with `images` in its spec.
fn nodeimage(images: Value) -> Arc<NodeImage> {
    let ni = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": "n1", "uid": "uid-n1", "resourceVersion": "7"},
        "spec": {"images": images},
    });
    Arc::new(serde_json::from_value(ni).expect("a valid NodeImage"))
}

/// The entry write that drops image `r/a` (its last tag's owner is gone),
/// tested against the entry as read.
fn drop_image_patch() -> Seen {
    Seen {
        method: "PATCH".into(),
        path: PATH.into(),
        body: json!([
            {"op": "test", "path": "/spec/images/r~1a", "value": {"tags": [owned_tag()]}},
            {"op": "remove", "path": "/spec/images/r~1a"},
            {"op": "add", "path": "/metadata/managedFields", "value": [{}]},
        ]),
    }
}

/// What housekeeping of `ni` did over a scripted API answering `replies`,
/// with `nodes` cached: its result, the requests, and the state.
async fn housekept(
    ni: Arc<NodeImage>,
    replies: Vec<Reply>,
    nodes: &[&str],
) -> (Result<Action, Error>, Vec<Seen>, Arc<State>) {
    let (state, api) = housekeeping(replies, nodes);
    let result = reconcile(ni, state.clone()).await;
    assert!(api.finished(), "every scripted reply is asked for");
    (result, api.seen(), state)
}

#[tokio::test]
async fn a_nodeimage_whose_node_is_gone_is_deleted_if_still_the_one_read() {
    let ni = nodeimage(json!({}));
    let (result, seen, _) = housekept(ni.clone(), vec![Reply::ok(&*ni)], &[]).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    let delete = Seen {
        method: "DELETE".into(),
        path: PATH.into(),
        body: json!({"preconditions": {"uid": "uid-n1"}}),
    };
    assert_eq!(seen, vec![delete]);
}

#[tokio::test]
async fn a_nodeimage_with_nothing_to_do_writes_nothing() {
    let (result, seen, _) = housekept(nodeimage(json!({})), vec![], &["n1"]).await;
    let idle = plan::MAX_REQUEUE.to_std().expect("positive");
    assert_eq!(result.ok(), Some(Action::requeue(idle)));
    assert_eq!(seen, vec![]);
}

#[tokio::test]
async fn a_tag_whose_owner_is_gone_leaves_in_one_tested_write() {
    let ni = nodeimage(json!({"r/a": {"tags": [owned_tag()]}}));
    let (result, seen, _) = housekept(ni.clone(), vec![Reply::ok(&*ni)], &["n1"]).await;
    let idle = plan::MAX_REQUEUE.to_std().expect("positive");
    assert_eq!(result.ok(), Some(Action::requeue(idle)));
    assert_eq!(seen, vec![drop_image_patch()]);
}

#[tokio::test]
async fn a_refused_stale_write_is_a_retry_and_any_other_failure_an_error() {
    let cases = [
        (
            "conflict",
            Reply::error(409, "Conflict"),
            true,
            CONFLICT_RETRY,
        ),
        (
            "failed test",
            Reply::error(422, "Invalid"),
            true,
            CONFLICT_RETRY,
        ),
        (
            "server error",
            Reply::error(500, "InternalError"),
            false,
            ERROR_RETRY,
        ),
    ];
    for (case, reply, stale, wait) in cases {
        let ni = nodeimage(json!({"r/a": {"tags": [owned_tag()]}}));
        let (result, seen, state) = housekept(ni.clone(), vec![reply], &["n1"]).await;
        assert_eq!(seen, vec![drop_image_patch()], "{case}");
        let error = result.expect_err(case);
        assert_eq!(
            matches!(error, Error::Conflict(_)),
            stale,
            "{case}: {error}"
        );
        let action = error_policy(ni, &error, state.clone());
        assert_eq!(action, Action::requeue(wait), "{case}");
        let counted = state.ctx.metrics.errors_of(KIND);
        assert_eq!(counted, u64::from(!stale), "{case}: counted as an error");
    }
}

#[tokio::test]
async fn a_removal_entry_whose_job_is_gone_leaves_in_a_guarded_write() {
    let gone = json!({"job": "cve", "uid": "uid-cve", "images": ["r/a@sha256:aa"],
                      "block": true, "writtenBy": "ImageRemovalJob"});
    let by_hand = json!({"job": "hand", "uid": "1", "images": ["r/b:v1"]});
    let mut raw = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": "n1", "uid": "uid-n1", "resourceVersion": "7"},
        "spec": {"images": {}, "removals": [gone, by_hand.clone()]},
    });
    let ni: Arc<NodeImage> = Arc::new(serde_json::from_value(raw.clone()).expect("a NodeImage"));
    raw["spec"]["removals"] = json!([by_hand.clone()]);
    let (result, seen, _) = housekept(ni, vec![Reply::ok(&raw)], &["n1"]).await;
    assert!(result.is_ok(), "{result:?}");
    let patch = Seen {
        method: "PATCH".into(),
        path: PATH.into(),
        body: json!({"metadata": {"resourceVersion": "7", "managedFields": [{}]},
                     "spec": {"removals": [by_hand]}}),
    };
    assert_eq!(
        seen,
        vec![patch],
        "the job's entry goes, the hand-written one stays"
    );
}
