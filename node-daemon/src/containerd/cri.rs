//! The node's container runtime over its unix socket: the CRI ImageService
//! (the path kubelet pulls through, so kubelet finds what we pull) and the
//! runtime version for readiness.

use crate::runtime::{Container, Image, ListedImage, RuntimeError};
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    AuthConfig, ContainerState, ImageFsInfoRequest, ImageSpec, ImageStatusRequest,
    ListContainersRequest, ListImagesRequest, PodSandboxConfig, PodSandboxMetadata,
    PullImageRequest, RemoveImageRequest, StatusRequest, VersionRequest,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// Annotation on every pull, so runtime logs and audits show who pulled.
pub const PULLED_BY_ANNOTATION: &str = "nodeimage.dev/pulled-by";

/// Which API of the runtime socket the daemon may use besides CRI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeApi {
    /// containerd's own API while it answers (found out at start).
    Auto,
    /// containerd's own API (content, leases, images) beside CRI.
    Containerd,
    /// CRI only (CRI-O, or any CRI runtime): no byte progress, resume or pins.
    Cri,
}

/// A lazily connected channel to the runtime socket; reconnects by itself.
#[derive(Clone)]
pub struct Runtime {
    channel: Channel,
    socket: PathBuf,
    /// Whether containerd's own API may be called (see [`Runtime::containerd`]).
    containerd: Arc<AtomicBool>,
}

impl Runtime {
    /// Prepares a channel to `socket`; nothing is dialled until first use.
    /// With [`RuntimeApi::Cri`] nothing but CRI is ever called on it.
    pub fn new(socket: &Path, api: RuntimeApi) -> Result<Self, RuntimeError> {
        let path = socket.to_path_buf();
        let endpoint = Endpoint::try_from("http://[::]:50051")
            .map_err(|e| RuntimeError::Other(format!("endpoint: {e}")))?
            .connect_timeout(Duration::from_secs(5));
        let channel = endpoint.connect_with_connector_lazy(tower::service_fn(move |_| {
            let p = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(p).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }));
        Ok(Runtime {
            channel,
            socket: socket.to_path_buf(),
            containerd: Arc::new(AtomicBool::new(api != RuntimeApi::Cri)),
        })
    }

    /// The channel for containerd's own services (content, leases, images),
    /// or None when the daemon runs on CRI alone.
    pub fn containerd(&self) -> Option<Channel> {
        self.containerd
            .load(Ordering::Relaxed)
            .then(|| self.channel.clone())
    }

    /// Stops using containerd's own API (it does not answer: CRI-O).
    pub fn cri_only(&self) {
        self.containerd.store(false, Ordering::Relaxed);
    }

    /// Socket path, for messages.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel.clone())
    }

    /// Runtime name and version; proves the runtime answers CRI.
    pub async fn version(&self) -> Result<String, RuntimeError> {
        let (name, version) = self.name_and_version().await?;
        Ok(format!("{name} {version}"))
    }

    /// CRI `runtime_name` and `runtime_version`.
    pub async fn name_and_version(&self) -> Result<(String, String), RuntimeError> {
        let r = RuntimeServiceClient::new(self.channel.clone())
            .version(VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(|s| classify(&s))?
            .into_inner();
        Ok((r.runtime_name, r.runtime_version))
    }

    /// The image's ID and repository digests if present on the node.
    pub async fn image_status(&self, image: &str) -> Result<Option<Image>, RuntimeError> {
        let r = self
            .images()
            .image_status(ImageStatusRequest {
                image: image_spec(image),
                verbose: false,
            })
            .await
            .map_err(|s| classify(&s))?
            .into_inner();
        Ok(r.image.map(|i| Image {
            id: i.id,
            repo_digests: i.repo_digests,
            size: i.size,
            pinned: i.pinned,
        }))
    }

    /// Pulls `image`; returns the image reference the runtime reports.
    pub async fn pull(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
        labels: std::collections::BTreeMap<String, String>,
        mut annotations: std::collections::BTreeMap<String, String>,
    ) -> Result<String, RuntimeError> {
        annotations.insert(PULLED_BY_ANNOTATION.into(), "nodeimage-daemon".into());
        let sandbox = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: "nodeimage-prepull".into(),
                namespace: "nodeimage".into(),
                ..Default::default()
            }),
            labels: labels.into_iter().collect(),
            annotations: annotations.into_iter().collect(),
            ..Default::default()
        };
        let r = self
            .images()
            .pull_image(PullImageRequest {
                image: image_spec(image),
                auth,
                sandbox_config: Some(sandbox),
            })
            .await
            .map_err(|s| classify(&s))?
            .into_inner();
        Ok(r.image_ref)
    }

    /// Mount point of the filesystem that holds images, and its used bytes.
    pub async fn image_fs(&self) -> Result<Vec<(String, u64)>, RuntimeError> {
        let r = self
            .images()
            .image_fs_info(ImageFsInfoRequest {})
            .await
            .map_err(|s| classify(&s))?
            .into_inner();
        Ok(r.image_filesystems
            .into_iter()
            .map(|f| {
                (
                    f.fs_id.map(|i| i.mountpoint).unwrap_or_default(),
                    f.used_bytes.map(|u| u.value).unwrap_or(0),
                )
            })
            .collect())
    }
}

