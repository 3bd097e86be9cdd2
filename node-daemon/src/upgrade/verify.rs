//! The node's check of the upgrade image's digest (NodeUpgradeJob
//! `imageDigestGatter`), after the pull and before anything else: the
//! repository digest the runtime reports for the pulled reference must be
//! the one the entry's `imageDigests` names for this node's architecture
//! (the rule: `nodeimage_api::kubeedge::digest`). The tool is then taken
//! out of the image by that digest, not by its tag, so a tag moved in the
//! meantime cannot swap the tool.

use crate::deps::Deps;
use crate::runtime::ContainerRuntime;
use nodeimage_api::kubeedge::{UpgradeDigests, go_arch};
use nodeimage_api::reference::ImageRef;

/// This node's architecture, as `imageDigestGatter` names them.
pub fn node_arch() -> &'static str {
    go_arch(std::env::consts::ARCH)
}

/// The reference to take the tool from: `image` itself when the entry asks
/// for no digest; `image` pinned to its checked digest when it does; the
/// reason (naming both digests on a mismatch) when the check fails.
pub(super) async fn checked<R: ContainerRuntime>(
    deps: &Deps<R>,
    image: &ImageRef,
    digests: Option<&UpgradeDigests>,
    arch: &str,
) -> Result<ImageRef, String> {
    let Some(digests) = digests else {
        return Ok(image.clone());
    };
    let reference = image.pull_ref();
    let present = deps
        .runtime
        .image_status(&reference)
        .await
        .map_err(|e| format!("cannot read the digest of {reference}: {e}; nothing was run"))?;
    let prefix = format!("{}@", image.name());
    let pulled = present
        .iter()
        .flat_map(|i| i.repo_digests.iter())
        .find_map(|d| d.strip_prefix(prefix.as_str()))
        .ok_or_else(|| {
            format!(
                "the runtime reports no repository digest of {reference}, so it cannot be \
                 checked against imageDigestGatter; nothing was run"
            )
        })?;
    digests.check(arch, &reference, pulled)?;
    tracing::info!(image = %reference, digest = pulled, arch, "upgrade image digest checked");
    Ok(ImageRef {
        tag: None,
        digest: Some(pulled.to_string()),
        ..image.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fake::FakeRuntime;

    const IMAGE: &str = "127.0.0.1:5000/keadm:v1.2.0";

    /// The fake reports `<name>@sha256:manifest` for a present image.
    #[tokio::test]
    async fn the_pulled_digest_must_be_the_expected_one() {
        let rt = FakeRuntime::default();
        rt.present(IMAGE);
        let deps = Deps::for_tests(rt, 1);
        let image = ImageRef::parse(IMAGE).expect("a reference");
        let want = |amd64: &str| UpgradeDigests {
            amd64: Some(amd64.into()),
            ..Default::default()
        };
        let unchecked = checked(&deps, &image, None, "amd64").await;
        assert_eq!(unchecked, Ok(image.clone()));
        let ok = checked(&deps, &image, Some(&want("sha256:manifest")), "amd64").await;
        assert_eq!(
            ok.map(|r| r.pull_ref()),
            Ok("127.0.0.1:5000/keadm@sha256:manifest".to_string())
        );
        let other = checked(&deps, &image, Some(&want("sha256:other")), "amd64").await;
        let why = other.expect_err("a mismatch");
        assert!(
            why.contains("sha256:manifest") && why.contains("sha256:other"),
            "{why}"
        );
        let arm = checked(&deps, &image, Some(&want("sha256:manifest")), "arm64").await;
        assert!(arm.is_err_and(|e| e.contains("no digest for this node's architecture arm64")));
        let missing = ImageRef::parse("127.0.0.1:5000/keadm:v9.9.9").expect("a reference");
        let gone = checked(&deps, &missing, Some(&want("sha256:manifest")), "amd64").await;
        assert!(gone.is_err_and(|e| e.contains("no repository digest")));
    }
}
