//! Peace with Eraser (AKS Image Cleaner): with `--eraser-namespace` set,
//! one ConfigMap there, `nodeimage-pinned`, labelled
//! `eraser.sh/exclude.list=true`, lists the images nodeimage pins, so
//! Eraser's "remove all unused", which ignores CRI's pinned flag, leaves
//! them on the nodes (docs/install.md, "Image cleaners"). The list is `plan`'s;
//! it is written when it changes, looked at every 30 s.

pub mod plan;

use crate::cluster::watch::Synced;
use crate::runtime::context::Context;
use crate::runtime::lifecycle;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use nodeimage_api::NodeImage;
use std::time::Duration;
use tokio::sync::watch as signal;

/// The ConfigMap's name.
pub const NAME: &str = "nodeimage-pinned";
/// How often the list is computed again.
const INTERVAL: Duration = Duration::from_secs(30);
/// Field manager of the ConfigMap's server-side applies.
const MANAGER: &str = "nodeimage-controller";

/// Keeps the exclusion list up to date until `stop` turns true; returns at
/// once when no Eraser namespace is set.
pub async fn run(
    ctx: Context,
    nodeimages: Store<NodeImage>,
    synced: Synced,
    stop: signal::Receiver<bool>,
) {
    let Some(namespace) = ctx.eraser_namespace.clone() else {
        return;
    };
    tracing::info!(%namespace, configmap = NAME, "keeping Eraser's exclusion list of pinned images");
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    // Checked at start (lib.rs); an error here cannot happen.
    let always = plan::always(&ctx.eraser_also_exclude).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "--eraser-also-exclude: left out");
        Vec::new()
    });
    let mut written: Option<plan::Excluded> = None;
    let stopped = lifecycle::stopped(stop);
    tokio::pin!(stopped);
    loop {
        if synced.get() {
            let list = plan::excluded(nodeimages.state().iter(), &always);
            if written.as_ref() != Some(&list) {
                match write(&api, &list).await {
                    Ok(()) => {
                        tracing::info!(%namespace, references = list.references.len(), left_out = list.left_out, "Eraser exclusion list written");
                        written = Some(list);
                    }
                    Err(e) => {
                        tracing::warn!(%namespace, error = %e, "cannot write Eraser's exclusion list; trying again");
                    }
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(INTERVAL) => {}
            _ = &mut stopped => return,
        }
    }
}

/// The ConfigMap for `list`, as Eraser reads an exclusion list.
fn config_map(list: &plan::Excluded) -> serde_json::Value {
    let excluded = serde_json::json!({ "excluded": list.references }).to_string();
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": NAME,
            "labels": {
                "eraser.sh/exclude.list": "true",
                "app.kubernetes.io/managed-by": "nodeimage",
            },
            "annotations": {
                "nodeimage.dev/left-out": list.left_out.to_string(),
            },
        },
        "data": { "nodeimage-pinned.json": excluded },
    })
}

async fn write(api: &Api<ConfigMap>, list: &plan::Excluded) -> Result<(), kube::Error> {
    let params = PatchParams::apply(MANAGER).force();
    api.patch(NAME, &params, &Patch::Apply(config_map(list)))
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_map_is_what_eraser_reads() {
        let cm = config_map(&plan::Excluded {
            references: vec!["docker.io/library/nginx:1.25".into()],
            left_out: 2,
        });
        assert_eq!(cm["metadata"]["labels"]["eraser.sh/exclude.list"], "true");
        let data = cm["data"]["nodeimage-pinned.json"]
            .as_str()
            .unwrap_or_default();
        let parsed: serde_json::Value = serde_json::from_str(data).unwrap_or_default();
        assert_eq!(
            parsed,
            serde_json::json!({"excluded": ["docker.io/library/nginx:1.25"]})
        );
        assert_eq!(cm["metadata"]["annotations"]["nodeimage.dev/left-out"], "2");
    }
}
