//! Keeps kubelet's image garbage collector away from the images this node's
//! NodeImage wants. kubelet collects never-used images first, and a
//! pre-pulled image is exactly that; it never collects a pinned one. While
//! a valid tag entry in the spec names an image, the daemon labels the
//! image's record in containerd (namespace k8s.io) `io.cri-containerd.pinned=pinned`
//! and `nodeimage.dev/pinned-by=<node>`; once no entry names it (TTL passed,
//! job deleted, entry removed, NodeImage deleted) both labels go and kubelet
//! may collect it. Only images carrying the daemon's own label are ever
//! unpinned: a pin set by someone else (containerd's sandbox image, an
//! operator) is left alone. The first pass runs once the first NodeImage is
//! read, so pins a previous run left for images nothing wants any more go
//! then; with pinning turned off, every pass unpins what the daemon pinned.
//!
//! State: the wanted set (owned by the sync loop, replaced whole on every
//! NodeImage event) and the pinned set (containerd's labels; never copied).

use crate::cri::namespaced;
use crate::metrics::Metrics;
use crate::runtime::ContainerRuntime;
use containerd_client::services::v1::images_client::ImagesClient;
use containerd_client::services::v1::{
    GetImageRequest, Image, ListImagesRequest, UpdateImageRequest,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tonic::transport::Channel;

/// containerd's pin label: CRI reports the image `pinned`, kubelet keeps it.
pub const PIN_LABEL: &str = "io.cri-containerd.pinned";
/// The pin label's value.
pub const PIN_VALUE: &str = "pinned";
/// Marks the pins this node's daemon made (value: the node name).
pub const OWNER_LABEL: &str = "nodeimage.dev/pinned-by";
/// How often pins are checked against the wanted set without a change (a
/// pull that ended, an image re-tagged by hand).
const RESYNC: Duration = Duration::from_secs(60);
/// Longest one containerd call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What a pass changes: images to pin and images to unpin.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Wanted, not pinned by this daemon yet.
    pub pin: Vec<String>,
    /// Pinned by this daemon, wanted no more.
    pub unpin: Vec<String>,
}

/// The pass's decision: pin what is wanted and not ours yet, unpin what is
/// ours and not wanted (nothing is wanted when pinning is off).
pub fn changes(wanted: &BTreeSet<String>, ours: &BTreeSet<String>, enabled: bool) -> Changes {
    let empty = BTreeSet::new();
    let wanted = if enabled { wanted } else { &empty };
    Changes {
        pin: wanted.difference(ours).cloned().collect(),
        unpin: ours.difference(wanted).cloned().collect(),
    }
}

/// How the sync loop and the workers talk to the pinning task.
#[derive(Clone)]
pub struct Pins {
    wanted: watch::Sender<Option<BTreeSet<String>>>,
    poke: Arc<Notify>,
}

impl Default for Pins {
    fn default() -> Self {
        Self {
            wanted: watch::channel(None).0,
            poke: Arc::default(),
        }
    }
}

impl Pins {
    /// The image references the spec wants now (replaces the previous set).
    pub fn want(&self, refs: BTreeSet<String>) {
        self.wanted.send_if_modified(|w| {
            let changed = w.as_ref() != Some(&refs);
            *w = Some(refs);
            changed
        });
    }

    /// An image arrived (a pull ended): pin it without waiting for the resync.
    pub fn poke(&self) {
        self.poke.notify_one();
    }
}

/// Settings of the pinning task.
pub struct Settings {
    /// This node: the value of [`OWNER_LABEL`].
    pub node: String,
    /// Pin wanted images (off: unpin what this daemon pinned).
    pub enabled: bool,
}

