//! NodeImage end to end (issue 3): the controller and one nodeimage-daemon
//! per node run as processes (tests/nodeimage.sh); these tests drive
//! NodeImages with kubectl as users do and check what each node's containerd
//! really holds (CRI, namespace k8s.io), what the registries were asked, and
//! what status reports.
//!
//! Every test uses image repositories of its own (pushed with fresh random
//! content), its own fake NodeImages and, where it must kill a daemon or pass
//! it special flags, a daemon process of its own. Shared processes (the
//! cluster, the registries, the shared daemons) are never stopped.

use nodeimage_tests::nodeimage::{self as ni, Tag};
use nodeimage_tests::process::{Containerd, Daemon, TestRegistry};
use nodeimage_tests::proxy::Proxy;
use nodeimage_tests::registry::{PushedImage, Registry};
use nodeimage_tests::{Cleanup, Cluster, RuntimeNode, cri, http, random_suffix, unique, wait_for};
use serde_json::{Value, json};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Generous limit for anything a pull or a controller pass needs.
const TIMEOUT: Duration = Duration::from_secs(120);
/// Layer size of the small test images.
const SMALL: usize = 4096;

/// The local cluster; tests/nodeimage.sh has installed the CRDs and started
/// the controller and the daemons.
fn cluster() -> Cluster {
    Cluster::load()
}

/// The NodeImage of a real node, which the controller's node mirror makes.
fn node_nodeimage(c: &Cluster, node: &str) -> Value {
    wait_for(
        &format!(
            "NodeImage {node} (made by the controller's node mirror: is the controller running? tests/nodeimage.sh start)"
        ),
        Duration::from_secs(60),
        || ni::get(c, node),
    )
}

/// Fails early with a clear message when the shared daemon of node `i` is not running.
fn require_shared_daemon(c: &Cluster, i: usize) {
    let url = c.daemon_readyz(i);
    wait_for(
        &format!(
            "the shared daemon of {} to be ready at {url} (tests/nodeimage.sh start)",
            c.nodes()[i]
        ),
        Duration::from_secs(30),
        || (http::status_of(&url) == Some(200)).then_some(()),
    );
}

fn shared_registry(c: &Cluster) -> Registry {
    Registry::new(&c.var("NODEIMAGE_REGISTRY"))
}

fn auth_registry(c: &Cluster) -> Registry {
    Registry::with_basic_auth(
        &c.var("NODEIMAGE_AUTH_REGISTRY"),
        &c.var("NODEIMAGE_AUTH_USER"),
        &c.var("NODEIMAGE_AUTH_PASSWORD"),
    )
}

/// Pushes a small image of fresh content as `e2e-<what>-<random>:v1`.
fn push(reg: &Registry, what: &str) -> PushedImage {
    reg.push_image(&unique(&format!("e2e-{what}")), Some("v1"), SMALL)
        .expect("push a test image")
}

fn tag<'a>(ni: &'a str, image: &'a str, tag: &'a str) -> Tag<'a> {
    Tag { ni, image, tag }
}

/// At the end: removes `images` from NodeImage `node`'s spec.
fn forget_entries(cleanup: &mut Cleanup, c: &Cluster, node: &str, images: &[String]) {
    let (c, node, images) = (c.clone(), node.to_string(), images.to_vec());
    cleanup.defer(format!("remove {images:?} from {node}"), move || {
        ni::remove_images(&c, &node, &images)
    });
}

/// At the end: removes images from a node's containerd.
fn forget_pulled(cleanup: &mut Cleanup, socket: PathBuf, references: &[String]) {
    let refs = references.to_vec();
    cleanup.defer(format!("remove {refs:?} from containerd"), move || {
        for r in &refs {
            if let Ok(Some(_)) = cri::image_status(&socket, r)
                && let Err(e) = cri::remove_image(&socket, r)
            {
                eprintln!("cleanup: CRI RemoveImage {r}: {e}");
            }
        }
    });
}

/// At the end: removes `images` from NodeImage `node`'s spec, waits until
/// its daemon has dropped them from status, then removes `references` from
/// the node's containerd (removed first, a still wanted image is pulled
/// again by the daemon and stays behind).
fn forget_entries_then_pulled(
    cleanup: &mut Cleanup,
    c: &Cluster,
    node: &str,
    socket: PathBuf,
    images: &[String],
    references: &[String],
) {
    let (c, node, images) = (c.clone(), node.to_string(), images.to_vec());
    let refs = references.to_vec();
    cleanup.defer(
        format!("remove {images:?} from {node}, then {refs:?} from its containerd"),
        move || {
            ni::remove_images(&c, &node, &images);
            ni::wait_status_without(&c, &node, &images, Duration::from_secs(30));
            for r in &refs {
                if let Ok(Some(_)) = cri::image_status(&socket, r)
                    && let Err(e) = cri::remove_image(&socket, r)
                {
                    eprintln!("cleanup: CRI RemoveImage {r}: {e}");
                }
            }
        },
    );
}

/// At the end: deletes a (fake) NodeImage.
fn forget_nodeimage(cleanup: &mut Cleanup, c: &Cluster, name: &str) {
    let (c, name) = (c.clone(), name.to_string());
    cleanup.defer(format!("delete nodeimage {name}"), move || {
        ni::delete(&c, &name)
    });
}

/// A namespace of the test's own, deleted at the end.
fn namespace(cleanup: &mut Cleanup, c: &Cluster, prefix: &str) -> String {
    let ns = unique(prefix);
    c.kubectl_ok(&["create", "namespace", &ns], None);
    let (c2, ns2) = (c.clone(), ns.clone());
    cleanup.defer(format!("delete namespace {ns}"), move || {
        let _ = c2.kubectl(&["delete", "namespace", &ns2, "--wait=false"], None);
    });
    ns
}

/// A short temporary directory (unix socket paths must stay short).
fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ni-e2e-")
        .tempdir_in("/tmp")
        .expect("create a temporary directory")
}

/// CRI ImageStatus of `reference` on the node; panics when absent or when it
/// does not carry the repository digest `repo_digest`.
fn assert_on_node(socket: &Path, reference: &str, repo_digest: &str) -> cri::Image {
    let img = cri::image_status(socket, reference)
        .expect("CRI ImageStatus")
        .unwrap_or_else(|| {
            panic!(
                "{reference} is not in the containerd at {} (CRI, k8s.io)",
                socket.display()
            )
        });
    assert!(
        img.repo_digests.iter().any(|d| d == repo_digest),
        "{reference} on the node has repo digests {:?}, expected {repo_digest}",
        img.repo_digests
    );
    img
}

fn assert_succeeded_with_digest(entry: &Value, img: &PushedImage) {
    assert_eq!(entry["phase"], "Succeeded", "{entry}");
    assert_eq!(
        entry["imageID"],
        img.by_digest(),
        "imageID must be the repository digest of what was pulled: {entry}"
    );
    assert_eq!(entry["progress"], 100, "{entry}");
    assert!(
        entry["startTime"].is_string() && entry["completionTime"].is_string(),
        "start and completion times: {entry}"
    );
}

// ---------------------------------------------------------------------------
// The OpenKruise guide: kubectl patch and kubectl edit
// ---------------------------------------------------------------------------

/// The guide's `kubectl patch nodeimage NODE --type=merge` pulls the image on
/// that node only: it is in that node's containerd (CRI, k8s.io) with the
/// registry's manifest digest, status says Succeeded with that digest in
/// imageID, the controller filled createdAt, and no other node pulled or
/// lists it.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn guide_merge_patch_pulls_on_that_node_only() {
    let c = cluster();
    let nodes = c.nodes();
    let node = nodes[0].as_str();
    node_nodeimage(&c, node);
    require_shared_daemon(&c, 0);
    let reg = shared_registry(&c);
    let img = push(&reg, "guide");
    let mut cleanup = Cleanup::default();
    forget_entries(&mut cleanup, &c, node, std::slice::from_ref(&img.name));
    forget_pulled(&mut cleanup, c.socket(0), &[img.reference()]);
    let watch = ni::Watch::start(&c, node);

    // Exactly the command of the guide.
    let patch = format!(
        r#"{{"spec":{{"images":{{"{}":{{"tags":[{{"tag":"v1","pullPolicy":{{"ttlSecondsAfterFinished":300}}}}]}}}}}}}}"#,
        img.name
    );
    c.kubectl_ok(
        &["patch", "nodeimage", node, "--type=merge", "-p", &patch],
        None,
    );

    let entry = ni::wait_phase(&c, tag(node, &img.name, "v1"), 0, "Succeeded", TIMEOUT);
    let served = reg
        .manifest_digest(&img.repository, "v1")
        .expect("HEAD the manifest")
        .expect("the registry serves the manifest");
    assert_eq!(served, img.digest, "registry digest");
    assert_succeeded_with_digest(&entry, &img);
    assert_on_node(&c.socket(0), &img.reference(), &img.by_digest());

    for (i, other) in nodes.iter().enumerate().skip(1) {
        let held = cri::holds_any_of(&c.socket(i), &img.name).expect("CRI ListImages");
        assert!(held.is_empty(), "{other} pulled {}: {held:?}", img.name);
        if let Some(obj) = ni::get(&c, other) {
            assert!(
                obj["spec"]["images"].get(&img.name).is_none()
                    && obj["status"]["imageStatuses"].get(&img.name).is_none(),
                "NodeImage {other} mentions {}",
                img.name
            );
        }
    }

    wait_for(
        "the controller to fill createdAt of the patched tag",
        TIMEOUT,
        || {
            let obj = ni::get(&c, node)?;
            ni::spec_tag(&obj, &img.name, "v1")?["createdAt"]
                .as_str()
                .map(|_| ())
        },
    );
    let versions = watch.assert_counts_matched();
    assert!(versions > 0, "the watch saw no version of {node}");
    ni::assert_observed_counts_matched();
}

