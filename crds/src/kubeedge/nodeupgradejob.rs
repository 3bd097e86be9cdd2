//! NodeUpgradeJob: KubeEdge's rolling upgrade of the node agent.

use super::task::{NodeTaskSpec, UpgradeFields};
use super::{ActionFlow, JobState, TaskStatus};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Annotation on a NodeUpgradeJob with `requireConfirmation` that confirms
/// the upgrade of the nodes it names (comma-separated), or of all (`*`):
/// nodeimage's stand-in for `keadm ctl confirm` on each node.
pub const CONFIRM_ANNOTATION: &str = "nodeimage.dev/confirm-upgrade";

/// Default upgrade image; its tag is replaced by `version`.
pub const DEFAULT_UPGRADE_IMAGE: &str = "kubeedge/installation-package";

/// Upgrade the node agent on a set of nodes to a version.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "operations.kubeedge.io",
    version = "v1alpha1",
    kind = "NodeUpgradeJob",
    status = "NodeUpgradeJobStatus",
    shortname = "nuj",
    category = "prepull",
    doc = "NodeUpgradeJob upgrades the node agent on the nodes it names or selects, with checks, a backup first and a rollback on failure.",
    printcolumn = r#"{"name":"VERSION","type":"string","jsonPath":".spec.version","description":"Target version"}"#,
    printcolumn = r#"{"name":"STATE","type":"string","jsonPath":".status.state","description":"State of the job (v1alpha1)"}"#,
    printcolumn = r#"{"name":"EVENT","type":"string","jsonPath":".status.event","description":"Step the state refers to (v1alpha1)"}"#,
    printcolumn = r#"{"name":"REASON","type":"string","jsonPath":".status.reason","priority":1}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "(has(self.nodeNames) && size(self.nodeNames) > 0) != has(self.labelSelector)",
        "message": "exactly one of spec.nodeNames and spec.labelSelector must be set"
    },
    {
        "rule": "self == oldSelf",
        "message": "spec is immutable: a NodeUpgradeJob cannot change after creation (as in KubeEdge); create a new job"
    },
    {
        "rule": "has(self.version)",
        "message": "spec.version is required: the version to upgrade to, of the form vX.Y.Z, such as v1.16.0"
    }
]))]
pub struct NodeUpgradeJobSpec {
    /// Target version, `vX.Y.Z` (an optional pre-release suffix such as `-rc.1` is allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self.matches('^v[0-9]+\\\\.[0-9]+\\\\.[0-9]+(-[0-9A-Za-z.-]+)?$')",
        "message": "spec.version must be of the form vX.Y.Z, such as v1.16.0"
    }]))]
    pub version: Option<String>,
    /// Which nodes, checks, tolerance, concurrency and per-node limit.
    #[serde(flatten)]
    pub task: NodeTaskSpec<UpgradeFields>,
    /// Image that ships the upgrade tool (keadm); any tag or digest is replaced by version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::upgrade_image")]
    pub image: Option<String>,
    /// Each node waits, after its checks and pull, for confirmation before it
    /// backs up and upgrades: annotate the job `nodeimage.dev/confirm-upgrade`
    /// with the node names (comma-separated) or `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_confirmation: Option<bool>,
    /// The digest the upgrade image must have (the name keeps upstream's
    /// spelling): each node compares the repository digest of what it
    /// pulled with `value` (v1alpha1) or its architecture's `amd64`/`arm64`
    /// (v1alpha2) and runs nothing when they differ. `registryAPI` is
    /// accepted and not used (a job with only `registryAPI` fails).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_digest_gatter: Option<ImageDigestGatter>,
}

/// How upstream KubeEdge checks the upgrade image's digest: v1alpha1's
/// `value` and v1alpha2's per-architecture digests.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageDigestGatter {
    /// v1alpha1: the digest for every node, `sha256:<64 hex>` (empty: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::digest_value")]
    pub value: Option<String>,
    /// v1alpha2: the digest for arm64 nodes, `sha256:<64 hex>` (empty: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::digest_arm64")]
    pub arm64: Option<String>,
    /// v1alpha2: the digest for amd64 nodes, `sha256:<64 hex>` (empty: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::digest_amd64")]
    pub amd64: Option<String>,
    /// Where upstream KubeEdge asks a registry for the digest; accepted,
    /// not used by nodeimage (the node checks the digest the job names).
    #[serde(
        rename = "registryAPI",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub registry_api: Option<RegistryApi>,
}

