//! NodeImage: the per-node list of images to hold, and what the node reports.
//!
//! This is the one contract between the cluster and a node: the controller
//! and users write tag entries into `spec`, the node daemon writes `status`.

use super::common::SandboxConfig;
use crate::shared::{Owners, SharedPolicy, SharedStr};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Label that protects a NodeImage without a Node from the node mirror.
pub const FAKE_NODEIMAGE_LABEL: &str = "apps.kruise.io/fake-nodeimage";

/// Annotation on the controller's copy of a job's pull secret listing the
/// jobs that supplied it (`Kind/namespace/name`, comma-separated): the daemon
/// lends a copy only to tags requested by one of them.
pub const SECRET_REFERENCES_ANNOTATION: &str = "nodeimage.dev/references";

/// How a job is named in [`SECRET_REFERENCES_ANNOTATION`] and matched to a
/// tag's owner reference (`namespace` empty for cluster-scoped jobs).
pub fn requester_key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// The images a node should hold.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "NodeImage",
    status = "NodeImageStatus",
    shortname = "ni",
    category = "prepull",
    doc = "NodeImage lists the images one node should hold and reports their pull status. One exists per Node, with the Node's name and labels.",
    printcolumn = r#"{"name":"DESIRED","type":"integer","jsonPath":".status.desired","description":"Number of image tags the node should hold"}"#,
    printcolumn = r#"{"name":"PULLING","type":"integer","jsonPath":".status.pulling","description":"Tags being pulled now"}"#,
    printcolumn = r#"{"name":"SUCCEED","type":"integer","jsonPath":".status.succeeded","description":"Tags pulled successfully"}"#,
    printcolumn = r#"{"name":"FAILED","type":"integer","jsonPath":".status.failed","description":"Tags whose pull failed"}"#,
    printcolumn = r#"{"name":"WAITING","type":"integer","jsonPath":".status.waiting","description":"Tags waiting for a pull slot","priority":1}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageSpec {
    /// Images to pull on this node, keyed by image name without tag
    /// (for example `nginx` or `registry.example.com:5000/team/app`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "maxProperties" = 256,
        "x-kubernetes-validations" = [{
            "rule": "self.all(name, size(name) > 0)",
            "message": "image names (the keys of spec.images) must not be empty"
        }]
    ))]
    pub images: Option<BTreeMap<SharedStr, ImageSpec>>,
}

/// One image (a repository) and the tags of it the node should hold.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Secrets (of type kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg)
    /// holding registry credentials for this image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = crate::limits::PULL_SECRETS_MAX))]
    pub pull_secrets: Option<Vec<ReferenceObject>>,
    /// Tags of this image to pull. A tag may also be a digest such as `sha256:…`.
    #[schemars(
        length(max = crate::limits::TAGS_MAX),
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["tag"]
        )
    )]
    pub tags: Vec<ImageTagSpec>,
    /// Pod-like metadata passed to the container runtime with each pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<Box<SandboxConfig>>,
}

/// A reference to a Secret that holds registry credentials.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceObject {
    /// Namespace of the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::secret_namespace")]
    pub namespace: Option<String>,
    /// Name of the Secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::secret_name")]
    pub name: Option<String>,
    /// How the Secret is shared (OpenKruise v1beta1 writes `batch` for shared copies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// One tag to pull, with the policy of its pull and who asked for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagSpec {
    /// The tag, or a digest such as `sha256:…`.
    #[schemars(length(min = 1))]
    pub tag: SharedStr,
    /// When this entry was written; the controller fills it if missing and
    /// measures the node's response timeout from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// Timeouts, retries and lifetime of this pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = {}))]
    pub pull_policy: Option<SharedPolicy>,
    /// The jobs that asked for this tag. When the last one is gone the tag is
    /// removed; a tag with no owners (written by hand) stays until its TTL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Owners>,
    /// Bumped to make the node pull this tag again; status reports which
    /// version it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::VERSION_MAX))]
    pub version: Option<i64>,
    /// `IfNotPresent` (default: a present image succeeds at once) or `Always`.
    /// Other values fail the tag on the node with a message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<SharedStr>,
    /// nodeimage extension (not in OpenKruise): checks the node runs before
    /// pulling: `disk`, `cpu`, `mem`; another name fails the tag, as a KubeEdge
    /// job's unknown check item fails the node. Written for the KubeEdge kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::check_items")]
    pub check_items: Option<Box<Vec<String>>>,
    /// nodeimage extension (not in OpenKruise): once the tag is pulled, run the
    /// node-agent upgrade tool it ships (keadm: backup, upgrade, rollback on
    /// failure). Written for NodeUpgradeJob; only daemons started with
    /// `--enable-upgrades` run it, others fail the tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<Box<TagUpgrade>>,
}

