//! The node's last line of a block: a pull entry whose reference is a
//! digest that a removal entry with `block` keeps off this node fails before
//! any pull, naming the job that blocks it; the presence check does not pull
//! a blocked image back (`serve::forced`). The controller hands block
//! entries to the nodes its job selects, nodes that join later included.

use crate::desired::PullTask;
use nodeimage_api::nodeimage_dev::RemovalEntry;
use nodeimage_api::reference::ImageRef;

/// How every block refusal starts (also the metric reason's test).
const BLOCKED_BY: &str = "blocked by ImageRemovalJob ";

/// Whether a failure `message` is a block's refusal.
pub fn is_block_message(message: &str) -> bool {
    message.starts_with(BLOCKED_BY)
}

/// Tells the pulls what `entries` block now; returns the block entries
/// (for the sweep).
pub fn observe<R>(deps: &crate::deps::Deps<R>, entries: &[RemovalEntry]) -> Vec<RemovalEntry> {
    if let Ok(mut b) = deps.blocked.write() {
        *b = by_name(entries);
    }
    entries.iter().filter(|e| e.block).cloned().collect()
}

/// `name@digest` of each image `entries` block, with the job.
fn by_name(entries: &[RemovalEntry]) -> std::collections::BTreeMap<String, String> {
    blocked(entries)
        .into_iter()
        .filter_map(|(r, job)| {
            Some((
                format!("{}@{}", r.name(), r.digest.as_deref()?),
                job.to_string(),
            ))
        })
        .collect()
}

/// The refusal of a tag whose pull resolved to `id` (`name@digest`), which
/// `job` blocks.
pub fn resolved_message(job: &str, reference: &str, id: &str) -> String {
    format!(
        "{BLOCKED_BY}{job}: {reference} resolves to {id}, which is kept off this node while that job exists"
    )
}

/// The digests `entries` block, each with the job that blocks it.
pub(crate) fn blocked(entries: &[RemovalEntry]) -> Vec<(ImageRef, &str)> {
    entries
        .iter()
        .filter(|e| e.block)
        .flat_map(|e| {
            e.images
                .iter()
                .filter_map(|i| ImageRef::parse(i).ok())
                .filter(|r| r.digest.is_some())
                .map(move |r| (r, e.job.as_str()))
        })
        .collect()
}

/// The job whose block names `image` (same registry, repository and digest).
fn blocking<'a>(image: &ImageRef, blocked: &[(ImageRef, &'a str)]) -> Option<&'a str> {
    blocked
        .iter()
        .find(|(b, _)| {
            image.digest.is_some()
                && b.digest == image.digest
                && b.repository == image.repository
                && b.registry == image.registry
        })
        .map(|(_, job)| *job)
}

/// Fails each task of `tasks` whose reference a block entry names.
pub fn mark_blocked(tasks: &mut [PullTask], entries: &[RemovalEntry]) {
    let blocked = blocked(entries);
    if blocked.is_empty() {
        return;
    }
    for task in tasks {
        let Ok(target) = &task.target else {
            continue;
        };
        if let Some(job) = blocking(&target.image, &blocked) {
            task.target = Err(format!(
                "{BLOCKED_BY}{job}: {} is kept off this node while that job exists",
                target.image.pull_ref()
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn entry(job: &str, block: bool, images: &[String]) -> RemovalEntry {
        RemovalEntry {
            job: job.into(),
            uid: "u".into(),
            images: images.to_vec(),
            block,
            ..Default::default()
        }
    }

    #[test]
    fn only_the_blocked_digest_in_its_repository_is_refused() {
        let blocks = [
            entry("cve", true, &[format!("r.example/app@{D1}")]),
            entry("plain", false, &[format!("r.example/app@{D2}")]),
        ];
        let rows: &[(&str, Option<&str>)] = &[
            (
                "r.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111",
                Some("cve"),
            ),
            (
                "r.example/app:v1@sha256:1111111111111111111111111111111111111111111111111111111111111111",
                Some("cve"),
            ),
            (
                "r.example/other@sha256:1111111111111111111111111111111111111111111111111111111111111111",
                None,
            ),
            (
                "mirror.example/app@sha256:1111111111111111111111111111111111111111111111111111111111111111",
                None,
            ),
            (
                "r.example/app@sha256:2222222222222222222222222222222222222222222222222222222222222222",
                None,
            ),
            ("r.example/app:v1", None),
        ];
        let list = blocked(&blocks);
        for (reference, want) in rows {
            let r = ImageRef::parse(reference).unwrap_or_else(|e| panic!("{reference}: {e}"));
            assert_eq!(blocking(&r, &list), *want, "{reference}");
        }
    }
}
