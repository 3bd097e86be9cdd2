//! One tag's pull from start to end: wait for a slot, skip if present
//! (IfNotPresent), pull through CRI with each matching credential then
//! anonymously, retry with backoff, respect the per-attempt timeout and the
//! active deadline, report progress, and finish Succeeded or Failed.

use crate::backoff;
use crate::checks::{self, Thresholds};
use crate::credentials::{self, Credential};
use crate::cri::{CriError, Runtime};
use crate::desired::{PullMode, PullTask, SecretRef, TagKey, Target};
use crate::metrics::{GaugeGuard, ItemLabels, Metrics, PullLabels, ResultLabels};
use crate::progress::Probe;
use crate::writer::StatusHandle;
use k8s_cri::v1::AuthConfig;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::{Event, EventType, Recorder};
use nodeimage_api::kruise::{ImagePullPhase, ImageTagStatus};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Wait while containerd is unreachable before trying again.
const RUNTIME_RETRY: Duration = Duration::from_secs(2);
/// How often progress is sampled during a pull.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);

/// What every worker shares.
pub struct Deps {
    /// The node's runtime.
    pub runtime: Runtime,
    /// Client for reading pull secrets.
    pub client: kube::Client,
    /// Pull slots; the rest wait in order.
    pub slots: Arc<Semaphore>,
    /// Where state is reported.
    pub status: StatusHandle,
    /// Who records the NodeImage's events.
    pub reporter: kube::runtime::events::Reporter,
    /// Metrics; `in_flight` also attributes progress when a pull is alone.
    pub metrics: Metrics,
    /// Limits of the node checks.
    pub thresholds: Thresholds,
    /// How node-agent upgrades run here (off unless `--enable-upgrades`).
    pub upgrades: Arc<crate::upgrade::Settings>,
}

/// How a tag's pull ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Pulled (or present, when `pulled` is false); the repository digest.
    Succeeded {
        /// `name@sha256:…` of what the node holds.
        id: String,
        /// Whether the registry was contacted (false: already present).
        pulled: bool,
    },
    /// Gave up.
    Failed {
        /// Why, for status and events.
        message: String,
        /// Short reason for metrics.
        reason: &'static str,
    },
}

impl Outcome {
    fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        Outcome::Failed {
            message: message.into(),
            reason,
        }
    }
}

/// Reports one tag's state to the status writer.
pub(crate) struct Reporter<'a> {
    /// What the workers share.
    pub(crate) deps: &'a Deps,
    /// The entry.
    pub(crate) key: TagKey,
    /// The entry's version.
    pub(crate) version: i64,
    /// When the work started.
    pub(crate) start: Option<Time>,
    /// Upgrade fields added to every status sent (upgrade entries only).
    pub(crate) upgrade: std::sync::Mutex<crate::upgrade::UpgradeReport>,
}

impl<'a> Reporter<'a> {
    /// A reporter for the entry `key` at `version`.
    pub(crate) fn new(deps: &'a Deps, key: TagKey, version: i64) -> Self {
        Reporter {
            deps,
            key,
            version,
            start: None,
            upgrade: Default::default(),
        }
    }

    fn with_upgrade(&self, mut st: ImageTagStatus) -> ImageTagStatus {
        self.upgrade
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .apply(&mut st);
        st
    }

    /// Reports an unfinished phase.
    pub(crate) fn send(&self, phase: ImagePullPhase, progress: i32, message: Option<String>) {
        self.deps.status.report(
            &self.key,
            self.with_upgrade(ImageTagStatus {
                tag: self.key.tag.clone(),
                phase,
                progress: Some(progress),
                start_time: self.start.clone(),
                version: Some(self.version),
                message,
                ..Default::default()
            }),
        );
    }

    fn finish(&self, outcome: &Outcome) {
        match outcome {
            Outcome::Succeeded { id, .. } => self.finish_with(true, None, Some(id.clone())),
            Outcome::Failed { message, .. } => self.finish_with(false, Some(message.clone()), None),
        }
    }

    /// Reports the end: Succeeded (with the image's digest) or Failed.
    pub(crate) fn finish_with(
        &self,
        succeeded: bool,
        message: Option<String>,
        image_id: Option<String>,
    ) {
        let (phase, progress) = if succeeded {
            (ImagePullPhase::Succeeded, 100)
        } else {
            (ImagePullPhase::Failed, 0)
        };
        self.deps.status.report(
            &self.key,
            self.with_upgrade(ImageTagStatus {
                tag: self.key.tag.clone(),
                phase,
                progress: Some(progress),
                start_time: self.start.clone().or_else(|| Some(now())),
                completion_time: Some(now()),
                version: Some(self.version),
                image_id: if succeeded { image_id } else { None },
                message,
                ..Default::default()
            }),
        );
    }
}

