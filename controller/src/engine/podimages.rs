//! Which images a pod spec runs: its containers', its init containers'
//! (sidecars included) and its image volumes', each with whether it is
//! always pulled. One rule for a workload's template and for its Pods.

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume};
use std::collections::BTreeMap;

/// One image a pod spec needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The reference as written.
    pub image: String,
    /// Some use of it pulls it always (`Always`, or a `:latest`/untagged
    /// reference without a policy, as kubelet defaults it).
    pub always: bool,
}

/// The images of `spec`, in the order they appear, each once. Images whose
/// every use says `Never` are left out: kubelet never pulls those.
pub fn wanted(spec: &PodSpec) -> Vec<Wanted> {
    let mut order: Vec<String> = Vec::new();
    let mut seen: BTreeMap<String, Option<bool>> = BTreeMap::new();
    let mut add = |image: &str, policy: Option<&str>| {
        if image.is_empty() {
            return;
        }
        let always = match policy {
            Some("Always") => Some(true),
            Some("Never") => None,
            Some(_) => Some(false),
            None => Some(defaults_to_always(image)),
        };
        let slot = seen.entry(image.to_string()).or_insert_with(|| {
            order.push(image.to_string());
            None
        });
        *slot = match (*slot, always) {
            (Some(a), Some(b)) => Some(a || b),
            (a, b) => a.or(b),
        };
    };
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    for c in containers {
        add(
            c.image.as_deref().unwrap_or(""),
            c.image_pull_policy.as_deref(),
        );
    }
    for v in spec.volumes.iter().flatten() {
        if let Some(iv) = &v.image {
            add(
                iv.reference.as_deref().unwrap_or(""),
                iv.pull_policy.as_deref(),
            );
        }
    }
    order
        .into_iter()
        .filter_map(|image| {
            let always = seen.get(&image).copied().flatten()?;
            Some(Wanted { image, always })
        })
        .collect()
}

/// Kubelet's default pull policy: `Always` for `:latest` or no tag (and no
/// digest), `IfNotPresent` otherwise.
fn defaults_to_always(image: &str) -> bool {
    if image.contains('@') {
        return false;
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.rsplit_once(':') {
        Some((_, tag)) => tag == "latest",
        None => true,
    }
}

/// `spec` trimmed to what [`wanted`] and [`used`] read: names, images
/// and pull policies of its containers and init containers, its image
/// volumes, its pull secrets, and the node it runs on.
pub fn slim(spec: &PodSpec) -> PodSpec {
    let slim = |c: &Container| Container {
        name: c.name.clone(),
        image: c.image.clone(),
        image_pull_policy: c.image_pull_policy.clone(),
        ..Default::default()
    };
    let volumes: Vec<Volume> = spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| v.image.is_some())
        .map(|v| Volume {
            name: v.name.clone(),
            image: v.image.clone(),
            ..Default::default()
        })
        .collect();
    PodSpec {
        containers: spec.containers.iter().map(slim).collect(),
        init_containers: spec
            .init_containers
            .as_ref()
            .map(|cs| cs.iter().map(slim).collect()),
        image_pull_secrets: spec.image_pull_secrets.clone(),
        volumes: (!volumes.is_empty()).then_some(volumes),
        node_name: spec.node_name.clone(),
        ..Default::default()
    }
}

/// Every image a Pod runs or mounts (whatever its pull policy), to tell
/// which Pods already run a template's images.
pub fn used(spec: &PodSpec) -> std::collections::BTreeSet<String> {
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let images = containers.filter_map(|c| c.image.clone());
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.image.as_ref().and_then(|i| i.reference.clone()));
    images.chain(volumes).filter(|i| !i.is_empty()).collect()
}

/// Keeps only what node selection and pre-download read of a pod: its
/// labels, node, phase, Ready condition and images.
pub fn trim_pod(p: &mut Pod) {
    p.metadata.managed_fields = None;
    p.metadata.annotations = None;
    // A DaemonSet controller's reference stays: the P2P agent gate finds an
    // agent's Pods by it (`engine::p2p`).
    if let Some(refs) = p.metadata.owner_references.as_mut() {
        refs.retain(|o| o.controller == Some(true) && o.kind == "DaemonSet");
    }
    if p.metadata
        .owner_references
        .as_ref()
        .is_some_and(Vec::is_empty)
    {
        p.metadata.owner_references = None;
    }
    if let Some(spec) = p.spec.as_mut() {
        *spec = slim(spec);
        spec.image_pull_secrets = None;
    }
    if let Some(st) = p.status.as_mut() {
        let phase = st.phase.take();
        let ready = st
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .cloned();
        *st = Default::default();
        st.phase = phase;
        st.conditions = ready.map(|c| vec![c]);
    }
}