/// Reads a NodeImage, changes its spec with `edit`, and writes the whole
/// object back with `kubectl replace` (what `kubectl edit` does), retrying
/// when someone else wrote in between (resourceVersion conflict).
fn replace_spec(c: &Cluster, name: &str, edit: impl Fn(&mut Value)) {
    for _ in 0..30 {
        let mut obj = ni::get(c, name).unwrap_or_else(|| panic!("NodeImage {name} exists"));
        edit(&mut obj["spec"]);
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
        let r = c.kubectl(&["replace", "-f", "-"], Some(&obj.to_string()));
        if r.success {
            return;
        }
        assert!(
            r.stderr.contains("the object has been modified") || r.stderr.contains("Conflict"),
            "kubectl replace nodeimage {name}: {}",
            r.stderr
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("kubectl replace nodeimage {name} conflicted 30 times");
}

/// A full replace of the spec (what `kubectl edit` writes) adds a tag that
/// the node pulls, and a second replace without the image drops its status.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn full_spec_replace_works_like_kubectl_edit() {
    let c = cluster();
    let nodes = c.nodes();
    let last = nodes.len() - 1;
    let node = nodes[last].as_str();
    node_nodeimage(&c, node);
    require_shared_daemon(&c, last);
    let img = push(&shared_registry(&c), "replace");
    let mut cleanup = Cleanup::default();
    forget_entries(&mut cleanup, &c, node, std::slice::from_ref(&img.name));
    forget_pulled(&mut cleanup, c.socket(last), &[img.reference()]);

    replace_spec(&c, node, |spec| {
        spec["images"][&img.name] = json!({"tags": [{"tag": "v1"}]});
    });
    let entry = ni::wait_phase(&c, tag(node, &img.name, "v1"), 0, "Succeeded", TIMEOUT);
    assert_succeeded_with_digest(&entry, &img);
    assert_on_node(&c.socket(last), &img.reference(), &img.by_digest());

    replace_spec(&c, node, |spec| {
        if let Some(images) = spec["images"].as_object_mut() {
            images.remove(&img.name);
        }
    });
    wait_for(
        "the status entry of the image removed by replace to go",
        TIMEOUT,
        || {
            let obj = ni::get(&c, node)?;
            obj["status"]["imageStatuses"]
                .get(&img.name)
                .is_none()
                .then_some(())
        },
    );
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// Credentials
// ---------------------------------------------------------------------------

/// `kubectl create secret docker-registry NAME` in `ns`.
fn docker_secret(c: &Cluster, ns: &str, name: &str, server: &str, user: &str, password: &str) {
    c.kubectl_ok(
        &[
            "create",
            "secret",
            "docker-registry",
            name,
            "-n",
            ns,
            &format!("--docker-server={server}"),
            &format!("--docker-username={user}"),
            &format!("--docker-password={password}"),
        ],
        None,
    );
}

/// Access-log lines of the shared auth registry that fetched a manifest of `repository`.
fn auth_registry_manifest_fetches(c: &Cluster, repository: &str) -> usize {
    let host = c.var("NODEIMAGE_AUTH_REGISTRY");
    let port = host.rsplit(':').next().unwrap_or_default();
    let log = PathBuf::from(c.var("NODEIMAGE_STATE")).join(format!("logs/registry-{port}.log"));
    let text = std::fs::read_to_string(&log)
        .unwrap_or_else(|e| panic!("read the auth registry's log {}: {e}", log.display()));
    let needles = [
        format!("\"GET /v2/{repository}/manifests/"),
        format!("\"HEAD /v2/{repository}/manifests/"),
    ];
    text.lines()
        .filter(|l| needles.iter().any(|n| l.contains(n.as_str())))
        .count()
}

/// Waits until `count` stops changing for a second, and returns it.
fn settled(count: impl Fn() -> usize) -> usize {
    let mut last = count();
    let mut since = Instant::now();
    let start = Instant::now();
    while since.elapsed() < Duration::from_secs(1) && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
        let now = count();
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    last
}

/// How many manifest requests one failing CRI pull from the auth registry
/// makes (containerd retries 401 answers itself), measured on a repository
/// of its own with a direct CRI pull.
fn manifest_requests_per_refused_pull(
    c: &Cluster,
    socket: &Path,
    auth: Option<(&str, &str)>,
) -> usize {
    let repository = unique("e2e-calibrate");
    let image = format!("{}/{repository}:v1", c.var("NODEIMAGE_AUTH_REGISTRY"));
    let err = cri::pull(socket, &image, auth).expect_err("the auth registry refuses this pull");
    // containerd 1.6 says "401 Unauthorized", 1.7 and 2.x "authorization failed".
    let lower = err.to_lowercase();
    assert!(
        lower.contains("401") || lower.contains("authorization failed"),
        "refused pull: {err}"
    );
    let n = settled(|| auth_registry_manifest_fetches(c, &repository));
    assert!(
        n > 0,
        "the refused pull of {image} left no manifest request in the registry log"
    );
    n
}

/// Fails if any of `secrets` appears in the NodeImage, in any event, or in
/// the shared daemon's log of `node`.
fn assert_not_leaked(c: &Cluster, node: &str, secrets: &[String]) {
    let obj = c.kubectl_ok(&["get", "nodeimage", node, "-o", "json"], None);
    let events = c.kubectl_ok(&["get", "events", "-A", "-o", "json"], None);
    let log = std::fs::read_to_string(c.daemon_log(node)).unwrap_or_default();
    for s in secrets {
        for (what, text) in [
            ("the NodeImage", &obj),
            ("the events", &events),
            ("the daemon log", &log),
        ] {
            assert!(
                !text.contains(s.as_str()),
                "{what} contains secret material"
            );
        }
    }
}

fn basic_auth_token(user: &str, password: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// With a pull secret (kubectl create secret docker-registry) for the auth
/// registry, the tag succeeds with the right digest on every node, whatever
/// its runtime (containerd 1.6, 1.7 with layer discard, 2.x through the
/// Transfer Service): the daemon hands the credentials to each; the password
/// appears neither in the NodeImages, nor in events, nor in the daemons'
/// logs.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn auth_registry_with_a_pull_secret_succeeds_on_every_runtime() {
    let c = cluster();
    let nodes = c.runtime_nodes();
    for n in &nodes {
        node_nodeimage(&c, &n.name);
        require_shared_daemon(&c, n.index);
    }
    let mut cleanup = Cleanup::default();
    let ns = namespace(&mut cleanup, &c, "e2e-auth-ok");
    let (user, password) = (
        c.var("NODEIMAGE_AUTH_USER"),
        c.var("NODEIMAGE_AUTH_PASSWORD"),
    );
    docker_secret(
        &c,
        &ns,
        "regcred",
        &c.var("NODEIMAGE_AUTH_REGISTRY"),
        &user,
        &password,
    );
    // One image for all: each node has a containerd (and content) of its own.
    let img = push(&auth_registry(&c), "auth-ok");
    for n in &nodes {
        forget_entries_then_pulled(
            &mut cleanup,
            &c,
            &n.name,
            n.socket.clone(),
            std::slice::from_ref(&img.name),
            &[img.reference()],
        );
        ni::set_image(
            &c,
            &n.name,
            &img.name,
            json!({"pullSecrets": [{"namespace": ns, "name": "regcred"}], "tags": [{"tag": "v1"}]}),
        );
    }
    for n in &nodes {
        n.check(|| {
            let entry = ni::wait_phase(&c, tag(&n.name, &img.name, "v1"), 0, "Succeeded", TIMEOUT);
            assert_succeeded_with_digest(&entry, &img);
            assert_on_node(&n.socket, &img.reference(), &img.by_digest());
            assert_not_leaked(
                &c,
                &n.name,
                &[password.clone(), basic_auth_token(&user, &password)],
            );
        });
    }
    ni::assert_observed_counts_matched();
}

/// Shared body of the two refused cases: the tag fails after backoffLimit+1
/// attempts (counted in the registry's access log against a calibrated
/// per-pull request count), with 401 in the message.
fn refused_pull_fails_after_all_attempts(with_wrong_secret: bool) {
    let c = cluster();
    let nodes = c.nodes();
    let last = nodes.len() - 1;
    let node = nodes[last].as_str();
    let socket = c.socket(last);
    node_nodeimage(&c, node);
    require_shared_daemon(&c, last);
    let mut cleanup = Cleanup::default();
    let ns = namespace(&mut cleanup, &c, "e2e-auth-bad");
    let user = c.var("NODEIMAGE_AUTH_USER");
    let wrong = format!("wrong-{}", random_suffix());
    docker_secret(
        &c,
        &ns,
        "wrong",
        &c.var("NODEIMAGE_AUTH_REGISTRY"),
        &user,
        &wrong,
    );
    let img = push(
        &auth_registry(&c),
        if with_wrong_secret {
            "auth-wrong"
        } else {
            "auth-none"
        },
    );
    forget_entries(&mut cleanup, &c, node, std::slice::from_ref(&img.name));
    forget_pulled(&mut cleanup, socket.clone(), &[img.reference()]);

    // Each attempt tries the matching credential, then anonymous.
    let anonymous = manifest_requests_per_refused_pull(&c, &socket, None);
    let per_attempt = if with_wrong_secret {
        anonymous + manifest_requests_per_refused_pull(&c, &socket, Some((&user, &wrong)))
    } else {
        anonymous
    };

    let backoff_limit = 1;
    let mut image = json!({"tags": [{"tag": "v1", "pullPolicy": {"backoffLimit": backoff_limit}}]});
    if with_wrong_secret {
        image["pullSecrets"] = json!([{"namespace": ns, "name": "wrong"}]);
    }
    ni::set_image(&c, node, &img.name, image);
    let entry = ni::wait_phase(&c, tag(node, &img.name, "v1"), 0, "Failed", TIMEOUT);
    let message = entry["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("unauthorized: "),
        "the message says unauthorized, on every runtime: {entry}"
    );
    let attempts = backoff_limit + 1;
    assert!(
        message.contains(&format!("{attempts} attempts")),
        "the message must say it gave up after {attempts} attempts: {entry}"
    );
    let fetches = settled(|| auth_registry_manifest_fetches(&c, &img.repository));
    assert_eq!(
        fetches,
        attempts as usize * per_attempt,
        "manifest requests for {}: expected {attempts} attempts x {per_attempt} requests",
        img.name
    );
    assert!(
        cri::image_status(&socket, &img.reference())
            .expect("CRI ImageStatus")
            .is_none(),
        "a refused image must not be on the node"
    );
    assert_not_leaked(&c, node, &[wrong.clone(), basic_auth_token(&user, &wrong)]);
    ni::assert_observed_counts_matched();
}

/// With a secret holding a wrong password, the tag fails after
/// backoffLimit+1 attempts (each trying the credential, then anonymous),
/// with 401 in the message; the wrong password does not leak.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn auth_registry_with_wrong_credentials_fails_after_all_attempts() {
    refused_pull_fails_after_all_attempts(true);
}

/// Without a secret, the tag fails after backoffLimit+1 anonymous attempts,
/// with 401 in the message.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn auth_registry_without_a_secret_fails_after_all_attempts() {
    refused_pull_fails_after_all_attempts(false);
}

