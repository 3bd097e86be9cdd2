//! What keeps a pre-pulled image on the node until its Pod starts, on each
//! runtime of the mixed local cluster (tests/cluster/up.sh gives the nodes
//! different containerd releases and settings): pins that keep kubelet's
//! image GC away while an entry wants the image, and status that stops
//! saying Succeeded when the image leaves anyway, with the image pulled
//! again a bounded number of times. Which node honours pins is read from
//! the node's own containerd (CRI `Version`), not from nodeimage.

use nodeimage_tests::nodeimage::{self as ni, Tag};
use nodeimage_tests::registry::Registry;
use nodeimage_tests::{Cleanup, Cluster, cri, http, wait_for};
use serde_json::json;
use std::time::Duration;

/// Generous limit for a pull or a daemon pass.
const TIMEOUT: Duration = Duration::from_secs(120);

/// Whether a containerd release keeps a pin label set after the pull
/// (1.6.25+, 1.7.10+, 2.x), from its release notes; an oracle of the test's
/// own, independent of the daemon's.
fn honours_pins(runtime: &str, version: &str) -> bool {
    let v = version.trim_start_matches('v');
    let nums: Vec<u64> = v
        .split('.')
        .map(|p| {
            p.chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
        })
        .map(|p| p.parse().unwrap_or(0))
        .collect();
    let part = |i: usize| nums.get(i).copied().unwrap_or(0);
    runtime == "containerd"
        && match (part(0), part(1)) {
            (1, 6) => part(2) >= 25,
            (1, 7) => part(2) >= 10,
            (major, _) => major >= 2,
        }
}

/// Each shared node with its runtime and whether it honours pins.
fn nodes(c: &Cluster) -> Vec<(usize, String, String, bool)> {
    c.nodes()
        .into_iter()
        .enumerate()
        .map(|(i, n)| {
            let (name, version) =
                cri::version(&c.socket(i)).unwrap_or_else(|e| panic!("CRI Version of {n}: {e}"));
            let pins = honours_pins(&name, &version);
            eprintln!("{n}: {name} {version}, pins honoured: {pins}");
            (i, n, format!("{name} {version}"), pins)
        })
        .collect()
}

fn daemon_metrics(c: &Cluster, i: usize) -> String {
    http::scrape(&c.daemon_readyz(i).replace("/readyz", "/metrics"))
}

fn pinned(c: &Cluster, i: usize, reference: &str) -> Option<bool> {
    cri::image_status(&c.socket(i), reference)
        .ok()
        .flatten()
        .map(|img| img.pinned)
}

/// Issue 29: on every node whose containerd honours pins, an image a tag
/// entry wants is pinned once pulled (CRI reports it pinned, which is what
/// kubelet's GC reads), and unpinned, not removed, when the entry leaves
/// the spec; a node whose containerd ignores pins says so in its runtime
/// metric and never reports the image pinned.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn wanted_images_are_pinned_and_unpinned_when_no_entry_wants_them() {
    let c = Cluster::load();
    let nodes = nodes(&c);
    assert!(
        nodes.iter().any(|n| n.3),
        "no node of the mixed cluster runs a containerd that honours pins: {nodes:?}"
    );
    let image = Registry::new(&c.var("NODEIMAGE_REGISTRY"))
        .push_image(&nodeimage_tests::unique("e2e-pins"), Some("v1"), 4096)
        .expect("push the test image");
    let reference = image.reference();
    let mut cleanup = Cleanup::default();
    for (i, n, _, _) in &nodes {
        let (c2, n2, name, r, i) = (
            c.clone(),
            n.clone(),
            image.name.clone(),
            reference.clone(),
            *i,
        );
        cleanup.defer(format!("remove {r} from {n}"), move || {
            ni::remove_images(&c2, &n2, &[name]);
            let _ = cri::remove_image(&c2.socket(i), &r);
        });
        ni::set_image(&c, n, &image.name, json!({"tags": [{"tag": "v1"}]}));
    }
    for (i, n, runtime, pins) in &nodes {
        ni::wait_phase(
            &c,
            Tag {
                ni: n,
                image: &image.name,
                tag: "v1",
            },
            0,
            "Succeeded",
            TIMEOUT,
        );
        let info = daemon_metrics(&c, *i);
        let capabilities = info
            .lines()
            .find(|l| l.starts_with("nodeimage_daemon_runtime_info{"))
            .unwrap_or_default()
            .to_string();
        assert_eq!(
            capabilities.contains("pinning"),
            *pins,
            "{n} ({runtime}): the daemon's runtime metric: {capabilities:?}"
        );
        if *pins {
            wait_for(
                &format!("{reference} pinned on {n} ({runtime})"),
                TIMEOUT,
                || (pinned(&c, *i, &reference) == Some(true)).then_some(()),
            );
            let m = daemon_metrics(&c, *i);
            assert!(
                http::metric_value(&m, "nodeimage_daemon_pinned_images").unwrap_or(0.0) >= 1.0
                    && http::metric_value(&m, "nodeimage_daemon_pinned_bytes").unwrap_or(0.0) > 0.0,
                "{n}: pinned images and bytes are counted"
            );
        } else {
            assert_eq!(
                pinned(&c, *i, &reference),
                Some(false),
                "{n} ({runtime}) ignores pins"
            );
        }
    }

    for (_, n, _, _) in &nodes {
        ni::remove_images(&c, n, std::slice::from_ref(&image.name));
    }
    for (i, n, runtime, _) in &nodes {
        wait_for(
            &format!("{reference} unpinned and still present on {n} ({runtime})"),
            TIMEOUT,
            || (pinned(&c, *i, &reference) == Some(false)).then_some(()),
        );
    }
    drop(cleanup);
}