/// The current time as the API stores it (whole seconds), so that what we
/// write compares equal to what we read back.
pub(crate) fn now() -> Time {
    Time(Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now()))
}

/// When a task's pull must end: `activeDeadlineSeconds` after the entry
/// was written.
/// A deadline too far away for the clock to hold is no deadline (None),
/// never a panic.
pub(crate) fn deadline_of(task: &PullTask, target: &Target) -> Option<Instant> {
    target.active_deadline.and_then(|d| {
        let created = task.created_at.unwrap_or_else(Timestamp::now);
        let elapsed =
            Duration::try_from(Timestamp::now().duration_since(created)).unwrap_or(Duration::ZERO);
        Instant::now().checked_add(d.saturating_sub(elapsed))
    })
}

/// Runs one task to its end (or until aborted).
pub async fn run(task: PullTask, deps: Arc<Deps>) {
    if let Ok(t) = &task.target
        && t.upgrade.is_some()
    {
        let t = t.clone();
        return crate::upgrade::run(task, t, deps).await;
    }
    let mut rep = Reporter::new(&deps, task.key.clone(), task.version);
    let target = match &task.target {
        Ok(t) => t.clone(),
        Err(msg) => {
            let outcome = Outcome::failed("invalid", msg.clone());
            count(&deps.metrics, &outcome, None);
            rep.finish(&outcome);
            announce(&deps, &task.key, &outcome).await;
            return;
        }
    };
    let deadline = deadline_of(&task, &target);
    rep.send(ImagePullPhase::Waiting, 0, None);
    let waiting = GaugeGuard::new(&deps.metrics.waiting);
    let permit = tokio::select! {
        p = deps.slots.clone().acquire_owned() => p.ok(),
        _ = sleep_until(deadline) => None,
    };
    drop(waiting);
    let (outcome, elapsed) = match permit {
        None => (
            Outcome::failed(
                "deadline",
                deadline_message(&target, "waiting for a pull slot"),
            ),
            None,
        ),
        Some(_permit) => {
            let _running = GaugeGuard::new(&deps.metrics.in_flight);
            let started = Instant::now();
            rep.start = Some(now());
            rep.send(ImagePullPhase::Pulling, 0, None);
            tracing::info!(tag = %task.key, version = task.version, "pull started");
            let o = pull(&rep, &target, deadline).await;
            (o, Some(started.elapsed()))
        }
    };
    count(&deps.metrics, &outcome, elapsed);
    rep.finish(&outcome);
    announce(&deps, &task.key, &outcome).await;
}

/// Records a finished pull in the metrics.
pub(crate) fn count(m: &Metrics, outcome: &Outcome, elapsed: Option<Duration>) {
    let (result, reason) = match outcome {
        Outcome::Succeeded { pulled: true, .. } => ("succeeded", "pulled"),
        Outcome::Succeeded { pulled: false, .. } => ("succeeded", "present"),
        Outcome::Failed { reason, .. } => ("failed", *reason),
    };
    m.pulls
        .get_or_create(&PullLabels {
            result: result.into(),
            reason: reason.into(),
        })
        .inc();
    if let Some(e) = elapsed {
        m.pull_duration
            .get_or_create(&ResultLabels {
                result: result.into(),
            })
            .observe(e.as_secs_f64());
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn deadline_message(t: &Target, during: &str) -> String {
    format!(
        "exceeded activeDeadlineSeconds ({}s) while {during}",
        t.active_deadline.map(|d| d.as_secs()).unwrap_or(0)
    )
}

async fn announce(deps: &Deps, key: &TagKey, outcome: &Outcome) {
    let (type_, reason, note) = match outcome {
        Outcome::Succeeded { id, pulled } => {
            tracing::info!(tag = %key, image_id = %id, pulled, "pull succeeded");
            (
                EventType::Normal,
                "PullImageSucceed",
                format!("Image {key} pulled ({id})"),
            )
        }
        Outcome::Failed { message, reason } => {
            tracing::warn!(tag = %key, reason, message = %message, "pull failed");
            (
                EventType::Warning,
                "PullImageFailed",
                format!("Image {key} failed: {message}"),
            )
        }
    };
    let Some(ni) = deps.status.observed() else {
        return;
    };
    let reference = kube::Resource::object_ref(&ni, &());
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(&note, 1000)),
        action: "Pull".into(),
        secondary: None,
    };
    // A fresh recorder for each event: kube's Recorder merges events of the
    // same type and reason on one object into a series that keeps the first
    // note, so every later tag of the NodeImage would show the first tag's
    // message.
    let recorder = Recorder::new(deps.client.clone(), deps.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &reference).await {
        tracing::warn!(error = %e, "could not record event");
    }
}