// ---------------------------------------------------------------------------
// References and pull policies
// ---------------------------------------------------------------------------

/// A tag the registry does not have fails with a not-found message.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn missing_tag_fails_with_not_found() {
    let c = cluster();
    let nodes = c.nodes();
    let last = nodes.len() - 1;
    let node = nodes[last].as_str();
    node_nodeimage(&c, node);
    require_shared_daemon(&c, last);
    let img = push(&shared_registry(&c), "missing");
    let mut cleanup = Cleanup::default();
    forget_entries(&mut cleanup, &c, node, std::slice::from_ref(&img.name));

    ni::set_image(
        &c,
        node,
        &img.name,
        json!({"tags": [{"tag": "nope", "pullPolicy": {"backoffLimit": 0}}]}),
    );
    let entry = ni::wait_phase(&c, tag(node, &img.name, "nope"), 0, "Failed", TIMEOUT);
    let message = entry["message"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(message.contains("not found"), "not-found message: {entry}");
    assert!(
        message.contains("nope"),
        "the message names the tag: {entry}"
    );
    assert!(entry["imageID"].is_null(), "{entry}");
    ni::assert_observed_counts_matched();
}

/// A tag entry that is a digest (`tag: sha256:…`, the reference form that
/// breaks upstream) pulls that manifest: a fresh image pushed only by
/// digest, and the cluster's digest-only image.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn digest_references_succeed() {
    let c = cluster();
    let node = c.nodes()[0].clone();
    let node = node.as_str();
    node_nodeimage(&c, node);
    require_shared_daemon(&c, 0);
    let reg = shared_registry(&c);
    let img = reg
        .push_image(&unique("e2e-digest"), None, SMALL)
        .expect("push an image by digest only");
    let digest_only = c.var("NODEIMAGE_DIGEST_ONLY");
    let (shared_name, shared_digest) = digest_only
        .split_once('@')
        .expect("NODEIMAGE_DIGEST_ONLY is name@digest");
    let mut cleanup = Cleanup::default();
    forget_entries(
        &mut cleanup,
        &c,
        node,
        &[img.name.clone(), shared_name.to_string()],
    );
    forget_pulled(&mut cleanup, c.socket(0), &[img.by_digest()]);
    // The cluster's digest-only image goes again unless it was there before.
    if cri::image_status(&c.socket(0), &digest_only)
        .expect("CRI ImageStatus")
        .is_none()
    {
        forget_pulled(
            &mut cleanup,
            c.socket(0),
            std::slice::from_ref(&digest_only),
        );
    }

    ni::set_image(&c, node, &img.name, json!({"tags": [{"tag": img.digest}]}));
    ni::set_image(
        &c,
        node,
        shared_name,
        json!({"tags": [{"tag": shared_digest}]}),
    );
    let entry = ni::wait_phase(
        &c,
        tag(node, &img.name, &img.digest),
        0,
        "Succeeded",
        TIMEOUT,
    );
    assert_succeeded_with_digest(&entry, &img);
    assert_on_node(&c.socket(0), &img.by_digest(), &img.by_digest());
    let entry = ni::wait_phase(
        &c,
        tag(node, shared_name, shared_digest),
        0,
        "Succeeded",
        TIMEOUT,
    );
    assert_eq!(entry["imageID"], digest_only, "{entry}");
    assert_on_node(&c.socket(0), &digest_only, &digest_only);
    ni::assert_observed_counts_matched();
}

/// Manifest GETs/HEADs of `repository` in a test registry's access log.
fn manifest_fetches(reg: &TestRegistry, repository: &str) -> usize {
    reg.requests(&format!("\"GET /v2/{repository}/manifests/"))
        .len()
        + reg
            .requests(&format!("\"HEAD /v2/{repository}/manifests/"))
            .len()
}

/// On every node, whatever its runtime: a first pull succeeds with the
/// registry's digest in imageID and in the node's containerd; IfNotPresent
/// on the present image succeeds without the registry (it is stopped),
/// Always needs it (fails while it is stopped) and pulls again once it is
/// back (new manifest requests in its access log, for that node's own
/// repository).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn if_not_present_skips_the_registry_and_always_pulls_again_on_every_runtime() {
    let c = cluster();
    let nodes = c.runtime_nodes();
    for n in &nodes {
        node_nodeimage(&c, &n.name);
        require_shared_daemon(&c, n.index);
    }
    let dir = temp_dir();
    let mut reg = TestRegistry::start(dir.path());
    let pushed = Registry::new(&reg.host());
    // A repository per node: the access log tells whose manifest requests
    // they are.
    let imgs: Vec<PushedImage> = nodes.iter().map(|_| push(&pushed, "policy")).collect();
    let mut cleanup = Cleanup::default();
    for (n, img) in nodes.iter().zip(&imgs) {
        forget_entries_then_pulled(
            &mut cleanup,
            &c,
            &n.name,
            n.socket.clone(),
            std::slice::from_ref(&img.name),
            &[img.reference()],
        );
    }
    let set_all = |version: i64, policy: Option<&str>| {
        for (n, img) in nodes.iter().zip(&imgs) {
            let mut e = json!({"tag": "v1", "version": version, "pullPolicy": {"backoffLimit": 0}});
            if let Some(p) = policy {
                e["imagePullPolicy"] = json!(p);
            }
            ni::set_image(&c, &n.name, &img.name, json!({"tags": [e]}));
        }
    };
    let wait = |n: &RuntimeNode, img: &PushedImage, version: i64, phase: &str| {
        n.check(|| ni::wait_phase(&c, tag(&n.name, &img.name, "v1"), version, phase, TIMEOUT))
    };

    set_all(0, None);
    for (n, img) in nodes.iter().zip(&imgs) {
        let first = wait(n, img, 0, "Succeeded");
        n.check(|| {
            assert_succeeded_with_digest(&first, img);
            assert_on_node(&n.socket, &img.reference(), &img.by_digest());
            assert!(
                manifest_fetches(&reg, &img.repository) > 0,
                "the first pull went to the registry"
            );
        });
    }

    reg.stop();
    set_all(1, None);
    for (n, img) in nodes.iter().zip(&imgs) {
        let present = wait(n, img, 1, "Succeeded");
        assert_eq!(
            present["imageID"],
            img.by_digest(),
            "{}: IfNotPresent on the present image: {present}",
            n.label()
        );
    }

    set_all(2, Some("Always"));
    for (n, img) in nodes.iter().zip(&imgs) {
        let refused = wait(n, img, 2, "Failed");
        assert!(
            refused["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{}: a failed Always pull says why: {refused}",
            n.label()
        );
    }

    reg.start_again();
    let before: Vec<usize> = imgs
        .iter()
        .map(|img| manifest_fetches(&reg, &img.repository))
        .collect();
    set_all(3, Some("Always"));
    for ((n, img), before) in nodes.iter().zip(&imgs).zip(before) {
        let again = wait(n, img, 3, "Succeeded");
        assert_eq!(again["imageID"], img.by_digest(), "{}: {again}", n.label());
        assert!(
            manifest_fetches(&reg, &img.repository) > before,
            "{}: Always must fetch the manifest again",
            n.label()
        );
    }
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// Housekeeping
// ---------------------------------------------------------------------------

/// A finished tag leaves spec and status after ttlSecondsAfterFinished
/// (controller housekeeping); a tag with a long TTL stays; an image left
/// without tags leaves spec and status entirely.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn ttl_removes_finished_tags_from_spec_and_status() {
    let c = cluster();
    let node = c.nodes()[0].clone();
    let node = node.as_str();
    node_nodeimage(&c, node);
    require_shared_daemon(&c, 0);
    let reg = shared_registry(&c);
    let a = push(&reg, "ttl-a");
    reg.tag_again(&a, "v2").expect("tag v2");
    let b = push(&reg, "ttl-b");
    let mut cleanup = Cleanup::default();
    forget_entries(&mut cleanup, &c, node, &[a.name.clone(), b.name.clone()]);
    forget_pulled(&mut cleanup, c.socket(0), &[a.reference(), b.reference()]);

    let ttl = |s: i64| json!({"ttlSecondsAfterFinished": s});
    ni::set_image(
        &c,
        node,
        &a.name,
        json!({"tags": [{"tag": "v1", "pullPolicy": ttl(5)}, {"tag": "v2", "pullPolicy": ttl(3600)}]}),
    );
    ni::set_image(
        &c,
        node,
        &b.name,
        json!({"tags": [{"tag": "v1", "pullPolicy": ttl(5)}]}),
    );

    // Each short-TTL tag is seen Succeeded (or is already gone, when the
    // TTL ran out between two polls); the long one stays Succeeded.
    ni::wait_phase(&c, tag(node, &a.name, "v2"), 0, "Succeeded", TIMEOUT);
    let gone = wait_for("the 5 s TTL tags to leave spec and status", TIMEOUT, || {
        let obj = ni::get(&c, node)?;
        let a_v1 = ni::spec_tag(&obj, &a.name, "v1").is_none()
            && ni::tag_status(&obj, &a.name, "v1").is_none();
        let b_gone = obj["spec"]["images"].get(&b.name).is_none()
            && obj["status"]["imageStatuses"].get(&b.name).is_none();
        (a_v1 && b_gone).then_some(obj)
    });
    let kept = ni::tag_status(&gone, &a.name, "v2").expect("the long-TTL tag stays in status");
    assert_eq!(kept["phase"], "Succeeded", "{kept}");
    let spec = ni::spec_tag(&gone, &a.name, "v2").expect("the long-TTL tag stays in spec");
    assert!(
        spec["createdAt"].is_string(),
        "createdAt was filled: {spec}"
    );
    // The removed tags were really pulled before they went.
    assert_on_node(&c.socket(0), &a.reference(), &a.by_digest());
    assert_on_node(&c.socket(0), &b.reference(), &b.by_digest());
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// Progress and restarts (slow pulls through a throttling proxy)
// ---------------------------------------------------------------------------

/// Progress values of `image`/`tag` while Pulling, from NodeImage versions.
fn pulling_progress(objs: &[Value], image: &str, t: &str) -> Vec<i64> {
    objs.iter()
        .filter_map(|o| ni::tag_status(o, image, t))
        .filter(|e| e["phase"] == "Pulling")
        .filter_map(|e| e["progress"].as_i64())
        .collect()
}

/// On every node, whatever its runtime (containerd 1.6, 1.7 with layer
/// discard, 2.x through the Transfer Service): while two ~24 MiB images of
/// fresh content are pulled at once, slowly (a proxy per pull passes
/// 2 MB/s), status shows for each at least one progress value strictly
/// between 0 and 100, and both tags end Succeeded; every status version
/// seen has counts matching its tag statuses. (With two pulls at once the
/// daemon must tell which blobs are whose; on 1.7 with layer discard it
/// reported 0 until the end before `progress::Probe` read the repository's
/// manifests for the blobs being written.)
#[test]
#[ignore = "needs the local cluster (make test)"]
fn progress_moves_through_intermediate_values_on_every_runtime() {
    let c = cluster();
    let nodes = c.runtime_nodes();
    for n in &nodes {
        node_nodeimage(&c, &n.name);
        require_shared_daemon(&c, n.index);
    }
    let dir = temp_dir();
    let reg = TestRegistry::start(dir.path());
    // Two images pulled at once on each node: progress must not depend on
    // a pull being the node's only one (containerd 1.7 with layer discard
    // names no manifest of a pull in its labels or times).
    let images: Vec<PushedImage> = (0..2)
        .map(|_| {
            Registry::new(&reg.host())
                .push_image(&unique("e2e-progress"), Some("v1"), 24 << 20)
                .expect("push a big image")
        })
        .collect();
    let mut cleanup = Cleanup::default();
    // Per node: its proxy (so bytes are counted per node), the image key
    // through it, and a watch of its NodeImage. The pulls run at once.
    let pulls: Vec<(&RuntimeNode, Proxy, String, ni::Watch, &PushedImage)> = nodes
        .iter()
        .flat_map(|n| images.iter().map(move |big| (n, big)))
        .map(|(n, big)| {
            let proxy = Proxy::start(&reg.host(), 2_000_000).expect("start the proxy");
            let name = format!("{}/{}", proxy.host(), big.repository);
            forget_entries_then_pulled(
                &mut cleanup,
                &c,
                &n.name,
                n.socket.clone(),
                std::slice::from_ref(&name),
                &[format!("{name}:v1")],
            );
            let watch = ni::Watch::start(&c, &n.name);
            ni::set_image(&c, &n.name, &name, json!({"tags": [{"tag": "v1"}]}));
            (n, proxy, name, watch, big)
        })
        .collect();

    for (n, proxy, name, watch, big) in &pulls {
        n.check(|| {
            let polled = RefCell::new(Vec::new());
            let (_, entry) = ni::wait_tag(
                &c,
                tag(&n.name, name, "v1"),
                "Succeeded",
                Duration::from_secs(240),
                |e| {
                    if e["phase"] == "Pulling"
                        && let Some(p) = e["progress"].as_i64()
                    {
                        polled.borrow_mut().push(p);
                    }
                    e["phase"] == "Succeeded"
                },
                |e| e["phase"] == "Failed",
            );
            assert_eq!(
                entry["imageID"],
                format!("{name}@{}", big.digest),
                "{entry}"
            );
            assert!(
                proxy.bytes_down() >= big.size as u64,
                "the pull went through the proxy ({} of {} bytes)",
                proxy.bytes_down(),
                big.size
            );
            let mut values = polled.into_inner();
            values.extend(pulling_progress(&watch.seen(), name, "v1"));
            eprintln!("{}: progress seen while Pulling: {values:?}", n.label());
            assert!(
                values.iter().any(|p| *p > 0 && *p < 100),
                "no progress strictly between 0 and 100 was reported while Pulling; seen: {values:?}"
            );
            assert!(
                values.iter().all(|p| (0..=100).contains(p)),
                "progress out of range: {values:?}"
            );
            watch.assert_counts_matched();
        });
    }
    ni::assert_observed_counts_matched();
}

/// A daemon of the test's own for fake NodeImage `name` on the containerd of
/// the first node, and the fake NodeImage with `spec`; both go at the end.
fn fake_node_with_daemon(
    cleanup: &mut Cleanup,
    c: &Cluster,
    prefix: &str,
    spec: Value,
    log_dir: &Path,
    socket: &Path,
    flags: &[&str],
) -> (String, Daemon) {
    let name = unique(prefix);
    ni::create_fake(c, &name, &BTreeMap::new(), spec);
    forget_nodeimage(cleanup, c, &name);
    let daemon = Daemon::start(c, &name, socket, log_dir, flags);
    (name, daemon)
}

/// The daemon's resume lease for `reference` in a node's containerd, if
/// any (node-daemon/src/resume.rs: named `nodeimage-resume-…`, labelled with
/// the image), read with `ctr`.
fn resume_lease(socket: &Path, reference: &str) -> Option<String> {
    let out = std::process::Command::new("ctr")
        .arg("--address")
        .arg(socket)
        .args(["--namespace", "k8s.io", "leases", "ls"])
        .output()
        .expect("run ctr");
    assert!(out.status.success(), "ctr leases ls: {out:?}");
    let label = format!("nodeimage.dev/image={reference}");
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let mut cols = l.split_whitespace();
        let id = cols.next()?;
        let ours =
            id.starts_with("nodeimage-resume-") && cols.any(|c| c.split(',').any(|kv| kv == label));
        ours.then(|| id.to_string())
    })
}

