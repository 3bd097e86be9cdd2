//! Byte progress of a pull, which CRI does not report: read from containerd's
//! content service. Once containerd has fetched the image manifest (it labels
//! it with the source repository), progress is the share of the manifest's
//! blobs already committed plus the bytes of those still being written.
//! Before that, and only when this is the only pull on the node, the active
//! ingests are summed.

use super::cri::namespaced;
use crate::runtime::PullProbe;
use containerd_client::services::v1::content_client::ContentClient;
use containerd_client::services::v1::{
    Info, InfoRequest, ListContentRequest, ListStatusesRequest, ReadContentRequest,
};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::SystemTime;
use tonic::transport::Channel;

const SOURCE_LABEL_PREFIX: &str = "containerd.io/distribution.source.";
/// containerd's labels naming the blobs a manifest refers to.
const GC_REF_PREFIX: &str = "containerd.io/gc.ref.content.";
const MAX_MANIFEST_BYTES: i64 = 4 << 20;
/// Most manifests of the pull's repository read per sample to find the one
/// being pulled when containerd's labels do not say (bounds the reads when a
/// repository has many tags on the node).
const MAX_UNSURE_MANIFESTS: usize = 32;

/// One blob of an image: digest and size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blob {
    /// Content digest.
    pub digest: String,
    /// Size in bytes.
    pub size: u64,
}

/// Percentage done given blob sizes, which are committed, and the offsets of
/// active writes. Never reports 100 (only a finished pull does).
pub fn percent(blobs: &[Blob], committed: &[bool], active: &BTreeMap<String, u64>) -> i32 {
    let total: u64 = blobs.iter().map(|b| b.size).sum();
    if total == 0 {
        return 0;
    }
    let done: u64 = blobs
        .iter()
        .zip(committed)
        .map(|(b, c)| {
            if *c {
                b.size
            } else {
                active.get(&b.digest).copied().unwrap_or(0).min(b.size)
            }
        })
        .sum();
    ((done.saturating_mul(100) / total) as i32).clamp(0, 99)
}

/// Percentage from active ingests alone (offset over total), or None when none.
pub fn percent_of_ingests(ingests: &[(u64, u64)]) -> Option<i32> {
    let total: u64 = ingests.iter().map(|(_, t)| *t).sum();
    if total == 0 {
        return None;
    }
    let off: u64 = ingests.iter().map(|(o, t)| (*o).min(*t)).sum();
    Some(((off.saturating_mul(100) / total) as i32).clamp(0, 99))
}

/// The digest an ingest is writing. containerd 1.6's local content store
/// leaves `expected` empty in ingest statuses, but names each ingest after
/// the descriptor it fetches (`remotes.MakeRefKey`: `layer-sha256:…`,
/// `manifest-sha256:…`, `config-sha256:…`), so the digest is read from the ref.
pub fn digest_of_ref(r: &str) -> String {
    match r.find("sha256:") {
        Some(i) => r[i..].to_string(),
        None => r.to_string(),
    }
}

/// Which active ingests (name, digest) belong to a pull: those writing one
/// of its manifest's blobs, none before the manifest is known (an ingest
/// then may be another client's, such as kubelet's).
pub fn ingests_of_pull(refs: Vec<(String, String)>, blobs: Option<&[Blob]>) -> Vec<String> {
    let Some(blobs) = blobs else {
        return Vec::new();
    };
    refs.into_iter()
        .filter(|(_, d)| blobs.iter().any(|b| &b.digest == d))
        .map(|(r, _)| r)
        .collect()
}

