//! The attempts of one tag's pull, as `retry` paces them: each attempt
//! tries every matching credential and then none, samples byte progress
//! while the runtime pulls, and is cut short by its timeout and the
//! deadline; an unavailable runtime, and a registry that rate-limits the
//! node (`ratelimited`), are waited out without using up an attempt.

use super::slot::SlotHold;
use super::{deadline_message, ratelimited, secrets, unavailable_past_deadline, wait_for_runtime};
use crate::credentials::{self, Credential};
use crate::deps::Deps;
use crate::desired::Target;
use crate::report::{Outcome, Reporter};
use crate::retry::{self, Next};
use crate::runtime::RuntimeError;
use crate::runtime::{BlobKeeper, ContainerRuntime, PullAuth, PullProbe, PullRequest};
use nodeimage_api::kruise::ImagePullPhase;
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// How often progress is sampled during a pull.
const PROGRESS_EVERY: Duration = Duration::from_millis(500);
/// Longest a progress sample or the look-up of a pulled image's digest may
/// take: both are extras, and a containerd call that hangs must not hold
/// the tag's status (the pull itself is bounded by its timeout).
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// The credentials a pull tries, in order, and a note on those it could not
/// use (for a failure's message).
pub(super) struct Credentials {
    /// Each matching credential, then None (anonymously).
    candidates: Vec<Option<Credential>>,
    /// ` (…)` naming secrets that applied but could not be used and plugins
    /// that failed; empty when none.
    unusable: String,
}

impl Credentials {
    /// These candidates and note, for unit tests.
    #[cfg(test)]
    pub(super) fn new(candidates: Vec<Option<Credential>>, unusable: &str) -> Self {
        Credentials {
            candidates,
            unusable: unusable.to_string(),
        }
    }

    /// The tag's own secrets first, then the node's credential-provider
    /// plugins (as kubelet orders them), then anonymously.
    pub(super) async fn load<R>(deps: &Deps<R>, t: &Target) -> Self {
        let name = t.image.name();
        let loaded = secrets::load(&deps.client, &t.secrets).await;
        let selection = credentials::select(&t.requesters, loaded);
        let provided = match &deps.providers {
            Some(p) => p.credentials(&name, &t.image.pull_ref()).await,
            None => Default::default(),
        };
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
        let candidates = credentials::matching(&selection.creds, &name)
            .into_iter()
            .chain(provided.creds.iter())
            .map(|c| Some(c.clone()))
            .chain(std::iter::once(None))
            .collect();
        Credentials {
            candidates,
            unusable,
        }
    }
}

/// The last failed attempt.
struct Failure {
    /// Short reason for metrics.
    reason: &'static str,
    /// What went wrong.
    error: String,
}

/// What one attempt came to.
enum Attempt {
    /// The pull ended: pulled, or failed for good.
    Done(Outcome),
    /// The runtime was away and is waited out: the attempt does not count.
    Unavailable,
    /// The registry rate-limited the pull (the runtime's message): the
    /// attempt does not count, the registry is waited for.
    RateLimited(String),
    /// The attempt failed; another may follow.
    Failed(Failure),
}

/// One tag's pull as its attempts see it.
pub(super) struct Pull<'p, R> {
    /// Where the tag's state is reported.
    pub(super) rep: &'p Reporter<'p, R>,
    /// What to pull.
    pub(super) t: &'p Target,
    /// When the pull must end.
    pub(super) deadline: Option<Instant>,
    /// The credentials to try.
    pub(super) creds: Credentials,
}

/// The attempts of one tag's pull, as `retry` paces them; `slot` is given
/// back while the tag's registry rate-limits this node.
pub(super) async fn attempt_pulls<R: ContainerRuntime>(
    p: &Pull<'_, R>,
    keeper: &mut Option<R::Keeper>,
    slot: &mut SlotHold,
) -> Outcome {
    let (rep, t, deadline, creds) = (p.rep, p.t, p.deadline, &p.creds);
    let attempts = retry::attempts(t.backoff_limit);
    let mut attempt = 1;
    let mut last = Failure {
        reason: "error",
        error: String::new(),
    };
    // After a rate-limited answer the registry's wait replaces the
    // attempt's own.
    let mut rate_limited = false;
    while attempt <= attempts {
        if !std::mem::take(&mut rate_limited) {
            match retry::before(attempt, Instant::now(), deadline) {
                Next::Wait(wait) => tokio::time::sleep(wait).await,
                Next::PastDeadline => return past_deadline(t, "retrying", &last, creds),
            }
        }
        if let Err(outcome) = ratelimited::wait_for_registry(rep, t, deadline, slot).await {
            return outcome;
        }
        match attempt_once(p, keeper).await {
            Attempt::Done(outcome) => return outcome,
            Attempt::Unavailable => continue,
            Attempt::RateLimited(message) => {
                ratelimited::record(rep, t, &message);
                rate_limited = true;
                continue;
            }
            Attempt::Failed(f) => last = f,
        }
        tracing::info!(tag = %rep.key, attempt, attempts, error = %last.error, "pull attempt failed");
        announce_retry(rep, attempt, attempts, &last.error, deadline);
        attempt += 1;
    }
    if retry::deadline_passed(Instant::now(), deadline) {
        return past_deadline(t, "pulling", &last, creds);
    }
    Outcome::failed(
        last.reason,
        format!(
            "pull failed after {attempts} attempts: {}{}",
            last.error, creds.unusable
        ),
    )
}

/// The failure of a tag whose deadline ended its attempts.
fn past_deadline(t: &Target, during: &str, last: &Failure, creds: &Credentials) -> Outcome {
    Outcome::failed(
        "deadline",
        format!(
            "{}; last error: {}{}",
            deadline_message(t, during),
            last.error,
            creds.unusable
        ),
    )
}

