//! Image references: one grammar shared by the API schema (CEL rules), the
//! controller (normalising job images) and the daemon (what to pull).
//!
//! The rules follow the distribution reference grammar that kubelet and
//! containerd use: an optional registry host (with port), a lower-case path,
//! an optional tag and an optional digest. Bare names are normalised to
//! `docker.io/library/NAME`.

use schemars::{Schema, SchemaGenerator, json_schema};
use std::fmt;

/// RE2 pattern of a full image reference, used in CEL rules.
pub const IMAGE_PATTERN: &str = concat!(
    r"^(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?",
    r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*",
    r"(?::[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,127})?",
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
);

const IMAGE_MESSAGE: &str = "must be a valid image reference such as \"nginx:1.25\", \
\"registry.example.com:5000/team/app:v1\" or \"app@sha256:<64 hex digits>\"";

/// Schema of one image reference field: non-empty, bounded, grammar-checked.
pub fn image_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": 512,
        "x-kubernetes-validations": [{
            "rule": format!("self.matches('{}')", IMAGE_PATTERN.replace('\\', "\\\\")),
            "message": IMAGE_MESSAGE,
        }],
    })
}

/// Schema of a list of 1–255 distinct image references (ImageListPullJob).
pub fn image_list_schema(g: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 255,
        "x-kubernetes-list-type": "set",
        "items": image_schema(g),
    })
}

/// Schema of a list of distinct image references (ImagePrePullJob).
pub fn image_set_schema(g: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 255,
        "x-kubernetes-list-type": "set",
        "items": image_schema(g),
    })
}

/// Default registry of bare image names.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// A parsed image reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRef {
    /// Registry host, with port if any (`docker.io` when the name had none).
    pub registry: String,
    /// Repository path inside the registry (`library/nginx` for `nginx`).
    pub repository: String,
    /// Tag, if the reference had one.
    pub tag: Option<String>,
    /// Digest (`sha256:…`), if the reference had one.
    pub digest: Option<String>,
}

/// Why a string is not an image reference.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// The string was empty.
    #[error("image reference is empty")]
    Empty,
    /// The string does not follow the reference grammar.
    #[error("invalid image reference: {0}")]
    Invalid(String),
}

impl ImageRef {
    /// Parses a reference such as `nginx`, `nginx:1.25`, `host:5000/a/b:v1`
    /// or `name@sha256:…`.
    pub fn parse(input: &str) -> Result<Self, ParseError> {
        let s = input.trim();
        if s.is_empty() {
            return Err(ParseError::Empty);
        }
        if s != input {
            return Err(ParseError::Invalid(format!(
                "{input:?} has surrounding whitespace"
            )));
        }
        let (rest, digest) = match s.split_once('@') {
            Some((r, d)) => {
                validate_digest(d)?;
                (r, Some(d.to_string()))
            }
            None => (s, None),
        };
        // A tag is after the last ':' that follows the last '/'.
        let last_slash = rest.rfind('/');
        let (name, tag) = match rest.rfind(':') {
            Some(i) if last_slash.is_none_or(|sl| i > sl) => {
                (&rest[..i], Some(rest[i + 1..].to_string()))
            }
            _ => (rest, None),
        };
        if let Some(t) = &tag {
            validate_tag(t)?;
        }
        let (registry, repository) = split_registry(name);
        validate_registry(&registry)?;
        validate_repository(&repository)?;
        let repository = if registry == DEFAULT_REGISTRY && !repository.contains('/') {
            format!("library/{repository}")
        } else {
            repository
        };
        Ok(ImageRef {
            registry,
            repository,
            tag,
            digest,
        })
    }

    /// Parses a NodeImage entry: an image name (no tag) and a tag field that
    /// may be a tag or a digest (`sha256:…`).
    pub fn from_name_and_tag(name: &str, tag: &str) -> Result<Self, ParseError> {
        if tag.is_empty() {
            return Err(ParseError::Invalid("tag is empty".into()));
        }
        let mut r = ImageRef::parse(name)?;
        if r.tag.is_some() || r.digest.is_some() {
            return Err(ParseError::Invalid(format!(
                "image name {name:?} must not carry a tag or digest; put it in the tag field"
            )));
        }
        if tag.contains(':') {
            validate_digest(tag)?;
            r.digest = Some(tag.to_string());
        } else {
            validate_tag(tag)?;
            r.tag = Some(tag.to_string());
        }
        Ok(r)
    }

    /// The repository name in full form, e.g. `docker.io/library/nginx`.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The name as users write it: `nginx` rather than `docker.io/library/nginx`.
    pub fn familiar_name(&self) -> String {
        if self.registry == DEFAULT_REGISTRY {
            self.repository
                .strip_prefix("library/")
                .unwrap_or(&self.repository)
                .to_string()
        } else {
            self.name()
        }
    }

    /// The tag field of a NodeImage entry: the tag, else the digest, else `latest`.
    pub fn tag_or_digest(&self) -> String {
        match (&self.tag, &self.digest) {
            (Some(t), _) => t.clone(),
            (None, Some(d)) => d.clone(),
            (None, None) => "latest".to_string(),
        }
    }

    /// The full reference to pull: `name@digest` when pinned, else `name:tag`
    /// (defaulting to `latest`).
    pub fn pull_ref(&self) -> String {
        match (&self.tag, &self.digest) {
            (_, Some(d)) => format!("{}@{}", self.name(), d),
            (Some(t), None) => format!("{}:{}", self.name(), t),
            (None, None) => format!("{}:latest", self.name()),
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.pull_ref())
    }
}

