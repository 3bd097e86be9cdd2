//! Eraser's remover (github.com/eraser-dev/eraser, built from source by
//! tests/eraser/build.sh) as a test runs it: "remove all unused" against
//! one containerd, with nodeimage's exclusion list mounted the way Eraser
//! mounts an exclusion ConfigMap. Used by tests/tests/eraser.rs (a
//! simulated node) and real_kubelet.rs (a kubelet node).

use crate::{Cluster, wait_for};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The namespace tests/nodeimage.sh gives the shared controller's
/// `--eraser-namespace`.
pub const ERASER_NS: &str = "nodeimage-eraser-e2e";
/// Where Eraser's remover looks for the runtime (a constant in its source).
pub const ERASER_CRI: &str = "/run/cri/cri.sock";

/// The remover's binary: `NODEIMAGE_ERASER_REMOVER`, or the one
/// tests/eraser/build.sh built; panics naming the build if missing.
pub fn remover(c: &Cluster) -> PathBuf {
    let path = std::env::var("NODEIMAGE_ERASER_REMOVER")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(c.var("NODEIMAGE_STATE")).join("bin/eraser-remover"));
    assert!(
        path.exists(),
        "{} is missing: build it with tests/eraser/build.sh",
        path.display()
    );
    path
}

/// The controller's exclusion list once it names `reference` (it looks
/// every 30 s): the ConfigMap's JSON, as Eraser would read it.
pub fn exclusion_list_naming(c: &Cluster, reference: &str, timeout: Duration) -> String {
    wait_for(
        &format!("{reference} in nodeimage's Eraser list"),
        timeout,
        || {
            let cm = c.get_json(&["configmap", "nodeimage-pinned", "-n", ERASER_NS])?;
            let data = cm["data"]["nodeimage-pinned.json"].as_str()?.to_string();
            let v: Value = serde_json::from_str(&data).ok()?;
            let listed = v["excluded"]
                .as_array()?
                .iter()
                .any(|r| r.as_str() == Some(reference));
            listed.then_some(data)
        },
    )
}

/// Runs the remover's "remove all unused" (image list `["*"]`) against the
/// containerd at `socket` with `list` mounted as Eraser mounts an exclusion
/// ConfigMap (a directory `exclude-<name>` in its working directory, one
/// file per key); returns its log. Links [`ERASER_CRI`] to `socket` for the
/// run (the caller runs alone on that path) and removes the link after.
pub fn remove_all_unused(remover: &Path, socket: &Path, list: &str, dir: &Path) -> String {
    let work = dir.join("eraser");
    std::fs::create_dir_all(work.join("exclude-nodeimage-pinned")).expect("mkdir");
    std::fs::write(
        work.join("exclude-nodeimage-pinned/nodeimage-pinned.json"),
        list,
    )
    .expect("write the exclusion list");
    std::fs::write(work.join("imagelist.json"), r#"["*"]"#).expect("write the image list");
    std::fs::create_dir_all("/run/cri").expect("mkdir /run/cri");
    let _ = std::fs::remove_file(ERASER_CRI);
    std::os::unix::fs::symlink(socket, ERASER_CRI).expect("link Eraser's CRI socket");
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(remover)
        .arg(format!(
            "-imagelist={}",
            work.join("imagelist.json").display()
        ))
        .current_dir(&work)
        .output();
    let _ = std::fs::remove_file(ERASER_CRI);
    let out = out.expect("run Eraser's remover");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "Eraser's remover failed: {log}");
    assert!(
        log.contains("prune successful"),
        "Eraser's prune ran: {log}"
    );
    log
}
