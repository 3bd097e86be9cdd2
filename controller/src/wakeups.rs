//! Which jobs a NodeImage change concerns: the owners of the tags whose
//! entry or reported state changed since that NodeImage was last seen, or
//! that appeared or went away. A node's status write touches one or two
//! tags; waking every owner of every tag on the node (a hundred jobs on a
//! busy node) would make each job re-plan for other jobs' progress.
//! Progress percentages alone wake nobody.

use nodeimage_api::NodeImage;
use nodeimage_api::kruise::{ImageTagSpec, ImageTagStatus};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

/// A job that owns a tag: its namespace (for namespaced kinds) and name.
pub type Owner = (Option<String>, String);

/// What was last seen of one tag with owners of the watched kind.
#[derive(Debug)]
struct Seen {
    image: String,
    tag: String,
    fingerprint: u64,
    owners: Vec<Owner>,
}

/// Remembers, per NodeImage, the tags owned by jobs of one kind.
pub struct TagChanges {
    kind: &'static str,
    group: &'static str,
    seen: Mutex<HashMap<String, Vec<Seen>>>,
}

impl TagChanges {
    /// Tracks tags owned by `kind` of API group `group`.
    pub fn new(kind: &'static str, group: &'static str) -> Self {
        Self {
            kind,
            group,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// The jobs of this kind owning a tag of `ni` that changed, appeared or
    /// went away since `ni` was last passed here; sorted and distinct.
    pub fn owners(&self, ni: &NodeImage) -> Vec<Owner> {
        let now = self.tags(ni);
        let name = ni.metadata.name.clone().unwrap_or_default();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let before = seen.remove(&name).unwrap_or_default();
        fn index(tags: &[Seen]) -> HashMap<(&str, &str), u64> {
            tags.iter()
                .map(|t| ((t.image.as_str(), t.tag.as_str()), t.fingerprint))
                .collect()
        }
        let (was, is) = (index(&before), index(&now));
        let mut out = BTreeSet::new();
        for t in &now {
            if was.get(&(t.image.as_str(), t.tag.as_str())) != Some(&t.fingerprint) {
                out.extend(t.owners.iter().cloned());
            }
        }
        for b in &before {
            if !is.contains_key(&(b.image.as_str(), b.tag.as_str())) {
                out.extend(b.owners.iter().cloned());
            }
        }
        if !now.is_empty() {
            seen.insert(name, now);
        }
        out.into_iter().collect()
    }

    /// The tags of `ni` with an owner of this kind, fingerprinted.
    fn tags(&self, ni: &NodeImage) -> Vec<Seen> {
        let prefix = format!("{}/", self.group);
        let statuses = ni.status.as_ref().and_then(|s| s.image_statuses.as_ref());
        let mut out = Vec::new();
        for (image, spec) in ni.spec.images.iter().flatten() {
            for tag in &spec.tags {
                let owners: Vec<Owner> = tag
                    .owner_references
                    .iter()
                    .flatten()
                    .filter(|o| {
                        o.kind.as_deref() == Some(self.kind)
                            && o.api_version
                                .as_deref()
                                .is_none_or(|v| v.starts_with(&prefix))
                    })
                    .filter_map(|o| Some((o.namespace.clone(), o.name.clone()?)))
                    .collect();
                if owners.is_empty() {
                    continue;
                }
                let status = statuses
                    .and_then(|m| m.get(image))
                    .and_then(|s| s.tags.iter().find(|t| t.tag == tag.tag));
                out.push(Seen {
                    image: image.clone(),
                    tag: tag.tag.clone(),
                    fingerprint: fingerprint(tag, status),
                    owners,
                });
            }
        }
        out
    }
}

/// A hash of what a job reads of a tag: its whole entry, and its reported
/// state without the progress percentage.
fn fingerprint(spec: &ImageTagSpec, status: Option<&ImageTagStatus>) -> u64 {
    let mut h = DefaultHasher::new();
    format!("{spec:?}").hash(&mut h);
    if let Some(s) = status {
        format!(
            "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}",
            s.phase,
            s.version,
            s.start_time,
            s.completion_time,
            s.image_id,
            s.message,
            s.upgrade_state,
            s.upgrade_log,
            s.from_version,
            s.to_version
        )
        .hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests;
