//! What the NodeImages show of each registry: the nodes with a tag entry
//! on it whose answering status is not finished (hand-written entries
//! included; an upgrade only until its image is pulled), and whether a tag
//! waits because the registry rate-limited it, and for which tenants
//! (namespaces, or cluster-scoped kinds) each node pulls. Pure, but for
//! [`LoadMemo`], which remembers each NodeImage's share between plans.

use super::rule::tenant;
use nodeimage_api::kruise::{ImageTagSpec, ImageTagStatus, NodeImage, UpgradeState};
use nodeimage_api::reference::{ImageRef, canonical_registry};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

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

    /// Takes `node` out: it pulls from elsewhere (peers) for now.
    pub fn remove(&mut self, node: &str) {
        self.pulling.remove(node);
        for nodes in self.tenants.values_mut() {
            nodes.remove(node);
        }
        self.tenants.retain(|_, nodes| !nodes.is_empty());
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
/// `keep` accepts.
pub fn loads<'a>(
    nodeimages: impl IntoIterator<Item = &'a NodeImage>,
    keep: impl Fn(&str) -> bool,
) -> BTreeMap<String, Load> {
    let mut out = BTreeMap::new();
    for ni in nodeimages {
        let name = ni.metadata.name.as_deref().unwrap_or_default();
        node_load(ni).add_to(name, &mut out, &keep);
    }
    out
}

/// What one NodeImage shows of every registry: the registries it may still
/// pull from, each with the tenants it pulls for, and the registry hosts
/// that rate-limited one of its tags.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeLoad {
    pulling: BTreeMap<String, BTreeSet<String>>,
    rate_limited: BTreeSet<String>,
}

impl NodeLoad {
    /// Adds this node (named `node`) to `out`, for the registries `keep`
    /// accepts.
    fn add_to(&self, node: &str, out: &mut BTreeMap<String, Load>, keep: impl Fn(&str) -> bool) {
        for host in self.rate_limited.iter().filter(|h| keep(h)) {
            out.entry(host.clone()).or_default().rate_limited = true;
        }
        for (registry, tenants) in self.pulling.iter().filter(|(r, _)| keep(r)) {
            let load = out.entry(registry.clone()).or_default();
            load.add(node, None);
            for t in tenants {
                load.add(node, Some(t));
            }
        }
    }
}

/// What `ni` shows of every registry (see [`NodeLoad`]).
pub fn node_load(ni: &NodeImage) -> NodeLoad {
    let mut out = NodeLoad::default();
    let status = ni.status.as_ref();
    for (image, spec) in ni.spec.images.iter().flatten() {
        let registry = registry_of(image);
        for tag in &spec.tags {
            let answer = status.and_then(|s| s.entry_for(image, tag));
            if let Some(host) = answer.and_then(|a| a.rate_limited_by()) {
                out.rate_limited
                    .insert(canonical_registry(host).to_string());
            }
            let Some(registry) = registry.as_ref() else {
                continue;
            };
            if may_pull(answer) {
                let tenants = out.pulling.entry(registry.clone()).or_default();
                for o in tag.owner_references.iter().flatten() {
                    let kind = o.kind.as_deref().unwrap_or_default();
                    tenants.insert(tenant(o.namespace.as_deref(), kind));
                }
            }
        }
    }
    out
}

/// Each NodeImage's [`NodeLoad`] as of its resourceVersion, so that a plan
/// reads again only the NodeImages that changed since the last one. Owned
/// by the pacing ledger; a node's entry is replaced when its
/// resourceVersion changes and dropped by the first read whose snapshot
/// no longer holds it.
#[derive(Debug, Default)]
pub struct LoadMemo {
    nodes: HashMap<String, (String, Arc<NodeLoad>)>,
}

impl LoadMemo {
    /// Each registry's [`Load`] over `snapshot` (see [`loads`]).
    pub fn loads(
        &mut self,
        snapshot: &[Arc<NodeImage>],
        keep: impl Fn(&str) -> bool,
    ) -> BTreeMap<String, Load> {
        let mut out = BTreeMap::new();
        let mut kept = HashMap::with_capacity(snapshot.len());
        for ni in snapshot {
            let name = ni.metadata.name.as_deref().unwrap_or_default();
            let load = match ni.metadata.resource_version.as_deref() {
                Some(rv) => {
                    let load = match self.nodes.remove(name) {
                        Some((seen, load)) if seen == rv => load,
                        _ => Arc::new(node_load(ni)),
                    };
                    kept.insert(name.to_string(), (rv.to_string(), load.clone()));
                    load
                }
                // Nothing to tell versions apart by: read it every time.
                None => Arc::new(node_load(ni)),
            };
            load.add_to(name, &mut out, &keep);
        }
        self.nodes = kept;
        out
    }

    /// How many NodeImages it remembers.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// The tag entries of `ni` on `registry` the node may still pull for, with
/// their image keys.
pub fn unfinished_on<'a>(
    ni: &'a NodeImage,
    registry: &'a str,
) -> impl Iterator<Item = (&'a str, &'a ImageTagSpec)> + 'a {
    let status = ni.status.as_ref();
    ni.spec
        .images
        .iter()
        .flatten()
        .filter(move |(image, _)| registry_of(image).as_deref() == Some(registry))
        .flat_map(move |(image, spec)| {
            spec.tags
                .iter()
                .filter(move |t| may_pull(status.and_then(|s| s.entry_for(image, t))))
                .map(move |t| (image.as_str(), t))
        })
}

/// Whether the node may still pull for a tag entry answered by `answer`:
/// no answer yet, or an unfinished one (a NodeUpgradeJob's entry only
/// until its image is pulled: its upgrade may then wait for confirmation
/// for as long as the operator takes).
pub fn may_pull(answer: Option<&ImageTagStatus>) -> bool {
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
