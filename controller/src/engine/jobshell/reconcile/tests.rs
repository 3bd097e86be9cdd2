//! The reconcile skeleton against a scripted API: the exact requests of the
//! finalizer branch, and what reaches the kind's cleanup and plan.

use super::*;
use crate::cluster::watch::Synced;
use crate::engine::jobshell::scripted::{Reply, Script, Seen};
use crate::engine::jobshell::{Caches, Shared};
use nodeimage_api::ImagePrePullJob;
use serde_json::json;
use std::sync::Mutex;
use std::time::Duration;

const OURS: &str = "test.nodeimage.dev/cleanup";
const UPSTREAM: &str = "upstream.example/cleanup";
/// What the fake kind's plan asks for, to tell it ran.
const PLANNED: Duration = Duration::from_secs(42);

/// A job kind whose cleanup and plan only record that they ran.
struct Fake {
    shared: Shared,
    synced: bool,
    ran: Mutex<Vec<&'static str>>,
}

impl Caches for Fake {
    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn synced(&self) -> bool {
        self.synced
    }
}

impl JobReconciler for Fake {
    type Job = ImagePrePullJob;
    const FINALIZER: &'static str = OURS;
    const UPSTREAM_FINALIZERS: &'static [&'static str] = &[UPSTREAM];

    async fn cleanup(&self, _: &ImagePrePullJob) -> Result<(), Error> {
        self.ran.lock().map(|mut r| r.push("cleanup")).ok();
        Ok(())
    }

    async fn apply(&self, _: Arc<ImagePrePullJob>) -> Result<Action, Error> {
        self.ran.lock().map(|mut r| r.push("apply")).ok();
        Ok(Action::requeue(PLANNED))
    }
}

/// The fake kind over a scripted API, its caches listed or not.
fn fake(replies: Vec<Reply>, nodeimages_listed: bool, caches_listed: bool) -> (Arc<Fake>, Script) {
    let (ctx, store, script) = Script::context(replies);
    let shared = Shared {
        writer: crate::cluster::tagwrites::NodeWriter::new(ctx.client.clone(), store.clone()),
        pacing: std::sync::Arc::new(crate::engine::registrypace::RegistryPacing::new(
            Default::default(),
            store.clone(),
        )),
        ctx,
        nodeimages: store,
        nodeimages_synced: if nodeimages_listed {
            Synced::done()
        } else {
            Synced::default()
        },
    };
    let fake = Fake {
        shared,
        synced: caches_listed,
        ran: Mutex::default(),
    };
    (Arc::new(fake), script)
}

/// Job `j` at resourceVersion 7 with `finalizers`, being deleted or not.
fn job(finalizers: &[&str], deleted: bool) -> Arc<ImagePrePullJob> {
    let mut j = ImagePrePullJob::new("j", Default::default());
    j.metadata.resource_version = Some("7".into());
    j.metadata.uid = Some("uid-j".into());
    j.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    if deleted {
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        j.metadata.deletion_timestamp = Some(crate::runtime::clock::api_time(at));
    }
    Arc::new(j)
}

/// The merge patch that sets the job's finalizers, guarded by its resourceVersion.
fn finalizers_patch(finalizers: &[&str]) -> Seen {
    Seen {
        method: "PATCH".into(),
        path: format!("{}/j", ImagePrePullJob::url_path(&(), None)),
        body: json!({"metadata": {"resourceVersion": "7", "finalizers": finalizers}}),
    }
}

/// What a reconcile of `job` did over a scripted API answering `replies`,
/// its caches listed or not: its result, the requests, what of the kind ran.
async fn reconciled(
    job: Arc<ImagePrePullJob>,
    replies: Vec<Reply>,
    nodeimages_listed: bool,
    caches_listed: bool,
) -> (Result<Action, Error>, Vec<Seen>, Vec<&'static str>) {
    let (r, api) = fake(replies, nodeimages_listed, caches_listed);
    let result = reconcile(job, r.clone()).await;
    let ran = r.ran.lock().map(|r| r.clone()).unwrap_or_default();
    assert!(api.finished(), "every scripted reply is asked for");
    (result, api.seen(), ran)
}

#[tokio::test]
async fn a_new_job_gets_the_finalizer_before_any_plan() {
    let j = job(&[], false);
    let (result, seen, ran) = reconciled(j.clone(), vec![Reply::ok(&*j)], true, true).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    assert_eq!(seen, vec![finalizers_patch(&[OURS])]);
    assert_eq!(ran, Vec::<&str>::new());
}

#[tokio::test]
async fn a_live_job_is_planned_once_the_caches_are_listed() {
    let (result, seen, ran) = reconciled(job(&[OURS], false), vec![], true, false).await;
    assert_eq!(result.ok(), Some(Action::requeue(NOT_SYNCED_RETRY)));
    assert_eq!((seen, ran), (vec![], vec![]));

    let (result, seen, ran) = reconciled(job(&[OURS], false), vec![], true, true).await;
    assert_eq!(result.ok(), Some(Action::requeue(PLANNED)));
    assert_eq!((seen, ran), (vec![], vec!["apply"]));
}

#[tokio::test]
async fn a_deleted_job_cleans_up_then_lets_every_finalizer_go() {
    let j = job(&[OURS, UPSTREAM, "someone.else/keep"], true);
    let (result, seen, ran) = reconciled(j.clone(), vec![Reply::ok(&*j)], true, true).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    assert_eq!(seen, vec![finalizers_patch(&["someone.else/keep"])]);
    assert_eq!(ran, vec!["cleanup"]);
}

#[tokio::test]
async fn a_deleted_job_waits_for_the_nodeimage_cache_before_cleaning_up() {
    let (result, seen, ran) = reconciled(job(&[OURS], true), vec![], false, true).await;
    assert_eq!(result.ok(), Some(Action::requeue(NOT_SYNCED_RETRY)));
    assert_eq!((seen, ran), (vec![], vec![]));
}

#[tokio::test]
async fn a_deleted_upstream_job_only_lets_its_finalizer_go() {
    // The job is already gone: its finalizer counts as released.
    let replies = vec![Reply::error(404, "NotFound")];
    let (result, seen, ran) = reconciled(job(&[UPSTREAM], true), replies, false, false).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    assert_eq!((seen, ran), (vec![finalizers_patch(&[])], vec![]));
}

#[tokio::test]
async fn a_deleted_job_without_our_finalizers_is_left_alone() {
    let j = job(&["someone.else/keep"], true);
    let (result, seen, ran) = reconciled(j, vec![], true, true).await;
    assert_eq!(result.ok(), Some(Action::await_change()));
    assert_eq!((seen, ran), (vec![], vec![]));
}

#[tokio::test]
async fn a_conflicting_finalizer_write_is_retried_soon() {
    let replies = vec![Reply::error(409, "Conflict")];
    let (result, seen, _) = reconciled(job(&[], false), replies, true, true).await;
    let error = result.expect_err("conflict");
    assert!(error.is_conflict(), "{error}");
    assert_eq!(seen, vec![finalizers_patch(&[OURS])]);
    let (r, _) = fake(vec![], true, true);
    let action = error_policy(job(&[], false), &error, r);
    assert_eq!(action, Action::requeue(requeue::CONFLICT_RETRY));
}
