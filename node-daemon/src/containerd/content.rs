//! Reading a pulled image from containerd's content store (namespace
//! k8s.io, where CRI keeps images): its record, its manifest (picking this
//! node's platform from an index), whether its layer blobs are still there,
//! and those blobs as blocking readers for the extraction, which runs on a
//! blocking thread.

use super::cri::namespaced;
use containerd_client::services::v1::content_client::ContentClient;
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::{GetImageRequest, InfoRequest, ReadContentRequest};
use serde::Deserialize;
use std::io::Read;
use tonic::transport::Channel;

/// Largest manifest or index read into memory.
const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Chunks of a blob buffered between the gRPC stream and the reader.
const CHUNKS_IN_FLIGHT: usize = 4;

/// A descriptor in a manifest or index.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type.
    #[serde(default)]
    pub media_type: String,
    /// Content digest.
    pub digest: String,
    /// Platform, in an index.
    #[serde(default)]
    pub platform: Option<Platform>,
}

/// The platform of an index entry.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Platform {
    /// Operating system.
    #[serde(default)]
    pub os: String,
    /// CPU architecture (Go's names: amd64, arm64, arm).
    #[serde(default)]
    pub architecture: String,
}

#[derive(Deserialize)]
struct Document {
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
}

/// An image manifest's blobs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Image {
    /// The config blob's digest, kept when layers are discarded (empty if none).
    pub config: String,
    /// The layers, bottom first.
    pub layers: Vec<String>,
}

/// What a manifest-like document is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// An image manifest.
    Image(Image),
    /// An index: the manifest for this platform.
    Manifest(String),
}

/// This machine's architecture in OCI (Go) spelling.
pub fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64le",
        "s390x" => "s390x",
        "riscv64" => "riscv64",
        other => other,
    }
}

/// Reads a manifest or an index; an index yields the manifest of
/// linux/`arch`.
pub fn parse(raw: &[u8], arch: &str) -> Result<Parsed, String> {
    let doc: Document =
        serde_json::from_slice(raw).map_err(|e| format!("not an image manifest or index: {e}"))?;
    if let Some(layers) = doc.layers {
        return Ok(Parsed::Image(Image {
            config: doc.config.map(|d| d.digest).unwrap_or_default(),
            layers: layers.into_iter().map(|d| d.digest).collect(),
        }));
    }
    if let Some(manifests) = doc.manifests {
        return manifests
            .into_iter()
            .find(|m| {
                m.platform
                    .as_ref()
                    .is_some_and(|p| p.os == "linux" && p.architecture == arch)
            })
            .map(|m| Parsed::Manifest(m.digest))
            .ok_or_else(|| format!("the image has no manifest for linux/{arch}"));
    }
    Err("not an image manifest or index".into())
}

/// The digest containerd's image record `name` points at (a manifest or
/// an index), e.g. for `docker.io/kubeedge/installation-package:v1.17.0`.
pub async fn image_target(channel: Channel, name: &str) -> Result<String, String> {
    let r = ImagesClient::new(channel)
        .get(namespaced(GetImageRequest {
            name: name.to_string(),
        }))
        .await
        .map_err(|s| format!("containerd has no image {name}: {}", s.message()))?
        .into_inner();
    r.image
        .and_then(|i| i.target)
        .map(|t| t.digest)
        .ok_or_else(|| format!("containerd's image {name} has no target"))
}

/// A small blob, read whole.
pub async fn read_small(channel: Channel, digest: &str) -> Result<Vec<u8>, String> {
    let mut stream = ContentClient::new(channel)
        .read(namespaced(ReadContentRequest {
            digest: digest.to_string(),
            offset: 0,
            size: 0,
        }))
        .await
        .map_err(|s| format!("reading {digest}: {}", s.message()))?
        .into_inner();
    let mut out = Vec::new();
    while let Some(chunk) = stream
        .message()
        .await
        .map_err(|s| format!("reading {digest}: {}", s.message()))?
    {
        out.extend_from_slice(&chunk.data);
        if out.len() > MAX_MANIFEST_BYTES {
            return Err(format!("{digest} is too large for a manifest"));
        }
    }
    Ok(out)
}

/// The config and layers (bottom first) of the manifest `digest` names, for this platform.
pub async fn image(channel: Channel, digest: &str) -> Result<Image, String> {
    let mut digest = digest.to_string();
    for _ in 0..3 {
        let raw = read_small(channel.clone(), &digest).await?;
        match parse(&raw, oci_arch())? {
            Parsed::Image(i) => return Ok(i),
            Parsed::Manifest(m) => digest = m,
        }
    }
    Err("nested image indexes".into())
}