/// A 32 MiB single-layer image pulled through a 4 MB/s proxy by a test
/// daemon on a fake node served by a node's containerd, caught mid-layer
/// with its resume lease held.
/// Fields drop in order: the daemon first, the registry's directory last.
struct SlowPull {
    daemon: Daemon,
    cleanup: Cleanup,
    proxy: Proxy,
    big: PushedImage,
    /// `proxy-host/repository`, the NodeImage image key.
    name: String,
    /// `name:v1`, what the daemon pulls (and names its lease after).
    reference: String,
    fake: String,
    socket: PathBuf,
    /// The entry once it showed progress.
    mid: Value,
    _reg: TestRegistry,
    _dir: tempfile::TempDir,
}

impl SlowPull {
    /// Starts the pull on the containerd at `socket`.
    fn start(c: &Cluster, prefix: &str, socket: &Path) -> SlowPull {
        let dir = temp_dir();
        let reg = TestRegistry::start(dir.path());
        let big = Registry::new(&reg.host())
            .push_image(&unique(prefix), Some("v1"), 32 << 20)
            .expect("push the big image");
        let proxy = Proxy::start(&reg.host(), 4_000_000).expect("start the proxy");
        let name = format!("{}/{}", proxy.host(), big.repository);
        let reference = format!("{name}:v1");
        let socket = socket.to_path_buf();
        let mut cleanup = Cleanup::default();
        forget_pulled(
            &mut cleanup,
            socket.clone(),
            std::slice::from_ref(&reference),
        );
        let (fake, daemon) = fake_node_with_daemon(
            &mut cleanup,
            c,
            prefix,
            json!({"images": {&name: {"tags": [{"tag": "v1"}]}}}),
            dir.path(),
            &socket,
            &[],
        );
        let (_, mid) = ni::wait_tag(
            c,
            tag(&fake, &name, "v1"),
            "Pulling with some progress",
            TIMEOUT,
            |e| e["phase"] == "Pulling" && e["progress"].as_i64().is_some_and(|p| p > 0),
            |e| matches!(e["phase"].as_str(), Some("Succeeded" | "Failed")),
        );
        // Progress can come from other pulls' ingests before the manifest
        // is known (the node's only pull of this daemon, on a containerd
        // other tests share); the lease shows this pull's layer is held. A
        // pull that ends first never had one: say so rather than time out.
        wait_for("a lease to hold the pull's partial layer", TIMEOUT, || {
            if let Some(lease) = resume_lease(&socket, &reference) {
                return Some(lease);
            }
            let obj = ni::get(c, &fake)?;
            let entry = ni::tag_status(&obj, &name, "v1")?;
            assert!(
                !matches!(entry["phase"].as_str(), Some("Succeeded" | "Failed")),
                "the pull ended before any resume lease held its partial layer (nothing to resume after a kill): {entry}"
            );
            None
        });
        SlowPull {
            daemon,
            cleanup,
            proxy,
            big,
            name,
            reference,
            fake,
            socket,
            mid,
            _reg: reg,
            _dir: dir,
        }
    }
}

/// A daemon SIGKILLed in the middle of a slow pull on node `index`'s
/// containerd, and started again, resumes the tag and finishes it, fetching
/// only what it had not: the partial layer outlives the killed CRI call
/// under the daemon's lease, which is gone once the pull has ended. A
/// failure names the node and its runtime.
fn daemon_killed_mid_pull_resumes_and_finishes_on(index: usize) {
    let c = cluster();
    let node = c.runtime_nodes().swap_remove(index);
    node.check(|| daemon_killed_mid_pull_resumes_and_finishes(&c, &node.socket));
}

/// Resume after a daemon kill on node-1, containerd 1.6 (Debian).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn daemon_killed_mid_pull_resumes_and_finishes_on_node_1() {
    daemon_killed_mid_pull_resumes_and_finishes_on(0);
}

/// Resume after a daemon kill on node-2, containerd 1.7 with
/// `discard_unpacked_layers`.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn daemon_killed_mid_pull_resumes_and_finishes_on_node_2() {
    daemon_killed_mid_pull_resumes_and_finishes_on(1);
}

/// Resume after a daemon kill on node-3, containerd 2.x whose CRI pulls
/// through the Transfer Service.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn daemon_killed_mid_pull_resumes_and_finishes_on_node_3() {
    daemon_killed_mid_pull_resumes_and_finishes_on(2);
}

