//! What pre-download reads of a Deployment, StatefulSet or DaemonSet, one
//! shape for the three kinds, and how their cached copies are trimmed to it.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Affinity, NodeAffinity, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use std::collections::BTreeMap;

/// The workload kinds pre-download follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
}

impl Kind {
    /// The kind's name, as in manifests.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
        }
    }

    /// A short form for job names (a Deployment and a StatefulSet may share a name).
    pub fn short(self) -> &'static str {
        match self {
            Kind::Deployment => "deploy",
            Kind::StatefulSet => "sts",
            Kind::DaemonSet => "ds",
        }
    }
}

/// A workload as pre-download sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Workload {
    /// Its kind (None only in `Default`).
    pub kind: Option<Kind>,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (the jobs' owner).
    pub uid: String,
    /// Annotations (trimmed to pre-download's own).
    pub annotations: BTreeMap<String, String>,
    /// Its Pods' selector.
    pub selector: Option<LabelSelector>,
    /// Its pod template's spec (trimmed to images, volumes and pull secrets).
    pub pod_spec: Option<PodSpec>,
    /// Pods it wants: replicas, or for a DaemonSet the nodes it should run on.
    pub desired: i32,
    /// Being deleted.
    pub deleting: bool,
}

impl Workload {
    /// `Kind/name`, for messages and the jobs' annotation.
    pub fn describe(&self) -> String {
        let kind = self.kind.map_or("Workload", Kind::name);
        format!("{kind}/{}", self.name)
    }

    /// The owner reference its jobs carry.
    pub fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: self.kind.map_or("", Kind::name).into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }
}

fn from_parts(
    kind: Kind,
    meta: &ObjectMeta,
    selector: Option<&LabelSelector>,
    template: Option<&PodTemplateSpec>,
    desired: i32,
) -> Workload {
    Workload {
        kind: Some(kind),
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        annotations: meta.annotations.clone().unwrap_or_default(),
        selector: selector.cloned(),
        pod_spec: template.and_then(|t| t.spec.clone()),
        desired,
        deleting: meta.deletion_timestamp.is_some(),
    }
}

/// The three kinds' common reading.
pub trait AsWorkload {
    /// Which kind this is.
    const KIND: Kind;
    /// The workload as pre-download sees it.
    fn workload(&self) -> Workload;
    /// Drops what pre-download never reads (see [`trim_template`]).
    fn trim(&mut self);
}

impl AsWorkload for Deployment {
    const KIND: Kind = Kind::Deployment;
    fn workload(&self) -> Workload {
        let spec = self.spec.as_ref();
        from_parts(
            Self::KIND,
            &self.metadata,
            spec.map(|s| &s.selector),
            spec.map(|s| &s.template),
            spec.and_then(|s| s.replicas).unwrap_or(1),
        )
    }
    fn trim(&mut self) {
        let keep = trim_meta(&mut self.metadata);
        self.status = None;
        if let Some(s) = self.spec.as_mut() {
            trim_template(&mut s.template, keep);
        }
    }
}

impl AsWorkload for StatefulSet {
    const KIND: Kind = Kind::StatefulSet;
    fn workload(&self) -> Workload {
        let spec = self.spec.as_ref();
        from_parts(
            Self::KIND,
            &self.metadata,
            spec.map(|s| &s.selector),
            spec.map(|s| &s.template),
            spec.and_then(|s| s.replicas).unwrap_or(1),
        )
    }
    fn trim(&mut self) {
        let keep = trim_meta(&mut self.metadata);
        self.status = None;
        if let Some(s) = self.spec.as_mut() {
            s.volume_claim_templates = None;
            trim_template(&mut s.template, keep);
        }
    }
}

