//! Pushing generated images to a registry through the distribution HTTP API
//! (blobs by POST+PUT upload, then the manifest), and reading manifest
//! digests back. Every generated image has a layer of fresh random bytes,
//! so no two tests (or runs) share content and a pull is always a real one.

use crate::http;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// OCI image manifest media type.
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
/// Uncompressed layer: its digest is also its diff ID.
const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const ACCEPT_MANIFESTS: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// A registry reachable over plain HTTP, optionally with basic auth.
#[derive(Clone, Debug)]
pub struct Registry {
    /// `host:port`.
    pub host: String,
    auth: Option<String>,
}

/// An image that was pushed.
#[derive(Clone, Debug)]
pub struct PushedImage {
    /// `host:port/repository`: the NodeImage image key.
    pub name: String,
    /// Repository path inside the registry.
    pub repository: String,
    /// Tag it was pushed under, if any.
    pub tag: Option<String>,
    /// Digest of the manifest (`sha256:…`), what `imageID` must carry.
    pub digest: String,
    /// Total bytes of config and layer.
    pub size: usize,
}

impl PushedImage {
    /// `name:tag` (or `name@digest` when pushed without a tag).
    pub fn reference(&self) -> String {
        match &self.tag {
            Some(t) => format!("{}:{t}", self.name),
            None => self.by_digest(),
        }
    }

    /// `name@sha256:…`: the repository digest a node reports.
    pub fn by_digest(&self) -> String {
        format!("{}@{}", self.name, self.digest)
    }
}

/// Lower-case hex SHA-256 as a digest string `sha256:…`.
pub fn sha256_digest(data: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, data);
    let hex: String = d.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// A tar archive holding one regular file of `size` random bytes.
pub fn random_layer(size: usize) -> Vec<u8> {
    let mut data = vec![0u8; size];
    fastrand::fill(&mut data);
    let name = format!("e2e/{}.bin", crate::random_suffix());
    let mut out = Vec::with_capacity(size + 2048);
    out.extend_from_slice(&tar_header(&name, size));
    out.extend_from_slice(&data);
    let pad = (512 - size % 512) % 512;
    out.resize(out.len() + pad + 1024, 0);
    out
}

fn tar_header(name: &str, size: usize) -> [u8; 512] {
    let mut h = [0u8; 512];
    let put = |h: &mut [u8; 512], at: usize, s: &[u8]| h[at..at + s.len()].copy_from_slice(s);
    put(&mut h, 0, name.as_bytes());
    put(&mut h, 100, b"0000644\0");
    put(&mut h, 108, b"0000000\0");
    put(&mut h, 116, b"0000000\0");
    put(&mut h, 124, format!("{size:011o}\0").as_bytes());
    put(&mut h, 136, b"14000000000\0");
    put(&mut h, 148, b"        ");
    h[156] = b'0';
    put(&mut h, 257, b"ustar\0");
    put(&mut h, 263, b"00");
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    put(&mut h, 148, format!("{sum:06o}\0 ").as_bytes());
    h
}

fn arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

impl Registry {
    /// An anonymous registry at `host:port`.
    pub fn new(host: &str) -> Registry {
        Registry {
            host: host.to_string(),
            auth: None,
        }
    }

    /// A registry that needs basic auth.
    pub fn with_basic_auth(host: &str, user: &str, password: &str) -> Registry {
        Registry {
            host: host.to_string(),
            auth: Some(format!(
                "Basic {}",
                STANDARD.encode(format!("{user}:{password}"))
            )),
        }
    }