fn daemon_killed_mid_pull_resumes_and_finishes(c: &Cluster, socket: &Path) {
    let c = c.clone();
    let SlowPull {
        mut daemon,
        cleanup: _cleanup,
        proxy,
        big,
        name,
        reference,
        fake,
        socket,
        mid,
        // Bound, not `..`: an unbound field would drop (the registry stop)
        // at the end of this statement.
        _reg,
        _dir,
    } = SlowPull::start(&c, "e2e-kill", socket);
    let t = tag(&fake, &name, "v1");
    daemon.kill();
    let passed = proxy.bytes_down();
    assert!(
        passed < big.size as u64,
        "the daemon was killed mid-pull ({passed} of {} bytes passed): {mid}",
        big.size
    );
    let after_kill = ni::get(&c, &fake).expect("the fake NodeImage exists");
    let entry = ni::tag_status(&after_kill, &name, "v1").expect("an entry");
    assert_eq!(entry["phase"], "Pulling", "status after the kill: {entry}");
    assert!(
        resume_lease(&socket, &reference).is_some(),
        "a lease keeps the partial layer after the kill; daemon log:\n{}",
        daemon.log_of_latest_start()
    );

    daemon.restart();
    let done = ni::wait_phase(&c, t, 0, "Succeeded", Duration::from_secs(240));
    assert_eq!(done["imageID"], format!("{name}@{}", big.digest), "{done}");
    assert_on_node(&socket, &reference, &format!("{name}@{}", big.digest));
    let log = daemon.log_of_latest_start();
    assert!(
        log.lines()
            .any(|l| l.contains("pull started") && l.contains(&big.repository)),
        "the restarted daemon resumed the pull:\n{log}"
    );
    // What the restart cost in bytes (docs/benchmarks.md, P-resume). Bytes
    // still in flight at the kill, and the manifest, are fetched again; a
    // pull started over fetches everything that had passed.
    let total = proxy.bytes_down();
    let again = (total - passed).saturating_sub(big.size as u64 - passed.min(big.size as u64));
    eprintln!(
        "resume: image {} bytes; {passed} passed before the kill; {} after the restart ({again} fetched again)",
        big.size,
        total - passed,
    );
    assert!(
        again < passed / 2,
        "the restarted pull resumed the partial layer: {again} of the {passed} bytes passed before the kill were fetched again"
    );
    wait_for("the resume lease to end with the pull", TIMEOUT, || {
        resume_lease(&socket, &reference).is_none().then_some(())
    });
    ni::assert_observed_counts_matched();
}

impl SlowPull {
    /// Waits until no resume lease holds this pull's partial layer.
    fn wait_until_the_lease_ends(&self, what: &str) {
        wait_for(what, TIMEOUT, || {
            resume_lease(&self.socket, &self.reference)
                .is_none()
                .then_some(())
        });
    }

    /// Asserts that the image never passed the proxy whole.
    fn assert_not_finished(&self, what: &str) {
        assert!(self.proxy.bytes_down() < self.big.size as u64, "{what}");
    }
}

/// An entry removed mid-pull takes its kept partial layer with it: the
/// daemon ends the resume lease, so nothing holds the bytes on the node.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn removed_entry_mid_pull_keeps_no_partial_layer() {
    let c = cluster();
    let pull = SlowPull::start(&c, "e2e-drop", &c.socket(0));
    ni::remove_images(&c, &pull.fake, std::slice::from_ref(&pull.name));
    pull.wait_until_the_lease_ends("the removed entry's resume lease to end");
    pull.assert_not_finished("the removal stopped the pull before it finished");
}

/// A tag removed while its daemon was down leaves no partial layer behind:
/// the restarted daemon, once it has read its NodeImage, ends the resume
/// leases of images it no longer pulls (the lease would otherwise keep the
/// bytes for six hours).
#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_tag_removed_while_the_daemon_was_down_keeps_no_partial_layer() {
    let c = cluster();
    let mut pull = SlowPull::start(&c, "e2e-sweep", &c.socket(0));
    pull.daemon.kill();
    ni::remove_images(&c, &pull.fake, std::slice::from_ref(&pull.name));
    assert!(
        resume_lease(&pull.socket, &pull.reference).is_some(),
        "with the daemon down, nothing has ended the lease yet"
    );
    pull.daemon.restart();
    pull.wait_until_the_lease_ends("the restarted daemon to end the lease");
    let log = pull.daemon.log_of_latest_start();
    assert!(
        log.contains("ended resume leases of pulls that no longer run"),
        "the sweep says what it did:\n{log}"
    );
    pull.assert_not_finished("the removed tag was not pulled again");
}

/// Deleting a NodeImage mid-pull stops its pulls and ends their leases.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn deleted_nodeimage_mid_pull_keeps_no_partial_layer() {
    let c = cluster();
    let pull = SlowPull::start(&c, "e2e-delni", &c.socket(0));
    ni::delete(&c, &pull.fake);
    pull.wait_until_the_lease_ends("the deleted NodeImage's resume lease to end");
    pull.assert_not_finished("the deletion stopped the pull before it finished");
}

/// A tag Succeeded before a restart is not pulled again after it (imagePullPolicy
/// Always, so a re-run would have to fetch the manifest): the registry sees
/// no new manifest request while the restarted daemon pulls a new tag, and
/// the entry keeps its start and completion times.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn completed_tags_are_not_pulled_again_after_a_restart() {
    let c = cluster();
    let dir = temp_dir();
    let reg = TestRegistry::start(dir.path());
    let r = Registry::new(&reg.host());
    let first = push(&r, "done");
    let second = push(&r, "later");
    let proxy = Proxy::start(&reg.host(), 0).expect("start the proxy");
    let first_name = format!("{}/{}", proxy.host(), first.repository);
    let second_name = format!("{}/{}", proxy.host(), second.repository);
    let socket = c.socket(0);
    let mut cleanup = Cleanup::default();
    forget_pulled(
        &mut cleanup,
        socket.clone(),
        &[format!("{first_name}:v1"), format!("{second_name}:v1")],
    );
    let (fake, mut daemon) = fake_node_with_daemon(
        &mut cleanup,
        &c,
        "e2e-restart",
        json!({"images": {&first_name: {"tags": [{"tag": "v1", "imagePullPolicy": "Always"}]}}}),
        dir.path(),
        &socket,
        &[],
    );
    let done = ni::wait_phase(&c, tag(&fake, &first_name, "v1"), 0, "Succeeded", TIMEOUT);
    let manifests = format!("/v2/{}/manifests/", first.repository);
    let fetched = settled(|| proxy.count(&manifests));
    assert!(fetched > 0, "the first pull went through the proxy");

    daemon.kill();
    daemon.restart();
    daemon.wait_readyz(200, TIMEOUT);
    ni::set_image(&c, &fake, &second_name, json!({"tags": [{"tag": "v1"}]}));
    ni::wait_phase(&c, tag(&fake, &second_name, "v1"), 0, "Succeeded", TIMEOUT);
    assert!(
        proxy.count(&format!("/v2/{}/manifests/", second.repository)) > 0,
        "the restarted daemon pulls through the proxy"
    );

    assert_eq!(
        proxy.count(&manifests),
        fetched,
        "the completed tag was pulled again after the restart: {:?}",
        proxy.requests()
    );
    let obj = ni::get(&c, &fake).expect("the fake NodeImage exists");
    let now = ni::tag_status(&obj, &first_name, "v1").expect("the first entry");
    assert_eq!(now["phase"], "Succeeded", "{now}");
    assert_eq!(now["startTime"], done["startTime"], "{now}");
    assert_eq!(now["completionTime"], done["completionTime"], "{now}");
    let log = daemon.log_of_latest_start();
    assert!(
        !log.lines()
            .any(|l| l.contains("pull started") && l.contains(&first.repository)),
        "the restarted daemon started the completed pull again:\n{log}"
    );
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// A registry that rate-limits (HTTP 429, toomanyrequests)
// ---------------------------------------------------------------------------

/// Requests the rate-limiting proxy refuses: two pull calls' worth on every
/// runtime tested (containerd 1.6 to 2.2 repeat a 429 at once up to six
/// requests per call, 2.3 and later up to five), so the daemon waits twice.
const REFUSALS: usize = 12;

/// The shortest wait of the daemon before its `n`-th new try (1-based)
/// after a 429: 5 s doubling (node-daemon/src/ratelimit.rs) less the most
/// its jitter takes off (a fifth).
fn shortest_rate_limit_wait(n: u32) -> Duration {
    Duration::from_millis(4_000 * (1 << (n - 1)))
}

/// Refusal times grouped into the runtime's calls: one pull call's
/// requests follow each other within a second; calls are seconds apart.
fn bursts(times: &[Duration]) -> Vec<(Duration, Duration)> {
    let mut out: Vec<(Duration, Duration)> = Vec::new();
    for &t in times {
        match out.last_mut() {
            Some((_, end)) if t.saturating_sub(*end) < Duration::from_secs(1) => *end = t,
            _ => out.push((t, t)),
        }
    }
    out
}

