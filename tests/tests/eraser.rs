//! Peace with Eraser (issue 51): Eraser's own remover (v1.4.1, built from
//! source by tests/eraser/build.sh) runs its "remove all unused" against a
//! containerd where nodeimage pinned an image a tag entry still wants and
//! where an unpinned, unused image lies. Eraser ignores CRI's pinned flag;
//! with the exclusion list the controller keeps (`--eraser-namespace`,
//! ConfigMap `nodeimage-pinned`), mounted as Eraser mounts such lists, the
//! pinned image stays and the other goes.
//!
//! Eraser's remover dials a fixed socket path, /run/cri/cri.sock: the test
//! links it to the containerd of the third simulated node (2.x, which
//! honours pins; the machine's 1.6 does not), whose unused images it may
//! all remove, so it runs alone, after the other end-to-end tests, in its
//! own step of tests/run-all.sh (its name starts with `eraser_`, which the
//! main e2e step skips).

use nodeimage_tests::nodeimage as ni;
use nodeimage_tests::registry::Registry;
use nodeimage_tests::{Cleanup, Cluster, cri, unique, wait_for};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);
/// The namespace tests/nodeimage.sh gives the shared controller's
/// `--eraser-namespace`.
const ERASER_NS: &str = "nodeimage-eraser-e2e";
/// Where Eraser's remover looks for the runtime (a constant in its source).
const ERASER_CRI: &str = "/run/cri/cri.sock";
/// The simulated node whose containerd the test lends Eraser (2.x).
const NODE: usize = 2;

fn remover(c: &Cluster) -> PathBuf {
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

#[test]
#[ignore = "needs the local cluster and Eraser's remover (tests/run-all.sh)"]
fn eraser_remove_all_unused_leaves_what_nodeimage_pins() {
    let c = Cluster::load();
    let remover = remover(&c);
    let dir = tempfile::Builder::new()
        .prefix("ni-eraser-")
        .tempdir_in("/tmp")
        .expect("a temporary directory");
    let node = c.nodes()[NODE].clone();
    let socket = c.socket(NODE);
    let reg = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let push = |what: &str| {
        reg.push_image(&unique(what), Some("v1"), 4096)
            .expect("push a test image")
    };
    let (wanted, stray) = (push("e2e-eraser-wanted"), push("e2e-eraser-stray"));
    let mut cleanup = Cleanup::default();
    {
        let (c, node, names) = (c.clone(), node.clone(), vec![wanted.name.clone()]);
        let (socket, refs) = (socket.clone(), [wanted.reference(), stray.reference()]);
        cleanup.defer(
            "the tag entry, the images and the CRI socket link",
            move || {
                ni::remove_images(&c, &node, &names);
                for r in &refs {
                    let _ = cri::remove_image(&socket, r);
                }
                let _ = std::fs::remove_file(ERASER_CRI);
            },
        );
    }
    // nodeimage pre-pulls and pins `wanted` for a tag entry; `stray` is
    // pulled straight through CRI (nobody's, unpinned).
    ni::set_image(&c, &node, &wanted.name, json!({"tags": [{"tag": "v1"}]}));
    let tag = ni::Tag {
        ni: &node,
        image: &wanted.name,
        tag: "v1",
    };
    ni::wait_phase(&c, tag, 0, "Succeeded", TIMEOUT);
    cri::pull(&socket, &stray.reference(), None).expect("CRI pull");
    let pinned = |r: &str| {
        cri::image_status(&socket, r)
            .expect("CRI ImageStatus")
            .map(|i| i.pinned)
    };
    wait_for("the daemon's pin on the wanted image", TIMEOUT, || {
        (pinned(&wanted.reference()) == Some(true)).then_some(())
    });
    assert_eq!(
        pinned(&stray.reference()),
        Some(false),
        "the stray image is not pinned"
    );

    // The controller's list names the wanted image (it looks every 30 s).
    let list = wait_for(
        "the wanted image in nodeimage's Eraser list",
        TIMEOUT,
        || {
            let cm = c.get_json(&["configmap", "nodeimage-pinned", "-n", ERASER_NS])?;
            let data = cm["data"]["nodeimage-pinned.json"].as_str()?.to_string();
            let v: Value = serde_json::from_str(&data).ok()?;
            let listed = v["excluded"]
                .as_array()?
                .iter()
                .any(|r| r.as_str() == Some(&wanted.reference()));
            listed.then_some(data)
        },
    );

    // Mounted as Eraser mounts an exclusion ConfigMap: a directory
    // `exclude-<name>` in its working directory, one file per key.
    let work = dir.path().join("eraser");
    std::fs::create_dir_all(work.join("exclude-nodeimage-pinned")).expect("mkdir");
    std::fs::write(
        work.join("exclude-nodeimage-pinned/nodeimage-pinned.json"),
        &list,
    )
    .expect("write the exclusion list");
    std::fs::write(work.join("imagelist.json"), r#"["*"]"#).expect("write the image list");
    std::fs::create_dir_all("/run/cri").expect("mkdir /run/cri");
    let _ = std::fs::remove_file(ERASER_CRI);
    std::os::unix::fs::symlink(&socket, ERASER_CRI).expect("link Eraser's CRI socket");
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(&remover)
        .arg(format!(
            "-imagelist={}",
            work.join("imagelist.json").display()
        ))
        .current_dir(&work)
        .output()
        .expect("run Eraser's remover");
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "Eraser's remover failed: {log}");
    assert!(
        log.contains("prune successful"),
        "Eraser's prune ran: {log}"
    );

    assert!(
        cri::image_status(&socket, &wanted.reference())
            .expect("CRI ImageStatus")
            .is_some(),
        "Eraser removed the image nodeimage pins for a live entry: {log}"
    );
    assert!(
        cri::image_status(&socket, &stray.reference())
            .expect("CRI ImageStatus")
            .is_none(),
        "Eraser left the unused, unpinned image: {log}"
    );
    drop(cleanup);
}
