//! Values that repeat across NodeImages (a job's owner reference, an image
//! name, a tag, an image's digest, a pull policy, a status message), decoded
//! into one shared copy. A controller caches every NodeImage; with 100 jobs
//! over 1,000 nodes the same owner list and image name are decoded on each of
//! the 1,000 nodes, and their strings were a third of the cache. The JSON and
//! the schema are those of the plain types.

use k8s_openapi::api::core::v1::ObjectReference;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, LazyLock, Mutex, Weak};

/// A string decoded once per distinct value; compares and serialises as a
/// `String`.
#[derive(Clone, Eq)]
pub struct SharedStr(Arc<str>);

/// The owner references of a tag entry, shared between the entries of the
/// same owners; copied on the first change (`DerefMut`).
#[derive(Clone, Default)]
pub struct Owners(Arc<Vec<ObjectReference>>);

/// A value of an [`Interned`] type (a tag's pull policy: a job writes one
/// policy on each of its nodes), shared between the objects that carry the
/// same one; copied on the first change (`DerefMut`).
#[derive(Clone, Default)]
pub struct Shared<T: Interned>(Arc<T>);

/// A type whose decoded values are shared through [`Shared`]; its pool is
/// its own, declared with the type (`interned_pool!`).
pub trait Interned: Clone + PartialEq + Hash + 'static {
    /// The pool of this type's shared copies.
    fn pool() -> &'static Mutex<Pool<Self>>;
}

/// The schema of `$plain` for `$shared`, so that CRDs do not change.
macro_rules! schema_of {
    ($shared:ty, $plain:ty) => {
        impl JsonSchema for $shared {
            fn inline_schema() -> bool {
                <$plain>::inline_schema()
            }
            fn schema_name() -> std::borrow::Cow<'static, str> {
                <$plain>::schema_name()
            }
            fn schema_id() -> std::borrow::Cow<'static, str> {
                <$plain>::schema_id()
            }
            fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
                <$plain>::json_schema(generator)
            }
        }
    };
}
schema_of!(SharedStr, String);
schema_of!(Owners, Vec<ObjectReference>);

impl<T: Interned + JsonSchema> JsonSchema for Shared<T> {
    fn inline_schema() -> bool {
        T::inline_schema()
    }
    fn schema_name() -> std::borrow::Cow<'static, str> {
        T::schema_name()
    }
    fn schema_id() -> std::borrow::Cow<'static, str> {
        T::schema_id()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        T::json_schema(generator)
    }
}

/// The shared copies still in use of one type, by hash of their value.
pub struct Pool<T: ?Sized> {
    by_hash: HashMap<u64, Vec<Weak<T>>>,
    /// Entries after the last sweep; the next sweep comes at twice as many.
    kept: usize,
    entries: usize,
}

impl<T: ?Sized> Default for Pool<T> {
    fn default() -> Self {
        Self {
            by_hash: HashMap::new(),
            kept: 0,
            entries: 0,
        }
    }
}

impl<T: ?Sized + PartialEq> Pool<T> {
    /// The shared copy equal to `value`, made with `make` if there is none.
    fn get(&mut self, hash: u64, value: &T, make: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let slot = self.by_hash.entry(hash).or_default();
        if let Some(shared) = slot
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| **s == *value)
        {
            return shared;
        }
        let shared = make();
        slot.push(Arc::downgrade(&shared));
        self.entries += 1;
        if self.entries > 2 * self.kept + 1024 {
            self.sweep();
        }
        shared
    }

    /// Forgets the copies nobody holds any more.
    fn sweep(&mut self) {
        self.by_hash.retain(|_, slot| {
            slot.retain(|w| w.strong_count() > 0);
            !slot.is_empty()
        });
        self.entries = self.by_hash.values().map(Vec::len).sum();
        self.kept = self.entries;
    }
}

static STRINGS: LazyLock<Mutex<Pool<str>>> = LazyLock::new(Mutex::default);
static OWNERS: LazyLock<Mutex<Pool<Vec<ObjectReference>>>> = LazyLock::new(Mutex::default);

/// Declares the pool of an [`Interned`] type: `interned_pool!(Type);`.
#[macro_export]
macro_rules! interned_pool {
    ($t:ty) => {
        impl $crate::interned::Interned for $t {
            fn pool() -> &'static std::sync::Mutex<$crate::interned::Pool<Self>> {
                static POOL: std::sync::LazyLock<std::sync::Mutex<$crate::interned::Pool<$t>>> =
                    std::sync::LazyLock::new(std::sync::Mutex::default);
                &POOL
            }
        }
    };
}

