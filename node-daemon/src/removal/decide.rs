//! What a node does with each image of a removal entry: the one rule, pure,
//! over a snapshot of the node (docs/removal-design.md, "The node's
//! decision"). For each listed reference the first rule that holds decides:
//! not present; the sandbox image; pinned by someone else; in use by a
//! container of any state; carrying names the job does not list; wanted by
//! a live pull entry (unless force or block); else unpin (if ours) and
//! remove by image id. Nothing here calls the runtime.

pub use crate::runtime::{Container, ListedImage};
use nodeimage_api::nodeimage_dev::{RemovalResult, SkipReason};
use nodeimage_api::reference::ImageRef;
use std::collections::BTreeSet;

/// Most containers named in an `InUse` message.
const NAMED_MAX: usize = 5;

/// A live pull entry of this node's NodeImage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanting {
    /// The reference it pulls (`name:tag` or `name@digest`).
    pub reference: String,
    /// The repo digest its status reports it resolved to, if any.
    pub resolved: Option<String>,
    /// Who asked (`ImagePullJob team-a/app`; empty: written by hand).
    pub owners: Vec<String>,
}

/// What the rule reads of the node.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every image on the node.
    pub images: Vec<ListedImage>,
    /// Every container, in every state.
    pub containers: Vec<Container>,
    /// The runtime's sandbox (pause) image, by reference or id, if known.
    pub sandbox: Option<String>,
    /// The live pull entries of this node.
    pub wanted: Vec<Wanting>,
    /// The image names this node's daemon pinned.
    pub ours: BTreeSet<String>,
}

/// The removal entry, as the rule reads it.
#[derive(Clone, Debug, Default)]
pub struct Entry {
    /// The references to remove, as the job lists them.
    pub images: Vec<String>,
    /// Remove even what live pull entries want.
    pub force: bool,
    /// A block job: live pull entries wanting the image are failed, not obeyed.
    pub block: bool,
}

/// The decision for one listed reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing on the node answers it.
    NotPresent,
    /// Kept by a rule; `detail` names what the rule found.
    Skip {
        /// Which rule.
        reason: SkipReason,
        /// The names, owners or image the rule found.
        detail: String,
    },
    /// Containers were created from it; kept.
    InUse {
        /// `name (state)` of the containers, at most five, then a count.
        containers: Vec<String>,
    },
    /// Remove the image with this id (unpinning our names of it first).
    Remove {
        /// The runtime's image id.
        id: String,
    },
    /// The reference does not parse (admission should have refused it).
    Invalid {
        /// The parser's words.
        message: String,
    },
}

impl Verdict {
    /// The result and message a node reports for a verdict that needs no
    /// runtime call; None for `Remove` (the runtime's answer decides).
    pub fn outcome(&self) -> Option<(RemovalResult, Option<SkipReason>, String)> {
        match self {
            Verdict::NotPresent => Some((
                RemovalResult::NotPresent,
                None,
                "no image on this node answers this reference".into(),
            )),
            Verdict::Skip { reason, detail } => Some((
                RemovalResult::Skipped,
                Some(*reason),
                format!("kept: {} ({detail})", reason.meaning()),
            )),
            Verdict::InUse { containers } => Some((
                RemovalResult::InUse,
                None,
                format!("kept: used by containers {}", containers.join(", ")),
            )),
            Verdict::Invalid { message } => Some((
                RemovalResult::Failed,
                None,
                format!("not an image reference: {message}"),
            )),
            Verdict::Remove { .. } => None,
        }
    }
}

/// One runtime removal: an image id, once however many references named it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    /// The runtime's image id.
    pub id: String,
    /// Our pins of its names, taken off first.
    pub unpin: Vec<String>,
    /// The bytes the runtime reported for it (0: not reported).
    pub bytes: u64,
}

/// The rule's answer for one entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Each listed reference with its verdict, in the entry's order.
    pub verdicts: Vec<(String, Verdict)>,
    /// The removals to run, one per image id, in the order first named.
    pub removals: Vec<Removal>,
}

/// A reference in the form the runtime reports names in (`docker.io/library/nginx:1.25`),
/// or as it is when it does not parse.
fn normal(name: &str) -> String {
    ImageRef::parse(name).map_or_else(|_| name.to_string(), |r| r.pull_ref())
}

/// The repository of a name (`host/path`), read before any digest (so a
/// digest the parser does not take still gives its repository).
fn repository(name: &str) -> Option<String> {
    let before = name.split('@').next()?;
    ImageRef::parse(before).ok().map(|r| r.name())
}

impl ListedImage {
    /// Every name of the image, in normal form.
    fn names(&self) -> BTreeSet<String> {
        self.repo_tags
            .iter()
            .chain(&self.repo_digests)
            .map(|n| normal(n))
            .collect()
    }

    /// Whether the normal reference `r` names this image: a tag by a repo
    /// tag, a digest by a repo digest of the same repository.
    fn answers(&self, r: &str) -> bool {
        let list = if r.contains('@') {
            &self.repo_digests
        } else {
            &self.repo_tags
        };
        list.iter().any(|n| normal(n) == r)
    }
}

/// Decides every reference of `entry` over `snap`.
pub fn decide(entry: &Entry, snap: &Snapshot) -> Plan {
    let parsed: Vec<(String, Result<String, String>)> = entry
        .images
        .iter()
        .map(|i| {
            let r = ImageRef::parse(i).map(|r| r.pull_ref());
            (i.clone(), r.map_err(|e| e.to_string()))
        })
        .collect();
    let listed: Vec<&str> = parsed
        .iter()
        .filter_map(|(_, r)| r.as_deref().ok())
        .collect();
    let mut plan = Plan::default();
    for (written, r) in &parsed {
        let verdict = match r {
            Err(message) => Verdict::Invalid {
                message: message.clone(),
            },
            Ok(r) => match snap.images.iter().find(|i| i.answers(r)) {
                None => Verdict::NotPresent,
                Some(image) => judge(entry, snap, image, &listed),
            },
        };
        if let Verdict::Remove { id } = &verdict {
            add_removal(&mut plan.removals, snap, id);
        }
        plan.verdicts.push((written.clone(), verdict));
    }
    plan
}

