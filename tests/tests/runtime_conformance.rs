//! Keeps the daemon's in-memory runtime honest: one suite of cases run
//! through the daemon's runtime seam (`nodeimage_daemon::runtime`) against
//! the fake (`runtime::fake`, which the daemon's unit tests run over) and
//! against every containerd of the local stack (through the daemon's own
//! containerd client), with the same outcome class per step required of
//! each. The cases: an image that exists, a missing image, a closed socket,
//! a registry answering 429, a lease ended twice, and a removal. The fake is told the
//! same facts about its world as the stack has (which image the registry
//! lacks, which registry rate-limits, that the socket is closed); what it
//! answers from them must be what containerd answers.

use nodeimage_daemon::containerd::{Runtime, RuntimeApi, leases};
use nodeimage_daemon::runtime::fake::FakeRuntime;
use nodeimage_daemon::runtime::{BlobKeeper, ContainerRuntime, Image, PullRequest, RuntimeError};
use nodeimage_tests::proxy::Proxy;
use nodeimage_tests::registry::Registry;
use nodeimage_tests::{Cluster, RuntimeNode, cri, unique};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Longest one runtime call may take here (a pull of a small image, or a
/// runtime that repeats a 429 itself before it gives up).
const CALL: Duration = Duration::from_secs(120);
/// This test's node name in lease names and labels.
const NODE: &str = "conformance";
/// The blob a lease is made to hold (containerd records the name only).
const INGEST: &str = "conformance-ingest";

/// What the stack's world holds for one run of the suite.
struct World {
    /// An image the registry has (`host/repo:v1`), pushed for this run.
    present: String,
    /// A tag the registry does not have.
    missing: String,
    /// The same image as `present`, through a proxy that answers 429.
    limited: String,
    /// The proxy's `host:port`.
    limited_host: String,
}

/// The outcome class of a call: what the daemon decides on.
fn class<T>(r: &Result<T, RuntimeError>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => e.reason().into(),
    }
}

fn presence(r: &Result<Option<Image>, RuntimeError>) -> String {
    match r {
        Ok(Some(_)) => "present".into(),
        Ok(None) => "absent".into(),
        Err(e) => e.reason().into(),
    }
}

fn pull_of(image: &str) -> PullRequest {
    PullRequest {
        image: image.into(),
        ..Default::default()
    }
}

/// Bounds a call; one that hangs is a class of its own.
async fn bounded<T>(f: impl Future<Output = Result<T, RuntimeError>>) -> Result<T, RuntimeError> {
    match tokio::time::timeout(CALL, f).await {
        Ok(r) => r,
        Err(_) => Err(RuntimeError::Other("no answer".into())),
    }
}

