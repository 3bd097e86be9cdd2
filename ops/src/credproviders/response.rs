//! What a plugin answers (`CredentialProviderResponse` on its stdout), read
//! and checked as kubelet does, and the cache of answers it asked for.

use super::config::Provider;
use super::pattern::Pattern;
use nodeimage_api::credentials::Credential;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// What an answer is cached under (`cacheKeyType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum KeyType {
    /// This image only.
    Image,
    /// Every image of this registry host.
    Registry,
    /// Every image the provider matches.
    Global,
}

/// A checked answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// What it is cached under.
    pub key_type: KeyType,
    /// How long it is cached; None: the provider's default.
    pub cache: Option<Duration>,
    /// Credentials by the pattern of images they are for.
    pub auth: Vec<(Pattern, Credential)>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawResponse {
    api_version: Option<String>,
    kind: Option<String>,
    cache_key_type: Option<String>,
    cache_duration: Option<String>,
    #[serde(default)]
    auth: BTreeMap<String, RawAuth>,
}

#[derive(Deserialize)]
struct RawAuth {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
}

/// Reads a plugin's stdout. An answer kubelet would not use is an error;
/// an auth key that is no valid pattern is left out.
pub fn parse(p: &Provider, stdout: &[u8]) -> Result<Answer, String> {
    let raw: RawResponse = serde_json::from_slice(stdout)
        .map_err(|e| format!("its answer is not a CredentialProviderResponse: {e}"))?;
    if raw.kind.as_deref() != Some("CredentialProviderResponse") {
        return Err(format!(
            "its answer has kind {:?}, not CredentialProviderResponse",
            raw.kind.unwrap_or_default()
        ));
    }
    if raw.api_version.as_deref() != Some(p.api_version.as_str()) {
        return Err(format!(
            "its answer has apiVersion {:?}, not the {} it was asked in",
            raw.api_version.unwrap_or_default(),
            p.api_version
        ));
    }
    let key_type = match raw.cache_key_type.as_deref() {
        Some("Image") => KeyType::Image,
        Some("Registry") => KeyType::Registry,
        Some("Global") => KeyType::Global,
        other => {
            return Err(format!(
                "its answer has cacheKeyType {:?}; it must be Image, Registry or Global",
                other.unwrap_or_default()
            ));
        }
    };
    let cache = match raw.cache_duration.as_deref() {
        None | Some("") => None,
        Some(d) => Some(
            crate::duration::parse(d).map_err(|e| format!("its answer's cacheDuration: {e}"))?,
        ),
    };
    let auth = raw
        .auth
        .into_iter()
        .filter_map(|(key, a)| {
            Pattern::parse(&key).ok().map(|pattern| {
                let cred = Credential {
                    registry: key,
                    username: a.username,
                    password: a.password,
                };
                (pattern, cred)
            })
        })
        .collect();
    Ok(Answer {
        key_type,
        cache,
        auth,
    })
}

/// The credentials of `auth` for `image`, the most specific key first.
pub fn for_image(auth: &[(Pattern, Credential)], image: &str) -> Vec<Credential> {
    let mut hits: Vec<&(Pattern, Credential)> =
        auth.iter().filter(|(p, _)| p.matches(image)).collect();
    hits.sort_by_key(|(p, _)| std::cmp::Reverse(p.as_str().len()));
    hits.into_iter().map(|(_, c)| c.clone()).collect()
}

/// The registry host (with port) of `image` (`host[:port]/path`).
fn host_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

/// Answers kept until they expire, per provider and cache key.
#[derive(Default)]
pub struct Cache {
    entries: BTreeMap<(String, KeyType, String), (Instant, Vec<(Pattern, Credential)>)>,
}

impl Cache {
    /// A live answer of `provider` that covers `image`.
    pub fn get(
        &self,
        provider: &str,
        image: &str,
        now: Instant,
    ) -> Option<&[(Pattern, Credential)]> {
        [
            (KeyType::Image, image),
            (KeyType::Registry, host_of(image)),
            (KeyType::Global, ""),
        ]
        .into_iter()
        .find_map(|(t, key)| {
            self.entries
                .get(&(provider.to_string(), t, key.to_string()))
                .filter(|(expires, _)| *expires > now)
                .map(|(_, auth)| auth.as_slice())
        })
    }

