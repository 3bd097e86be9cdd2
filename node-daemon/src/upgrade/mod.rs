//! Node-agent upgrades (NodeUpgradeJob): a tag entry with `upgrade` is
//! checked and pulled like any tag, then the upgrade tool is taken out of
//! the pulled image without running a container (from its layer blobs in
//! containerd's content store, or, where the runtime discards those once
//! unpacked, from the image's unpacked snapshot) and run on the node as
//! KubeEdge runs it: back up, upgrade,
//! roll back when the upgrade fails. Each step shows in the tag status
//! (`upgradeState`) before it runs.
//!
//! Safety:
//! - nothing runs unless the daemon was started with `--enable-upgrades`;
//!   otherwise the tag fails at once with a reason saying so;
//! - host steps run one at a time on the node, and once started they are
//!   not cancelled (a removed or superseded entry stops the upgrade only
//!   before its upgrade step);
//! - each host step is recorded in the NodeImage status before it runs, and
//!   a restarted daemon never runs a recorded host step again (see
//!   [`steps::resume`]).

pub mod extract;
mod host;
pub mod steps;
mod take;
pub mod tool;
pub mod verify;
pub mod version;

use crate::deps::Deps;
use crate::desired::{PullTask, TagKey, Target};
use crate::pull;
pub use crate::report::UpgradeReport;
use crate::report::{self, Outcome, Reporter};
use crate::runtime::ContainerRuntime;
use kube::runtime::events::{Event, EventType, Recorder};
use nodeimage_api::kruise::{ImagePullPhase, NodeImage, TagUpgrade, UpgradeState};
use nodeimage_api::reference::ImageRef;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use steps::{Resume, Verdict};
use version::VersionSource;

/// Reason of an upgrade entry on a daemon without `--enable-upgrades`.
pub const DISABLED: &str =
    "upgrades are disabled on this node (start nodeimage-daemon with --enable-upgrades)";
/// How long a step waits to see itself recorded in the API before running.
const RECORD_TIMEOUT: Duration = Duration::from_secs(30);
/// Name of the log file in a job's work directory.
pub const LOG_FILE: &str = "upgrade.log";

/// How this daemon runs upgrades (from its flags).
pub struct Settings {
    /// `--enable-upgrades`.
    pub enabled: bool,
    /// Path of the tool inside the image (canonical, relative to its root).
    pub tool_path: String,
    /// Per-job directories for the extracted tool and the log.
    pub work_dir: PathBuf,
    /// Where the node agent's version is read.
    pub version_source: VersionSource,
    /// Words run before the tool (e.g. nsenter into the host's namespaces).
    pub exec_prefix: Vec<String>,
    /// This node.
    pub node_name: String,
    /// One upgrade's host steps at a time on this node.
    pub lock: tokio::sync::Mutex<()>,
}

impl Settings {
    /// The job's work directory.
    pub fn job_dir(&self, job: &str) -> PathBuf {
        self.work_dir.join(job)
    }

    /// The job's log file.
    pub fn log_path(&self, job: &str) -> PathBuf {
        self.job_dir(job).join(LOG_FILE)
    }

    async fn version(&self, client: &kube::Client) -> Option<String> {
        match self.version_source.read(client, &self.node_name).await {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(source = %self.version_source, error = %e, "cannot read the node agent's version");
                None
            }
        }
    }
}

fn set<R, F: FnOnce(&mut UpgradeReport)>(rep: &Reporter<'_, R>, f: F) {
    f(&mut rep.upgrade.lock().unwrap_or_else(|p| p.into_inner()));
}

fn state_of<R: ContainerRuntime>(rep: &Reporter<'_, R>) -> UpgradeReport {
    rep.upgrade
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// The upgrade the NodeImage's entry asks for now, if it is still this run
/// (same entry version, same upgrade; a confirmation may have changed it).
fn current<'a>(
    ni: &'a NodeImage,
    key: &TagKey,
    version: i64,
    upgrade: &TagUpgrade,
) -> Option<&'a TagUpgrade> {
    ni.spec
        .images
        .as_ref()
        .and_then(|m| m.get(key.image.as_str()))
        .and_then(|i| i.entry(&key.tag, key.purpose))
        .filter(|t| t.version.unwrap_or(0) == version)
        .and_then(|t| t.upgrade.as_deref())
        .filter(|u| u.same_run(upgrade))
}

