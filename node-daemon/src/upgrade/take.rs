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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fake::{Call, FakeRuntime};
    use std::os::unix::fs::PermissionsExt;

    const IMAGE: &str = "127.0.0.1:5000/keadm:v1.2.0";

    fn settings(work_dir: &Path) -> Settings {
        Settings {
            enabled: true,
            tool_path: "usr/local/bin/keadm".into(),
            work_dir: work_dir.to_path_buf(),
            version_source: super::super::version::VersionSource::Kubelet,
            exec_prefix: vec![],
            node_name: "n1".into(),
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// The tool comes out of the image through the seam into the job's
    /// directory, executable; a tool the image lacks, or a runtime that
    /// cannot read images (CRI alone), fails with the runtime's reason and
    /// leaves no partial file behind.
    #[tokio::test]
    async fn the_tool_is_read_out_of_the_image_through_the_seam() {
        let dir = std::env::temp_dir().join(format!("ni-take-{}", std::process::id()));
        let s = settings(&dir);
        let up = TagUpgrade {
            version: "v1.2.0".into(),
            job: "up".into(),
            await_confirmation: false,
            image_digests: None,
        };
        let image = ImageRef::parse(IMAGE).expect("a reference");
        tokio::fs::create_dir_all(s.job_dir("up"))
            .await
            .expect("the job's directory");

        let rt = FakeRuntime::default();
        rt.present(IMAGE)
            .file(IMAGE, "usr/local/bin/keadm", b"#!/bin/sh\n");
        let deps = Deps::for_tests(rt.clone(), 1);
        let tool = take_tool(&deps, &s, &up, &image).await.expect("the tool");
        assert_eq!(tool, s.job_dir("up").join("keadm"));
        let meta = std::fs::metadata(&tool).expect("the tool's file");
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        assert_eq!(std::fs::read(&tool).expect("read"), b"#!/bin/sh\n");
        let copied = Call::CopyFromImage(IMAGE.into(), "usr/local/bin/keadm".into());
        assert!(rt.calls().contains(&copied), "{:?}", rt.calls());

        let partial = s.job_dir("up").join(".keadm.partial");
        let lacking = FakeRuntime::default();
        lacking.present(IMAGE);
        let deps = Deps::for_tests(lacking, 1);
        let err = take_tool(&deps, &s, &up, &image)
            .await
            .expect_err("no tool");
        assert!(err.contains("not found in the image"), "{err}");
        assert!(!partial.exists());

        let cri = FakeRuntime::default();
        cri.present(IMAGE).cri_only();
        let deps = Deps::for_tests(cri, 1);
        let err = take_tool(&deps, &s, &up, &image)
            .await
            .expect_err("CRI alone");
        assert!(err.contains("CRI alone"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
