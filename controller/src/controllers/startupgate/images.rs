//! Which images gate one node: those of every unfinished job marked
//! `nodeimage.dev/gate-new-nodes` that selects the node, each kind by its
//! own rule (ImagePullJob: `imagepulljob::plan::selects`; ImagePrePullJob:
//! `imageprepulljob::plan::works_on`). ImageListPullJobs gate through their
//! children, which carry the mark on. A namespaced job gates only when the
//! platform team's policy lets its namespace (`runtime::policy`). Pure.

use crate::controllers::{imageprepulljob, imagepulljob};
use crate::nodeimage::nodes::NodeInfo;
use crate::runtime::policy::Policy;
use kube::ResourceExt;
use nodeimage_api::gate::is_gating;
use nodeimage_api::kruise::{ImagePullJob, NodeImage};
use nodeimage_api::kubeedge::ImagePrePullJob;
use nodeimage_api::reference::ImageRef;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The jobs the gate reads, from the kinds' own caches.
pub struct Jobs<'a> {
    /// Every ImagePullJob (children of ImageListPullJobs included).
    pub pull: &'a [Arc<ImagePullJob>],
    /// Every ImagePrePullJob.
    pub prepull: &'a [Arc<ImagePrePullJob>],
    /// KubeEdge kinds run only on edge nodes.
    pub edge_only: bool,
    /// Which namespaces' jobs may gate.
    pub policy: &'a Policy,
}

/// The full references (`ImageRef::pull_ref`) of the images that gate the
/// node of NodeImage `ni` (`info`: its Node). Images that do not parse
/// gate nothing: their job fails them anyway.
pub fn gating_images(ni: &Arc<NodeImage>, info: &NodeInfo, jobs: &Jobs<'_>) -> BTreeSet<String> {
    let name = ni.name_any();
    let pull = jobs
        .pull
        .iter()
        .filter(|j| is_gating(j.annotations()) && imagepulljob::plan::selects(j, ni))
        .filter(|j| jobs.policy.gate_refusal(j.namespace().as_deref()).is_none())
        .map(|j| j.spec.image.as_str());
    let prepull = jobs
        .prepull
        .iter()
        .filter(|j| is_gating(j.annotations()))
        .filter(|j| imageprepulljob::plan::works_on(j, &name, info, jobs.edge_only))
        .flat_map(|j| {
            j.spec
                .image_pre_pull_template
                .images
                .iter()
                .map(String::as_str)
        });
    pull.chain(prepull)
        .filter_map(|image| ImageRef::parse(image).ok())
        .map(|r| r.pull_ref())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::gate::GATE_NEW_NODES;
    use std::collections::BTreeMap;

    fn nodeimage(name: &str, labels: &[(&str, &str)]) -> Arc<NodeImage> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
                "metadata": {"name": name, "labels": labels.iter().cloned().collect::<BTreeMap<_, _>>()},
                "spec": {}
            }))
            .expect("a NodeImage"),
        )
    }

    fn pull_job(image: &str, gating: Option<&str>, spec: serde_json::Value) -> Arc<ImagePullJob> {
        let annotations: BTreeMap<&str, &str> =
            gating.map(|v| (GATE_NEW_NODES, v)).into_iter().collect();
        let mut spec = spec;
        spec["image"] = image.into();
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
                "metadata": {"name": "j", "namespace": "ns", "annotations": annotations},
                "spec": spec
            }))
            .expect("an ImagePullJob"),
        )
    }

    fn prepull_job(
        images: &[&str],
        task: serde_json::Value,
        status: serde_json::Value,
    ) -> Arc<ImagePrePullJob> {
        let mut template = task;
        template["images"] = serde_json::json!(images);
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "operations.kubeedge.io/v1alpha1", "kind": "ImagePrePullJob",
                "metadata": {"name": "p", "annotations": {GATE_NEW_NODES: "true"}},
                "spec": {"imagePrePullTemplate": template},
                "status": status
            }))
            .expect("an ImagePrePullJob"),
        )
    }

    fn edge() -> NodeInfo {
        NodeInfo {
            labels: BTreeMap::from([("node-role.kubernetes.io/edge".into(), String::new())]),
            ready: false,
            wants_nodeimage: true,
        }
    }

    #[test]
    fn each_kind_selects_by_its_own_rule() {
        let ni = nodeimage("n1", &[("pool", "gpu")]);
        let done = serde_json::json!({"completionTime": "2026-01-01T00:00:00Z"});
        let mut finished = pull_job("done:1", Some("true"), serde_json::json!({}));
        Arc::make_mut(&mut finished).status = serde_json::from_value(done).ok();
        let pull = vec![
            pull_job("all:1", Some("true"), serde_json::json!({})),
            pull_job("notgating:1", None, serde_json::json!({})),
            pull_job("off:1", Some("false"), serde_json::json!({})),
            pull_job(
                "gpu:1",
                Some("true"),
                serde_json::json!({"selector": {"matchLabels": {"pool": "gpu"}}}),
            ),
            pull_job(
                "cpu:1",
                Some("true"),
                serde_json::json!({"selector": {"matchLabels": {"pool": "cpu"}}}),
            ),
            pull_job(
                "named:1",
                Some("true"),
                serde_json::json!({"selector": {"names": ["n1"]}}),
            ),
            pull_job(
                "other:1",
                Some("true"),
                serde_json::json!({"selector": {"names": ["n2"]}}),
            ),
            pull_job(
                "pods:1",
                Some("true"),
                serde_json::json!({"podSelector": {"matchLabels": {"a": "b"}}}),
            ),
            finished,
        ];
        let prepull = vec![
            prepull_job(
                &["edge:1"],
                serde_json::json!({"nodeNames": ["n1"]}),
                serde_json::json!({}),
            ),
            prepull_job(
                &["started:1"],
                serde_json::json!({"nodeNames": ["n1", "n2"]}),
                serde_json::json!({"status": [{"nodeStatus": {"nodeName": "n2"}}]}),
            ),
            prepull_job(
                &["final:1"],
                serde_json::json!({"nodeNames": ["n1"]}),
                serde_json::json!({"state": "Successful"}),
            ),
        ];
        let policy = Policy {
            gate_namespaces: crate::runtime::policy::Namespaces::Any,
            ..Policy::default()
        };
        let jobs = Jobs {
            pull: &pull,
            prepull: &prepull,
            edge_only: true,
            policy: &policy,
        };
        let got = gating_images(&ni, &edge(), &jobs);
        let want: BTreeSet<String> = ["all:1", "gpu:1", "named:1", "edge:1"]
            .iter()
            .map(|i| format!("docker.io/library/{i}"))
            .collect();
        assert_eq!(got, want);
        // Not an edge node: KubeEdge jobs skip it, as they would.
        let cloud = NodeInfo {
            labels: BTreeMap::new(),
            ..edge()
        };
        assert!(!gating_images(&ni, &cloud, &jobs).contains("docker.io/library/edge:1"));
        let all = Jobs {
            edge_only: false,
            ..jobs
        };
        assert!(gating_images(&ni, &cloud, &all).contains("docker.io/library/edge:1"));
        // The default policy: no namespace's job gates; cluster-scoped ones do.
        let closed = Jobs {
            policy: &Policy::default(),
            ..all
        };
        let want: BTreeSet<String> = ["docker.io/library/edge:1".to_string()].into();
        assert_eq!(gating_images(&ni, &cloud, &closed), want);
    }
}