/// Keeps the pins in step with the wanted set until `stop` turns true.
pub async fn run<R: ContainerRuntime>(
    pins: Pins,
    runtime: R,
    settings: Settings,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let mut wanted = pins.wanted.subscribe();
    // Nothing is decided before the first NodeImage says what is wanted.
    tokio::select! {
        r = wanted.wait_for(Option::is_some) => if r.is_err() { return },
        _ = stop.changed() => return,
    }
    let mut ignored_logged = false;
    loop {
        let now = wanted.borrow_and_update().clone().unwrap_or_default();
        match pass(&runtime, &settings, &now, &metrics).await {
            Ok(report) => {
                if report.ignored > 0 && !ignored_logged {
                    ignored_logged = true;
                    tracing::warn!(
                        images = report.ignored,
                        "the runtime does not report pinned images as pinned; kubelet's image GC may still collect them"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "pinning pass failed; trying again later"),
        }
        tokio::select! {
            r = wanted.changed() => if r.is_err() { return },
            _ = pins.poke.notified() => {},
            _ = tokio::time::sleep(RESYNC) => {},
            _ = stop.changed() => return,
        }
    }
}

/// What a pass saw.
#[derive(Debug, Default)]
struct Report {
    /// Images labelled pinned that the runtime does not report pinned.
    ignored: usize,
}

/// One pass: list this daemon's pins, pin and unpin, then count.
async fn pass<R: ContainerRuntime>(
    runtime: &R,
    settings: &Settings,
    wanted: &BTreeSet<String>,
    metrics: &Metrics,
) -> Result<Report, tonic::Status> {
    let Some(ours) = runtime.pinned_by(&settings.node).await? else {
        return Ok(Report::default());
    };
    let todo = changes(wanted, &ours, settings.enabled);
    let pinned = apply(runtime, &settings.node, &todo, ours).await;
    Ok(count(runtime, &pinned, metrics).await)
}

/// Pins and unpins as `todo` says; what is pinned for this node after.
async fn apply<R: ContainerRuntime>(
    runtime: &R,
    node: &str,
    todo: &Changes,
    mut pinned: BTreeSet<String>,
) -> BTreeSet<String> {
    for name in &todo.unpin {
        match runtime.set_pin(name, node, false).await {
            Ok(_) => {
                pinned.remove(name);
                tracing::info!(image = %name, "unpinned: no tag entry wants it");
            }
            Err(e) => tracing::warn!(image = %name, error = %e, "cannot unpin"),
        }
    }
    for name in &todo.pin {
        match runtime.set_pin(name, node, true).await {
            Ok(true) => {
                pinned.insert(name.clone());
                tracing::info!(image = %name, "pinned while a tag entry wants it");
            }
            Ok(false) => {}
            Err(e) => tracing::warn!(image = %name, error = %e, "cannot pin"),
        }
    }
    pinned
}

/// Counts the pinned images and their bytes, and the image filesystem's size.
async fn count<R: ContainerRuntime>(
    runtime: &R,
    pinned: &BTreeSet<String>,
    metrics: &Metrics,
) -> Report {
    let mut report = Report::default();
    let mut bytes = 0u64;
    for name in pinned {
        if let Ok(Ok(Some(img))) =
            tokio::time::timeout(CALL_TIMEOUT, runtime.image_status(name)).await
        {
            bytes = bytes.saturating_add(img.size);
            if !img.pinned {
                report.ignored += 1;
            }
        }
    }
    metrics.pinned_images.set(pinned.len() as i64);
    metrics
        .pinned_bytes
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    if let Some(cap) = crate::checks::image_fs_capacity(runtime).await {
        metrics
            .image_fs_capacity_bytes
            .set(i64::try_from(cap).unwrap_or(i64::MAX));
    }
    report
}

/// The images this node's daemon pinned.
pub(crate) async fn list_ours(
    images: &mut ImagesClient<Channel>,
    node: &str,
) -> Result<BTreeSet<String>, tonic::Status> {
    let filter = format!("labels.\"{OWNER_LABEL}\"=={}", quoted(node));
    let list = images.list(namespaced(ListImagesRequest {
        filters: vec![filter],
    }));
    let list = tokio::time::timeout(CALL_TIMEOUT, list)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("listing pinned images"))??;
    Ok(list
        .into_inner()
        .images
        .into_iter()
        .filter(|i| i.labels.get(OWNER_LABEL).map(String::as_str) == Some(node))
        .map(|i| i.name)
        .collect())
}

/// A containerd filter value in double quotes.
fn quoted(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Pins `name` for `node`, or unpins it. Ok(false) when there is nothing to
/// do: the image is not on the node (yet), or someone else pinned it.
pub(crate) async fn set_pin(
    images: &mut ImagesClient<Channel>,
    name: &str,
    node: &str,
    pin: bool,
) -> Result<bool, tonic::Status> {
    let got = images.get(namespaced(GetImageRequest {
        name: name.to_string(),
    }));
    let image = match tokio::time::timeout(CALL_TIMEOUT, got).await {
        Err(_) => return Err(tonic::Status::deadline_exceeded("reading the image record")),
        Ok(Err(s)) if s.code() == tonic::Code::NotFound => return Ok(false),
        Ok(Err(s)) => return Err(s),
        Ok(Ok(r)) => match r.into_inner().image {
            Some(i) => i,
            None => return Ok(false),
        },
    };
    let Some(mut image) = relabel(image, node, pin) else {
        return Ok(false);
    };
    image.created_at = None;
    image.updated_at = None;
    let update = images.update(namespaced(UpdateImageRequest {
        image: Some(image),
        update_mask: Some(prost_types::FieldMask {
            paths: vec![
                format!("labels.{PIN_LABEL}"),
                format!("labels.{OWNER_LABEL}"),
            ],
        }),
        source_date_epoch: None,
    }));
    tokio::time::timeout(CALL_TIMEOUT, update)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("updating the image record"))??;
    Ok(true)
}

/// The image record with the pin labels as they should be, or None when it
/// must not be touched: pinning an image someone else pinned (containerd's
/// sandbox image, an operator, another daemon sharing this containerd), or
/// unpinning one this node's daemon did not pin.
fn relabel(mut image: Image, node: &str, pin: bool) -> Option<Image> {
    let pinned = image.labels.get(PIN_LABEL).map(String::as_str) == Some(PIN_VALUE);
    let ours = image.labels.get(OWNER_LABEL).map(String::as_str) == Some(node);
    match pin {
        true if pinned => None,
        true => {
            image.labels.insert(PIN_LABEL.into(), PIN_VALUE.into());
            image.labels.insert(OWNER_LABEL.into(), node.into());
            Some(image)
        }
        false if !ours => None,
        false => {
            image.labels.remove(PIN_LABEL);
            image.labels.remove(OWNER_LABEL);
            Some(image)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn pins_follow_the_wanted_set() {
        // (wanted, pinned by us, enabled, to pin, to unpin)
        let table: [(&[&str], &[&str], bool, &[&str], &[&str]); 5] = [
            (&["a", "b"], &[], true, &["a", "b"], &[]),
            (&["a"], &["a"], true, &[], &[]),
            (&["a"], &["a", "old"], true, &[], &["old"]),
            (&[], &["a", "b"], true, &[], &["a", "b"]),
            // Turned off: what this daemon pinned goes, nothing new is pinned.
            (&["a", "b"], &["a"], false, &[], &["a"]),
        ];
        for (wanted, ours, enabled, pin, unpin) in table {
            assert_eq!(
                changes(&set(wanted), &set(ours), enabled),
                Changes {
                    pin: pin.iter().map(|s| s.to_string()).collect(),
                    unpin: unpin.iter().map(|s| s.to_string()).collect(),
                },
                "wanted {wanted:?}, ours {ours:?}, enabled {enabled}"
            );
        }
    }

    fn image(labels: &[(&str, &str)]) -> Image {
        Image {
            name: "r/x:v1".into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn only_our_own_pins_are_ever_removed() {
        let sandbox = image(&[(PIN_LABEL, PIN_VALUE)]);
        assert!(
            relabel(sandbox.clone(), "n1", true).is_none(),
            "not taken over"
        );
        assert!(relabel(sandbox, "n1", false).is_none(), "not unpinned");
        let neighbours = image(&[(PIN_LABEL, PIN_VALUE), (OWNER_LABEL, "n2")]);
        assert!(
            relabel(neighbours.clone(), "n1", true).is_none(),
            "not taken over"
        );
        assert!(relabel(neighbours, "n1", false).is_none(), "not unpinned");

        let plain = image(&[("other", "1")]);
        let pinned = relabel(plain.clone(), "n1", true).expect("pinned");
        assert_eq!(
            pinned.labels.get(PIN_LABEL).map(String::as_str),
            Some(PIN_VALUE)
        );
        assert_eq!(
            pinned.labels.get(OWNER_LABEL).map(String::as_str),
            Some("n1")
        );
        assert_eq!(pinned.labels.get("other").map(String::as_str), Some("1"));
        assert!(
            relabel(plain, "n1", false).is_none(),
            "nothing of ours to unpin"
        );

        let unpinned = relabel(pinned, "n1", false).expect("unpinned");
        assert_eq!(unpinned.labels.len(), 1, "{:?}", unpinned.labels);
    }

    #[test]
    fn filter_values_are_quoted() {
        assert_eq!(quoted("node-1.example"), "\"node-1.example\"");
        assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
    }

    #[tokio::test]
    async fn a_pass_moves_only_this_nodes_pins() {
        use crate::runtime::fake::FakeRuntime;
        // (name, wanted, enabled, CRI alone, pinned after with owners, counted)
        let cases: [(&str, &[&str], bool, bool, &[(&str, &str)], i64); 3] = [
            (
                "wanted images are pinned, those no longer wanted unpinned",
                &["a", "b", "sandbox", "missing"],
                true,
                false,
                &[("a", "n1"), ("b", "n1"), ("sandbox", "")],
                2,
            ),
            (
                "turned off: only this node's pins go",
                &["a", "b"],
                false,
                false,
                &[("sandbox", "")],
                0,
            ),
            (
                "on CRI alone nothing is touched",
                &["a", "b"],
                true,
                true,
                &[("a", "n1"), ("old", "n1"), ("sandbox", "")],
                0,
            ),
        ];
        for (name, wanted, enabled, cri_only, after, counted) in cases {
            let rt = FakeRuntime::default();
            rt.pinned("a", "n1")
                .pinned("old", "n1")
                .pinned("sandbox", "")
                .present("b");
            if cri_only {
                rt.cri_only();
            }
            let settings = Settings {
                node: "n1".into(),
                enabled,
            };
            let metrics = Metrics::new();
            let report = pass(&rt, &settings, &set(wanted), &metrics).await;
            assert_eq!(report.map(|r| r.ignored).ok(), Some(0), "{name}");
            let want: std::collections::BTreeMap<String, String> = after
                .iter()
                .map(|(i, o)| (i.to_string(), o.to_string()))
                .collect();
            assert_eq!(rt.pins(), want, "{name}");
            assert_eq!(metrics.pinned_images.get(), counted, "{name}");
        }
    }
}
