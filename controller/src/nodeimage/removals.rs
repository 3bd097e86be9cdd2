//! The edits of a NodeImage's removal entries (`spec.removals`) that an
//! ImageRemovalJob makes: add its entry when the node's turn comes, take it
//! out when the job goes. Pure; the node writer applies them.

use nodeimage_api::NodeImage;
use nodeimage_api::kruise::NodeImageSpec;
use nodeimage_api::limits::REMOVALS_PER_NODE_MAX;
use nodeimage_api::nodeimage_dev::RemovalEntry;

/// Most removal entries one NodeImage holds (the schema's bound).
pub const PER_NODE: usize = REMOVALS_PER_NODE_MAX as usize;

/// Adds `entry` to `list`, replacing an entry of the same job with another
/// uid (an older job of that name). Nothing when the job's entry is there,
/// or when the list is full (the plan waits for a free place). Returns
/// whether the list changed.
pub fn add(list: &mut Vec<RemovalEntry>, entry: &RemovalEntry) -> bool {
    if let Some(e) = list.iter_mut().find(|e| e.job == entry.job) {
        if e.uid == entry.uid {
            return false;
        }
        *e = entry.clone();
        return true;
    }
    if list.len() >= PER_NODE {
        return false;
    }
    list.push(entry.clone());
    true
}

/// Takes the entry of job incarnation `uid` out of `list`; returns whether
/// there was one.
pub fn release(list: &mut Vec<RemovalEntry>, uid: &str) -> bool {
    let before = list.len();
    list.retain(|e| e.uid != uid);
    list.len() != before
}

/// The entry of job incarnation `uid` on `ni`, if written.
pub fn entry_of<'a>(ni: &'a NodeImage, uid: &str) -> Option<&'a RemovalEntry> {
    entry_in(&ni.spec, uid)
}

/// The entry of job incarnation `uid` in `spec`, if written.
pub fn entry_in<'a>(spec: &'a NodeImageSpec, uid: &str) -> Option<&'a RemovalEntry> {
    spec.removals.iter().flatten().find(|e| e.uid == uid)
}

/// The jobs whose entries fill `ni`'s removal list (none when a place is
/// free, or when `job`'s own entry is there).
pub fn full_with<'a>(ni: &'a NodeImage, job: &str) -> Option<Vec<&'a str>> {
    let list = ni.spec.removals.as_deref().unwrap_or_default();
    let full = list.len() >= PER_NODE && !list.iter().any(|e| e.job == job);
    full.then(|| list.iter().map(|e| e.job.as_str()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(job: &str, uid: &str) -> RemovalEntry {
        RemovalEntry {
            job: job.into(),
            uid: uid.into(),
            images: vec!["r.example/app:v1".into()],
            ..Default::default()
        }
    }

    #[test]
    fn add_keeps_one_entry_per_job_and_the_bound() {
        let full: Vec<RemovalEntry> = (0..PER_NODE)
            .map(|i| entry(&format!("j{i}"), &format!("u{i}")))
            .collect();
        let rows: Vec<(&str, Vec<RemovalEntry>, RemovalEntry, bool, usize)> = vec![
            ("empty list", vec![], entry("a", "1"), true, 1),
            (
                "already there",
                vec![entry("a", "1")],
                entry("a", "1"),
                false,
                1,
            ),
            (
                "older job of the name",
                vec![entry("a", "0")],
                entry("a", "1"),
                true,
                1,
            ),
            (
                "beside another job",
                vec![entry("b", "2")],
                entry("a", "1"),
                true,
                2,
            ),
            ("full", full.clone(), entry("a", "1"), false, PER_NODE),
            (
                "full, replacing its own name",
                full,
                entry("j3", "new"),
                true,
                PER_NODE,
            ),
        ];
        for (name, mut list, e, changed, len) in rows {
            assert_eq!(add(&mut list, &e), changed, "{name}");
            assert_eq!(list.len(), len, "{name}");
            if changed {
                assert!(list.contains(&e), "{name}");
            }
        }
    }

    #[test]
    fn release_takes_only_that_incarnation() {
        let mut list = vec![entry("a", "1"), entry("b", "2")];
        assert!(!release(&mut list, "3"));
        assert!(release(&mut list, "1"));
        assert_eq!(list, vec![entry("b", "2")]);
    }

    #[test]
    fn full_with_names_the_jobs_holding_the_places() {
        let mut ni = NodeImage::new("n1", Default::default());
        assert_eq!(full_with(&ni, "a"), None);
        ni.spec.removals = Some(
            (0..PER_NODE)
                .map(|i| entry(&format!("j{i}"), &format!("u{i}")))
                .collect(),
        );
        assert_eq!(full_with(&ni, "a").map(|j| j.len()), Some(PER_NODE));
        assert_eq!(full_with(&ni, "j0"), None, "its own entry is there");
    }
}
