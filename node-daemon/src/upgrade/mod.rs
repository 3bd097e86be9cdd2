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

pub mod content;
pub mod extract;
pub mod overlay;
pub mod snapshot;
pub mod steps;
pub mod tool;
pub mod version;

use crate::checks;
use crate::cri::CriError;
use crate::desired::{PullTask, TagKey, Target};
use crate::metrics::ItemLabels;
use crate::pull;
pub use crate::report::UpgradeReport;
use crate::report::{self, Outcome, Reporter};
use crate::shared::Deps;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::{Event, EventType, Recorder};
use nodeimage_api::kruise::{ImagePullPhase, NodeImage, TagUpgrade, UpgradeState};
use nodeimage_api::reference::ImageRef;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use steps::{Next, Resume, Step, Verdict};
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

fn set<F: FnOnce(&mut UpgradeReport)>(rep: &Reporter<'_>, f: F) {
    f(&mut rep.upgrade.lock().unwrap_or_else(|p| p.into_inner()));
}

fn state_of(rep: &Reporter<'_>) -> UpgradeReport {
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
        .and_then(|i| i.tags.iter().find(|t| t.tag == key.tag))
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
async fn confirmed(
    deps: &Deps,
    rep: &Reporter<'_>,
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
        .and_then(|i| i.tags.iter().find(|t| t.tag == key.tag))
        .is_some_and(|t| t.version.unwrap_or(0) == version && t.upgrade_state() == Some(state))
}

/// Runs an upgrade entry to its end.
pub async fn run(task: PullTask, target: Target, deps: Arc<Deps>, settings: Arc<Settings>) {
    let Some(up) = target.upgrade.clone() else {
        return;
    };
    let s = settings;
    let log = s.log_path(&up.job);
    let log_text = log.display().to_string();
    let mut rep = Reporter::new(&deps, task.key.clone(), task.version);
    set(&rep, |u| {
        u.state = Some(UpgradeState::Checking);
        u.log = Some(log_text.clone());
    });

    // A restarted daemon: never run a recorded host step again.
    match steps::resume(task.resume, &log_text) {
        Resume::Fresh => {}
        Resume::Done(v) => return finish(&rep, v, None, &up.version).await,
        Resume::CheckVersion => {
            let now = s.version(&deps.client).await;
            let v = steps::after_interrupted_upgrade(now.as_deref(), &up.version, &log_text);
            return finish(&rep, v, None, &up.version).await;
        }
    }
    if !s.enabled {
        return finish(
            &rep,
            Verdict::failed(UpgradeState::Checking, DISABLED),
            None,
            &up.version,
        )
        .await;
    }
    rep.start = Some(report::now());
    rep.send(ImagePullPhase::Pulling, 0, None);
    tracing::info!(tag = %task.key, job = %up.job, to = %up.version, "upgrade started");

    // The version: nothing to do when the node runs it already.
    let from = s.version(&deps.client).await;
    set(&rep, |u| u.from_version = from.as_deref().map(Into::into));
    if from.as_deref() == Some(up.version.as_str()) {
        let note = format!("already at {}; nothing to do", up.version);
        return finish(&rep, Verdict::succeeded(Some(note)), None, &up.version).await;
    }

    // Checks (checkItems), then the pull, like any tag.
    if !target.check_items.is_empty()
        && let Err(f) = checks::run(&target.check_items, &deps.runtime, &deps.thresholds).await
    {
        deps.metrics
            .check_failures
            .get_or_create(&ItemLabels { item: f.item })
            .inc();
        return finish(
            &rep,
            Verdict::failed(UpgradeState::Checking, f.reason),
            None,
            &up.version,
        )
        .await;
    }
    set(&rep, |u| u.state = Some(UpgradeState::Pulling));
    rep.send(ImagePullPhase::Pulling, 0, None);
    let deadline = pull::deadline_of(&task, &target);
    let mut pull_target = target.clone();
    pull_target.check_items.clear();
    let started = tokio::time::Instant::now();
    let lease = deps.leases.enter(pull_target.image.pull_ref());
    let outcome = match deps.slots.clone().acquire_owned().await {
        Ok(_permit) => {
            let _running = crate::metrics::GaugeGuard::new(&deps.metrics.in_flight);
            pull::pull(&rep, &pull_target, deadline).await
        }
        Err(_) => Outcome::Failed {
            message: "the daemon is stopping".into(),
            reason: "error",
        },
    };
    // The pull's partial blobs are no longer kept, as after any pull.
    lease.end(deps.runtime.containerd(), deps.node.clone());
    report::count(&deps.metrics, &outcome, Some(started.elapsed()));
    let image_id = match outcome {
        Outcome::Succeeded { id, .. } => id,
        Outcome::Failed { message, .. } => {
            return finish(
                &rep,
                Verdict::failed(UpgradeState::Pulling, message),
                None,
                &up.version,
            )
            .await;
        }
    };

    // requireConfirmation: nothing touches the host before the job says so.
    if !confirmed(&deps, &rep, &task.key, task.version, &up).await {
        tracing::info!(tag = %task.key, "upgrade entry removed or superseded while waiting for confirmation; nothing run");
        return;
    }

    // The host steps run in their own task: once started they are not
    // cancelled with this worker (an entry removed or superseded mid-way).
    let report = state_of(&rep);
    let start = rep.start.clone();
    let host = tokio::spawn(host_steps(
        deps.clone(),
        s.clone(),
        HostJob {
            key: task.key.clone(),
            version: task.version,
            up,
            image: target.image.clone(),
            image_id,
            report,
            start,
        },
    ));
    if let Err(e) = host.await {
        tracing::error!(tag = %task.key, error = %e, "upgrade task failed");
    }
}

/// What the host steps of one upgrade need from the worker that pulled.
struct HostJob {
    key: TagKey,
    version: i64,
    up: TagUpgrade,
    image: ImageRef,
    image_id: String,
    report: UpgradeReport,
    start: Option<Time>,
}

/// Extracts the tool, then backs up, upgrades and rolls back as needed.
async fn host_steps(deps: Arc<Deps>, s: Arc<Settings>, job: HostJob) {
    let HostJob {
        key,
        version,
        up,
        image,
        image_id,
        report,
        start,
    } = job;
    let mut rep = Reporter::new(&deps, key.clone(), version);
    *rep.upgrade.lock().unwrap_or_else(|p| p.into_inner()) = report;
    rep.start = start;
    let log = s.log_path(&up.job);
    let log_text = log.display().to_string();
    let wanted = || {
        deps.status
            .observed()
            .is_some_and(|ni| still_wanted(&ni, &key, version, &up))
    };

    let _guard = match s.lock.try_lock() {
        Ok(g) => g,
        Err(_) => {
            rep.send(
                ImagePullPhase::Pulling,
                100,
                Some("waiting for another upgrade on this node to finish".into()),
            );
            s.lock.lock().await
        }
    };
    if !wanted() {
        tracing::info!(tag = %key, "upgrade entry removed or superseded before the backup; nothing run");
        return;
    }
    // Another upgrade may have finished while this one waited for the lock.
    if s.version(&deps.client).await.as_deref() == Some(up.version.as_str()) {
        let note = format!("already at {}; nothing to do", up.version);
        return finish(
            &rep,
            Verdict::succeeded(Some(note)),
            Some(image_id),
            &up.version,
        )
        .await;
    }
    let failed = |state, msg: String| Verdict::failed(state, msg);
    if let Err(e) = tokio::fs::create_dir_all(s.job_dir(&up.job)).await {
        let msg = format!("cannot create {}: {e}", s.job_dir(&up.job).display());
        return finish(&rep, failed(UpgradeState::Pulling, msg), None, &up.version).await;
    }
    // Recorded before anything touches the host.
    if !record(&rep, &key, version, UpgradeState::BackingUp).await {
        let msg =
            "cannot record the backup step in the NodeImage status; the upgrade was not started"
                .to_string();
        return finish(&rep, failed(UpgradeState::Pulling, msg), None, &up.version).await;
    }
    let tool = match take_tool(&deps, &s, &up, &image).await {
        Ok(t) => t,
        Err(e) => {
            let msg = format!(
                "cannot take {} out of {}: {e}",
                s.tool_path,
                image.pull_ref()
            );
            return finish(
                &rep,
                failed(UpgradeState::BackingUp, msg),
                None,
                &up.version,
            )
            .await;
        }
    };
    let limit = Duration::from_secs(
        deps.status
            .observed()
            .and_then(|ni| step_limit(&ni, &key))
            .unwrap_or(crate::desired::DEFAULT_TIMEOUT.as_secs()),
    );
    let image_name = key.image.clone();
    let mut done: Vec<(Step, Result<(), String>)> = Vec::new();
    let verdict = loop {
        let step = match steps::next(&done) {
            Next::Run(step) => step,
            Next::Done(v) => break v,
        };
        if step == Step::Upgrade {
            if !wanted() {
                break failed(
                    UpgradeState::BackingUp,
                    "the entry was removed or superseded after the backup; the upgrade was not started".into(),
                );
            }
            if !record(&rep, &key, version, UpgradeState::Upgrading).await {
                break failed(
                    UpgradeState::BackingUp,
                    "cannot record the upgrade step in the NodeImage status; the upgrade was not started".into(),
                );
            }
        } else if step == Step::Rollback {
            // The recovery runs even if it cannot be recorded first.
            let _ = record(&rep, &key, version, UpgradeState::RollingBack).await;
        }
        tracing::info!(tag = %key, step = step.name(), "running the upgrade tool");
        let ran = tool::run(
            &s.exec_prefix,
            &tool,
            &step.args(&up.version, &image_name),
            &log,
            limit,
        )
        .await;
        let mut result = ran.outcome();
        tracing::info!(tag = %key, step = step.name(), success = ran.success, summary = %ran.summary, "upgrade tool finished");
        if step == Step::Upgrade && result.is_ok() && s.version_source.verifies_at_once() {
            let now = s.version(&deps.client).await;
            if now.as_deref() != Some(up.version.as_str()) {
                result = Err(format!(
                    "the tool succeeded but the node reports {} ({}), not {}",
                    now.as_deref().unwrap_or("no version"),
                    s.version_source,
                    up.version
                ));
            }
        }
        done.push((step, result));
    };
    let verdict = match verdict {
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
    };
    finish(&rep, verdict, Some(image_id), &up.version).await;
}

/// The entry's per-attempt timeout, which also bounds each tool step.
fn step_limit(ni: &NodeImage, key: &TagKey) -> Option<u64> {
    ni.spec
        .images
        .as_ref()?
        .get(key.image.as_str())?
        .tags
        .iter()
        .find(|t| t.tag == key.tag)?
        .pull_policy
        .as_ref()?
        .timeout_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
}

/// Reports `state` and waits until the API shows it (write-ahead).
async fn record(rep: &Reporter<'_>, key: &TagKey, version: i64, state: UpgradeState) -> bool {
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

/// Takes the tool out of the pulled image into the job's work directory;
/// returns its path there.
async fn take_tool(
    deps: &Deps,
    s: &Settings,
    up: &TagUpgrade,
    image: &ImageRef,
) -> Result<PathBuf, String> {
    let channel = deps.runtime.containerd().ok_or_else(|| {
        "taking the upgrade tool out of the image needs containerd's content API; this daemon runs on CRI alone (--runtime-api)".to_string()
    })?;
    let reference = image.pull_ref();
    let digest = match content::image_target(channel.clone(), &reference).await {
        Ok(d) => d,
        Err(e) => {
            // The CRI image's repository digest names the same manifest.
            let present = deps
                .runtime
                .image_status(&reference)
                .await
                .map_err(|c: CriError| c.to_string())?;
            let name = image.name();
            present
                .and_then(|p| {
                    p.repo_digests
                        .iter()
                        .find(|d| d.starts_with(&format!("{name}@")))
                        .and_then(|d| d.split_once('@').map(|(_, d)| d.to_string()))
                })
                .ok_or(e)?
        }
    };
    let img = content::image(channel.clone(), &digest).await?;
    let missing = content::first_missing(channel.clone(), &img.layers).await?;
    let base = Path::new(&s.tool_path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tool".into());
    let dir = s.job_dir(&up.job);
    let dest = dir.join(&base);
    let tmp = dir.join(format!(".{base}.partial"));
    let found = match missing {
        None => from_layers(channel, img.layers, &s.tool_path, &tmp).await,
        Some(layer) => {
            tracing::info!(image = %reference, layer = %layer, "a layer blob is not in containerd's content store (discarded once unpacked); reading the upgrade tool from the image's unpacked snapshot");
            match snapshot::extract(channel, &s.node_name, &img.config, &s.tool_path, &tmp).await {
                Ok(from) => {
                    tracing::info!(image = %reference, snapshotter = %from.snapshotter, snapshot = %from.chain_id, dir = %from.dir.display(), "upgrade tool read from the image's unpacked snapshot");
                    Ok(())
                }
                // The image lacks the tool: said as the layers would say it.
                Err(e @ snapshot::SnapshotError::Lookup(overlay::LookupError::Image(_))) => {
                    Err(e.to_string())
                }
                Err(e) => Err(format!(
                    "layer {layer} is not in containerd's content store (the runtime discards layers once unpacked: discard_unpacked_layers = true), and the image's unpacked snapshot cannot be read: {e}"
                )),
            }
        }
    };
    if let Err(e) = found {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(e);
    }
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .await
        .map_err(|e| format!("chmod {}: {e}", tmp.display()))?;
    tokio::fs::rename(&tmp, &dest)
        .await
        .map_err(|e| format!("moving the tool to {}: {e}", dest.display()))?;
    tracing::info!(tool = %dest.display(), image = %reference, "upgrade tool extracted");
    Ok(dest)
}

/// Copies the tool out of the image's layer blobs (top one first) to `tmp`.
async fn from_layers(
    channel: tonic::transport::Channel,
    layers: Vec<String>,
    tool_path: &str,
    tmp: &Path,
) -> Result<(), String> {
    let (tool_path, tmp) = (tool_path.to_string(), tmp.to_path_buf());
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let _enter = handle.enter();
        let mut out =
            std::fs::File::create(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        extract::find(
            layers.len(),
            |i| {
                Ok(Box::new(content::blob_reader(channel.clone(), &layers[i]))
                    as Box<dyn std::io::Read>)
            },
            &tool_path,
            &mut out,
        )
        .map_err(|e| e.to_string())?;
        out.sync_all()
            .map_err(|e| format!("writing {}: {e}", tmp.display()))
    })
    .await
    .map_err(|e| format!("extraction task: {e}"))?
}

/// Reports the end of the upgrade (a success means the node runs `target`)
/// and records an event on the NodeImage.
async fn finish(rep: &Reporter<'_>, v: Verdict, image_id: Option<String>, target: &str) {
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
