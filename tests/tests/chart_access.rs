//! Who may do what through the chart: its namespace lists, the roles it
//! renders, and what tenants get from Kubernetes' default roles.
//!
//! 1. Every namespace list of the chart (`startupGate.allowedNamespaces`,
//!    `controller.imageSecretNamespaces`, `controller.predownload.namespaces`)
//!    reads the same way: `[]` none, `["*"]` every namespace, names only
//!    those; each renders its controller flag so, the defaults keep their
//!    meaning (gating none, secrets and pre-download every namespace), and
//!    values.schema.json refuses `*` beside a name and malformed names.
//! 2. docs/install.md's table "What the chart grants" has one row per rule
//!    of the rendered roles, no more and no fewer.
//! 3. The aggregated ClusterRoles for tenants, for real: applied to the
//!    local cluster, where kube-controller-manager's clusterrole-aggregation
//!    controller folds them into `edit`; a ServiceAccount bound to `edit` in
//!    one namespace (its own token, nothing else) may create, get, list and
//!    delete ImagePullJobs there, and may not create them in another
//!    namespace, write NodeImages, ImagePrePullJobs, NodeUpgradeJobs or
//!    ImageRemovalJobs, or write a job's status.
//!
//! 4. The NOTES of `helm install` print docs/install.md's uninstall block
//!    with the release's names.
//!
//! Run by tests/chart.sh with the other chart tests (names start with
//! `chart_`: the main end-to-end step skips them).

use nodeimage_tests::helm::{self, TokenConfig, render};
use nodeimage_tests::{Cleanup, Cluster, repo_root, unique, wait_for};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::Duration;

const RELEASE: &str = "chart-access";
const NS: &str = "nodeimage-chart-access";

/// The chart's namespace lists: value path, the controller flag it renders,
/// and that flag's value when the list is left at its default.
const LISTS: [(&str, &str, &str); 3] = [
    (
        "startupGate.allowedNamespaces",
        "--startup-gate-namespaces",
        "",
    ),
    (
        "controller.imageSecretNamespaces",
        "--image-secret-namespaces",
        "*",
    ),
    (
        "controller.predownload.namespaces",
        "--predownload-namespaces",
        "*",
    ),
];

/// A render that must succeed.
fn rendered(c: &Cluster, extra: &[&str]) -> String {
    let r = render(c, RELEASE, NS, extra);
    assert!(r.success, "helm template {extra:?} failed:\n{}", r.text());
    r.stdout
}