/// nodeimage extension: the node-agent upgrade a tag entry asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagUpgrade {
    /// Version to upgrade to, `vX.Y.Z`; passed to the tool as `--toVersion`.
    #[schemars(
        extend("pattern" = "^v[0-9]+\\.[0-9]+\\.[0-9]+(-[0-9A-Za-z.-]+)?$"),
        length(min = 1, max = 128)
    )]
    pub version: String,
    /// Name of the NodeUpgradeJob that asked; names the work directory and
    /// the log of the upgrade on the node.
    #[schemars(
        extend("pattern" = "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"),
        length(min = 1, max = 253)
    )]
    pub job: String,
    /// The node waits, once it has pulled and checked, until this is false
    /// before it backs up and upgrades (NodeUpgradeJob `requireConfirmation`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub await_confirmation: bool,
}

impl TagUpgrade {
    /// Whether `other` asks for the same upgrade (confirmation aside): a
    /// confirmation changes the entry without asking for a new run.
    pub fn same_run(&self, other: &TagUpgrade) -> bool {
        self.version == other.version && self.job == other.job
    }
}

/// Timeouts, retries and lifetime of one tag's pull.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagPullPolicy {
    /// Limit of one pull attempt, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::INT32_MAX), extend("default" = crate::defaults::PULL_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<i32>,
    /// Retries after a failed attempt (so at most backoffLimit + 1 attempts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX), extend("default" = crate::defaults::PULL_BACKOFF_LIMIT))]
    pub backoff_limit: Option<i32>,
    /// Seconds after the pull finished (succeeded or failed) before the
    /// entry is removed from spec and status. Unset: the entry stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Limit of the whole pull, all attempts included, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = crate::limits::SECONDS_MAX))]
    pub active_deadline_seconds: Option<i64>,
}

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