impl Runtime {
    /// Every image on the node with all its names (CRI ListImages).
    pub async fn list_images(&self) -> Result<Vec<ListedImage>, RuntimeError> {
        let r = self
            .images()
            .list_images(ListImagesRequest { filter: None })
            .await
            .map_err(|s| classify(&s))?
            .into_inner();
        Ok(r.images
            .into_iter()
            .map(|i| ListedImage {
                id: i.id,
                repo_tags: i.repo_tags,
                repo_digests: i.repo_digests,
                size: i.size,
                pinned: i.pinned,
            })
            .collect())
    }

    /// Every container in every state (CRI ListContainers, no filter).
    pub async fn list_containers(&self) -> Result<Vec<Container>, RuntimeError> {
        let r = RuntimeServiceClient::new(self.channel.clone())
            .list_containers(ListContainersRequest { filter: None })
            .await
            .map_err(|s| classify(&s))?
            .into_inner();
        Ok(r.containers.into_iter().map(container).collect())
    }

    /// The sandbox image the runtime's verbose status names, if any.
    pub async fn sandbox_image(&self) -> Result<Option<String>, RuntimeError> {
        let r = RuntimeServiceClient::new(self.channel.clone())
            .status(StatusRequest { verbose: true })
            .await
            .map_err(|s| classify(&s))?
            .into_inner();
        Ok(super::sandbox::from_status_info(&r.info))
    }

    /// Removes the image with this ID and all its names (CRI RemoveImage;
    /// an image already gone is no error, as CRI defines it).
    pub async fn remove_image(&self, id: &str) -> Result<(), RuntimeError> {
        self.images()
            .remove_image(RemoveImageRequest {
                image: image_spec(id),
            })
            .await
            .map_err(|s| classify(&s))?;
        Ok(())
    }
}

/// A CRI container as the removal rule reads it: named
/// `namespace/pod/container` where kubelet's labels say, else by its own name.
fn container(c: k8s_cri::v1::Container) -> Container {
    let label = |k: &str| c.labels.get(k).cloned().unwrap_or_default();
    let own = c
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    let pod = label("io.kubernetes.pod.name");
    let name = if pod.is_empty() {
        own
    } else {
        format!("{}/{pod}/{own}", label("io.kubernetes.pod.namespace"))
    };
    let state = match ContainerState::try_from(c.state) {
        Ok(ContainerState::ContainerCreated) => "created",
        Ok(ContainerState::ContainerRunning) => "running",
        Ok(ContainerState::ContainerExited) => "exited",
        _ => "unknown",
    };
    Container {
        name,
        state: state.into(),
        image_id: c.image_ref,
        image: c.image.map(|i| i.image).unwrap_or_default(),
    }
}

/// The CRI spec naming `image`.
fn image_spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

/// A status the runtime answered with, classified.
fn from_status(s: &tonic::Status) -> RuntimeError {
    let msg = s.message().to_string();
    let lower = msg.to_ascii_lowercase();
    match s.code() {
        tonic::Code::Unavailable => RuntimeError::Unavailable(msg),
        _ if crate::ratelimit::says_rate_limited(&msg) => RuntimeError::RateLimited(msg),
        tonic::Code::NotFound => RuntimeError::NotFound(msg),
        _ if lower.contains("401 unauthorized")
            || lower.contains("403 forbidden")
            || lower.contains("unauthorized")
            || lower.contains("authorization failed") =>
        {
            RuntimeError::Unauthorized(msg)
        }
        _ if lower.contains("not found") => RuntimeError::NotFound(msg),
        _ => RuntimeError::Other(msg),
    }
}

