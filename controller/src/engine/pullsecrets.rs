//! Pull secrets made available to the node daemons: a job's secrets (in the
//! job's namespace) are copied into one namespace the daemons may read, one
//! shared copy per source secret, kept in sync with the source, and deleted
//! when no job refers to it any more. Only registry credentials are ever
//! copied ([`is_registry_credential`]): any other Secret a job names is
//! refused, so a job cannot make the controller hand a tenant's Opaque or
//! TLS Secret to every node daemon.

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{
    Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
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
    /// The copy could not be built from the source secret.
    #[error("encoding secret {secret}: {source}")]
    Encode {
        /// namespace/name of the copy.
        secret: String,
        /// The encoding error.
        #[source]
        source: serde_json::Error,
    },
    /// Other writers kept changing the copy between our read and write.
    #[error("secret {secret} changed under every one of {attempts} writes; will retry")]
    Contended {
        /// namespace/name of the copy.
        secret: String,
        /// Writes tried.
        attempts: usize,
    },
}

/// The Secret types that hold registry credentials, as kubelet reads them.
pub const REGISTRY_CREDENTIAL_TYPES: [&str; 2] =
    ["kubernetes.io/dockerconfigjson", "kubernetes.io/dockercfg"];

/// Whether a Secret of `type_` may be copied for the daemons (a Secret
/// without a type is Opaque).
pub fn is_registry_credential(type_: Option<&str>) -> bool {
    type_.is_some_and(|t| REGISTRY_CREDENTIAL_TYPES.contains(&t))
}

/// A Secret a job named that is not a registry credential: never copied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    /// `namespace/name` of the source.
    pub secret: String,
    /// Its type as read (`Opaque` when unset).
    pub type_: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pull secret {} has type {}, not a registry credential ({}); it is not used",
            self.secret,
            self.type_,
            REGISTRY_CREDENTIAL_TYPES.join(" or ")
        )
    }
}

/// What one sync found: the copies to reference, the secrets that do not
/// exist, and the ones refused by type.
#[derive(Debug, Default)]
pub struct Synced {
    /// Copies the daemons may read.
    pub refs: Vec<ReferenceObject>,
    /// `namespace/name` of each named secret that does not exist.
    pub missing: Vec<String>,
    /// Named secrets that are not registry credentials.
    pub refused: Vec<Refused>,
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

/// Copies each of `names` (in `namespace`) into `target_ns` for `job`;
/// a named secret that is not a registry credential is refused (and the
/// job's reference to an earlier copy of it dropped).
pub async fn sync(
    client: &kube::Client,
    target_ns: &str,
    namespace: &str,
    names: &[String],
    job: &str,
) -> Result<Synced, SecretsError> {
    let src_api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let dst_api: Api<Secret> = Api::namespaced(client.clone(), target_ns);
    let mut out = Synced::default();
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
            out.missing.push(key);
            continue;
        };
        let copy = copy_name(namespace, name);
        if !is_registry_credential(src.type_.as_deref()) {
            let type_ = src.type_.clone().unwrap_or_else(|| "Opaque".into());
            tracing::warn!(secret = %key, %type_, job, "pull secret refused: not a registry credential");
            drop_reference(&dst_api, &copy, job).await?;
            out.refused.push(Refused { secret: key, type_ });
            continue;
        }
        write_copy(&dst_api, &src, &key, &copy, job).await?;
        out.refs.push(ReferenceObject {
            namespace: Some(target_ns.to_string()),
            name: Some(copy),
            mode: None,
        });
    }
    Ok(out)
}

/// Takes `job` out of the references of `copy`, if it exists (a source
/// that changed type since it was copied); deletes the copy if unused.
async fn drop_reference(api: &Api<Secret>, copy: &str, job: &str) -> Result<(), SecretsError> {
    let target_ns = api.namespace().unwrap_or_default().to_string();
    let found = api
        .get_metadata_opt(copy)
        .await
        .map_err(|source| SecretsError::Api {
            action: "reading",
            secret: format!("{target_ns}/{copy}"),
            source,
        })?;
    match found {
        Some(c) => release_one(api, &target_ns, &c.metadata, job).await,
        None => Ok(()),
    }
}

/// Most conditional writes of one copy before giving up to the error policy.
const COPY_WRITE_ATTEMPTS: usize = 5;

