//! What a cached NodeImage costs the controller: bytes held and decode time
//! for 100-tag NodeImages shaped as in the 100-job benchmark (one tag per
//! image, a job's owner reference, pull policy, status Succeeded with its
//! digest). docs/benchmarks.md quotes it; run it on two commits to compare:
//!
//!   cargo run --release -p nodeimage-api --example decode_cost

use nodeimage_api::kruise::{ImageSpec, ImageStatus, ImageTagSpec, ImageTagStatus, NodeImage};
use serde_json::json;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

/// Counts the bytes held, to weigh decoded objects.
struct Counting;
static HELD: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HELD.fetch_add(l.size() as isize, Relaxed);
        // SAFETY: same layout contract as the caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HELD.fetch_sub(l.size() as isize, Relaxed);
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const IMAGES: usize = 100;

/// The JSON of node `node`'s NodeImage.
fn sample(node: usize) -> String {
    let mut spec = serde_json::Map::new();
    let mut status = serde_json::Map::new();
    for j in 0..IMAGES {
        let image = format!("127.0.0.1:5000/bench/image-{j:03}");
        spec.insert(
            image.clone(),
            json!({"tags": [{
            "tag": "v1", "createdAt": "2026-11-25T20:01:23Z",
            "pullPolicy": {"backoffLimit": 3, "timeoutSeconds": 600,
                           "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 1200},
            "ownerReferences": [{"apiVersion": "apps.kruise.io/v1alpha1", "kind": "ImagePullJob",
                "name": format!("bench-{j:03}"), "namespace": "bench",
                "uid": format!("0b7d0a8e-3b8f-4c61-9a3e-{j:012}")}],
            "version": 0, "imagePullPolicy": "IfNotPresent"}]}),
        );
        status.insert(
            image.clone(),
            json!({"tags": [{
            "tag": "v1", "phase": "Succeeded", "progress": 100,
            "startTime": "2026-11-25T20:01:24Z", "completionTime": "2026-11-25T20:01:25Z",
            "version": 0, "imageID": format!("{image}@sha256:{:064x}", 0x5151)}]}),
        );
    }
    json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "NodeImage",
        "metadata": {"name": format!("node-{node}"), "resourceVersion": "7"},
        "spec": {"images": spec},
        "status": {"desired": IMAGES, "waiting": 0, "pulling": 0, "succeeded": IMAGES,
                   "failed": 0, "imageStatuses": status}})
    .to_string()
}

/// Decodes as the controller's cache does: lists trimmed to their length
/// (the controller's `nodeimages::compact`).
fn decode(text: &str) -> NodeImage {
    let mut ni: NodeImage = serde_json::from_str(text).expect("the sample decodes");
    for image in ni.spec.images.iter_mut().flat_map(|m| m.values_mut()) {
        image.tags.shrink_to_fit();
    }
    let statuses = ni.status.as_mut().and_then(|s| s.image_statuses.as_mut());
    for ImageStatus { tags } in statuses.into_iter().flat_map(|m| m.values_mut()) {
        tags.shrink_to_fit();
    }
    ni
}

fn main() {
    println!(
        "struct sizes: ImageTagSpec {} B, ImageTagStatus {} B, ImageSpec {} B",
        size_of::<ImageTagSpec>(),
        size_of::<ImageTagStatus>(),
        size_of::<ImageSpec>()
    );
    let texts: Vec<String> = (0..1000).map(sample).collect();

    let mut times = Vec::new();
    for _ in 0..7 {
        let start = Instant::now();
        let kept: Vec<NodeImage> = texts.iter().map(|t| decode(t)).collect();
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        drop(kept);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "decode of 1,000 NodeImages: median {:.1} ms (min {:.1}, max {:.1}, 7 rounds)",
        times[3], times[0], times[6]
    );

    let n = 50;
    let before = HELD.load(Relaxed);
    let mut kept: Vec<NodeImage> = texts[..n].iter().map(|t| decode(t)).collect();
    let whole = HELD.load(Relaxed) - before;
    let mark = HELD.load(Relaxed);
    kept.iter_mut().for_each(|ni| ni.status = None);
    let status = mark - HELD.load(Relaxed);
    let mark = HELD.load(Relaxed);
    kept.iter_mut().for_each(|ni| ni.spec.images = None);
    let spec = mark - HELD.load(Relaxed);
    let per = |b: isize| b / n as isize;
    println!(
        "held per NodeImage ({IMAGES} tags): {} B (spec {} B, status {} B), {} B per tag entry; JSON {} B",
        per(whole),
        per(spec),
        per(status),
        per(whole) / IMAGES as isize,
        texts[0].len()
    );
}