/// The steps of each case and the class each step ended in.
type Outcomes = Vec<(&'static str, String)>;

/// An image the registry has: pulled, then present.
async fn case_present<R: ContainerRuntime>(rt: &R, w: &World) -> Outcomes {
    let pulled = bounded(rt.pull(pull_of(&w.present))).await;
    let status = bounded(rt.image_status(&w.present)).await;
    vec![
        ("pull", class(&pulled)),
        ("image_status", presence(&status)),
    ]
}

/// A tag the registry lacks: absent on the node, and its pull not found.
async fn case_missing<R: ContainerRuntime>(rt: &R, w: &World) -> Outcomes {
    let status = bounded(rt.image_status(&w.missing)).await;
    let pulled = bounded(rt.pull(pull_of(&w.missing))).await;
    vec![
        ("image_status", presence(&status)),
        ("pull", class(&pulled)),
    ]
}

/// A runtime whose socket is closed: every call says unavailable (the
/// daemon waits, and spends no attempt).
async fn case_closed<R: ContainerRuntime>(rt: &R, w: &World) -> Outcomes {
    let version = bounded(rt.name_and_version()).await;
    let status = bounded(rt.image_status(&w.present)).await;
    let pulled = bounded(rt.pull(pull_of(&w.present))).await;
    let lease = bounded(rt.end_lease(NODE, w.present.clone())).await;
    vec![
        ("name_and_version", class(&version)),
        ("image_status", presence(&status)),
        ("pull", class(&pulled)),
        ("end_lease", class(&lease)),
    ]
}

/// A registry that answers 429: the pull says rate limited (the daemon
/// waits for the registry, and spends no attempt).
async fn case_rate_limited<R: ContainerRuntime>(rt: &R, w: &World) -> Outcomes {
    let pulled = bounded(rt.pull(pull_of(&w.limited))).await;
    vec![("pull", class(&pulled))]
}

/// A lease holding a blob, ended twice, and one never made ended: no
/// error (the daemon ends leases from several places, in any order).
async fn case_lease_twice<R: ContainerRuntime>(rt: &R, reference: &str) -> Outcomes {
    let held = match rt.keeper(NODE, reference) {
        Some(mut k) => {
            k.hold(&[INGEST.to_string()]).await;
            "ok"
        }
        None => "no leases",
    };
    let first = bounded(rt.end_lease(NODE, reference.into())).await;
    let second = bounded(rt.end_lease(NODE, reference.into())).await;
    let never = bounded(rt.end_lease(NODE, format!("{reference}-never-held"))).await;
    vec![
        ("keeper", held.to_string()),
        ("end_lease", class(&first)),
        ("end_lease again", class(&second)),
        ("end_lease of none", class(&never)),
    ]
}

/// The removal seam (ImageRemovalJob): a pulled image is listed, no
/// container is an error, the image goes by its ID and is then absent, and
/// removing it again is no error (CRI's RemoveImage is idempotent).
async fn case_removal<R: ContainerRuntime>(rt: &R, w: &World) -> Outcomes {
    let pulled = bounded(rt.pull(pull_of(&w.present))).await;
    let status = bounded(rt.image_status(&w.present)).await;
    let id = match &status {
        Ok(Some(i)) => i.id.clone(),
        _ => String::new(),
    };
    let listed = match bounded(rt.list_images()).await {
        Ok(l) if l.iter().any(|i| i.id == id) => "listed".to_string(),
        Ok(_) => "not listed".to_string(),
        Err(e) => e.reason().into(),
    };
    let containers = bounded(rt.list_containers()).await;
    let removed = bounded(rt.remove_image(&id)).await;
    let after = bounded(rt.image_status(&w.present)).await;
    let again = bounded(rt.remove_image(&id)).await;
    vec![
        ("pull", class(&pulled)),
        ("list_images", listed),
        ("list_containers", class(&containers)),
        ("remove_image", class(&removed)),
        ("image_status", presence(&after)),
        ("remove_image again", class(&again)),
    ]
}

/// The fake, told the facts of `w`.
fn fake_of(w: &World) -> FakeRuntime {
    let fake = FakeRuntime::default();
    fake.not_in_registry(&w.missing)
        .rate_limiting(&w.limited_host);
    fake
}

/// Every case over `rt` (the closed-socket case over `closed`).
async fn suite<R: ContainerRuntime, C: ContainerRuntime>(
    rt: &R,
    closed: &C,
    w: &World,
    lease_ref: &str,
) -> Vec<(&'static str, Outcomes)> {
    vec![
        ("an image that exists", case_present(rt, w).await),
        ("a missing image", case_missing(rt, w).await),
        ("a closed socket", case_closed(closed, w).await),
        ("a registry answering 429", case_rate_limited(rt, w).await),
        ("a lease ended twice", case_lease_twice(rt, lease_ref).await),
        ("a removal", case_removal(rt, w).await),
    ]
}

/// The daemon's resume leases that containerd at `socket` lists (by `ctr`).
fn listed_leases(socket: &Path) -> String {
    let out = Command::new("ctr")
        .args(["--address"])
        .arg(socket)
        .args(["--namespace", "k8s.io", "leases", "ls", "--quiet"])
        .output()
        .expect("run ctr");
    assert!(out.status.success(), "ctr leases ls: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One node's containerd through the daemon's client, and the fake, run
/// the suite; each step must end in the same class on both. On the node,
/// the held lease is also seen to exist, and to be gone once ended.
fn conforms_on(node: &RuntimeNode, w: &World, closed_socket: &Path) {
    let tokio = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let lease_ref = format!("{}-{}", w.present, node.name);
    let id = leases::lease_id(NODE, &lease_ref);
    let fake = tokio.block_on(async {
        let (fake, down) = (fake_of(w), fake_of(w));
        down.down();
        suite(&fake, &down, w, &lease_ref).await
    });
    let _inside = tokio.enter();
    let rt = Runtime::new(&node.socket, RuntimeApi::Auto).expect("a runtime client");
    let closed = Runtime::new(closed_socket, RuntimeApi::Auto).expect("a runtime client");
    tokio.block_on(async {
        let mut keeper = rt.keeper(NODE, &lease_ref).expect("containerd has leases");
        keeper.hold(&[INGEST.to_string()]).await;
    });
    let held = listed_leases(&node.socket);
    assert!(
        held.lines().any(|l| l == id),
        "the held lease {id} is listed: {held}"
    );
    let real = tokio.block_on(suite(&rt, &closed, w, &lease_ref));
    let after = listed_leases(&node.socket);
    assert!(
        !after.lines().any(|l| l == id),
        "the ended lease {id} is gone: {after}"
    );
    for ((case, want), (_, got)) in fake.iter().zip(&real) {
        eprintln!("{}: {case}: fake {want:?}, runtime {got:?}", node.label());
    }
    assert_eq!(fake.len(), real.len(), "the same cases ran");
    for ((case, want), (_, got)) in fake.into_iter().zip(real) {
        assert_eq!(got, want, "{case}: runtime vs fake");
    }
}

/// The suite, against the fake and every containerd of the local stack.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn the_fake_runtime_answers_as_every_containerd_does() {
    let c = Cluster::load();
    let registry = c.var("NODEIMAGE_REGISTRY");
    let img = Registry::new(&registry)
        .push_image(&unique("e2e-conformance"), Some("v1"), 4096)
        .expect("push a test image");
    let proxy = Proxy::rate_limited(&registry, 100_000, 1).expect("start the 429 proxy");
    let w = World {
        present: format!("{}:v1", img.name),
        missing: format!("{}:absent", img.name),
        limited: format!("{}/{}:v1", proxy.host(), img.repository),
        limited_host: proxy.host(),
    };
    let dir = tempfile::tempdir().expect("a temp dir");
    // A socket file nothing listens on any more.
    let closed_socket = dir.path().join("closed.sock");
    drop(std::os::unix::net::UnixListener::bind(&closed_socket).expect("bind a socket"));
    let nodes = c.runtime_nodes();
    assert!(!nodes.is_empty(), "the stack has containerd nodes");
    for node in &nodes {
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            node.check(|| conforms_on(node, &w, &closed_socket));
        }));
        let _ = cri::remove_image(&node.socket, &w.present);
        if let Err(p) = checked {
            std::panic::resume_unwind(p);
        }
    }
}

