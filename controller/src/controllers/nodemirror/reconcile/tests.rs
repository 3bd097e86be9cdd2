//! The node mirror's shell against a scripted API: the exact create and
//! relabel requests, none when in sync or not listed yet, a NodeImage made
//! meanwhile, and a refused stale write being a retry, not an error.

use super::*;
use crate::engine::jobshell::requeue::{CONFLICT_RETRY, ERROR_RETRY};
use crate::engine::jobshell::scripted::{Reply, Script, Seen};
use kube::api::ObjectMeta;
use kube::runtime::{reflector, watcher};
use serde_json::json;
use std::collections::BTreeMap;

const NODEIMAGES: &str = "/apis/apps.kruise.io/v1alpha1/nodeimages";

/// `name=value` labels.
fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Node `n1` with `labels`.
fn node(labels: BTreeMap<String, String>) -> Arc<Node> {
    Arc::new(Node {
        metadata: ObjectMeta {
            name: Some("n1".into()),
            labels: Some(labels),
            ..Default::default()
        },
        ..Default::default()
    })
}

/// The mirror over a scripted API answering `replies`; its NodeImage cache
/// listed or not, holding `n1` with `labels` (as the mirror recorded them)
/// if given.
fn mirror(
    replies: Vec<Reply>,
    listed: bool,
    existing: Option<BTreeMap<String, String>>,
) -> (Arc<State>, Script) {
    let (ctx, _, script) = Script::context(replies);
    let (nodeimages, mut writer) = reflector::store::<NodeImage>();
    let owned = Owned::default();
    if let Some(labels) = existing {
        let keys = labels.keys().cloned().collect::<Vec<_>>().join(",");
        let annotations = BTreeMap::from([(decide::MIRRORED_LABELS.to_string(), keys)]);
        let mut ni = NodeImage::new("n1", Default::default());
        ni.metadata = ObjectMeta {
            name: Some("n1".into()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        };
        owned.record(&ni);
        crate::cluster::nodeimages::compact(&mut ni);
        writer.apply_watcher_event(&watcher::Event::Apply(ni));
    }
    let nodeimages_synced = if listed {
        Synced::done()
    } else {
        Synced::default()
    };
    let state = State {
        ctx,
        nodeimages,
        owned,
        nodeimages_synced,
    };
    (Arc::new(state), script)
}

/// What mirroring `node` did: its result, the requests, and the state.
async fn mirrored(
    node: Arc<Node>,
    replies: Vec<Reply>,
    listed: bool,
    existing: Option<BTreeMap<String, String>>,
) -> (Result<Action, Error>, Vec<Seen>, Arc<State>) {
    let (state, api) = mirror(replies, listed, existing);
    let result = reconcile(node, state.clone()).await;
    assert!(api.finished(), "every scripted reply is asked for");
    (result, api.seen(), state)
}

/// The merge patch that moves `n1`'s label `zone` from `a` to `b`.
fn relabel() -> Seen {
    Seen {
        method: "PATCH".into(),
        path: format!("{NODEIMAGES}/n1"),
        body: json!({"metadata": {
            "labels": {"zone": "b"},
            "annotations": {decide::MIRRORED_LABELS: "zone"},
        }}),
    }
}

#[tokio::test]
async fn nothing_is_written_before_the_nodeimages_are_listed() {
    let (result, seen, _) = mirrored(node(labels(&[("zone", "a")])), vec![], false, None).await;
    assert_eq!(result.ok(), Some(Action::requeue(NOT_SYNCED_RETRY)));
    assert_eq!(seen, vec![]);
}

#[tokio::test]
async fn a_node_without_a_nodeimage_gets_one_with_its_labels() {
    let n = node(labels(&[("zone", "a")]));
    let created = Reply(
        201,
        json!({"apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "NodeImage", "metadata": {"name": "n1"}, "spec": {}}),
    );
    let (result, seen, _) = mirrored(n, vec![created], true, None).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    let create = Seen {
        method: "POST".into(),
        path: NODEIMAGES.into(),
        body: json!({
            "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
            "metadata": {"name": "n1", "labels": {"zone": "a"},
                         "annotations": {decide::MIRRORED_LABELS: "zone"}},
            "spec": {},
        }),
    };
    assert_eq!(seen, vec![create]);
}

#[tokio::test]
async fn a_nodeimage_made_meanwhile_is_looked_at_again_soon() {
    let n = node(labels(&[("zone", "a")]));
    let replies = vec![Reply::error(409, "AlreadyExists")];
    let (result, seen, _) = mirrored(n, replies, true, None).await;
    assert_eq!(result.ok(), Some(Action::requeue(NOT_SYNCED_RETRY)));
    assert_eq!(seen.len(), 1, "one create: {seen:?}");
}

#[tokio::test]
async fn a_nodeimage_in_sync_is_left_alone() {
    let (n, existing) = (labels(&[("zone", "a")]), labels(&[("zone", "a")]));
    let (result, seen, _) = mirrored(node(n), vec![], true, Some(existing)).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    assert_eq!(seen, vec![]);
}

#[tokio::test]
async fn changed_labels_are_one_merge_patch() {
    let (n, existing) = (labels(&[("zone", "b")]), labels(&[("zone", "a")]));
    let patched = Reply(
        200,
        json!({"apiVersion": "apps.kruise.io/v1alpha1",
        "kind": "NodeImage", "metadata": {"name": "n1"}, "spec": {}}),
    );
    let (result, seen, _) = mirrored(node(n), vec![patched], true, Some(existing)).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    assert_eq!(seen, vec![relabel()]);
}

#[tokio::test]
async fn a_refused_stale_write_is_a_retry_and_any_other_failure_an_error() {
    let cases = [
        ("conflict", Reply::error(409, "Conflict"), CONFLICT_RETRY, 0),
        (
            "server error",
            Reply::error(500, "InternalError"),
            ERROR_RETRY,
            1,
        ),
    ];
    for (case, reply, wait, counted) in cases {
        let (n, existing) = (labels(&[("zone", "b")]), labels(&[("zone", "a")]));
        let n = node(n);
        let (result, seen, state) = mirrored(n.clone(), vec![reply], true, Some(existing)).await;
        assert_eq!(seen, vec![relabel()], "{case}");
        let error = result.expect_err(case);
        let action = error_policy(n, &error, state.clone());
        assert_eq!(action, Action::requeue(wait), "{case}: {error}");
        let errors = state.ctx.metrics.errors_of(KIND);
        assert_eq!(errors, counted, "{case}: counted as an error");
    }
}