/// `s` cut to at most `max` bytes (at a character boundary), with an ellipsis.
pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Waits out a runtime outage, reporting why; false if the deadline passed.
async fn wait_for_runtime(rep: &Reporter<'_>, msg: &str, deadline: Option<Instant>) -> bool {
    rep.send(
        ImagePullPhase::Waiting,
        0,
        Some(format!("{msg}; waiting for containerd")),
    );
    let wake = Instant::now() + RUNTIME_RETRY;
    !matches!(deadline, Some(d) if d <= wake) && {
        tokio::time::sleep_until(wake).await;
        true
    }
}

/// Checks, then pulls (unless present and IfNotPresent), with retries.
pub(crate) async fn pull(rep: &Reporter<'_>, t: &Target, deadline: Option<Instant>) -> Outcome {
    let deps = rep.deps;
    let name = t.image.name();
    let reference = t.image.pull_ref();

    // Node checks first (ImagePrePullJob's checkItems).
    if !t.check_items.is_empty()
        && let Err(f) = checks::run(&t.check_items, &deps.runtime, &deps.thresholds).await
    {
        deps.metrics
            .check_failures
            .get_or_create(&ItemLabels { item: f.item })
            .inc();
        return Outcome::failed("check", f.reason);
    }

    // IfNotPresent: a present image succeeds without contacting the registry.
    if t.mode == PullMode::IfNotPresent {
        loop {
            match deps.runtime.image_status(&reference).await {
                Ok(Some(img)) => {
                    return Outcome::Succeeded {
                        id: img.repo_digest_for(&name),
                        pulled: false,
                    };
                }
                Ok(None) => break,
                Err(CriError::Unavailable(m)) => {
                    deps.metrics.cri_error("ImageStatus");
                    if !wait_for_runtime(rep, &m, deadline).await {
                        return Outcome::failed(
                            "unavailable",
                            deadline_message(t, "containerd was unavailable"),
                        );
                    }
                }
                Err(e) => {
                    deps.metrics.cri_error("ImageStatus");
                    return Outcome::failed(
                        "error",
                        format!("checking whether {reference} is present: {e}"),
                    );
                }
            }
        }
    }

    let selection =
        credentials::select(&t.requesters, load_secrets(&deps.client, &t.secrets).await);
    let creds = selection.creds;
    // Secrets that applied but could not be used, named in a failure.
    let unusable = if selection.notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", selection.notes.join("; "))
    };
    let candidates: Vec<Option<&Credential>> = credentials::matching(&creds, &name)
        .into_iter()
        .map(Some)
        .chain(std::iter::once(None))
        .collect();

    let attempts = t.backoff_limit + 1;
    let mut attempt = 1;
    let mut last_error = String::new();
    let mut last_reason = "error";
    while attempt <= attempts {
        let wait = backoff::delay_before(attempt);
        if let Some(d) = deadline
            && Instant::now().checked_add(wait).is_none_or(|t| t >= d)
        {
            return Outcome::failed(
                "deadline",
                format!(
                    "{}; last error: {last_error}{unusable}",
                    deadline_message(t, "retrying")
                ),
            );
        }
        tokio::time::sleep(wait).await;
        let limit = match deadline {
            Some(d) => t.timeout.min(d.saturating_duration_since(Instant::now())),
            None => t.timeout,
        };
        let result = tokio::time::timeout(limit, pull_with_progress(rep, t, &candidates)).await;
        match result {
            Ok(Ok(image_ref)) => {
                let id = match deps.runtime.image_status(&image_ref).await {
                    Ok(Some(img)) => {
                        deps.metrics.pulled_bytes.inc_by(img.size);
                        img.repo_digest_for(&name)
                    }
                    _ => format!("{name}@{image_ref}"),
                };
                return Outcome::Succeeded { id, pulled: true };
            }
            Ok(Err(CriError::Unavailable(m))) => {
                deps.metrics.cri_error("PullImage");
                if !wait_for_runtime(rep, &m, deadline).await {
                    return Outcome::failed(
                        "unavailable",
                        deadline_message(t, "containerd was unavailable"),
                    );
                }
                continue;
            }
            Ok(Err(e)) => {
                deps.metrics.cri_error("PullImage");
                tracing::debug!(tag = %rep.key, reason = e.reason(), "runtime refused the pull");
                last_reason = e.reason();
                last_error = e.to_string();
            }
            Err(_) => {
                last_reason = "timeout";
                last_error = format!("attempt timed out after {}s", limit.as_secs());
            }
        }
        tracing::info!(tag = %rep.key, attempt, attempts, error = %last_error, "pull attempt failed");
        if attempt < attempts {
            rep.send(
                ImagePullPhase::Pulling,
                0,
                Some(format!(
                    "attempt {attempt} of {attempts} failed: {last_error}; retrying in {}s",
                    backoff::delay_before(attempt + 1).as_secs()
                )),
            );
        }
        attempt += 1;
    }
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Outcome::failed(
            "deadline",
            format!(
                "{}; last error: {last_error}{unusable}",
                deadline_message(t, "pulling")
            ),
        );
    }
    Outcome::failed(
        last_reason,
        format!("pull failed after {attempts} attempts: {last_error}{unusable}"),
    )
}

