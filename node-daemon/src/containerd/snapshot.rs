//! Reading the upgrade tool from an image's unpacked snapshot, for a
//! runtime that deletes layer blobs once they are unpacked (containerd's
//! `discard_unpacked_layers`, set on EKS, GKE and Talos). containerd's
//! unpacker labels the image's config blob, which it keeps, with the
//! snapshot it made (`containerd.io/gc.ref.snapshot.<snapshotter>` = the
//! chain ID). The daemon makes a read-only view of that snapshot under a
//! lease of its own (the garbage collector neither removes the view while
//! it is read nor keeps one a killed daemon left for ever), reads the
//! view's directories as overlayfs would merge them ([`super::overlay`])
//! without mounting anything, then removes the view and the lease.

use super::cri::namespaced;
use super::overlay::{self, HostLayers, LookupError, MountError, OpaqueXattr};
use containerd_client::services::v1::content_client::ContentClient;
use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::snapshots::snapshots_client::SnapshotsClient;
use containerd_client::services::v1::snapshots::{RemoveSnapshotRequest, ViewSnapshotRequest};
use containerd_client::services::v1::{CreateRequest, DeleteRequest, InfoRequest};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use tonic::transport::Channel;

/// Prefix of the daemon's view keys and their leases' names.
const VIEW_PREFIX: &str = "nodeimage-upgrade-view-";
/// How long a view's lease lasts if the daemon dies before removing it.
const VIEW_LEASE_FOR: SignedDuration = SignedDuration::from_hours(1);
/// containerd's label that makes its garbage collector drop a lease.
const EXPIRE_LABEL: &str = "containerd.io/gc.expire";
/// The lease's node, since several test daemons share one containerd.
const NODE_LABEL: &str = "nodeimage.dev/node";
/// The capability overlayfs' `trusted.*` attributes need to be seen.
const CAP_SYS_ADMIN: u32 = 21;

/// Why the tool could not be read from the image's unpacked snapshot.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// A call to containerd failed.
    #[error("containerd: {action}: {message}")]
    Containerd {
        /// What the daemon asked for.
        action: String,
        /// containerd's answer.
        message: String,
    },
    /// The config blob names no snapshot.
    #[error(
        "the image's config {config} names no unpacked snapshot (no containerd.io/gc.ref.snapshot.<snapshotter> label)"
    )]
    NotUnpacked {
        /// The config blob's digest.
        config: String,
    },
    /// The view is not a plain directory list.
    #[error("snapshotter {snapshotter}: {source}")]
    Mount {
        /// The snapshotter asked.
        snapshotter: String,
        /// What its mounts are.
        source: MountError,
    },
    /// A directory of the view is not in the daemon's filesystem.
    #[error(
        "{} is not visible to the daemon: containerd's root{} must be mounted into the daemon's pod at the same path (Helm chart value daemon.containerdRoot)",
        path.display(),
        root.as_ref().map(|r| format!(" {}", r.display())).unwrap_or_default()
    )]
    NotVisible {
        /// The snapshot's directory.
        path: PathBuf,
        /// containerd's root holding it, when the path shows it.
        root: Option<PathBuf>,
    },
    /// overlayfs' opaque markers cannot be seen.
    #[error(
        "the daemon lacks CAP_SYS_ADMIN, without which overlayfs' trusted.overlay.opaque markers are invisible (the Helm chart runs it privileged when daemon.upgrades.enabled is set)"
    )]
    NoCapability,
    /// The lookup failed (the image lacks the tool, or a directory could not
    /// be read).
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// Reading the tool or writing its copy failed.
    #[error("copying {} to {}: {source}", from.display(), to.display())]
    Copy {
        /// The tool in the snapshot.
        from: PathBuf,
        /// The daemon's copy.
        to: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// The blocking task that reads the snapshot failed.
    #[error("the snapshot reading task failed: {0}")]
    Task(String),
}

