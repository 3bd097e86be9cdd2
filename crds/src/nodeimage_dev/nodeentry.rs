//! A removal job's work on one node and the node's answer, as they sit in
//! the node's NodeImage (`spec.removals`, `status.removals`): the controller
//! writes the entry when the node's turn comes, the daemon answers it in its
//! status write. nodeimage fields: OpenKruise readers never see them unless
//! removal is used.

use super::removal::{RemovalResult, SkipReason};
use crate::limits;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One request to remove images from this node, written by an
/// ImageRemovalJob or by hand.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemovalEntry {
    /// The request's name (an ImageRemovalJob's name when it wrote the
    /// entry): one entry per name.
    #[schemars(length(min = 1, max = 253))]
    pub job: String,
    /// Tells two requests of one name apart: an entry with a new uid is a
    /// new request, run again (the job's uid when a job wrote it).
    #[schemars(length(min = 1, max = 64))]
    pub uid: String,
    /// The references to remove, as the job lists them: 1–64, by tag or
    /// digest, no wildcards.
    #[schemars(schema_with = "images_schema")]
    pub images: Vec<String>,
    /// Remove even what live pull entries on this node want.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// Keep these digests off the node while the entry exists: pull entries
    /// that want them fail, naming the job.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub block: bool,
    /// When the controller wrote the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    /// `ImageRemovalJob` when that job (`job`, `uid`) wrote the entry: it
    /// goes once the job is gone, also when the job's finalizer was taken
    /// off by hand. Unset (written by hand): it stays until removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_by: Option<RemovalWriter>,
}

// Who wrote a removal entry (no doc comment: the schema takes the field's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RemovalWriter {
    /// An ImageRemovalJob, named by the entry's `job` and `uid`.
    ImageRemovalJob,
}

/// Schema of a list of images to remove: 1–64 distinct references, each
/// the project's one reference rule, and no `*` (there is no "all images").
pub(crate) fn images_schema(g: &mut SchemaGenerator) -> Schema {
    let mut item = crate::reference::image_schema(g);
    let wildcard = json!({
        "rule": "!self.contains('*')",
        "message": "wildcards ('*') are not accepted: name each image to remove by tag or digest",
    });
    if let Some(Value::Array(rules)) = item.get_mut("x-kubernetes-validations") {
        rules.insert(0, wildcard);
    }
    json_schema!({
        "description": "The images to remove, by tag or digest: 1-64 distinct references, no wildcards.",
        "type": "array",
        "minItems": 1,
        "maxItems": limits::REMOVAL_IMAGES_MAX,
        "x-kubernetes-list-type": "set",
        "items": item,
    })
}

/// The node's answer to one removal entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RemovalStatus {
    /// The name of the entry answered.
    pub job: String,
    /// The uid of the entry this answers (an answer to an older job of the
    /// same name is not this one's).
    pub uid: String,
    /// One result per listed reference, in the entry's order.
    #[schemars(length(max = limits::REMOVAL_IMAGES_MAX), extend("x-kubernetes-list-type" = "atomic"))]
    pub images: Vec<ImageRemoval>,
    /// When the node finished the entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
}

/// What became of one listed reference on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageRemoval {
    /// The reference as the job lists it.
    pub image: String,
    /// Removed, NotPresent, InUse, Skipped or Failed.
    pub result: RemovalResult,
    /// Which rule kept it, for Skipped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<SkipReason>,
    /// Bytes the runtime reported for the image removed (counted once when
    /// two references name one image).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = limits::VERSION_MAX))]
    pub bytes_freed: Option<i64>,
    /// Why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub message: Option<String>,
}

impl RemovalStatus {
    /// Whether this answers `entry` (same job, same uid).
    pub fn answers(&self, entry: &RemovalEntry) -> bool {
        self.job == entry.job && self.uid == entry.uid
    }

    /// The node's part as the job counts it: failed if any image failed,
    /// kept if any was kept, else done (every image gone).
    pub fn verdict(&self) -> NodeRemoval {
        if self
            .images
            .iter()
            .any(|i| i.result == RemovalResult::Failed)
        {
            NodeRemoval::Failed
        } else if self.images.iter().any(|i| i.result.is_kept()) {
            NodeRemoval::Kept
        } else {
            NodeRemoval::Succeeded
        }
    }
}

/// How a removal job counts one node that answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRemoval {
    /// Every listed image is off the node.
    Succeeded,
    /// Some image stayed on purpose (in use, or kept by a rule); none failed.
    Kept,
    /// Some image's removal failed.
    Failed,
}

/// The answer in `statuses` to `entry`, if the node has given it.
pub fn answer_to<'a>(
    entry: &RemovalEntry,
    statuses: &'a [RemovalStatus],
) -> Option<&'a RemovalStatus> {
    statuses.iter().find(|s| s.answers(entry))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(result: RemovalResult) -> ImageRemoval {
        ImageRemoval {
            image: "r.example/app:v1".into(),
            result,
            reason: None,
            bytes_freed: None,
            message: None,
        }
    }

    #[test]
    fn a_node_counts_by_its_worst_image() {
        use RemovalResult::*;
        let rows: &[(&[RemovalResult], NodeRemoval)] = &[
            (&[Removed], NodeRemoval::Succeeded),
            (&[Removed, NotPresent], NodeRemoval::Succeeded),
            (&[Removed, InUse], NodeRemoval::Kept),
            (&[Skipped, NotPresent], NodeRemoval::Kept),
            (&[InUse, Failed], NodeRemoval::Failed),
            (&[Failed, Removed], NodeRemoval::Failed),
            (&[], NodeRemoval::Succeeded),
        ];
        for (results, want) in rows {
            let s = RemovalStatus {
                images: results.iter().map(|r| outcome(*r)).collect(),
                ..Default::default()
            };
            assert_eq!(s.verdict(), *want, "{results:?}");
        }
    }

    #[test]
    fn an_answer_belongs_to_one_job_incarnation() {
        let entry = RemovalEntry {
            job: "cve".into(),
            uid: "u2".into(),
            images: vec!["r.example/app:v1".into()],
            ..Default::default()
        };
        let older = RemovalStatus {
            job: "cve".into(),
            uid: "u1".into(),
            ..Default::default()
        };
        let other = RemovalStatus {
            job: "other".into(),
            uid: "u2".into(),
            ..Default::default()
        };
        let this = RemovalStatus {
            job: "cve".into(),
            uid: "u2".into(),
            ..Default::default()
        };
        assert_eq!(answer_to(&entry, &[older.clone(), other.clone()]), None);
        assert_eq!(
            answer_to(&entry, &[older, other, this.clone()]),
            Some(&this)
        );
    }
}