/// A registry that answers its first requests with 429 (issue 32), on every
/// runtime: a tag with `backoffLimit: 0` (which one failed attempt would
/// fail) shows `Waiting` with the rate-limited message and then succeeds;
/// the daemon counts the refused calls; and the registry is asked no more
/// often than the backoff allows: consecutive refused calls (requests
/// within a second of each other) are at least the daemon's shortest
/// waits apart, 4 s then 8 s. A daemon that retried at once, or spent an
/// attempt per 429, fails this.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn rate_limited_registry_is_waited_for_without_failing_the_tag() {
    let c = cluster();
    let dir = temp_dir();
    let reg = TestRegistry::start(dir.path());
    let mut cleanup = Cleanup::default();
    let nodes = c.runtime_nodes();
    // Per node, at once: its proxy, its daemon and its fake NodeImage.
    let pulls: Vec<(&RuntimeNode, Proxy, String, String, Daemon, ni::Watch)> = nodes
        .iter()
        .map(|n| {
            let img = push(&Registry::new(&reg.host()), "ratelimited");
            let proxy = Proxy::rate_limited(&reg.host(), REFUSALS, 30).expect("start the proxy");
            let name = format!("{}/{}", proxy.host(), img.repository);
            forget_pulled(&mut cleanup, n.socket.clone(), &[format!("{name}:v1")]);
            let spec = json!({"images": {&name: {"tags": [
                {"tag": "v1", "pullPolicy": {"backoffLimit": 0}}
            ]}}});
            let (fake, daemon) = fake_node_with_daemon(
                &mut cleanup,
                &c,
                "e2e-429",
                spec,
                dir.path(),
                &n.socket,
                &[],
            );
            let watch = ni::Watch::start(&c, &fake);
            (n, proxy, name, fake, daemon, watch)
        })
        .collect();
    for (n, proxy, name, fake, daemon, watch) in &pulls {
        n.check(|| {
            let waiting = RefCell::new(Vec::new());
            ni::wait_tag(
                &c,
                tag(fake, name, "v1"),
                "Succeeded",
                Duration::from_secs(180),
                |e| {
                    if e["phase"] == "Waiting" {
                        waiting.borrow_mut().push(e["message"].clone());
                    }
                    e["phase"] == "Succeeded"
                },
                |e| e["phase"] == "Failed",
            );
            let mut messages = waiting.into_inner();
            messages.extend(watch.seen().iter().filter_map(|obj| {
                let e = ni::tag_status(obj, name, "v1")?;
                (e["phase"] == "Waiting").then(|| e["message"].clone())
            }));
            let prefix = format!("rate limited by registry {}, next try in ", proxy.host());
            assert!(
                messages
                    .iter()
                    .filter_map(Value::as_str)
                    .any(|m| m.starts_with(&prefix)),
                "the tag showed Waiting with the rate-limited message; seen: {messages:?}"
            );
            let refused: Vec<Duration> = proxy.refused().iter().map(|(t, _)| *t).collect();
            assert_eq!(refused.len(), REFUSALS, "every refusal was used");
            let calls = bursts(&refused);
            eprintln!("{}: refused calls (from, to): {calls:?}", n.label());
            for (i, pair) in calls.windows(2).enumerate() {
                let gap = pair[1].0 - pair[0].1;
                let least = shortest_rate_limit_wait(i as u32 + 1);
                assert!(
                    gap >= least,
                    "refused call {} came {gap:?} after the one before; the backoff allows no sooner than {least:?}: {calls:?}",
                    i + 2
                );
            }
            let metrics = http::scrape(&format!("http://127.0.0.1:{}/metrics", daemon.health_port));
            let series = format!(
                "nodeimage_daemon_registry_rate_limited_total{{registry=\"{}\"}}",
                proxy.host()
            );
            let counted = http::metric_value(&metrics, &series).unwrap_or(0.0) as usize;
            // The last refused call may be the one that then succeeded (a
            // runtime repeats a 429 itself before it gives up).
            assert!(
                counted >= 1 && (calls.len().saturating_sub(1)..=calls.len()).contains(&counted),
                "{series} is {counted}; refused calls: {}",
                calls.len()
            );
            let log = daemon.log_text();
            let logged: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("registry rate-limited the pull"))
                .collect();
            eprintln!("{}: {logged:#?}", n.label());
            assert_eq!(logged.len(), counted, "one log line per refused call");
            assert!(
                logged.iter().all(|l| !l.contains("/v2/")),
                "the log names no request URL: {logged:?}"
            );
            watch.assert_counts_matched();
        });
    }
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// Node lifecycle (controller node mirror)
// ---------------------------------------------------------------------------

fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["labels"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// A new Node gets a NodeImage with its labels; label changes (changed,
/// added, removed) follow; a virtual-kubelet Node gets none; a deleted
/// Node's NodeImage is deleted, and so is a hand-made NodeImage without a
/// Node, while a fake NodeImage survives.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn node_lifecycle_is_mirrored_into_nodeimages() {
    let c = cluster();
    let id = random_suffix();
    let node = format!("e2e-node-{id}");
    let virt = format!("e2e-virtual-{id}");
    let fake = format!("e2e-fake-{id}");
    let orphan = format!("e2e-orphan-{id}");
    let mut cleanup = Cleanup::default();
    for n in [&node, &virt] {
        let (c2, n2) = (c.clone(), n.clone());
        cleanup.defer(format!("delete node {n}"), move || {
            let _ = c2.kubectl(
                &["delete", "node", &n2, "--ignore-not-found", "--wait=false"],
                None,
            );
        });
    }
    for n in [&node, &virt, &fake, &orphan] {
        forget_nodeimage(&mut cleanup, &c, n);
    }
    let create_node = |name: &str, labels: Value| {
        let obj = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}});
        c.kubectl_ok(&["create", "-f", "-"], Some(&obj.to_string()));
    };

    ni::create_fake(&c, &fake, &BTreeMap::new(), json!({}));
    let orphan_obj = json!({
        "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": orphan}, "spec": {},
    });
    c.kubectl_ok(&["create", "-f", "-"], Some(&orphan_obj.to_string()));
    create_node(
        &virt,
        json!({"type": "virtual-kubelet", "nodeimage.dev/e2e": id}),
    );
    create_node(
        &node,
        json!({"nodeimage.dev/e2e": id, "e2e.nodeimage.dev/zone": "a", "e2e.nodeimage.dev/drop": "x"}),
    );

    let created = wait_for("the new Node's NodeImage with its labels", TIMEOUT, || {
        let obj = ni::get(&c, &node)?;
        let l = labels_of(&obj);
        (l.get("nodeimage.dev/e2e") == Some(&id)
            && l.get("e2e.nodeimage.dev/zone").map(String::as_str) == Some("a")
            && l.get("e2e.nodeimage.dev/drop").map(String::as_str) == Some("x"))
        .then_some(obj)
    });
    assert_eq!(created["metadata"]["name"], node.as_str());
    assert_eq!(
        created["metadata"]["annotations"]["nodeimage.dev/mirrored-labels"],
        "e2e.nodeimage.dev/drop,e2e.nodeimage.dev/zone,nodeimage.dev/e2e",
        "the mirror records the keys it copied"
    );
    // A label someone sets on the NodeImage itself is not the mirror's.
    c.kubectl_ok(
        &["label", "nodeimage", &node, "e2e.nodeimage.dev/mine=z"],
        None,
    );

    c.kubectl_ok(
        &[
            "label",
            "node",
            &node,
            "--overwrite",
            "e2e.nodeimage.dev/zone=b",
            "e2e.nodeimage.dev/new=y",
            "e2e.nodeimage.dev/drop-",
        ],
        None,
    );
    wait_for(
        "the NodeImage's labels to follow the Node's",
        TIMEOUT,
        || {
            let l = labels_of(&ni::get(&c, &node)?);
            (l.get("e2e.nodeimage.dev/zone").map(String::as_str) == Some("b")
                && l.get("e2e.nodeimage.dev/new").map(String::as_str) == Some("y")
                && !l.contains_key("e2e.nodeimage.dev/drop"))
            .then_some(())
        },
    );
    assert_eq!(
        labels_of(&ni::get(&c, &node).expect("still there"))
            .get("e2e.nodeimage.dev/mine")
            .map(String::as_str),
        Some("z"),
        "the mirror removed a label it did not set"
    );
    // The mirror has handled the virtual Node (created before the other) by now.
    assert!(
        ni::get(&c, &virt).is_none(),
        "a virtual-kubelet Node must get no NodeImage"
    );
    wait_for(
        "the NodeImage without a Node and without the fake label to be deleted",
        TIMEOUT,
        || ni::get(&c, &orphan).is_none().then_some(()),
    );

    c.kubectl_ok(&["delete", "node", &node], None);
    wait_for(
        "the deleted Node's NodeImage to be deleted",
        TIMEOUT,
        || ni::get(&c, &node).is_none().then_some(()),
    );
    assert!(
        ni::get(&c, &fake).is_some(),
        "the fake NodeImage must survive the node mirror"
    );
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// Bad input and runtime outages
// ---------------------------------------------------------------------------

/// Bad entries each fail with a message naming the problem (unparseable
/// image name, missing secret, malformed secret, unknown imagePullPolicy),
/// an empty tag is refused by the API, and a valid tag in the same NodeImage
/// still succeeds while the daemon stays ready.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn bad_input_fails_only_that_tag() {
    let c = cluster();
    let node = c.nodes()[0].clone();
    let node = node.as_str();
    node_nodeimage(&c, node);
    require_shared_daemon(&c, 0);
    let mut cleanup = Cleanup::default();
    let ns = namespace(&mut cleanup, &c, "e2e-bad");
    // Valid JSON (the API server refuses unparseable dockerconfigjson) of
    // the wrong shape: "auths" must be an object.
    let malformed = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "malformed", "namespace": ns},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\": \"not-an-object\"}"},
    });
    c.kubectl_ok(&["create", "-f", "-"], Some(&malformed.to_string()));
    let reg = shared_registry(&c);
    let good = push(&reg, "bad-good");
    let host = c.var("NODEIMAGE_REGISTRY");
    let bad_name = format!("Bad Name {}", random_suffix());
    let missing_secret = format!("{host}/{}", unique("e2e-bad-nosecret"));
    let malformed_secret = format!("{host}/{}", unique("e2e-bad-malformed"));
    let bad_policy = format!("{host}/{}", unique("e2e-bad-policy"));
    let all = [
        bad_name.clone(),
        missing_secret.clone(),
        malformed_secret.clone(),
        bad_policy.clone(),
        good.name.clone(),
    ];
    forget_entries(&mut cleanup, &c, node, &all);
    forget_pulled(&mut cleanup, c.socket(0), &[good.reference()]);

    let empty = ni::merge_patch(
        &c,
        node,
        &json!({"spec": {"images": {&good.name: {"tags": [{"tag": ""}]}}}}),
    );
    assert!(!empty.success, "the API must refuse an empty tag");
    assert!(empty.stderr.contains("tag"), "{}", empty.stderr);

    let patch = json!({"spec": {"images": {
        &bad_name: {"tags": [{"tag": "v1"}]},
        &missing_secret: {"pullSecrets": [{"namespace": ns, "name": "absent"}], "tags": [{"tag": "v1"}]},
        &malformed_secret: {"pullSecrets": [{"namespace": ns, "name": "malformed"}], "tags": [{"tag": "v1"}]},
        &bad_policy: {"tags": [{"tag": "v1", "imagePullPolicy": "Sometimes"}]},
        &good.name: {"tags": [{"tag": "v1"}]},
    }}});
    let r = ni::merge_patch(&c, node, &patch);
    assert!(r.success, "patch: {}", r.stderr);

    let expectations: [(&str, Vec<String>); 4] = [
        (&bad_name, vec![bad_name.clone()]),
        (
            &missing_secret,
            vec![format!("{ns}/absent"), "not found".into()],
        ),
        (
            &malformed_secret,
            vec![format!("{ns}/malformed"), "not valid".into()],
        ),
        (
            &bad_policy,
            vec!["imagePullPolicy".into(), "Sometimes".into()],
        ),
    ];
    for (image, words) in &expectations {
        let entry = ni::wait_phase(&c, tag(node, image, "v1"), 0, "Failed", TIMEOUT);
        let message = entry["message"].as_str().unwrap_or_default();
        for w in words {
            assert!(
                message.contains(w.as_str()),
                "{image}: the message must name the problem ({w}): {entry}"
            );
        }
    }
    let ok = ni::wait_phase(&c, tag(node, &good.name, "v1"), 0, "Succeeded", TIMEOUT);
    assert_succeeded_with_digest(&ok, &good);
    assert_eq!(
        http::status_of(&c.daemon_readyz(0)),
        Some(200),
        "the daemon stays ready"
    );
    ni::assert_observed_counts_matched();
}

