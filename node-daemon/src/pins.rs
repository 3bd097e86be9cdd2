//! Keeps kubelet's image garbage collector away from the images this node's
//! NodeImage wants, within a budget. kubelet collects never-used images
//! first, and a pre-pulled image is exactly that; it never collects a pinned
//! one. While a valid tag entry in the spec names an image on the node, the
//! daemon pins it through the runtime seam (over containerd: the labels
//! `io.cri-containerd.pinned=pinned` and `nodeimage.dev/pinned-by=<node>`
//! on the image's record in namespace k8s.io, `containerd::pins`),
//! as long as it fits in the pin budget (`--pin-budget-percent` of the
//! image filesystem; which images fit is `budget::decide`); once no entry
//! names it (TTL passed, job deleted, entry removed, NodeImage deleted), or
//! images ranked before it take its room, both labels go and kubelet may
//! collect it. An image left out says so in its tags' status messages
//! (`StatusHandle::pin_notes`), in one Warning event per image and in the
//! `pins_over_budget` metric. Only images carrying the daemon's own label
//! are ever unpinned: a pin set by someone else (containerd's sandbox
//! image, an operator) is left alone. The first pass runs once the first
//! NodeImage is read, so pins a previous run left for images nothing wants
//! any more go then; with pinning turned off, every pass unpins what the
//! daemon pinned.
//!
//! State: the wanted set (owned by the sync loop, replaced whole on every
//! NodeImage event), the pinned set (containerd's labels; never copied) and
//! the images already announced as left out (this task's own).

mod budget;
mod wanted;

pub use wanted::{Wanted, wanted};

use crate::desired::TagKey;
use crate::metrics::Metrics;
use crate::runtime::ContainerRuntime;
use crate::writer::StatusHandle;
use budget::{Candidate, Decision};
use nodeimage_api::kruise::nodeimage::pins::NotPinned;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

/// How often pins are checked against the wanted set without a change (a
/// pull that ended, an image re-tagged by hand).
const RESYNC: Duration = Duration::from_secs(60);
/// Longest one runtime call may take.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The event reason of an image the budget leaves unpinned.
pub const REASON_NOT_PINNED: &str = "ImageNotPinned";

/// What a pass changes: images to pin and images to unpin.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// To keep pinned, not pinned by this daemon yet.
    pub pin: Vec<String>,
    /// Pinned by this daemon, not to keep any more.
    pub unpin: Vec<String>,
}

/// The pass's moves: pin what is to be kept and not ours yet, unpin what is
/// ours and not to be kept (nothing is kept when pinning is off).
pub fn changes(keep: &BTreeSet<String>, ours: &BTreeSet<String>) -> Changes {
    Changes {
        pin: keep.difference(ours).cloned().collect(),
        unpin: ours.difference(keep).cloned().collect(),
    }
}

/// The status message of each tag whose image was left out.
pub fn notes(wanted: &Wanted, left_out: &BTreeMap<String, NotPinned>) -> BTreeMap<TagKey, String> {
    left_out
        .iter()
        .filter_map(|(r, why)| wanted.get(r).map(|w| (w, why.message())))
        .flat_map(|(w, m)| w.tags.iter().map(move |t| (t.clone(), m.clone())))
        .collect()
}

/// The images left out now that were not the last time (each is announced
/// once while it stays out); `announced` becomes the ones left out now.
pub fn newly_left_out(
    announced: &mut BTreeSet<String>,
    left_out: &BTreeMap<String, NotPinned>,
) -> Vec<(String, NotPinned)> {
    let new = left_out
        .iter()
        .filter(|(r, _)| !announced.contains(*r))
        .map(|(r, w)| (r.clone(), *w))
        .collect();
    *announced = left_out.keys().cloned().collect();
    new
}

/// How the sync loop and the workers talk to the pinning task.
#[derive(Clone)]
pub struct Pins {
    wanted: watch::Sender<Option<Wanted>>,
    poke: Arc<Notify>,
}

