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
use nodeimage_tests::{Cleanup, Cluster, cri, eraser, unique, wait_for};
use serde_json::json;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(120);
/// The simulated node whose containerd the test lends Eraser (2.x).
const NODE: usize = 2;

#[test]
#[ignore = "needs the local cluster and Eraser's remover (tests/run-all.sh)"]
fn eraser_remove_all_unused_leaves_what_nodeimage_pins() {
    let c = Cluster::load();
    let remover = eraser::remover(&c);
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
        cleanup.defer("the tag entry and the images", move || {
            ni::remove_images(&c, &node, &names);
            for r in &refs {
                let _ = cri::remove_image(&socket, r);
            }
        });
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

    // The controller's list names the wanted image; Eraser runs with it.
    let list = eraser::exclusion_list_naming(&c, &wanted.reference(), TIMEOUT);
    let log = eraser::remove_all_unused(&remover, &socket, &list, dir.path());

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
