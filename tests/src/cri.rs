//! A small CRI client for a node's containerd (unix socket), used by the
//! `ni-cri` tool and by the end-to-end tests to see what a node holds in
//! containerd's `k8s.io` namespace, as kubelet sees it.

use hyper_util::rt::TokioIo;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    AuthConfig, ImageSpec, ImageStatusRequest, ListImagesRequest, PullImageRequest,
    RemoveImageRequest, VersionRequest,
};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint};

/// An image as CRI reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Image ID (config digest).
    pub id: String,
    /// `name:tag` entries.
    pub repo_tags: Vec<String>,
    /// `name@sha256:…` entries.
    pub repo_digests: Vec<String>,
    /// Size in bytes.
    pub size: u64,
    /// Reported pinned (kubelet's image GC skips it).
    pub pinned: bool,
}

impl From<k8s_cri::v1::Image> for Image {
    fn from(i: k8s_cri::v1::Image) -> Self {
        Image {
            id: i.id,
            repo_tags: i.repo_tags,
            repo_digests: i.repo_digests,
            size: i.size,
            pinned: i.pinned,
        }
    }
}

/// An error and all its sources, "outer: inner: innermost".
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let msg = c.to_string();
        // Some wrappers repeat their source's message; print it once.
        if !s.ends_with(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        cur = c.source();
    }
    s
}

/// Connects to a unix socket. The URI is a placeholder required by tonic;
/// the connector ignores it and dials the socket.
pub async fn connect(path: &Path) -> Result<Channel, String> {
    let display = path.display().to_string();
    let path: PathBuf = path.to_path_buf();
    Endpoint::try_from("http://[::]:50051")
        .map_err(|e| format!("endpoint: {e}"))?
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let p = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(p).await?))
            }
        }))
        .await
        .map_err(|e| format!("cannot connect to {display}: {}", chain(&e)))
}

fn spec(image: &str) -> Option<ImageSpec> {
    Some(ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

fn status_err(s: tonic::Status) -> String {
    format!("CRI call failed: code={:?}: {}", s.code(), s.message())
}

fn block_on<T>(f: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        match tokio::time::timeout(Duration::from_secs(60), f).await {
            Ok(r) => r,
            Err(_) => Err("CRI call timed out after 60s".to_string()),
        }
    })
}

/// ImageStatus of `image` on the containerd at `socket`: None when absent.
pub fn image_status(socket: &Path, image: &str) -> Result<Option<Image>, String> {
    block_on(async {
        let mut c = ImageServiceClient::new(connect(socket).await?);
        let r = c
            .image_status(ImageStatusRequest {
                image: spec(image),
                verbose: false,
            })
            .await
            .map_err(status_err)?
            .into_inner();
        Ok(r.image.map(Image::from))
    })
}

/// CRI `runtime_name` and `runtime_version` of the runtime at `socket`.
pub fn version(socket: &Path) -> Result<(String, String), String> {
    block_on(async {
        let mut c = RuntimeServiceClient::new(connect(socket).await?);
        let r = c
            .version(VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(status_err)?
            .into_inner();
        Ok((r.runtime_name, r.runtime_version))
    })
}

/// Every image CRI lists on the containerd at `socket`.
pub fn list_images(socket: &Path) -> Result<Vec<Image>, String> {
    block_on(async {
        let mut c = ImageServiceClient::new(connect(socket).await?);
        let r = c
            .list_images(ListImagesRequest { filter: None })
            .await
            .map_err(status_err)?
            .into_inner();
        Ok(r.images.into_iter().map(Image::from).collect())
    })
}

/// Pulls `image` directly (not through nodeimage), with optional basic
/// credentials; returns the image reference the runtime reports.
pub fn pull(socket: &Path, image: &str, auth: Option<(&str, &str)>) -> Result<String, String> {
    let auth = auth.map(|(u, p)| AuthConfig {
        username: u.to_string(),
        password: p.to_string(),
        ..Default::default()
    });
    block_on(async {
        let mut c = ImageServiceClient::new(connect(socket).await?);
        let r = c
            .pull_image(PullImageRequest {
                image: spec(image),
                auth,
                sandbox_config: None,
            })
            .await
            .map_err(status_err)?
            .into_inner();
        Ok(r.image_ref)
    })
}

/// Removes `image` (CRI removes the image ID with all its names).
pub fn remove_image(socket: &Path, image: &str) -> Result<(), String> {
    block_on(async {
        let mut c = ImageServiceClient::new(connect(socket).await?);
        c.remove_image(RemoveImageRequest { image: spec(image) })
            .await
            .map_err(status_err)?;
        Ok(())
    })
}

/// Whether any image on the node is named after `name` (`host/repo`), by tag or digest.
pub fn holds_any_of(socket: &Path, name: &str) -> Result<Vec<Image>, String> {
    let tag_prefix = format!("{name}:");
    let digest_prefix = format!("{name}@");
    Ok(list_images(socket)?
        .into_iter()
        .filter(|i| {
            i.repo_tags.iter().any(|t| t.starts_with(&tag_prefix))
                || i.repo_digests.iter().any(|d| d.starts_with(&digest_prefix))
        })
        .collect())
}
