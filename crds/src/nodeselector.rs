//! The node selector of OpenKruise's ImagePullJob (`selector`: names, or
//! labels), which nodeimage's ImageRemovalJob takes as it is.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Nodes by name or by label; one of the two.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.names) && size(self.names) > 0 && (has(self.matchLabels) || has(self.matchExpressions)))",
    "message": "spec.selector: can not set both names and a label selector (matchLabels/matchExpressions)"
}]))]
pub struct ImagePullJobNodeSelector {
    /// Node names; duplicates are rejected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::job_node_names")]
    pub names: Option<Vec<String>>,
    /// Node labels that must all match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::job_match_labels")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Label requirements that must all hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::validation::job_match_expressions")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}
