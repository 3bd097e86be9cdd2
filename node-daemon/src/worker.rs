//! One tag's task from start to end: an entry that cannot be decoded fails
//! at once, an upgrade entry goes to the upgrade flow, any other goes
//! through the pull path (`pull::in_slot`) and finishes Succeeded or Failed
//! with its status, event and metrics.

use crate::deps::Deps;
use crate::desired::PullTask;
use crate::pull;
use crate::report::{self, Outcome, Reporter, now};
use crate::runtime::ContainerRuntime;
use crate::upgrade;
use nodeimage_api::kruise::ImagePullPhase;
use std::sync::Arc;

/// Starts tasks: what every task shares and how upgrades run on this node.
pub struct Workers<R> {
    /// The shared pieces.
    pub deps: Arc<Deps<R>>,
    /// How node-agent upgrades run here (off unless `--enable-upgrades`).
    pub upgrades: Arc<upgrade::Settings>,
    /// containerd's image verifier, if installed: told the blocks so the
    /// runtime refuses their pulls to any client.
    pub verifier: Option<Arc<crate::removal::verifier::PullVerifier>>,
}

impl<R> Clone for Workers<R> {
    fn clone(&self) -> Self {
        Workers {
            deps: self.deps.clone(),
            upgrades: self.upgrades.clone(),
            verifier: self.verifier.clone(),
        }
    }
}

impl<R: ContainerRuntime> Workers<R> {
    /// Runs `task` in its own tokio task.
    pub fn spawn(&self, task: PullTask) -> tokio::task::JoinHandle<()> {
        tokio::spawn(run(task, self.deps.clone(), self.upgrades.clone()))
    }
}

/// Runs one task to its end (or until aborted).
pub async fn run<R: ContainerRuntime>(
    task: PullTask,
    deps: Arc<Deps<R>>,
    upgrades: Arc<upgrade::Settings>,
) {
    if let Ok(t) = &task.target
        && t.upgrade.is_some()
    {
        let t = t.clone();
        return upgrade::run(task, t, deps, upgrades).await;
    }
    let mut rep = Reporter::new(&*deps, task.key.clone(), task.version);
    let target = match &task.target {
        Ok(t) => t.clone(),
        Err(msg) => {
            let reason = if crate::removal::block::is_block_message(msg) {
                "blocked"
            } else {
                "invalid"
            };
            return fail(&task, &deps, reason, msg.clone()).await;
        }
    };
    let deadline = pull::deadline_of(&task, &target);
    rep.send(ImagePullPhase::Waiting, 0, task.note.clone());
    let started = |rep: &mut Reporter<'_, R>| {
        rep.start = Some(now());
        rep.send(ImagePullPhase::Pulling, 0, task.note.clone());
        tracing::info!(tag = %task.key, version = task.version, "pull started");
    };
    // Whatever the outcome (a deadline in the queue included), the image's
    // lease share has ended when `in_slot` returns.
    let pull::Pulled { outcome, elapsed } =
        pull::in_slot(&mut rep, &target, deadline, started).await;
    report::count(&deps.metrics, &outcome, elapsed);
    rep.finish(&outcome);
    if matches!(outcome, Outcome::Succeeded { .. }) {
        deps.pins.poke();
    }
    report::announce(&deps, &task.key, &outcome).await;
}

/// Ends `task` Failed at once, without pulling (an entry that cannot be
/// decoded, an image that kept leaving the node).
pub async fn fail<R: ContainerRuntime>(
    task: &PullTask,
    deps: &Deps<R>,
    reason: &'static str,
    message: String,
) {
    let rep = Reporter::new(deps, task.key.clone(), task.version);
    let outcome = Outcome::failed(reason, message);
    report::count(&deps.metrics, &outcome, None);
    rep.finish(&outcome);
    report::announce(deps, &task.key, &outcome).await;
}
