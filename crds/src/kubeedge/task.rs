//! The node-task fields both KubeEdge kinds share (which nodes, checks,
//! failure tolerance, concurrency, per-node limit), declared once; each kind
//! names where they sit so that admission messages name the field as the
//! user wrote it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use std::marker::PhantomData;

/// Where a kind keeps its node-task fields, for schema messages.
pub trait TaskFields {
    /// Path of the fields in a manifest, such as `spec.imagePrePullTemplate`.
    const PARENT: &'static str;
}

/// ImagePrePullJob keeps them in `spec.imagePrePullTemplate`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrePullFields;

impl TaskFields for PrePullFields {
    const PARENT: &'static str = "spec.imagePrePullTemplate";
}

/// NodeUpgradeJob keeps them in `spec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UpgradeFields;

impl TaskFields for UpgradeFields {
    const PARENT: &'static str = "spec";
}

/// Which nodes a KubeEdge job works on and how it rolls over them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", bound = "")]
#[schemars(bound = "P: TaskFields")]
pub struct NodeTaskSpec<P> {
    /// Names of the nodes. Set this or labelSelector, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "node_names::<P>")]
    pub node_names: Option<Vec<String>>,
    /// Labels selecting the nodes. Set this or nodeNames, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "label_selector::<P>")]
    pub label_selector: Option<LabelSelector>,
    /// Checks each node passes first: `disk`, `cpu`, `mem` (none by default).
    /// A check fails when usage is above the daemon's threshold (80% by
    /// default); an item of another name fails the node, as in KubeEdge v1alpha2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::check_items")]
    pub check_items: Option<Vec<String>>,
    /// Fraction of nodes that may fail while the job still succeeds, a decimal
    /// in [0, 1] (default "0.1"). "0" tolerates no failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "failure_tolerate::<P>")]
    pub failure_tolerate: Option<String>,
    /// Most nodes working at once (default 1; 0 means 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::INT32_MAX), extend("default" = 1))]
    pub concurrency: Option<i32>,
    /// Limit for each node, in seconds. Unset or 0 means 300; the controller applies that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = crate::limits::SECONDS_MAX), extend("default" = crate::defaults::KUBEEDGE_TIMEOUT_SECONDS))]
    pub timeout_seconds: Option<i64>,
    /// Which kind these fields belong to (not serialized).
    #[serde(skip)]
    #[schemars(skip)]
    pub fields: PhantomData<P>,
}

impl<P> Default for NodeTaskSpec<P> {
    fn default() -> Self {
        NodeTaskSpec {
            node_names: None,
            label_selector: None,
            check_items: None,
            failure_tolerate: None,
            concurrency: None,
            timeout_seconds: None,
            fields: PhantomData,
        }
    }
}

fn node_names<P: TaskFields>(_: &mut SchemaGenerator) -> Schema {
    crate::validation::node_names(
        &format!("{}.nodeNames", P::PARENT),
        "Names of the nodes. Set this or labelSelector, not both.",
    )
}

fn label_selector<P: TaskFields>(_: &mut SchemaGenerator) -> Schema {
    crate::validation::label_selector(
        &format!("{}.labelSelector", P::PARENT),
        "Labels selecting the nodes. Set this or nodeNames, not both.",
    )
}

fn failure_tolerate<P: TaskFields>(_: &mut SchemaGenerator) -> Schema {
    schemars::json_schema!({
        "description": "Fraction of nodes that may fail while the job still succeeds, a decimal in [0, 1] (default \"0.1\"). \"0\" tolerates no failure.",
        "type": ["string", "null"],
        "default": "0.1",
        "x-kubernetes-validations": [{
            "rule": "self.matches('^(0(\\\\.[0-9]+)?|1(\\\\.0+)?|\\\\.[0-9]+)$')",
            "message": format!("{}.failureTolerate must be a decimal number between 0 and 1, such as \"0.1\"", P::PARENT),
        }],
    })
}
