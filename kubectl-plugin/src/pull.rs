//! `pull`: the ImagePullJob a user would write for "this image on these
//! nodes", built from the command line. Pure; main.rs creates it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use nodeimage_api::ImagePullJob;
use nodeimage_api::kruise::imagepulljob::{
    CompletionPolicy, CompletionPolicyType, ImagePullJobNodeSelector, ImagePullJobSpec,
    ImagePullJobTemplate,
};
use std::collections::BTreeMap;

/// Which nodes pull.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nodes {
    /// These nodes, by name.
    Names(Vec<String>),
    /// Nodes whose labels match, as `kubectl get nodes -l` takes them.
    Selector(String),
    /// Every node.
    All,
}

/// What the user asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The image.
    pub image: String,
    /// Where.
    pub nodes: Nodes,
    /// The job's namespace.
    pub namespace: String,
    /// The job's name; None lets the API server pick one from the image's name.
    pub name: Option<String>,
    /// Nodes pulling at once (the API's default, 1, when unset).
    pub parallelism: Option<u32>,
    /// Secrets of the namespace with registry credentials.
    pub pull_secrets: Vec<String>,
}

/// Why the request cannot become a job.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// `--nodes` named no node, or an empty one.
    #[error("--nodes: expected node names separated by commas, got {0:?}")]
    Nodes(String),
    /// A selector term this command does not understand.
    #[error(
        "--selector: cannot read {0:?}; use key=value, key!=value, key or !key, separated by commas"
    )]
    Selector(String),
    /// A name the API server would refuse.
    #[error("--name: {0:?} is not a valid object name")]
    Name(String),
    /// Above what the API takes.
    #[error("--parallelism: {0} is above 2147483647")]
    Parallelism(u32),
}

/// A label selector string (`a=b,c!=d,e,!f`) as the job's node selector.
pub fn parse_selector(s: &str) -> Result<ImagePullJobNodeSelector, RequestError> {
    let mut labels = BTreeMap::new();
    let mut exprs = Vec::new();
    let bad = || RequestError::Selector(s.to_string());
    let terms: Vec<&str> = s.split(',').map(str::trim).collect();
    if terms.iter().all(|t| t.is_empty()) {
        return Err(bad());
    }
    for term in terms {
        if term.is_empty() || term.contains(['(', ')', ' ']) {
            return Err(bad());
        }
        let req = |key: &str, op: &str, values: Option<Vec<String>>| LabelSelectorRequirement {
            key: key.trim().to_string(),
            operator: op.to_string(),
            values,
        };
        if let Some((k, v)) = term.split_once("!=") {
            exprs.push(req(k, "NotIn", Some(vec![v.trim().to_string()])));
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            if k.trim().is_empty() {
                return Err(bad());
            }
            labels.insert(k.trim().to_string(), v.trim().to_string());
        } else if let Some(k) = term.strip_prefix('!') {
            exprs.push(req(k, "DoesNotExist", None));
        } else {
            exprs.push(req(term, "Exists", None));
        }
    }
    if exprs
        .iter()
        .any(|e| e.key.is_empty() || e.key.contains(['=', '!']))
    {
        return Err(bad());
    }
    Ok(ImagePullJobNodeSelector {
        names: None,
        match_labels: (!labels.is_empty()).then_some(labels),
        match_expressions: (!exprs.is_empty()).then_some(exprs),
    })
}

/// The prefix of a generated job name: the image's last path component
/// (without tag or digest), as DNS label characters.
pub fn name_prefix(image: &str) -> String {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    let repo = last.split(':').next().unwrap_or(last);
    let mut out = String::new();
    for c in repo.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out: String = out.trim_matches('-').chars().take(40).collect();
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out = "pull".into();
    }
    format!("{out}-")
}