impl Default for Pins {
    fn default() -> Self {
        Self {
            wanted: watch::channel(None).0,
            poke: Arc::default(),
        }
    }
}

impl Pins {
    /// The images the spec wants now (replaces the previous set).
    pub fn want(&self, wanted: Wanted) {
        self.wanted.send_if_modified(|w| {
            let changed = w.as_ref() != Some(&wanted);
            *w = Some(wanted);
            changed
        });
    }

    /// An image arrived (a pull ended): pin it without waiting for the resync.
    pub fn poke(&self) {
        self.poke.notify_one();
    }
}

/// Settings of the pinning task.
pub struct Settings {
    /// This node: whose pins the runtime records as the daemon's.
    pub node: String,
    /// Pin wanted images (off: unpin what this daemon pinned).
    pub enabled: bool,
    /// The pin budget, in percent of the image filesystem (above 0, at most 100).
    pub budget_percent: f64,
}

/// Where the pinning task's findings go.
pub struct Sinks {
    /// Pinned images and bytes, the image filesystem, images left out.
    pub metrics: Metrics,
    /// The tags' status messages.
    pub status: StatusHandle,
    /// Records a Warning event with this note (once per image left out).
    pub announce: Box<dyn Fn(String) + Send + Sync>,
}

/// Keeps the pins in step with the wanted set until `stop` turns true.
pub async fn run<R: ContainerRuntime>(
    pins: Pins,
    runtime: R,
    settings: Settings,
    sinks: Sinks,
    mut stop: watch::Receiver<bool>,
) {
    let mut wanted = pins.wanted.subscribe();
    // Nothing is decided before the first NodeImage says what is wanted.
    tokio::select! {
        r = wanted.wait_for(Option::is_some) => if r.is_err() { return },
        _ = stop.changed() => return,
    }
    let mut ignored_logged = false;
    let mut announced = BTreeSet::new();
    loop {
        let now = wanted.borrow_and_update().clone().unwrap_or_default();
        let capacity = crate::checks::image_fs_capacity(&runtime).await;
        match pass(&runtime, &settings, &now, capacity, &sinks.metrics).await {
            Ok(report) => {
                if report.ignored > 0 && !ignored_logged {
                    ignored_logged = true;
                    tracing::warn!(
                        images = report.ignored,
                        "the runtime does not report pinned images as pinned; kubelet's image GC may still collect them"
                    );
                }
                sinks.status.pin_notes(notes(&now, &report.left_out));
                for (image, why) in newly_left_out(&mut announced, &report.left_out) {
                    let message = why.message();
                    tracing::warn!(%image, reason = %message, "image not pinned");
                    (sinks.announce)(format!("Image {image}: {message}"));
                }
            }
            Err(e) => tracing::warn!(error = %e, "pinning pass failed; trying again later"),
        }
        tokio::select! {
            r = wanted.changed() => if r.is_err() { return },
            _ = pins.poke.notified() => {},
            _ = tokio::time::sleep(RESYNC) => {},
            _ = stop.changed() => return,
        }
    }
}