impl ImagePullPhase {
    /// Whether the pull has finished, successfully or not.
    pub fn is_finished(self) -> bool {
        matches!(self, ImagePullPhase::Succeeded | ImagePullPhase::Failed)
    }
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

impl NodeImageStatus {
    /// Recomputes `desired`, `waiting`, `pulling`, `succeeded` and `failed`
    /// from the tag statuses, so every writer of status (controller and node
    /// daemon) derives the counts the same way.
    ///
    /// `desired` is the number of tags in `spec`. Each spec tag counts once,
    /// by the phase of the status entry with the same tag and the same
    /// `version` (an absent version counts as 0 on both sides); a tag with no
    /// such entry counts as waiting. All four phase counts are written, zeros
    /// included, so that the result does not depend on who wrote it.
    pub fn recount(&mut self, spec: &NodeImageSpec) {
        let (mut waiting, mut pulling, mut succeeded, mut failed) = (0, 0, 0, 0);
        let mut desired = 0;
        for (name, image) in spec.images.iter().flatten() {
            for tag in &image.tags {
                desired += 1;
                let phase = self
                    .image_statuses
                    .as_ref()
                    .and_then(|statuses| statuses.get(name))
                    .and_then(|status| {
                        status.tags.iter().find(|s| {
                            s.tag == tag.tag && s.version.unwrap_or(0) == tag.version.unwrap_or(0)
                        })
                    })
                    .map(|s| s.phase);
                match phase {
                    None | Some(ImagePullPhase::Waiting) => waiting += 1,
                    Some(ImagePullPhase::Pulling) => pulling += 1,
                    Some(ImagePullPhase::Succeeded) => succeeded += 1,
                    Some(ImagePullPhase::Failed) => failed += 1,
                }
            }
        }
        self.desired = desired;
        self.waiting = Some(waiting);
        self.pulling = Some(pulling);
        self.succeeded = Some(succeeded);
        self.failed = Some(failed);
    }
}

/// A whole status with one entry per spec tag, in spec order: `entry` picks
/// each from the image name, the spec tag and the observed entry of the
/// same tag and version (if any); images without tags are left out,
/// `firstSyncStatus` is kept, and the counts are recounted. The daemon and
/// the tests' simulator build the status they write with it.
pub fn status_for_spec(
    ni: &NodeImage,
    mut entry: impl FnMut(&str, &ImageTagSpec, Option<&ImageTagStatus>) -> ImageTagStatus,
) -> NodeImageStatus {
    let observed = ni.status.as_ref();
    let mut statuses: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
    for (image, spec) in ni.spec.images.iter().flatten() {
        let old_tags = observed
            .and_then(|s| s.image_statuses.as_ref())
            .and_then(|m| m.get(image))
            .map(|s| s.tags.as_slice())
            .unwrap_or_default();
        let tags: Vec<ImageTagStatus> = spec
            .tags
            .iter()
            .map(|t| {
                let version = t.version.unwrap_or(0);
                let old = old_tags
                    .iter()
                    .find(|o| o.tag == t.tag && o.version.unwrap_or(0) == version);
                entry(image, t, old)
            })
            .collect();
        if !tags.is_empty() {
            statuses.insert(image.clone(), ImageStatus { tags });
        }
    }
    let mut out = NodeImageStatus {
        image_statuses: (!statuses.is_empty()).then_some(statuses),
        first_sync_status: observed.and_then(|s| s.first_sync_status.clone()),
        ..Default::default()
    };
    out.recount(&ni.spec);
    out
}

/// How a status write is guarded against the object having moved on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatusGuard {
    /// Tests only what the written entries were built from, so the
    /// controller's entry writes for other images do not void it.
    Entries,
    /// Tests the whole spec's generation: the fallback when the spec as
    /// decoded may not match the stored JSON (a salvaged NodeImage).
    Generation,
}

/// The daemons' status write (the NodeImage write contract): the JSON Patch
/// that writes `new` as the whole status, guarded as [`StatusGuard::Entries`]
/// says:
/// - `metadata.uid`: the object is the one observed, not a recreation;
/// - `status.desired` as observed: no other writer (the controller's
///   housekeeping, which removes entries) changed the status meanwhile;
/// - for each image whose entry this write changes, the name and version of
///   every spec tag it was built from, at its index.
///
/// A tag added to the spec meanwhile does not void the write: the status
/// then predates that tag, as it does between any spec edit and the next
/// status write, and the answer (which carries the new spec) makes the
/// writer build again. A guard on the generation would be voided by every
/// entry write the controller makes for any image of the node.
pub fn guarded_status_patch(ni: &NodeImage, new: &NodeImageStatus) -> serde_json::Value {
    guarded_status_patch_with(ni, new, StatusGuard::Entries)
}