/// Issue 29: an image a Succeeded tag still wants that leaves the node (here
/// `crictl rmi`, as kubelet's GC or a disk clean-up would) is noticed within
/// the daemon's presence check, counted, and pulled again; after the third
/// time the tag fails with the reason instead of fighting for ever.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn an_image_that_leaves_is_pulled_again_then_the_tag_fails() {
    let c = Cluster::load();
    let (i, node) = (0, c.nodes()[0].clone());
    let image = Registry::new(&c.var("NODEIMAGE_REGISTRY"))
        .push_image(&nodeimage_tests::unique("e2e-lost"), Some("v1"), 4096)
        .expect("push the test image");
    let reference = image.reference();
    let mut cleanup = Cleanup::default();
    let (c2, n2, name, r) = (
        c.clone(),
        node.clone(),
        image.name.clone(),
        reference.clone(),
    );
    cleanup.defer(format!("remove {r} from {node}"), move || {
        ni::remove_images(&c2, &n2, &[name]);
        let _ = cri::remove_image(&c2.socket(0), &r);
    });
    let tag = Tag {
        ni: &node,
        image: &image.name,
        tag: "v1",
    };
    let lost = |c: &Cluster| {
        http::metric_value(&daemon_metrics(c, i), "nodeimage_daemon_images_lost_total")
            .unwrap_or(0.0)
    };
    ni::set_image(&c, &node, &image.name, json!({"tags": [{"tag": "v1"}]}));
    ni::wait_phase(&c, tag, 0, "Succeeded", TIMEOUT);
    let before = lost(&c);
    for n in 1..=3 {
        cri::remove_image(&c.socket(i), &reference)
            .expect("remove the image as kubelet's GC would");
        wait_for(&format!("the image pulled again ({n})"), TIMEOUT, || {
            let back = cri::image_status(&c.socket(i), &reference)
                .ok()
                .flatten()
                .is_some();
            (back && lost(&c) >= before + n as f64).then_some(())
        });
        ni::wait_phase(&c, tag, 0, "Succeeded", TIMEOUT);
    }
    let events = ni::events_mentioning(&c, &image.name);
    assert!(
        events.iter().any(|e| e["reason"] == "ImageLost"),
        "an ImageLost event names the image: {events:?}"
    );
    cri::remove_image(&c.socket(i), &reference).expect("remove the image a fourth time");
    // Succeeded until the next presence check sees the image gone.
    let (_, entry) = ni::wait_tag(
        &c,
        tag,
        "Failed after the fourth loss",
        TIMEOUT,
        |t| t["phase"] == "Failed",
        |_| false,
    );
    let message = entry["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("left the node 4 times"),
        "the tag says why it stopped: {entry}"
    );
    assert!(
        cri::image_status(&c.socket(i), &reference)
            .ok()
            .flatten()
            .is_none(),
        "not pulled a fourth time"
    );
    drop(cleanup);
}