/// With nothing listening on its containerd socket, a daemon keeps its tags
/// Waiting with a message about containerd and answers /readyz with 503;
/// once a containerd comes up on that socket the tag is pulled and the
/// daemon becomes ready.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn containerd_down_keeps_tags_waiting_until_it_is_back() {
    let c = cluster();
    let dir = temp_dir();
    let socket = Containerd::socket_in(&dir.path().join("ctrd"));
    let img = push(&shared_registry(&c), "noruntime");
    let mut cleanup = Cleanup::default();
    let (fake, mut daemon) = fake_node_with_daemon(
        &mut cleanup,
        &c,
        "e2e-noruntime",
        json!({"images": {&img.name: {"tags": [{"tag": "v1"}]}}}),
        dir.path(),
        &socket,
        &[],
    );
    let t = tag(&fake, &img.name, "v1");
    let mentions_containerd = |e: &Value| {
        e["message"]
            .as_str()
            .is_some_and(|m| m.contains("containerd"))
    };
    ni::wait_tag(
        &c,
        t,
        "Waiting with a message about containerd",
        TIMEOUT,
        |e| e["phase"] == "Waiting" && mentions_containerd(e),
        |e| matches!(e["phase"].as_str(), Some("Succeeded" | "Failed")),
    );
    daemon.wait_readyz(503, TIMEOUT);
    let body = http::request(
        "GET",
        &format!("http://127.0.0.1:{}/readyz", daemon.health_port),
        &[],
        &[],
    )
    .expect("GET /readyz");
    assert!(
        body.text().contains("containerd"),
        "readyz: {}",
        body.text()
    );
    // It keeps waiting (and retrying) rather than failing the tag.
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        let obj = ni::get(&c, &fake).expect("the fake NodeImage exists");
        let e = ni::tag_status(&obj, &img.name, "v1").expect("an entry");
        assert_eq!(e["phase"], "Waiting", "while containerd is down: {e}");
        std::thread::sleep(Duration::from_millis(500));
    }

    let _containerd = Containerd::start(
        &dir.path().join("ctrd"),
        &format!("{}/pause:3.6", c.var("NODEIMAGE_REGISTRY")),
    );
    let entry = ni::wait_phase(&c, t, 0, "Succeeded", TIMEOUT);
    assert_succeeded_with_digest(&entry, &img);
    assert_on_node(&socket, &img.reference(), &img.by_digest());
    daemon.wait_readyz(200, TIMEOUT);
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------

/// Each tag's outcome is an event on the NodeImage that names that tag: a
/// Normal one per success, a Warning one with the reason per failure, also
/// when several tags of one NodeImage finish the same way.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn events_name_each_tag_and_its_outcome() {
    let c = cluster();
    let dir = temp_dir();
    let reg = shared_registry(&c);
    let good: Vec<PushedImage> = (0..2).map(|_| push(&reg, "event-ok")).collect();
    let bad: Vec<PushedImage> = (0..2).map(|_| push(&reg, "event-bad")).collect();
    let socket = c.socket(0);
    let mut cleanup = Cleanup::default();
    forget_pulled(
        &mut cleanup,
        socket.clone(),
        &good.iter().map(PushedImage::reference).collect::<Vec<_>>(),
    );
    let mut spec = serde_json::Map::new();
    for g in &good {
        spec.insert(g.name.clone(), json!({"tags": [{"tag": "v1"}]}));
    }
    for b in &bad {
        spec.insert(
            b.name.clone(),
            json!({"tags": [{"tag": "nope", "pullPolicy": {"backoffLimit": 0}}]}),
        );
    }
    let (fake, _daemon) = fake_node_with_daemon(
        &mut cleanup,
        &c,
        "e2e-events",
        json!({"images": spec}),
        dir.path(),
        &socket,
        &[],
    );
    for g in &good {
        ni::wait_phase(&c, tag(&fake, &g.name, "v1"), 0, "Succeeded", TIMEOUT);
    }
    for b in &bad {
        ni::wait_phase(&c, tag(&fake, &b.name, "nope"), 0, "Failed", TIMEOUT);
    }
    let expected = good
        .iter()
        .map(|g| {
            (
                g.name.clone(),
                "Normal",
                "PullImageSucceed",
                g.digest.clone(),
            )
        })
        .chain(bad.iter().map(|b| {
            (
                b.name.clone(),
                "Warning",
                "PullImageFailed",
                "not found".to_string(),
            )
        }));
    for (name, type_, reason, detail) in expected {
        let ev = wait_for(
            &format!("a {type_} event on {fake} naming {name}"),
            TIMEOUT,
            || {
                ni::events_mentioning(&c, &name)
                    .into_iter()
                    .find(|e| e["involvedObject"]["name"] == fake.as_str())
            },
        );
        assert_eq!(ev["involvedObject"]["kind"], "NodeImage", "{ev}");
        assert_eq!(ev["type"], type_, "{ev}");
        assert_eq!(ev["reason"], reason, "{ev}");
        assert!(
            ev["message"].as_str().is_some_and(|m| m.contains(&detail)),
            "the event says {detail}: {ev}"
        );
    }
    ni::assert_observed_counts_matched();
}

// ---------------------------------------------------------------------------
// Counts
// ---------------------------------------------------------------------------

/// With one pull at a time (--max-concurrent-pulls 1) and slow pulls, a mix
/// of tags goes through Waiting, Pulling, Succeeded and Failed; in every
/// status version the watch sees, desired/waiting/pulling/succeeded/failed
/// match the tag statuses, at most one tag is Pulling, and the tags end
/// 3 Succeeded and 2 Failed.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn counts_match_the_tag_statuses_in_every_status() {
    let c = cluster();
    let dir = temp_dir();
    let reg = TestRegistry::start(dir.path());
    let r = Registry::new(&reg.host());
    let proxy = Proxy::start(&reg.host(), 2_000_000).expect("start the proxy");
    let images: Vec<PushedImage> = (0..3)
        .map(|i| {
            r.push_image(&unique(&format!("e2e-count{i}")), Some("v1"), 3 << 20)
                .expect("push")
        })
        .collect();
    let names: Vec<String> = images
        .iter()
        .map(|i| format!("{}/{}", proxy.host(), i.repository))
        .collect();
    let socket = c.socket(0);
    let mut cleanup = Cleanup::default();
    forget_pulled(
        &mut cleanup,
        socket.clone(),
        &names.iter().map(|n| format!("{n}:v1")).collect::<Vec<_>>(),
    );
    let name = unique("e2e-counts");
    ni::create_fake(&c, &name, &BTreeMap::new(), json!({}));
    forget_nodeimage(&mut cleanup, &c, &name);
    let watch = ni::Watch::start(&c, &name);
    let _daemon = Daemon::start(
        &c,
        &name,
        &socket,
        dir.path(),
        &["--max-concurrent-pulls", "1"],
    );

    let mut spec = serde_json::Map::new();
    for n in &names {
        spec.insert(n.clone(), json!({"tags": [{"tag": "v1"}]}));
    }
    spec.insert(
        names[0].clone(),
        json!({"tags": [{"tag": "v1"}, {"tag": "nope", "pullPolicy": {"backoffLimit": 0}}]}),
    );
    let bad_name = format!("Bad Name {}", random_suffix());
    spec.insert(bad_name.clone(), json!({"tags": [{"tag": "v1"}]}));
    let r = ni::merge_patch(&c, &name, &json!({"spec": {"images": spec}}));
    assert!(r.success, "patch: {}", r.stderr);

    // Other tests' jobs may add tags of their own to any NodeImage, fake
    // ones included: only this test's tags are expected to finish here.
    let mine: Vec<(String, &str, &str)> = names
        .iter()
        .map(|n| (n.clone(), "v1", "Succeeded"))
        .chain([
            (names[0].clone(), "nope", "Failed"),
            (bad_name.clone(), "v1", "Failed"),
        ])
        .collect();
    let last = wait_for("every tag to finish", Duration::from_secs(240), || {
        let obj = ni::get(&c, &name)?;
        mine.iter()
            .all(|(image, t, _)| {
                ni::tag_status(&obj, image, t)
                    .is_some_and(|e| matches!(e["phase"].as_str(), Some("Succeeded" | "Failed")))
            })
            .then_some(obj)
    });
    for (image, t, phase) in &mine {
        let e = ni::tag_status(&last, image, t).expect("an entry");
        assert_eq!(e["phase"], *phase, "{image}:{t}: {e}");
    }
    let s = &last["status"];
    let total = |f: &str| s[f].as_i64().unwrap_or(-1);
    assert!(
        total("succeeded") >= 3 && total("failed") >= 2 && total("desired") >= 5,
        "counts: {s}"
    );
    // Let the watch catch up with the last write.
    std::thread::sleep(Duration::from_secs(2));
    let versions = watch.assert_counts_matched();
    let seen = watch.seen();
    assert!(versions >= 3, "the watch saw only {versions} versions");
    assert!(
        seen.iter()
            .all(|o| o["status"]["pulling"].as_i64().unwrap_or(0) <= 1),
        "more than one pull at once with --max-concurrent-pulls 1"
    );
    assert!(
        seen.iter().any(|o| {
            o["status"]["pulling"] == 1 && o["status"]["waiting"].as_i64().unwrap_or(0) >= 1
        }),
        "no status showed one tag Pulling while others Waiting"
    );
    ni::assert_observed_counts_matched();
}

