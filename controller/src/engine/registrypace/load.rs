//! What the NodeImages show of each registry: the nodes with a tag entry
//! on it whose answering status is not finished (hand-written entries
//! included; an upgrade only until its image is pulled), and whether a tag
//! waits because the registry rate-limited it, and for which tenants
//! (namespaces, or cluster-scoped kinds) each node pulls. Pure.

use super::rule::tenant;
use nodeimage_api::kruise::{ImageTagStatus, NodeImage, UpgradeState};
use nodeimage_api::reference::{ImageRef, canonical_registry};
use std::collections::{BTreeMap, BTreeSet};

/// One registry as the NodeImages show it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Nodes with an unfinished entry of an image on the registry.
    pub pulling: BTreeSet<String>,
    /// For each tenant of a job owning an unfinished entry, its nodes.
    pub tenants: BTreeMap<String, BTreeSet<String>>,
    /// A tag waits because the registry answered 429.
    pub rate_limited: bool,
}

impl Load {
    /// Counts `node` as pulling, for `tenant` if it has one.
    pub fn add(&mut self, node: &str, tenant: Option<&str>) {
        if !self.pulling.contains(node) {
            self.pulling.insert(node.to_string());
        }
        if let Some(t) = tenant {
            let nodes = self.tenants.entry(t.to_string()).or_default();
            if !nodes.contains(node) {
                nodes.insert(node.to_string());
            }
        }
    }

    /// How many nodes pull for each tenant.
    pub fn held(&self) -> BTreeMap<String, usize> {
        self.tenants
            .iter()
            .map(|(t, n)| (t.clone(), n.len()))
            .collect()
    }
}

/// The registry of a NodeImage image key (`None`: not a reference).
pub fn registry_of(image: &str) -> Option<String> {
    ImageRef::parse(image).ok().map(|r| r.registry)
}

/// Each registry's [`Load`] over `nodeimages`, keeping only the registries
/// `keep` accepts (each image key is parsed once per call).
pub fn loads<'a>(
    nodeimages: impl IntoIterator<Item = &'a NodeImage>,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<String, Load> {
    let mut registries: BTreeMap<&'a str, Option<String>> = BTreeMap::new();
    let mut out: BTreeMap<String, Load> = BTreeMap::new();
    for ni in nodeimages {
        let name = ni.metadata.name.as_deref().unwrap_or_default();
        let status = ni.status.as_ref();
        for (image, spec) in ni.spec.images.iter().flatten() {
            let registry = registries
                .entry(image.as_str())
                .or_insert_with(|| registry_of(image).filter(|r| keep(r.as_str())));
            for tag in &spec.tags {
                let answer = status.and_then(|s| s.entry_for(image, tag));
                if let Some(host) = answer.and_then(|a| a.rate_limited_by()) {
                    let host = canonical_registry(host);
                    if keep(host) {
                        out.entry(host.to_string()).or_default().rate_limited = true;
                    }
                }
                let Some(registry) = registry.as_ref() else {
                    continue;
                };
                if may_pull(answer) {
                    let load = out.entry(registry.clone()).or_default();
                    load.add(name, None);
                    for o in tag.owner_references.iter().flatten() {
                        let kind = o.kind.as_deref().unwrap_or_default();
                        load.add(name, Some(&tenant(o.namespace.as_deref(), kind)));
                    }
                }
            }
        }
    }
    out
}

/// Whether the node may still pull for a tag entry answered by `answer`:
/// no answer yet, or an unfinished one (a NodeUpgradeJob's entry only
/// until its image is pulled: its upgrade may then wait for confirmation
/// for as long as the operator takes).
fn may_pull(answer: Option<&ImageTagStatus>) -> bool {
    let Some(a) = answer else {
        return true;
    };
    let pulled = matches!(
        a.upgrade_state(),
        Some(
            UpgradeState::WaitingConfirmation
                | UpgradeState::BackingUp
                | UpgradeState::Upgrading
                | UpgradeState::RollingBack
                | UpgradeState::RolledBack
                | UpgradeState::Successful
        )
    );
    !a.phase.is_finished() && !pulled
}