/// Issue 29 (any CRI runtime): a daemon forced onto CRI alone
/// (`--runtime-api cri`, what it picks by itself on CRI-O) serves a node
/// through a recording gRPC proxy in front of the last node's containerd:
/// it pulls to Succeeded with the image ID, fails a private image with the
/// common `unauthorized:` reason, says in its runtime metric that it has no
/// progress, resume or pins, and never calls anything but CRI (no
/// containerd content, leases, images or version service), which is all
/// CRI-O serves.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_cri_only_daemon_pulls_and_calls_nothing_but_cri() {
    use nodeimage_tests::grpc_tap::GrpcTap;
    use nodeimage_tests::process::Daemon;
    let c = Cluster::load();
    let last = c.nodes().len() - 1;
    let dir = tempfile::Builder::new()
        .prefix("cri-only")
        .tempdir_in(c.var("NODEIMAGE_STATE"))
        .expect("temp dir");
    let tap =
        GrpcTap::start(&c.socket(last), &dir.path().join("cri.sock")).expect("start the gRPC tap");
    let public = Registry::new(&c.var("NODEIMAGE_REGISTRY"))
        .push_image(&nodeimage_tests::unique("e2e-cri-only"), Some("v1"), 4096)
        .expect("push the public image");
    let private = Registry::with_basic_auth(
        &c.var("NODEIMAGE_AUTH_REGISTRY"),
        &c.var("NODEIMAGE_AUTH_USER"),
        &c.var("NODEIMAGE_AUTH_PASSWORD"),
    )
    .push_image(
        &nodeimage_tests::unique("e2e-cri-only-private"),
        Some("v1"),
        4096,
    )
    .expect("push the private image");
    let node = nodeimage_tests::unique("e2e-cri-only");
    let mut cleanup = Cleanup::default();
    let spec = json!({"images": {
        public.name.clone(): {"tags": [{"tag": "v1"}]},
        private.name.clone(): {"tags": [{"tag": "v1", "pullPolicy": {"backoffLimit": 0}}]},
    }});
    ni::create_fake(&c, &node, &Default::default(), spec);
    let (c2, n2) = (c.clone(), node.clone());
    cleanup.defer(format!("delete NodeImage {node}"), move || {
        ni::delete(&c2, &n2)
    });
    let (c3, r3) = (c.clone(), public.reference());
    cleanup.defer("remove the image from the node", move || {
        let _ = cri::remove_image(&c3.socket(c3.nodes().len() - 1), &r3);
    });
    let daemon = Daemon::start(
        &c,
        &node,
        &tap.socket,
        dir.path(),
        &["--runtime-api", "cri", "--presence-check-seconds", "2"],
    );

    let ok = ni::wait_phase(
        &c,
        Tag {
            ni: &node,
            image: &public.name,
            tag: "v1",
        },
        0,
        "Succeeded",
        TIMEOUT,
    );
    assert_eq!(
        ok["imageID"],
        format!("{}@{}", public.name, public.digest),
        "{ok}"
    );
    let refused = ni::wait_phase(
        &c,
        Tag {
            ni: &node,
            image: &private.name,
            tag: "v1",
        },
        0,
        "Failed",
        TIMEOUT,
    );
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or_default()
            .contains("unauthorized: "),
        "{refused}"
    );
    let metrics = http::scrape(&format!("http://127.0.0.1:{}/metrics", daemon.health_port));
    let info = metrics
        .lines()
        .find(|l| l.starts_with("nodeimage_daemon_runtime_info{"))
        .unwrap_or_default()
        .to_string();
    assert!(
        info.contains("capabilities=\"-\""),
        "no containerd features on CRI alone: {info:?}"
    );
    // A few presence checks run too (every 2 s).
    std::thread::sleep(Duration::from_secs(5));
    let paths = tap.paths();
    let cri_calls = [
        "/runtime.v1.ImageService/PullImage",
        "/runtime.v1.ImageService/ImageStatus",
        "/runtime.v1.RuntimeService/Version",
    ];
    for call in cri_calls {
        assert!(
            paths.iter().any(|p| p == call),
            "{call} went through the tap: {paths:?}"
        );
    }
    let other: Vec<&String> = paths
        .iter()
        .filter(|p| !p.starts_with("/runtime.v1."))
        .collect();
    assert!(other.is_empty(), "calls beyond CRI: {other:?}");
    drop(daemon);
    drop(cleanup);
}

/// One image of the budget test: its name, reference and CRI size.
struct Sized {
    name: String,
    reference: String,
    size: u64,
}