/// Writes `copy` of `src` with `job` among its references. Every write is
/// conditional (create, or the resourceVersion read), so two jobs adding
/// themselves to the same copy at once cannot lose one of the references.
async fn write_copy(
    api: &Api<Secret>,
    src: &Secret,
    key: &str,
    copy: &str,
    job: &str,
) -> Result<(), SecretsError> {
    let ns = api.namespace().unwrap_or_default().to_string();
    let failed = |action: &'static str| {
        let secret = format!("{ns}/{copy}");
        move |source| SecretsError::Api {
            action,
            secret,
            source,
        }
    };
    for _ in 0..COPY_WRITE_ATTEMPTS {
        let existing = api.get_opt(copy).await.map_err(failed("reading"))?;
        let refs_now = existing
            .as_ref()
            .and_then(|s| s.annotations().get(REFERENCES_ANNOTATION).cloned());
        let wanted_refs = with_reference(refs_now.as_deref(), job, true);
        let up_to_date = existing.as_ref().is_some_and(|e| {
            e.data == src.data
                && e.type_ == src.type_
                && refs_now.as_deref() == Some(wanted_refs.as_str())
        });
        if up_to_date {
            return Ok(());
        }
        let mut body = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": copy,
                "namespace": ns,
                "labels": {COPY_LABEL: "true"},
                "annotations": {SOURCE_ANNOTATION: key, REFERENCES_ANNOTATION: wanted_refs},
            },
            "type": src.type_,
            "data": src.data,
        });
        let written = match existing.as_ref().and_then(|e| e.resource_version()) {
            Some(rv) => {
                body["metadata"]["resourceVersion"] = rv.into();
                api.patch(
                    copy,
                    &PatchParams::apply("nodeimage-pull-secrets").force(),
                    &Patch::Apply(&body),
                )
                .await
                .map(|_| ())
            }
            None => match serde_json::from_value::<Secret>(body) {
                Ok(new) => api.create(&PostParams::default(), &new).await.map(|_| ()),
                Err(e) => {
                    return Err(SecretsError::Encode {
                        secret: format!("{ns}/{copy}"),
                        source: e,
                    });
                }
            },
        };
        match written {
            Ok(()) => {
                tracing::info!(source = %key, copy = %copy, job, "pull secret copied for the daemons");
                return Ok(());
            }
            // Someone else wrote the copy since it was read: read it again.
            Err(kube::Error::Api(ae)) if ae.code == 409 => continue,
            Err(e) => return Err(failed("writing")(e)),
        }
    }
    Err(SecretsError::Contended {
        secret: format!("{ns}/{copy}"),
        attempts: COPY_WRITE_ATTEMPTS,
    })
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
        release_one(&api, target_ns, &c.metadata, job).await?;
    }
    Ok(())
}

/// Removes `job` from the references of the copy `c`; deletes the copy
/// when nobody uses it any more. Every write is conditional on the version
/// read; when another job's write came first, the copy is read again (jobs
/// over many nodes are often deleted together, all releasing one copy).
async fn release_one(
    api: &Api<Secret>,
    target_ns: &str,
    c: &ObjectMeta,
    job: &str,
) -> Result<(), SecretsError> {
    let name = c.name.clone().unwrap_or_default();
    let failed = |action: &'static str| {
        let secret = format!("{target_ns}/{name}");
        move |source| SecretsError::Api {
            action,
            secret,
            source,
        }
    };
    let mut read = c.clone();
    for _ in 0..COPY_WRITE_ATTEMPTS {
        match release_from(api, &name, &read, job).await {
            Ok(()) => return Ok(()),
            Err(kube::Error::Api(ae)) if ae.code == 409 => {
                match api
                    .get_metadata_opt(&name)
                    .await
                    .map_err(failed("reading"))?
                {
                    Some(fresh) => read = fresh.metadata,
                    None => return Ok(()),
                }
            }
            Err(e) => return Err(failed("releasing")(e)),
        }
    }
    Err(SecretsError::Contended {
        secret: format!("{target_ns}/{name}"),
        attempts: COPY_WRITE_ATTEMPTS,
    })
}

/// One conditional write taking `job` out of the copy `name` as `read`
/// last saw it: the copy goes when no reference is left.
async fn release_from(
    api: &Api<Secret>,
    name: &str,
    read: &ObjectMeta,
    job: &str,
) -> Result<(), kube::Error> {
    let refs = read
        .annotations
        .as_ref()
        .and_then(|a| a.get(REFERENCES_ANNOTATION))
        .cloned();
    if !refs
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .any(|r| r == job)
    {
        return Ok(());
    }
    let left = with_reference(refs.as_deref(), job, false);
    if left.is_empty() {
        // Only the version read: a job that added itself meanwhile keeps it.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: read.resource_version.clone(),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        api.delete(name, &params)
            .await
            .map(|_| ())
            .or_else(not_found_ok)?;
        tracing::info!(copy = %name, job, "pull secret copy deleted: no job uses it");
        return Ok(());
    }
    let patch = serde_json::json!({
        "metadata": {
            "resourceVersion": read.resource_version,
            "annotations": {REFERENCES_ANNOTATION: left},
        }
    });
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .or_else(not_found_ok)
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
    fn only_registry_credentials_are_copied() {
        for (type_, ok) in [
            (Some("kubernetes.io/dockerconfigjson"), true),
            (Some("kubernetes.io/dockercfg"), true),
            (Some("Opaque"), false),
            (Some("kubernetes.io/tls"), false),
            (Some("kubernetes.io/service-account-token"), false),
            (Some("kubernetes.io/basic-auth"), false),
            (Some("Kubernetes.io/DockerConfigJson"), false),
            (Some(""), false),
            (None, false),
        ] {
            assert_eq!(is_registry_credential(type_), ok, "{type_:?}");
        }
        let r = Refused {
            secret: "ns/tls".into(),
            type_: "kubernetes.io/tls".into(),
        };
        assert_eq!(
            r.to_string(),
            "pull secret ns/tls has type kubernetes.io/tls, not a registry credential \
             (kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg); it is not used"
        );
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