/// [`guarded_status_patch`] with the guard chosen by the caller.
pub fn guarded_status_patch_with(
    ni: &NodeImage,
    new: &NodeImageStatus,
    guard: StatusGuard,
) -> serde_json::Value {
    use serde_json::json;
    let status = serde_json::to_value(new).unwrap_or_else(|_| json!({}));
    let mut ops = Vec::new();
    match (guard, ni.metadata.generation, &ni.metadata.resource_version) {
        (StatusGuard::Entries, _, _) => {
            if let Some(uid) = &ni.metadata.uid {
                ops.push(json!({"op": "test", "path": "/metadata/uid", "value": uid}));
            }
            if let Some(old) = &ni.status {
                ops.push(json!({"op": "test", "path": "/status/desired", "value": old.desired}));
            }
            let old_entries = ni.status.as_ref().and_then(|s| s.image_statuses.as_ref());
            let specs = ni.spec.images.as_ref();
            for (image, entry) in new.image_statuses.iter().flatten() {
                if old_entries.and_then(|m| m.get(image)) == Some(entry) {
                    continue;
                }
                let Some(spec) = specs.and_then(|m| m.get(image)) else {
                    continue;
                };
                let base = format!("/spec/images/{}/tags", pointer_segment(image));
                for (i, t) in spec.tags.iter().enumerate() {
                    ops.push(
                        json!({"op": "test", "path": format!("{base}/{i}/tag"), "value": t.tag}),
                    );
                    if let Some(v) = t.version {
                        ops.push(json!({"op": "test", "path": format!("{base}/{i}/version"), "value": v}));
                    }
                }
            }
        }
        (StatusGuard::Generation, Some(g), _) => {
            ops.push(json!({"op": "test", "path": "/metadata/generation", "value": g}));
        }
        (StatusGuard::Generation, None, rv) => {
            ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
        }
    }
    ops.push(json!({"op": "add", "path": "/status", "value": status}));
    serde_json::Value::Array(ops)
}

/// The JSON Patch (RFC 6902) that turns `old.images` into `new`, one image
/// at a time: each image that differs is `test`ed as it was read (`null` for
/// one that was not there: the API server's `test` of an absent key against
/// `null` passes), then set or removed. An entry write for one image sends
/// that image twice instead of the whole spec (79 KB with 100 tags), and a
/// concurrent write to another image does not void it. With no images map
/// yet, the whole spec is tested and the map set.
pub fn images_patch(
    old: &NodeImageSpec,
    new: &BTreeMap<SharedStr, ImageSpec>,
) -> Result<serde_json::Value, serde_json::Error> {
    use serde_json::{Value, json};
    let Some(before) = &old.images else {
        return Ok(json!([
            {"op": "test", "path": "/spec", "value": serde_json::to_value(old)?},
            {"op": "add", "path": "/spec/images", "value": serde_json::to_value(new)?},
        ]));
    };
    let mut keys: Vec<&SharedStr> = before.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut ops = Vec::new();
    for key in keys {
        let (was, now) = (before.get(key), new.get(key));
        if was == now {
            continue;
        }
        let path = format!("/spec/images/{}", pointer_segment(key));
        let was = match was {
            Some(v) => serde_json::to_value(v)?,
            None => Value::Null,
        };
        ops.push(json!({"op": "test", "path": path, "value": was}));
        ops.push(match now {
            Some(v) => json!({"op": "add", "path": path, "value": serde_json::to_value(v)?}),
            None => json!({"op": "remove", "path": path}),
        });
    }
    Ok(Value::Array(ops))
}