/// The values of `flag` in the rendered controller's arguments.
fn flag_values(manifest: &str, flag: &str) -> Vec<String> {
    let prefix = format!("- {flag}=");
    manifest
        .lines()
        .filter_map(|l| l.trim().strip_prefix(&prefix))
        .map(|v| v.trim_matches('"').to_string())
        .collect()
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_namespace_lists_read_alike() {
    let c = Cluster::load();
    let defaults = rendered(&c, &[]);
    for (path, flag, default) in LISTS {
        assert_eq!(
            flag_values(&defaults, flag),
            [default],
            "{path} left at its default must keep its meaning ({flag}={default})"
        );
        for (value, want) in [
            ("[]", ""),
            (r#"["*"]"#, "*"),
            (r#"["team-a","team-b"]"#, "team-a,team-b"),
        ] {
            let set = format!("{path}={value}");
            let out = rendered(&c, &["--set-json", &set]);
            assert_eq!(flag_values(&out, flag), [want], "{set}");
        }
        for bad in [
            r#"["*","team-a"]"#,
            r#"["team-a","*"]"#,
            r#"[""]"#,
            r#"["team-a,team-b"]"#,
            r#"["Team-A"]"#,
            r#"["team-a","team-a"]"#,
        ] {
            let set = format!("{path}={bad}");
            let r = render(&c, RELEASE, NS, &["--set-json", &set]);
            assert!(!r.success, "{set} must be refused:\n{}", r.stdout);
            let field = path.replace('.', "/");
            assert!(
                r.stderr.contains(&field) || r.stderr.contains(path),
                "the refusal of {set} must name the value: {}",
                r.stderr
            );
        }
    }
    // Pre-download turned off is pre-download for no namespace.
    let off = rendered(&c, &["--set", "controller.predownload.enabled=false"]);
    assert_eq!(flag_values(&off, "--predownload-namespaces"), [""]);
}

/// One granted right: who, where, API group, resource, verb.
type Right = (String, String, String, String, String);

/// The rendered RBAC objects as JSON (kubectl reads the YAML).
fn rbac_objects(c: &Cluster, manifest: &str) -> Vec<Value> {
    let kinds = ["ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding"];
    let docs: Vec<&str> = manifest
        .split("\n---")
        .filter(|d| {
            d.lines()
                .any(|l| kinds.iter().any(|k| l.trim_end() == format!("kind: {k}")))
        })
        .collect();
    let out = c.kubectl_ok(
        &["create", "--dry-run=client", "-o", "json", "-f", "-"],
        Some(&docs.join("\n---\n")),
    );
    // One JSON document per object, one after the other.
    serde_json::Deserializer::from_str(&out)
        .into_iter::<Value>()
        .map(|v| v.expect("kubectl prints JSON"))
        .flat_map(|v| match v["kind"].as_str() {
            Some("List") => v["items"].as_array().cloned().unwrap_or_default(),
            _ => vec![v],
        })
        .collect()
}

/// Every right the rendered roles grant, named as docs/install.md's table
/// names them.
fn rendered_rights(c: &Cluster, manifest: &str) -> BTreeSet<Right> {
    let objects = rbac_objects(c, manifest);
    let who_of = |sa: &str| {
        if sa.ends_with("-controller") {
            "controller"
        } else if sa.ends_with("-daemon") {
            "daemon"
        } else {
            panic!("a binding to an unknown ServiceAccount {sa}")
        }
    };
    let mut out = BTreeSet::new();
    for role in objects.iter().filter(|o| {
        o["kind"].as_str() != Some("ClusterRoleBinding")
            && o["kind"].as_str() != Some("RoleBinding")
    }) {
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        let kind = role["kind"].as_str().unwrap_or_default();
        let mut holders: Vec<(String, String)> = Vec::new();
        if role["metadata"]["labels"]["nodeimage.dev/bound-by"].as_str() == Some("platform-team") {
            holders.push(("platform team".into(), "where bound".into()));
        }
        for label in ["view", "edit", "admin"] {
            let key = format!("rbac.authorization.k8s.io/aggregate-to-{label}");
            if role["metadata"]["labels"][&key].as_str() == Some("true") {
                holders.push((format!("`{label}`"), "where bound".into()));
            }
        }
        for b in objects.iter().filter(|o| {
            o["roleRef"]["name"].as_str() == Some(name)
                && o["roleRef"]["kind"].as_str() == Some(kind)
        }) {
            let place = match b["metadata"]["namespace"].as_str() {
                None => "cluster".to_string(),
                Some(NS) => "release namespace".to_string(),
                Some("nodeimage-secrets") => "secrets namespace".to_string(),
                Some(other) => format!("`{other}`"),
            };
            for s in b["subjects"].as_array().into_iter().flatten() {
                let sa = s["name"].as_str().unwrap_or_default();
                holders.push((who_of(sa).to_string(), place.clone()));
            }
        }
        assert!(
            !holders.is_empty(),
            "{kind} {name} is bound to no one and aggregated nowhere"
        );
        for rule in role["rules"].as_array().into_iter().flatten() {
            let strings = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            for (who, place) in &holders {
                for group in strings("apiGroups") {
                    let group = if group.is_empty() {
                        "core".to_string()
                    } else {
                        group
                    };
                    for resource in strings("resources") {
                        for verb in strings("verbs") {
                            out.insert((
                                who.clone(),
                                place.clone(),
                                group.clone(),
                                resource.clone(),
                                verb,
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

/// The rights docs/install.md's table lists.
fn documented_rights(install_md: &str) -> BTreeSet<Right> {
    let start =
        "<!-- rbac table: compared with the rendered roles by tests/tests/chart_access.rs -->";
    let table = install_md
        .split(start)
        .nth(1)
        .and_then(|t| t.split("<!-- end of the rbac table -->").next())
        .expect("docs/install.md has the marked rbac table");
    let list = |cell: &str| -> Vec<String> {
        cell.split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect()
    };
    let mut out = BTreeSet::new();
    for line in table.lines().filter(|l| l.starts_with('|')).skip(2) {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert!(cells.len() == 6, "a row of six cells: {line}");
        for resource in list(cells[3]) {
            for verb in list(cells[4]) {
                out.insert((
                    cells[0].to_string(),
                    cells[1].to_string(),
                    cells[2].to_string(),
                    resource.clone(),
                    verb,
                ));
            }
        }
    }
    out
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_rbac_table_is_the_rendered_roles() {
    let c = Cluster::load();
    let manifest = rendered(
        &c,
        &[
            "--set",
            "daemon.upgrades.enabled=true",
            "--set",
            "daemon.upgrades.nodeVersionSource=kubelet",
            "--set",
            "controller.eraserNamespace=eraser-system",
        ],
    );
    let rendered = rendered_rights(&c, &manifest);
    let md =
        std::fs::read_to_string(repo_root().join("docs/install.md")).expect("read docs/install.md");
    let documented = documented_rights(&md);
    let missing: Vec<_> = rendered.difference(&documented).collect();
    let extra: Vec<_> = documented.difference(&rendered).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/install.md's rbac table differs from the rendered roles.\n\
         granted but not in the table: {missing:#?}\nin the table but granted by no role: {extra:#?}"
    );
}

/// The aggregated roles of the chart, applied; removed at the end unless a
/// release owns them.
fn apply_tenant_roles(c: &Cluster, cleanup: &mut Cleanup) {
    let roles = rendered(c, &["--show-only", "templates/tenant-rbac.yaml"]);
    for name in [
        "aggregate-kruise-view",
        "aggregate-kruise-edit",
        "aggregate-kruise-admin",
    ] {
        let owner = c.kubectl(
            &[
                "get",
                "clusterrole",
                name,
                "-o",
                "jsonpath={.metadata.annotations.meta\\.helm\\.sh/release-name}",
            ],
            None,
        );
        assert!(
            !owner.success || owner.stdout.trim().is_empty(),
            "ClusterRole {name} belongs to release {:?}: uninstall it first",
            owner.stdout.trim()
        );
        let kc = c.kubectl_cmd();
        let kubectl = kc.get_program().to_owned();
        let kubeconfig = c.var("KUBECONFIG");
        cleanup.defer(format!("delete ClusterRole {name}"), move || {
            let _ = std::process::Command::new(&kubectl)
                .env("KUBECONFIG", &kubeconfig)
                .args(["delete", "clusterrole", name, "--ignore-not-found"])
                .output();
        });
    }
    c.kubectl_ok(&["apply", "-f", "-"], Some(&roles));
}

/// Whether ClusterRole `role` grants `verb` on ImagePullJobs (once the
/// aggregation controller has folded the chart's role in).
fn aggregated(c: &Cluster, role: &str, verb: &str) -> bool {
    let out = c.kubectl_ok(&["get", "clusterrole", role, "-o", "json"], None);
    let v: Value = serde_json::from_str(&out).expect("a ClusterRole as JSON");
    v["rules"].as_array().into_iter().flatten().any(|r| {
        let has = |k: &str, want: &str| {
            r[k].as_array()
                .into_iter()
                .flatten()
                .any(|x| x.as_str() == Some(want))
        };
        has("apiGroups", "apps.kruise.io")
            && has("resources", "imagepulljobs")
            && has("verbs", verb)
    })
}

fn refused(r: &helm::Run, what: &str) {
    assert!(
        !r.success,
        "{what}: expected Forbidden, but it succeeded: {}",
        r.text()
    );
    assert!(
        r.text().to_lowercase().contains("forbidden"),
        "{what}: expected Forbidden, got: {}",
        r.text()
    );
}

fn allowed(r: &helm::Run, what: &str) {
    assert!(r.success, "{what}: expected success, got: {}", r.text());
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_tenants_edit_role_grants_only_their_jobs() {
    let c = Cluster::load();
    let mut cleanup = Cleanup::default();
    apply_tenant_roles(&c, &mut cleanup);
    for (role, verb) in [("view", "list"), ("edit", "create"), ("admin", "create")] {
        wait_for(
            &format!(
                "ClusterRole {role} to include the chart's rules ({verb} imagepulljobs): \
                 kube-controller-manager's clusterrole-aggregation controller must run \
                 (tests/kube/main.go; a cluster started before it was added needs a restart)"
            ),
            Duration::from_secs(60),
            || aggregated(&c, role, verb).then_some(()),
        );
    }
    assert!(
        !aggregated(&c, "view", "create"),
        "view must not create ImagePullJobs"
    );

    let (mine, other) = (unique("chart-tenant"), unique("chart-tenant-other"));
    for ns in [&mine, &other] {
        c.kubectl_ok(&["create", "namespace", ns], None);
        let kc = c.kubectl_cmd().get_program().to_owned();
        let (kubeconfig, ns) = (c.var("KUBECONFIG"), ns.clone());
        cleanup.defer(format!("delete namespace {ns}"), move || {
            let run = |args: &[&str]| {
                let _ = std::process::Command::new(&kc)
                    .env("KUBECONFIG", &kubeconfig)
                    .args(args)
                    .output();
            };
            // No controller may be there to clear a job's finalizer.
            let jobs = std::process::Command::new(&kc)
                .env("KUBECONFIG", &kubeconfig)
                .args(["get", "imagepulljobs", "-n", &ns, "-o", "name"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for job in jobs.lines() {
                run(&[
                    "patch",
                    job,
                    "-n",
                    &ns,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ]);
            }
            run(&["delete", "namespace", &ns, "--wait=false"]);
        });
    }
    c.kubectl_ok(&["create", "serviceaccount", "tenant", "-n", &mine], None);
    c.kubectl_ok(
        &[
            "create",
            "rolebinding",
            "tenant-edit",
            "-n",
            &mine,
            "--clusterrole=edit",
            &format!("--serviceaccount={mine}:tenant"),
        ],
        None,
    );
    let work = tempfile::tempdir().expect("work dir");
    let tenant = TokenConfig::create(&c, work.path(), "tenant", &mine, "tenant", &[]);

    let job = |ns: &str| {
        json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
            "metadata": {"name": "tenant-job", "namespace": ns},
            "spec": {"image": "registry.example.test/app:v1",
                     "selector": {"names": ["chart-tenant-no-such-node"]},
                     "completionPolicy": {"type": "Always"}}})
        .to_string()
    };
    let as_tenant = |args: &[&str], stdin: Option<&str>| -> helm::Run {
        let mut cmd = std::process::Command::new(c.var("KUBECTL"));
        cmd.env("KUBECONFIG", &tenant.kubeconfig).args(args);
        match stdin {
            None => helm::run(cmd),
            Some(input) => {
                let dir = work.path().join(format!("stdin-{}.json", unique("in")));
                std::fs::write(&dir, input).expect("write the manifest");
                cmd.args(["-f", &dir.to_string_lossy()]);
                helm::run(cmd)
            }
        }
    };

    // Its own namespace: create, get, list, delete.
    allowed(
        &as_tenant(&["create"], Some(&job(&mine))),
        "create an ImagePullJob in its namespace",
    );
    allowed(
        &as_tenant(&["get", "imagepulljob", "tenant-job", "-n", &mine], None),
        "get its ImagePullJob",
    );
    allowed(
        &as_tenant(&["get", "imagepulljobs", "-n", &mine], None),
        "list its ImagePullJobs",
    );
    allowed(
        &as_tenant(&["get", "imagelistpulljobs", "-n", &mine], None),
        "list its ImageListPullJobs",
    );
    refused(
        &as_tenant(
            &[
                "patch",
                "imagepulljob",
                "tenant-job",
                "-n",
                &mine,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"message":"x"}}"#,
            ],
            None,
        ),
        "write its job's status (the controller's)",
    );
    allowed(
        &as_tenant(
            &[
                "delete",
                "imagepulljob",
                "tenant-job",
                "-n",
                &mine,
                "--wait=false",
            ],
            None,
        ),
        "delete its ImagePullJob",
    );

    // Nothing else of nodeimage's.
    refused(
        &as_tenant(&["create"], Some(&job(&other))),
        "create an ImagePullJob in another namespace",
    );
    refused(
        &as_tenant(&["get", "imagepulljobs", "-n", &other], None),
        "list another namespace's ImagePullJobs",
    );
    let ni = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": "chart-tenant-ni"}, "spec": {}})
    .to_string();
    refused(&as_tenant(&["create"], Some(&ni)), "create a NodeImage");
    refused(&as_tenant(&["get", "nodeimages"], None), "list NodeImages");
    let existing = c.kubectl_ok(
        &[
            "get",
            "nodeimages",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ],
        None,
    );
    let target = if existing.trim().is_empty() {
        "node-1"
    } else {
        existing.trim()
    };
    refused(
        &as_tenant(
            &[
                "patch",
                "nodeimage",
                target,
                "--type=merge",
                "-p",
                r#"{"metadata":{"labels":{"tenant":"x"}}}"#,
            ],
            None,
        ),
        "patch a NodeImage",
    );
    let ippj = json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "ImagePrePullJob",
        "metadata": {"name": "chart-tenant-ippj"},
        "spec": {"imagePrePullTemplate": {"images": ["registry.example.test/app:v1"], "nodeNames": ["node-1"]}}})
    .to_string();
    refused(
        &as_tenant(&["create"], Some(&ippj)),
        "create an ImagePrePullJob",
    );
    let nuj = json!({"apiVersion": "operations.kubeedge.io/v1alpha2", "kind": "NodeUpgradeJob",
        "metadata": {"name": "chart-tenant-nuj"},
        "spec": {"version": "v1.21.0", "nodeNames": ["node-1"]}})
    .to_string();
    refused(
        &as_tenant(&["create"], Some(&nuj)),
        "create a NodeUpgradeJob",
    );
    let irj = json!({"apiVersion": "nodeimage.dev/v1alpha1", "kind": "ImageRemovalJob",
        "metadata": {"name": "chart-tenant-irj"},
        "spec": {"images": ["registry.example.test/app:v1"], "selector": {"names": ["node-1"]}}})
    .to_string();
    refused(
        &as_tenant(&["create"], Some(&irj)),
        "create an ImageRemovalJob",
    );
    refused(
        &as_tenant(&["get", "imageremovaljobs"], None),
        "list ImageRemovalJobs",
    );
    refused(
        &as_tenant(&["get", "secrets", "-n", "nodeimage-secrets"], None),
        "read the daemons' secret copies",
    );
    drop(cleanup);
}

#[test]
#[ignore = "needs the local cluster and helm (tests/chart.sh)"]
fn chart_notes_print_the_documented_uninstall() {
    let c = Cluster::load();
    let chart = helm::chart();
    let chart = chart.to_string_lossy();
    // A release of its own (helm's client dry run still refuses objects
    // another release owns); the block's names are put in below.
    let (release, ns, secrets) = (
        "chart-notes",
        "nodeimage-chart-notes",
        "secretsNamespace=nodeimage-chart-notes-secrets",
    );
    let mut args = vec![
        "install",
        release,
        &chart,
        "-n",
        ns,
        "--dry-run=client",
        "--set",
        secrets,
    ];
    args.extend(helm::IMAGES);
    let r = helm::helm(&c, &args);
    assert!(
        r.success,
        "helm install --dry-run=client failed: {}",
        r.text()
    );
    let notes = r
        .stdout
        .split("NOTES:")
        .nth(1)
        .expect("helm prints the NOTES");
    let md =
        std::fs::read_to_string(repo_root().join("docs/install.md")).expect("read docs/install.md");
    let block = nodeimage_tests::docs::marked_block(&md, "uninstall").expect("the uninstall block");
    let first = md
        .lines()
        .find(|l| l.starts_with("NS=nodeimage-system RELEASE="))
        .expect("the block's first line");
    let want: String = std::iter::once(first)
        .chain(block.body.lines())
        .map(|l| {
            let l = l.replace(
                "NS=nodeimage-system RELEASE=nodeimage",
                &format!("NS={ns} RELEASE={release}"),
            );
            format!("  {l}\n")
        })
        .collect();
    assert!(
        notes.contains(&want),
        "the NOTES must print docs/install.md's uninstall block:\n{want}\nNOTES:{notes}"
    );
}
