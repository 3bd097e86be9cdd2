//! What the node should be doing: the tag entries of the NodeImage spec turned
//! into pull tasks, and the plan of which pulls to start or cancel given what
//! is running and what status already reports. Pure: no I/O here.

use k8s_openapi::jiff::Timestamp;
use nodeimage_api::kruise::nodeimage::requester_key;
use nodeimage_api::kruise::{
    ImagePullPhase, ImageSpec, ImageTagPullPolicy, ImageTagSpec, ImageTagStatus, NodeImage,
    Purpose, SandboxConfig, TagUpgrade, UpgradeState,
};
use nodeimage_api::kubeedge::is_version;
use nodeimage_api::reference::ImageRef;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Limit of one attempt of an entry without `timeoutSeconds` (the API's default).
pub const DEFAULT_TIMEOUT: Duration =
    Duration::from_secs(nodeimage_api::defaults::PULL_TIMEOUT_SECONDS.unsigned_abs() as u64);
/// Retries of an entry without `backoffLimit` (the API's default).
pub const DEFAULT_BACKOFF_LIMIT: u32 = nodeimage_api::defaults::PULL_BACKOFF_LIMIT.unsigned_abs();

/// Identifies a tag entry: the spec's image key, tag field and purpose (a
/// pull and an upgrade of one tag are two entries, two tasks).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TagKey {
    /// Key of `spec.images`.
    pub image: String,
    /// The `tag` field (a tag or a digest).
    pub tag: String,
    /// The `purpose` field.
    pub purpose: Purpose,
}

impl std::fmt::Display for TagKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.tag.contains(':') {
            write!(f, "{}@{}", self.image, self.tag)
        } else {
            write!(f, "{}:{}", self.image, self.tag)
        }
    }
}

/// Whether a present image is pulled again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullMode {
    /// Succeed at once when the image is present.
    IfNotPresent,
    /// Pull even when present.
    Always,
}

/// A Secret to read credentials from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct SecretRef {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

impl std::fmt::Display for SecretRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Everything needed to pull one tag, or why the entry cannot be pulled.
#[derive(Clone, Debug, PartialEq)]
pub struct PullTask {
    /// Which entry.
    pub key: TagKey,
    /// The entry's version (0 when unset).
    pub version: i64,
    /// What to pull; an error message when the entry is unusable.
    pub target: Result<Target, String>,
    /// When the entry was written, if known.
    pub created_at: Option<Timestamp>,
    /// For an upgrade entry resumed after a restart: the step status
    /// recorded for this version before (see [`plan`]).
    pub resume: Option<UpgradeState>,
    /// Why a finished entry runs again (its image left the node), shown
    /// on the tag while it waits and pulls.
    pub note: Option<String>,
}

/// A valid pull.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    /// The parsed reference.
    pub image: ImageRef,
    /// IfNotPresent or Always.
    pub mode: PullMode,
    /// Limit of one attempt.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub backoff_limit: u32,
    /// Limit of all attempts, counted from `created_at`.
    pub active_deadline: Option<Duration>,
    /// Secrets to read credentials from, in order.
    pub secrets: Vec<SecretRef>,
    /// The jobs that asked for this tag (`Kind/namespace/name`); empty for a
    /// hand-written entry. Decides which secrets it may use.
    pub requesters: Vec<String>,
    /// Labels and annotations for the CRI pull.
    pub sandbox: SandboxConfig,
    /// Node checks before pulling.
    pub check_items: Vec<String>,
    /// The node-agent upgrade to run once pulled (nodeimage extension).
    pub upgrade: Option<TagUpgrade>,
}

/// Checks an entry's `upgrade`: a version, and a job name usable as a
/// directory name.
pub fn validate_upgrade(u: &TagUpgrade) -> Result<(), String> {
    if !is_version(&u.version) {
        return Err(format!(
            "upgrade.version {:?} must be of the form vX.Y.Z",
            u.version
        ));
    }
    let job_ok = !u.job.is_empty()
        && u.job.len() <= 253
        && u.job != "."
        && u.job != ".."
        && u.job
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !job_ok {
        return Err(format!(
            "upgrade.job {:?} must be a lower-case object name",
            u.job
        ));
    }
    Ok(())
}

