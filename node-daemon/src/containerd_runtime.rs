//! The runtime seam over a node's containerd: CRI for pulls and image
//! status, containerd's own API (when it answers) for byte progress, the
//! leases that keep partial blobs, and pins. Its own module so that the
//! seam (`runtime`) names no implementation.

use crate::cri::{self, CriError, PresentImage};
use crate::runtime::{ContainerRuntime, PullRequest};
use crate::{pins, progress, resume};
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::version_client::VersionClient;
use std::collections::BTreeSet;
use std::future::Future;
use std::time::{Duration, SystemTime};

/// How long the start-up probe of containerd's own API may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

impl ContainerRuntime for cri::Runtime {
    type Probe = progress::Probe;
    type Keeper = resume::Keeper;

    fn name_and_version(&self) -> impl Future<Output = Result<(String, String), CriError>> + Send {
        cri::Runtime::name_and_version(self)
    }

    async fn containerd_answers(&self) -> bool {
        let Some(channel) = self.containerd() else {
            return false;
        };
        let mut client = VersionClient::new(channel);
        let probe = client.version(());
        matches!(tokio::time::timeout(PROBE_TIMEOUT, probe).await, Ok(Ok(_)))
    }

    fn image_status(
        &self,
        image: &str,
    ) -> impl Future<Output = Result<Option<PresentImage>, CriError>> + Send {
        cri::Runtime::image_status(self, image)
    }

    async fn pull(&self, req: PullRequest) -> Result<String, CriError> {
        cri::Runtime::pull(self, &req.image, req.auth, req.labels, req.annotations).await
    }

    fn image_fs(&self) -> impl Future<Output = Result<Vec<(String, u64)>, CriError>> + Send {
        cri::Runtime::image_fs(self)
    }

    fn probe(&self, registry: &str, repository: &str, started: SystemTime) -> Option<Self::Probe> {
        self.containerd()
            .map(|channel| progress::Probe::new(channel, registry, repository, started))
    }

    fn keeper(&self, node: &str, reference: &str) -> Option<Self::Keeper> {
        self.containerd()
            .map(|channel| resume::Keeper::new(channel, node, reference))
    }

    fn end_lease(&self, node: &str, reference: String) {
        if let Some(channel) = self.containerd() {
            tokio::spawn(resume::end(channel, node.to_string(), reference));
        }
    }

    async fn pinned_by(&self, node: &str) -> Result<Option<BTreeSet<String>>, tonic::Status> {
        let Some(channel) = self.containerd() else {
            return Ok(None);
        };
        pins::list_ours(&mut ImagesClient::new(channel), node)
            .await
            .map(Some)
    }

    async fn set_pin(&self, name: &str, node: &str, pin: bool) -> Result<bool, tonic::Status> {
        let Some(channel) = self.containerd() else {
            return Ok(false);
        };
        pins::set_pin(&mut ImagesClient::new(channel), name, node, pin).await
    }
}
