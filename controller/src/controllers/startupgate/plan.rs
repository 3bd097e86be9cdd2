//! What the start-up gate does with one Node, decided from a snapshot (is
//! it tainted, when was it created, which gating images target it, what its
//! NodeImage says) and the clock. Pure.
//!
//! The rule: a Node carrying the start-up taint waits until its daemon finds
//! every gating image present (the daemon then removes the taint), but never
//! past `creationTimestamp + timeout`; with no gating image it opens at once.
//! The controller only ever removes the taint, never adds it.

use chrono::{DateTime, TimeDelta, Utc};
use nodeimage_api::gate::GateNote;
use nodeimage_api::kruise::NodeImage;
use nodeimage_api::kruise::nodeimage::ImagePullPhase;
use nodeimage_api::reference::ImageRef;
use std::collections::BTreeSet;
use std::time::Duration;

/// How often a gated Node is looked at again even if nothing it watches
/// changed (a gating job created later, a NodeImage created later).
pub const RECHECK: Duration = Duration::from_secs(10);

/// The gate's settings, from the flags.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Key of the start-up taint.
    pub taint: String,
    /// Longest a Node stays gated, from its creation.
    pub timeout: TimeDelta,
}

/// What the plan reads of one Node.
#[derive(Debug)]
pub struct Snapshot<'a> {
    /// The Node carries the start-up taint.
    pub tainted: bool,
    /// The Node's creationTimestamp.
    pub created: Option<DateTime<Utc>>,
    /// The Node's NodeImage, if the mirror made it yet.
    pub nodeimage: Option<&'a NodeImage>,
    /// Images of the unfinished gating jobs that select the Node; None
    /// while that cannot be told (no NodeImage yet: jobs select NodeImages).
    pub images: Option<BTreeSet<String>>,
}

/// Why the controller opened a gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// No gating image targets the Node.
    NoGatingImages,
    /// The bound passed before the daemon found every image.
    Timeout,
}

impl Reason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Reason::NoGatingImages => "no_gating_images",
            Reason::Timeout => "timeout",
        }
    }
}

/// What to do with one Node.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Not gated and nothing of the gate left on its NodeImage.
    Idle,
    /// Not gated any more: take the note off its NodeImage.
    ClearNote,
    /// Gated, with no NodeImage yet to write the note to.
    WaitForNodeImage(Duration),
    /// Remove the taint now; `missing`: gating images the node has not
    /// reported as pulled.
    Open {
        /// Why.
        reason: Reason,
        /// Images the NodeImage's status does not report pulled.
        missing: Vec<String>,
    },
    /// Stay gated: write this note if it differs from the one there, and
    /// look again after `look_again`.
    Gated {
        /// The note to write (None: the one there is current).
        write: Option<GateNote>,
        /// When to look again at the latest.
        look_again: Duration,
    },
}

/// Decides what to do with one Node at `now`.
pub fn decide(snap: &Snapshot<'_>, settings: &Settings, now: DateTime<Utc>) -> Decision {
    let current = snap
        .nodeimage
        .and_then(|ni| GateNote::of(ni.metadata.annotations.as_ref()));
    if !snap.tainted {
        return if current.is_some() {
            Decision::ClearNote
        } else {
            Decision::Idle
        };
    }
    if snap.images.as_ref().is_some_and(BTreeSet::is_empty) {
        return Decision::Open {
            reason: Reason::NoGatingImages,
            missing: vec![],
        };
    }
    // No creation time (never from an API server): the bound has passed.
    let deadline = crate::runtime::clock::after(
        snap.created.unwrap_or(DateTime::UNIX_EPOCH),
        settings.timeout,
    );
    let images = snap.images.clone().unwrap_or_default();
    if now >= deadline {
        return Decision::Open {
            reason: Reason::Timeout,
            missing: missing(snap.nodeimage, &images),
        };
    }
    let left = (deadline - now).to_std().unwrap_or_default();
    let look_again = left.min(RECHECK);
    let (Some(_), Some(_)) = (snap.nodeimage, &snap.images) else {
        return Decision::WaitForNodeImage(look_again.min(Duration::from_secs(1)));
    };
    let wanted = GateNote {
        taint: settings.taint.clone(),
        images: images.into_iter().collect(),
        deadline: deadline.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    };
    let write = match current {
        Some(Ok(note)) if note == wanted => None,
        _ => Some(wanted),
    };
    Decision::Gated { write, look_again }
}

/// The images of `images` that `ni`'s status does not report as pulled.
fn missing(ni: Option<&NodeImage>, images: &BTreeSet<String>) -> Vec<String> {
    images
        .iter()
        .filter(|image| !reported_pulled(ni, image))
        .cloned()
        .collect()
}

/// Whether `ni`'s status reports `image` pulled (some Succeeded entry of its tag).
fn reported_pulled(ni: Option<&NodeImage>, image: &str) -> bool {
    let Ok(r) = ImageRef::parse(image) else {
        return false;
    };
    let tag = r.tag_or_digest();
    ni.and_then(|ni| ni.status.as_ref())
        .and_then(|s| s.image_statuses.as_ref())
        .and_then(|m| m.get(r.familiar_name().as_str()))
        .is_some_and(|s| {
            s.tags
                .iter()
                .any(|t| *t.tag == *tag && t.phase == ImagePullPhase::Succeeded)
        })
}

#[cfg(test)]
mod tests;