/// Turns a NodeImage spec into pull tasks, one per tag entry, in spec order.
pub fn tasks(ni: &NodeImage) -> Vec<PullTask> {
    let mut out = Vec::new();
    let Some(images) = &ni.spec.images else {
        return out;
    };
    for (name, image) in images {
        let secrets = secrets_of(image);
        for t in &image.tags {
            let key = TagKey {
                image: name.to_string(),
                tag: t.tag.to_string(),
                purpose: t.purpose,
            };
            let target = target_of(name, image, t, &secrets, &key);
            out.push(PullTask {
                key,
                version: t.version.unwrap_or(0),
                target,
                created_at: t.created_at.as_ref().map(|c| c.0),
                resume: None,
                note: None,
            });
        }
    }
    out
}

/// The image's pull secrets; an error when one lacks its namespace or name.
fn secrets_of(image: &ImageSpec) -> Result<Vec<SecretRef>, String> {
    image
        .pull_secrets
        .iter()
        .flatten()
        .map(|s| match (&s.namespace, &s.name) {
            (Some(ns), Some(n)) if !ns.is_empty() && !n.is_empty() => Ok(SecretRef {
                namespace: ns.clone(),
                name: n.clone(),
            }),
            _ => Err("a pullSecrets entry lacks its namespace or name".to_string()),
        })
        .collect()
}

/// What to pull for one tag entry, or why it cannot be pulled (the first
/// field found wrong, in the order the fields are read here).
fn target_of(
    name: &str,
    image: &ImageSpec,
    t: &ImageTagSpec,
    secrets: &Result<Vec<SecretRef>, String>,
    key: &TagKey,
) -> Result<Target, String> {
    let image_ref =
        ImageRef::from_name_and_tag(name, &t.tag).map_err(|e| format!("cannot pull {key}: {e}"))?;
    let mode = pull_mode(t.image_pull_policy.as_deref())?;
    let limits = Limits::of(&t.pull_policy.clone().unwrap_or_default())?;
    // Only an upgrade entry runs an upgrade (the CRD ties the two fields).
    let upgrade = match (t.purpose, &t.upgrade) {
        (Purpose::Upgrade, Some(u)) => {
            validate_upgrade(u).map_err(|e| format!("cannot upgrade with {key}: {e}"))?;
            Some(u.as_ref().clone())
        }
        (Purpose::Upgrade, None) => {
            return Err(format!(
                "cannot upgrade with {key}: purpose Upgrade without upgrade"
            ));
        }
        (Purpose::Pull, _) => None,
    };
    Ok(Target {
        image: image_ref,
        mode,
        timeout: limits.timeout,
        backoff_limit: limits.backoff_limit,
        active_deadline: limits.active_deadline,
        secrets: secrets.clone()?,
        requesters: requesters(t),
        sandbox: image.sandbox_config.as_deref().cloned().unwrap_or_default(),
        check_items: t.check_items.as_deref().cloned().unwrap_or_default(),
        upgrade,
    })
}

/// The entry's `imagePullPolicy` (IfNotPresent when unset).
fn pull_mode(policy: Option<&str>) -> Result<PullMode, String> {
    match policy {
        None | Some("") | Some("IfNotPresent") => Ok(PullMode::IfNotPresent),
        Some("Always") => Ok(PullMode::Always),
        Some(other) => Err(format!(
            "unknown imagePullPolicy {other:?}: use IfNotPresent or Always"
        )),
    }
}

/// The time and retry limits of an entry's `pullPolicy`.
struct Limits {
    timeout: Duration,
    backoff_limit: u32,
    active_deadline: Option<Duration>,
}

impl Limits {
    /// The limits, the API's defaults where unset; an error for a value
    /// out of range.
    fn of(policy: &ImageTagPullPolicy) -> Result<Self, String> {
        let timeout = match policy.timeout_seconds {
            None => DEFAULT_TIMEOUT,
            Some(s) if s > 0 => Duration::from_secs(s as u64),
            Some(s) => return Err(format!("pullPolicy.timeoutSeconds {s} must be positive")),
        };
        let backoff_limit = match policy.backoff_limit {
            None => DEFAULT_BACKOFF_LIMIT,
            Some(b) if b >= 0 => b as u32,
            Some(b) => return Err(format!("pullPolicy.backoffLimit {b} must not be negative")),
        };
        let active_deadline = match policy.active_deadline_seconds {
            None => None,
            Some(s) if s > 0 => Some(Duration::from_secs(s as u64)),
            Some(s) => {
                return Err(format!(
                    "pullPolicy.activeDeadlineSeconds {s} must be positive"
                ));
            }
        };
        Ok(Limits {
            timeout,
            backoff_limit,
            active_deadline,
        })
    }
}

