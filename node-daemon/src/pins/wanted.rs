//! What the spec wants pinned, as the budget's rule needs it: for each
//! image reference a valid pull entry names, the tags naming it (for their
//! status messages), whether it gates the node, whether a cluster-scoped
//! job wants it, and the age of its oldest entry. Pure.

use crate::desired::{PullTask, TagKey};
use k8s_openapi::jiff::Timestamp;
use nodeimage_api::gate::GateNote;
use nodeimage_api::kubeedge::{ImagePrePullJob, NodeUpgradeJob};
use std::collections::{BTreeMap, BTreeSet};

/// One wanted image reference.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Want {
    /// The tag entries that name it.
    pub tags: BTreeSet<TagKey>,
    /// Listed in the start-up gate note.
    pub gating: bool,
    /// Some entry naming it is owned by a cluster-scoped job.
    pub cluster_job: bool,
    /// The oldest `createdAt` of those entries, if any has one.
    pub created_at: Option<Timestamp>,
}

/// The wanted images, by reference.
pub type Wanted = BTreeMap<String, Want>;

/// The kinds of the cluster-scoped jobs (only cluster-wide rights create them).
fn cluster_scoped_kinds() -> [String; 2] {
    use kube::Resource;
    [
        ImagePrePullJob::kind(&()).into(),
        NodeUpgradeJob::kind(&()).into(),
    ]
}

/// The images `tasks` want pinned (valid pull entries; an upgrade entry's
/// image is the node agent's, not kept), with the start-up gate note's
/// images (`note`: the annotation's value; one that does not parse gates
/// nothing here, the gate says so itself).
pub fn wanted(tasks: &[PullTask], note: Option<&str>) -> Wanted {
    let gating: BTreeSet<String> = note
        .and_then(|n| serde_json::from_str::<GateNote>(n).ok())
        .map(|n| n.images.into_iter().collect())
        .unwrap_or_default();
    let cluster = cluster_scoped_kinds();
    let mut out = Wanted::new();
    for task in tasks {
        let Ok(target) = &task.target else { continue };
        if target.upgrade.is_some() {
            continue;
        }
        let reference = target.image.pull_ref();
        let want = out.entry(reference.clone()).or_default();
        want.tags.insert(task.key.clone());
        want.gating |= gating.contains(&reference);
        want.cluster_job |= target.requesters.iter().any(|r| {
            cluster
                .iter()
                .any(|k| r.split('/').next() == Some(k.as_str()))
        });
        want.created_at = match (want.created_at, task.created_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ObjectReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use nodeimage_api::interned::Owners;
    use nodeimage_api::kruise::{ImageSpec, ImageTagSpec, NodeImage, NodeImageSpec};

    fn entry(tag: &str, owner: Option<(&str, &str)>, at: i64) -> ImageTagSpec {
        let mut t = ImageTagSpec {
            tag: tag.into(),
            created_at: Timestamp::from_second(at).ok().map(Time),
            ..Default::default()
        };
        if let Some((kind, ns)) = owner {
            t.owner_references = Some(Owners::new(vec![ObjectReference {
                kind: Some(kind.into()),
                namespace: Some(ns.into()),
                name: Some("job".into()),
                ..Default::default()
            }]));
        }
        t
    }

    #[test]
    fn each_reference_gathers_its_tags_owners_gate_and_oldest_age() {
        let images = [
            (
                "reg.io/app",
                vec![
                    entry("v1", Some(("ImagePullJob", "team-a")), 50),
                    entry("v2", Some(("ImagePrePullJob", "")), 70),
                ],
            ),
            (
                "reg.io/gate",
                vec![entry("v1", None, 90), entry("v1b", None, 80)],
            ),
            (
                "reg.io/up",
                vec![entry("v1", Some(("NodeUpgradeJob", "")), 10)],
            ),
        ];
        let mut spec = std::collections::BTreeMap::new();
        for (name, tags) in images {
            spec.insert(
                name.into(),
                ImageSpec {
                    tags,
                    ..Default::default()
                },
            );
        }
        let mut ni = NodeImage::new(
            "n",
            NodeImageSpec {
                images: Some(spec),
                removals: None,
            },
        );
        // An upgrade entry's image is not pinned.
        if let Some(t) = ni.spec.images.as_mut().and_then(|m| m.get_mut("reg.io/up")) {
            t.tags[0].purpose = nodeimage_api::kruise::Purpose::Upgrade;
            t.tags[0].upgrade = Some(
                nodeimage_api::kruise::TagUpgrade {
                    version: "v1.2.3".into(),
                    job: "job".into(),
                    ..Default::default()
                }
                .into(),
            );
        }
        let note = GateNote {
            taint: "t".into(),
            images: vec!["reg.io/gate:v1".into()],
            deadline: String::new(),
        };
        let w = wanted(&crate::desired::tasks(&ni), Some(&note.to_annotation()));
        let at = |s| Timestamp::from_second(s).ok();
        let key = |i: &str, t: &str| TagKey {
            image: i.into(),
            tag: t.into(),
            purpose: nodeimage_api::kruise::Purpose::Pull,
        };
        assert_eq!(
            w.keys().collect::<Vec<_>>(),
            [
                "reg.io/app:v1",
                "reg.io/app:v2",
                "reg.io/gate:v1",
                "reg.io/gate:v1b"
            ]
        );
        assert_eq!(
            w["reg.io/app:v1"],
            Want {
                tags: [key("reg.io/app", "v1")].into(),
                gating: false,
                cluster_job: false,
                created_at: at(50),
            }
        );
        assert!(w["reg.io/app:v2"].cluster_job, "an ImagePrePullJob's entry");
        assert!(w["reg.io/gate:v1"].gating && !w["reg.io/gate:v1b"].gating);
        let bad = wanted(&crate::desired::tasks(&ni), Some("{"));
        assert!(bad.values().all(|w| !w.gating), "a bad note gates nothing");
    }

    #[test]
    fn entries_of_one_reference_merge() {
        let mut a = entry("v1", None, 30);
        a.owner_references = None;
        let b = entry("v1", Some(("NodeUpgradeJob", "")), 20);
        let task = |key: &str, t: &ImageTagSpec| {
            let mut spec = std::collections::BTreeMap::new();
            spec.insert(
                key.into(),
                ImageSpec {
                    tags: vec![t.clone()],
                    ..Default::default()
                },
            );
            crate::desired::tasks(&NodeImage::new(
                "n",
                NodeImageSpec {
                    images: Some(spec),
                    removals: None,
                },
            ))
        };
        // Two spellings of one image (two entries of one name
        // in two tasks).
        let mut tasks = task("reg.io/x", &a);
        tasks.extend(task("reg.io/x", &b));
        let w = wanted(&tasks, None);
        assert_eq!(w.len(), 1);
        let one = &w["reg.io/x:v1"];
        assert!(one.cluster_job);
        assert_eq!(
            one.created_at,
            Timestamp::from_second(20).ok(),
            "the oldest"
        );
    }
}
