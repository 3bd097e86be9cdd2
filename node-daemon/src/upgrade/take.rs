//! Takes the upgrade tool out of the pulled image into the job's work
//! directory, without running a container (the runtime reads it out:
//! `ContainerRuntime::copy_from_image`), and makes it executable.

use super::Settings;
use crate::deps::Deps;
use crate::runtime::ContainerRuntime;
use nodeimage_api::kruise::TagUpgrade;
use nodeimage_api::reference::ImageRef;
use std::path::{Path, PathBuf};

/// Takes the tool out of the pulled image into the job's work directory;
/// returns its path there.
pub(super) async fn take_tool<R: ContainerRuntime>(
    deps: &Deps<R>,
    s: &Settings,
    up: &TagUpgrade,
    image: &ImageRef,
) -> Result<PathBuf, String> {
    let base = Path::new(&s.tool_path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "tool".into());
    let dir = s.job_dir(&up.job);
    let dest = dir.join(&base);
    let tmp = dir.join(format!(".{base}.partial"));
    let found = deps
        .runtime
        .copy_from_image(&s.node_name, image, &s.tool_path, &tmp)
        .await;
    if let Err(e) = found {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(e);
    }
    use std::os::unix::fs::PermissionsExt;
    tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755))
        .await
        .map_err(|e| format!("chmod {}: {e}", tmp.display()))?;
    tokio::fs::rename(&tmp, &dest)
        .await
        .map_err(|e| format!("moving the tool to {}: {e}", dest.display()))?;
    tracing::info!(tool = %dest.display(), image = %image.pull_ref(), "upgrade tool extracted");
    Ok(dest)
}