/// The first of `blobs` not in the content store (`discard_unpacked_layers` deletes layers).
pub async fn first_missing(channel: Channel, blobs: &[String]) -> Result<Option<String>, String> {
    let mut client = ContentClient::new(channel);
    for digest in blobs {
        match client
            .info(namespaced(InfoRequest {
                digest: digest.clone(),
            }))
            .await
        {
            Ok(_) => {}
            Err(s) if s.code() == tonic::Code::NotFound => return Ok(Some(digest.clone())),
            Err(s) => return Err(format!("looking up layer {digest}: {}", s.message())),
        }
    }
    Ok(None)
}

/// What a layer read says when the layer left the content store while it
/// was read (`discard_unpacked_layers` removes layers a moment after the
/// pull that unpacked them).
const GONE_WHILE_READ: &str = "no longer in containerd's content store (removed while it was read)";

/// Whether a layer read failed because the layer left while it was read.
pub fn gone_while_read(error: &str) -> bool {
    error.contains(GONE_WHILE_READ)
}

/// Why a layer could not be read (one [`first_missing`] saw may leave with its image).
fn layer_error(digest: &str, s: &tonic::Status) -> String {
    if s.code() == tonic::Code::NotFound {
        format!("reading layer {digest}: {GONE_WHILE_READ}")
    } else {
        format!("reading layer {digest}: {}", s.message())
    }
}

/// A blocking reader of a blob, fed by a task that streams it from
/// containerd. Must be read outside the async runtime's worker threads.
pub fn blob_reader(channel: Channel, digest: &str) -> BlobReader {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, String>>(CHUNKS_IN_FLIGHT);
    let digest = digest.to_string();
    tokio::spawn(async move {
        let call = ContentClient::new(channel)
            .read(namespaced(ReadContentRequest {
                digest: digest.clone(),
                offset: 0,
                size: 0,
            }))
            .await;
        let mut stream = match call {
            Ok(s) => s.into_inner(),
            Err(s) => {
                let _ = tx.send(Err(layer_error(&digest, &s))).await;
                return;
            }
        };
        loop {
            let item = match stream.message().await {
                Ok(Some(chunk)) => Ok(chunk.data),
                Ok(None) => return,
                Err(s) => Err(layer_error(&digest, &s)),
            };
            let failed = item.is_err();
            if tx.send(item).await.is_err() || failed {
                // The reader is gone (the file was found), or the read failed.
                return;
            }
        }
    });
    BlobReader {
        rx,
        buf: Vec::new(),
        at: 0,
    }
}

/// See [`blob_reader`].
pub struct BlobReader {
    rx: tokio::sync::mpsc::Receiver<Result<Vec<u8>, String>>,
    buf: Vec<u8>,
    at: usize,
}

impl Read for BlobReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.at >= self.buf.len() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => {
                    self.buf = chunk;
                    self.at = 0;
                }
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.buf.len() - self.at);
        out[..n].copy_from_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_and_indexes() {
        let manifest = br#"{"schemaVersion":2,"config":{"digest":"sha256:c","size":1},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:l1","size":5},{"digest":"sha256:l2","size":7}]}"#;
        assert_eq!(
            parse(manifest, "amd64"),
            Ok(Parsed::Image(Image {
                config: "sha256:c".into(),
                layers: vec!["sha256:l1".into(), "sha256:l2".into()]
            }))
        );
        let no_config = br#"{"schemaVersion":2,"layers":[]}"#;
        assert_eq!(
            parse(no_config, "amd64"),
            Ok(Parsed::Image(Image::default()))
        );
        let index = br#"{"schemaVersion":2,"manifests":[
            {"digest":"sha256:arm","size":1,"platform":{"os":"linux","architecture":"arm64"}},
            {"digest":"sha256:win","size":1,"platform":{"os":"windows","architecture":"amd64"}},
            {"digest":"sha256:x86","size":1,"platform":{"os":"linux","architecture":"amd64"}}]}"#;
        assert_eq!(
            parse(index, "amd64"),
            Ok(Parsed::Manifest("sha256:x86".into()))
        );
        assert_eq!(
            parse(index, "arm64"),
            Ok(Parsed::Manifest("sha256:arm".into()))
        );
        assert!(parse(index, "s390x").is_err_and(|e| e.contains("linux/s390x")));
        assert!(parse(br#"{"architecture":"amd64"}"#, "amd64").is_err());
        assert!(parse(b"garbage", "amd64").is_err());
    }
}