    fn send(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<http::Response, String> {
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if let Some(a) = &self.auth {
            all.push(("Authorization", a));
        }
        http::request(method, url, &all, body)
    }

    /// Uploads a blob (unless present) and returns its digest.
    pub fn push_blob(&self, repository: &str, data: &[u8]) -> Result<String, String> {
        let digest = sha256_digest(data);
        let base = format!("http://{}/v2/{repository}", self.host);
        let head = self.send("HEAD", &format!("{base}/blobs/{digest}"), &[], &[])?;
        if head.status == 200 {
            return Ok(digest);
        }
        let start = self.send("POST", &format!("{base}/blobs/uploads/"), &[], &[])?;
        if start.status != 202 {
            return Err(format!(
                "starting a blob upload to {base}: HTTP {} {}",
                start.status,
                start.text()
            ));
        }
        let location = start
            .header("location")
            .ok_or("blob upload answer has no Location")?;
        let mut url = if location.starts_with("http://") {
            location.to_string()
        } else {
            format!("http://{}{location}", self.host)
        };
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str("digest=");
        url.push_str(&digest);
        let put = self.send(
            "PUT",
            &url,
            &[("Content-Type", "application/octet-stream")],
            data,
        )?;
        if put.status != 201 {
            return Err(format!(
                "uploading blob {digest} to {base}: HTTP {} {}",
                put.status,
                put.text()
            ));
        }
        Ok(digest)
    }

    /// Uploads a manifest under `reference` (a tag or its digest); returns its digest.
    pub fn push_manifest(
        &self,
        repository: &str,
        reference: &str,
        manifest: &[u8],
    ) -> Result<String, String> {
        let url = format!("http://{}/v2/{repository}/manifests/{reference}", self.host);
        let r = self.send("PUT", &url, &[("Content-Type", OCI_MANIFEST)], manifest)?;
        if r.status != 201 {
            return Err(format!("PUT {url}: HTTP {} {}", r.status, r.text()));
        }
        Ok(r.header("docker-content-digest")
            .map(str::to_string)
            .unwrap_or_else(|| sha256_digest(manifest)))
    }

    /// The manifest digest the registry serves for `reference`, or None when
    /// it answers 404 (HEAD /v2/<repository>/manifests/<reference>).
    pub fn manifest_digest(
        &self,
        repository: &str,
        reference: &str,
    ) -> Result<Option<String>, String> {
        let url = format!("http://{}/v2/{repository}/manifests/{reference}", self.host);
        let r = self.send("HEAD", &url, &[("Accept", ACCEPT_MANIFESTS)], &[])?;
        match r.status {
            200 => Ok(Some(
                r.header("docker-content-digest")
                    .ok_or_else(|| format!("HEAD {url}: no Docker-Content-Digest"))?
                    .to_string(),
            )),
            404 => Ok(None),
            s => Err(format!("HEAD {url}: HTTP {s}")),
        }
    }

    /// Pushes a new single-layer image with `layer_bytes` random bytes to
    /// `repository`, under `tag` (or only by digest when `tag` is None).
    pub fn push_image(
        &self,
        repository: &str,
        tag: Option<&str>,
        layer_bytes: usize,
    ) -> Result<PushedImage, String> {
        let layer = random_layer(layer_bytes);
        let layer_digest = self.push_blob(repository, &layer)?;
        let config = serde_json::json!({
            "architecture": arch(),
            "os": "linux",
            "config": {"Cmd": ["/e2e"], "Labels": {"nodeimage.dev/e2e": repository}},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        })
        .to_string()
        .into_bytes();
        let config_digest = self.push_blob(repository, &config)?;
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": OCI_LAYER_TAR, "digest": layer_digest, "size": layer.len()}],
        })
        .to_string()
        .into_bytes();
        let digest = sha256_digest(&manifest);
        let pushed = self.push_manifest(repository, tag.unwrap_or(&digest), &manifest)?;
        if pushed != digest {
            return Err(format!(
                "registry reports manifest digest {pushed}, expected {digest}"
            ));
        }
        Ok(PushedImage {
            name: format!("{}/{repository}", self.host),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
            size: layer.len() + config.len(),
        })
    }

    /// Tags an already pushed manifest under another tag.
    pub fn tag_again(&self, image: &PushedImage, tag: &str) -> Result<(), String> {
        let url = format!(
            "http://{}/v2/{}/manifests/{}",
            self.host, image.repository, image.digest
        );
        let r = self.send("GET", &url, &[("Accept", OCI_MANIFEST)], &[])?;
        if r.status != 200 {
            return Err(format!("GET {url}: HTTP {}", r.status));
        }
        self.push_manifest(&image.repository, tag, &r.body)
            .map(|_| ())
    }

    /// Copies the single-platform OCI image `repository:reference` of `from`
    /// (e.g. the stack's pause image, which runs) to `to_repository:tag`
    /// here, with a label naming the copy in its config: the copy runs like
    /// the original but is an image of its own (another image ID), so what
    /// kubelet does with it is not decided by the original's pin.
    pub fn push_runnable_copy(
        &self,
        from: &Registry,
        repository: &str,
        reference: &str,
        to_repository: &str,
        tag: &str,
    ) -> Result<PushedImage, String> {
        let get = |path: &str| -> Result<Vec<u8>, String> {
            let url = format!("http://{}/v2/{repository}/{path}", from.host);
            let r = from.send("GET", &url, &[("Accept", ACCEPT_MANIFESTS)], &[])?;
            if r.status != 200 {
                return Err(format!("GET {url}: HTTP {}", r.status));
            }
            Ok(r.body)
        };
        let mut manifest: serde_json::Value =
            serde_json::from_slice(&get(&format!("manifests/{reference}"))?)
                .map_err(|e| format!("manifest of {repository}:{reference}: {e}"))?;
        // (mediaType is optional in an OCI manifest; an index has no layers.)
        if !manifest["layers"].is_array() || manifest["config"]["digest"].is_null() {
            return Err(format!(
                "{repository}:{reference} is not a single-platform manifest: {manifest}"
            ));
        }
        let mut size = 0;
        let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
        for layer in &layers {
            let digest = layer["digest"].as_str().ok_or("a layer without digest")?;
            let blob = get(&format!("blobs/{digest}"))?;
            size += blob.len();
            self.push_blob(to_repository, &blob)?;
        }
        let config_digest = manifest["config"]["digest"]
            .as_str()
            .ok_or("a manifest without config")?
            .to_string();
        let mut config: serde_json::Value =
            serde_json::from_slice(&get(&format!("blobs/{config_digest}"))?)
                .map_err(|e| format!("config of {repository}:{reference}: {e}"))?;
        config["config"]["Labels"]["nodeimage.dev/e2e-copy"] =
            serde_json::Value::String(format!("{}/{to_repository}:{tag}", self.host));
        let config = config.to_string().into_bytes();
        size += config.len();
        manifest["config"]["digest"] = self.push_blob(to_repository, &config)?.into();
        manifest["config"]["size"] = config.len().into();
        let manifest = manifest.to_string().into_bytes();
        let digest = self.push_manifest(to_repository, tag, &manifest)?;
        Ok(PushedImage {
            name: format!("{}/{to_repository}", self.host),
            repository: to_repository.to_string(),
            tag: Some(tag.to_string()),
            digest,
            size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tar_layer_is_well_formed() {
        let t = random_layer(1000);
        assert_eq!(t.len() % 512, 0);
        assert_eq!(t.len(), 512 + 1024 + 1024);
        // The checksum field holds the sum of the header with the field as spaces.
        let mut h = [0u8; 512];
        h.copy_from_slice(&t[..512]);
        let stored = u32::from_str_radix(std::str::from_utf8(&h[148..154]).expect("octal"), 8)
            .expect("octal");
        h[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, h.iter().map(|b| u32::from(*b)).sum::<u32>());
        assert_eq!(&t[124..136], b"00000001750\0");
        assert_ne!(random_layer(1000), t, "content is random");
    }

    #[test]
    fn digests_are_sha256_hex() {
        assert_eq!(
            sha256_digest(b""),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