/// The label keys under which containerd may record that a blob came from
/// `registry`: containerd 1.6 names the host without its port
/// (`containerd.io/distribution.source.127.0.0.1` for `127.0.0.1:5000`), so
/// both forms are tried.
pub fn source_label_keys(registry: &str) -> Vec<String> {
    let mut keys = vec![format!("{SOURCE_LABEL_PREFIX}{registry}")];
    let host = match registry.rsplit_once(':') {
        Some((host, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!host.contains(':') || host.ends_with(']')) =>
        {
            host
        }
        _ => registry,
    };
    if host != registry {
        keys.push(format!("{SOURCE_LABEL_PREFIX}{host}"));
    }
    keys
}

#[derive(Deserialize)]
struct Manifest {
    config: Option<Descriptor>,
    layers: Option<Vec<Descriptor>>,
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    size: u64,
}

/// Blobs of a manifest JSON document, or None if it is not an image manifest.
pub fn manifest_blobs(raw: &[u8]) -> Option<Vec<Blob>> {
    let m: Manifest = serde_json::from_slice(raw).ok()?;
    let layers = m.layers?;
    let mut out: Vec<Blob> = m
        .config
        .into_iter()
        .chain(layers)
        .map(|d| Blob {
            digest: d.digest,
            size: d.size,
        })
        .collect();
    out.dedup_by(|a, b| a.digest == b.digest);
    Some(out)
}

/// Offset and total of each active ingest, by digest.
type ActiveIngests = BTreeMap<String, (u64, u64)>;

/// Watches one pull's progress through containerd's content service.
pub struct Probe {
    client: ContentClient<Channel>,
    registry: String,
    repository: String,
    started: SystemTime,
    blobs: Option<Vec<Blob>>,
    ingests: Vec<String>,
}

impl Probe {
    /// A probe for a pull of `registry/repository` that began at `started`.
    pub fn new(channel: Channel, registry: &str, repository: &str, started: SystemTime) -> Self {
        Probe {
            client: ContentClient::new(channel),
            registry: registry.to_string(),
            repository: repository.to_string(),
            started,
            blobs: None,
            ingests: Vec::new(),
        }
    }

    /// Current percentage, if it can be told. `alone` says whether this is
    /// the only pull on the node (then unattributed ingests are ours).
    pub async fn sample(&mut self, alone: bool) -> Option<i32> {
        let (active, refs) = self.active_ingests().await?;
        if self.blobs.is_none() {
            self.blobs = self.find_manifest(&active).await;
        }
        self.ingests = ingests_of_pull(refs, self.blobs.as_deref());
        match self.blobs.clone() {
            Some(blobs) => {
                let mut committed = Vec::with_capacity(blobs.len());
                for b in &blobs {
                    let is_active = active.contains_key(&b.digest);
                    committed.push(!is_active && self.exists(&b.digest).await);
                }
                let offsets = active.iter().map(|(d, (o, _))| (d.clone(), *o)).collect();
                Some(percent(&blobs, &committed, &offsets))
            }
            None if alone => percent_of_ingests(&active.values().copied().collect::<Vec<_>>()),
            None => None,
        }
    }

    /// The ingests of this pull seen by the last sample (containerd's
    /// names for them), for `resume::Keeper` to hold.
    pub fn ingests(&self) -> &[String] {
        &self.ingests
    }

    /// Active ingests: offset and total by digest, and each one's name with
    /// its digest.
    async fn active_ingests(&mut self) -> Option<(ActiveIngests, Vec<(String, String)>)> {
        let req = namespaced(ListStatusesRequest { filters: vec![] });
        let statuses = self.client.list_statuses(req).await.ok()?.into_inner();
        let mut active = BTreeMap::new();
        let mut refs = Vec::new();
        for s in statuses.statuses {
            let digest = if s.expected.is_empty() {
                digest_of_ref(&s.r#ref)
            } else {
                s.expected
            };
            active.insert(
                digest.clone(),
                (s.offset.max(0) as u64, s.total.max(0) as u64),
            );
            refs.push((s.r#ref, digest));
        }
        Some((active, refs))
    }

    async fn exists(&mut self, digest: &str) -> bool {
        self.client
            .info(namespaced(InfoRequest {
                digest: digest.to_string(),
            }))
            .await
            .is_ok()
    }

    /// The newest manifest of our repository fetched since the pull began.
    async fn find_manifest(&mut self, active: &ActiveIngests) -> Option<Vec<Blob>> {
        let keys = source_label_keys(&self.registry);
        let mut stream = self
            .client
            .list(namespaced(ListContentRequest { filters: vec![] }))
            .await
            .ok()?
            .into_inner();
        let mut candidates: Vec<Info> = Vec::new();
        let mut unsure: Vec<Info> = Vec::new();
        while let Ok(Some(msg)) = stream.message().await {
            for info in msg.info {
                let ours = keys
                    .iter()
                    .filter_map(|k| info.labels.get(k))
                    .any(|repos| repos.split(',').any(|r| r == self.repository));
                let recent = info
                    .updated_at
                    .as_ref()
                    .and_then(|t| SystemTime::try_from(*t).ok())
                    .is_some_and(|t| t + std::time::Duration::from_secs(2) >= self.started);
                // containerd 1.6 reports no update time for these (year 1),
                // so a manifest also counts when it refers to a blob being
                // written now (its `containerd.io/gc.ref.content.*` labels).
                let writing = info
                    .labels
                    .iter()
                    .any(|(k, v)| k.starts_with(GC_REF_PREFIX) && active.contains_key(v));
                if ours && info.size < MAX_MANIFEST_BYTES {
                    if recent || writing {
                        candidates.push(info);
                    } else if unsure.len() < MAX_UNSURE_MANIFESTS {
                        unsure.push(info);
                    }
                }
            }
        }
        candidates.sort_by_key(|i| std::cmp::Reverse(i.updated_at.map(|t| (t.seconds, t.nanos))));
        for info in candidates {
            if let Some(raw) = self.read(&info.digest).await
                && let Some(blobs) = manifest_blobs(&raw)
            {
                return Some(blobs);
            }
        }
        // containerd 1.7 reports no update time either, and with
        // `discard_unpacked_layers` it labels a manifest with no layer
        // references: a manifest of this repository is the pull's when
        // one of its own blobs is being written now.
        for info in unsure {
            if let Some(raw) = self.read(&info.digest).await
                && let Some(blobs) = manifest_blobs(&raw)
                && blobs.iter().any(|b| active.contains_key(&b.digest))
            {
                return Some(blobs);
            }
        }
        None
    }

    async fn read(&mut self, digest: &str) -> Option<Vec<u8>> {
        let mut stream = self
            .client
            .read(namespaced(ReadContentRequest {
                digest: digest.to_string(),
                offset: 0,
                size: 0,
            }))
            .await
            .ok()?
            .into_inner();
        let mut out = Vec::new();
        while let Ok(Some(chunk)) = stream.message().await {
            out.extend_from_slice(&chunk.data);
            if out.len() as i64 > MAX_MANIFEST_BYTES {
                return None;
            }
        }
        Some(out)
    }
}

impl PullProbe for Probe {
    fn sample(&mut self, alone: bool) -> impl Future<Output = Option<i32>> + Send {
        Probe::sample(self, alone)
    }

    fn ingests(&self) -> &[String] {
        Probe::ingests(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(d: &str, size: u64) -> Blob {
        Blob {
            digest: d.into(),
            size,
        }
    }

    #[test]
    fn source_label_keys_with_and_without_the_port() {
        let p = SOURCE_LABEL_PREFIX;
        let cases: &[(&str, &[&str])] = &[
            ("docker.io", &["docker.io"]),
            ("127.0.0.1:5000", &["127.0.0.1:5000", "127.0.0.1"]),
            ("reg.example:443", &["reg.example:443", "reg.example"]),
            ("[::1]:5000", &["[::1]:5000", "[::1]"]),
            ("[::1]", &["[::1]"]),
            ("host:", &["host:"]),
            ("host:abc", &["host:abc"]),
        ];
        for (registry, want) in cases {
            let want: Vec<String> = want.iter().map(|h| format!("{p}{h}")).collect();
            assert_eq!(source_label_keys(registry), want, "{registry}");
        }
    }

    #[test]
    fn ingests_of_a_pull() {
        let refs = || {
            vec![
                ("layer-sha256:a".to_string(), "sha256:a".to_string()),
                ("layer-sha256:z".to_string(), "sha256:z".to_string()),
            ]
        };
        let blobs = [blob("sha256:c", 1), blob("sha256:a", 2)];
        assert_eq!(
            ingests_of_pull(refs(), Some(&blobs)),
            vec!["layer-sha256:a".to_string()]
        );
        assert!(ingests_of_pull(refs(), None).is_empty());
        assert!(ingests_of_pull(Vec::new(), Some(&blobs)).is_empty());
    }

    #[test]
    fn percent_table() {
        let blobs = [blob("c", 100), blob("l1", 400), blob("l2", 500)];
        let cases: &[(&[bool], &[(&str, u64)], i32)] = &[
            (&[false, false, false], &[], 0),
            (&[true, false, false], &[], 10),
            (&[true, false, false], &[("l1", 200)], 30),
            (&[true, true, false], &[("l2", 250)], 75),
            (&[true, true, true], &[], 99),
            (&[false, false, false], &[("l1", 10_000)], 40),
        ];
        for (committed, active, want) in cases {
            let active = active.iter().map(|(d, o)| (d.to_string(), *o)).collect();
            assert_eq!(percent(&blobs, committed, &active), *want, "{committed:?}");
        }
        assert_eq!(percent(&[], &[], &BTreeMap::new()), 0);
    }

    #[test]
    fn ingest_refs_name_their_digest() {
        assert_eq!(digest_of_ref("layer-sha256:abc"), "sha256:abc");
        assert_eq!(digest_of_ref("manifest-sha256:def"), "sha256:def");
        assert_eq!(digest_of_ref("some-other-ref"), "some-other-ref");
    }

    #[test]
    fn ingests_alone() {
        assert_eq!(percent_of_ingests(&[]), None);
        assert_eq!(percent_of_ingests(&[(50, 100)]), Some(50));
        assert_eq!(percent_of_ingests(&[(100, 100), (0, 100)]), Some(50));
        assert_eq!(percent_of_ingests(&[(100, 100)]), Some(99));
    }

    #[test]
    fn reads_manifests_not_indexes_or_configs() {
        let m = br#"{"schemaVersion":2,"config":{"digest":"sha256:c","size":10},"layers":[{"digest":"sha256:a","size":5},{"digest":"sha256:b","size":7}]}"#;
        let blobs = manifest_blobs(m).expect("manifest");
        assert_eq!(blobs.iter().map(|b| b.size).sum::<u64>(), 22);
        assert!(manifest_blobs(br#"{"manifests":[]}"#).is_none());
        assert!(manifest_blobs(br#"{"architecture":"amd64"}"#).is_none());
        assert!(manifest_blobs(b"not json").is_none());
    }
}
