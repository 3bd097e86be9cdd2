//! Registry credentials read from pull Secrets (`kubernetes.io/dockerconfigjson`
//! and `kubernetes.io/dockercfg`) and which apply to an image: one reading
//! for the daemon (CRI pulls) and the controller (a followed tag's digest
//! lookup). Secret contents never leave as text: errors name the secret only.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// Secret type of a `~/.docker/config.json` payload.
pub const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";
/// Secret type of a legacy `~/.dockercfg` payload.
pub const DOCKER_CFG: &str = "kubernetes.io/dockercfg";

/// One username/password (or token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// Registry key as written in the secret, normalised (host[:port][/path]).
    pub registry: String,
    /// User name.
    pub username: String,
    /// Password or token.
    pub password: String,
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the password.
        f.debug_struct("Credential")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// Why a secret could not be used; the message names the secret, not its content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    /// The Secret is of a type that holds no registry credentials.
    #[error("secret {secret} has type {found:?}, expected {DOCKER_CONFIG_JSON} or {DOCKER_CFG}")]
    WrongType {
        /// namespace/name of the secret.
        secret: String,
        /// The type it has.
        found: String,
    },
    /// The expected data key is missing.
    #[error("secret {secret} has no {key} key")]
    MissingKey {
        /// namespace/name of the secret.
        secret: String,
        /// The missing key.
        key: &'static str,
    },
    /// The payload is not valid JSON of the expected shape.
    #[error("secret {secret}: {key} is not valid docker config JSON ({reason})")]
    Malformed {
        /// namespace/name of the secret.
        secret: String,
        /// The data key.
        key: &'static str,
        /// What is wrong, without the content.
        reason: String,
    },
}

#[derive(Deserialize)]
struct DockerConfigJson {
    #[serde(default)]
    auths: BTreeMap<String, AuthEntry>,
}

#[derive(Deserialize, Default)]
struct AuthEntry {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default)]
    auth: Option<String>,
}