/// Whether the NodeImage still asks for this upgrade (same entry version).
pub fn still_wanted(ni: &NodeImage, key: &TagKey, version: i64, upgrade: &TagUpgrade) -> bool {
    current(ni, key, version, upgrade).is_some()
}

/// How long one wait for confirmation lasts before it looks again.
const CONFIRMATION_POLL: Duration = Duration::from_secs(60);

/// Waits while the entry asks the node to wait for confirmation
/// (`requireConfirmation`), reporting WaitingConfirmation; true once
/// confirmed (or never asked), false when the entry is removed or
/// superseded meanwhile (the controller timed the node out, the job went).
async fn confirmed<R: ContainerRuntime>(
    deps: &Deps<R>,
    rep: &Reporter<'_, R>,
    key: &TagKey,
    version: i64,
    up: &TagUpgrade,
) -> bool {
    let mut announced = false;
    loop {
        let Some(ni) = deps.status.observed() else {
            return false;
        };
        match current(&ni, key, version, up) {
            None => return false,
            Some(u) if !u.await_confirmation => {
                if announced {
                    tracing::info!(tag = %key, job = %up.job, "upgrade confirmed");
                }
                return true;
            }
            Some(_) => {}
        }
        if !announced {
            announced = true;
            set(rep, |u| u.state = Some(UpgradeState::WaitingConfirmation));
            rep.send(
                ImagePullPhase::Pulling,
                100,
                Some("checked and pulled; waiting for the job's confirmation".into()),
            );
            tracing::info!(tag = %key, job = %up.job, "upgrade waits for confirmation");
        }
        let waiting =
            |ni: &NodeImage| current(ni, key, version, up).is_none_or(|u| !u.await_confirmation);
        deps.status.wait_observed(waiting, CONFIRMATION_POLL).await;
    }
}

/// Whether the NodeImage's status records `state` for this entry version.
pub fn recorded(ni: &NodeImage, key: &TagKey, version: i64, state: UpgradeState) -> bool {
    ni.status
        .as_ref()
        .and_then(|s| s.image_statuses.as_ref())
        .and_then(|m| m.get(key.image.as_str()))
        .and_then(|i| {
            i.tags
                .iter()
                .find(|t| t.answers_at(&key.tag, key.purpose, version))
        })
        .is_some_and(|t| t.upgrade_state() == Some(state))
}

/// Runs an upgrade entry to its end.
pub async fn run<R: ContainerRuntime>(
    task: PullTask,
    target: Target,
    deps: Arc<Deps<R>>,
    settings: Arc<Settings>,
) {
    let Some(up) = target.upgrade.clone() else {
        return;
    };
    let mut rep = Reporter::new(&*deps, task.key.clone(), task.version);
    let (image_id, image) = match prepare(&mut rep, &task, &target, &up, &settings).await {
        Ok(pulled) => pulled,
        Err(v) => return finish(&rep, v, None, &up.version).await,
    };
    // requireConfirmation: nothing touches the host before the job says so.
    if !confirmed(&deps, &rep, &task.key, task.version, &up).await {
        tracing::info!(tag = %task.key, "upgrade entry removed or superseded while waiting for confirmation; nothing run");
        return;
    }
    // The host steps run in their own task: once started they are not
    // cancelled with this worker (an entry removed or superseded mid-way).
    let job = host::HostJob {
        key: task.key.clone(),
        version: task.version,
        up,
        image,
        image_id,
        report: state_of(&rep),
        start: rep.start.clone(),
    };
    let host = tokio::spawn(host::host_steps(deps.clone(), settings.clone(), job));
    if let Err(e) = host.await {
        tracing::error!(tag = %task.key, error = %e, "upgrade task failed");
    }
}

