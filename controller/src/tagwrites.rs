//! The writes a job controller makes outside its own status: edits of a
//! NodeImage's `spec.images` (its tag entries) guarded by the spec the edit
//! was computed from, and its finalizer.
//! Shared shell for the job kinds; the edits themselves are in `entries`.

use crate::entries;
use crate::patch::{self, PatchError};
use kube::api::{Api, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use nodeimage_api::kruise::{ImageSpec, NodeImage};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::fmt::Debug;

/// Why a write failed.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// Someone wrote the object between our read and our write; re-plan.
    #[error("{0} changed while writing; retrying")]
    Conflict(String),
    /// An API call failed.
    #[error("{action}: {source}")]
    Api {
        /// What was being done.
        action: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The patch could not be built.
    #[error(transparent)]
    Patch(#[from] PatchError),
}

/// Tries an entry write makes before giving up with a conflict: the first
/// from the cache, the rest from fresh reads, the last guarded by
/// resourceVersion (in case the spec read back never compares equal).
const ATTEMPTS: usize = 4;

/// Applies `edit` to a copy of `ni`'s `spec.images` and, if it reports a
/// change, writes the result guarded by the spec it was computed from (a
/// JSON Patch `test`, so the node's status writes do not void it). When the
/// spec moved (another job wrote), the edit is redone on a fresh read. A
/// NodeImage that is gone is not an error (its node left).
pub async fn edit_images(
    client: &kube::Client,
    ni: &NodeImage,
    what: &str,
    edit: impl Fn(&NodeImage, &mut BTreeMap<String, ImageSpec>) -> bool,
) -> Result<(), WriteError> {
    let node = ni.name_any();
    let api: Api<NodeImage> = Api::all(client.clone());
    let api_err = |source| WriteError::Api {
        action: format!("{what} in NodeImage {node}"),
        source,
    };
    let mut fresh: Option<NodeImage> = None;
    for attempt in 1..=ATTEMPTS {
        let current = fresh.as_ref().unwrap_or(ni);
        let old = current.spec.images.clone().unwrap_or_default();
        let mut new = old.clone();
        if !edit(current, &mut new) || old == new {
            return Ok(());
        }
        let result = if attempt < ATTEMPTS {
            let body = patch::spec_tested(&current.spec, &new)?;
            api.patch(&node, &PatchParams::default(), &Patch::Json::<()>(body))
                .await
        } else {
            tracing::info!(nodeimage = %node, attempts = ATTEMPTS - 1, "spec kept moving under an entry write; guarding the last try by resourceVersion");
            let Some(body) = patch::guarded(
                "spec.images",
                current.resource_version().as_deref(),
                &["spec", "images"],
                &old,
                &new,
            )?
            else {
                return Ok(());
            };
            api.patch(&node, &PatchParams::default(), &Patch::Merge(&body))
                .await
        };
        match result {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 || is_failed_test(&e) => {
                tracing::debug!(nodeimage = %node, attempt, "spec moved under an entry write; reading it again");
            }
            Err(source) => return Err(api_err(source)),
        }
        match api.get_opt(&node).await {
            Ok(Some(n)) => fresh = Some(n),
            Ok(None) => return Ok(()),
            Err(source) => return Err(api_err(source)),
        }
    }
    Err(WriteError::Conflict(format!("NodeImage {node}")))
}

/// Whether the API server refused a JSON Patch because an operation (our
/// `test`) failed. It answers 422 with no details; a schema or CEL
/// rejection of the result is also 422 but names the object and its causes.
pub fn is_failed_test(e: &kube::core::Status) -> bool {
    e.code == 422
        && e.details
            .as_ref()
            .is_none_or(|d| d.name.is_empty() && d.causes.is_empty())
}

/// Takes the entries owned by `uid` out of `ni` (see [`entries::release`]).
pub async fn release(client: &kube::Client, ni: &NodeImage, uid: &str) -> Result<(), WriteError> {
    if !entries::owns_any(ni.spec.images.as_ref().unwrap_or(&BTreeMap::new()), uid) {
        return Ok(());
    }
    edit_images(client, ni, "releasing entries", |_, images| {
        entries::release(images, uid)
    })
    .await
}

/// Adds (`present`) or removes `finalizer` on `obj`, guarded by its
/// resourceVersion. A removal from an object that is gone succeeds.
pub async fn set_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    present: bool,
) -> Result<(), WriteError>
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let has = obj.finalizers().iter().any(|f| f == finalizer);
    if has == present {
        return Ok(());
    }
    let mut fins: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if present {
        fins.push(finalizer.to_string());
    }
    let name = obj.name_any();
    let body = serde_json::json!({"metadata": {"resourceVersion": obj.resource_version(), "finalizers": fins}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 && !present => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(WriteError::Conflict(name)),
        Err(source) => Err(WriteError::Api {
            action: format!(
                "{} finalizer {finalizer} of {name}",
                if present { "adding" } else { "removing" }
            ),
            source,
        }),
    }
}
