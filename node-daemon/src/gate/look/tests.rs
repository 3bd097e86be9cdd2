use super::*;
use crate::runtime::RuntimeError;
use crate::runtime::fake::FakeRuntime;
use nodeimage_api::gate::DEFAULT_TAINT_KEY;
use std::collections::VecDeque;
use std::sync::Mutex;

const A: &str = "127.0.0.1:5000/a:v1";
const B: &str = "127.0.0.1:5000/b:v1";

fn taint(key: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: "NoSchedule".into(),
        ..Default::default()
    }
}

/// An in-memory Node: its taints, and patches that first fail as scripted.
#[derive(Default)]
struct FakeNode {
    taints: Mutex<Option<Vec<Taint>>>,
    failures: Mutex<VecDeque<NodeError>>,
    patches: Mutex<Vec<serde_json::Value>>,
}

impl FakeNode {
    fn with(taints: Option<Vec<Taint>>) -> Self {
        FakeNode {
            taints: Mutex::new(taints),
            ..Default::default()
        }
    }
}

impl NodeApi for FakeNode {
    async fn taints(&self) -> Result<Option<Vec<Taint>>, NodeError> {
        Ok(self.taints.lock().expect("lock").clone())
    }

    async fn patch(&self, body: serde_json::Value) -> Result<(), NodeError> {
        self.patches.lock().expect("lock").push(body.clone());
        if let Some(e) = self.failures.lock().expect("lock").pop_front() {
            return Err(e);
        }
        let kept: Vec<Taint> = serde_json::from_value(body[1]["value"].clone()).expect("taints");
        *self.taints.lock().expect("lock") = Some(kept);
        Ok(())
    }
}

/// A runtime holding [`A`], and a Node with the start-up taint whose next
/// patches fail with `failures`.
fn gated_with(failures: impl IntoIterator<Item = NodeError>) -> (FakeRuntime, FakeNode) {
    let rt = FakeRuntime::default();
    rt.present(A);
    let node = FakeNode::with(Some(vec![taint(DEFAULT_TAINT_KEY)]));
    node.failures.lock().expect("lock").extend(failures);
    (rt, node)
}

fn note(images: &[&str]) -> GateNote {
    GateNote {
        taint: DEFAULT_TAINT_KEY.into(),
        images: images.iter().map(|s| s.to_string()).collect(),
        deadline: "2026-01-01T00:10:00Z".into(),
    }
}

#[tokio::test]
async fn waits_for_every_image_and_asks_the_runtime_for_each() {
    let rt = FakeRuntime::default();
    rt.present(A);
    let node = FakeNode::with(Some(vec![taint(DEFAULT_TAINT_KEY)]));
    let got = look(&rt, &node, &note(&[A, B])).await.expect("a look");
    assert_eq!(got, Outcome::Waiting(vec![B.into()]));
    assert!(
        node.patches.lock().expect("lock").is_empty(),
        "no write while waiting"
    );
    // A runtime that cannot answer counts the image as missing.
    rt.present(B);
    rt.statuses([RuntimeError::Unavailable("down".into())]);
    let got = look(&rt, &node, &note(&[A, B])).await.expect("a look");
    assert_eq!(got, Outcome::Waiting(vec![A.into()]));
}

#[tokio::test]
async fn opens_removing_only_the_gate_taint() {
    let rt = FakeRuntime::default();
    rt.present(A);
    let other = taint("dedicated");
    let node = FakeNode::with(Some(vec![other.clone(), taint(DEFAULT_TAINT_KEY)]));
    assert_eq!(
        look(&rt, &node, &note(&[A])).await.expect("a look"),
        Outcome::Opened
    );
    assert_eq!(*node.taints.lock().expect("lock"), Some(vec![other]));
    // Looking again finds it open and writes nothing.
    assert_eq!(
        look(&rt, &node, &note(&[A])).await.expect("a look"),
        Outcome::AlreadyOpen
    );
    assert_eq!(node.patches.lock().expect("lock").len(), 1);
}

#[tokio::test]
async fn a_stale_write_is_read_again_and_redone() {
    let (rt, node) = gated_with([NodeError::Stale, NodeError::Stale]);
    assert_eq!(
        look(&rt, &node, &note(&[A])).await.expect("a look"),
        Outcome::Opened
    );
    assert_eq!(node.patches.lock().expect("lock").len(), 3);
}

#[tokio::test]
async fn other_failures_are_errors_and_endless_staleness_gives_up() {
    let (rt, node) = gated_with([NodeError::Other("forbidden".into())]);
    assert!(look(&rt, &node, &note(&[A])).await.is_err());
    let (rt, node) = gated_with((0..WRITE_ATTEMPTS).map(|_| NodeError::Stale));
    assert!(look(&rt, &node, &note(&[A])).await.is_err());
}

#[tokio::test]
async fn a_node_without_the_taint_or_gone_is_open() {
    let rt = FakeRuntime::default();
    rt.present(A);
    for taints in [None, Some(vec![]), Some(vec![taint("other")])] {
        let node = FakeNode::with(taints);
        assert_eq!(
            look(&rt, &node, &note(&[A])).await.expect("a look"),
            Outcome::AlreadyOpen
        );
        assert!(node.patches.lock().expect("lock").is_empty());
    }
}
