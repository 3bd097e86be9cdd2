//! The host steps of one upgrade, in their own task once the image is
//! pulled and confirmed: one upgrade at a time on the node, the tool taken
//! out of the image, then back up, upgrade and roll back as `steps`
//! decides, each step recorded in the NodeImage status before it runs.

use super::steps::{self, Next, Step, Verdict};
use super::{RECORD_TIMEOUT, Settings, UpgradeReport, already_at, finish, recorded, set};
use super::{still_wanted, take, tool};
use crate::deps::Deps;
use crate::desired::TagKey;
use crate::report::Reporter;
use crate::runtime::ContainerRuntime;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use nodeimage_api::kruise::{ImagePullPhase, NodeImage, TagUpgrade, UpgradeState};
use nodeimage_api::reference::ImageRef;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// What the host steps of one upgrade need from the worker that pulled.
pub(super) struct HostJob {
    /// The entry.
    pub(super) key: TagKey,
    /// The entry's version.
    pub(super) version: i64,
    /// The upgrade it asks for.
    pub(super) up: TagUpgrade,
    /// The pulled image.
    pub(super) image: ImageRef,
    /// Its repository digest.
    pub(super) image_id: String,
    /// The upgrade fields reported so far.
    pub(super) report: UpgradeReport,
    /// When the upgrade started.
    pub(super) start: Option<Time>,
}

/// What comes of the preparations before the first step.
enum Before {
    /// The entry was removed or superseded: nothing runs, nothing is reported.
    Gone,
    /// The upgrade ends here (with the image's id when it succeeded).
    End(Verdict, Option<String>),
    /// The tool, ready in the job's work directory.
    Tool(PathBuf),
}

/// Extracts the tool, then backs up, upgrades and rolls back as needed.
pub(super) async fn host_steps<R: ContainerRuntime>(
    deps: Arc<Deps<R>>,
    s: Arc<Settings>,
    job: HostJob,
) {
    let mut rep = Reporter::new(&*deps, job.key.clone(), job.version);
    *rep.upgrade.lock().unwrap_or_else(|p| p.into_inner()) = job.report.clone();
    rep.start = job.start.clone();
    let _turn = take_turn(&rep, &s).await;
    let tool = match before_steps(&rep, &s, &job).await {
        Before::Gone => return,
        Before::End(v, image_id) => return finish(&rep, v, image_id, &job.up.version).await,
        Before::Tool(tool) => tool,
    };
    let verdict = run_steps(&rep, &s, &job, &tool).await;
    let log_text = s.log_path(&job.up.job).display().to_string();
    let verdict = with_log(verdict, &log_text);
    finish(&rep, verdict, Some(job.image_id.clone()), &job.up.version).await;
}

/// Waits for this node's other upgrade, if one runs, saying so.
async fn take_turn<'s, R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    s: &'s Settings,
) -> tokio::sync::MutexGuard<'s, ()> {
    match s.lock.try_lock() {
        Ok(g) => g,
        Err(_) => {
            rep.send(
                ImagePullPhase::Pulling,
                100,
                Some("waiting for another upgrade on this node to finish".into()),
            );
            s.lock.lock().await
        }
    }
}

/// Whether the NodeImage last seen still asks for this upgrade.
fn wanted<R: ContainerRuntime>(deps: &Deps<R>, job: &HostJob) -> bool {
    deps.status
        .observed()
        .is_some_and(|ni| still_wanted(&ni, &job.key, job.version, &job.up))
}

/// Before the first step: the entry still wanted, the node not there yet,
/// the work directory made, the backup recorded and the tool taken out.
async fn before_steps<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    s: &Settings,
    job: &HostJob,
) -> Before {
    if !wanted(rep.deps, job) {
        tracing::info!(tag = %job.key, "upgrade entry removed or superseded before the backup; nothing run");
        return Before::Gone;
    }
    // Another upgrade may have finished while this one waited for the lock.
    if s.version(&rep.deps.client).await.as_deref() == Some(job.up.version.as_str()) {
        return Before::End(already_at(&job.up.version), Some(job.image_id.clone()));
    }
    let dir = s.job_dir(&job.up.job);
    if let Err(e) = tokio::fs::create_dir_all(&dir).await {
        let msg = format!("cannot create {}: {e}", dir.display());
        return Before::End(Verdict::failed(UpgradeState::Pulling, msg), None);
    }
    // Recorded before anything touches the host.
    if !record(rep, &job.key, job.version, UpgradeState::BackingUp).await {
        let msg =
            "cannot record the backup step in the NodeImage status; the upgrade was not started";
        return Before::End(Verdict::failed(UpgradeState::Pulling, msg), None);
    }
    match take::take_tool(rep.deps, s, &job.up, &job.image).await {
        Ok(tool) => Before::Tool(tool),
        Err(e) => {
            let image = job.image.pull_ref();
            let msg = format!("cannot take {} out of {image}: {e}", s.tool_path);
            Before::End(Verdict::failed(UpgradeState::BackingUp, msg), None)
        }
    }
}