/// A registry API endpoint and token.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegistryApi {
    /// Registry host.
    pub host: String,
    /// Bearer token.
    pub token: String,
}

/// Status of a NodeUpgradeJob: v1alpha1's fields and v1alpha2's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeUpgradeJobStatus {
    /// v1alpha2 phase of the job: Init, InProgress, Completed or Failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// v1alpha1: state, event, action, reason, time.
    #[serde(flatten)]
    pub job: JobState,
    /// The version the nodes were upgraded to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// The version the nodes ran before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub historic_version: Option<String>,
    /// One entry per node (v1alpha1's and v1alpha2's fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_status: Option<Vec<UpgradeNodeStatus>>,
    /// Standard conditions (Complete, Failed, Progressing), for `kubectl wait`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::conditions::schema")]
    pub conditions: Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
}

/// The upgrade status of one node: v1alpha1's task status and v1alpha2's
/// phase, action flow and versions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeNodeStatus {
    /// v1alpha1 fields: nodeName, state, event, action, reason, time.
    #[serde(flatten)]
    pub task: TaskStatus,
    /// v1alpha2: Pending, InProgress, Successful, Failure or Unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// v1alpha2: the actions the node ran, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action_flow: Option<Vec<ActionFlow>>,
    /// v1alpha2: the version the node runs now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_version: Option<String>,
    /// v1alpha2: the version the node ran before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub historic_version: Option<String>,
}

/// Whether `s` is a node-agent version as `spec.version` takes it:
/// `vX.Y.Z` with an optional pre-release suffix such as `-rc.1`.
pub fn is_version(s: &str) -> bool {
    let Some(rest) = s.strip_prefix('v') else {
        return false;
    };
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let numbers: Vec<&str> = core.split('.').collect();
    numbers.len() == 3
        && numbers
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && pre.is_none_or(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
        })
}

/// The KubeEdge version in a Node's `status.nodeInfo.kubeletVersion`, which
/// edgecore reports as `<kubernetes version>-kubeedge-<kubeedge version>`
/// (e.g. `v1.29.5-kubeedge-v1.17.0` → `v1.17.0`); None for other kubelets.
pub fn kubeedge_version_of_kubelet(kubelet_version: &str) -> Option<String> {
    let (_, rest) = kubelet_version.split_once("-kubeedge-")?;
    is_version(rest).then(|| rest.to_string())
}

/// The first word of `text` that is a version (`vX.Y.Z[-pre]`), as a version
/// file reads: `v1.17.0`, or the output of `edgecore --version`
/// (`KubeEdge v1.17.0`).
pub fn first_version_in(text: &str) -> Option<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '-'))
        .find(|w| is_version(w))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions() {
        let cases = [
            ("v1.17.0", true),
            ("v1.17.0-rc.1", true),
            ("v10.0.12-beta-2", true),
            ("1.17.0", false),
            ("v1.17", false),
            ("v1.17.0.1", false),
            ("v1.x.0", false),
            ("v1.17.0-", false),
            ("v1.17.0+build", false),
            ("", false),
        ];
        for (s, want) in cases {
            assert_eq!(is_version(s), want, "{s:?}");
        }
    }

    #[test]
    fn kubelet_suffix() {
        let cases = [
            ("v1.29.5-kubeedge-v1.17.0", Some("v1.17.0")),
            ("v1.30.7-kubeedge-v1.20.0-beta.0", Some("v1.20.0-beta.0")),
            ("v1.33.13", None),
            ("v1.29.5-kubeedge-", None),
            ("v1.29.5-kubeedge-latest", None),
        ];
        for (s, want) in cases {
            assert_eq!(kubeedge_version_of_kubelet(s).as_deref(), want, "{s:?}");
        }
    }

    #[test]
    fn version_files() {
        let cases = [
            ("v1.17.0\n", Some("v1.17.0")),
            ("  v1.16.2  ", Some("v1.16.2")),
            ("KubeEdge v1.18.0\n", Some("v1.18.0")),
            ("version=v1.18.1-rc.0;", Some("v1.18.1-rc.0")),
            ("", None),
            ("unknown\n", None),
        ];
        for (s, want) in cases {
            assert_eq!(first_version_in(s).as_deref(), want, "{s:?}");
        }
    }
}
