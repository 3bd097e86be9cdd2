//! The runtime seam over a node's containerd: CRI for pulls and image
//! status (`cri`), containerd's own API (when it answers) for byte progress
//! (`progress`), the leases that keep partial blobs (`leases`), pins
//! (`pins`), the sandbox image its verbose status names (`sandbox`), and
//! reading a file out of a pulled image (`tool`: from its layer blobs in
//! the content store, `content`, or from its unpacked snapshot, `snapshot`
//! and `overlay`). Everything that speaks CRI or containerd's API is in
//! this folder; the rest of the daemon sees the seam (`crate::runtime`)
//! only.

pub mod content;
pub mod cri;
pub mod leases;
pub mod overlay;
mod pins;
pub mod progress;
mod sandbox;
pub mod snapshot;
mod tool;

pub use cri::{Runtime, RuntimeApi};

use crate::runtime::{Container, ContainerRuntime, Image, ListedImage, PullRequest, RuntimeError};
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::version_client::VersionClient;
use k8s_cri::v1::AuthConfig;
use nodeimage_api::reference::ImageRef;
use std::collections::BTreeSet;
use std::future::Future;
use std::path::Path;
use std::time::{Duration, SystemTime};

/// How long the start-up probe of containerd's own API may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the daemon says when a containerd-only call meets CRI alone.
const CRI_ALONE: &str = "this daemon runs on CRI alone (--runtime-api)";

impl ContainerRuntime for Runtime {
    type Probe = progress::Probe;
    type Keeper = leases::Keeper;

    fn name_and_version(
        &self,
    ) -> impl Future<Output = Result<(String, String), RuntimeError>> + Send {
        Runtime::name_and_version(self)
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
    ) -> impl Future<Output = Result<Option<Image>, RuntimeError>> + Send {
        Runtime::image_status(self, image)
    }

    async fn pull(&self, req: PullRequest) -> Result<String, RuntimeError> {
        // No server_address, as kubelet sends it: the credential already
        // matches this image's registry, and containerd 1.6 parses a set
        // server_address as a URL ("127.0.0.1:5001" fails to parse, and a
        // bare "host" yields no host), refusing or dropping the credential.
        let auth = req.auth.map(|a| AuthConfig {
            username: a.username,
            password: a.password,
            ..Default::default()
        });
        Runtime::pull(self, &req.image, auth, req.labels, req.annotations).await
    }

    fn image_fs(&self) -> impl Future<Output = Result<Vec<(String, u64)>, RuntimeError>> + Send {
        Runtime::image_fs(self)
    }

    fn probe(&self, registry: &str, repository: &str, started: SystemTime) -> Option<Self::Probe> {
        self.containerd()
            .map(|channel| progress::Probe::new(channel, registry, repository, started))
    }

    fn keeper(&self, node: &str, reference: &str) -> Option<Self::Keeper> {
        self.containerd()
            .map(|channel| leases::Keeper::new(channel, node, reference))
    }

    fn end_lease(
        &self,
        node: &str,
        reference: String,
    ) -> impl Future<Output = Result<(), RuntimeError>> + Send + 'static {
        let (channel, node) = (self.containerd(), node.to_string());
        async move {
            match channel {
                None => Ok(()),
                Some(c) => leases::end(c, node, reference)
                    .await
                    .map_err(|s| cri::classify(&s)),
            }
        }
    }

    fn sweep_leases(
        &self,
        node: &str,
        pulling: Vec<String>,
        run_started: SystemTime,
    ) -> impl Future<Output = ()> + Send + 'static {
        let (channel, node) = (self.containerd(), node.to_string());
        async move {
            // On CRI alone the daemon made no lease to sweep.
            if let Some(c) = channel {
                leases::sweep(c, node, pulling, run_started).await;
            }
        }
    }

    async fn pinned_by(&self, node: &str) -> Result<Option<BTreeSet<String>>, RuntimeError> {
        let Some(channel) = self.containerd() else {
            return Ok(None);
        };
        pins::list_ours(&mut ImagesClient::new(channel), node)
            .await
            .map(Some)
            .map_err(|s| cri::classify(&s))
    }

    async fn set_pin(&self, name: &str, node: &str, pin: bool) -> Result<bool, RuntimeError> {
        let Some(channel) = self.containerd() else {
            return Ok(false);
        };
        pins::set_pin(&mut ImagesClient::new(channel), name, node, pin)
            .await
            .map_err(|s| cri::classify(&s))
    }

    fn list_images(&self) -> impl Future<Output = Result<Vec<ListedImage>, RuntimeError>> + Send {
        Runtime::list_images(self)
    }

    fn list_containers(&self) -> impl Future<Output = Result<Vec<Container>, RuntimeError>> + Send {
        Runtime::list_containers(self)
    }

    fn sandbox_image(&self) -> impl Future<Output = Result<Option<String>, RuntimeError>> + Send {
        Runtime::sandbox_image(self)
    }

    fn remove_image(&self, id: &str) -> impl Future<Output = Result<(), RuntimeError>> + Send {
        Runtime::remove_image(self, id)
    }

    async fn copy_from_image(
        &self,
        node: &str,
        image: &ImageRef,
        path: &str,
        dest: &Path,
    ) -> Result<(), String> {
        let channel = self.containerd().ok_or_else(|| {
            format!("taking the upgrade tool out of the image needs containerd's content API; {CRI_ALONE}")
        })?;
        tool::copy_out(self, channel, node, image, path, dest).await
    }
}