/// The budget scenario's start: a node whose containerd honours pins, its
/// index and image filesystem size, and three images pulled there (old,
/// mid, new), each removed from the node by `cleanup`.
fn budget_images(c: &Cluster, cleanup: &mut Cleanup) -> (usize, f64, Vec<Sized>) {
    let Some((i, n, runtime, _)) = nodes(c).into_iter().rev().find(|n| n.3) else {
        panic!("no node of the mixed cluster runs a containerd that honours pins");
    };
    let socket = c.socket(i);
    let capacity = wait_for(&format!("{n}'s image filesystem size"), TIMEOUT, || {
        http::metric_value(
            &daemon_metrics(c, i),
            "nodeimage_daemon_image_fs_capacity_bytes",
        )
        .filter(|v| *v > 0.0)
    });
    let registry = Registry::new(&c.var("NODEIMAGE_REGISTRY"));
    let images: Vec<Sized> = ["old", "mid", "new"]
        .iter()
        .map(|age| {
            let pushed = registry
                .push_image(
                    &nodeimage_tests::unique(&format!("e2e-budget-{age}")),
                    Some("v1"),
                    256 << 10,
                )
                .expect("push the test image");
            let reference = pushed.reference();
            let (s, r) = (socket.clone(), reference.clone());
            cleanup.defer(format!("remove {r} from {n}"), move || {
                nodeimage_tests::prepull::remove_from_nodes(&[s], &r)
            });
            cri::pull(&socket, &reference, None).expect("pull the test image");
            let size = cri::image_status(&socket, &reference)
                .ok()
                .flatten()
                .map(|img| img.size)
                .unwrap_or_default();
            assert!(size > 0, "CRI reports the size of {reference}");
            Sized {
                name: pushed.name.clone(),
                reference,
                size,
            }
        })
        .collect();
    eprintln!("{n} ({runtime}): image filesystem {capacity} B");
    (i, capacity, images)
}

/// Issue 39: with a pin budget too small for every wanted image, the
/// oldest entries' images are pinned and the newest is not: its tag stays
/// Succeeded and says why, one `ImageNotPinned` Warning names it, and the
/// daemon's `pins_over_budget` metric counts it. Once an older entry leaves,
/// it fits and is pinned, and its message goes. The documented uninstall
/// step (the daemon with `--pin-images=false`, `daemon.pinning.enabled=false`)
/// then removes every pin of the node. The budget is worked out from the
/// node's image filesystem (the shared daemon's capacity metric) so that
/// the two oldest images fit and the third does not.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn pins_stay_within_the_budget_and_the_tag_says_which_are_left_out() {
    use nodeimage_api::kruise::nodeimage::pins::NOT_PINNED_PREFIX;
    use nodeimage_tests::prepull::TestNode;
    let c = Cluster::load();
    let mut cleanup = Cleanup::default();
    let (i, capacity, images) = budget_images(&c, &mut cleanup);
    let socket = c.socket(i);
    let (old, mid, new) = (&images[0], &images[1], &images[2]);
    // The two oldest fit, the newest does not (by half its size).
    let budget = old.size + mid.size + new.size / 2;
    let percent = budget as f64 * 100.0 / capacity;
    eprintln!("budget {budget} B = {percent}%");
    // Not an edge node: no other test's ImagePrePullJob selects it.
    let mut node = TestNode::create_exactly(&c, "pin-budget", &Default::default());
    node.start_daemon(&socket, &["--pin-budget-percent", &percent.to_string()]);
    let name = node.name.clone();
    let pinned_here = |img: &Sized| {
        cri::image_status(&socket, &img.reference)
            .ok()
            .flatten()
            .is_some_and(|i| i.pinned)
    };
    let message = |img: &Sized| {
        ni::get(&c, &name)
            .and_then(|o| ni::tag_status(&o, &img.name, "v1").cloned())
            .and_then(|t| t["message"].as_str().map(str::to_string))
    };
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    for (age, img) in images.iter().enumerate() {
        let created = k8s_openapi::jiff::Timestamp::from_second(now - 30 + 10 * age as i64)
            .expect("a time")
            .to_string();
        ni::set_image(
            &c,
            &name,
            &img.name,
            json!({"tags": [{"tag": "v1", "createdAt": created}]}),
        );
    }
    for img in &images {
        let tag = Tag {
            ni: &name,
            image: &img.name,
            tag: "v1",
        };
        ni::wait_phase(&c, tag, 0, "Succeeded", TIMEOUT);
    }
    wait_for("the newest tag says it is not pinned", TIMEOUT, || {
        message(new).filter(|m| m.starts_with(NOT_PINNED_PREFIX))
    });
    wait_for("the two oldest pinned", TIMEOUT, || {
        (pinned_here(old) && pinned_here(mid)).then_some(())
    });
    assert!(
        !pinned_here(new),
        "{} is over the budget: not pinned",
        new.reference
    );
    assert_eq!(message(old), None, "a pinned image's tag says nothing");
    let metrics_url = format!(
        "http://127.0.0.1:{}/metrics",
        node.daemon
            .as_ref()
            .map(|d| d.health_port)
            .unwrap_or_default()
    );
    // At least: another test's job selecting every node may add its own.
    let over = http::metric_value(
        &http::scrape(&metrics_url),
        "nodeimage_daemon_pins_over_budget",
    );
    assert!(over.is_some_and(|v| v >= 1.0), "pins_over_budget: {over:?}");
    let tag = Tag {
        ni: &name,
        image: &new.name,
        tag: "v1",
    };
    ni::wait_phase(&c, tag, 0, "Succeeded", TIMEOUT);

    // The oldest entry leaves: the newest fits now.
    ni::remove_images(&c, &name, std::slice::from_ref(&old.name));
    wait_for("the newest pinned once it fits", TIMEOUT, || {
        (pinned_here(new) && !pinned_here(old)).then_some(())
    });
    wait_for("its message gone", TIMEOUT, || {
        message(new).is_none().then_some(())
    });
    let warnings: Vec<_> = ni::events_mentioning(&c, &new.reference)
        .into_iter()
        .filter(|e| e["reason"] == "ImageNotPinned")
        .collect();
    assert_eq!(
        warnings.len(),
        1,
        "one Warning for the image left out: {warnings:?}"
    );
    assert_eq!(warnings[0]["type"], "Warning");

    // Uninstall (docs/install.md): the daemon with pinning off unpins all it pinned.
    node.daemon = None;
    node.start_daemon(&socket, &["--pin-images=false"]);
    wait_for("every pin of the test node gone", TIMEOUT, || {
        (!pinned_here(mid) && !pinned_here(new)).then_some(())
    });
    drop(node);
    drop(cleanup);
}