/// Rules 2–7 for an image a listed reference found.
fn judge(entry: &Entry, snap: &Snapshot, image: &ListedImage, listed: &[&str]) -> Verdict {
    let names = image.names();
    let skip = |reason, detail: String| Verdict::Skip { reason, detail };
    if is_sandbox(snap.sandbox.as_deref(), image, &names) {
        let what = snap.sandbox.clone().unwrap_or_default();
        return skip(SkipReason::Sandbox, format!("sandbox image {what}"));
    }
    // Pinned, and no name of it by us. (Pinned by us and by someone else
    // under another name cannot be told from CRI's one flag: the shell
    // reads the image again after unpinning and keeps it if still pinned.)
    if image.pinned && ours_of(&snap.ours, &names).is_empty() {
        return skip(SkipReason::PinnedByOther, format!("image {}", image.id));
    }
    let users = users_of(&snap.containers, image, &names);
    if !users.is_empty() {
        return Verdict::InUse { containers: users };
    }
    let others = other_names(image, &names, listed);
    if !others.is_empty() {
        return skip(SkipReason::OtherNames, others.join(", "));
    }
    if !entry.force && !entry.block {
        let owners = wanters(&snap.wanted, image, &names);
        if !owners.is_empty() {
            return skip(SkipReason::WantedByPull, owners.join(", "));
        }
    }
    Verdict::Remove {
        id: image.id.clone(),
    }
}

/// Whether `image` is the sandbox image (by id or by any of its names).
fn is_sandbox(sandbox: Option<&str>, image: &ListedImage, names: &BTreeSet<String>) -> bool {
    sandbox.is_some_and(|s| s == image.id || names.contains(&normal(s)))
}

/// `name (state)` of the containers created from `image`, at most
/// [`NAMED_MAX`], then how many more.
fn users_of(
    containers: &[Container],
    image: &ListedImage,
    names: &BTreeSet<String>,
) -> Vec<String> {
    let users: Vec<&Container> = containers
        .iter()
        .filter(|c| {
            if c.image_id.is_empty() {
                names.contains(&normal(&c.image))
            } else {
                c.image_id == image.id
            }
        })
        .collect();
    let mut out: Vec<String> = users
        .iter()
        .take(NAMED_MAX)
        .map(|c| format!("{} ({})", c.name, c.state))
        .collect();
    if users.len() > NAMED_MAX {
        out.push(format!("and {} more", users.len() - NAMED_MAX));
    }
    out
}

/// The names of `image` the job does not cover. Covered: the listed
/// references that found it; every name in the repository of a listed
/// digest that found it (its tags there name that same content); the digest
/// names in the repository of a listed tag that found it (the digest of
/// what the tag names). Another tag of the same repository, and any name in
/// another repository, is not covered unless listed.
fn other_names(image: &ListedImage, names: &BTreeSet<String>, listed: &[&str]) -> Vec<String> {
    let found: Vec<&str> = listed
        .iter()
        .copied()
        .filter(|r| image.answers(r))
        .collect();
    let repos = |digest: bool| -> BTreeSet<String> {
        found
            .iter()
            .filter(|r| r.contains('@') == digest)
            .filter_map(|r| repository(r))
            .collect()
    };
    let (by_digest, by_tag) = (repos(true), repos(false));
    let covered = |n: &str| {
        let repo = repository(n).unwrap_or_default();
        found.contains(&n)
            || by_digest.contains(&repo)
            || (n.contains('@') && by_tag.contains(&repo))
    };
    names.iter().filter(|n| !covered(n)).cloned().collect()
}

/// Who among the live pull entries wants `image` (by reference, or by the
/// digest its status resolved to); "an entry written by hand" for none.
fn wanters(wanted: &[Wanting], image: &ListedImage, names: &BTreeSet<String>) -> Vec<String> {
    let digests: BTreeSet<String> = image.repo_digests.iter().map(|d| normal(d)).collect();
    let mut owners: BTreeSet<String> = BTreeSet::new();
    for w in wanted {
        let by_name = names.contains(&normal(&w.reference));
        let by_digest = w
            .resolved
            .as_deref()
            .is_some_and(|d| digests.contains(&normal(d)));
        if by_name || by_digest {
            if w.owners.is_empty() {
                owners.insert(format!("an entry written by hand for {}", w.reference));
            }
            owners.extend(w.owners.iter().cloned());
        }
    }
    owners.into_iter().collect()
}

/// Adds the removal of `id` unless an earlier reference already did.
fn add_removal(removals: &mut Vec<Removal>, snap: &Snapshot, id: &str) {
    if removals.iter().any(|r| r.id == id) {
        return;
    }
    let Some(image) = snap.images.iter().find(|i| i.id == id) else {
        return;
    };
    removals.push(Removal {
        id: id.to_string(),
        unpin: ours_of(&snap.ours, &image.names()),
        bytes: image.size,
    });
}

/// The names this daemon pinned (as the runtime records them) that name
/// an image with `names`.
fn ours_of(ours: &BTreeSet<String>, names: &BTreeSet<String>) -> Vec<String> {
    ours.iter()
        .filter(|n| names.contains(&normal(n)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;