/// Shows that attempt `attempt` failed and when the next one starts, if
/// one does.
fn announce_retry<R>(
    rep: &Reporter<'_, R>,
    attempt: u32,
    attempts: u32,
    error: &str,
    deadline: Option<Instant>,
) {
    if attempt < attempts
        && let Next::Wait(wait) = retry::before(attempt + 1, Instant::now(), deadline)
    {
        rep.send(
            ImagePullPhase::Pulling,
            0,
            Some(format!(
                "attempt {attempt} of {attempts} failed: {error}; retrying in {}s",
                wait.as_secs()
            )),
        );
    }
}

/// One attempt within its time limit.
async fn attempt_once<R: ContainerRuntime>(
    p: &Pull<'_, R>,
    keeper: &mut Option<R::Keeper>,
) -> Attempt {
    let (rep, t, deadline) = (p.rep, p.t, p.deadline);
    let deps = rep.deps;
    let limit = retry::attempt_limit(t.timeout, Instant::now(), deadline);
    let pulled = tokio::time::timeout(limit, each_credential(p, keeper)).await;
    let e = match pulled {
        Ok(Ok(image_ref)) => return Attempt::Done(succeeded(deps, t, &image_ref).await),
        Ok(Err(e)) => e,
        Err(_) => {
            return Attempt::Failed(Failure {
                reason: "timeout",
                error: format!("attempt timed out after {}s", limit.as_secs()),
            });
        }
    };
    deps.metrics.cri_error("PullImage");
    match &e {
        RuntimeError::Unavailable(m) => {
            return match wait_for_runtime(rep, m, deadline).await {
                true => Attempt::Unavailable,
                false => Attempt::Done(unavailable_past_deadline(t)),
            };
        }
        RuntimeError::RateLimited(m) => return Attempt::RateLimited(m.clone()),
        _ => {}
    }
    tracing::debug!(tag = %rep.key, reason = e.reason(), "runtime refused the pull");
    Attempt::Failed(Failure {
        reason: e.reason(),
        error: e.to_string(),
    })
}

/// A pulled image's outcome, with the repository digest the runtime
/// reports for it (or the image reference, when it does not say in time).
async fn succeeded<R: ContainerRuntime>(deps: &Deps<R>, t: &Target, image_ref: &str) -> Outcome {
    // The registry serves this node again: its next 429 waits the least.
    deps.rate_limits.succeeded(&t.image.registry);
    let name = t.image.name();
    let status = tokio::time::timeout(QUERY_TIMEOUT, deps.runtime.image_status(image_ref)).await;
    let id = match status {
        Ok(Ok(Some(img))) => {
            deps.metrics.pulled_bytes.inc_by(img.size);
            img.repo_digest_for(&name)
        }
        _ => format!("{name}@{image_ref}"),
    };
    Outcome::Succeeded { id, pulled: true }
}

/// Each candidate credential in turn (an auth failure moves on to the
/// next), sampling progress while the runtime pulls.
async fn each_credential<R: ContainerRuntime>(
    p: &Pull<'_, R>,
    keeper: &mut Option<R::Keeper>,
) -> Result<String, RuntimeError> {
    let (rep, t) = (p.rep, p.t);
    let mut last = RuntimeError::Other("no credentials tried".into());
    for cred in &p.creds.candidates {
        let auth = cred.as_ref().map(|c| PullAuth {
            username: c.username.clone(),
            password: c.password.clone(),
        });
        let req = PullRequest {
            image: t.image.pull_ref(),
            auth,
            labels: t.sandbox.labels.clone().unwrap_or_default(),
            annotations: t.sandbox.annotations.clone().unwrap_or_default(),
        };
        match with_progress(rep, t, req, keeper).await {
            Ok(r) => return Ok(r),
            Err(e @ RuntimeError::Unauthorized(_)) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// One pull, reporting byte progress while it runs.
async fn with_progress<R: ContainerRuntime>(
    rep: &Reporter<'_, R>,
    t: &Target,
    req: PullRequest,
    keeper: &mut Option<R::Keeper>,
) -> Result<String, RuntimeError> {
    let deps = rep.deps;
    let call = deps.runtime.pull(req);
    tokio::pin!(call);
    let started = SystemTime::now();
    let probe = deps
        .runtime
        .probe(&t.image.registry, &t.image.repository, started);
    let mut tracked = probe.zip(keeper.as_mut());
    // The first sample after one interval: a pull that ends sooner is not
    // slowed by reading containerd's content store at its start.
    let mut tick = tokio::time::interval_at(Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    let mut shown = 0;
    loop {
        tokio::select! {
            r = &mut call => return r,
            _ = tick.tick(), if tracked.is_some() => {
                let Some((probe, keeper)) = tracked.as_mut() else { continue };
                if let Some(p) = sample(deps, probe, keeper).await && p != shown {
                    shown = p;
                    rep.send(ImagePullPhase::Pulling, p, None);
                }
            }
        }
    }
}

/// One progress sample; the blobs it saw are held before the progress is
/// shown, so bytes reported are bytes a restart keeps.
async fn sample<R: ContainerRuntime>(
    deps: &Deps<R>,
    probe: &mut R::Probe,
    keeper: &mut R::Keeper,
) -> Option<i32> {
    let alone = deps.metrics.in_flight.get() <= 1;
    let sample = tokio::time::timeout(QUERY_TIMEOUT, probe.sample(alone)).await;
    let _ = tokio::time::timeout(QUERY_TIMEOUT, keeper.hold(probe.ingests())).await;
    sample.ok().flatten()
}
