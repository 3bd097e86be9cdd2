//! `remove` and `status irj/NAME`: the ImageRemovalJob a user would write
//! for "take these images off these nodes", and one row per node of a
//! removal job, read from the nodes' NodeImages. Pure; main.rs creates the
//! job and reads the objects.

use crate::pull::{Nodes, RequestError, name_prefix, parse_selector};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use nodeimage_api::NodeImage;
use nodeimage_api::kruise::imagepulljob::ImagePullJobNodeSelector;
use nodeimage_api::nodeimage_dev::{ImageRemovalJob, ImageRemovalJobSpec, NodeRemoval, answer_to};
use serde::Serialize;

/// What the user asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The images, by tag or digest.
    pub images: Vec<String>,
    /// Where.
    pub nodes: Nodes,
    /// The job's name; None lets the API server pick one.
    pub name: Option<String>,
    /// Nodes removing at once (the API's default, 1, when unset).
    pub parallelism: Option<u32>,
    /// Remove even what a pull entry on the node wants.
    pub force: bool,
    /// Keep the digests off the nodes while the job exists.
    pub block: bool,
}

/// The ImageRemovalJob for `req` (the API server checks the images).
pub fn job(req: &Request) -> Result<ImageRemovalJob, RequestError> {
    let selector = match &req.nodes {
        Nodes::All => None,
        Nodes::Selector(s) => Some(parse_selector(s)?),
        Nodes::Names(names) => {
            let names: Vec<String> = names.iter().map(|n| n.trim().to_string()).collect();
            if names.is_empty() || names.iter().any(String::is_empty) {
                return Err(RequestError::Nodes(names.join(",")));
            }
            Some(ImagePullJobNodeSelector {
                names: Some(names),
                ..ImagePullJobNodeSelector::default()
            })
        }
    };
    if let Some(n) = &req.name
        && !crate::target::is_object_name(n)
    {
        return Err(RequestError::Name(n.clone()));
    }
    let parallelism = match req.parallelism {
        None => None,
        Some(p) => Some(i32::try_from(p).map_err(|_| RequestError::Parallelism(p))?),
    };
    let first = req.images.first().map(String::as_str).unwrap_or_default();
    let mut job = ImageRemovalJob::new(
        "",
        ImageRemovalJobSpec {
            images: req.images.clone(),
            selector,
            parallelism,
            active_deadline_seconds: None,
            ttl_seconds_after_finished: None,
            force: req.force.then_some(true),
            block: req.block.then_some(true),
        },
    );
    job.metadata = ObjectMeta {
        name: req.name.clone(),
        generate_name: req
            .name
            .is_none()
            .then(|| format!("remove-{}", name_prefix(first))),
        ..ObjectMeta::default()
    };
    Ok(job)
}

/// The name of a removal job in `status`'s target (`irj/NAME`,
/// `imageremovaljob/NAME`, or the kind and the name as two words).
pub fn parse_target(target: &str, name: Option<&str>) -> Option<String> {
    let kinds = ["irj", "imageremovaljob", "imageremovaljobs"];
    match (target.split_once('/'), name) {
        (Some((kind, n)), None) if kinds.contains(&kind.to_ascii_lowercase().as_str()) => {
            Some(n.to_string())
        }
        (None, Some(n)) if kinds.contains(&target.to_ascii_lowercase().as_str()) => {
            Some(n.to_string())
        }
        _ => None,
    }
}

/// One node of a removal job.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The node.
    pub node: String,
    /// Removing, Succeeded, Kept or Failed.
    pub result: String,
    /// Bytes its runtime reported freed.
    pub bytes_freed: i64,
    /// Each image that is not simply gone, with its result and why.
    pub message: String,
}

/// The rows of `job`: the nodes holding its entry, by name.
pub fn rows(job: &ImageRemovalJob, nodeimages: &[NodeImage]) -> Vec<Row> {
    let uid = job.uid().unwrap_or_default();
    let mut out: Vec<Row> = nodeimages
        .iter()
        .filter_map(|ni| {
            let entry = ni.spec.removals.iter().flatten().find(|e| e.uid == uid)?;
            let answers = ni.status.as_ref().and_then(|s| s.removals.as_deref());
            let Some(a) = answer_to(entry, answers.unwrap_or_default()) else {
                return Some(Row {
                    node: ni.name_any(),
                    result: "Removing".into(),
                    bytes_freed: 0,
                    message: String::new(),
                });
            };
            let result = match a.verdict() {
                NodeRemoval::Succeeded => "Succeeded",
                NodeRemoval::Kept => "Kept",
                NodeRemoval::Failed => "Failed",
            };
            let message: Vec<String> = a
                .images
                .iter()
                .filter(|i| !i.result.is_gone())
                .map(|i| {
                    format!(
                        "{}: {:?} ({})",
                        i.image,
                        i.result,
                        i.message.as_deref().unwrap_or_default()
                    )
                })
                .collect();
            Some(Row {
                node: ni.name_any(),
                result: result.into(),
                bytes_freed: a.images.iter().filter_map(|i| i.bytes_freed).sum(),
                message: message.join("; "),
            })
        })
        .collect();
    out.sort_by(|a, b| a.node.cmp(&b.node));
    out
}

