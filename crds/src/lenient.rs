//! Objects that may not decode: a watch or list of [`Lenient<K>`] never fails
//! because one stored object does not fit the Rust type `K` (a value stored
//! before a schema bound existed, a hand-written field of the wrong type).
//! Each item keeps its metadata, so the caller can skip it, name it in a log
//! line, an event and a metric, and go on with every other object.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::{
    Deserialize, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::Value;
use std::borrow::Cow;

/// One object of kind `K`, decoded, or the reason it does not decode.
#[derive(Clone, Debug)]
pub struct Lenient<K> {
    /// The object's metadata (decoded on its own; default if even that
    /// fails). Managed fields are left out, here and in the object.
    pub metadata: ObjectMeta,
    /// The object, or why it could not be decoded.
    pub object: Result<K, Invalid>,
}

/// An object that does not decode: the reason and what the server sent.
#[derive(Clone, Debug)]
pub struct Invalid {
    /// The decoder's reason, naming the field and value where it can.
    pub reason: String,
    /// The object as the API server sent it (without managed fields), for
    /// callers that salvage parts.
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
        let raw = d.deserialize_any(Skipping(&["metadata", "managedFields"]))?;
        Ok(Self::from_value(raw))
    }
}

/// Decodes any JSON value into a [`Value`], except the object member at the
/// given path (from the top), which is skipped without being built. Managed
/// fields are never read; decoded as values they were four times the size
/// of a NodeImage's spec, on every watch event and on every object of a
/// list page at once.
#[derive(Clone, Copy)]
struct Skipping<'p>(&'p [&'p str]);

impl<'de> serde::de::DeserializeSeed<'de> for Skipping<'_> {
    type Value = Value;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Skipping<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            match self.0 {
                [last] if key == *last => {
                    map.next_value::<IgnoredAny>()?;
                }
                [first, rest @ ..] if key == *first => {
                    let value = map.next_value_seed(Skipping(rest))?;
                    out.insert(key, value);
                }
                _ => {
                    out.insert(key, map.next_value::<Value>()?);
                }
            }
        }
        Ok(Value::Object(out))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
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
    fn managed_fields_are_not_decoded() {
        let text = json!({
            "metadata": {
                "name": "n",
                "namespace": "a",
                "labels": {"managedFields": "a label may have this name"},
                "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]
            },
            "spec": {"image": "nginx", "managedFields": "unknown fields are the type's business"}
        })
        .to_string();
        let item: Lenient<ImagePullJob> = serde_json::from_str(&text).expect("decodes");
        assert_eq!(item.metadata.managed_fields, None);
        let job = item.object.expect("valid");
        assert_eq!(job.metadata.managed_fields, None);
        assert_eq!(job.metadata.name.as_deref(), Some("n"));
        assert_eq!(
            job.metadata.labels.unwrap()["managedFields"],
            "a label may have this name"
        );
        assert_eq!(job.spec.image, "nginx");
        let broken: Lenient<ImagePullJob> = serde_json::from_str(
            r#"{"metadata":{"name":"b","managedFields":[1]},"spec":{"image":5}}"#,
        )
        .expect("decodes");
        let invalid = broken.object.expect_err("invalid");
        assert_eq!(
            invalid.raw,
            json!({"metadata": {"name": "b"}, "spec": {"image": 5}})
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
