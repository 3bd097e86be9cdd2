//! The seam between the daemon and the node's container runtime: what the
//! daemon asks of it (pulls, image status, the image filesystem, byte
//! progress, the leases that keep partial blobs, and pins), so that the
//! pull path and the pinning pass run over containerd on a node and over an
//! in-memory runtime in unit tests (`fake`).

use crate::cri::{CriError, PresentImage};
use k8s_cri::v1::AuthConfig;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::SystemTime;

#[cfg(test)]
pub mod fake;

/// One pull as the daemon asks the runtime for it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PullRequest {
    /// The image reference to pull.
    pub image: String,
    /// The credential to pull with; None pulls anonymously.
    pub auth: Option<AuthConfig>,
    /// Labels of the pull's sandbox config (the entry's `sandboxConfig`).
    pub labels: BTreeMap<String, String>,
    /// Annotations of the pull's sandbox config.
    pub annotations: BTreeMap<String, String>,
}

/// What the daemon's pull path asks of the container runtime, so the path
/// can be tested without one.
pub trait ContainerRuntime: Send + Sync + 'static {
    /// Watches one pull's byte progress.
    type Probe: PullProbe;
    /// Keeps one image's partial blobs across attempts and restarts.
    type Keeper: BlobKeeper;

    /// The runtime's name and version (CRI `Version`); proves it answers.
    fn name_and_version(&self) -> impl Future<Output = Result<(String, String), CriError>> + Send;

    /// Whether containerd's own API answers beside CRI (false on CRI alone).
    fn containerd_answers(&self) -> impl Future<Output = bool> + Send;

    /// The image if present on the node (CRI `ImageStatus`).
    fn image_status(
        &self,
        image: &str,
    ) -> impl Future<Output = Result<Option<PresentImage>, CriError>> + Send;

    /// Pulls an image; returns the image reference the runtime reports.
    fn pull(&self, req: PullRequest) -> impl Future<Output = Result<String, CriError>> + Send;

    /// The image filesystems: mount point and used bytes of each.
    fn image_fs(&self) -> impl Future<Output = Result<Vec<(String, u64)>, CriError>> + Send;

    /// A progress probe for a pull of `registry/repository` begun at
    /// `started`; None where the runtime cannot tell byte progress.
    fn probe(&self, registry: &str, repository: &str, started: SystemTime) -> Option<Self::Probe>;

    /// A keeper of `node`'s partial blobs of `reference`; None where the
    /// runtime has no leases.
    fn keeper(&self, node: &str, reference: &str) -> Option<Self::Keeper>;

    /// Ends the lease of `node`'s partial blobs of `reference`, without
    /// waiting for the runtime (an outcome is never held up by it).
    fn end_lease(&self, node: &str, reference: String);

    /// The images `node`'s daemon pinned; None where the runtime cannot
    /// pin (CRI alone).
    fn pinned_by(
        &self,
        node: &str,
    ) -> impl Future<Output = Result<Option<BTreeSet<String>>, tonic::Status>> + Send;

    /// Pins `name` for `node`, or unpins it; false when there was nothing
    /// to do (the image is not on the node, or someone else pinned it).
    fn set_pin(
        &self,
        name: &str,
        node: &str,
        pin: bool,
    ) -> impl Future<Output = Result<bool, tonic::Status>> + Send;
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