/// The ImagePullJob for `req`: completion policy Always, so it finishes.
pub fn job(req: &Request) -> Result<ImagePullJob, RequestError> {
    let selector = match &req.nodes {
        Nodes::All => None,
        Nodes::Selector(s) => Some(parse_selector(s)?),
        Nodes::Names(names) => {
            let names: Vec<String> = names.iter().map(|n| n.trim().to_string()).collect();
            if names.is_empty() || names.iter().any(String::is_empty) {
                return Err(RequestError::Nodes(req_nodes_text(&req.nodes)));
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
        Some(p) => Some(IntOrString::Int(
            i32::try_from(p).map_err(|_| RequestError::Parallelism(p))?,
        )),
    };
    let metadata = ObjectMeta {
        name: req.name.clone(),
        generate_name: req.name.is_none().then(|| name_prefix(&req.image)),
        namespace: Some(req.namespace.clone()),
        ..ObjectMeta::default()
    };
    let spec = ImagePullJobSpec {
        image: req.image.clone(),
        template: ImagePullJobTemplate {
            pull_secrets: (!req.pull_secrets.is_empty()).then(|| req.pull_secrets.clone()),
            selector,
            parallelism,
            completion_policy: Some(CompletionPolicy {
                type_: Some(CompletionPolicyType::Always),
                ..CompletionPolicy::default()
            }),
            ..ImagePullJobTemplate::default()
        },
    };
    let mut job = ImagePullJob::new("", spec);
    job.metadata = metadata;
    Ok(job)
}

fn req_nodes_text(n: &Nodes) -> String {
    match n {
        Nodes::Names(v) => v.join(","),
        Nodes::Selector(s) => s.clone(),
        Nodes::All => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(nodes: Nodes) -> Request {
        Request {
            image: "registry.example.com:5000/team/app:v1".into(),
            nodes,
            namespace: "ns".into(),
            name: None,
            parallelism: None,
            pull_secrets: vec![],
        }
    }

    #[test]
    fn jobs() {
        let cases = vec![
            (
                "every node, generated name",
                request(Nodes::All),
                json!({
                    "apiVersion": "apps.kruise.io/v1alpha1",
                    "kind": "ImagePullJob",
                    "metadata": {"generateName": "app-", "namespace": "ns"},
                    "spec": {"image": "registry.example.com:5000/team/app:v1", "completionPolicy": {"type": "Always"}},
                }),
            ),
            (
                "names, a name, parallelism and secrets",
                Request {
                    name: Some("warm-app".into()),
                    parallelism: Some(2),
                    pull_secrets: vec!["regcred".into()],
                    ..request(Nodes::Names(vec!["node-1".into(), " node-2".into()]))
                },
                json!({
                    "apiVersion": "apps.kruise.io/v1alpha1",
                    "kind": "ImagePullJob",
                    "metadata": {"name": "warm-app", "namespace": "ns"},
                    "spec": {
                        "image": "registry.example.com:5000/team/app:v1",
                        "selector": {"names": ["node-1", "node-2"]},
                        "parallelism": 2,
                        "pullSecrets": ["regcred"],
                        "completionPolicy": {"type": "Always"},
                    },
                }),
            ),
            (
                "a selector",
                request(Nodes::Selector("pool=gpu,zone!=b,ssd,!tainted".into())),
                json!({
                    "apiVersion": "apps.kruise.io/v1alpha1",
                    "kind": "ImagePullJob",
                    "metadata": {"generateName": "app-", "namespace": "ns"},
                    "spec": {
                        "image": "registry.example.com:5000/team/app:v1",
                        "selector": {
                            "matchLabels": {"pool": "gpu"},
                            "matchExpressions": [
                                {"key": "zone", "operator": "NotIn", "values": ["b"]},
                                {"key": "ssd", "operator": "Exists"},
                                {"key": "tainted", "operator": "DoesNotExist"},
                            ],
                        },
                        "completionPolicy": {"type": "Always"},
                    },
                }),
            ),
        ];
        for (name, req, want) in cases {
            let got = serde_json::to_value(job(&req).expect("a job")).expect("JSON");
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn refused_requests() {
        let cases = vec![
            (
                request(Nodes::Names(vec![])),
                RequestError::Nodes(String::new()),
            ),
            (
                request(Nodes::Names(vec!["a".into(), "".into()])),
                RequestError::Nodes("a,".into()),
            ),
            (
                request(Nodes::Selector("".into())),
                RequestError::Selector("".into()),
            ),
            (
                request(Nodes::Selector("a=b,".into())),
                RequestError::Selector("a=b,".into()),
            ),
            (
                request(Nodes::Selector("zone in (a,b)".into())),
                RequestError::Selector("zone in (a,b)".into()),
            ),
            (
                request(Nodes::Selector("=b".into())),
                RequestError::Selector("=b".into()),
            ),
            (
                Request {
                    name: Some("Bad_Name".into()),
                    ..request(Nodes::All)
                },
                RequestError::Name("Bad_Name".into()),
            ),
            (
                Request {
                    parallelism: Some(u32::MAX),
                    ..request(Nodes::All)
                },
                RequestError::Parallelism(u32::MAX),
            ),
        ];
        for (req, want) in cases {
            assert_eq!(job(&req).expect_err("refused"), want, "{req:?}");
        }
    }

    #[test]
    fn name_prefixes() {
        let cases = [
            ("nginx", "nginx-"),
            ("nginx:1.25", "nginx-"),
            ("127.0.0.1:5000/e2e/Big_Image:v1", "big-image-"),
            ("r/app@sha256:0123", "app-"),
            ("r/__", "pull-"),
            (
                &*format!("r/{}", "x".repeat(60)),
                &*format!("{}-", "x".repeat(40)),
            ),
        ];
        for (image, want) in cases {
            assert_eq!(name_prefix(image), want, "{image}");
        }
    }
}