/// Where the tool was read.
#[derive(Debug, Clone)]
pub struct Source {
    /// The snapshotter.
    pub snapshotter: String,
    /// The image's chain ID (the snapshot's name).
    pub chain_id: String,
    /// The snapshot directory holding the tool.
    pub dir: PathBuf,
}

fn containerd(action: impl Into<String>, s: &tonic::Status) -> SnapshotError {
    SnapshotError::Containerd {
        action: action.into(),
        message: s.message().to_string(),
    }
}

/// A unique view name: std seeds each `RandomState` randomly, so no crate is needed.
fn view_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    h.write_u128(nanos);
    format!("{VIEW_PREFIX}{:016x}", h.finish())
}

/// A request in CRI's namespace whose new resources `lease` holds.
fn leased<T>(msg: T, lease: &str) -> Result<tonic::Request<T>, SnapshotError> {
    let mut req = namespaced(msg);
    let value = lease.parse().map_err(|_| SnapshotError::Containerd {
        action: format!("naming lease {lease}"),
        message: "not a valid header value".into(),
    })?;
    req.metadata_mut().insert("containerd-lease", value);
    Ok(req)
}

/// Copies `path` of the image whose config blob is `config` from its snapshot to `dest`.
pub async fn extract(
    channel: Channel,
    node: &str,
    config: &str,
    path: &str,
    dest: &Path,
) -> Result<Source, SnapshotError> {
    let info = ContentClient::new(channel.clone())
        .info(namespaced(InfoRequest {
            digest: config.to_string(),
        }))
        .await
        .map_err(|s| containerd(format!("reading the record of config {config}"), &s))?
        .into_inner()
        .info
        .unwrap_or_default();
    let refs = overlay::snapshot_refs(&info.labels);
    let mut first_error = None;
    for (snapshotter, chain_id) in refs {
        match from_view(channel.clone(), node, &snapshotter, &chain_id, path, dest).await {
            Ok(dir) => {
                return Ok(Source {
                    snapshotter,
                    chain_id,
                    dir,
                });
            }
            // The image lacks the tool: another snapshotter's copy does too.
            Err(e @ SnapshotError::Lookup(LookupError::Image(_))) => return Err(e),
            Err(e) => {
                tracing::warn!(snapshotter, chain_id, error = %e, "cannot read the image's unpacked snapshot");
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| SnapshotError::NotUnpacked {
        config: config.to_string(),
    }))
}

/// Reads `path` through a leased read-only view of `chain_id`, removed whatever happens.
async fn from_view(
    channel: Channel,
    node: &str,
    snapshotter: &str,
    chain_id: &str,
    path: &str,
    dest: &Path,
) -> Result<PathBuf, SnapshotError> {
    let id = view_id();
    let mut leases = LeasesClient::new(channel.clone());
    let mut labels = HashMap::from([(NODE_LABEL.to_string(), node.to_string())]);
    if let Ok(at) = Timestamp::now().checked_add(VIEW_LEASE_FOR) {
        labels.insert(EXPIRE_LABEL.to_string(), at.to_string());
    }
    leases
        .create(namespaced(CreateRequest {
            id: id.clone(),
            labels,
        }))
        .await
        .map_err(|s| containerd(format!("creating lease {id}"), &s))?;
    let mut snapshots = SnapshotsClient::new(channel);
    let read = async {
        let req = leased(
            ViewSnapshotRequest {
                snapshotter: snapshotter.to_string(),
                key: id.clone(),
                parent: chain_id.to_string(),
                labels: HashMap::new(),
            },
            &id,
        )?;
        let mounts = snapshots
            .view(req)
            .await
            .map_err(|s| {
                containerd(
                    format!("viewing snapshot {chain_id} of snapshotter {snapshotter}"),
                    &s,
                )
            })?
            .into_inner()
            .mounts;
        let layers = overlay::view_layers(&mounts).map_err(|source| SnapshotError::Mount {
            snapshotter: snapshotter.to_string(),
            source,
        })?;
        tracing::debug!(view = %id, snapshotter, dirs = layers.dirs.len(), "reading a view of the image's snapshot");
        let (path, dest) = (path.to_string(), dest.to_path_buf());
        tokio::task::spawn_blocking(move || copy_from(&layers, &path, &dest))
            .await
            .map_err(|e| SnapshotError::Task(e.to_string()))?
    };
    let result = read.await;
    let removed = snapshots
        .remove(namespaced(RemoveSnapshotRequest {
            snapshotter: snapshotter.to_string(),
            key: id.clone(),
        }))
        .await;
    if let Err(s) = removed
        && s.code() != tonic::Code::NotFound
    {
        tracing::warn!(view = %id, snapshotter, error = %s.message(), "cannot remove the snapshot view; its lease's end lets the garbage collector remove it");
    }
    if let Err(s) = leases
        .delete(namespaced(DeleteRequest {
            id: id.clone(),
            sync: false,
        }))
        .await
    {
        tracing::warn!(lease = %id, error = %s.message(), "cannot end the snapshot view's lease; it expires on its own");
    }
    result
}

/// Copies `path` from the view's directories to `dest` (blocking); returns the one holding it.
fn copy_from(layers: &HostLayers, path: &str, dest: &Path) -> Result<PathBuf, SnapshotError> {
    if layers.dirs.len() > 1 && layers.xattr == OpaqueXattr::Trusted {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if overlay::has_capability(&status, CAP_SYS_ADMIN) == Some(false) {
            return Err(SnapshotError::NoCapability);
        }
    }
    for dir in &layers.dirs {
        match std::fs::symlink_metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(SnapshotError::NotVisible {
                    path: dir.clone(),
                    root: overlay::containerd_root(dir),
                });
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(SnapshotError::NotVisible {
                    path: dir.clone(),
                    root: overlay::containerd_root(dir),
                });
            }
            Err(source) => {
                return Err(LookupError::Io {
                    path: dir.clone(),
                    source,
                }
                .into());
            }
        }
    }
    let found = overlay::find(layers, path)?;
    let from = layers.host_path(found.layer, &found.path);
    let copy_error = |source| SnapshotError::Copy {
        from: from.clone(),
        to: dest.to_path_buf(),
        source,
    };
    // The lookup resolved every link inside the image; a link here now
    // would point into the host.
    let mut src = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&from)
        .map_err(copy_error)?;
    if !src.metadata().map_err(copy_error)?.is_file() {
        return Err(copy_error(std::io::Error::other("not a regular file")));
    }
    let mut out = std::fs::File::create(dest).map_err(copy_error)?;
    std::io::copy(&mut src, &mut out).map_err(copy_error)?;
    out.sync_all().map_err(copy_error)?;
    Ok(layers.dirs[found.layer].clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn view_ids_differ_and_are_valid_names() {
        let a = view_id();
        let b = view_id();
        assert_ne!(a, b);
        for id in [a, b] {
            assert!(id.starts_with(VIEW_PREFIX), "{id}");
            // containerd's identifiers: letters, digits, `-`; at most 76.
            assert!(id.len() <= 76, "{id}");
            assert!(
                id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'),
                "{id}"
            );
            assert!(leased((), &id).is_ok());
        }
    }

    #[test]
    fn says_which_path_and_chart_value_when_not_mounted() {
        let layers = HostLayers {
            dirs: vec![PathBuf::from(
                "/nonexistent-nodeimage/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/7/fs",
            )],
            xattr: OpaqueXattr::Trusted,
        };
        let e = copy_from(
            &layers,
            "usr/local/bin/keadm",
            Path::new("/nonexistent-out"),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert_eq!(
            e,
            "/nonexistent-nodeimage/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/7/fs is not visible to the daemon: containerd's root /nonexistent-nodeimage/var/lib/containerd must be mounted into the daemon's pod at the same path (Helm chart value daemon.containerdRoot)"
        );
    }
}
