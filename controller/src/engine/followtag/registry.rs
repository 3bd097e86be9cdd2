//! The registry side of following a tag: one manifest HEAD for the tag's
//! digest (`Docker-Content-Digest`), answering a Basic or Bearer challenge
//! with the job's pull-secret credentials, then the node credentials of
//! kubelet's plugins; sent the way the nodes reach registries
//! (`super::transport`: proxies). The parsing is pure and table-tested;
//! [`Registry::digest`] is the shell.

use super::transport::Transport;
use base64::Engine;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use nodeimage_api::credentials::Credential;
use nodeimage_api::noproxy::Proxies;
use nodeimage_api::reference::ImageRef;
use std::time::Duration;

/// Manifest types a lookup accepts: OCI and Docker, images and indexes.
pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json";

/// How long one request (HEAD or token) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// Sent as User-Agent, so registries' logs tell lookups from pulls.
pub const USER_AGENT: &str = concat!(
    "nodeimage-controller/",
    env!("CARGO_PKG_VERSION"),
    " (follow-tag)"
);

/// Why a lookup gave no digest (never a credential in the text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The registry answered with an error status.
    #[error("{url}: HTTP {status}{}", explain(*status))]
    Status {
        /// What was asked.
        url: String,
        /// The status.
        status: u16,
    },
    /// No answer within [`REQUEST_TIMEOUT`].
    #[error("{url}: no answer within {}s", REQUEST_TIMEOUT.as_secs())]
    Timeout {
        /// What was asked.
        url: String,
    },
    /// The connection or TLS failed.
    #[error("{url}: {reason}")]
    Transport {
        /// What was asked.
        url: String,
        /// Why.
        reason: String,
    },
    /// The answer carried no usable digest or token.
    #[error("{url}: {reason}")]
    Answer {
        /// What was asked.
        url: String,
        /// What was wrong.
        reason: String,
    },
}

impl LookupError {
    /// The `result` label of the lookup counter (one of
    /// `runtime::metrics::FOLLOW_TAG_RESULTS`).
    pub fn result(&self) -> &'static str {
        match self {
            LookupError::Status {
                status: 401 | 403, ..
            } => "unauthorized",
            LookupError::Status { status: 404, .. } => "not_found",
            LookupError::Status { status: 429, .. } => "rate_limited",
            LookupError::Status { .. } | LookupError::Answer { .. } => "bad_answer",
            LookupError::Timeout { .. } | LookupError::Transport { .. } => "unreachable",
        }
    }
}

/// A few words on what a status means for a lookup.
fn explain(status: u16) -> &'static str {
    match status {
        401 => " (unauthorized: no or wrong credentials for this registry)",
        403 => " (forbidden)",
        404 => " (no such repository or tag)",
        429 => " (rate-limited; looked up again at the next interval)",
        _ => "",
    }
}

/// A `WWW-Authenticate` challenge.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// Resend with Basic credentials.
    Basic,
    /// Get a token from `realm` (with `service` and `scope`), then resend.
    Bearer {
        /// Token endpoint.
        realm: String,
        /// `service` parameter, if given.
        service: Option<String>,
        /// `scope` parameter, if given.
        scope: Option<String>,
    },
}

/// Parses a `WWW-Authenticate` value (`Basic realm=…` or `Bearer
/// realm="…",service="…",scope="…"`).
pub fn challenge(value: &str) -> Option<Challenge> {
    let (scheme, params) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let (mut service, mut scope) = (None, None);
    for (k, v) in params_of(params) {
        match k.to_ascii_lowercase().as_str() {
            "realm" => realm = Some(v),
            "service" => service = Some(v),
            "scope" => scope = Some(v),
            _ => {}
        }
    }
    Some(Challenge::Bearer {
        realm: realm?,
        service,
        scope,
    })
}

