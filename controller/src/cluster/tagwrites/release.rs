//! Taking a job's entries back out of NodeImages: one node, every node
//! holding them, or a list of nodes, several writes at a time, through the
//! one node writer.

use super::{Edit, NodeWriter, RemovalEdit, WriteError};
use crate::nodeimage::{entries, removals};
use futures::StreamExt;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use nodeimage_api::kruise::NodeImage;
use std::sync::Arc;

/// Takes the entries owned by any of `uids` out of `ni` (see
/// [`entries::release`]).
pub async fn release(
    writer: &NodeWriter,
    ni: Arc<NodeImage>,
    uids: &[String],
) -> Result<(), WriteError> {
    // Borrowed, not cloned: a cleanup looks at every NodeImage, and most
    // hold nothing of the job (a copy of each spec multiplied the
    // controller's memory while many jobs were deleted: docs/benchmarks.md,
    // "Controller memory").
    let owned = |ni: &NodeImage| -> Vec<String> {
        match ni.spec.images.as_ref() {
            Some(images) => uids
                .iter()
                .filter(|u| entries::owns_any(images, u))
                .cloned()
                .collect(),
            None => Vec::new(),
        }
    };
    // The cache may not show entries we wrote a moment ago; our last write does.
    let mut uids = owned(&ni);
    if let Some(w) = writer.written(&ni.name_any()) {
        for uid in owned(&w) {
            if !uids.contains(&uid) {
                uids.push(uid);
            }
        }
    }
    if uids.is_empty() {
        return Ok(());
    }
    let edit: Edit = Box::new(move |_, images| {
        uids.iter().fold(false, |changed, uid| {
            entries::release(images, uid) | changed
        })
    });
    writer.edit(ni, edit).await
}

/// Releases in flight at once when a job leaves every node.
const RELEASE_CONCURRENCY: usize = 32;

/// Takes the entries owned by any of `uids` out of every NodeImage in
/// `nodeimages`, several nodes at a time (a deleted job may hold entries on
/// thousands). Passing every job of the kind that is being deleted, not
/// just one, lets the first of them clear a node for all in one write.
/// Each node is read from the cache when its turn comes: a list of every
/// NodeImage taken up front kept each as it was then alive for the whole
/// cleanup, beside the cache's newer copies.
pub async fn release_all(
    writer: &NodeWriter,
    nodeimages: &Store<NodeImage>,
    uids: &[String],
) -> Result<(), WriteError> {
    let holding = writer.holding(|spec| {
        let images = spec.images.as_ref();
        images.is_some_and(|images| uids.iter().any(|u| entries::owns_any(images, u)))
    });
    release_on(writer, nodeimages, holding, uids).await
}

/// Takes the entries owned by any of `uids` out of the NodeImages of
/// `nodes`, several at a time: each release waits for its own write, so a
/// job leaving a thousand nodes one by one held its reconcile for minutes.
pub async fn release_on(
    writer: &NodeWriter,
    nodeimages: &Store<NodeImage>,
    nodes: impl IntoIterator<Item = String>,
    uids: &[String],
) -> Result<(), WriteError> {
    let results: Vec<Result<(), WriteError>> = futures::stream::iter(nodes)
        .filter_map(|node| std::future::ready(nodeimages.get(&ObjectRef::new(&node))))
        .map(|ni| release(writer, ni, uids))
        .buffer_unordered(RELEASE_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Takes job incarnation `uid`'s removal entry out of every NodeImage that
/// holds one, several nodes at a time (each read from the cache when its
/// turn comes).
pub async fn release_removals(
    writer: &NodeWriter,
    nodeimages: &Store<NodeImage>,
    uid: &str,
) -> Result<(), WriteError> {
    let holding = writer.holding(|spec| removals::entry_in(spec, uid).is_some());
    let results: Vec<Result<(), WriteError>> = futures::stream::iter(holding)
        .filter_map(|node| std::future::ready(nodeimages.get(&ObjectRef::new(&node))))
        .map(|ni| {
            let uid = uid.to_string();
            let edit: RemovalEdit = Box::new(move |_, list| removals::release(list, &uid));
            writer.edit_removals(ni, edit)
        })
        .buffer_unordered(RELEASE_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}
