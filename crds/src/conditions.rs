//! Standard `status.conditions` (`metav1.Condition`) on every job kind, so
//! `kubectl wait --for=condition=Complete` and pipelines work the Kubernetes
//! way; set beside the upstream status fields, which stay as upstream has them.

use crate::limits;
use schemars::{Schema, SchemaGenerator, json_schema};

/// The job finished and every node (or image) succeeded, or failures stayed
/// within the job's tolerance.
pub const COMPLETE: &str = "Complete";
/// The job finished with failures it does not tolerate.
pub const FAILED: &str = "Failed";
/// The job is running (True), or has finished (False).
pub const PROGRESSING: &str = "Progressing";

/// Schema of a conditions list: `metav1.Condition` items keyed by `type`,
/// with every field bounded.
pub fn schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "description": "Standard conditions: Complete, Failed and Progressing, with reason and message.",
        "type": "array",
        "maxItems": 8,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
        "items": {
            "type": "object",
            "required": ["type", "status", "lastTransitionTime", "reason", "message"],
            "properties": {
                "type": {"type": "string", "maxLength": 316, "description": "Complete, Failed or Progressing."},
                "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
                "observedGeneration": {
                    "type": "integer", "format": "int64", "minimum": 0, "maximum": limits::VERSION_MAX,
                    "description": "The job's metadata.generation the condition was set for."
                },
                "lastTransitionTime": {"type": "string", "format": "date-time"},
                "reason": {"type": "string", "maxLength": 1024, "description": "CamelCase reason."},
                "message": {"type": "string", "maxLength": 32768, "description": "Details for people."},
            },
        },
    })
}
