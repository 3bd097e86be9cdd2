//! NodeUpgradeJob as a node task of the engine: the entry every working
//! node gets, each node's row from the daemon's upgradeState, and the
//! versions the nodes ran. Pure.

use super::{MAX_REASON_CHARS, NO_UPGRADE_SUPPORT, entry_pull_policy, event, owner_ref, state};
use crate::engine::jobevents::JobEvent;
use crate::engine::nodetasks::{
    self, Announce, Node, NodeReader, NodeTask, Precheck, Working, action,
};
use crate::engine::rollout::{self, Entry, EntryState, NodeState};
use crate::nodeimage::entries::EntryRequest;
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use nodeimage_api::kruise::nodeimage::contract::{FailureCause, failure_cause};
use nodeimage_api::kruise::{ImageTagStatus, NodeImage, Purpose, TagUpgrade, UpgradeState};
use nodeimage_api::kubeedge::{
    CONFIRM_ANNOTATION, NodeUpgradeJob, NodeUpgradeJobStatus, TaskStatus, UpgradeDigests,
};
use std::collections::{BTreeMap, BTreeSet};

/// NodeUpgradeJob as a node task.
pub struct Upgrade<'a> {
    /// The job.
    pub job: &'a NodeUpgradeJob,
    /// The KubeEdge version each Node reports, by name.
    pub versions: &'a BTreeMap<String, String>,
    /// The entry every working node gets (empty when the spec is invalid).
    pub entry: Entry,
    /// The target version.
    pub version: String,
    /// `image:version`, for the pulling reason.
    pub image_ref: String,
    /// The digests the nodes check the image against (None: no check).
    pub digests: Option<UpgradeDigests>,
}

impl<'a> Upgrade<'a> {
    /// The job as a node task; `target` (the entry and the digests) is None
    /// when its spec names no valid one.
    pub fn of(
        job: &'a NodeUpgradeJob,
        versions: &'a BTreeMap<String, String>,
        target: Option<&(Entry, Option<UpgradeDigests>)>,
    ) -> Self {
        let entry = target.map(|(e, _)| e);
        let version = job.spec.version.clone().unwrap_or_default();
        let image = entry.map(|e| e.image.as_str()).unwrap_or_default();
        Upgrade {
            job,
            versions,
            image_ref: format!("{image}:{version}"),
            entry: entry.cloned().unwrap_or(Entry {
                image: String::new(),
                tag: String::new(),
                purpose: Purpose::Upgrade,
            }),
            version,
            digests: target.and_then(|(_, d)| d.clone()),
        }
    }

    /// The entry every working node gets.
    pub fn request(&self) -> (EntryRequest, TagUpgrade) {
        let checks = self
            .job
            .spec
            .task
            .check_items
            .clone()
            .filter(|c| !c.is_empty());
        (
            EntryRequest {
                image: self.entry.image.clone(),
                tag: self.entry.tag.clone(),
                owner: owner_ref(self.job),
                pull_policy: entry_pull_policy(self.job),
                image_pull_policy: Some("IfNotPresent".into()),
                secrets: vec![],
                sandbox: None,
                check_items: checks,
                pull_again_before: None,
                p2p: None,
            },
            TagUpgrade {
                version: self.version.clone(),
                job: self.job.name_any(),
                await_confirmation: false,
                image_digests: self.digests.clone(),
            },
        )
    }

    /// `currentVersion` and `historicVersion` after this step.
    pub fn versions(
        &self,
        old: &NodeUpgradeJobStatus,
        p: &nodetasks::Planned<Self>,
    ) -> (Option<String>, Option<String>) {
        let version = &self.version;
        let mut historic: BTreeSet<String> = old
            .historic_version
            .iter()
            .flat_map(|h| h.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .collect();
        for (name, row) in &p.nodes {
            let from = match row {
                Node::Tracked {
                    detail: Some(t), ..
                } => t.from_version().map(str::to_string),
                _ => None,
            };
            let node_version = match row {
                Node::Final(_) | Node::Skipped => None,
                _ => self.versions.get(name).cloned(),
            };
            historic.extend(
                from.into_iter()
                    .chain(node_version)
                    .filter(|v| v != version),
            );
        }
        let any_successful = p
            .rows
            .iter()
            .flatten()
            .any(|t| t.phase.state.as_deref() == Some(state::SUCCESSFUL));
        let current = if any_successful {
            Some(version.clone())
        } else {
            old.current_version.clone()
        };
        let historic =
            (!historic.is_empty()).then(|| historic.into_iter().collect::<Vec<_>>().join(","));
        (current, historic)
    }
}

fn task(
    name: &str,
    state: &str,
    event: Option<&str>,
    action: Option<&str>,
    reason: Option<String>,
) -> TaskStatus {
    let reason = reason.filter(|r| !r.is_empty());
    nodetasks::task(name, state, event, action, reason, MAX_REASON_CHARS)
}

impl NodeReader for Upgrade<'_> {
    type Detail = Option<ImageTagStatus>;