/// One attempt: each candidate credential in turn (auth failures move on to
/// the next), sampling progress while the runtime pulls.
async fn pull_with_progress(
    rep: &Reporter<'_>,
    t: &Target,
    candidates: &[Option<&Credential>],
) -> Result<String, CriError> {
    let deps = rep.deps;
    let reference = t.image.pull_ref();
    let labels = t.sandbox.labels.clone().unwrap_or_default();
    let annotations = t.sandbox.annotations.clone().unwrap_or_default();
    let mut last = CriError::Other("no credentials tried".into());
    for cred in candidates {
        // No server_address, as kubelet sends it: the credential already
        // matches this image's registry, and containerd 1.6 parses a set
        // server_address as a URL ("127.0.0.1:5001" fails to parse, and a
        // bare "host" yields no host), refusing or dropping the credential.
        let auth = cred.map(|c| AuthConfig {
            username: c.username.clone(),
            password: c.password.clone(),
            ..Default::default()
        });
        let call = deps
            .runtime
            .pull(&reference, auth, labels.clone(), annotations.clone());
        tokio::pin!(call);
        let mut probe = Probe::new(
            deps.runtime.channel(),
            &t.image.registry,
            &t.image.repository,
            SystemTime::now(),
        );
        let mut tick = tokio::time::interval(PROGRESS_EVERY);
        let mut shown = 0;
        let result = loop {
            tokio::select! {
                r = &mut call => break r,
                _ = tick.tick() => {
                    let alone = deps.metrics.in_flight.get() <= 1;
                    if let Some(p) = probe.sample(alone).await && p != shown {
                        shown = p;
                        rep.send(ImagePullPhase::Pulling, p, None);
                    }
                }
            }
        };
        match result {
            Ok(r) => return Ok(r),
            Err(e @ CriError::Unauthorized(_)) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Reads every listed secret, each on its own: a missing or unreadable one
/// is reported as such, never stops the others (see `credentials::select`).
async fn load_secrets(client: &kube::Client, secrets: &[SecretRef]) -> Vec<credentials::Loaded> {
    let mut out = Vec::new();
    for s in secrets {
        let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &s.namespace);
        let loaded = match api.get_opt(&s.name).await {
            Ok(Some(secret)) => {
                let references = kube::ResourceExt::annotations(&secret)
                    .get(nodeimage_api::kruise::nodeimage::SECRET_REFERENCES_ANNOTATION)
                    .map(|a| credentials::references(a));
                let data = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                credentials::Loaded::Found {
                    references,
                    creds: credentials::parse_secret(
                        &s.to_string(),
                        secret.type_.as_deref(),
                        &data,
                    ),
                }
            }
            Ok(None) => credentials::Loaded::Missing {
                secret: s.to_string(),
            },
            Err(e) => credentials::Loaded::Unreadable {
                secret: s.to_string(),
                reason: describe_api_error(&e),
            },
        };
        out.push(loaded);
    }
    out
}

fn describe_api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}