/// `k="v",k2=v2` pairs; commas inside quotes (scopes list actions) stay.
fn params_of(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while let Some((k, after)) = rest.split_once('=') {
        let key = k.trim().trim_start_matches(',').trim().to_string();
        let after = after.trim_start();
        let (value, next) = match after.strip_prefix('"') {
            Some(q) => match q.find('"') {
                Some(end) => (&q[..end], &q[end + 1..]),
                None => (q, ""),
            },
            None => match after.find(',') {
                Some(end) => (&after[..end], &after[end..]),
                None => (after, ""),
            },
        };
        out.push((key, value.to_string()));
        rest = next.trim_start().trim_start_matches(',');
    }
    out
}

/// The token in a token endpoint's JSON answer (`token`, else `access_token`).
pub fn token_of(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let t = v.get("token").or_else(|| v.get("access_token"))?.as_str()?;
    (!t.is_empty()).then(|| t.to_string())
}

/// The base URL of a registry: plain HTTP for loopback hosts (as
/// containerd treats them) and for `insecure` ones, else HTTPS; Docker
/// Hub's API host for `docker.io`.
pub fn base_url(registry: &str, insecure: &[String]) -> String {
    let host = match registry {
        "docker.io" => "registry-1.docker.io",
        h => h,
    };
    let name = host.rsplit_once(':').map_or(host, |(h, port)| {
        if port.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    let ip = name.trim_start_matches('[').trim_end_matches(']');
    let loopback = name == "localhost"
        || ip
            .parse::<std::net::IpAddr>()
            .is_ok_and(|a| a.is_loopback());
    let plain = loopback || insecure.iter().any(|i| i == registry || i == host);
    format!("{}://{host}", if plain { "http" } else { "https" })
}

/// The manifest URL of `image`'s tag.
pub fn manifest_url(image: &ImageRef, insecure: &[String]) -> String {
    let tag = image.tag.as_deref().unwrap_or("latest");
    format!(
        "{}/v2/{}/manifests/{tag}",
        base_url(&image.registry, insecure),
        image.repository
    )
}

/// The token URL for a Bearer challenge, asking for pull on `repository`
/// unless the challenge names its own scope.
pub fn token_url(
    realm: &str,
    service: Option<&str>,
    scope: Option<&str>,
    repository: &str,
) -> String {
    let pull = format!("repository:{repository}:pull");
    let mut q = vec![];
    if let Some(s) = service {
        q.push(format!("service={}", encode(s)));
    }
    q.push(format!("scope={}", encode(scope.unwrap_or(&pull))));
    let sep = if realm.contains('?') { '&' } else { '?' };
    format!("{realm}{sep}{}", q.join("&"))
}

/// Percent-encodes a query value.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `Basic base64(user:password)`.
fn basic(c: &Credential) -> String {
    let raw = format!("{}:{}", c.username, c.password);
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(raw)
    )
}

/// The HTTP client of lookups.
#[derive(Clone)]
pub struct Registry {
    transport: Transport,
    insecure: Vec<String>,
}

/// A response's status, headers and (for token requests) body.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Registry {
    /// A client trusting the system's roots, going through `proxies` as
    /// the nodes do; `insecure` registries (`host:port`) are reached over
    /// plain HTTP, as loopback ones are.
    pub fn new(insecure: Vec<String>, proxies: Proxies) -> Result<Self, LookupError> {
        let transport = Transport::new(proxies).map_err(|reason| LookupError::Transport {
            url: "(system roots)".into(),
            reason,
        })?;
        Ok(Registry {
            transport,
            insecure,
        })
    }

    /// The digest `image`'s tag points to now, with `creds` (each matching
    /// credential in turn answers a challenge until one is not refused;
    /// none: anonymous).
    pub async fn digest(
        &self,
        image: &ImageRef,
        creds: &[&Credential],
    ) -> Result<String, LookupError> {
        let url = manifest_url(image, &self.insecure);
        let mut answer = self.send(Method::HEAD, &url, None).await?;
        if answer.status == StatusCode::UNAUTHORIZED {
            answer = self.with_credentials(&url, answer, image, creds).await?;
        }
        if !answer.status.is_success() {
            return Err(LookupError::Status {
                url,
                status: answer.status.as_u16(),
            });
        }
        let digest = answer
            .headers
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|d| d.starts_with("sha256:") || d.starts_with("sha512:"));
        digest.map(str::to_string).ok_or(LookupError::Answer {
            url,
            reason: "no Docker-Content-Digest header in the answer".into(),
        })
    }

    /// The HEAD again after a 401 (`challenged`), with each credential in
    /// turn (none: anonymously, once) until one is not refused; the last
    /// answer or error.
    async fn with_credentials(
        &self,
        url: &str,
        challenged: Answer,
        image: &ImageRef,
        creds: &[&Credential],
    ) -> Result<Answer, LookupError> {
        let tries: Vec<Option<&Credential>> = if creds.is_empty() {
            vec![None]
        } else {
            creds.iter().copied().map(Some).collect()
        };
        let mut last = Err(LookupError::Status {
            url: url.to_string(),
            status: 401,
        });
        for cred in tries {
            let auth = match self
                .authorization(url, &challenged.headers, image, cred)
                .await
            {
                Ok(a) => a,
                Err(e) => {
                    last = Err(e);
                    continue;
                }
            };
            let answer = self.send(Method::HEAD, url, Some(auth)).await?;
            let refused = matches!(answer.status.as_u16(), 401 | 403);
            last = Ok(answer);
            if !refused {
                break;
            }
        }
        last
    }

    /// The Authorization value answering a 401's challenge.
    async fn authorization(
        &self,
        url: &str,
        headers: &HeaderMap,
        image: &ImageRef,
        cred: Option<&Credential>,
    ) -> Result<String, LookupError> {
        let refused = || LookupError::Status {
            url: url.to_string(),
            status: 401,
        };
        let found = headers
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(challenge);
        match found {
            Some(Challenge::Basic) => cred.map(basic).ok_or_else(refused),
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let token_url = token_url(
                    &realm,
                    service.as_deref(),
                    scope.as_deref(),
                    &image.repository,
                );
                let answer = self.send(Method::GET, &token_url, cred.map(basic)).await?;
                if !answer.status.is_success() {
                    let status = answer.status.as_u16();
                    return Err(LookupError::Status {
                        url: token_url,
                        status,
                    });
                }
                let token = token_of(&answer.body).ok_or(LookupError::Answer {
                    url: token_url,
                    reason: "no token in the answer".into(),
                })?;
                Ok(format!("Bearer {token}"))
            }
            None => Err(refused()),
        }
    }

    /// One request, bounded by [`REQUEST_TIMEOUT`].
    async fn send(
        &self,
        method: Method,
        url: &str,
        auth: Option<String>,
    ) -> Result<Answer, LookupError> {
        let transport = |reason: String| LookupError::Transport {
            url: url.to_string(),
            reason,
        };
        let mut req = Request::builder()
            .method(method)
            .uri(url)
            .header(header::ACCEPT, ACCEPT)
            .header(header::USER_AGENT, USER_AGENT);
        if let Some(a) = auth {
            let value = HeaderValue::from_str(&a)
                .map_err(|_| transport("credentials are not a valid header".into()))?;
            req = req.header(header::AUTHORIZATION, value);
        }
        let req = req
            .body(String::new())
            .map_err(|e| transport(e.to_string()))?;
        let call = async {
            let resp = self.transport.send(req).await.map_err(transport)?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.map_err(|e| transport(e.to_string()))?;
            Ok(Answer {
                status: parts.status,
                headers: parts.headers,
                body: body.to_bytes().to_vec(),
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, call)
            .await
            .map_err(|_| LookupError::Timeout {
                url: url.to_string(),
            })?
    }
}

#[cfg(test)]
mod tests;
