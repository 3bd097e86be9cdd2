//! ImageListPullJob: a list of images, pulled through one child ImagePullJob
//! per image; its status aggregates the children's. Decisions in `plan`.

pub mod plan;

use crate::cluster::cache::{Subscription, touched};
use crate::engine::jobshell::{self, Error, JobKind, api_err};
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use chrono::Utc;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector;
use kube::{Resource, ResourceExt};
use nodeimage_api::{ImageListPullJob, ImagePullJob};
use nodeimage_ops::health::Readiness;
use std::sync::Arc;
use tokio::sync::watch as signal;

impl JobKind for ImageListPullJob {
    const KIND: &'static str = "ImageListPullJob";
    const NAME: &'static str = "imagelistpulljob";
    const EVENT_ACTION: &'static str = "Reconcile";

    fn api(client: kube::Client, job: &Self) -> Api<Self> {
        Api::namespaced(client, &job.namespace().unwrap_or_default())
    }
}

/// Runs the ImageListPullJob controller until `stop` turns true; its
/// children come from the shared ImagePullJob cache (`children`), matched
/// by their owner references.
pub async fn run(
    ctx: Context,
    readiness: Readiness,
    stop: signal::Receiver<bool>,
    children: Subscription<ImagePullJob>,
) {
    let client = ctx.client.clone();
    let ready = readiness.check("imagelistpulljobs-synced").await;
    let (lists, list_writer) = reflector::store::<ImageListPullJob>();
    let skipped = crate::cluster::skipped::Skipped::new(&ctx, "ImageListPullJob", None);
    let controller = Controller::for_stream(
        crate::cluster::watch::controller_trigger(client, list_writer, skipped),
        lists,
    )
    .owns_stream(touched(children.events));
    ready.set(true);
    let name = ImageListPullJob::NAME;
    lifecycle::run_controller(
        name,
        controller,
        reconcile,
        error_policy,
        Arc::new(ctx),
        stop,
    )
    .await;
}

async fn reconcile(job: Arc<ImageListPullJob>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile("ImageListPullJob");
    let api = ImageListPullJob::api(ctx.client.clone(), &job);
    if job.meta().deletion_timestamp.is_some() {
        // Children go with it through garbage collection (owner references);
        // OpenKruise's finalizer, on a list it ran, goes as OpenKruise lets it go.
        let upstream = [nodeimage_api::kruise::DELETION_PROTECTION_FINALIZER];
        crate::cluster::tagwrites::edit_finalizers(&api, job.as_ref(), None, &upstream).await?;
        return Ok(Action::await_change());
    }
    let ns = job.namespace().unwrap_or_default();
    let who = format!("{ns}/{}", job.name_any());
    let children_api: Api<ImagePullJob> = Api::namespaced(ctx.client.clone(), &ns);
    let children = children_of(&children_api, &job, &who).await?;
    let p = plan::plan(&job, &children, Utc::now());
    write_children(&children_api, &p, &ns, &who).await?;
    if p.write_status {
        let body = serde_json::json!({"status": p.status});
        jobshell::patch_status(&api, job.as_ref(), &body).await?;
    }
    jobshell::publish(&ctx, job.as_ref(), &p.events).await;
    if p.delete_self {
        tracing::info!(job = %who, "deleting list job: ttlSecondsAfterFinished passed");
        api.delete(&job.name_any(), &DeleteParams::background())
            .await
            .map_err(api_err(format!("deleting {who}")))?;
        return Ok(Action::await_change());
    }
    Ok(jobshell::after_success(p.requeue_after))
}

/// The list's children: the ImagePullJobs labelled with its name that it owns.
async fn children_of(
    api: &Api<ImagePullJob>,
    job: &ImageListPullJob,
    who: &str,
) -> Result<Vec<Arc<ImagePullJob>>, Error> {
    let uid = job.uid().unwrap_or_default();
    let labels = format!("{}={}", plan::PARENT_LABEL, job.name_any());
    let listed = api
        .list(&ListParams::default().labels(&labels))
        .await
        .map_err(api_err(format!("listing children of {who}")))?;
    Ok(listed
        .into_iter()
        .filter(|c| c.owner_references().iter().any(|o| o.uid == uid))
        .map(Arc::new)
        .collect())
}

/// Creates the children the plan asks for and deletes those it drops (a
/// child already gone is fine).
async fn write_children(
    api: &Api<ImagePullJob>,
    p: &plan::Plan,
    ns: &str,
    who: &str,
) -> Result<(), Error> {
    for c in &p.create {
        let image = &c.spec.image;
        let made = api
            .create(&PostParams::default(), c)
            .await
            .map_err(api_err(format!(
                "creating the child job for {image} in {ns}"
            )))?;
        tracing::info!(job = %who, child = %made.name_any(), %image, "child ImagePullJob created");
    }
    for d in &p.delete {
        match api.delete(d, &DeleteParams::background()).await {
            Ok(_) => {
                tracing::info!(job = %who, child = %d, "child ImagePullJob deleted (image removed or template changed)")
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(api_err(format!("deleting child {ns}/{d}"))(e)),
        }
    }
    Ok(())
}

/// The shell's retry policy, for a list job.
fn error_policy(job: Arc<ImageListPullJob>, error: &Error, ctx: Arc<Context>) -> Action {
    jobshell::retry(job.as_ref(), error, &ctx)
}