/// The table: the job's message, then one line per node.
pub fn table(job: &ImageRemovalJob, rows: &[Row]) -> String {
    let status = job.status.clone().unwrap_or_default();
    let mut out = format!(
        "imageremovaljob/{}: {}\n",
        job.name_any(),
        status.message.as_deref().unwrap_or("not started")
    );
    let width = rows.iter().map(|r| r.node.len()).max().unwrap_or(4).max(4);
    out.push_str(&format!(
        "{:<width$}  {:<9}  {:>12}  MESSAGE\n",
        "NODE", "RESULT", "BYTES-FREED"
    ));
    for r in rows {
        out.push_str(&format!(
            "{:<width$}  {:<9}  {:>12}  {}\n",
            r.node, r.result, r.bytes_freed, r.message
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use nodeimage_api::kruise::NodeImageStatus;
    use nodeimage_api::nodeimage_dev::{ImageRemoval, RemovalEntry, RemovalResult, RemovalStatus};
    use serde_json::json;

    fn request(nodes: Nodes) -> Request {
        Request {
            images: vec!["registry.example.com/team/app@sha256:00".into()],
            nodes,
            name: None,
            parallelism: None,
            force: false,
            block: false,
        }
    }

    #[test]
    fn jobs() {
        let got = serde_json::to_value(job(&request(Nodes::All)).expect("a job")).expect("JSON");
        assert_eq!(
            got,
            json!({"apiVersion": "nodeimage.dev/v1alpha1", "kind": "ImageRemovalJob",
                "metadata": {"generateName": "remove-app-"},
                "spec": {"images": ["registry.example.com/team/app@sha256:00"]}})
        );
        let req = Request {
            name: Some("cve".into()),
            parallelism: Some(5),
            force: true,
            block: true,
            ..request(Nodes::Selector("pool=gpu".into()))
        };
        let got = serde_json::to_value(job(&req).expect("a job")).expect("JSON");
        assert_eq!(
            got["spec"],
            json!({"images": ["registry.example.com/team/app@sha256:00"],
                "selector": {"matchLabels": {"pool": "gpu"}}, "parallelism": 5,
                "force": true, "block": true})
        );
        assert_eq!(got["metadata"], json!({"name": "cve"}));
        for (bad, want) in [
            (
                request(Nodes::Names(vec![])),
                RequestError::Nodes(String::new()),
            ),
            (
                Request {
                    name: Some("Bad_Name".into()),
                    ..request(Nodes::All)
                },
                RequestError::Name("Bad_Name".into()),
            ),
        ] {
            assert_eq!(job(&bad).expect_err("refused"), want);
        }
    }

    #[test]
    fn targets() {
        let cases = [
            ("irj/cve", None, Some("cve")),
            ("ImageRemovalJob/cve", None, Some("cve")),
            ("imageremovaljob", Some("cve"), Some("cve")),
            ("ipj/cve", None, None),
            ("irj", None, None),
        ];
        for (t, n, want) in cases {
            assert_eq!(parse_target(t, n).as_deref(), want, "{t} {n:?}");
        }
    }

    #[test]
    fn rows_from_the_nodes() {
        let mut j = job(&Request {
            name: Some("cve".into()),
            ..request(Nodes::All)
        })
        .expect("a job");
        j.metadata.uid = Some("u1".into());
        let entry = |uid: &str| RemovalEntry {
            job: "cve".into(),
            uid: uid.into(),
            images: vec!["r/app:v1".into()],
            ..Default::default()
        };
        let node = |name: &str, uid: &str, answer: Option<RemovalResult>| {
            let mut ni = NodeImage::new(name, Default::default());
            ni.spec.removals = Some(vec![entry(uid)]);
            ni.status = answer.map(|r| NodeImageStatus {
                removals: Some(vec![RemovalStatus {
                    job: "cve".into(),
                    uid: uid.into(),
                    images: vec![ImageRemoval {
                        image: "r/app:v1".into(),
                        result: r,
                        reason: None,
                        bytes_freed: (r == RemovalResult::Removed).then_some(42),
                        message: Some("why".into()),
                    }],
                    completion_time: None,
                }]),
                ..Default::default()
            });
            ni
        };
        let nodes = [
            node("n3", "u1", Some(RemovalResult::InUse)),
            node("n1", "u1", Some(RemovalResult::Removed)),
            node("n2", "u1", None),
            node("old", "u0", Some(RemovalResult::Removed)),
        ];
        let got = rows(&j, &nodes);
        let short: Vec<(&str, &str, i64, &str)> = got
            .iter()
            .map(|r| {
                (
                    r.node.as_str(),
                    r.result.as_str(),
                    r.bytes_freed,
                    r.message.as_str(),
                )
            })
            .collect();
        assert_eq!(
            short,
            vec![
                ("n1", "Succeeded", 42, ""),
                ("n2", "Removing", 0, ""),
                ("n3", "Kept", 0, "r/app:v1: InUse (why)"),
            ]
        );
        assert!(
            table(&j, &got).contains("n3    Kept"),
            "{}",
            table(&j, &got)
        );
    }
}