/// Socket-level failures (connection refused, socket missing) surface as
/// `Unknown`/`Unavailable` with a transport message; treat them as unavailable.
/// Only statuses made on our side (tonic attaches the transport error as
/// their source) count: the same words in a message containerd sent, such as
/// a registry refusing connections, are a failed pull, not a runtime outage.
pub fn classify(s: &tonic::Status) -> RuntimeError {
    let m = s.message().to_ascii_lowercase();
    let local = std::error::Error::source(s).is_some();
    if local
        && (m.contains("transport error")
            || m.contains("connection refused")
            || m.contains("no such file")
            || m.contains("error trying to connect"))
    {
        RuntimeError::Unavailable(s.message().to_string())
    } else {
        from_status(s)
    }
}

/// containerd namespace that CRI (and kubelet) use.
pub const K8S_NAMESPACE: &str = "k8s.io";

/// A request to one of containerd's own services (content, images, leases)
/// in CRI's namespace, where kubelet's images live.
pub fn namespaced<T>(msg: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.metadata_mut().insert(
        "containerd-namespace",
        tonic::metadata::MetadataValue::from_static(K8S_NAMESPACE),
    );
    req
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_runtime_messages() {
        let cases = [
            (
                tonic::Status::unknown(
                    "failed to pull and unpack image \"127.0.0.1:5001/test:v1\": failed to resolve reference: pulling from host 127.0.0.1:5001 failed with status code [manifests v1]: 401 Unauthorized",
                ),
                "unauthorized",
            ),
            (
                tonic::Status::not_found("127.0.0.1:5000/test:nope: not found"),
                "not_found",
            ),
            (
                tonic::Status::unknown("failed to resolve reference \"x\": x: not found"),
                "not_found",
            ),
            (
                tonic::Status::unavailable("connection refused"),
                "unavailable",
            ),
            (
                tonic::Status::from_error(Box::new(std::io::Error::other("transport error"))),
                "unavailable",
            ),
            (
                tonic::Status::unknown(
                    "failed to pull and unpack image \"127.0.0.1:5999/x:v1\": failed to resolve reference \"127.0.0.1:5999/x:v1\": failed to do request: Head \"http://127.0.0.1:5999/v2/x/manifests/v1\": dial tcp 127.0.0.1:5999: connect: connection refused",
                ),
                "error",
            ),
            (tonic::Status::unknown("no space left on device"), "error"),
            (
                tonic::Status::unknown(
                    "failed to pull and unpack image \"h/x:v1\": failed to resolve reference \"h/x:v1\": unexpected status from HEAD request to http://h/v2/x/manifests/v1: 429 Too Many Requests",
                ),
                "rate_limited",
            ),
            (
                tonic::Status::unknown(
                    "failed to copy: unexpected status code https://h/v2/x/blobs/sha256:1: 429 Too Many Requests - Server message: toomanyrequests: slow down",
                ),
                "rate_limited",
            ),
        ];
        for (status, want) in cases {
            assert_eq!(classify(&status).reason(), want, "{status:?}");
        }
    }

    /// Users, alerts and tests read one wording whatever the runtime.
    #[test]
    fn reasons_read_the_same_on_every_runtime() {
        let refused = [
            // containerd 1.6
            "failed to pull and unpack image \"h/x:v1\": failed to resolve reference \"h/x:v1\": pulling from host h failed with status code [manifests v1]: 401 Unauthorized",
            // containerd 1.7 and 2.x
            "failed to pull and unpack image \"h/x:v1\": failed to resolve reference \"h/x:v1\": failed to authorize: failed to fetch anonymous token: authorization failed: no basic auth credentials",
        ];
        for m in refused {
            let e = classify(&tonic::Status::unknown(m));
            assert_eq!(e.to_string(), format!("unauthorized: {m}"));
        }
        let missing = [
            "failed to pull and unpack image \"h/x:v9\": failed to resolve reference \"h/x:v9\": h/x:v9: not found",
        ];
        for m in missing {
            let e = classify(&tonic::Status::unknown(m));
            assert_eq!(e.to_string(), format!("not found: {m}"));
        }
    }
}
