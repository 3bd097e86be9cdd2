//! What the platform team lets tenants' jobs do with nodeimage's powers
//! over nodes and Secrets, from the flags: which namespaces' jobs may gate
//! new nodes (`--startup-gate-namespaces`, none by default) and which
//! namespaces an ImagePrePullJob's `imageSecrets` may name
//! (`--image-secret-namespaces`, any by default, as in KubeEdge), and
//! which namespaces' workloads may ask for pre-download
//! (`--predownload-namespaces`, any by default: a workload's jobs pull
//! only its own images, with its own pull secrets, onto its own nodes).
//! Cluster-scoped jobs are the platform team's own and always allowed.
//! The one home of these rules; pure.

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

/// The platform team's limits on tenants' jobs.
#[derive(Clone, Debug)]
pub struct Policy {
    /// Namespaces whose jobs may gate new nodes.
    pub gate_namespaces: Namespaces,
    /// Namespaces an ImagePrePullJob's `imageSecrets` may name.
    pub image_secret_namespaces: Namespaces,
    /// Namespaces whose workloads may ask for pre-download.
    pub predownload_namespaces: Namespaces,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            gate_namespaces: Namespaces::Only(BTreeSet::new()),
            image_secret_namespaces: Namespaces::Any,
            predownload_namespaces: Namespaces::Any,
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
        };
        assert_eq!(p.gate_refusal(Some("platform")), None);
        assert!(p.gate_refusal(Some("team-a")).is_some());
        assert_eq!(p.image_secret_refusal("registry-creds", "s"), None);
        let why = p
            .image_secret_refusal("kube-system", "s")
            .unwrap_or_default();
        assert!(why.contains("imageSecrets kube-system/s refused"), "{why}");
    }
}