/// Reads the credentials of a Secret given its type and data.
pub fn parse_secret(
    secret: &str,
    type_: Option<&str>,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<Vec<Credential>, SecretError> {
    let (key, legacy) = match type_.unwrap_or_default() {
        DOCKER_CONFIG_JSON => (".dockerconfigjson", false),
        DOCKER_CFG => (".dockercfg", true),
        other => {
            return Err(SecretError::WrongType {
                secret: secret.to_string(),
                found: other.to_string(),
            });
        }
    };
    let raw = data.get(key).ok_or_else(|| SecretError::MissingKey {
        secret: secret.to_string(),
        key,
    })?;
    let malformed = |reason: String| SecretError::Malformed {
        secret: secret.to_string(),
        key,
        reason,
    };
    let auths: BTreeMap<String, AuthEntry> = if legacy {
        serde_json::from_slice(raw).map_err(|e| malformed(classify(&e)))?
    } else {
        serde_json::from_slice::<DockerConfigJson>(raw)
            .map_err(|e| malformed(classify(&e)))?
            .auths
    };
    let mut out = Vec::new();
    for (registry, entry) in auths {
        let (username, password) = match (entry.username, entry.password, entry.auth) {
            (Some(u), Some(p), _) if !u.is_empty() => (u, p),
            (_, _, Some(auth)) if !auth.is_empty() => {
                let decoded = STANDARD
                    .decode(auth.trim())
                    .map_err(|_| malformed(format!("auth for {registry} is not base64")))?;
                let text = String::from_utf8(decoded)
                    .map_err(|_| malformed(format!("auth for {registry} is not UTF-8")))?;
                let (u, p) = text.split_once(':').ok_or_else(|| {
                    malformed(format!("auth for {registry} is not user:password"))
                })?;
                (u.to_string(), p.to_string())
            }
            _ => continue,
        };
        out.push(Credential {
            registry: normalise_registry_key(&registry),
            username,
            password,
        });
    }
    Ok(out)
}

/// Describes a JSON error without echoing any of the input.
fn classify(e: &serde_json::Error) -> String {
    format!(
        "{:?} error at line {} column {}",
        e.classify(),
        e.line(),
        e.column()
    )
}

/// Normalises a registry key the way kubelet's keyring does: no scheme, no
/// `/v1/`-style suffix, `index.docker.io` and friends become `docker.io`.
pub fn normalise_registry_key(key: &str) -> String {
    let k = key.trim();
    let k = k
        .strip_prefix("https://")
        .or_else(|| k.strip_prefix("http://"))
        .unwrap_or(k);
    let k = k.trim_end_matches('/');
    let k = k
        .strip_suffix("/v1")
        .or_else(|| k.strip_suffix("/v2"))
        .unwrap_or(k);
    let (host, path) = match k.split_once('/') {
        Some((h, p)) => (h, Some(p)),
        None => (k, None),
    };
    let host = crate::reference::canonical_registry(host);
    match path {
        Some(p) if !p.is_empty() => format!("{host}/{p}"),
        _ => host.to_string(),
    }
}

/// The credentials that apply to `image_name` (`host/repo`, normalised), most
/// specific path first; callers try each, then anonymous.
pub fn matching<'a>(creds: &'a [Credential], image_name: &str) -> Vec<&'a Credential> {
    let mut hits: Vec<&Credential> = creds
        .iter()
        .filter(|c| {
            image_name == c.registry
                || image_name
                    .strip_prefix(c.registry.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
        })
        .collect();
    hits.sort_by_key(|c| std::cmp::Reverse(c.registry.len()));
    hits.dedup_by(|a, b| a.username == b.username && a.password == b.password);
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(key: &str, json: &str) -> BTreeMap<String, Vec<u8>> {
        BTreeMap::from([(key.to_string(), json.as_bytes().to_vec())])
    }

    #[test]
    fn reads_dockerconfigjson_with_auth_or_username() {
        let auth = STANDARD.encode("u1:p:1");
        let json = format!(
            r#"{{"auths":{{"https://127.0.0.1:5001/v1/":{{"auth":"{auth}"}},"index.docker.io":{{"username":"u2","password":"p2"}}}}}}"#
        );
        let creds = parse_secret(
            "ns/s",
            Some(DOCKER_CONFIG_JSON),
            &data(".dockerconfigjson", &json),
        )
        .expect("valid");
        assert_eq!(creds.len(), 2);
        assert_eq!(creds[0].registry, "127.0.0.1:5001");
        assert_eq!(
            (creds[0].username.as_str(), creds[0].password.as_str()),
            ("u1", "p:1")
        );
        assert_eq!(creds[1].registry, "docker.io");
    }

    #[test]
    fn reads_legacy_dockercfg() {
        let creds = parse_secret(
            "ns/s",
            Some(DOCKER_CFG),
            &data(
                ".dockercfg",
                r#"{"reg.example.com":{"username":"a","password":"b"}}"#,
            ),
        )
        .expect("valid");
        assert_eq!(creds[0].registry, "reg.example.com");
    }

    #[test]
    fn errors_name_the_secret_but_never_the_content() {
        let cases: Vec<(Option<&str>, BTreeMap<String, Vec<u8>>, &str)> = vec![
            (
                Some("Opaque"),
                data(".dockerconfigjson", "{}"),
                "has type \"Opaque\"",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data("other", "{}"),
                "has no .dockerconfigjson key",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data(".dockerconfigjson", "{\"auths\": secretpassword"),
                "is not valid docker config JSON",
            ),
            (
                Some(DOCKER_CONFIG_JSON),
                data(
                    ".dockerconfigjson",
                    r#"{"auths":{"r":{"auth":"!!secret!!"}}}"#,
                ),
                "auth for r is not base64",
            ),
        ];
        for (t, d, want) in cases {
            let e = parse_secret("ns/s", t, &d)
                .expect_err("invalid")
                .to_string();
            assert!(e.contains("ns/s") && e.contains(want), "{e}");
            assert!(
                !e.contains("secret!!") && !e.contains("secretpassword"),
                "{e}"
            );
        }
    }

    #[test]
    fn normalises_registry_keys() {
        for (input, want) in [
            ("https://index.docker.io/v1/", "docker.io"),
            ("docker.io", "docker.io"),
            ("registry-1.docker.io", "docker.io"),
            ("http://127.0.0.1:5000", "127.0.0.1:5000"),
            ("reg.example.com/team/", "reg.example.com/team"),
        ] {
            assert_eq!(normalise_registry_key(input), want, "{input}");
        }
    }

    #[test]
    fn matches_by_host_and_path_prefix_most_specific_first() {
        let c = |r: &str, u: &str| Credential {
            registry: r.into(),
            username: u.into(),
            password: "x".into(),
        };
        let creds = vec![
            c("reg.example.com", "host"),
            c("reg.example.com/team", "team"),
            c("reg.example.com/teamx", "other"),
            c("127.0.0.1:5001", "local"),
        ];
        let users = |img: &str| -> Vec<String> {
            matching(&creds, img)
                .iter()
                .map(|c| c.username.clone())
                .collect()
        };
        assert_eq!(users("reg.example.com/team/app"), ["team", "host"]);
        assert_eq!(users("reg.example.com/other/app"), ["host"]);
        assert_eq!(users("127.0.0.1:5001/big"), ["local"]);
        assert!(users("127.0.0.1:5000/big").is_empty());
        assert!(users("docker.io/library/nginx").is_empty());
    }
}