/// The jobs that asked for the entry (`Kind/namespace/name`).
fn requesters(t: &ImageTagSpec) -> Vec<String> {
    t.owner_references
        .iter()
        .flatten()
        .map(|o| {
            requester_key(
                o.kind.as_deref().unwrap_or_default(),
                o.namespace.as_deref().unwrap_or_default(),
                o.name.as_deref().unwrap_or_default(),
            )
        })
        .collect()
}

/// What status already says about an entry: the entry as the node wrote it,
/// read through the NodeImage contract.
#[derive(Clone, Debug, PartialEq)]
pub struct Reported {
    entry: ImageTagStatus,
}

impl Reported {
    /// Whether this entry answers `task` (the contract: same tag and
    /// purpose, same version).
    pub fn answers(&self, task: &PullTask) -> bool {
        self.entry
            .answers_at(&task.key.tag, task.key.purpose, task.version)
    }

    /// Its phase.
    pub fn phase(&self) -> ImagePullPhase {
        self.entry.phase
    }

    /// The image the node reported for it (a repo digest), once pulled.
    pub fn image_id(&self) -> Option<&str> {
        self.entry.image_id.as_deref()
    }

    /// Whether it carries a completion time.
    pub fn completed(&self) -> bool {
        self.entry.completion_time.is_some()
    }

    /// The upgrade step it reports, for an upgrade entry.
    pub fn upgrade_state(&self) -> Option<UpgradeState> {
        self.entry.upgrade_state()
    }
}

/// Reads the per-tag status of a NodeImage.
pub fn reported(ni: &NodeImage) -> BTreeMap<TagKey, Reported> {
    let mut out = BTreeMap::new();
    for (image, st) in ni
        .status
        .as_ref()
        .and_then(|s| s.image_statuses.as_ref())
        .into_iter()
        .flatten()
    {
        for t in &st.tags {
            out.insert(
                TagKey {
                    image: image.to_string(),
                    tag: t.tag.to_string(),
                    purpose: t.purpose,
                },
                Reported { entry: t.clone() },
            );
        }
    }
    out
}

/// Pulls to start and cancel.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Tasks to start, oldest entry first (so waiting pulls run in order).
    pub start: Vec<PullTask>,
    /// Running pulls to stop: removed from spec, or superseded by a new version.
    pub cancel: Vec<TagKey>,
}