/// One JSON Pointer segment (RFC 6901): image names carry `/`.
fn pointer_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Whether the API server refused a [`guarded_status_patch`] because its
/// `test` failed (the spec moved on):
/// 422 with no details (a schema rejection names the object and causes).
pub fn is_failed_test(e: &kube::core::Status) -> bool {
    e.code == 422
        && e.details
            .as_ref()
            .is_none_or(|d| d.name.is_empty() && d.causes.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(tags: &[(&str, &str, Option<i64>)]) -> NodeImageSpec {
        let mut images: BTreeMap<SharedStr, ImageSpec> = BTreeMap::new();
        for (image, tag, version) in tags {
            images
                .entry((*image).into())
                .or_default()
                .tags
                .push(ImageTagSpec {
                    tag: (*tag).into(),
                    version: *version,
                    ..Default::default()
                });
        }
        NodeImageSpec {
            images: Some(images),
        }
    }

    fn status(entries: &[(&str, &str, Option<i64>, ImagePullPhase)]) -> NodeImageStatus {
        let mut statuses: BTreeMap<SharedStr, ImageStatus> = BTreeMap::new();
        for (image, tag, version, phase) in entries {
            statuses
                .entry((*image).into())
                .or_default()
                .tags
                .push(ImageTagStatus {
                    tag: (*tag).into(),
                    version: *version,
                    phase: *phase,
                    ..Default::default()
                });
        }
        NodeImageStatus {
            image_statuses: Some(statuses),
            ..Default::default()
        }
    }

    #[test]
    fn recount_counts_each_spec_tag_once_by_matching_version() {
        use ImagePullPhase::*;
        // (name, spec tags, status entries, expected [desired, waiting, pulling, succeeded, failed])
        type Case<'a> = (
            &'a str,
            Vec<(&'a str, &'a str, Option<i64>)>,
            Vec<(&'a str, &'a str, Option<i64>, ImagePullPhase)>,
            [i32; 5],
        );
        let cases: Vec<Case> = vec![
            ("empty", vec![], vec![], [0, 0, 0, 0, 0]),
            (
                "no status counts as waiting",
                vec![("nginx", "1.25", None)],
                vec![],
                [1, 1, 0, 0, 0],
            ),
            (
                "absent version equals 0",
                vec![("nginx", "1.25", None), ("nginx", "1.26", Some(0))],
                vec![
                    ("nginx", "1.25", Some(0), Succeeded),
                    ("nginx", "1.26", None, Failed),
                ],
                [2, 0, 0, 1, 1],
            ),
            (
                "old version does not count",
                vec![("nginx", "1.25", Some(2))],
                vec![("nginx", "1.25", Some(1), Succeeded)],
                [1, 1, 0, 0, 0],
            ),
            (
                "every phase, across images",
                vec![
                    ("a", "1", None),
                    ("a", "2", None),
                    ("b", "1", None),
                    ("c", "1", None),
                ],
                vec![
                    ("a", "1", None, Waiting),
                    ("a", "2", None, Pulling),
                    ("b", "1", None, Succeeded),
                    ("c", "1", None, Failed),
                ],
                [4, 1, 1, 1, 1],
            ),
            (
                "status of a tag not in spec is ignored",
                vec![("a", "1", None)],
                vec![("a", "1", None, Pulling), ("a", "gone", None, Failed)],
                [1, 0, 1, 0, 0],
            ),
        ];
        for (name, tags, entries, want) in cases {
            let mut s = status(&entries);
            s.recount(&spec(&tags));
            let got = [
                s.desired,
                s.waiting.unwrap_or(-1),
                s.pulling.unwrap_or(-1),
                s.succeeded.unwrap_or(-1),
                s.failed.unwrap_or(-1),
            ];
            assert_eq!(got, want, "{name}");
        }
    }

    /// The object a daemon observed: generation 1, image `reg.io/a` with
    /// tag 1 at version 2 (Pulling), image `b` with tag 1 (Succeeded).
    fn observed() -> NodeImage {
        let mut ni = NodeImage::new("n", spec(&[("reg.io/a", "1", Some(2)), ("b", "1", None)]));
        ni.metadata.uid = Some("u1".into());
        ni.metadata.generation = Some(1);
        let mut st = status(&[
            ("reg.io/a", "1", Some(2), ImagePullPhase::Pulling),
            ("b", "1", None, ImagePullPhase::Succeeded),
        ]);
        st.recount(&ni.spec);
        ni.status = Some(st);
        ni
    }

    /// What the daemon writes on top of [`observed`]: `reg.io/a` Succeeded.
    fn written(ni: &NodeImage) -> NodeImageStatus {
        status_for_spec(ni, |_, t, old| {
            let mut e = old.cloned().unwrap_or_default();
            e.tag = t.tag.clone();
            e.phase = ImagePullPhase::Succeeded;
            e
        })
    }

    #[test]
    fn status_guard_refuses_only_what_makes_the_written_entries_wrong() {
        use serde_json::json;
        // (case, edit of the stored object after the daemon read it, applies)
        type Edit = fn(&mut serde_json::Value);
        let cases: Vec<(&str, Edit, bool)> = vec![
            ("nothing changed", |_| {}, true),
            (
                "the controller added an image (an entry write)",
                |o| o["spec"]["images"]["c"] = json!({"tags": [{"tag": "9"}]}),
                true,
            ),
            (
                "the controller added a tag of the unchanged image",
                |o| {
                    if let Some(t) = o["spec"]["images"]["b"]["tags"].as_array_mut() {
                        t.push(json!({"tag": "2"}));
                    }
                },
                true,
            ),
            (
                "an owner added to the written tag",
                |o| o["spec"]["images"]["reg.io/a"]["tags"][0]["ownerReferences"] = json!([]),
                true,
            ),
            (
                "the written tag's version moved on",
                |o| o["spec"]["images"]["reg.io/a"]["tags"][0]["version"] = json!(3),
                false,
            ),
            (
                "the written tag was removed",
                |o| o["spec"]["images"]["reg.io/a"]["tags"] = json!([]),
                false,
            ),
            (
                "the written image was removed",
                |o| {
                    if let Some(m) = o["spec"]["images"].as_object_mut() {
                        m.remove("reg.io/a");
                    }
                },
                false,
            ),
            (
                "a tag inserted before the written one",
                |o| {
                    if let Some(t) = o["spec"]["images"]["reg.io/a"]["tags"].as_array_mut() {
                        t.insert(0, json!({"tag": "0"}));
                    }
                },
                false,
            ),
            (
                "the controller's housekeeping removed an entry",
                |o| o["status"]["desired"] = json!(1),
                false,
            ),
            (
                "the NodeImage was recreated",
                |o| o["metadata"]["uid"] = json!("u2"),
                false,
            ),
        ];
        let ni = observed();
        let new = written(&ni);
        let patch: json_patch::Patch =
            serde_json::from_value(guarded_status_patch(&ni, &new)).expect("a JSON patch");
        for (case, edit, applies) in cases {
            let mut stored = serde_json::to_value(&ni).expect("serialises");
            edit(&mut stored);
            let result = json_patch::patch(&mut stored, &patch);
            assert_eq!(result.is_ok(), applies, "{case}: {result:?}");
            if applies {
                assert_eq!(
                    stored["status"],
                    serde_json::to_value(&new).expect("serialises"),
                    "{case}"
                );
            }
        }
    }

    #[test]
    fn status_guard_tests_only_the_images_whose_entries_change() {
        let ni = observed();
        let patch = guarded_status_patch(&ni, &written(&ni));
        let paths: Vec<&str> = patch
            .as_array()
            .into_iter()
            .flatten()
            .filter(|op| op["op"] == "test")
            .filter_map(|op| op["path"].as_str())
            .collect();
        assert_eq!(
            paths,
            vec![
                "/metadata/uid",
                "/status/desired",
                "/spec/images/reg.io~1a/tags/0/tag",
                "/spec/images/reg.io~1a/tags/0/version",
            ]
        );
        let by_generation = guarded_status_patch_with(&ni, &written(&ni), StatusGuard::Generation);
        assert_eq!(by_generation[0]["path"], "/metadata/generation");
        assert_eq!(by_generation[0]["value"], 1);
        assert_eq!(by_generation.as_array().map(Vec::len), Some(2));
    }

    #[test]
    fn a_tag_status_has_flat_json_and_boxes_only_what_an_upgrade_sets() {
        let pull = serde_json::json!({
            "tag": "v1", "phase": "Succeeded", "progress": 100, "version": 2,
            "imageID": "reg/a@sha256:1", "startTime": "2026-11-25T10:00:00Z",
            "completionTime": "2026-11-25T10:00:05Z", "message": "pulled",
        });
        let upgrade = serde_json::json!({
            "tag": "v1.31", "phase": "Pulling", "upgradeState": "BackingUp",
            "upgradeLog": "/var/log/up.log", "fromVersion": "v1.30", "toVersion": "v1.31",
        });
        for (case, json, boxed) in [("pull", pull, false), ("upgrade", upgrade, true)] {
            let st: ImageTagStatus = serde_json::from_value(json.clone()).expect(case);
            assert_eq!(st.upgrade.is_some(), boxed, "{case}");
            assert_eq!(serde_json::to_value(&st).expect(case), json, "{case}");
        }
        let st: ImageTagStatus = serde_json::from_value(serde_json::json!({
            "tag": "v1.31", "phase": "Succeeded", "upgradeState": "Successful",
            "fromVersion": "v1.30", "toVersion": "v1.31",
        }))
        .expect("decodes");
        assert_eq!(st.upgrade_state(), Some(UpgradeState::Successful));
        assert_eq!(
            (st.from_version(), st.to_version()),
            (Some("v1.30"), Some("v1.31"))
        );
        assert_eq!(TagUpgradeStatus::default().boxed(), None);
        assert!(std::mem::size_of::<ImageTagStatus>() < std::mem::size_of::<TagStatusFields>());
    }

    #[test]
    fn images_patch_writes_only_the_changed_images_each_tested_as_read() {
        use serde_json::json;
        let old = spec(&[("a/x", "1", None), ("b", "2", None), ("gone", "3", None)]);
        let mut new = old.images.clone().unwrap_or_default();
        new.get_mut("a/x").unwrap().tags[0].version = Some(1);
        new.remove("gone");
        new.insert(
            "new~img".into(),
            spec(&[("new~img", "4", None)]).images.unwrap()["new~img"].clone(),
        );
        let v = |image: &str, images: &BTreeMap<SharedStr, ImageSpec>| {
            serde_json::to_value(&images[image]).unwrap()
        };
        let before = old.images.as_ref().unwrap();
        let ops = images_patch(&old, &new).unwrap();
        assert_eq!(
            ops,
            json!([
                {"op": "test", "path": "/spec/images/a~1x", "value": v("a/x", before)},
                {"op": "add", "path": "/spec/images/a~1x", "value": v("a/x", &new)},
                {"op": "test", "path": "/spec/images/gone", "value": v("gone", before)},
                {"op": "remove", "path": "/spec/images/gone"},
                {"op": "test", "path": "/spec/images/new~0img", "value": null},
                {"op": "add", "path": "/spec/images/new~0img", "value": v("new~img", &new)},
            ])
        );
        // Nothing differs: no operations.
        assert_eq!(images_patch(&old, before).unwrap(), json!([]));
        // No images map yet: the whole spec is tested and the map set.
        let empty = NodeImageSpec::default();
        assert_eq!(
            images_patch(&empty, &new).unwrap(),
            json!([
                {"op": "test", "path": "/spec", "value": {}},
                {"op": "add", "path": "/spec/images", "value": serde_json::to_value(&new).unwrap()},
            ])
        );
    }

    #[test]
    fn images_patch_lands_beside_a_change_to_another_image_and_not_on_its_own() {
        // Edits of images that exist: the json-patch crate, unlike the API
        // server, fails a `test` of an absent key against null (the e2e test
        // in tests/tests/nodeimage.rs covers that case).
        let old = spec(&[("a", "1", None), ("b", "2", None)]);
        let mut new = old.images.clone().unwrap_or_default();
        new.get_mut("a").unwrap().tags[0].version = Some(1);
        let patch: json_patch::Patch =
            serde_json::from_value(images_patch(&old, &new).unwrap()).unwrap();
        let stored = |spec: &NodeImageSpec| serde_json::json!({"spec": spec, "status": {}});
        // Another writer added a tag to image b meanwhile: the write lands, b's tag stays.
        let mut doc = stored(&spec(&[
            ("a", "1", None),
            ("b", "2", None),
            ("b", "5", None),
        ]));
        json_patch::patch(&mut doc, &patch).unwrap();
        assert_eq!(doc["spec"]["images"]["a"]["tags"][0]["version"], 1);
        assert_eq!(doc["spec"]["images"]["b"]["tags"][1]["tag"], "5");
        // Image a itself moved: refused.
        let mut moved = stored(&spec(&[("a", "1", Some(3)), ("b", "2", None)]));
        assert!(json_patch::patch(&mut moved, &patch).is_err());
    }
}
