//! Objects that may not decode: a watch or list of [`Lenient<K>`] never fails
//! because one stored object does not fit the Rust type `K` (a value stored
//! before a schema bound existed, a hand-written field of the wrong type).
//! Each item keeps its metadata, so the caller can skip it, name it in a log
//! line, an event and a metric, and go on with every other object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{Deserialize, DeserializeOwned, Deserializer};
use serde_json::Value;
use std::borrow::Cow;

/// One object of kind `K`, decoded, or the reason it does not decode.
#[derive(Clone, Debug)]
pub struct Lenient<K> {
    /// The object's metadata (decoded on its own; default if even that fails).
    pub metadata: ObjectMeta,
    /// The object, or why it could not be decoded.
    pub object: Result<K, Invalid>,
}

/// An object that does not decode: the reason and what the server sent.
#[derive(Clone, Debug)]
pub struct Invalid {
    /// The decoder's reason, naming the field and value where it can.
    pub reason: String,
    /// The object as the API server sent it, for callers that salvage parts.
    pub raw: Value,
}

impl<K> Lenient<K> {
    /// `namespace/name` (or `name`) for logs and messages.
    pub fn key(&self) -> String {
        match (&self.metadata.namespace, &self.metadata.name) {
            (Some(ns), Some(n)) => format!("{ns}/{n}"),
            (None, Some(n)) => n.clone(),
            _ => "<unnamed>".to_string(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Resource for Lenient<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de, K: DeserializeOwned> Deserialize<'de> for Lenient<K> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Value::deserialize(d)?;
        Ok(Self::from_value(raw))
    }
}

impl<K: DeserializeOwned> Lenient<K> {
    /// Decodes `raw` as `K`, keeping the metadata and the reason if it fails.
    pub fn from_value(raw: Value) -> Self {
        let metadata = raw
            .get("metadata")
            .and_then(|m| ObjectMeta::deserialize(m).ok())
            .unwrap_or_default();
        let object = K::deserialize(&raw).map_err(|e| Invalid {
            reason: e.to_string(),
            raw,
        });
        Self { metadata, object }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ImagePullJob;
    use serde_json::json;

    #[test]
    fn one_bad_item_does_not_fail_a_list() {
        let list = json!({
            "apiVersion": "apps.kruise.io/v1alpha1",
            "kind": "ImagePullJobList",
            "metadata": {"resourceVersion": "7"},
            "items": [
                {"metadata": {"name": "good", "namespace": "a"}, "spec": {"image": "nginx"}},
                {"metadata": {"name": "wide", "namespace": "b"}, "spec": {"image": "nginx", "pullPolicy": {"timeoutSeconds": 4294967296u64}}},
                {"metadata": {"name": "typo", "namespace": "c"}, "spec": {"image": 5}},
                {"metadata": {"name": "nospec", "namespace": "d"}},
            ]
        });
        let items: Vec<Lenient<ImagePullJob>> =
            serde_json::from_value(list["items"].clone()).expect("the list decodes");
        let got: Vec<(String, bool)> = items.iter().map(|i| (i.key(), i.object.is_ok())).collect();
        assert_eq!(
            got,
            vec![
                ("a/good".to_string(), true),
                ("b/wide".to_string(), false),
                ("c/typo".to_string(), false),
                ("d/nospec".to_string(), false),
            ]
        );
        let reason = &items[1].object.as_ref().expect_err("bad").reason;
        assert!(reason.contains("4294967296"), "{reason}");
        assert_eq!(
            items[1].object.as_ref().expect_err("bad").raw["metadata"]["name"],
            "wide"
        );
    }

    #[test]
    fn resource_is_the_kind_it_wraps() {
        assert_eq!(Lenient::<ImagePullJob>::kind(&()), "ImagePullJob");
        assert_eq!(Lenient::<ImagePullJob>::plural(&()), "imagepulljobs");
        assert_eq!(
            Lenient::<ImagePullJob>::api_version(&()),
            "apps.kruise.io/v1alpha1"
        );
    }
}