/// Everything before the confirmation: a resumed entry's verdict, the
/// switch, the node's version, the checks, the pull and the image's digest
/// check. The pulled image's id and the reference to take the tool from
/// (pinned to its checked digest), or the verdict that ends the upgrade here.
async fn prepare<R: ContainerRuntime>(
    rep: &mut Reporter<'_, R>,
    task: &PullTask,
    target: &Target,
    up: &TagUpgrade,
    s: &Settings,
) -> Result<(String, ImageRef), Verdict> {
    let log_text = s.log_path(&up.job).display().to_string();
    set(rep, |u| {
        u.state = Some(UpgradeState::Checking);
        u.log = Some(log_text.clone());
    });
    // A restarted daemon: never run a recorded host step again.
    match steps::resume(task.resume, &log_text) {
        Resume::Fresh => {}
        Resume::Done(v) => return Err(v),
        Resume::CheckVersion => {
            let now = s.version(&rep.deps.client).await;
            let v = steps::after_interrupted_upgrade(now.as_deref(), &up.version, &log_text);
            return Err(v);
        }
    }
    if !s.enabled {
        return Err(Verdict::failed(UpgradeState::Checking, DISABLED));
    }
    rep.start = Some(report::now());
    rep.send(ImagePullPhase::Pulling, 0, None);
    tracing::info!(tag = %task.key, job = %up.job, to = %up.version, "upgrade started");
    // The version: nothing to do when the node runs it already.
    let from = s.version(&rep.deps.client).await;
    set(rep, |u| u.from_version = from.as_deref().map(Into::into));
    if from.as_deref() == Some(up.version.as_str()) {
        return Err(already_at(&up.version));
    }
    // Checks (checkItems), then the pull, like any tag.
    if let Err(reason) = pull::run_checks(rep.deps, &target.check_items).await {
        return Err(Verdict::failed(UpgradeState::Checking, reason));
    }
    let id = pull_image(rep, task, target).await?;
    // imageDigestGatter: nothing is taken out of an image with another digest.
    let arch = verify::node_arch();
    match verify::checked(rep.deps, &target.image, up.image_digests.as_ref(), arch).await {
        Ok(image) => Ok((id, image)),
        Err(why) => Err(Verdict::failed(UpgradeState::Pulling, why)),
    }
}

/// The verdict of an upgrade whose node runs its version already.
fn already_at(version: &str) -> Verdict {
    Verdict::succeeded(Some(format!("already at {version}; nothing to do")))
}

/// Pulls the upgrade's image through the pull path every tag takes (its
/// checks ran before, in the Checking state); the image's id.
async fn pull_image<R: ContainerRuntime>(
    rep: &mut Reporter<'_, R>,
    task: &PullTask,
    target: &Target,
) -> Result<String, Verdict> {
    set(rep, |u| u.state = Some(UpgradeState::Pulling));
    rep.send(ImagePullPhase::Pulling, 0, None);
    let deadline = pull::deadline_of(task, target);
    let mut pull_target = target.clone();
    pull_target.check_items.clear();
    let pulled = pull::in_slot(rep, &pull_target, deadline, |_| {}).await;
    report::count(&rep.deps.metrics, &pulled.outcome, pulled.elapsed);
    match pulled.outcome {
        Outcome::Succeeded { id, .. } => Ok(id),
        Outcome::Failed { message, .. } => Err(Verdict::failed(UpgradeState::Pulling, message)),
    }
}

/// Reports the end of the upgrade (a success means the node runs `target`)
/// and records an event on the NodeImage.
async fn finish<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    v: Verdict,
    image_id: Option<String>,
    target: &str,
) {
    set(rep, |u| {
        u.state = Some(v.state);
        if v.succeeded {
            u.to_version = Some(target.into());
        }
    });
    rep.finish_with(v.succeeded, v.message.clone(), image_id);
    let (type_, reason, note) = if v.succeeded {
        tracing::info!(tag = %rep.key, message = v.message.as_deref().unwrap_or_default(), "upgrade succeeded");
        (
            EventType::Normal,
            "NodeUpgraded",
            v.message
                .clone()
                .unwrap_or_else(|| format!("Upgraded with {}", rep.key)),
        )
    } else {
        tracing::warn!(tag = %rep.key, state = %v.state, message = v.message.as_deref().unwrap_or_default(), "upgrade failed");
        (
            EventType::Warning,
            if v.state == UpgradeState::RolledBack {
                "NodeRolledBack"
            } else {
                "NodeUpgradeFailed"
            },
            v.message.clone().unwrap_or_default(),
        )
    };
    let Some(ni) = rep.deps.status.observed() else {
        return;
    };
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(report::truncate(&note, 1000)),
        action: "Upgrade".into(),
        secondary: None,
    };
    let recorder = Recorder::new(rep.deps.client.clone(), rep.deps.reporter.clone());
    if let Err(e) = recorder
        .publish(&ev, &kube::Resource::object_ref(&ni, &()))
        .await
    {
        tracing::warn!(error = %e, "could not record event");
    }
}
