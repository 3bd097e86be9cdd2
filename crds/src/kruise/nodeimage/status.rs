//! What a node reports: the NodeImage `status`, one entry per spec tag.

use super::purpose::Purpose;
use crate::interned::SharedStr;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What the node reports about its images.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageStatus {
    /// Number of tags in spec.
    #[serde(default)]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub desired: i32,
    /// Tags pulled successfully.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub succeeded: Option<i32>,
    /// Tags whose pull failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub failed: Option<i32>,
    /// Tags being pulled now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub pulling: Option<i32>,
    /// Tags waiting for a pull slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub waiting: Option<i32>,
    /// Per image name, the status of each tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_statuses: Option<BTreeMap<SharedStr, ImageStatus>>,
    /// Whether the daemon's first sync of images already on the node worked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sync_status: Option<SyncStatus>,
    /// nodeimage extension (not in OpenKruise): the node's answer to each
    /// entry of `spec.removals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = crate::limits::REMOVALS_PER_NODE_MAX),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["job"])
    )]
    pub removals: Option<Vec<crate::nodeimage_dev::RemovalStatus>>,
}

/// Status of the tags of one image.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    /// One entry per tag in spec.
    pub tags: Vec<ImageTagStatus>,
}

/// Phase of one tag's pull.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPhase {
    /// Queued behind other pulls.
    #[default]
    Waiting,
    /// Being pulled.
    Pulling,
    /// Pulled; the image is on the node.
    Succeeded,
    /// Gave up; `message` says why.
    Failed,
}

/// Status of one tag on the node. Its JSON (and CRD schema) is the flat
/// [`TagStatusFields`]; the upgrade fields, which pull entries never carry,
/// are boxed here so that the ~100,000 entries a controller caches do not
/// reserve their space.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "TagStatusFields", into = "TagStatusFields")]
pub struct ImageTagStatus {
    /// The tag (or digest) this entry reports on.
    pub tag: SharedStr,
    /// The purpose of the spec entry this reports on (`Pull` unless written).
    pub purpose: Purpose,
    /// Waiting, Pulling, Succeeded or Failed.
    pub phase: ImagePullPhase,
    /// Percentage of bytes pulled, 0–100.
    pub progress: Option<i32>,
    /// When the pull started.
    pub start_time: Option<Time>,
    /// When the pull finished.
    pub completion_time: Option<Time>,
    /// The spec version this entry answers.
    pub version: Option<i64>,
    /// Repository digest of what was pulled (`name@sha256:…`).
    pub image_id: Option<SharedStr>,
    /// Details, such as the registry's reason for a failure.
    pub message: Option<SharedStr>,
    /// nodeimage extension, for an entry with `upgrade` (see [`TagUpgradeStatus`]).
    pub upgrade: Option<Box<TagUpgradeStatus>>,
}

/// What an upgrade entry's status adds (nodeimage extension; flat in JSON).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TagUpgradeStatus {
    /// `upgradeState`.
    pub state: Option<UpgradeState>,
    /// `upgradeLog`.
    pub log: Option<String>,
    /// `fromVersion`.
    pub from_version: Option<SharedStr>,
    /// `toVersion`.
    pub to_version: Option<SharedStr>,
}

impl TagUpgradeStatus {
    /// Boxed, or `None` when no field is set (the JSON is the same).
    pub fn boxed(self) -> Option<Box<Self>> {
        (self != Self::default()).then(|| Box::new(self))
    }
}

impl ImageTagStatus {
    /// `upgradeState`.
    pub fn upgrade_state(&self) -> Option<UpgradeState> {
        self.upgrade.as_ref().and_then(|u| u.state)
    }

    /// `fromVersion`.
    pub fn from_version(&self) -> Option<&str> {
        self.upgrade
            .as_ref()
            .and_then(|u| u.from_version.as_deref())
    }

    /// `toVersion`.
    pub fn to_version(&self) -> Option<&str> {
        self.upgrade.as_ref().and_then(|u| u.to_version.as_deref())
    }
}

