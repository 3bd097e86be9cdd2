//! `status deploy/NAME` (or `sts/`, `ds/`): the pre-download jobs a
//! workload owns now, found by the label nodeimage puts on them (its UID),
//! each then shown as `status ipj/JOB` shows it.

use crate::Error;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use nodeimage_api::ImagePullJob;
use nodeimage_api::predownload::WORKLOAD_UID_LABEL;

/// The workload kinds pre-download follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
}

impl Workload {
    /// The kind named by `word` as kubectl accepts it (singular, plural or
    /// short name, any case, optionally `.apps`).
    pub fn parse(word: &str) -> Option<Workload> {
        let lower = word.to_ascii_lowercase();
        let resource = lower
            .strip_suffix(".apps")
            .or_else(|| lower.strip_suffix(".v1.apps"))
            .unwrap_or(&lower);
        match resource {
            "deployment" | "deployments" | "deploy" => Some(Workload::Deployment),
            "statefulset" | "statefulsets" | "sts" => Some(Workload::StatefulSet),
            "daemonset" | "daemonsets" | "ds" => Some(Workload::DaemonSet),
            _ => None,
        }
    }

    /// The kind as the API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Deployment => "Deployment",
            Workload::StatefulSet => "StatefulSet",
            Workload::DaemonSet => "DaemonSet",
        }
    }
}

/// Reads `KIND/NAME` (or `KIND NAME`) naming a workload; None for anything else.
pub fn parse(first: &str, second: Option<&str>) -> Option<(Workload, String)> {
    let (kind, name) = match (first.split_once('/'), second) {
        (Some((kind, name)), None) => (kind, name),
        (None, Some(name)) => (first, name),
        _ => return None,
    };
    let w = Workload::parse(kind)?;
    crate::target::is_object_name(name).then(|| (w, name.to_string()))
}

/// The names of the pre-download ImagePullJobs `name` owns in `namespace`, sorted.
pub async fn jobs_of(
    client: &Client,
    w: Workload,
    name: &str,
    namespace: &str,
) -> Result<Vec<String>, Error> {
    let got = match w {
        Workload::Deployment => Api::<Deployment>::namespaced(client.clone(), namespace)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.uid()),
        Workload::StatefulSet => Api::<StatefulSet>::namespaced(client.clone(), namespace)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.uid()),
        Workload::DaemonSet => Api::<DaemonSet>::namespaced(client.clone(), namespace)
            .get_metadata_opt(name)
            .await?
            .map(|m| m.uid()),
    };
    let Some(uid) = got.flatten() else {
        return Err(Error::WorkloadNotFound {
            kind: w.as_str(),
            namespace: namespace.to_string(),
            name: name.to_string(),
        });
    };
    let jobs: Api<ImagePullJob> = Api::namespaced(client.clone(), namespace);
    let listed = jobs
        .list_metadata(&ListParams::default().labels(&format!("{WORKLOAD_UID_LABEL}={uid}")))
        .await?;
    let mut names: Vec<String> = listed.items.iter().map(|j| j.name_any()).collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_targets() {
        let cases = [
            ("deploy/web", None, Some((Workload::Deployment, "web"))),
            (
                "deployments.apps/web",
                None,
                Some((Workload::Deployment, "web")),
            ),
            (
                "Deployment",
                Some("web"),
                Some((Workload::Deployment, "web")),
            ),
            ("sts/db-0", None, Some((Workload::StatefulSet, "db-0"))),
            (
                "daemonset/agent",
                None,
                Some((Workload::DaemonSet, "agent")),
            ),
            ("ds/Agent", None, None),
            ("ipj/web", None, None),
            ("deploy", None, None),
        ];
        for (first, second, want) in cases {
            let want = want.map(|(w, n)| (w, n.to_string()));
            assert_eq!(parse(first, second), want, "{first:?} {second:?}");
        }
    }
}
