//! The writes a job controller makes outside its own status: edits of a
//! NodeImage's `spec.images` (its tag entries) as merge patches guarded by
//! the resourceVersion the edit was computed from, and its finalizer.
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

/// Applies `edit` to a copy of `ni`'s `spec.images` and, if it reports a
/// change, patches the difference guarded by `ni`'s resourceVersion. A
/// NodeImage that is gone is not an error (its node left).
pub async fn edit_images(
    client: &kube::Client,
    ni: &NodeImage,
    what: &str,
    edit: impl FnOnce(&mut BTreeMap<String, ImageSpec>) -> bool,
) -> Result<(), WriteError> {
    let old = ni.spec.images.clone().unwrap_or_default();
    let mut new = old.clone();
    if !edit(&mut new) {
        return Ok(());
    }
    let Some(body) = patch::guarded(
        "spec.images",
        ni.resource_version().as_deref(),
        &["spec", "images"],
        &old,
        &new,
    )?
    else {
        return Ok(());
    };
    let node = ni.name_any();
    let api: Api<NodeImage> = Api::all(client.clone());
    match api
        .patch(&node, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            Err(WriteError::Conflict(format!("NodeImage {node}")))
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(WriteError::Api {
            action: format!("{what} in NodeImage {node}"),
            source,
        }),
    }
}

/// Takes the entries owned by `uid` out of `ni` (see [`entries::release`]).
pub async fn release(client: &kube::Client, ni: &NodeImage, uid: &str) -> Result<(), WriteError> {
    if !entries::owns_any(ni.spec.images.as_ref().unwrap_or(&BTreeMap::new()), uid) {
        return Ok(());
    }
    edit_images(client, ni, "releasing entries", |images| {
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
