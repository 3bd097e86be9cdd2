//! One removal entry on this node, through the runtime seam: read the node
//! (every image, every container of every state, this daemon's pins),
//! decide (`decide`), then for each image to go take this daemon's pins off
//! and remove it by ID, once. The daemon's loop will call [`remove`] and
//! write the outcomes into its NodeImage status; it is not wired yet.

use super::decide::{self, Entry, Snapshot, Verdict, Wanting};
use crate::pins::CALL_TIMEOUT;
use crate::runtime::{ContainerRuntime, RuntimeError};
use nodeimage_api::nodeimage_dev::{RemovalResult, SkipReason};
use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

/// Longest one image removal may take (the runtime deletes its snapshots).
const REMOVE_TIMEOUT: Duration = Duration::from_secs(120);

/// What the node reports for one listed reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageOutcome {
    /// The reference as the job lists it.
    pub image: String,
    /// What became of it.
    pub result: RemovalResult,
    /// Which rule kept it, for `Skipped`.
    pub reason: Option<SkipReason>,
    /// Bytes freed (counted on the first reference naming the image only).
    pub bytes_freed: u64,
    /// Why, in words.
    pub message: String,
}

/// Why a removal entry could not be decided at all (nothing was removed;
/// the loop tries again later).
#[derive(Debug, thiserror::Error)]
pub enum RemovalError {
    /// The runtime did not list the images.
    #[error("listing the images on this node: {0}")]
    Images(RuntimeError),
    /// The runtime did not list the containers.
    #[error("listing the containers on this node: {0}")]
    Containers(RuntimeError),
    /// The runtime did not list this daemon's pins.
    #[error("listing this node's pins: {0}")]
    Pins(RuntimeError),
}

/// What the daemon knows of its node besides the runtime.
#[derive(Clone, Debug, Default)]
pub struct NodeFacts {
    /// This node's name (whose pins are this daemon's).
    pub name: String,
    /// The runtime's sandbox image, if known.
    pub sandbox: Option<String>,
    /// The live pull entries of this node's NodeImage.
    pub wanted: Vec<Wanting>,
}

/// The sandbox image a removal must never take: `flag` (the daemon's
/// `--sandbox-image`, added with the wiring) when set, else what the
/// runtime's status names; None when neither says (the rule then still
/// keeps every image the runtime itself pinned).
pub async fn sandbox<R: ContainerRuntime>(runtime: &R, flag: Option<&str>) -> Option<String> {
    if let Some(f) = flag.filter(|f| !f.is_empty()) {
        return Some(f.to_string());
    }
    match within(CALL_TIMEOUT, "runtime status", runtime.sandbox_image()).await {
        Ok(named) => named,
        Err(e) => {
            tracing::warn!(error = %e, "the runtime did not say which image is its sandbox image");
            None
        }
    }
}

/// How one image ID's removal ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ended {
    Removed(u64),
    Kept(Verdict),
    Failed(String),
}

/// A runtime call bounded by `limit`; a call that does not answer is an
/// `Unavailable` error.
async fn within<T>(
    limit: Duration,
    what: &str,
    call: impl Future<Output = Result<T, RuntimeError>>,
) -> Result<T, RuntimeError> {
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        Err(RuntimeError::Unavailable(format!(
            "{what}: no answer in time"
        )))
    })
}

/// Reads the node, decides, and removes; the outcome of each listed
/// reference, in the entry's order.
pub async fn remove<R: ContainerRuntime>(
    runtime: &R,
    node: &NodeFacts,
    entry: &Entry,
) -> Result<Vec<ImageOutcome>, RemovalError> {
    let snap = snapshot(runtime, node).await?;
    let plan = decide::decide(entry, &snap);
    let mut ended: BTreeMap<String, Ended> = BTreeMap::new();
    for removal in &plan.removals {
        let end = remove_one(runtime, &node.name, removal).await;
        ended.insert(removal.id.clone(), end);
    }
    let mut counted: BTreeMap<String, String> = BTreeMap::new();
    Ok(plan
        .verdicts
        .into_iter()
        .map(|(image, verdict)| outcome(image, &verdict, &ended, &mut counted))
        .collect())
}

