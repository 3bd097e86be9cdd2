//! Which jobs a NodeImage change concerns: the owners of the tags whose
//! entry or reported state changed since that NodeImage was last seen, or
//! that appeared or went away. A node's status write touches one or two
//! tags; waking every owner of every tag on the node (a hundred jobs on a
//! busy node) would make each job re-plan for other jobs' progress.
//! Progress percentages alone wake nobody. A change of the NodeImage's
//! labels wakes the owners of all its tags (a job may no longer select the
//! node, and recounts without it), and, through [`LabelChanges`], the jobs
//! whose selector now takes the node.

use kube::runtime::reflector::Store;
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::{ImageTagSpec, ImageTagStatus};
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// A job that owns a tag: its namespace (for namespaced kinds) and name.
pub type Owner = (Option<String>, String);

/// What was last seen of one tag with owners of the watched kind. Kept for
/// every such tag of every node (a hundred thousand with 100 jobs over 1,000
/// nodes), so it holds hashes and shared owner lists, not copies of names.
#[derive(Debug)]
struct Seen {
    /// Hash of the image name and tag.
    key: u64,
    fingerprint: u64,
    owners: Arc<[Owner]>,
}

/// Remembers, per NodeImage, the tags owned by jobs of one kind.
pub struct TagChanges {
    kind: &'static str,
    group: &'static str,
    seen: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    nodes: HashMap<String, Vec<Seen>>,
    owners: Interner,
}

/// One shared copy of each distinct owner list (the same job owns its tag
/// on every node).
#[derive(Default)]
struct Interner {
    lists: HashSet<Arc<[Owner]>>,
    /// How many lists were in use at the last sweep.
    live: usize,
}

impl Interner {
    fn get(&mut self, owners: Vec<Owner>) -> Arc<[Owner]> {
        if let Some(shared) = self.lists.get(owners.as_slice()) {
            return shared.clone();
        }
        let shared: Arc<[Owner]> = owners.into();
        self.lists.insert(shared.clone());
        shared
    }

    /// Forgets lists no tag holds any more, once the set has doubled.
    fn sweep(&mut self) {
        if self.lists.len() > 2 * self.live + 64 {
            self.lists.retain(|l| Arc::strong_count(l) > 1);
            self.live = self.lists.len();
        }
    }
}

impl TagChanges {
    /// Tracks tags owned by `kind` of API group `group`.
    pub fn new(kind: &'static str, group: &'static str) -> Self {
        Self {
            kind,
            group,
            seen: Mutex::default(),
        }
    }

    /// The jobs of this kind owning a tag of `ni` that changed, appeared or
    /// went away since `ni` was last passed here; sorted and distinct.
    pub fn owners(&self, ni: &NodeImage) -> Vec<Owner> {
        let name = ni.metadata.name.clone().unwrap_or_default();
        let mut memory = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let memory = &mut *memory;
        let now = self.tags(ni, &mut memory.owners);
        let before = memory.nodes.remove(&name).unwrap_or_default();
        fn index(tags: &[Seen]) -> HashMap<u64, u64> {
            tags.iter().map(|t| (t.key, t.fingerprint)).collect()
        }
        let (was, is) = (index(&before), index(&now));
        let mut out = BTreeSet::new();
        for t in &now {
            if was.get(&t.key) != Some(&t.fingerprint) {
                out.extend(t.owners.iter().cloned());
            }
        }
        for b in &before {
            if !is.contains_key(&b.key) {
                out.extend(b.owners.iter().cloned());
            }
        }
        drop(before);
        if !now.is_empty() {
            memory.nodes.insert(name, now);
        }
        memory.owners.sweep();
        out.into_iter().collect()
    }

    /// The tags of `ni` with an owner of this kind, fingerprinted.
    fn tags(&self, ni: &NodeImage, interner: &mut Interner) -> Vec<Seen> {
        let prefix = format!("{}/", self.group);
        let labels = labels_fingerprint(ni);
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
                    .and_then(|s| s.reported(&tag.tag, tag.purpose));
                let mut key = DefaultHasher::new();
                (image, &tag.tag, tag.purpose).hash(&mut key);
                out.push(Seen {
                    key: key.finish(),
                    fingerprint: fingerprint(labels, tag, status),
                    owners: interner.get(owners),
                });
            }
        }
        out
    }
}

/// Remembers a fingerprint of each NodeImage's labels, so that a job whose
/// selector takes a node only after a label change (or a new NodeImage) is
/// woken then, as OpenKruise wakes the jobs matching a NodeImage's old or
/// new labels. Owned by one kind's NodeImage wakeup mapper; an entry is
/// forgotten once its NodeImage has left the cache and the memory has grown
/// past twice the cache (the shared stream carries no deletions).
pub struct LabelChanges {
    nodeimages: Store<NodeImage>,
    seen: Mutex<HashMap<String, u64>>,
}

impl LabelChanges {
    /// Remembers the labels of the NodeImages `nodeimages` holds.
    pub fn new(nodeimages: Store<NodeImage>) -> Self {
        Self {
            nodeimages,
            seen: Mutex::default(),
        }
    }

    /// Whether `ni` is new here or its labels changed since it was last
    /// passed here.
    pub fn changed(&self, ni: &NodeImage) -> bool {
        let name = ni.metadata.name.clone().unwrap_or_default();
        let now = labels_fingerprint(ni);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let changed = seen.insert(name, now) != Some(now);
        if changed {
            let live = self.nodeimages.len();
            if seen.len() > 2 * live + 64 {
                let names: HashSet<String> = self
                    .nodeimages
                    .state()
                    .iter()
                    .filter_map(|n| n.metadata.name.clone())
                    .collect();
                seen.retain(|n, _| names.contains(n));
            }
        }
        changed
    }
}

/// A hash of a NodeImage's labels (what node selection reads of it).
fn labels_fingerprint(ni: &NodeImage) -> u64 {
    let mut h = DefaultHasher::new();
    // No labels and an empty map select alike.
    ni.metadata
        .labels
        .iter()
        .flatten()
        .for_each(|l| l.hash(&mut h));
    h.finish()
}

/// A hash of what a job reads of a tag: the labels of its NodeImage, its
/// whole entry, and its reported state without the progress percentage.
/// Hashed through serde, so no text is built for it: this runs for every
/// tag of every NodeImage event.
fn fingerprint(labels: u64, spec: &ImageTagSpec, status: Option<&ImageTagStatus>) -> u64 {
    let mut h = HashWriter(DefaultHasher::new());
    labels.hash(&mut h.0);
    // Serialising these types into a hasher cannot fail (no I/O, no maps
    // with non-string keys); a failure would only make a wakeup spurious.
    let _ = serde_json::to_writer(&mut h, spec);
    if let Some(s) = status {
        let _ = serde_json::to_writer(
            &mut h,
            &(
                &s.phase,
                s.version,
                &s.start_time,
                &s.completion_time,
                &s.image_id,
                &s.message,
                s.upgrade_state(),
                s.upgrade.as_ref().and_then(|u| u.log.as_deref()),
                s.from_version(),
                s.to_version(),
            ),
        );
    }
    h.0.finish()
}

/// Feeds serialised bytes straight into a hasher.
struct HashWriter(DefaultHasher);

impl std::io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

mod removals;
pub use removals::removal_owners;

#[cfg(test)]
mod tests;
