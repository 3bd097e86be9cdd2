//! The order of an upgrade's host steps and what each outcome means, as
//! KubeEdge runs them: back up, upgrade, and roll back when the upgrade
//! fails. A rollback that works still fails the node (the upgrade did not
//! happen). Also the restart rule: what a daemon that finds an upgrade
//! unfinished in its status may do again. Pure.

use nodeimage_api::kruise::UpgradeState;

/// A run of the upgrade tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `keadm backup edge`.
    Backup,
    /// `keadm upgrade edge --toVersion V --image I --force`.
    Upgrade,
    /// `keadm rollback edge`.
    Rollback,
}

impl Step {
    /// The state reported while the step runs.
    pub fn state(self) -> UpgradeState {
        match self {
            Step::Backup => UpgradeState::BackingUp,
            Step::Upgrade => UpgradeState::Upgrading,
            Step::Rollback => UpgradeState::RollingBack,
        }
    }

    /// The tool's arguments, as KubeEdge's edge task runs it (`--force`
    /// skips keadm's confirmation prompt; `--image` is the repository that
    /// keadm pulls `:version` of).
    pub fn args(self, version: &str, image: &str) -> Vec<String> {
        let words: Vec<&str> = match self {
            Step::Backup => vec!["backup", "edge"],
            Step::Upgrade => vec![
                "upgrade",
                "edge",
                "--toVersion",
                version,
                "--image",
                image,
                "--force",
            ],
            Step::Rollback => vec!["rollback", "edge"],
        };
        words.into_iter().map(str::to_string).collect()
    }

    /// Lower-case name for messages.
    pub fn name(self) -> &'static str {
        match self {
            Step::Backup => "backup",
            Step::Upgrade => "upgrade",
            Step::Rollback => "rollback",
        }
    }
}

/// How an upgrade ended on the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The node runs the target version.
    pub succeeded: bool,
    /// The final `upgradeState`: Successful, RolledBack, or the failed step.
    pub state: UpgradeState,
    /// For status and events.
    pub message: Option<String>,
}

impl Verdict {
    /// A failure in `state`.
    pub fn failed(state: UpgradeState, message: impl Into<String>) -> Self {
        Verdict {
            succeeded: false,
            state,
            message: Some(message.into()),
        }
    }

    /// A success, with an optional note.
    pub fn succeeded(message: Option<String>) -> Self {
        Verdict {
            succeeded: true,
            state: UpgradeState::Successful,
            message,
        }
    }
}

/// What to do after the steps run so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Run this step.
    Run(Step),
    /// Stop here.
    Done(Verdict),
}

/// The next step given the steps run so far and their outcomes (an error
/// carries the tool's last output lines).
pub fn next(done: &[(Step, Result<(), String>)]) -> Next {
    use Step::*;
    match done {
        [] => Next::Run(Backup),
        [(Backup, Err(e))] => Next::Done(Verdict::failed(
            UpgradeState::BackingUp,
            format!("backup failed, the upgrade was not attempted: {e}"),
        )),
        [(Backup, Ok(()))] => Next::Run(Upgrade),
        [(Backup, Ok(())), (Upgrade, Ok(()))] => Next::Done(Verdict::succeeded(None)),
        [(Backup, Ok(())), (Upgrade, Err(_))] => Next::Run(Rollback),
        [(Backup, Ok(())), (Upgrade, Err(e)), (Rollback, Ok(()))] => Next::Done(Verdict::failed(
            UpgradeState::RolledBack,
            format!("upgrade failed, rolled back: {e}"),
        )),
        [(Backup, Ok(())), (Upgrade, Err(e)), (Rollback, Err(r))] => Next::Done(Verdict::failed(
            UpgradeState::RollingBack,
            format!("upgrade failed: {e}; rollback failed too: {r}"),
        )),
        other => Next::Done(Verdict::failed(
            other
                .last()
                .map(|(s, _)| s.state())
                .unwrap_or(UpgradeState::Checking),
            "internal error: unexpected sequence of upgrade steps",
        )),
    }
}

/// What a (re)started daemon may do with an upgrade whose status, for the
/// same entry version, is unfinished in `recorded`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resume {
    /// Nothing was changed on the host yet: start from the beginning.
    Fresh,
    /// The upgrade itself was interrupted: only reading the version may
    /// tell whether it completed; nothing is run again.
    CheckVersion,
    /// End with this verdict, running nothing.
    Done(Verdict),
}

/// The restart rule: checks and the pull are repeated freely; a host step
/// that may have started is never run again blindly. An interrupted backup
/// fails the node (nothing was upgraded); an interrupted upgrade succeeds
/// only if the node now reports the target version, else fails without an
/// automatic rollback (the state of the node is unknown); an interrupted
/// rollback fails.
pub fn resume(recorded: Option<UpgradeState>, log: &str) -> Resume {
    match recorded {
        None
        | Some(
            UpgradeState::Checking | UpgradeState::Pulling | UpgradeState::WaitingConfirmation,
        ) => Resume::Fresh,
        Some(UpgradeState::BackingUp) => Resume::Done(Verdict::failed(
            UpgradeState::BackingUp,
            format!(
                "interrupted while backing up (the daemon restarted); the upgrade was not attempted; run the job again (log on the node: {log})"
            ),
        )),
        Some(UpgradeState::Upgrading) => Resume::CheckVersion,
        Some(UpgradeState::RollingBack) => Resume::Done(Verdict::failed(
            UpgradeState::RollingBack,
            format!(
                "interrupted while rolling back a failed upgrade (the daemon restarted); the backup may be partly restored: check the node and run `keadm rollback edge` (log on the node: {log})"
            ),
        )),
        // Final states are not resumed (the status has a completion time),
        // but a copy without one must not run anything either.
        Some(UpgradeState::RolledBack) => Resume::Done(Verdict::failed(
            UpgradeState::RolledBack,
            "upgrade failed and was rolled back before the daemon restarted",
        )),
        Some(UpgradeState::Successful) => Resume::Done(Verdict::succeeded(None)),
    }
}