/// The node as the rule reads it.
async fn snapshot<R: ContainerRuntime>(
    runtime: &R,
    node: &NodeFacts,
) -> Result<Snapshot, RemovalError> {
    let images = within(CALL_TIMEOUT, "listing images", runtime.list_images())
        .await
        .map_err(RemovalError::Images)?;
    let containers = within(
        CALL_TIMEOUT,
        "listing containers",
        runtime.list_containers(),
    )
    .await
    .map_err(RemovalError::Containers)?;
    let ours = within(CALL_TIMEOUT, "listing pins", runtime.pinned_by(&node.name))
        .await
        .map_err(RemovalError::Pins)?
        .unwrap_or_default();
    Ok(Snapshot {
        images,
        containers,
        sandbox: node.sandbox.clone(),
        wanted: node.wanted.clone(),
        ours,
    })
}

/// Takes this daemon's pins of the image off, makes sure nobody else's
/// pin and no new container holds it, and removes it.
async fn remove_one<R: ContainerRuntime>(
    runtime: &R,
    node: &str,
    removal: &decide::Removal,
) -> Ended {
    for name in &removal.unpin {
        let unpinned = within(
            CALL_TIMEOUT,
            "unpinning",
            runtime.set_pin(name, node, false),
        )
        .await;
        if let Err(e) = unpinned {
            return Ended::Failed(format!("taking nodeimage's pin off {name}: {e}"));
        }
    }
    if !removal.unpin.is_empty() {
        // CRI has one pinned flag per image: another's pin under another
        // name shows only once ours are off.
        match within(
            CALL_TIMEOUT,
            "image status",
            runtime.image_status(&removal.id),
        )
        .await
        {
            Ok(Some(i)) if i.pinned => {
                return Ended::Kept(Verdict::Skip {
                    reason: SkipReason::PinnedByOther,
                    detail: format!("image {}", removal.id),
                });
            }
            Ok(_) => {}
            Err(e) => return Ended::Failed(format!("reading image {}: {e}", removal.id)),
        }
    }
    // A container may have started since the snapshot: look once more.
    match within(
        CALL_TIMEOUT,
        "listing containers",
        runtime.list_containers(),
    )
    .await
    {
        Ok(all) => {
            let users: Vec<String> = all
                .iter()
                .filter(|c| c.image_id == removal.id)
                .map(|c| format!("{} ({})", c.name, c.state))
                .collect();
            if !users.is_empty() {
                return Ended::Kept(Verdict::InUse { containers: users });
            }
        }
        Err(e) => return Ended::Failed(format!("listing the containers on this node: {e}")),
    }
    match within(
        REMOVE_TIMEOUT,
        "removing",
        runtime.remove_image(&removal.id),
    )
    .await
    {
        Ok(()) => Ended::Removed(removal.bytes),
        Err(e) => Ended::Failed(format!(
            "the runtime did not remove image {}: {e}",
            removal.id
        )),
    }
}

/// The outcome of one listed reference; `counted` remembers which
/// reference an image's bytes were counted on.
fn outcome(
    image: String,
    verdict: &Verdict,
    ended: &BTreeMap<String, Ended>,
    counted: &mut BTreeMap<String, String>,
) -> ImageOutcome {
    let plain = |(result, reason, message): (RemovalResult, Option<SkipReason>, String)| {
        (result, reason, 0, message)
    };
    let (result, reason, bytes_freed, message) = match (verdict, verdict.outcome()) {
        (_, Some(o)) => plain(o),
        (Verdict::Remove { id }, None) => match ended.get(id) {
            Some(Ended::Removed(bytes)) => match counted.get(id) {
                Some(first) => (
                    RemovalResult::Removed,
                    None,
                    0,
                    format!("removed with {first} (one image)"),
                ),
                None => {
                    counted.insert(id.clone(), image.clone());
                    (
                        RemovalResult::Removed,
                        None,
                        *bytes,
                        format!("removed image {id}"),
                    )
                }
            },
            Some(Ended::Kept(v)) => plain(v.outcome().unwrap_or((
                RemovalResult::Failed,
                None,
                "kept".into(),
            ))),
            Some(Ended::Failed(m)) => (RemovalResult::Failed, None, 0, m.clone()),
            None => (
                RemovalResult::Failed,
                None,
                0,
                format!("image {id} was not removed"),
            ),
        },
        (_, None) => (RemovalResult::Failed, None, 0, "undecided".into()),
    };
    ImageOutcome {
        image,
        result,
        reason,
        bytes_freed,
        message,
    }
}

#[cfg(test)]
mod tests;
