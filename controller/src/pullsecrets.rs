//! Pull secrets made available to the node daemons: a job's secrets (in the
//! job's namespace) are copied into one namespace the daemons may read, one
//! shared copy per source secret, kept in sync with the source, and deleted
//! when no job refers to it any more.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use nodeimage_api::kruise::ReferenceObject;
use std::collections::{BTreeMap, BTreeSet};

/// Label on every copy, so copies can be listed.
pub const COPY_LABEL: &str = "nodeimage.dev/pull-secret-copy";
/// Annotation naming the source secret (`namespace/name`).
pub const SOURCE_ANNOTATION: &str = "nodeimage.dev/source";
/// Annotation listing the jobs using the copy (`kind/namespace/name`, comma-separated).
pub const REFERENCES_ANNOTATION: &str =
    nodeimage_api::kruise::nodeimage::SECRET_REFERENCES_ANNOTATION;

/// Why secrets could not be synced.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    /// The API refused a read or write.
    #[error("{action} secret {secret}: {source}")]
    Api {
        /// What was being done.
        action: &'static str,
        /// namespace/name.
        secret: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

/// Name of the copy of `namespace/name`: readable, unique, within 253 chars.
pub fn copy_name(namespace: &str, name: &str) -> String {
    let hash = fnv1a(format!("{namespace}/{name}").as_bytes());
    let prefix: String = format!("{namespace}.{name}").chars().take(240).collect();
    format!("{prefix}-{hash:08x}")
}

fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

/// The references list with `job` added or removed, sorted and deduplicated.
pub fn with_reference(existing: Option<&str>, job: &str, add: bool) -> String {
    let mut set: BTreeSet<&str> = existing
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    if add {
        set.insert(job);
    } else {
        set.remove(job);
    }
    set.into_iter().collect::<Vec<_>>().join(",")
}

/// Creates the daemons' secrets namespace if it does not exist.
pub async fn ensure_namespace(client: &kube::Client, ns: &str) -> Result<(), kube::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    if api.get_opt(ns).await?.is_some() {
        return Ok(());
    }
    let obj = Namespace {
        metadata: ObjectMeta {
            name: Some(ns.to_string()),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/part-of".to_string(),
                "nodeimage".to_string(),
            )])),
            ..Default::default()
        },
        ..Default::default()
    };
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {
            tracing::info!(namespace = ns, "created the daemons' secrets namespace");
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Copies each of `names` (in `namespace`) into `target_ns` for `job`.
/// Returns the copies to reference, and the names that do not exist.
pub async fn sync(
    client: &kube::Client,
    target_ns: &str,
    namespace: &str,
    names: &[String],
    job: &str,
) -> Result<(Vec<ReferenceObject>, Vec<String>), SecretsError> {
    let src_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let dst_api: Api<Secret> = Api::namespaced(client.clone(), target_ns);
    let mut refs = Vec::new();
    let mut missing = Vec::new();
    for name in names {
        let key = format!("{namespace}/{name}");
        let Some(src) = src_api
            .get_opt(name)
            .await
            .map_err(|source| SecretsError::Api {
                action: "reading",
                secret: key.clone(),
                source,
            })?
        else {
            missing.push(key);
            continue;
        };
        let copy = copy_name(namespace, name);
        let existing = dst_api
            .get_opt(&copy)
            .await
            .map_err(|source| SecretsError::Api {
                action: "reading",
                secret: format!("{target_ns}/{copy}"),
                source,
            })?;
        let refs_now = existing
            .as_ref()
            .and_then(|s| s.annotations().get(REFERENCES_ANNOTATION).cloned());
        let wanted_refs = with_reference(refs_now.as_deref(), job, true);
        let up_to_date = existing.as_ref().is_some_and(|e| {
            e.data == src.data
                && e.type_ == src.type_
                && refs_now.as_deref() == Some(wanted_refs.as_str())
        });
        if !up_to_date {
            let body = serde_json::json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": copy,
                    "namespace": target_ns,
                    "labels": {COPY_LABEL: "true"},
                    "annotations": {SOURCE_ANNOTATION: key, REFERENCES_ANNOTATION: wanted_refs},
                },
                "type": src.type_,
                "data": src.data,
            });
            dst_api
                .patch(
                    &copy,
                    &PatchParams::apply("nodeimage-pull-secrets").force(),
                    &Patch::Apply(&body),
                )
                .await
                .map_err(|source| SecretsError::Api {
                    action: "writing",
                    secret: format!("{target_ns}/{copy}"),
                    source,
                })?;
            tracing::info!(source = %key, copy = %copy, job, "pull secret copied for the daemons");
        }
        refs.push(ReferenceObject {
            namespace: Some(target_ns.to_string()),
            name: Some(copy),
            mode: None,
        });
    }
    Ok((refs, missing))
}

/// Removes `job` from every copy's references; deletes copies nobody uses.
pub async fn release(
    client: &kube::Client,
    target_ns: &str,
    job: &str,
) -> Result<(), SecretsError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), target_ns);
    let copies = api
        .list_metadata(&ListParams::default().labels(&format!("{COPY_LABEL}=true")))
        .await
        .map_err(|source| SecretsError::Api {
            action: "listing",
            secret: format!("{target_ns}/*"),
            source,
        })?;
    for c in copies {
        let refs = c.annotations().get(REFERENCES_ANNOTATION).cloned();
        if !refs
            .as_deref()
            .unwrap_or_default()
            .split(',')
            .any(|r| r == job)
        {
            continue;
        }
        let left = with_reference(refs.as_deref(), job, false);
        let name = c.name_any();
        let result = if left.is_empty() {
            api.delete(&name, &DeleteParams::default())
                .await
                .map(|_| ())
                .or_else(not_found_ok)
        } else {
            let patch = serde_json::json!({
                "metadata": {
                    "resourceVersion": c.resource_version(),
                    "annotations": {REFERENCES_ANNOTATION: left},
                }
            });
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .or_else(not_found_ok)
        };
        result.map_err(|source| SecretsError::Api {
            action: "releasing",
            secret: format!("{target_ns}/{name}"),
            source,
        })?;
        if left.is_empty() {
            tracing::info!(copy = %name, job, "pull secret copy deleted: no job uses it");
        }
    }
    Ok(())
}

fn not_found_ok(e: kube::Error) -> Result<(), kube::Error> {
    match e {
        kube::Error::Api(s) if s.code == 404 => Ok(()),
        other => Err(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_names_are_stable_unique_and_bounded() {
        assert_eq!(copy_name("ns", "s"), copy_name("ns", "s"));
        assert_ne!(copy_name("ns", "a.b"), copy_name("ns.a", "b"));
        assert!(copy_name(&"n".repeat(63), &"s".repeat(253)).len() <= 253);
        assert!(copy_name("ns", "s").starts_with("ns.s-"));
    }

    #[test]
    fn references_table() {
        assert_eq!(with_reference(None, "a", true), "a");
        assert_eq!(with_reference(Some("b,a"), "c", true), "a,b,c");
        assert_eq!(with_reference(Some("a,b"), "a", true), "a,b");
        assert_eq!(with_reference(Some("a,b"), "a", false), "b");
        assert_eq!(with_reference(Some("a"), "a", false), "");
        assert_eq!(with_reference(Some(""), "x", false), "");
    }
}