/// The verdict on an upgrade interrupted by a restart, from the version the
/// node reports now (None: unknown).
pub fn after_interrupted_upgrade(current: Option<&str>, target: &str, log: &str) -> Verdict {
    match current {
        Some(v) if v == target => Verdict::succeeded(Some(format!(
            "the upgrade to {target} completed before the daemon restarted"
        ))),
        other => Verdict::failed(
            UpgradeState::Upgrading,
            format!(
                "interrupted while upgrading (the daemon restarted); the node reports {}, not {target}; not rolled back automatically: check the node and run `keadm rollback edge` if needed (log on the node: {log})",
                other.unwrap_or("no version")
            ),
        ),
    }
}

/// The last `lines` non-empty lines of `text`, joined with ` | ` and cut to
/// its last `chars` characters: the part of a tool's output that goes into
/// a status reason.
pub fn tail(text: &str, lines: usize, chars: usize) -> String {
    let kept: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|l| !l.trim().is_empty())
        .collect();
    let joined = kept[kept.len().saturating_sub(lines)..].join(" | ");
    let count = joined.chars().count();
    if count <= chars {
        joined
    } else {
        let cut: String = joined
            .chars()
            .skip(count - chars.saturating_sub(1))
            .collect();
        format!("…{cut}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_sequences() {
        use Step::*;
        let ok = || Ok(());
        let err = |m: &str| Err(m.to_string());
        let cases: Vec<(Vec<(Step, Result<(), String>)>, Next)> = vec![
            (vec![], Next::Run(Backup)),
            (vec![(Backup, ok())], Next::Run(Upgrade)),
            (
                vec![(Backup, err("disk full"))],
                Next::Done(Verdict::failed(
                    UpgradeState::BackingUp,
                    "backup failed, the upgrade was not attempted: disk full",
                )),
            ),
            (
                vec![(Backup, ok()), (Upgrade, ok())],
                Next::Done(Verdict::succeeded(None)),
            ),
            (
                vec![(Backup, ok()), (Upgrade, err("boom"))],
                Next::Run(Rollback),
            ),
            (
                vec![(Backup, ok()), (Upgrade, err("boom")), (Rollback, ok())],
                Next::Done(Verdict::failed(
                    UpgradeState::RolledBack,
                    "upgrade failed, rolled back: boom",
                )),
            ),
            (
                vec![
                    (Backup, ok()),
                    (Upgrade, err("boom")),
                    (Rollback, err("bang")),
                ],
                Next::Done(Verdict::failed(
                    UpgradeState::RollingBack,
                    "upgrade failed: boom; rollback failed too: bang",
                )),
            ),
        ];
        for (done, want) in cases {
            assert_eq!(next(&done), want, "{done:?}");
        }
        assert!(matches!(
            next(&[(Upgrade, ok())]),
            Next::Done(Verdict {
                succeeded: false,
                ..
            })
        ));
        assert_eq!(
            Upgrade.args("v1.17.0", "kubeedge/installation-package"),
            vec![
                "upgrade",
                "edge",
                "--toVersion",
                "v1.17.0",
                "--image",
                "kubeedge/installation-package",
                "--force"
            ]
        );
        assert_eq!(Backup.args("v", "i"), vec!["backup", "edge"]);
        assert_eq!(Rollback.args("v", "i"), vec!["rollback", "edge"]);
    }

    #[test]
    fn restarts_never_rerun_a_host_step() {
        use UpgradeState::*;
        assert_eq!(resume(None, "L"), Resume::Fresh);
        assert_eq!(resume(Some(Checking), "L"), Resume::Fresh);
        assert_eq!(resume(Some(Pulling), "L"), Resume::Fresh);
        assert_eq!(resume(Some(Upgrading), "L"), Resume::CheckVersion);
        for (state, words) in [
            (BackingUp, "interrupted while backing up"),
            (RollingBack, "interrupted while rolling back"),
            (RolledBack, "rolled back"),
        ] {
            match resume(Some(state), "/var/log/x") {
                Resume::Done(v) => {
                    assert!(!v.succeeded, "{state}");
                    assert_eq!(v.state, state);
                    assert!(v.message.unwrap_or_default().contains(words), "{state}");
                }
                other => panic!("{state}: {other:?}"),
            }
        }
        assert_eq!(
            resume(Some(Successful), "L"),
            Resume::Done(Verdict::succeeded(None))
        );

        let v = after_interrupted_upgrade(Some("v1.17.0"), "v1.17.0", "L");
        assert!(v.succeeded);
        let v = after_interrupted_upgrade(Some("v1.16.0"), "v1.17.0", "L");
        assert!(!v.succeeded && v.state == Upgrading);
        assert!(v.message.unwrap_or_default().contains("reports v1.16.0"));
        let v = after_interrupted_upgrade(None, "v1.17.0", "L");
        assert!(v.message.unwrap_or_default().contains("reports no version"));
    }

    #[test]
    fn tails() {
        let out = "starting\n\nstep 1\nstep 2\nerror: simulated failure\n";
        assert_eq!(tail(out, 2, 100), "step 2 | error: simulated failure");
        assert_eq!(
            tail(out, 10, 100),
            "starting | step 1 | step 2 | error: simulated failure"
        );
        assert_eq!(tail(out, 1, 9), "… failure");
        assert_eq!(tail("", 3, 10), "");
    }
}
