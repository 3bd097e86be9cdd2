//! The seam between the daemon and the node's container runtime: what the
//! daemon asks of it (pulls, image status, the image filesystem, byte
//! progress, the leases that keep partial blobs, pins, and a file read out
//! of a pulled image), in the daemon's own types, so that the sync loop,
//! the workers, the pull path, the upgrade flow, the pinning pass and the
//! start-up gate run over containerd on a node (`crate::containerd`) and
//! over an in-memory runtime in unit tests and the conformance test
//! (`fake`, whose answers `tests/tests/runtime_conformance.rs` checks
//! against every containerd of the test stack). Nothing here names CRI or
//! containerd's API.

use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::path::Path;
use std::time::SystemTime;

#[cfg(any(test, feature = "fake"))]
pub mod fake;

/// A failed runtime call, classified by what the caller should do about it
/// (the words of `Unavailable` name containerd, as statuses always said).
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuntimeError {
    /// The runtime cannot be reached: wait and retry, do not count an attempt.
    #[error("containerd is unavailable: {0}")]
    Unavailable(String),
    /// The registry refused our credentials (or lack of them). Said first
    /// in the same words on every runtime (containerd 1.6 writes `401
    /// Unauthorized`, 1.7 and 2.x `authorization failed: no basic auth
    /// credentials`), the runtime's own words after.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The image or tag does not exist (same rule as `Unauthorized`).
    #[error("not found: {0}")]
    NotFound(String),
    /// The registry rate-limited the pull (HTTP 429, `toomanyrequests`):
    /// wait for it, do not count an attempt (`ratelimit`).
    #[error("rate limited: {0}")]
    RateLimited(String),
    /// Any other failure, with the runtime's message.
    #[error("{0}")]
    Other(String),
}

impl RuntimeError {
    /// Short label for metrics and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            RuntimeError::Unavailable(_) => "unavailable",
            RuntimeError::Unauthorized(_) => "unauthorized",
            RuntimeError::NotFound(_) => "not_found",
            RuntimeError::RateLimited(_) => "rate_limited",
            RuntimeError::Other(_) => "error",
        }
    }
}

/// An image present on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// The runtime's image ID (config digest).
    pub id: String,
    /// `name@sha256:…` entries naming the manifest it came from.
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// Whether the runtime reports it pinned (kubelet's GC skips it).
    pub pinned: bool,
}

impl Image {
    /// The repository digest for `name` (`host/repo`), else the first one,
    /// else `name@<image id>`.
    pub fn repo_digest_for(&self, name: &str) -> String {
        let prefix = format!("{name}@");
        self.repo_digests
            .iter()
            .find(|d| d.starts_with(&prefix))
            .or_else(|| self.repo_digests.first())
            .cloned()
            .unwrap_or_else(|| format!("{name}@{}", self.id))
    }
}

/// One image on the node with all its names, as the runtime lists it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListedImage {
    /// The runtime's image ID (config digest).
    pub id: String,
    /// `name:tag` names.
    pub repo_tags: Vec<String>,
    /// `name@digest` names.
    pub repo_digests: Vec<String>,
    /// Size in bytes, as the runtime reports it (0: not reported).
    pub size: u64,
    /// Whether the runtime reports it pinned (by anyone).
    pub pinned: bool,
}

/// One container of any state, as the runtime lists it: what a removal
/// must not take the image of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Container {
    /// Its name (`<pod>/<container>` where kubelet's labels say), for messages.
    pub name: String,
    /// Its state, for messages (`running`, `exited`, `created`, `unknown`).
    pub state: String,
    /// The image ID it was created from (CRI `imageRef`).
    pub image_id: String,
    /// The image as its spec named it, read when the ID is empty.
    pub image: String,
}

/// A credential for one pull, as the registry is to be given it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct PullAuth {
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl std::fmt::Debug for PullAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("PullAuth")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// One pull as the daemon asks the runtime for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PullRequest {
    /// The image reference to pull.
    pub image: String,
    /// The credential to pull with; None pulls anonymously.
    pub auth: Option<PullAuth>,
    /// Labels of the pull's sandbox config (the entry's `sandboxConfig`).
    pub labels: BTreeMap<String, String>,
    /// Annotations of the pull's sandbox config.
    pub annotations: BTreeMap<String, String>,
}