    fn precheck(&self, node: &str) -> Option<Precheck> {
        (self.versions.get(node) == Some(&self.version)).then_some(Precheck::Skip)
    }

    fn detail(
        &self,
        ni: &NodeImage,
        entries: &[Entry],
        uid: &str,
        _: &[EntryState],
    ) -> Option<ImageTagStatus> {
        entries
            .first()
            .and_then(|e| rollout::entry_status(ni, e, uid))
            .cloned()
    }

    fn fresh(&self, _: usize, _: DateTime<Utc>) -> Option<ImageTagStatus> {
        None
    }

    /// A pull is not an upgrade: success needs the daemon's word.
    fn settle(&self, state: NodeState, tag: &Option<ImageTagStatus>) -> NodeState {
        if state == NodeState::Succeeded
            && tag.as_ref().and_then(|t| t.upgrade_state()) != Some(UpgradeState::Successful)
        {
            NodeState::Failed(NO_UPGRADE_SUPPORT.into())
        } else {
            state
        }
    }
}

impl NodeTask for Upgrade<'_> {
    type Row = TaskStatus;
    type Summary = ();
    const WORKING: Working = Working {
        state: state::UPGRADING,
        event: event::UPGRADE,
        verb: "upgrading",
    };
    const FAILURE_EVENTS: &'static [&'static str] = &[
        event::INIT,
        event::CHECK,
        event::BACKUP,
        event::ROLLBACK,
        event::TIMEOUT,
    ];
    const MAX_REASON_CHARS: usize = MAX_REASON_CHARS;
    const ANNOUNCE: Announce = Announce::OnceSelected;

    fn task(row: &TaskStatus) -> Option<&TaskStatus> {
        Some(row)
    }

    fn task_mut(row: &mut TaskStatus) -> Option<&mut TaskStatus> {
        Some(row)
    }

    fn row(task: TaskStatus) -> TaskStatus {
        task
    }

    fn started(&self, nodes: Option<usize>) -> String {
        format!(
            "Started upgrading {} node(s) to {v} with {}:{v}",
            nodes.unwrap_or_default(),
            self.entry.image,
            v = self.version
        )
    }

    fn render(
        &self,
        name: &str,
        node_state: &NodeState,
        tag: &Option<ImageTagStatus>,
        timed_out: bool,
    ) -> TaskStatus {
        let upgrade = tag.as_ref().and_then(|t| t.upgrade_state());
        let message = tag
            .as_ref()
            .and_then(|t| t.message.as_deref().map(str::to_string));
        match node_state {
            NodeState::Active(_) => active_row(name, upgrade, tag.as_ref(), &self.image_ref),
            NodeState::Succeeded => {
                let t = tag.as_ref();
                let reason = message.or_else(|| {
                    match (
                        t.and_then(|t| t.from_version()),
                        t.and_then(|t| t.to_version()),
                    ) {
                        (Some(f), Some(to)) => Some(format!("upgraded from {f} to {to}")),
                        (_, Some(to)) => Some(format!("upgraded to {to}")),
                        _ => Some(format!("upgraded to {}", self.version)),
                    }
                });
                let reason = reason.filter(|r| !r.is_empty());
                nodetasks::succeeded(name, event::UPGRADE, reason, MAX_REASON_CHARS)
            }
            NodeState::Failed(reason) if timed_out => {
                nodetasks::timed_out(name, reason, MAX_REASON_CHARS)
            }
            NodeState::Failed(reason) => {
                let (ev, act) = failed_step(upgrade, reason);
                task(
                    name,
                    state::FAILED,
                    Some(ev),
                    Some(act),
                    Some(reason.clone()),
                )
            }
            NodeState::NotStarted => task(name, state::INIT, None, None, None),
        }
    }

    fn render_skipped(&self, name: &str) -> TaskStatus {
        task(
            name,
            state::SUCCESSFUL,
            Some(event::CHECK),
            Some(action::SUCCESS),
            Some(format!(
                "already at {} (the Node's kubeletVersion); nothing to do",
                self.version
            )),
        )
    }

    fn summarise(rows: &mut [TaskStatus], budget: usize) {
        super::summarise(rows, budget)
    }

    fn node_event(&self, t: &TaskStatus) -> Option<JobEvent> {
        let name = t.node_name.clone().unwrap_or_default();
        let reason = t.phase.reason.clone().unwrap_or_default();
        Some(if t.phase.state.as_deref() == Some(state::SUCCESSFUL) {
            JobEvent::normal("NodeUpgraded", format!("Node {name}: {reason}"))
        } else if t.phase.event.as_deref() == Some(event::ROLLBACK)
            && t.phase.action.as_deref() == Some(action::SUCCESS)
        {
            JobEvent::warning(
                "NodeRolledBack",
                format!("Node {name} rolled back: {reason}"),
            )
        } else {
            JobEvent::warning(
                "NodeFailed",
                format!(
                    "Node {name} failed ({}): {reason}",
                    t.phase.event.as_deref().unwrap_or_default()
                ),
            )
        })
    }

    fn more_nodes(n: usize) -> JobEvent {
        JobEvent::normal(
            "NodesFinished",
            format!("{n} more nodes finished; see status"),
        )
    }

    fn all_done(&self, total: usize) -> String {
        format!("all {total} nodes run {}", self.version)
    }
}