/// The fake's answers themselves, without a cluster: the classes the
/// daemon's unit tests rely on (the e2e test above checks them against
/// containerd).
#[test]
fn the_fake_answers_each_case_in_its_class() {
    let w = World {
        present: "127.0.0.1:5000/app:v1".into(),
        missing: "127.0.0.1:5000/app:absent".into(),
        limited: "127.0.0.1:5999/app:v1".into(),
        limited_host: "127.0.0.1:5999".into(),
    };
    let tokio = tokio::runtime::Runtime::new().expect("a tokio runtime");
    let got = tokio.block_on(async {
        let fake = fake_of(&w);
        let down = fake_of(&w);
        down.down();
        suite(&fake, &down, &w, &w.present).await
    });
    let s = |v: &[(&'static str, &str)]| -> Outcomes {
        v.iter().map(|(a, b)| (*a, b.to_string())).collect()
    };
    let want = vec![
        (
            "an image that exists",
            s(&[("pull", "ok"), ("image_status", "present")]),
        ),
        (
            "a missing image",
            s(&[("image_status", "absent"), ("pull", "not_found")]),
        ),
        (
            "a closed socket",
            s(&[
                ("name_and_version", "unavailable"),
                ("image_status", "unavailable"),
                ("pull", "unavailable"),
                ("end_lease", "unavailable"),
            ]),
        ),
        ("a registry answering 429", s(&[("pull", "rate_limited")])),
        (
            "a lease ended twice",
            s(&[
                ("keeper", "ok"),
                ("end_lease", "ok"),
                ("end_lease again", "ok"),
                ("end_lease of none", "ok"),
            ]),
        ),
        (
            "a removal",
            s(&[
                ("pull", "ok"),
                ("list_images", "listed"),
                ("list_containers", "ok"),
                ("remove_image", "ok"),
                ("image_status", "absent"),
                ("remove_image again", "ok"),
            ]),
        ),
    ];
    assert_eq!(got, want);
}
