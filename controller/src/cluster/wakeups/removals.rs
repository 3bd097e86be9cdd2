//! Which ImageRemovalJobs a NodeImage change concerns: the jobs whose entry
//! on that node appeared, went, or was answered since the node was last
//! seen. Only nodes holding removal entries are remembered (a handful of
//! jobs at a time, and only while their entries exist).

use kube::runtime::reflector::ObjectRef;
use nodeimage_api::NodeImage;
use nodeimage_api::nodeimage_dev::{ImageRemovalJob, answer_to};
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// One entry as last seen: the job, its uid, and whether it was answered.
type Seen = (String, String, bool);

/// What a node's removal entries look like now.
fn seen(ni: &NodeImage) -> BTreeSet<Seen> {
    let answers = ni
        .status
        .as_ref()
        .and_then(|s| s.removals.as_deref())
        .unwrap_or_default();
    ni.spec
        .removals
        .iter()
        .flatten()
        .map(|e| {
            (
                e.job.clone(),
                e.uid.clone(),
                answer_to(e, answers).is_some(),
            )
        })
        .collect()
}

/// The jobs whose entries differ between `before` and `now`.
fn changed(before: &BTreeSet<Seen>, now: &BTreeSet<Seen>) -> BTreeSet<String> {
    before
        .symmetric_difference(now)
        .map(|(job, _, _)| job.clone())
        .collect()
}

/// Maps each NodeImage change to the ImageRemovalJobs it concerns.
pub fn removal_owners()
-> Box<dyn Fn(Arc<NodeImage>) -> Vec<ObjectRef<ImageRemovalJob>> + Send + Sync> {
    let memory: Mutex<HashMap<String, BTreeSet<Seen>>> = Mutex::default();
    Box::new(move |ni| {
        let Some(node) = ni.metadata.name.clone() else {
            return vec![];
        };
        let now = seen(&ni);
        let mut memory = memory.lock().unwrap_or_else(|p| p.into_inner());
        let before = if now.is_empty() {
            memory.remove(&node).unwrap_or_default()
        } else {
            memory.insert(node, now.clone()).unwrap_or_default()
        };
        changed(&before, &now)
            .into_iter()
            .map(|job| ObjectRef::new(&job))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::kruise::NodeImageStatus;
    use nodeimage_api::nodeimage_dev::{RemovalEntry, RemovalStatus};

    fn node(entries: &[(&str, &str)], answered: &[(&str, &str)]) -> Arc<NodeImage> {
        let mut ni = NodeImage::new("n1", Default::default());
        ni.spec.removals = Some(
            entries
                .iter()
                .map(|(job, uid)| RemovalEntry {
                    job: job.to_string(),
                    uid: uid.to_string(),
                    images: vec!["r.example/a:1".into()],
                    ..Default::default()
                })
                .collect(),
        );
        ni.status = Some(NodeImageStatus {
            removals: Some(
                answered
                    .iter()
                    .map(|(job, uid)| RemovalStatus {
                        job: job.to_string(),
                        uid: uid.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        });
        Arc::new(ni)
    }

    #[test]
    fn wakes_the_jobs_whose_entry_moved() {
        let wake = removal_owners();
        let names = |v: Vec<ObjectRef<ImageRemovalJob>>| -> Vec<String> {
            v.into_iter().map(|r| r.name).collect()
        };
        let steps: Vec<(&str, Arc<NodeImage>, Vec<&str>)> = vec![
            ("entry written", node(&[("a", "1")], &[]), vec!["a"]),
            ("nothing moved", node(&[("a", "1")], &[]), vec![]),
            (
                "another joins",
                node(&[("a", "1"), ("b", "2")], &[]),
                vec!["b"],
            ),
            (
                "a answered",
                node(&[("a", "1"), ("b", "2")], &[("a", "1")]),
                vec!["a"],
            ),
            (
                "an answer to an older uid",
                node(&[("b", "2")], &[("b", "0")]),
                vec!["a"],
            ),
            ("all gone", node(&[], &[]), vec!["b"]),
            ("still nothing", node(&[], &[]), vec![]),
        ];
        for (name, ni, want) in steps {
            assert_eq!(names(wake(ni)), want, "{name}");
        }
    }
}