    /// Keeps `answer` for `ttl` (nothing for zero), and drops what expired.
    pub fn put(
        &mut self,
        provider: &str,
        image: &str,
        answer: &Answer,
        ttl: Duration,
        now: Instant,
    ) {
        self.entries.retain(|_, (expires, _)| *expires > now);
        if ttl.is_zero() {
            return;
        }
        // A time the clock cannot hold: a day, which is longer than any
        // plugin's credentials live.
        let expires = now
            .checked_add(ttl)
            .or_else(|| now.checked_add(Duration::from_secs(86_400)))
            .unwrap_or(now);
        let key = match answer.key_type {
            KeyType::Image => image.to_string(),
            KeyType::Registry => host_of(image).to_string(),
            KeyType::Global => String::new(),
        };
        self.entries.insert(
            (provider.to_string(), answer.key_type, key),
            (expires, answer.auth.clone()),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider() -> Provider {
        Provider {
            name: "p".into(),
            match_images: vec![Pattern::parse("*.example.io").expect("pattern")],
            default_cache: Duration::from_secs(60),
            api_version: "credentialprovider.kubelet.k8s.io/v1".into(),
            args: vec![],
            env: vec![],
        }
    }

    fn answer(key_type: &str, duration: &str) -> Vec<u8> {
        format!(
            r#"{{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"{key_type}","cacheDuration":"{duration}","auth":{{"a.example.io":{{"username":"u","password":"p"}},"a.example.io/team":{{"username":"team","password":"t"}},"bad key/*":{{"username":"x","password":"y"}}}}}}"#
        )
        .into_bytes()
    }

    #[test]
    fn reads_an_answer_and_picks_the_most_specific_key() {
        let a = parse(&provider(), &answer("Registry", "6h0m0s")).expect("valid");
        assert_eq!(a.key_type, KeyType::Registry);
        assert_eq!(a.cache, Some(Duration::from_secs(6 * 3600)));
        assert_eq!(a.auth.len(), 2, "the key that is no pattern is left out");
        let creds = for_image(&a.auth, "a.example.io/team/app");
        let users: Vec<&str> = creds.iter().map(|c| c.username.as_str()).collect();
        assert_eq!(users, ["team", "u"]);
        assert!(for_image(&a.auth, "b.example.io/app").is_empty());
        let none = parse(&provider(), &answer("Global", "")).expect("valid");
        assert_eq!(none.cache, None);
    }

    #[test]
    fn refuses_answers_kubelet_refuses() {
        let table = [
            (b"not json".to_vec(), "not a CredentialProviderResponse"),
            (
                br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1beta1","kind":"CredentialProviderResponse","cacheKeyType":"Image"}"#.to_vec(),
                "not the credentialprovider.kubelet.k8s.io/v1 it was asked in",
            ),
            (
                br#"{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"Other","cacheKeyType":"Image"}"#.to_vec(),
                "has kind",
            ),
            (answer("Node", "1m"), "cacheKeyType \"Node\""),
            (answer("Image", "soon"), "cacheDuration"),
        ];
        for (out, want) in table {
            let e = parse(&provider(), &out).expect_err(want);
            assert!(e.contains(want), "{want:?} not in {e:?}");
        }
    }

    #[test]
    fn cache_keys_and_expiry() {
        let now = Instant::now();
        let secs = Duration::from_secs;
        let img = "a.example.io/team/app";
        for (key_type, other_image, shared) in [
            ("Image", "a.example.io/team/other", false),
            ("Registry", "a.example.io/other", true),
            ("Registry", "b.example.io/app", false),
            ("Global", "b.example.io/app", true),
        ] {
            let mut c = Cache::default();
            let a = parse(&provider(), &answer(key_type, "")).expect("valid");
            c.put("p", img, &a, secs(60), now);
            assert!(
                c.get("p", img, now + secs(59)).is_some(),
                "{key_type}: live"
            );
            assert!(
                c.get("p", img, now + secs(60)).is_none(),
                "{key_type}: expired"
            );
            assert!(
                c.get("q", img, now).is_none(),
                "{key_type}: another provider"
            );
            assert_eq!(
                c.get("p", other_image, now).is_some(),
                shared,
                "{key_type}: {other_image}"
            );
        }
        let mut c = Cache::default();
        let a = parse(&provider(), &answer("Image", "")).expect("valid");
        c.put("p", img, &a, Duration::ZERO, now);
        assert!(c.get("p", img, now).is_none(), "zero: not cached");
        c.put("p", img, &a, Duration::MAX, now);
        assert!(
            c.get("p", img, now + secs(3600)).is_some(),
            "a huge duration is capped, not a panic"
        );
    }
}
