//! Node credentials from kubelet credential-provider plugins: a daemon given
//! kubelet's `CredentialProviderConfig` and plugin directory pulls a private
//! image that no pull secret covers, runs the plugin once per cache key, and
//! names a failing plugin in the tag's failure; a config kubelet would refuse
//! stops the daemon at start with the field named.

use nodeimage_tests::kruise;
use nodeimage_tests::nodeimage::{self as ni, Tag};
use nodeimage_tests::process::Daemon;
use nodeimage_tests::{Cleanup, Cluster, cri, unique};
use serde_json::json;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LONG: Duration = Duration::from_secs(180);

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("ni-e2e-cp-")
        .tempdir_in("/tmp")
        .expect("create a temporary directory")
}

/// A plugin that logs each request's image to `$LOG` and answers with
/// `$USERNAME`/`$PASSWORD` for `$KEY`, cached per registry for a minute.
const GOOD_PLUGIN: &str = r#"#!/bin/sh
req=$(cat)
printf '%s\n' "$req" >>"$LOG"
printf '{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Registry","cacheDuration":"1m","auth":{"%s":{"username":"%s","password":"%s"}}}' "$KEY" "$USERNAME" "$PASSWORD"
"#;

/// A plugin that always fails.
const BROKEN_PLUGIN: &str =
    "#!/bin/sh\ncat >/dev/null\necho 'no credentials for you' >&2\nexit 3\n";

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write the plugin");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .expect("chmod the plugin");
}

/// The kubelet `CredentialProviderConfig` of one test daemon, whose good
/// plugin logs its requests to `log`.
fn provider_config(c: &Cluster, log: &Path) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1
kind: CredentialProviderConfig
providers:
  - name: good-provider
    matchImages: ["{host}/cp-good"]
    defaultCacheDuration: 10m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
    env:
      - {{name: LOG, value: "{log}"}}
      - {{name: KEY, value: "{host}"}}
      - {{name: USERNAME, value: "{user}"}}
      - {{name: PASSWORD, value: "{password}"}}
  - name: broken-provider
    matchImages: ["{host}/cp-broken"]
    defaultCacheDuration: 10m
    apiVersion: credentialprovider.kubelet.k8s.io/v1
"#,
        host = c.var("NODEIMAGE_AUTH_REGISTRY"),
        log = log.display(),
        user = c.var("NODEIMAGE_AUTH_USER"),
        password = c.var("NODEIMAGE_AUTH_PASSWORD"),
    )
}

