//! One look at the start-up gate of this node: are all gating images
//! present (CRI ImageStatus through the runtime seam), and if so, remove
//! exactly the start-up taint from this node's Node, by a JSON Patch that
//! `test`s the taints as read; a write refused because the taints moved on
//! is read again and redone, not an error.

use crate::runtime::ContainerRuntime;
use k8s_openapi::api::core::v1::Taint;
use nodeimage_api::gate::{GateNote, untaint_patch};
use std::future::Future;
use std::time::Duration;

/// Longest one ImageStatus call of the gate may take.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a taint write refused as stale is redone within one look.
const WRITE_ATTEMPTS: usize = 5;

/// Why the Node could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    /// The object moved on since it was read (a failed `test`, a conflict).
    #[error("the Node changed since it was read")]
    Stale,
    /// Anything else.
    #[error("{0}")]
    Other(String),
}

/// What the gate reads and writes of this node's Node, so that a look runs
/// over an in-memory Node in unit tests.
pub trait NodeApi: Send + Sync {
    /// The Node's taints now; None when the Node does not exist.
    fn taints(&self) -> impl Future<Output = Result<Option<Vec<Taint>>, NodeError>> + Send;
    /// Applies a JSON Patch to the Node.
    fn patch(&self, body: serde_json::Value) -> impl Future<Output = Result<(), NodeError>> + Send;
}

/// What one look found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// These images are not on the node yet.
    Waiting(Vec<String>),
    /// Every image is there and this look removed the taint.
    Opened,
    /// Every image is there and the Node no longer carries the taint (or is gone).
    AlreadyOpen,
}

/// Why a look could not finish.
#[derive(Debug, thiserror::Error)]
pub enum LookError {
    /// Reading or writing the Node failed.
    #[error("start-up taint {taint}: {source}")]
    Node {
        /// The taint key.
        taint: String,
        /// What failed.
        #[source]
        source: NodeError,
    },
}

/// The images of `images` that the runtime does not report present; an
/// image whose status cannot be read counts as missing (and is logged).
pub async fn missing_images<R: ContainerRuntime>(runtime: &R, images: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    for image in images {
        let present = match tokio::time::timeout(STATUS_TIMEOUT, runtime.image_status(image)).await
        {
            Ok(Ok(found)) => found.is_some(),
            Ok(Err(e)) => {
                tracing::debug!(%image, error = %e, "start-up gate: image status unreadable");
                false
            }
            Err(_) => false,
        };
        if !present {
            missing.push(image.clone());
        }
    }
    missing
}

/// One look: the images, then (all present) the taint.
pub async fn look<R: ContainerRuntime, N: NodeApi>(
    runtime: &R,
    node: &N,
    note: &GateNote,
) -> Result<Outcome, LookError> {
    let missing = missing_images(runtime, &note.images).await;
    if !missing.is_empty() {
        return Ok(Outcome::Waiting(missing));
    }
    Ok(match remove_taint(node, &note.taint).await? {
        true => Outcome::Opened,
        false => Outcome::AlreadyOpen,
    })
}

/// Removes every taint with key `taint` from the Node; false when it had
/// none (or is gone). A write refused because the taints moved on is read
/// again and redone.
pub async fn remove_taint<N: NodeApi>(node: &N, taint: &str) -> Result<bool, LookError> {
    let err = |source| LookError::Node {
        taint: taint.to_string(),
        source,
    };
    for _ in 0..WRITE_ATTEMPTS {
        let Some(taints) = node.taints().await.map_err(err)? else {
            return Ok(false);
        };
        let Some(body) = untaint_patch(&taints, taint) else {
            return Ok(false);
        };
        match node.patch(body).await {
            Ok(()) => return Ok(true),
            Err(NodeError::Stale) => {
                tracing::debug!(%taint, "start-up gate: the Node's taints moved on; reading them again");
            }
            Err(e) => return Err(err(e)),
        }
    }
    Err(err(NodeError::Stale))
}

#[cfg(test)]
mod tests;