/// Tags added and removed on a NodeImage whose node has not reported yet
/// (no daemon serves this fake NodeImage): in every version the watch sees,
/// the counts still match the tag statuses, whoever wrote them.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn counts_match_the_tag_statuses_while_tags_come_and_go_unreported() {
    let c = cluster();
    let name = unique("e2e-counts-quiet");
    let mut cleanup = Cleanup::default();
    ni::create_fake(&c, &name, &BTreeMap::new(), json!({}));
    forget_nodeimage(&mut cleanup, &c, &name);
    let watch = ni::Watch::start(&c, &name);
    let host = c.var("NODEIMAGE_REGISTRY");
    let first = format!("{host}/{}", unique("e2e-quiet"));
    let second = format!("{host}/{}", unique("e2e-quiet"));

    ni::set_image(&c, &name, &first, json!({"tags": [{"tag": "v1"}]}));
    // Give the controller time to act on the new tag (createdAt, counts).
    wait_for("the controller to fill createdAt", TIMEOUT, || {
        let obj = ni::get(&c, &name)?;
        ni::spec_tag(&obj, &first, "v1")?["createdAt"]
            .as_str()
            .map(|_| ())
    });
    std::thread::sleep(Duration::from_secs(2));
    let r = ni::merge_patch(
        &c,
        &name,
        &json!({"spec": {"images": {&first: null, &second: {"tags": [{"tag": "v1"}, {"tag": "v2"}]}}}}),
    );
    assert!(r.success, "patch: {}", r.stderr);
    std::thread::sleep(Duration::from_secs(2));
    ni::remove_images(&c, &name, std::slice::from_ref(&second));
    std::thread::sleep(Duration::from_secs(3));
    let versions = watch.assert_counts_matched();
    assert!(versions >= 3, "the watch saw only {versions} versions");
    ni::assert_observed_counts_matched();
}

/// The daemons' status guard against the real API server (JSON Patch `test`
/// ops applied by the status subresource): a status built before an entry
/// write for another image still lands; one built before its own tag's
/// version moved, or before housekeeping removed an entry, is refused.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn status_guard_survives_entry_writes_and_refuses_stale_entries() {
    use nodeimage_api::kruise::nodeimage::{guarded_status_patch, status_for_spec};
    use nodeimage_api::kruise::{ImagePullPhase, NodeImage};
    let c = cluster();
    let name = unique("e2e-guard");
    let mut cleanup = Cleanup::default();
    let host = c.var("NODEIMAGE_REGISTRY");
    let (a, b) = (
        format!("{host}/{}", unique("e2e-guard-a")),
        format!("{host}/{}", unique("e2e-guard-b")),
    );
    // No daemon serves this fake NodeImage: the test is its only status writer.
    ni::create_fake(
        &c,
        &name,
        &BTreeMap::new(),
        json!({"images": {&a: {"tags": [{"tag": "v1", "version": 1}]}}}),
    );
    forget_nodeimage(&mut cleanup, &c, &name);
    let read = || -> NodeImage {
        let obj = ni::get(&c, &name).expect("the NodeImage exists");
        serde_json::from_value(obj).expect("a NodeImage")
    };
    // Marks every spec tag `phase` on top of `seen`, as a daemon would.
    let write = |seen: &NodeImage, phase: ImagePullPhase| {
        let status = status_for_spec(seen, |_, t, _| nodeimage_api::kruise::ImageTagStatus {
            tag: t.tag.clone(),
            version: t.version,
            phase,
            ..Default::default()
        });
        c.kubectl(
            &[
                "patch",
                "nodeimages.apps.kruise.io",
                &name,
                "--subresource=status",
                "--type=json",
                "-p",
                &guarded_status_patch(seen, &status).to_string(),
            ],
            None,
        )
    };
    let phase_of =
        |obj: &Value, image: &str| ni::tag_status(obj, image, "v1").map(|e| e["phase"].clone());

    // 1. An entry write for another image lands between read and write.
    let seen = read();
    ni::set_image(&c, &name, &b, json!({"tags": [{"tag": "v1"}]}));
    let r = write(&seen, ImagePullPhase::Pulling);
    assert!(
        r.success,
        "a status write voided by an entry write for another image: {}",
        r.stderr
    );
    let obj = ni::get(&c, &name).expect("the NodeImage exists");
    assert_eq!(phase_of(&obj, &a), Some(json!("Pulling")), "{obj}");
    assert!(
        obj["spec"]["images"].get(&b).is_some(),
        "the entry write stays: {obj}"
    );
    ni::check_counts(&obj).unwrap_or_else(|e| panic!("{e}"));

    // 2. The written tag's version moves on between read and write.
    let seen = read();
    ni::set_image(
        &c,
        &name,
        &a,
        json!({"tags": [{"tag": "v1", "version": 2}]}),
    );
    let r = write(&seen, ImagePullPhase::Succeeded);
    assert!(!r.success, "a status for version 1 landed on version 2");
    let obj = ni::get(&c, &name).expect("the NodeImage exists");
    assert_eq!(phase_of(&obj, &a), Some(json!("Pulling")), "{obj}");

    // 3. Another status writer (housekeeping) changes the counts between read and write.
    let seen = read();
    let r = c.kubectl(
        &[
            "patch",
            "nodeimages.apps.kruise.io",
            &name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {"imageStatuses": {&a: null}, "desired": 0, "waiting": 0, "pulling": 0, "succeeded": 0, "failed": 0}}).to_string(),
        ],
        None,
    );
    assert!(r.success, "housekeeping-like status write: {}", r.stderr);
    let r = write(&seen, ImagePullPhase::Succeeded);
    assert!(
        !r.success,
        "a status write clobbered another writer's status"
    );

    // 4. Built on the object as it is now, the write lands.
    let r = write(&read(), ImagePullPhase::Succeeded);
    assert!(
        r.success,
        "a status write on the current object: {}",
        r.stderr
    );
    let obj = ni::get(&c, &name).expect("the NodeImage exists");
    assert_eq!(phase_of(&obj, &a), Some(json!("Succeeded")), "{obj}");
    assert_eq!(obj["status"]["desired"], 2, "{obj}");
}

/// The controller's entry writes against the real API server: each changed
/// image is tested as read, so an entry write lands beside a concurrent
/// write to another image, and is refused when its own image moved, when an
/// image it adds was added meanwhile (the `test` of an absent key against
/// `null`), or when an image it removes changed.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn entry_writes_test_only_the_images_they_change() {
    use nodeimage_api::kruise::NodeImage;
    use nodeimage_api::kruise::nodeimage::images_patch;
    let c = cluster();
    let name = unique("e2e-entries");
    let mut cleanup = Cleanup::default();
    let host = c.var("NODEIMAGE_REGISTRY");
    let [a, b, d, e] =
        ["a", "b", "d", "e"].map(|s| format!("{host}/{}", unique(&format!("e2e-entries-{s}"))));
    ni::create_fake(
        &c,
        &name,
        &BTreeMap::new(),
        json!({"images": {&a: {"tags": [{"tag": "v1"}]}}}),
    );
    forget_nodeimage(&mut cleanup, &c, &name);
    // Reads once housekeeping has filled createdAt everywhere, so that its
    // own write does not race the test's.
    let read = || -> NodeImage {
        let obj = wait_for("every tag to carry createdAt", TIMEOUT, || {
            let obj = ni::get(&c, &name)?;
            let filled = obj["spec"]["images"]
                .as_object()?
                .values()
                .flat_map(|i| i["tags"].as_array().into_iter().flatten())
                .all(|t| t["createdAt"].is_string());
            filled.then_some(obj)
        });
        serde_json::from_value(obj).expect("a NodeImage")
    };
    let write = |seen: &NodeImage, edit: &dyn Fn(&mut BTreeMap<_, _>)| {
        let mut images = seen.spec.images.clone().unwrap_or_default();
        edit(&mut images);
        let ops = images_patch(&seen.spec, &images).expect("serialises");
        c.kubectl(
            &[
                "patch",
                "nodeimages.apps.kruise.io",
                &name,
                "--type=json",
                "-p",
                &ops.to_string(),
            ],
            None,
        )
    };
    let tag_of = |obj: &Value, image: &str| obj["spec"]["images"][image]["tags"][0]["tag"].clone();
    let image = |tag: &str| -> nodeimage_api::kruise::ImageSpec {
        serde_json::from_value(json!({"tags": [{"tag": tag}]})).expect("an image")
    };

    // 1. Another image is added meanwhile: the write (a changed, b added) lands beside it.
    let seen = read();
    ni::set_image(&c, &name, &d, json!({"tags": [{"tag": "v4"}]}));
    let r = write(&seen, &|m| {
        m.insert(a.as_str().into(), image("v2"));
        m.insert(b.as_str().into(), image("v3"));
    });
    assert!(
        r.success,
        "an entry write voided by a write to another image: {}",
        r.stderr
    );
    let obj = ni::get(&c, &name).expect("the NodeImage exists");
    assert_eq!(tag_of(&obj, &a), json!("v2"), "{obj}");
    assert_eq!(tag_of(&obj, &b), json!("v3"), "{obj}");
    assert_eq!(
        tag_of(&obj, &d),
        json!("v4"),
        "the other write stays: {obj}"
    );

    // 2. An image the write adds was added meanwhile: refused, the other entry kept.
    let seen = read();
    ni::set_image(&c, &name, &e, json!({"tags": [{"tag": "hand"}]}));
    let r = write(&seen, &|m| {
        m.insert(e.as_str().into(), image("v5"));
    });
    assert!(
        !r.success,
        "an entry write replaced an image added meanwhile"
    );
    let obj = ni::get(&c, &name).expect("the NodeImage exists");
    assert_eq!(tag_of(&obj, &e), json!("hand"), "{obj}");

    // 3. The image the write changes moved meanwhile: refused.
    let seen = read();
    ni::set_image(&c, &name, &a, json!({"tags": [{"tag": "hand"}]}));
    let r = write(&seen, &|m| {
        m.insert(a.as_str().into(), image("v6"));
    });
    assert!(
        !r.success,
        "an entry write overwrote a hand edit of its image"
    );

    // 4. The image the write removes changed meanwhile: refused; as read, removed.
    let seen = read();
    ni::set_image(&c, &name, &b, json!({"tags": [{"tag": "hand"}]}));
    let r = write(&seen, &|m| {
        m.remove(b.as_str());
    });
    assert!(
        !r.success,
        "an entry write removed an image changed meanwhile"
    );
    let r = write(&read(), &|m| {
        m.remove(b.as_str());
    });
    assert!(r.success, "removing an image as read: {}", r.stderr);
    let obj = ni::get(&c, &name).expect("the NodeImage exists");
    assert!(obj["spec"]["images"].get(&b).is_none(), "{obj}");
    assert_eq!(tag_of(&obj, &a), json!("hand"), "{obj}");
}