/// Decides which pulls to start or cancel. A task already finished for its
/// version (status has a completion time) is not pulled again, which makes
/// restarts safe; one reported but unfinished is resumed, carrying the
/// upgrade step its status recorded (an upgrade decides from it what is
/// safe to do again).
pub fn plan(
    tasks: &[PullTask],
    reported: &BTreeMap<TagKey, Reported>,
    running: &BTreeMap<TagKey, i64>,
) -> Plan {
    let mut p = Plan::default();
    let wanted: BTreeSet<&TagKey> = tasks.iter().map(|t| &t.key).collect();
    for key in running.keys() {
        if !wanted.contains(key) {
            p.cancel.push(key.clone());
        }
    }
    for t in tasks {
        match running.get(&t.key) {
            Some(v) if *v == t.version => continue,
            Some(_) => p.cancel.push(t.key.clone()),
            None => {}
        }
        let same = reported.get(&t.key).filter(|r| r.answers(t));
        let done = same.is_some_and(|r| r.phase().is_finished() && r.completed());
        if !done {
            let mut task = t.clone();
            task.resume = same.and_then(|r| r.upgrade_state());
            p.start.push(task);
        }
    }
    p.start.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then_with(|| a.key.cmp(&b.key))
    });
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use nodeimage_api::interned::SharedStr;
    use nodeimage_api::kruise::{
        ImageSpec, ImageTagPullPolicy, ImageTagSpec, NodeImageSpec, ReferenceObject,
        TagUpgradeStatus,
    };

    fn ni(entries: &[(&str, ImageTagSpec)]) -> NodeImage {
        let mut images: BTreeMap<SharedStr, ImageSpec> = BTreeMap::new();
        for (name, tag) in entries {
            images
                .entry(name.to_string().into())
                .or_default()
                .tags
                .push(tag.clone());
        }
        NodeImage::new(
            "node-1",
            NodeImageSpec {
                images: Some(images),
                removals: None,
            },
        )
    }

    fn tag(t: &str) -> ImageTagSpec {
        ImageTagSpec {
            tag: t.into(),
            ..Default::default()
        }
    }

    #[test]
    fn tasks_apply_defaults_and_parse_references() {
        let t = tasks(&ni(&[("127.0.0.1:5000/test", tag("v1"))]));
        let target = t[0].target.as_ref().expect("valid");
        assert_eq!(target.image.pull_ref(), "127.0.0.1:5000/test:v1");
        assert_eq!(target.mode, PullMode::IfNotPresent);
        assert_eq!(target.timeout, DEFAULT_TIMEOUT);
        assert_eq!(target.backoff_limit, 3);
        assert_eq!(t[0].version, 0);

        let digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let t = tasks(&ni(&[("ubuntu", tag(digest))]));
        assert_eq!(
            t[0].target.as_ref().expect("valid").image.pull_ref(),
            format!("docker.io/library/ubuntu@{digest}")
        );
    }

    #[test]
    fn bad_entries_become_failed_tasks_with_a_reason() {
        let mut policy = tag("v1");
        policy.image_pull_policy = Some("Sometimes".into());
        let mut timeout = tag("v1");
        timeout.pull_policy = Some(
            ImageTagPullPolicy {
                timeout_seconds: Some(0),
                ..Default::default()
            }
            .into(),
        );
        let cases = [
            (ni(&[("Bad Name!", tag("v1"))]), "cannot pull Bad Name!:v1"),
            (ni(&[("ok", tag(""))]), "tag is empty"),
            (ni(&[("ok", tag("bad tag"))]), "tag \"bad tag\""),
            (
                ni(&[("ok", policy)]),
                "unknown imagePullPolicy \"Sometimes\"",
            ),
            (ni(&[("ok", timeout)]), "timeoutSeconds 0 must be positive"),
        ];
        for (obj, want) in cases {
            let t = tasks(&obj);
            let err = t[0].target.as_ref().expect_err("invalid");
            assert!(err.contains(want), "{err} lacks {want}");
        }
        let mut spec = ni(&[("ok", tag("v1"))]);
        if let Some(images) = spec.spec.images.as_mut()
            && let Some(img) = images.get_mut("ok")
        {
            img.pull_secrets = Some(vec![ReferenceObject {
                name: Some("s".into()),
                ..Default::default()
            }]);
        }
        let err = tasks(&spec)[0].target.clone().expect_err("invalid");
        assert!(err.contains("lacks its namespace"), "{err}");
    }

    fn key(i: &str, t: &str) -> TagKey {
        TagKey {
            image: i.into(),
            tag: t.into(),
            purpose: nodeimage_api::kruise::Purpose::Pull,
        }
    }

    fn task(i: &str, t: &str, version: i64, created_s: i64) -> PullTask {
        PullTask {
            key: key(i, t),
            version,
            target: Err("unused".into()),
            created_at: Timestamp::from_second(created_s).ok(),
            resume: None,
            note: None,
        }
    }

    fn rep(version: i64, phase: ImagePullPhase, completed: bool) -> Reported {
        Reported {
            // The tag of every test key (`key(_, "1")`).
            entry: ImageTagStatus {
                tag: "1".into(),
                phase,
                version: Some(version),
                completion_time: completed.then_some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            },
        }
    }

    #[test]
    fn plan_table() {
        use ImagePullPhase::*;
        struct Case {
            name: &'static str,
            tasks: Vec<PullTask>,
            reported: Vec<(TagKey, Reported)>,
            running: Vec<(TagKey, i64)>,
            start: Vec<TagKey>,
            cancel: Vec<TagKey>,
        }
        let cases = vec![
            Case {
                name: "new entry starts",
                tasks: vec![task("a", "1", 0, 10)],
                reported: vec![],
                running: vec![],
                start: vec![key("a", "1")],
                cancel: vec![],
            },
            Case {
                name: "finished for this version is not pulled again (restart safety)",
                tasks: vec![task("a", "1", 2, 10)],
                reported: vec![(key("a", "1"), rep(2, Succeeded, true))],
                running: vec![],
                start: vec![],
                cancel: vec![],
            },
            Case {
                name: "failed for this version stays failed",
                tasks: vec![task("a", "1", 0, 10)],
                reported: vec![(key("a", "1"), rep(0, Failed, true))],
                running: vec![],
                start: vec![],
                cancel: vec![],
            },
            Case {
                name: "in flight at restart is resumed",
                tasks: vec![task("a", "1", 0, 10)],
                reported: vec![(key("a", "1"), rep(0, Pulling, false))],
                running: vec![],
                start: vec![key("a", "1")],
                cancel: vec![],
            },
            Case {
                name: "version bump re-pulls a finished tag",
                tasks: vec![task("a", "1", 3, 10)],
                reported: vec![(key("a", "1"), rep(2, Succeeded, true))],
                running: vec![],
                start: vec![key("a", "1")],
                cancel: vec![],
            },
            Case {
                name: "version bump cancels the running pull and restarts",
                tasks: vec![task("a", "1", 3, 10)],
                reported: vec![],
                running: vec![(key("a", "1"), 2)],
                start: vec![key("a", "1")],
                cancel: vec![key("a", "1")],
            },
            Case {
                name: "running same version is left alone",
                tasks: vec![task("a", "1", 2, 10)],
                reported: vec![],
                running: vec![(key("a", "1"), 2)],
                start: vec![],
                cancel: vec![],
            },
            Case {
                name: "removed from spec is cancelled",
                tasks: vec![],
                reported: vec![],
                running: vec![(key("a", "1"), 0)],
                start: vec![],
                cancel: vec![key("a", "1")],
            },
            Case {
                name: "starts oldest first",
                tasks: vec![
                    task("b", "1", 0, 30),
                    task("a", "1", 0, 20),
                    task("c", "1", 0, 10),
                ],
                reported: vec![],
                running: vec![],
                start: vec![key("c", "1"), key("a", "1"), key("b", "1")],
                cancel: vec![],
            },
        ];
        for c in cases {
            let p = plan(
                &c.tasks,
                &c.reported.into_iter().collect(),
                &c.running.into_iter().collect(),
            );
            let started: Vec<TagKey> = p.start.iter().map(|t| t.key.clone()).collect();
            assert_eq!(started, c.start, "{}: start", c.name);
            assert_eq!(p.cancel, c.cancel, "{}: cancel", c.name);
        }
    }

    #[test]
    fn upgrade_entries_are_validated_and_resumed_with_their_step() {
        let up = |version: &str, job: &str| {
            let mut t = tag("v1.17.0");
            t.purpose = Purpose::Upgrade;
            t.upgrade = Some(Box::new(TagUpgrade {
                await_confirmation: false,
                version: version.into(),
                job: job.into(),
                image_digests: None,
            }));
            t
        };
        let t = tasks(&ni(&[(
            "kubeedge/installation-package",
            up("v1.17.0", "up-1"),
        )]));
        let target = t[0].target.as_ref().expect("valid");
        assert_eq!(
            target.upgrade.as_ref().map(|u| u.job.as_str()),
            Some("up-1")
        );
        assert_eq!(t[0].key.purpose, Purpose::Upgrade);
        // Only an upgrade entry upgrades: `upgrade` on a pull entry (written
        // by an older controller) is a pull; `purpose: Upgrade` without an
        // upgrade fails with a reason.
        let mut pull = up("v1.17.0", "up-1");
        pull.purpose = Purpose::Pull;
        let t = tasks(&ni(&[("kubeedge/installation-package", pull)]));
        assert_eq!(t[0].target.as_ref().map(|t| t.upgrade.is_none()), Ok(true));
        let mut bare = tag("v1.17.0");
        bare.purpose = Purpose::Upgrade;
        let t = tasks(&ni(&[("kubeedge/installation-package", bare)]));
        let err = t[0].target.clone().expect_err("invalid");
        assert!(err.contains("purpose Upgrade without upgrade"), "{err}");
        for (version, job, want) in [
            ("1.17", "up", "upgrade.version"),
            ("v1.17.0", "../etc", "upgrade.job"),
            ("v1.17.0", "..", "upgrade.job"),
            ("v1.17.0", "Up", "upgrade.job"),
            ("v1.17.0", "", "upgrade.job"),
        ] {
            let t = tasks(&ni(&[("kubeedge/installation-package", up(version, job))]));
            let err = t[0].target.clone().expect_err("invalid");
            assert!(err.contains(want), "{err} lacks {want}");
        }

        // A restarted daemon resumes an unfinished upgrade with the step
        // status recorded for the same version, and none for another version.
        let mut recorded = rep(0, ImagePullPhase::Pulling, false);
        recorded.entry.upgrade = Some(Box::new(TagUpgradeStatus {
            state: Some(UpgradeState::Upgrading),
            ..Default::default()
        }));
        let p = plan(
            &[task("a", "1", 0, 10)],
            &[(key("a", "1"), recorded.clone())].into_iter().collect(),
            &BTreeMap::new(),
        );
        assert_eq!(p.start[0].resume, Some(UpgradeState::Upgrading));
        let p = plan(
            &[task("a", "1", 1, 10)],
            &[(key("a", "1"), recorded)].into_iter().collect(),
            &BTreeMap::new(),
        );
        assert_eq!(p.start[0].resume, None);
    }

    #[test]
    fn a_pull_and_an_upgrade_of_one_tag_are_two_tasks_each_read_by_its_own_status() {
        let mut upgrade = tag("v1.17.0");
        upgrade.purpose = Purpose::Upgrade;
        upgrade.upgrade = Some(Box::new(TagUpgrade {
            await_confirmation: false,
            version: "v1.17.0".into(),
            job: "up-1".into(),
            image_digests: None,
        }));
        let mut pull = tag("v1.17.0");
        pull.version = Some(2);
        let spec = ni(&[("app", pull), ("app", upgrade)]);
        let t = tasks(&spec);
        let keys: Vec<(Purpose, i64)> = t.iter().map(|t| (t.key.purpose, t.version)).collect();
        assert_eq!(keys, vec![(Purpose::Pull, 2), (Purpose::Upgrade, 0)]);
        let pull_key = t[0].key.clone();
        let upgrade_key = t[1].key.clone();
        assert_ne!(pull_key, upgrade_key);
        // (case, (pull status version, phase), (upgrade status version, phase),
        // which purposes start)
        type Rep = Option<(i64, ImagePullPhase)>;
        let cases: Vec<(&str, Rep, Rep, Vec<Purpose>)> = vec![
            (
                "nothing reported",
                None,
                None,
                vec![Purpose::Pull, Purpose::Upgrade],
            ),
            (
                "the pull finished: only the upgrade runs",
                Some((2, ImagePullPhase::Succeeded)),
                None,
                vec![Purpose::Upgrade],
            ),
            (
                "the upgrade failed: the pull still runs",
                None,
                Some((0, ImagePullPhase::Failed)),
                vec![Purpose::Pull],
            ),
            (
                "each finished at its own version",
                Some((2, ImagePullPhase::Succeeded)),
                Some((0, ImagePullPhase::Failed)),
                vec![],
            ),
            (
                "the pull at an older version",
                Some((1, ImagePullPhase::Succeeded)),
                Some((0, ImagePullPhase::Succeeded)),
                vec![Purpose::Pull],
            ),
        ];
        for (case, pull_rep, upgrade_rep, want) in cases {
            let mut reported = BTreeMap::new();
            for (key, r) in [(&pull_key, pull_rep), (&upgrade_key, upgrade_rep)] {
                if let Some((v, phase)) = r {
                    let mut rep = rep(v, phase, true);
                    rep.entry.purpose = key.purpose;
                    rep.entry.tag = "v1.17.0".into();
                    reported.insert(key.clone(), rep);
                }
            }
            let p = plan(&t, &reported, &BTreeMap::new());
            let started: Vec<Purpose> = p.start.iter().map(|t| t.key.purpose).collect();
            assert_eq!(started, want, "{case}");
        }
    }
}