fn lock<T: ?Sized>(pool: &'static Mutex<Pool<T>>) -> std::sync::MutexGuard<'static, Pool<T>> {
    pool.lock().unwrap_or_else(|p| p.into_inner())
}

fn hash_of(value: &impl Hash) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

impl SharedStr {
    /// The shared copy of `s`.
    pub fn new(s: &str) -> Self {
        Self(lock(&STRINGS).get(hash_of(&s), s, || Arc::from(s)))
    }

    /// The string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Deref for SharedStr {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SharedStr {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SharedStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for SharedStr {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl PartialEq<String> for SharedStr {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<SharedStr> for String {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == *other.0
    }
}

impl PartialEq<SharedStr> for str {
    fn eq(&self, other: &SharedStr) -> bool {
        *self == *other.0
    }
}

impl PartialEq<SharedStr> for &str {
    fn eq(&self, other: &SharedStr) -> bool {
        **self == *other.0
    }
}

// Ordered and hashed as the string, as `Borrow<str>` requires (map keys).
impl Hash for SharedStr {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (*self.0).hash(state)
    }
}

impl PartialOrd for SharedStr {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SharedStr {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (*self.0).cmp(&*other.0)
    }
}

impl Default for SharedStr {
    fn default() -> Self {
        Self::new("")
    }
}

impl From<&String> for SharedStr {
    fn from(s: &String) -> Self {
        Self::new(s)
    }
}

impl PartialEq<str> for SharedStr {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for SharedStr {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl From<&str> for SharedStr {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for SharedStr {
    fn from(s: String) -> Self {
        Self::new(&s)
    }
}

impl From<SharedStr> for String {
    fn from(s: SharedStr) -> Self {
        s.0.to_string()
    }
}

impl std::fmt::Debug for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl std::fmt::Display for SharedStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for SharedStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = SharedStr;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<SharedStr, E> {
                Ok(SharedStr::new(s))
            }
        }
        d.deserialize_str(Visitor)
    }
}

impl Owners {
    /// The shared copy of `refs`.
    pub fn new(refs: Vec<ObjectReference>) -> Self {
        let mut h = DefaultHasher::new();
        refs.iter().for_each(|r| ref_key(r).hash(&mut h));
        let hash = h.finish();
        Self(lock(&OWNERS).get(hash, &refs, || Arc::new(refs.clone())))
    }
}

/// What identifies a reference, for hashing (equality compares every field).
fn ref_key(r: &ObjectReference) -> (Option<&str>, Option<&str>, Option<&str>, Option<&str>) {
    (
        r.uid.as_deref(),
        r.name.as_deref(),
        r.namespace.as_deref(),
        r.kind.as_deref(),
    )
}

impl Deref for Owners {
    type Target = Vec<ObjectReference>;
    fn deref(&self) -> &Vec<ObjectReference> {
        &self.0
    }
}

impl DerefMut for Owners {
    fn deref_mut(&mut self) -> &mut Vec<ObjectReference> {
        Arc::make_mut(&mut self.0)
    }
}

impl<'a> IntoIterator for &'a Owners {
    type Item = &'a ObjectReference;
    type IntoIter = std::slice::Iter<'a, ObjectReference>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl PartialEq for Owners {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl From<Vec<ObjectReference>> for Owners {
    fn from(refs: Vec<ObjectReference>) -> Self {
        Self::new(refs)
    }
}

impl FromIterator<ObjectReference> for Owners {
    fn from_iter<I: IntoIterator<Item = ObjectReference>>(refs: I) -> Self {
        Self::new(refs.into_iter().collect())
    }
}

impl std::fmt::Debug for Owners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl Serialize for Owners {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.as_slice().serialize(s)
    }
}

impl Serialize for SharedStr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Owners {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<ObjectReference>::deserialize(d).map(Owners::new)
    }
}

impl<T: Interned> Shared<T> {
    /// The shared copy of `value`.
    pub fn new(value: T) -> Self {
        let hash = hash_of(&value);
        let pool = T::pool();
        let mut pool = pool.lock().unwrap_or_else(|p| p.into_inner());
        Self(pool.get(hash, &value, || Arc::new(value.clone())))
    }
}

impl<T: Interned> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Interned> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T: Interned> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl<T: Interned + Eq> Eq for Shared<T> {}

impl<T: Interned> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Self::new(value)
    }
}

