//! What the platform team lets tenants' jobs do with nodeimage's powers
//! over nodes and Secrets, from the flags: which namespaces' jobs may gate
//! new nodes (`--startup-gate-namespaces`, none by default) and which
//! namespaces an ImagePrePullJob's `imageSecrets` may name
//! (`--image-secret-namespaces`, any by default, as in KubeEdge), and
//! which namespaces' workloads may ask for pre-download
//! (`--predownload-namespaces`, any by default: a workload's jobs pull
//! only its own images, with its own pull secrets, onto its own nodes).
//! Cluster-scoped jobs are the platform team's own and always allowed.
//! Also the image repositories a NodeUpgradeJob may take its upgrade tool
//! from (`--upgrade-images`, KubeEdge's installer image by default): the
//! tool runs as root on every selected node.
//! The one home of these rules; pure.

use nodeimage_api::reference::ImageRef;
use std::collections::BTreeSet;

/// A set of namespaces, or every namespace (`*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Namespaces {
    /// Every namespace.
    Any,
    /// Only these (none when empty).
    Only(BTreeSet<String>),
}

impl Namespaces {
    /// The set a flag's comma-separated list names: `*` is every namespace,
    /// empty items are ignored, so an empty list is none.
    pub fn from_list(items: &[String]) -> Self {
        let names: BTreeSet<String> = items
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if names.contains("*") {
            Namespaces::Any
        } else {
            Namespaces::Only(names)
        }
    }

    /// Whether `namespace` is in the set.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            Namespaces::Any => true,
            Namespaces::Only(names) => names.contains(namespace),
        }
    }

    /// The set as the flag would take it, for messages.
    pub fn describe(&self) -> String {
        match self {
            Namespaces::Any => "*".into(),
            Namespaces::Only(n) if n.is_empty() => "none".into(),
            Namespaces::Only(n) => n.iter().cloned().collect::<Vec<_>>().join(","),
        }
    }
}

/// The image repositories NodeUpgradeJobs may take the upgrade tool from:
/// every one (`*`), or the listed repositories (`kubeedge/installation-package`,
/// Docker Hub's names normalised as the runtime pulls them) and everything
/// under a listed prefix (`registry.example.com/edge/*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpgradeImages {
    /// Any repository.
    Any,
    /// Only these repositories (full names) and these prefixes (ending in `/`).
    Only {
        /// Repositories, as `host/path`.
        repositories: BTreeSet<String>,
        /// Prefixes, as `host/` or `host/path/`.
        prefixes: BTreeSet<String>,
        /// The list as given, for messages.
        given: Vec<String>,
    },
}

/// The flag's default: KubeEdge's installer image, the one a job gets
/// when it names none.
pub const DEFAULT_UPGRADE_IMAGES: &str = nodeimage_api::kubeedge::DEFAULT_UPGRADE_IMAGE;

impl UpgradeImages {
    /// The set a flag's comma-separated list names (empty items ignored, so
    /// an empty list allows none); an error names an item that is not a
    /// repository or a prefix `…/*`.
    pub fn from_list(items: &[String]) -> Result<Self, String> {
        let mut repositories = BTreeSet::new();
        let mut prefixes = BTreeSet::new();
        let mut given = Vec::new();
        for item in items.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
            if item == "*" {
                return Ok(UpgradeImages::Any);
            }
            let bad = |e: String| {
                format!(
                    "--upgrade-images: {item:?} is not an image repository or a prefix ending in /*: {e}"
                )
            };
            if let Some(prefix) = item.strip_suffix("/*") {
                // Two made-up components keep Docker Hub's `library/` out.
                let r =
                    ImageRef::parse(&format!("{prefix}/x/y")).map_err(|e| bad(e.to_string()))?;
                let name = r.name();
                let p = name
                    .strip_suffix("x/y")
                    .ok_or_else(|| bad("a tag or digest".into()))?;
                prefixes.insert(p.to_string());
            } else {
                let r = ImageRef::parse(item).map_err(|e| bad(e.to_string()))?;
                if r.tag.is_some() || r.digest.is_some() {
                    return Err(bad("name a repository, without tag or digest".into()));
                }
                repositories.insert(r.name());
            }
            given.push(item.to_string());
        }
        Ok(UpgradeImages::Only {
            repositories,
            prefixes,
            given,
        })
    }

    /// Whether a job may take its upgrade tool from `image`'s repository.
    pub fn allows(&self, image: &ImageRef) -> bool {
        match self {
            UpgradeImages::Any => true,
            UpgradeImages::Only {
                repositories,
                prefixes,
                ..
            } => {
                let name = image.name();
                repositories.contains(&name)
                    || prefixes.iter().any(|p| name.starts_with(p.as_str()))
            }
        }
    }

    /// The list as the flag took it, for messages.
    pub fn describe(&self) -> String {
        match self {
            UpgradeImages::Any => "*".into(),
            UpgradeImages::Only { given, .. } if given.is_empty() => "none".into(),
            UpgradeImages::Only { given, .. } => given.join(","),
        }
    }

    /// Why a NodeUpgradeJob may not take its tool from `image` (as the job
    /// names it); None when it may.
    pub fn refusal(&self, image: &ImageRef, as_given: &str) -> Option<String> {
        (!self.allows(image)).then(|| {
            format!(
                "spec.image {as_given} ({}) is not an allowed upgrade image: nothing was \
                 written to any node (allowed: {}; the chart's controller.upgradeImages, \
                 --upgrade-images)",
                image.name(),
                self.describe()
            )
        })
    }
}