/// A working node's state, event and reason from the daemon's upgradeState.
fn active_row(
    name: &str,
    upgrade: Option<UpgradeState>,
    tag: Option<&ImageTagStatus>,
    image_ref: &str,
) -> TaskStatus {
    let message = tag.and_then(|t| t.message.as_deref().map(str::to_string));
    let (st, ev, reason) = match upgrade {
        None | Some(UpgradeState::Checking) => (state::CHECKING, event::CHECK, message),
        Some(UpgradeState::Pulling) => {
            let progress = tag
                .and_then(|t| t.progress)
                .filter(|p| *p > 0)
                .map(|p| format!(" ({p}%)"))
                .unwrap_or_default();
            let pulling = format!("pulling {image_ref}{progress}");
            (
                state::CHECKING,
                event::CHECK,
                Some(match message {
                    Some(m) => format!("{pulling}: {m}"),
                    None => pulling,
                }),
            )
        }
        Some(UpgradeState::WaitingConfirmation) => (
            state::WAITING_CONFIRMATION,
            event::CHECK,
            Some(format!(
                "checked and pulled; waiting for confirmation (annotate the job {CONFIRM_ANNOTATION}={name} or '*')"
            )),
        ),
        Some(UpgradeState::BackingUp) => (state::BACKING_UP, event::BACKUP, message),
        Some(UpgradeState::Upgrading) => (state::UPGRADING, event::UPGRADE, message),
        Some(UpgradeState::RollingBack | UpgradeState::RolledBack) => {
            (state::ROLLING_BACK, event::ROLLBACK, message)
        }
        Some(UpgradeState::Successful) => (state::UPGRADING, event::UPGRADE, message),
    };
    task(name, st, Some(ev), None, reason)
}

/// The event and action of a failed node, from the step its upgrade ended in.
fn failed_step(upgrade: Option<UpgradeState>, reason: &str) -> (&'static str, &'static str) {
    match upgrade {
        Some(UpgradeState::RolledBack) => (event::ROLLBACK, action::SUCCESS),
        Some(UpgradeState::RollingBack) => (event::ROLLBACK, action::FAILURE),
        Some(UpgradeState::Upgrading | UpgradeState::Successful) => {
            (event::UPGRADE, action::FAILURE)
        }
        Some(UpgradeState::BackingUp) => (event::BACKUP, action::FAILURE),
        Some(
            UpgradeState::Checking | UpgradeState::Pulling | UpgradeState::WaitingConfirmation,
        ) => (event::CHECK, action::FAILURE),
        None => {
            let ev = match failure_cause(reason) {
                FailureCause::Timeout => event::TIMEOUT,
                FailureCause::Check | FailureCause::Pull => event::CHECK,
            };
            (ev, action::FAILURE)
        }
    }
}