impl<T: Interned + std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl<T: Interned + Serialize> Serialize for Shared<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de, T: Interned + Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(d).map(Shared::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kruise::{ImageTagPullPolicy, SharedPolicy};

    fn owner(uid: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("apps.kruise.io/v1alpha1".into()),
            kind: Some("ImagePullJob".into()),
            name: Some("job".into()),
            namespace: Some("default".into()),
            uid: Some(uid.into()),
            ..Default::default()
        }
    }

    #[test]
    fn equal_values_decode_into_one_copy() {
        let a: Owners = serde_json::from_value(serde_json::json!([owner("u-shared")])).unwrap();
        let b: Owners = serde_json::from_value(serde_json::json!([owner("u-shared")])).unwrap();
        let c: Owners = serde_json::from_value(serde_json::json!([owner("u-other")])).unwrap();
        assert!(Arc::ptr_eq(&a.0, &b.0));
        assert!(!Arc::ptr_eq(&a.0, &c.0));
        assert_ne!(a, c);
        let p: SharedPolicy = serde_json::from_str(r#"{"backoffLimit": 3}"#).unwrap();
        let q: SharedPolicy = serde_json::from_str(r#"{"backoffLimit": 3}"#).unwrap();
        let r: SharedPolicy = serde_json::from_str(r#"{"backoffLimit": 4}"#).unwrap();
        assert!(Arc::ptr_eq(&p.0, &q.0));
        assert!(!Arc::ptr_eq(&p.0, &r.0));
        assert_eq!(p.backoff_limit, Some(3));
        let s: SharedStr = serde_json::from_str("\"img@sha256:1\"").unwrap();
        let t: SharedStr = serde_json::from_str("\"img@sha256:1\"").unwrap();
        assert!(Arc::ptr_eq(&s.0, &t.0));
        assert_eq!(s, "img@sha256:1");
    }

    #[test]
    fn a_shared_string_is_a_map_key_like_its_string() {
        use std::collections::{BTreeMap, HashSet};
        let mut map: BTreeMap<SharedStr, u8> = BTreeMap::new();
        for (i, k) in ["b", "a", "c"].into_iter().enumerate() {
            map.insert(k.into(), i as u8);
        }
        // Lookups by &str, ordered as the strings are.
        assert_eq!(map.get("a"), Some(&1));
        assert_eq!(
            map.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        let set: HashSet<SharedStr> = ["x".into(), SharedStr::new("x")].into();
        assert_eq!(set.len(), 1);
        assert!(set.contains("x"));
        // Compares with plain strings both ways.
        let s = SharedStr::new("v1");
        let owned = String::from("v1");
        assert!(s == *"v1");
        assert!(s == owned);
        assert!(owned == s);
        assert!("v1" == s);
        assert_eq!(SharedStr::default(), "");
        // A map keyed by shared strings has the JSON of one keyed by strings.
        let plain: BTreeMap<String, u8> = [("a".to_string(), 1)].into();
        let shared: BTreeMap<SharedStr, u8> =
            serde_json::from_value(serde_json::to_value(&plain).unwrap()).unwrap();
        assert_eq!(
            serde_json::to_value(&shared).unwrap(),
            serde_json::to_value(&plain).unwrap()
        );
    }

    #[test]
    fn json_and_schema_are_those_of_the_plain_types() {
        let refs = vec![owner("u-json")];
        let shared = Owners::new(refs.clone());
        assert_eq!(
            serde_json::to_value(&shared).unwrap(),
            serde_json::to_value(&refs).unwrap()
        );
        assert_eq!(
            serde_json::to_value(SharedStr::new("x")).unwrap(),
            serde_json::json!("x")
        );
        let mut generator = schemars::generate::SchemaSettings::openapi3().into_generator();
        assert_eq!(
            generator.subschema_for::<Owners>(),
            generator.subschema_for::<Vec<ObjectReference>>()
        );
        assert_eq!(
            generator.subschema_for::<Option<SharedStr>>(),
            generator.subschema_for::<Option<String>>()
        );
        assert_eq!(
            generator.subschema_for::<Option<SharedPolicy>>(),
            generator.subschema_for::<Option<ImageTagPullPolicy>>()
        );
        let policy = ImageTagPullPolicy {
            timeout_seconds: Some(600),
            ttl_seconds_after_finished: Some(300),
            ..Default::default()
        };
        assert_eq!(
            serde_json::to_value(SharedPolicy::new(policy.clone())).unwrap(),
            serde_json::to_value(&policy).unwrap()
        );
    }

    #[test]
    fn a_change_copies_and_leaves_other_holders_alone() {
        let a = Owners::new(vec![owner("u-cow")]);
        let mut b = a.clone();
        b.push(owner("u-cow-2"));
        assert_eq!(a.len(), 1);
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn copies_nobody_holds_are_swept() {
        let mut pool: Pool<str> = Pool::default();
        for i in 0..3000 {
            let s = format!("s{i}");
            drop(pool.get(hash_of(&s.as_str()), &s, || Arc::from(s.as_str())));
        }
        let held = pool.get(1, "held", || Arc::from("held"));
        pool.sweep();
        assert_eq!(pool.entries, 1);
        assert!(Arc::ptr_eq(
            &held,
            &pool.get(1, "held", || Arc::from("new"))
        ));
    }
}