impl Default for UpgradeImages {
    fn default() -> Self {
        Self::from_list(&[DEFAULT_UPGRADE_IMAGES.to_string()]).unwrap_or(UpgradeImages::Only {
            repositories: BTreeSet::new(),
            prefixes: BTreeSet::new(),
            given: Vec::new(),
        })
    }
}

/// The platform team's limits on tenants' jobs.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Namespaces whose jobs may gate new nodes.
    pub gate_namespaces: Namespaces,
    /// Namespaces an ImagePrePullJob's `imageSecrets` may name.
    pub image_secret_namespaces: Namespaces,
    /// Namespaces whose workloads may ask for pre-download.
    pub predownload_namespaces: Namespaces,
    /// Repositories NodeUpgradeJobs may take the upgrade tool from.
    pub upgrade_images: UpgradeImages,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            gate_namespaces: Namespaces::Only(BTreeSet::new()),
            image_secret_namespaces: Namespaces::Any,
            predownload_namespaces: Namespaces::Any,
            upgrade_images: UpgradeImages::default(),
        }
    }
}

impl Policy {
    /// Why a gating job in `namespace` (None: cluster-scoped) gates
    /// nothing; None when it may gate.
    pub fn gate_refusal(&self, namespace: Option<&str>) -> Option<String> {
        let ns = namespace?;
        (!self.gate_namespaces.contains(ns)).then(|| {
            format!(
                "{} is ignored: namespace {ns} may not gate new nodes (allowed: {}; \
                 the chart's startupGate.allowedNamespaces, --startup-gate-namespaces)",
                nodeimage_api::gate::GATE_NEW_NODES,
                self.gate_namespaces.describe()
            )
        })
    }

