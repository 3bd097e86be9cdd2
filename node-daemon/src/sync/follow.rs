//! The watch the daemon's loop follows: this node's own NodeImage only.

use futures::Stream;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::lenient::Lenient;

/// One event of the NodeImage watch, as `run` reads it.
pub type WatchEvent = Result<Event<Lenient<NodeImage>>, watcher::Error>;

/// The watch of `node`'s own NodeImage, retried with backoff; decoded entry
/// by entry (a field that does not fit fails its tag, never the watch, and
/// with it every other tag of the node).
pub fn watch_nodeimage(
    api: kube::Api<Lenient<NodeImage>>,
    node: &str,
) -> impl Stream<Item = WatchEvent> + Send + use<> {
    let config = watcher::Config::default().fields(&format!("metadata.name={node}"));
    watcher::watcher(api, config).default_backoff()
}
