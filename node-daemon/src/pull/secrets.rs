//! The pull secrets a tag names, read from the API each on its own.

use crate::credentials;
use crate::desired::SecretRef;
use k8s_openapi::api::core::v1::Secret;

/// Reads every listed secret, each on its own: a missing or unreadable one
/// is reported as such, never stops the others (see `credentials::select`).
pub(super) async fn load(client: &kube::Client, secrets: &[SecretRef]) -> Vec<credentials::Loaded> {
    let mut out = Vec::new();
    for s in secrets {
        let api: kube::Api<Secret> = kube::Api::namespaced(client.clone(), &s.namespace);
        let loaded = match api.get_opt(&s.name).await {
            Ok(Some(secret)) => found(s, secret),
            Ok(None) => credentials::Loaded::Missing {
                secret: s.to_string(),
            },
            Err(e) => credentials::Loaded::Unreadable {
                secret: s.to_string(),
                reason: describe_api_error(&e),
            },
        };
        out.push(loaded);
    }
    out
}

/// The credentials of a secret that was read, and the images it is for.
fn found(s: &SecretRef, secret: Secret) -> credentials::Loaded {
    let references = kube::ResourceExt::annotations(&secret)
        .get(nodeimage_api::kruise::nodeimage::SECRET_REFERENCES_ANNOTATION)
        .map(|a| credentials::references(a));
    let data = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    credentials::Loaded::Found {
        references,
        creds: credentials::parse_secret(&s.to_string(), secret.type_.as_deref(), &data),
    }
}

fn describe_api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} ({})", s.message, s.code),
        other => other.to_string(),
    }
}