/// Why a pass changed nothing.
#[derive(Debug, thiserror::Error)]
enum PassError {
    /// The runtime did not list this node's pins.
    #[error("listing this node's pins: {0}")]
    List(#[from] crate::runtime::RuntimeError),
    /// The runtime did not say whether a wanted image is on the node.
    #[error("reading the status of {image}: {reason}")]
    Image {
        /// The image reference.
        image: String,
        /// What went wrong.
        reason: String,
    },
}

/// What a pass saw.
#[derive(Debug, Default)]
struct Report {
    /// Images labelled pinned that the runtime does not report pinned.
    ignored: usize,
    /// Wanted images on the node that the budget leaves unpinned, and why.
    left_out: BTreeMap<String, NotPinned>,
}

/// One pass: list this daemon's pins, decide what to keep within the
/// budget (`capacity`: the image filesystem's size, if known), pin and
/// unpin, then count.
async fn pass<R: ContainerRuntime>(
    runtime: &R,
    settings: &Settings,
    wanted: &Wanted,
    capacity: Option<u64>,
    metrics: &Metrics,
) -> Result<Report, PassError> {
    let Some(ours) = runtime.pinned_by(&settings.node).await? else {
        return Ok(Report::default());
    };
    let decision = if settings.enabled {
        let candidates = survey(runtime, wanted).await?;
        let budget = budget::budget_bytes(capacity, settings.budget_percent);
        budget::decide(&candidates, budget, settings.budget_percent)
    } else {
        Decision::default()
    };
    let todo = changes(&decision.pin, &ours);
    let pinned = apply(runtime, &settings.node, &todo, ours, &decision.left_out).await;
    let mut report = count(runtime, &pinned, capacity, metrics).await;
    metrics
        .pins_over_budget
        .set(i64::try_from(decision.left_out.len()).unwrap_or(i64::MAX));
    report.left_out = decision.left_out;
    metrics.pin_passes.inc();
    Ok(report)
}

/// The wanted images on the node, with what the budget's rule reads; an
/// error when the runtime cannot say (nothing is moved on a guess).
async fn survey<R: ContainerRuntime>(
    runtime: &R,
    wanted: &Wanted,
) -> Result<Vec<Candidate>, PassError> {
    let mut out = Vec::new();
    for (reference, want) in wanted {
        let failed = |reason: String| PassError::Image {
            image: reference.clone(),
            reason,
        };
        let status = tokio::time::timeout(CALL_TIMEOUT, runtime.image_status(reference))
            .await
            .map_err(|_| failed("no answer in time".into()))?
            .map_err(|e| failed(e.to_string()))?;
        let Some(image) = status else { continue };
        out.push(Candidate {
            reference: reference.clone(),
            // CRI's size is a plain number: 0 is "not reported".
            size: Some(image.size).filter(|s| *s > 0),
            gating: want.gating,
            cluster_job: want.cluster_job,
            created_at: want.created_at,
        });
    }
    Ok(out)
}

/// Pins and unpins as `todo` says; what is pinned for this node after.
async fn apply<R: ContainerRuntime>(
    runtime: &R,
    node: &str,
    todo: &Changes,
    mut pinned: BTreeSet<String>,
    left_out: &BTreeMap<String, NotPinned>,
) -> BTreeSet<String> {
    for name in &todo.unpin {
        match runtime.set_pin(name, node, false).await {
            Ok(_) => {
                pinned.remove(name);
                match left_out.get(name) {
                    Some(why) => tracing::info!(image = %name, reason = %why.message(), "unpinned"),
                    None => {
                        tracing::info!(image = %name, "unpinned: no tag entry wants it, or pinning is off")
                    }
                }
            }
            Err(e) => tracing::warn!(image = %name, error = %e, "cannot unpin"),
        }
    }
    for name in &todo.pin {
        match runtime.set_pin(name, node, true).await {
            Ok(true) => {
                pinned.insert(name.clone());
                tracing::info!(image = %name, "pinned while a tag entry wants it");
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(image = %name, error = %e, "cannot pin"),
        }
    }
    pinned
}

/// Counts the pinned images and their bytes, and the image filesystem's size.
async fn count<R: ContainerRuntime>(
    runtime: &R,
    pinned: &BTreeSet<String>,
    capacity: Option<u64>,
    metrics: &Metrics,
) -> Report {
    let mut report = Report::default();
    let mut bytes = 0u64;
    for name in pinned {
        if let Ok(Ok(Some(img))) =
            tokio::time::timeout(CALL_TIMEOUT, runtime.image_status(name)).await
        {
            bytes = bytes.saturating_add(img.size);
            if !img.pinned {
                report.ignored += 1;
            }
        }
    }
    metrics.pinned_images.set(pinned.len() as i64);
    metrics
        .pinned_bytes
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    if let Some(cap) = capacity {
        metrics
            .image_fs_capacity_bytes
            .set(i64::try_from(cap).unwrap_or(i64::MAX));
    }
    report
}

#[cfg(test)]
mod tests;