/// Issue 39: a tenant (rights in its own namespace only, through its own
/// token) cannot pin beyond the budget: its three `Never` jobs on a node
/// whose budget holds two of their images get those two pinned (the
/// oldest), and the third pulled, not pinned, its tag saying so.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_tenants_jobs_pin_only_within_the_budget() {
    use nodeimage_api::kruise::nodeimage::pins::NOT_PINNED_PREFIX;
    use nodeimage_tests::kruise::TestNs;
    use nodeimage_tests::prepull::TestNode;
    use nodeimage_tests::tenant::Tenant;
    let c = Cluster::load();
    let mut cleanup = Cleanup::default();
    let (i, capacity, images) = budget_images(&c, &mut cleanup);
    let socket = c.socket(i);
    let (old, mid, new) = (&images[0], &images[1], &images[2]);
    let budget = old.size + mid.size + new.size / 2;
    let percent = budget as f64 * 100.0 / capacity;
    let mut node = TestNode::create_exactly(&c, "tenant-pins", &Default::default());
    node.start_daemon(&socket, &["--pin-budget-percent", &percent.to_string()]);
    let name = node.name.clone();
    let ns = TestNs::create(&c, "e2e-tenant-pins");
    let tenant = Tenant::new(&c, &ns.name);
    for (k, img) in images.iter().enumerate() {
        let job = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
            "metadata": {"name": format!("pin-{k}")},
            "spec": {"image": img.reference, "selector": {"names": [name]},
                     "completionPolicy": {"type": "Never"}}});
        let (ok, stderr) = tenant.apply(&job);
        assert!(ok, "the tenant creates its job: {stderr}");
        // Entries one second apart at least: their age orders them.
        let tag = Tag {
            ni: &name,
            image: &img.name,
            tag: "v1",
        };
        ni::wait_phase(&c, tag, 0, "Succeeded", TIMEOUT);
        std::thread::sleep(Duration::from_secs(1));
    }
    let pinned_here = |img: &Sized| {
        cri::image_status(&socket, &img.reference)
            .ok()
            .flatten()
            .is_some_and(|i| i.pinned)
    };
    wait_for("the tenant's newest image said not pinned", TIMEOUT, || {
        ni::get(&c, &name)
            .and_then(|o| ni::tag_status(&o, &new.name, "v1").cloned())
            .and_then(|t| t["message"].as_str().map(str::to_string))
            .filter(|m| m.starts_with(NOT_PINNED_PREFIX))
    });
    wait_for("the two oldest pinned", TIMEOUT, || {
        (pinned_here(old) && pinned_here(mid)).then_some(())
    });
    assert!(!pinned_here(new), "over the budget: not pinned");
    drop(node);
    drop(cleanup);
}
