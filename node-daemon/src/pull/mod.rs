//! One tag's pull once it holds a slot: the node checks, IfNotPresent,
//! then CRI pulls with each matching credential and anonymously, retried as
//! `retry` decides, within the per-attempt timeout and the active deadline,
//! reporting progress as it goes.

use crate::checks;
use crate::credentials::{self, Credential};
use crate::cri::CriError;
use crate::desired::{PullMode, PullTask, SecretRef, Target};
use crate::metrics::ItemLabels;
use crate::progress::Probe;
use crate::report::{Outcome, Reporter};
use crate::resume::Keeper;
use crate::retry::{self, Next};
use k8s_cri::v1::AuthConfig;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use nodeimage_api::kruise::ImagePullPhase;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Wait while containerd is unreachable before trying again.
const RUNTIME_RETRY: Duration = Duration::from_secs(2);
/// How often progress is sampled during a pull.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// Longest a progress sample or the look-up of a pulled image's digest may
/// take: both are extras, and a containerd call that hangs must not hold
/// the tag's status (the pull itself is bounded by its timeout).
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Sleeps until `deadline`; for ever without one.
pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Why a tag failed on its deadline, and what it was doing then.
pub(crate) fn deadline_message(t: &Target, during: &str) -> String {
    format!(
        "exceeded activeDeadlineSeconds ({}s) while {during}",
        t.active_deadline.map(|d| d.as_secs()).unwrap_or(0)
    )
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
    // Node credentials from credential-provider plugins come after the
    // tag's own secrets, as kubelet orders them.
    let provided = match &deps.providers {
        Some(p) => p.credentials(&name, &reference).await,
        None => Default::default(),
    };
    // Secrets that applied but could not be used, and plugins that failed,
    // named in a failure.
    let notes: Vec<&str> = selection
        .notes
        .iter()
        .chain(&provided.notes)
        .map(String::as_str)
        .collect();
    let unusable = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    let candidates: Vec<Option<&Credential>> = credentials::matching(&creds, &name)
        .into_iter()
        .chain(provided.creds.iter())
        .map(Some)
        .chain(std::iter::once(None))
        .collect();

    // Partial blobs are kept between attempts and across a restart of the
    // daemon until the tag's pull ends (see `resume`).
    // On CRI alone there is no lease to keep them (and no progress to read).
    let mut keeper = deps
        .runtime
        .containerd()
        .map(|channel| Keeper::new(channel, &deps.node, &reference));
    attempt_pulls(rep, t, deadline, &candidates, &unusable, &mut keeper).await
}

/// The attempts of one tag's pull, as `retry` paces them.
async fn attempt_pulls(
    rep: &Reporter<'_>,
    t: &Target,
    deadline: Option<Instant>,
    candidates: &[Option<&Credential>],
    unusable: &str,
    keeper: &mut Option<Keeper>,
) -> Outcome {
    let deps = rep.deps;
    let name = t.image.name();
    let attempts = retry::attempts(t.backoff_limit);
    let mut attempt = 1;
    let mut last_error = String::new();
    let mut last_reason = "error";
    while attempt <= attempts {
        match retry::before(attempt, Instant::now(), deadline) {
            Next::Wait(wait) => tokio::time::sleep(wait).await,
            Next::PastDeadline => {
                return Outcome::failed(
                    "deadline",
                    format!(
                        "{}; last error: {last_error}{unusable}",
                        deadline_message(t, "retrying")
                    ),
                );
            }
        }
        let limit = retry::attempt_limit(t.timeout, Instant::now(), deadline);
        let result =
            tokio::time::timeout(limit, pull_with_progress(rep, t, candidates, keeper)).await;
        match result {
            Ok(Ok(image_ref)) => {
                let status =
                    tokio::time::timeout(QUERY_TIMEOUT, deps.runtime.image_status(&image_ref))
                        .await;
                let id = match status {
                    Ok(Ok(Some(img))) => {
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
        if attempt < attempts
            && let Next::Wait(wait) = retry::before(attempt + 1, Instant::now(), deadline)
        {
            rep.send(
                ImagePullPhase::Pulling,
                0,
                Some(format!(
                    "attempt {attempt} of {attempts} failed: {last_error}; retrying in {}s",
                    wait.as_secs()
                )),
            );
        }
        attempt += 1;
    }
    if retry::deadline_passed(Instant::now(), deadline) {
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
    keeper: &mut Option<Keeper>,
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
        let probe = deps.runtime.containerd().map(|channel| {
            Probe::new(
                channel,
                &t.image.registry,
                &t.image.repository,
                SystemTime::now(),
            )
        });
        let mut tracked = probe.zip(keeper.as_mut());
        // The first sample after one interval: a pull that ends sooner is
        // not slowed by reading containerd's content store at its start.
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
        let mut shown = 0;
        let result = loop {
            tokio::select! {
                r = &mut call => break r,
                _ = tick.tick(), if tracked.is_some() => {
                    let Some((probe, keeper)) = tracked.as_mut() else { continue };
                    let alone = deps.metrics.in_flight.get() <= 1;
                    let sample = tokio::time::timeout(QUERY_TIMEOUT, probe.sample(alone)).await;
                    // Held before the progress is shown: bytes reported
                    // are bytes a restart keeps.
                    let _ = tokio::time::timeout(QUERY_TIMEOUT, keeper.hold(probe.ingests())).await;
                    if let Ok(Some(p)) = sample && p != shown {
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