/// On every node's runtime (a test daemon per node's containerd, each for a
/// fake NodeImage of its own, with kubelet's config and plugin directory):
/// a private image no pull secret covers is pulled with the good plugin's
/// credentials, the plugin runs once for two tags of one registry (its
/// answer is cached per registry) with a kubelet-shaped request, a failing
/// plugin is named with what it said in the tag's `unauthorized:` failure,
/// and the plugin's password never reaches the daemon's log.
#[test]
#[ignore = "needs the local cluster (make test)"]
fn plugins_supply_node_credentials_like_kubelets_on_every_runtime() {
    let c = Cluster::load();
    let dir = temp_dir();
    let bin = dir.path().join("plugins");
    std::fs::create_dir_all(&bin).expect("plugin dir");
    let reg = kruise::auth_registry(&c);
    let suffix = nodeimage_tests::random_suffix();
    let good_repo = format!("cp-good/app-{suffix}");
    let good = reg
        .push_image(&good_repo, Some("v1"), 64 << 10)
        .expect("push the good image");
    reg.push_image(&good_repo, Some("v2"), 64 << 10)
        .expect("push its second tag");
    let broken = reg
        .push_image(&format!("cp-broken/app-{suffix}"), Some("v1"), 64 << 10)
        .expect("push the broken image");
    write_exec(&bin.join("good-provider"), GOOD_PLUGIN);
    write_exec(&bin.join("broken-provider"), BROKEN_PLUGIN);
    let bin_flag = bin.display().to_string();
    let refs = vec![
        format!("{}:v1", good.name),
        format!("{}:v2", good.name),
        format!("{}:v1", broken.name),
    ];
    // No pull secret anywhere: the plugins are the only credentials.
    let spec = json!({"images": {
        &good.name: {"tags": [{"tag": "v1"}, {"tag": "v2"}]},
        &broken.name: {"tags": [{"tag": "v1", "pullPolicy": {"backoffLimit": 0}}]},
    }});

    let mut cleanup = Cleanup::default();
    // Per node: its fake NodeImage, its daemon and its plugin's log.
    let mut started = Vec::new();
    for n in c.runtime_nodes() {
        let log = dir.path().join(format!("good-{}.log", n.name));
        let config = dir.path().join(format!("config-{}.yaml", n.name));
        std::fs::write(&config, provider_config(&c, &log)).expect("write the config");
        let (sock, forget) = (n.socket.clone(), refs.clone());
        cleanup.defer(
            format!("remove the pulled images from {}", n.name),
            move || {
                for r in &forget {
                    let _ = cri::remove_image(&sock, r);
                }
            },
        );
        let name = unique("e2e-credprov");
        ni::create_fake(&c, &name, &BTreeMap::new(), json!({}));
        let (c2, n2) = (c.clone(), name.clone());
        cleanup.defer(format!("delete nodeimage {name}"), move || {
            ni::delete(&c2, &n2)
        });
        let config_flag = config.display().to_string();
        let daemon = Daemon::start(
            &c,
            &name,
            &n.socket,
            dir.path(),
            &[
                "--max-concurrent-pulls",
                "1",
                "--image-credential-provider-config",
                &config_flag,
                "--image-credential-provider-bin-dir",
                &bin_flag,
            ],
        );
        let r = ni::merge_patch(&c, &name, &json!({ "spec": spec }));
        assert!(r.success, "patch: {}", r.stderr);
        started.push((n, name, daemon, log));
    }

    let password = c.var("NODEIMAGE_AUTH_PASSWORD");
    for (n, name, daemon, log) in &started {
        n.check(|| {
            for tag in ["v1", "v2"] {
                ni::wait_tag(
                    &c,
                    Tag {
                        ni: name,
                        image: &good.name,
                        tag,
                    },
                    "Succeeded with the plugin's credentials",
                    LONG,
                    |t| t["phase"] == "Succeeded",
                    |t| t["phase"] == "Failed",
                );
                let on_node = cri::image_status(&n.socket, &format!("{}:{tag}", good.name))
                    .expect("CRI ImageStatus");
                assert!(
                    on_node.is_some(),
                    "{}:{tag} is in the node's containerd",
                    good.name
                );
            }
            let requests = std::fs::read_to_string(log).expect("the plugin's log");
            let lines: Vec<&str> = requests.lines().collect();
            assert_eq!(
                lines.len(),
                1,
                "two tags of one registry: one plugin run (its answer is cached per registry); requests: {requests}"
            );
            let req: serde_json::Value =
                serde_json::from_str(lines[0]).expect("the request is JSON");
            assert_eq!(req["kind"], "CredentialProviderRequest", "{req}");
            assert_eq!(
                req["apiVersion"], "credentialprovider.kubelet.k8s.io/v1",
                "{req}"
            );
            assert!(
                req["image"]
                    .as_str()
                    .is_some_and(|i| i.starts_with(&good.name)),
                "the request names the image: {req}"
            );

            let (_, failed) = ni::wait_tag(
                &c,
                Tag {
                    ni: name,
                    image: &broken.name,
                    tag: "v1",
                },
                "Failed (the broken plugin)",
                LONG,
                |t| t["phase"] == "Failed",
                |t| t["phase"] == "Succeeded",
            );
            let msg = failed["message"].as_str().unwrap_or_default();
            assert!(
                msg.contains("unauthorized: ")
                    && msg.contains("credential provider broken-provider")
                    && msg.contains("no credentials for you"),
                "the failure names the plugin and what it said: {msg}"
            );
            assert!(
                !daemon.log_text().contains(&password),
                "the daemon's log must never hold the plugin's password"
            );
        });
    }
    drop(started);
    drop(cleanup);
}

#[test]
#[ignore = "needs the local cluster (make test)"]
fn a_config_kubelet_would_refuse_stops_the_daemon_with_the_field_named() {
    let c = Cluster::load();
    let dir = temp_dir();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: p\n    matchImages: [\"r.io\"]\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n",
    )
    .expect("write the config");
    let out = Command::new(c.nodeimage_bin().join("nodeimage-daemon"))
        .args(["--node-name", "no-such-node", "--kubeconfig"])
        .arg(c.var("KUBECONFIG"))
        .arg("--containerd-socket")
        .arg(c.socket(0))
        .arg("--health-addr")
        .arg(format!("127.0.0.1:{}", nodeimage_tests::free_port()))
        .arg("--image-credential-provider-config")
        .arg(&config)
        .arg("--image-credential-provider-bin-dir")
        .arg(dir.path())
        .output()
        .expect("run the daemon");
    assert!(!out.status.success(), "the daemon must not start");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("providers[0].defaultCacheDuration is required"),
        "the error names the field: {text}"
    );
}
