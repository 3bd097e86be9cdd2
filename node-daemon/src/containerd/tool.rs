//! Reads one file (the upgrade tool) out of a pulled image without running
//! a container: from its layer blobs in containerd's content store, or,
//! where the runtime discards those once unpacked, from the image's
//! unpacked snapshot.

use super::{Runtime, content, overlay, snapshot};
use crate::upgrade::extract;
use nodeimage_api::reference::ImageRef;
use std::path::Path;
use tonic::transport::Channel;

/// Copies `path` out of the pulled `image` into `dest`.
pub(super) async fn copy_out(
    runtime: &Runtime,
    channel: Channel,
    node: &str,
    image: &ImageRef,
    path: &str,
    dest: &Path,
) -> Result<(), String> {
    let reference = image.pull_ref();
    let digest = match content::image_target(channel.clone(), &reference).await {
        Ok(d) => d,
        Err(e) => {
            // The CRI image's repository digest names the same manifest.
            let present = runtime
                .image_status(&reference)
                .await
                .map_err(|c| c.to_string())?;
            let name = image.name();
            present
                .and_then(|p| {
                    p.repo_digests
                        .iter()
                        .find(|d| d.starts_with(&format!("{name}@")))
                        .and_then(|d| d.split_once('@').map(|(_, d)| d.to_string()))
                })
                .ok_or(e)?
        }
    };
    let img = content::image(channel.clone(), &digest).await?;
    let missing = content::first_missing(channel.clone(), &img.layers).await?;
    let layer = match missing {
        None => match from_layers(channel.clone(), img.layers.clone(), path, dest).await {
            // The runtime discarded a layer while it was read (it removes
            // them a moment after the pull that unpacked them): the
            // unpacked snapshot still has the file.
            Err(e) if content::gone_while_read(&e) => {
                tracing::info!(image = %reference, error = %e, "a layer left containerd's content store while it was read (discarded once unpacked); reading the upgrade tool from the image's unpacked snapshot");
                e
            }
            done => return done,
        },
        Some(layer) => {
            tracing::info!(image = %reference, layer = %layer, "a layer blob is not in containerd's content store (discarded once unpacked); reading the upgrade tool from the image's unpacked snapshot");
            format!("layer {layer} is not in containerd's content store")
        }
    };
    from_snapshot(channel, node, &img.config, &reference, &layer, path, dest).await
}

/// Copies the file out of the image's unpacked snapshot; `why` says why the
/// layers could not be read (kept in the error if this fails too).
async fn from_snapshot(
    channel: Channel,
    node: &str,
    config: &str,
    reference: &str,
    why: &str,
    path: &str,
    dest: &Path,
) -> Result<(), String> {
    match snapshot::extract(channel, node, config, path, dest).await {
        Ok(from) => {
            tracing::info!(image = %reference, snapshotter = %from.snapshotter, snapshot = %from.chain_id, dir = %from.dir.display(), "upgrade tool read from the image's unpacked snapshot");
            Ok(())
        }
        // The image lacks the tool: said as the layers would say it.
        Err(e @ snapshot::SnapshotError::Lookup(overlay::LookupError::Image(_))) => {
            Err(e.to_string())
        }
        Err(e) => Err(format!(
            "{why} (the runtime discards layers once unpacked: discard_unpacked_layers = true), and the image's unpacked snapshot cannot be read: {e}"
        )),
    }
}

/// Copies the file out of the image's layer blobs (top one first) to `tmp`.
async fn from_layers(
    channel: Channel,
    layers: Vec<String>,
    tool_path: &str,
    tmp: &Path,
) -> Result<(), String> {
    let (tool_path, tmp) = (tool_path.to_string(), tmp.to_path_buf());
    let handle = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let _enter = handle.enter();
        let mut out =
            std::fs::File::create(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
        extract::find(
            layers.len(),
            |i| {
                Ok(Box::new(content::blob_reader(channel.clone(), &layers[i]))
                    as Box<dyn std::io::Read>)
            },
            &tool_path,
            &mut out,
        )
        .map_err(|e| e.to_string())?;
        out.sync_all()
            .map_err(|e| format!("writing {}: {e}", tmp.display()))
    })
    .await
    .map_err(|e| format!("extraction task: {e}"))?
}
