//! What the cluster asks of a node: the NodeImage kind and its `spec`, one
//! tag entry per image tag the node should hold.

use crate::interned::{Owners, Shared, SharedStr};
use crate::kruise::common::SandboxConfig;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub use super::purpose::Purpose;
use super::status::NodeImageStatus;

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
    /// nodeimage extension (not in OpenKruise): requests to remove images
    /// from this node, one entry per name (`job`); answered in
    /// `status.removals`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = crate::limits::REMOVALS_PER_NODE_MAX),
        extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["job"])
    )]
    pub removals: Option<Vec<crate::nodeimage_dev::RemovalEntry>>,
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
            "x-kubernetes-list-map-keys" = ["tag", "purpose"]
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
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.upgrade) == (has(self.purpose) && self.purpose == 'Upgrade')",
    "message": "upgrade and purpose go together: an entry with upgrade must have purpose: Upgrade, and one with purpose: Upgrade must have upgrade"
}]))]
pub struct ImageTagSpec {
    /// The tag, or a digest such as `sha256:…`.
    #[schemars(length(min = 1))]
    pub tag: SharedStr,
    /// nodeimage extension (not in OpenKruise): which request this entry
    /// carries, `Pull` (the default, OpenKruise's meaning) or `Upgrade` (a
    /// NodeUpgradeJob's). With `tag` it keys the entry: a pull and an upgrade
    /// of the same tag are two entries, each with its own owners, version
    /// and status.
    #[serde(default)]
    #[schemars(extend("default" = "Pull"))]
    pub purpose: Purpose,
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
    /// nodeimage extension (not in OpenKruise): how the controller started
    /// this version's pull under the job's P2P settings (a seed or from
    /// peers, the node's agent); the runtime does not say which host served
    /// a pull. Informational: the node pulls the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p2p: Option<Box<TagP2p>>,
}

/// nodeimage extension: how a pull was started under a job's P2P settings
/// (`nodeimage.dev/p2p-*` annotations), written by the controller with the
/// version it starts; a new version asked without P2P settings drops it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TagP2p {
    /// With waves: `Seed` (no node of its domain held the image, so it
    /// pulls from the registry) or `Peers` (nodes of its domain held it, so
    /// peers can serve it through the node's agent or mirror).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wave: Option<WaveRole>,
    /// With waves: the node's topology domain, `KEY=VALUE` (empty value: a
    /// node without the label); at most a label key, `=` and a label value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 381))]
    pub domain: Option<String>,
    /// With `Peers`: how many nodes of the domain held the image then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX))]
    pub holders: Option<i32>,
    /// With an agent: `Ready` (its Pod on the node was Ready) or `Direct`
    /// (not Ready within the job's wait: the node pulls from the registry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentUse>,
}

// Where a node stood in the waves when its pull started (no doc comment:
// the schema takes the field's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WaveRole {
    /// A seed of its domain: from the registry.
    Seed,
    /// Its domain held the image: from peers.
    Peers,
}

// What the node's P2P agent was when its pull started (no doc comment: the
// schema takes the field's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AgentUse {
    /// The agent's Pod on the node was Ready.
    Ready,
    /// Not Ready within the job's wait: the node pulls directly.
    Direct,
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
    /// The digests the pulled image must have (NodeUpgradeJob
    /// `imageDigestGatter`): the node compares its repository digest with
    /// its architecture's, else `any`, and runs nothing when they differ.
    /// Unset: no check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digests: Option<crate::kubeedge::UpgradeDigests>,
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

/// A tag's pull policy as the entries hold it: one shared copy per distinct
/// policy (a job writes the same one on each of its nodes).
pub type SharedPolicy = Shared<ImageTagPullPolicy>;
crate::interned_pool!(ImageTagPullPolicy);