    /// Why an ImagePrePullJob may not use a secret of `namespace`; None
    /// when it may.
    pub fn image_secret_refusal(&self, namespace: &str, name: &str) -> Option<String> {
        (!self.image_secret_namespaces.contains(namespace)).then(|| {
            format!(
                "imageSecrets {namespace}/{name} refused: secrets of namespace {namespace} \
                 may not be used (allowed: {}; the chart's controller.imageSecretNamespaces, \
                 --image-secret-namespaces)",
                self.image_secret_namespaces.describe()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn namespace_lists_table() {
        for (items, ns, allowed) in [
            (&[][..], "team-a", false),
            (&[""][..], "team-a", false),
            (&["team-a"][..], "team-a", true),
            (&[" team-a "][..], "team-a", true),
            (&["team-a"][..], "team-b", false),
            (&["team-a", "*"][..], "team-b", true),
            (&["*"][..], "kube-system", true),
        ] {
            let n = Namespaces::from_list(&list(items));
            assert_eq!(n.contains(ns), allowed, "{items:?} {ns}");
        }
    }

    #[test]
    fn the_defaults_refuse_tenants_the_gate_and_keep_kubeedge_secrets() {
        let p = Policy::default();
        assert_eq!(p.gate_refusal(None), None, "cluster-scoped jobs gate");
        let why = p.gate_refusal(Some("team-a")).unwrap_or_default();
        assert!(
            why.contains("namespace team-a may not gate new nodes"),
            "{why}"
        );
        assert!(why.contains("allowed: none"), "{why}");
        assert_eq!(p.image_secret_refusal("kube-system", "s"), None);
        let p = Policy {
            gate_namespaces: Namespaces::from_list(&list(&["platform"])),
            image_secret_namespaces: Namespaces::from_list(&list(&["registry-creds"])),
            predownload_namespaces: Namespaces::Any,
            upgrade_images: UpgradeImages::default(),
        };
        assert_eq!(p.gate_refusal(Some("platform")), None);
        assert!(p.gate_refusal(Some("team-a")).is_some());
        assert_eq!(p.image_secret_refusal("registry-creds", "s"), None);
        let why = p
            .image_secret_refusal("kube-system", "s")
            .unwrap_or_default();
        assert!(why.contains("imageSecrets kube-system/s refused"), "{why}");
    }

    #[test]
    fn upgrade_images_table() {
        let default = UpgradeImages::default();
        let local = UpgradeImages::from_list(&list(&[
            "127.0.0.1:5000/*",
            "kubeedge/installation-package",
        ]))
        .expect("a valid list");
        let under =
            UpgradeImages::from_list(&list(&["registry.example.com/edge/*", "docker.io/*"]))
                .expect("a valid list");
        let none = UpgradeImages::from_list(&list(&[""])).expect("a valid list");
        let any = UpgradeImages::from_list(&list(&["x.io/a", "*"])).expect("a valid list");
        let cases = [
            (&default, "kubeedge/installation-package", true),
            (&default, "docker.io/kubeedge/installation-package", true),
            (
                &default,
                "index.docker.io/kubeedge/installation-package",
                true,
            ),
            (&default, "kubeedge/installation-package:v1.21.0", true),
            (&default, "kubeedge/installation-package-evil", false),
            (&default, "evil/installation-package", false),
            (
                &default,
                "registry.example.com/kubeedge/installation-package",
                false,
            ),
            (
                &default,
                "127.0.0.1:5000/kubeedge/installation-package",
                false,
            ),
            (&local, "127.0.0.1:5000/e2e-1/installation-package", true),
            (&local, "127.0.0.1:5001/e2e-1/installation-package", false),
            (&local, "127.0.0.1:50000/x", false),
            (&local, "kubeedge/installation-package", true),
            (&under, "registry.example.com/edge/keadm", true),
            (&under, "registry.example.com/edge/sub/keadm", true),
            (&under, "registry.example.com/edgey/keadm", false),
            (&under, "registry.example.com/keadm", false),
            (&under, "nginx", true),
            (&under, "kubeedge/installation-package", true),
            (&none, "kubeedge/installation-package", false),
            (&any, "anything.example/at/all", true),
        ];
        for (set, image, want) in cases {
            let r = ImageRef::parse(image).expect("a reference");
            assert_eq!(set.allows(&r), want, "{set:?} {image}");
            assert_eq!(set.refusal(&r, image).is_none(), want, "{set:?} {image}");
        }
        for bad in [
            "kubeedge/installation-package:v1",
            "Not An Image",
            "x.io/a@sha256:0",
            "/*",
        ] {
            let got = UpgradeImages::from_list(&list(&[bad]));
            assert!(
                got.as_ref().is_err_and(|e| e.contains("--upgrade-images")),
                "{bad}: {got:?}"
            );
        }
        let r = ImageRef::parse("evil/installation-package").expect("a reference");
        let why = default
            .refusal(&r, "evil/installation-package:v1")
            .unwrap_or_default();
        assert!(why.contains("spec.image evil/installation-package:v1 (docker.io/evil/installation-package) is not an allowed upgrade image"), "{why}");
        assert!(
            why.contains("allowed: kubeedge/installation-package"),
            "{why}"
        );
        assert!(
            why.contains("controller.upgradeImages, --upgrade-images"),
            "{why}"
        );
        assert_eq!(none.describe(), "none");
    }
}