/// Runs the steps `steps::next` asks for until it gives its verdict.
async fn run_steps<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    s: &Settings,
    job: &HostJob,
    tool: &Path,
) -> Verdict {
    let limit = Duration::from_secs(
        rep.deps
            .status
            .observed()
            .and_then(|ni| step_limit(&ni, &job.key))
            .unwrap_or(crate::desired::DEFAULT_TIMEOUT.as_secs()),
    );
    let mut done: Vec<(Step, Result<(), String>)> = Vec::new();
    loop {
        let step = match steps::next(&done) {
            Next::Run(step) => step,
            Next::Done(v) => return v,
        };
        if let Err(v) = before_step(rep, job, step).await {
            return v;
        }
        let result = run_step(rep, s, job, tool, step, limit).await;
        done.push((step, result));
    }
}

/// Records a step before it runs; the upgrade step runs only while the
/// entry still wants it and once it is recorded.
async fn before_step<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    job: &HostJob,
    step: Step,
) -> Result<(), Verdict> {
    if step == Step::Upgrade {
        if !wanted(rep.deps, job) {
            return Err(Verdict::failed(
                UpgradeState::BackingUp,
                "the entry was removed or superseded after the backup; the upgrade was not started",
            ));
        }
        if !record(rep, &job.key, job.version, UpgradeState::Upgrading).await {
            return Err(Verdict::failed(
                UpgradeState::BackingUp,
                "cannot record the upgrade step in the NodeImage status; the upgrade was not started",
            ));
        }
    } else if step == Step::Rollback {
        // The recovery runs even if it cannot be recorded first.
        let _ = record(rep, &job.key, job.version, UpgradeState::RollingBack).await;
    }
    Ok(())
}

/// Runs the tool for one step; an upgrade the tool reports done is checked
/// against the node's version where that shows at once.
async fn run_step<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    s: &Settings,
    job: &HostJob,
    tool: &Path,
    step: Step,
    limit: Duration,
) -> Result<(), String> {
    tracing::info!(tag = %job.key, step = step.name(), "running the upgrade tool");
    let log = s.log_path(&job.up.job);
    let args = step.args(&job.up.version, &job.key.image);
    let ran = tool::run(&s.exec_prefix, tool, &args, &log, limit).await;
    let result = ran.outcome();
    tracing::info!(tag = %job.key, step = step.name(), success = ran.success, summary = %ran.summary, "upgrade tool finished");
    if step == Step::Upgrade && result.is_ok() && s.version_source.verifies_at_once() {
        let now = s.version(&rep.deps.client).await;
        if now.as_deref() != Some(job.up.version.as_str()) {
            return Err(format!(
                "the tool succeeded but the node reports {} ({}), not {}",
                now.as_deref().unwrap_or("no version"),
                s.version_source,
                job.up.version
            ));
        }
    }
    result
}

/// A failure on the host names the log on the node.
fn with_log(verdict: Verdict, log_text: &str) -> Verdict {
    match verdict {
        Verdict {
            succeeded: false,
            state,
            message: Some(m),
        } if state != UpgradeState::Checking && state != UpgradeState::Pulling => Verdict {
            succeeded: false,
            state,
            message: Some(format!("{m} (log on the node: {log_text})")),
        },
        v => v,
    }
}

/// The entry's per-attempt timeout, which also bounds each tool step.
fn step_limit(ni: &NodeImage, key: &TagKey) -> Option<u64> {
    ni.spec
        .images
        .as_ref()?
        .get(key.image.as_str())?
        .entry(&key.tag, key.purpose)?
        .pull_policy
        .as_ref()?
        .timeout_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
}

/// Reports `state` and waits until the API shows it (write-ahead).
async fn record<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    key: &TagKey,
    version: i64,
    state: UpgradeState,
) -> bool {
    set(rep, |u| u.state = Some(state));
    rep.send(ImagePullPhase::Pulling, 100, None);
    let ok = rep
        .deps
        .status
        .wait_observed(|ni| recorded(ni, key, version, state), RECORD_TIMEOUT)
        .await;
    if !ok {
        tracing::warn!(tag = %key, state = %state, "step not recorded in the NodeImage status in time");
    }
    ok
}