/// Splits `host[:port]/path` from `path`; the first component is a host when
/// it has a `.` or `:`, or is `localhost`.
fn split_registry(name: &str) -> (String, String) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            let host = if first == "index.docker.io" {
                DEFAULT_REGISTRY
            } else {
                first
            };
            (host.to_string(), rest.to_string())
        }
        _ => (DEFAULT_REGISTRY.to_string(), name.to_string()),
    }
}

fn validate_registry(host: &str) -> Result<(), ParseError> {
    let (h, port) = match host.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (host, None),
    };
    if let Some(p) = port
        && (p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(ParseError::Invalid(format!(
            "registry port {p:?} is not a number"
        )));
    }
    let ok = !h.is_empty()
        && h.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        });
    if ok {
        Ok(())
    } else {
        Err(ParseError::Invalid(format!(
            "registry host {h:?} is not valid"
        )))
    }
}

fn validate_repository(path: &str) -> Result<(), ParseError> {
    if path.is_empty() {
        return Err(ParseError::Invalid("repository name is empty".into()));
    }
    for comp in path.split('/') {
        let valid = !comp.is_empty()
            && comp
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
            && comp.as_bytes()[0].is_ascii_alphanumeric()
            && comp.as_bytes()[comp.len() - 1].is_ascii_alphanumeric();
        if !valid {
            return Err(ParseError::Invalid(format!(
                "repository path component {comp:?} must be lower-case letters, digits and separators (. _ -)"
            )));
        }
    }
    Ok(())
}

fn validate_tag(tag: &str) -> Result<(), ParseError> {
    let b = tag.as_bytes();
    let valid = !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"_.-".contains(c));
    if valid {
        Ok(())
    } else {
        Err(ParseError::Invalid(format!(
            "tag {tag:?} must be up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
        )))
    }
}

fn validate_digest(d: &str) -> Result<(), ParseError> {
    let Some((alg, hex)) = d.split_once(':') else {
        return Err(ParseError::Invalid(format!(
            "digest {d:?} must look like sha256:<hex>"
        )));
    };
    let alg_ok = !alg.is_empty()
        && alg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_+.".contains(&b));
    let hex_ok = hex.len() >= 32 && hex.bytes().all(|b| b.is_ascii_hexdigit());
    let len_ok = alg != "sha256" || hex.len() == 64;
    if alg_ok && hex_ok && len_ok {
        Ok(())
    } else {
        Err(ParseError::Invalid(format!(
            "digest {d:?} must look like sha256:<64 hex digits>"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_and_normalises() {
        let cases: &[(&str, &str, &str, &str)] = &[
            // input, name(), tag_or_digest, familiar
            ("nginx", "docker.io/library/nginx", "latest", "nginx"),
            ("nginx:1.9.1", "docker.io/library/nginx", "1.9.1", "nginx"),
            ("team/app:v2", "docker.io/team/app", "v2", "team/app"),
            (
                "index.docker.io/library/nginx:1",
                "docker.io/library/nginx",
                "1",
                "nginx",
            ),
            (
                "127.0.0.1:5000/big:v1",
                "127.0.0.1:5000/big",
                "v1",
                "127.0.0.1:5000/big",
            ),
            ("localhost/a/b", "localhost/a/b", "latest", "localhost/a/b"),
            (
                "registry.example.com:5000/a/b:c",
                "registry.example.com:5000/a/b",
                "c",
                "registry.example.com:5000/a/b",
            ),
        ];
        for (input, name, tag, familiar) in cases {
            let r = ImageRef::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(&r.name(), name, "{input}");
            assert_eq!(&r.tag_or_digest(), tag, "{input}");
            assert_eq!(&r.familiar_name(), familiar, "{input}");
        }
    }

    #[test]
    fn digests() {
        let r = ImageRef::parse(&format!("127.0.0.1:5000/test@{D}")).expect("parse");
        assert_eq!(r.digest.as_deref(), Some(D));
        assert_eq!(r.pull_ref(), format!("127.0.0.1:5000/test@{D}"));
        assert_eq!(r.tag_or_digest(), D);
        let r = ImageRef::from_name_and_tag("127.0.0.1:5000/test", D).expect("parse");
        assert_eq!(r.pull_ref(), format!("127.0.0.1:5000/test@{D}"));
        let r = ImageRef::parse(&format!("nginx:1@{D}")).expect("parse");
        assert_eq!(r.pull_ref(), format!("docker.io/library/nginx@{D}"));
    }

    #[test]
    fn rejects_bad_input() {
        for bad in [
            "",
            " nginx",
            "Nginx",
            "nginx:",
            "nginx:-x",
            "host:port/x",
            "a//b",
            "nginx@sha256:123",
            "nginx@md5",
            "-a/b",
            "a:b:c",
        ] {
            assert!(ImageRef::parse(bad).is_err(), "{bad:?} should fail");
        }
        assert!(ImageRef::from_name_and_tag("nginx", "").is_err());
        assert!(ImageRef::from_name_and_tag("nginx:1", "2").is_err());
        assert!(ImageRef::from_name_and_tag("nginx", "sha256:xyz").is_err());
    }

    #[test]
    fn schema_pattern_agrees_with_parser_on_samples() {
        // The CEL pattern is only checked by the API server; this guards the
        // Rust side against drifting from it on the common shapes.
        for good in [
            "nginx",
            "nginx:1.9.1",
            "127.0.0.1:5000/big:v1",
            "registry.cn-hangzhou.aliyuncs.com/jilimoxing/test:nginx",
        ] {
            assert!(ImageRef::parse(good).is_ok(), "{good}");
        }
        assert!(IMAGE_PATTERN.starts_with('^') && IMAGE_PATTERN.ends_with('$'));
    }
}
