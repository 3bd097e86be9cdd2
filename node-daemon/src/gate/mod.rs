//! The node's side of the start-up gate: while its NodeImage carries the
//! controller's note (`nodeimage_api::gate::STARTUP_GATE`: the taint and
//! the images it waits for), look whether every image is on the node and,
//! once they all are, remove exactly that taint from this node's Node
//! (`look`). It looks again whenever the NodeImage changes (a pull
//! finished) and on a short timer while gated. Without a controller the
//! bound still holds: `bound` opens the node after it.

pub mod bound;
pub mod look;
mod node;

use crate::deps::Deps;
use crate::runtime::ContainerRuntime;
use kube::runtime::events::EventType;
use look::Outcome;
use nodeimage_api::gate::{self, GateNote};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often a gated node looks again when nothing changed.
const RECHECK: Duration = Duration::from_secs(5);

/// Least time between two looks (NodeImage changes come once a second
/// while pulls report progress).
const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Where the daemon's NodeImage watch hands the gate its note (the raw
/// annotation; None without one). Every NodeImage change is passed on, so
/// the gate looks again when a pull finishes.
pub type Notes = watch::Sender<Option<String>>;

/// Runs the node's side of the gate (the notes, and the bound) until
/// `stop` turns true.
pub async fn run<R: ContainerRuntime>(
    deps: Arc<Deps<R>>,
    notes: watch::Receiver<Option<String>>,
    bound: bound::Settings,
    stop: watch::Receiver<bool>,
) {
    let own_bound = bound::run(deps.clone(), bound, stop.clone());
    tokio::join!(follow_notes(deps, notes, stop), own_bound);
}

/// Looks at the gate whenever the controller's note (or the NodeImage) changes.
async fn follow_notes<R: ContainerRuntime>(
    deps: Arc<Deps<R>>,
    mut notes: watch::Receiver<Option<String>>,
    mut stop: watch::Receiver<bool>,
) {
    let node = node::KubeNode {
        api: kube::Api::all(deps.client.clone()),
        name: deps.node.clone(),
    };
    // The note last found open, so an open gate is not looked at again
    // until the controller writes another note.
    let mut done: Option<GateNote> = None;
    loop {
        let raw = notes.borrow_and_update().clone();
        let wait = match parse(raw.as_deref()) {
            Some(note) if done.as_ref() != Some(&note) => {
                if one_look(&deps, &node, &note).await {
                    done = Some(note);
                    None
                } else {
                    Some(RECHECK)
                }
            }
            _ => None,
        };
        tokio::select! {
            _ = stop.changed() => return,
            r = notes.changed() => if r.is_err() { return },
            _ = sleep_or_forever(wait) => {}
        }
        tokio::time::sleep(MIN_INTERVAL).await;
    }
}

/// Sleeps `wait`, or forever with None.
async fn sleep_or_forever(wait: Option<Duration>) {
    match wait {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// The note in an annotation's value; a note that does not parse is
/// logged and ignored (the controller's bound still opens the gate).
fn parse(raw: Option<&str>) -> Option<GateNote> {
    let raw = raw?;
    match serde_json::from_str::<GateNote>(raw) {
        Ok(note) if !note.taint.is_empty() => Some(note),
        Ok(_) => None,
        Err(e) => {
            tracing::warn!(error = %e, "start-up gate note on the NodeImage does not parse; ignoring it");
            None
        }
    }
}

/// One look; true once the gate is open (by this look or before).
async fn one_look<R: ContainerRuntime>(
    deps: &Arc<Deps<R>>,
    node: &node::KubeNode,
    note: &GateNote,
) -> bool {
    match look::look(&deps.runtime, node, note).await {
        Ok(Outcome::Waiting(missing)) => {
            tracing::debug!(missing = ?missing, "start-up gate: images still missing");
            false
        }
        Ok(Outcome::AlreadyOpen) => true,
        Ok(Outcome::Opened) => {
            opened(deps, note).await;
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "start-up gate: could not open; looking again");
            false
        }
    }
}

/// Says that this daemon opened the gate: log line, metric, Event on the Node.
async fn opened<R>(deps: &Arc<Deps<R>>, note: &GateNote) {
    tracing::info!(node = %deps.node, taint = %note.taint, images = note.images.len(), "start-up gate opened: every gating image is on the node");
    deps.metrics.startup_gate_opened.inc();
    let text = format!(
        "All {} gating image(s) present; removed taint {}: {}",
        note.images.len(),
        note.taint,
        note.images.join(", ")
    );
    node::publish_event(deps, EventType::Normal, gate::REASON_READY, &text).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_that_do_not_parse_are_ignored() {
        let good = GateNote {
            taint: gate::DEFAULT_TAINT_KEY.into(),
            images: vec!["a:1".into()],
            deadline: "2026-01-01T00:00:00Z".into(),
        };
        assert_eq!(parse(Some(&good.to_annotation())), Some(good));
        assert_eq!(parse(Some("{")), None);
        assert_eq!(
            parse(Some(r#"{"taint":"","images":[],"deadline":""}"#)),
            None
        );
        assert_eq!(parse(None), None);
    }
}