/// What the daemon asks of the container runtime, so everything above it
/// can be tested without one.
pub trait ContainerRuntime: Send + Sync + 'static {
    /// Watches one pull's byte progress.
    type Probe: PullProbe;
    /// Keeps one image's partial blobs across attempts and restarts.
    type Keeper: BlobKeeper;

    /// The runtime's name and version; proves it answers.
    fn name_and_version(
        &self,
    ) -> impl Future<Output = Result<(String, String), RuntimeError>> + Send;

    /// Whether the runtime's own API answers beside the image service
    /// (false on CRI alone): byte progress, leases and pins need it.
    fn containerd_answers(&self) -> impl Future<Output = bool> + Send;

    /// The image if present on the node.
    fn image_status(
        &self,
        image: &str,
    ) -> impl Future<Output = Result<Option<Image>, RuntimeError>> + Send;

    /// Pulls an image; returns the image reference the runtime reports.
    fn pull(&self, req: PullRequest) -> impl Future<Output = Result<String, RuntimeError>> + Send;

    /// The image filesystems: mount point and used bytes of each.
    fn image_fs(&self) -> impl Future<Output = Result<Vec<(String, u64)>, RuntimeError>> + Send;

    /// A progress probe for a pull of `registry/repository` begun at
    /// `started`; None where the runtime cannot tell byte progress.
    fn probe(&self, registry: &str, repository: &str, started: SystemTime) -> Option<Self::Probe>;

    /// A keeper of `node`'s partial blobs of `reference`; None where the
    /// runtime has no leases.
    fn keeper(&self, node: &str, reference: &str) -> Option<Self::Keeper>;

    /// Ends the lease of `node`'s partial blobs of `reference`; a lease
    /// already gone (or none, on a runtime without leases) is no error. The
    /// future owns what it needs, so callers spawn it rather than hold an
    /// outcome up for the runtime.
    fn end_lease(
        &self,
        node: &str,
        reference: String,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send + 'static;

    /// Ends `node`'s leases made before `run_started` for images not in
    /// `pulling` (a previous run's, for pulls that will not come back);
    /// best effort, nothing on a runtime without leases.
    fn sweep_leases(
        &self,
        node: &str,
        pulling: Vec<String>,
        run_started: SystemTime,
    ) -> impl Future<Output = ()> + Send + 'static;

    /// The images `node`'s daemon pinned; None where the runtime cannot
    /// pin (CRI alone).
    fn pinned_by(
        &self,
        node: &str,
    ) -> impl Future<Output = Result<Option<BTreeSet<String>>, RuntimeError>> + Send;

    /// Pins `name` for `node`, or unpins it; false when there was nothing
    /// to do (the image is not on the node, or someone else pinned it).
    fn set_pin(
        &self,
        name: &str,
        node: &str,
        pin: bool,
    ) -> impl Future<Output = Result<bool, RuntimeError>> + Send;

    /// Every image on the node with all its names (removal decides over them).
    fn list_images(&self) -> impl Future<Output = Result<Vec<ListedImage>, RuntimeError>> + Send;

    /// Every container on the node, in every state (running, exited, …).
    fn list_containers(&self) -> impl Future<Output = Result<Vec<Container>, RuntimeError>> + Send;

    /// The runtime's sandbox (pause) image as its status reports it; None
    /// when it does not say (containerd 2.x, CRI-O).
    fn sandbox_image(&self) -> impl Future<Output = Result<Option<String>, RuntimeError>> + Send;

    /// Removes the image with this ID, with every name it carries.
    fn remove_image(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send;

    /// Copies the file at `path` (canonical, relative to the image's root)
    /// out of the pulled `image` into `dest`, without running a container
    /// (the upgrade tool); the reason when it cannot.
    fn copy_from_image(
        &self,
        node: &str,
        image: &ImageRef,
        path: &str,
        dest: &Path,
    ) -> impl Future<Output = Result<(), String>> + Send;
}

/// Byte progress of one pull, as far as the runtime lets it be read.
pub trait PullProbe: Send {
    /// The current percentage, if it can be told; `alone` says whether
    /// this is the only pull on the node.
    fn sample(&mut self, alone: bool) -> impl Future<Output = Option<i32>> + Send;

    /// The runtime's names of the pull's blobs being written, as the last
    /// sample saw them.
    fn ingests(&self) -> &[String];
}

/// Holds a pull's partial blobs so a pull started again resumes them.
pub trait BlobKeeper: Send {
    /// Holds the named blobs being written (best effort).
    fn hold(&mut self, ingests: &[String]) -> impl Future<Output = ()> + Send;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_repo_digest_of_the_pulled_name() {
        let img = Image {
            id: "sha256:cfg".into(),
            repo_digests: vec!["a/x@sha256:1".into(), "b/y@sha256:2".into()],
            size: 1,
            pinned: false,
        };
        assert_eq!(img.repo_digest_for("b/y"), "b/y@sha256:2");
        assert_eq!(img.repo_digest_for("c/z"), "a/x@sha256:1");
        let bare = Image {
            repo_digests: vec![],
            ..img
        };
        assert_eq!(bare.repo_digest_for("c/z"), "c/z@sha256:cfg");
    }
}
