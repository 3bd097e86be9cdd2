//! Removal entries through the sync loop: each is served once, answered
//! through the status writer, not run again when its answer comes back,
//! and a live pull entry keeps its image.

use super::*;
use nodeimage_api::kruise::nodeimage::contract::removal_answers;
use nodeimage_api::nodeimage_dev::{RemovalResult, RemovalStatus, SkipReason};

const OLD: &str = "127.0.0.1:5000/old:v1";

/// `ni` with `removals` as its spec's removal entries.
fn with_removals(mut ni: NodeImage, removals: Value) -> NodeImage {
    ni.spec.removals = serde_json::from_value(removals).expect("removal entries");
    ni
}

fn answer(l: &Loop, uid: &str) -> Option<RemovalStatus> {
    l.deps.status.removal_answer("cve", uid)
}

fn removes(l: &Loop) -> usize {
    l.calls_of(|c| matches!(c, Call::RemoveImage(_))).len()
}

#[tokio::test(start_paused = true)]
async fn a_removal_entry_is_served_once_and_spares_what_a_pull_wants() {
    let rt = FakeRuntime::default();
    rt.image(OLD, "sha256:old", 300);
    let mut l = start(rt.clone(), None).await;
    let ni = l.nodeimage(json!({NAME: {"tags": [entry(1)]}}), None);
    l.listed(ni).await;
    until("the pull succeeds", || {
        l.phase(NAME) == Some(ImagePullPhase::Succeeded)
    })
    .await;
    let entries = json!([{"job": "cve", "uid": "r1", "images": [OLD, IMAGE]}]);
    let ni = with_removals(
        l.nodeimage(json!({NAME: {"tags": [entry(1)]}}), None),
        entries.clone(),
    );
    l.applied(ni.clone()).await;
    until("the removal is answered", || answer(&l, "r1").is_some()).await;
    let got = answer(&l, "r1").expect("answered");
    let results: Vec<_> = got
        .images
        .iter()
        .map(|i| (i.image.as_str(), i.result, i.reason, i.bytes_freed))
        .collect();
    assert_eq!(
        results,
        [
            (OLD, RemovalResult::Removed, None, Some(300)),
            (
                IMAGE,
                RemovalResult::Skipped,
                Some(SkipReason::WantedByPull),
                None
            ),
        ]
    );
    assert_eq!(removes(&l), 1);
    // The answer comes back with the daemon's status write: nothing runs again.
    let mut echoed = ni.clone();
    let mut status = crate::status::build(&echoed, &BTreeMap::new(), None);
    status.removals = removal_answers(&echoed, std::slice::from_ref(&got));
    echoed.status = Some(status);
    l.applied(echoed).await;
    tokio::time::sleep(s(60)).await;
    assert_eq!(removes(&l), 1, "served once: {:?}", rt.calls());
    // A new job of the same name (another uid) is another request.
    rt.image(OLD, "sha256:old", 300);
    let again = with_removals(
        l.nodeimage(json!({NAME: {"tags": [entry(1)]}}), None),
        json!([{"job": "cve", "uid": "r2", "images": [OLD]}]),
    );
    l.applied(again).await;
    until("the new job is answered", || answer(&l, "r2").is_some()).await;
    assert_eq!(removes(&l), 2);
    assert_eq!(answer(&l, "r1"), None, "the old job's answer is dropped");
    l.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_runtime_that_cannot_list_fails_each_image_with_the_reason() {
    let rt = FakeRuntime::default();
    let mut l = start(rt.clone(), None).await;
    rt.down();
    let ni = with_removals(
        l.nodeimage(json!({}), None),
        json!([{"job": "cve", "uid": "r1", "images": [OLD]}]),
    );
    l.listed(ni).await;
    until("the removal is answered", || answer(&l, "r1").is_some()).await;
    let got = answer(&l, "r1").expect("answered");
    assert_eq!(got.images.len(), 1);
    assert_eq!(got.images[0].result, RemovalResult::Failed);
    let message = got.images[0].message.clone().unwrap_or_default();
    assert!(message.contains("listing the images"), "{message}");
    l.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_blocked_image_that_comes_back_is_removed_again_at_the_presence_check() {
    let rt = FakeRuntime::default();
    rt.image(OLD, "sha256:old", 300);
    let mut l = start(rt.clone(), Some(s(5))).await;
    let by_digest = "127.0.0.1:5000/old@sha256:1111111111111111111111111111111111111111111111111111111111111111";
    rt.image(by_digest, "sha256:old", 300);
    let ni = with_removals(
        l.nodeimage(json!({}), None),
        json!([{"job": "cve", "uid": "r1", "images": [by_digest], "block": true}]),
    );
    l.listed(ni).await;
    until("the block is answered", || answer(&l, "r1").is_some()).await;
    assert_eq!(removes(&l), 1);
    // Back on the node (a hand pull): the next presence check takes it off.
    rt.image(by_digest, "sha256:old", 300);
    until("the sweep removes it again", || removes(&l) == 2).await;
    // Gone, it stays gone: later checks remove nothing more.
    tokio::time::sleep(s(30)).await;
    assert_eq!(removes(&l), 2, "{:?}", rt.calls());
    l.stop().await;
}