/// The JSON form and CRD schema of [`ImageTagStatus`], flat as upstream's.
#[derive(Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    rename = "ImageTagStatus",
    description = "Status of one tag on the node."
)]
pub struct TagStatusFields {
    /// The tag (or digest) this entry reports on.
    pub tag: SharedStr,
    /// nodeimage extension: the `purpose` of the spec entry this reports on;
    /// absent for `Pull` (so a pull's status reads as OpenKruise's).
    #[serde(default, skip_serializing_if = "Purpose::is_pull")]
    pub purpose: Purpose,
    /// Waiting, Pulling, Succeeded or Failed.
    pub phase: ImagePullPhase,
    /// Percentage of bytes pulled, 0–100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub progress: Option<i32>,
    /// When the pull started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the pull finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The spec version this entry answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::VERSION_MAX))]
    pub version: Option<i64>,
    /// Repository digest of what was pulled (`name@sha256:…`).
    #[serde(rename = "imageID", default, skip_serializing_if = "Option::is_none")]
    pub image_id: Option<SharedStr>,
    /// Details, such as the registry's reason for a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<SharedStr>,
    /// nodeimage extension, for an entry with `upgrade`: the step the upgrade
    /// is in while the phase is Pulling; once finished, Successful, RolledBack
    /// (the upgrade failed and the backup was restored), or the step it failed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_state: Option<UpgradeState>,
    /// nodeimage extension: path on the node of the upgrade's log (the tool's output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_log: Option<String>,
    /// nodeimage extension: the node-agent version before the upgrade, when the daemon knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_version: Option<SharedStr>,
    /// nodeimage extension: the node-agent version after a successful upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_version: Option<SharedStr>,
}

impl From<TagStatusFields> for ImageTagStatus {
    fn from(f: TagStatusFields) -> Self {
        Self {
            tag: f.tag,
            purpose: f.purpose,
            phase: f.phase,
            progress: f.progress,
            start_time: f.start_time,
            completion_time: f.completion_time,
            version: f.version,
            image_id: f.image_id,
            message: f.message,
            upgrade: TagUpgradeStatus {
                state: f.upgrade_state,
                log: f.upgrade_log,
                from_version: f.from_version,
                to_version: f.to_version,
            }
            .boxed(),
        }
    }
}

impl From<ImageTagStatus> for TagStatusFields {
    fn from(s: ImageTagStatus) -> Self {
        let u = s.upgrade.map(|u| *u).unwrap_or_default();
        Self {
            tag: s.tag,
            purpose: s.purpose,
            phase: s.phase,
            progress: s.progress,
            start_time: s.start_time,
            completion_time: s.completion_time,
            version: s.version,
            image_id: s.image_id,
            message: s.message,
            upgrade_state: u.state,
            upgrade_log: u.log,
            from_version: u.from_version,
            to_version: u.to_version,
        }
    }
}

impl JsonSchema for ImageTagStatus {
    fn inline_schema() -> bool {
        TagStatusFields::inline_schema()
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        TagStatusFields::schema_name()
    }
    fn schema_id() -> std::borrow::Cow<'static, str> {
        TagStatusFields::schema_id()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        TagStatusFields::json_schema(generator)
    }
}

/// Where a node-agent upgrade stands on the node (nodeimage extension).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum UpgradeState {
    /// Reading the node's version and running the checks.
    Checking,
    /// Pulling the image that ships the tool.
    Pulling,
    /// Pulled and checked; waiting for the job's confirmation
    /// (`requireConfirmation`) before the backup.
    WaitingConfirmation,
    /// Taking the tool out of the image and backing up (`keadm backup edge`).
    BackingUp,
    /// Upgrading (`keadm upgrade edge`).
    Upgrading,
    /// The upgrade failed; restoring the backup (`keadm rollback edge`).
    RollingBack,
    /// Finished: the upgrade failed and the backup was restored.
    RolledBack,
    /// Finished: the node runs the target version (upgraded, or already there).
    Successful,
}

impl UpgradeState {
    /// The name as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            UpgradeState::Checking => "Checking",
            UpgradeState::Pulling => "Pulling",
            UpgradeState::WaitingConfirmation => "WaitingConfirmation",
            UpgradeState::BackingUp => "BackingUp",
            UpgradeState::Upgrading => "Upgrading",
            UpgradeState::RollingBack => "RollingBack",
            UpgradeState::RolledBack => "RolledBack",
            UpgradeState::Successful => "Successful",
        }
    }
}

impl std::fmt::Display for UpgradeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Result of the daemon's first sync.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// When the sync ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_at: Option<Time>,
    /// Outcome of the sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Details of the outcome.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