impl AsWorkload for DaemonSet {
    const KIND: Kind = Kind::DaemonSet;
    fn workload(&self) -> Workload {
        let spec = self.spec.as_ref();
        let desired = self
            .status
            .as_ref()
            .map_or(0, |s| s.desired_number_scheduled);
        from_parts(
            Self::KIND,
            &self.metadata,
            spec.map(|s| &s.selector),
            spec.map(|s| &s.template),
            desired,
        )
    }
    fn trim(&mut self) {
        let keep = trim_meta(&mut self.metadata);
        if let Some(st) = self.status.as_mut() {
            let desired = st.desired_number_scheduled;
            *st = Default::default();
            st.desired_number_scheduled = desired;
        }
        if let Some(s) = self.spec.as_mut() {
            trim_template(&mut s.template, keep);
        }
    }
}

/// Keeps only pre-download's annotations (a workload's last-applied
/// configuration can be large), and says whether the workload asks for
/// pre-download at all: the template of one that does not is dropped.
fn trim_meta(meta: &mut ObjectMeta) -> bool {
    meta.managed_fields = None;
    meta.labels = None;
    let asks = meta
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(nodeimage_api::predownload::ENABLED));
    if let Some(a) = meta.annotations.as_mut() {
        // The P2P settings only matter to a workload that pre-downloads.
        a.retain(|k, _| {
            is_predownload_annotation(k) && (asks || !nodeimage_api::p2p::ALL.contains(&k.as_str()))
        });
    }
    asks
}

/// Whether `key` is one of the annotations pre-download reads, its own or
/// the P2P settings its jobs carry on (`nodeimage.dev/p2p-*`).
pub fn is_predownload_annotation(key: &str) -> bool {
    use nodeimage_api::predownload as p;
    [
        p::ENABLED,
        p::PARALLELISM,
        p::TIMEOUT_SECONDS,
        p::MIN_UPDATED_READY_PODS,
    ]
    .contains(&key)
        || nodeimage_api::p2p::ALL.contains(&key)
}

/// A pod template trimmed to what pre-download reads: its images
/// (`engine::podimages::slim`), its ServiceAccount, and where it may be
/// scheduled (node selector, required node affinity, tolerations);
/// emptied when the workload does not ask for pre-download (`keep` false).
pub fn trim_template(t: &mut PodTemplateSpec, keep: bool) {
    t.metadata = None;
    t.spec = if keep {
        t.spec.as_ref().map(|spec| {
            let required = crate::engine::placement::required_affinity(spec);
            PodSpec {
                service_account_name: spec.service_account_name.clone(),
                service_account: spec.service_account.clone(),
                node_selector: spec.node_selector.clone(),
                tolerations: spec.tolerations.clone(),
                affinity: required.map(|r| Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(r),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..crate::engine::podimages::slim(spec)
            }
        })
    } else {
        None
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cached_copy_keeps_what_predownload_and_its_jobs_read() {
        let mut meta = ObjectMeta {
            annotations: Some(BTreeMap::from(
                [
                    (nodeimage_api::predownload::ENABLED, "true"),
                    (nodeimage_api::p2p::SEEDS, "1"),
                    (nodeimage_api::p2p::AGENT, "daemonset:spegel/spegel"),
                    ("kubectl.kubernetes.io/last-applied-configuration", "{…}"),
                ]
                .map(|(k, v)| (k.to_string(), v.to_string())),
            )),
            ..Default::default()
        };
        let mut other = meta.clone();
        if let Some(a) = other.annotations.as_mut() {
            a.remove(nodeimage_api::predownload::ENABLED);
        }
        assert!(!trim_meta(&mut other), "it does not ask");
        assert!(
            other.annotations.iter().flatten().next().is_none(),
            "{other:?}"
        );
        assert!(trim_meta(&mut meta), "it asks for pre-download");
        let kept: Vec<&str> = meta
            .annotations
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(
            kept,
            [
                nodeimage_api::predownload::ENABLED,
                nodeimage_api::p2p::AGENT,
                nodeimage_api::p2p::SEEDS,
            ]
        );
    }
}
