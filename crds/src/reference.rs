//! Image references: one grammar shared by the API schema (CEL rules), the
//! controller (normalising job images) and the daemon (what to pull).
//!
//! The rules follow the distribution reference grammar that kubelet and
//! containerd use: an optional registry host (with port), a lower-case path,
//! an optional tag and an optional digest. Bare names are normalised to
//! `docker.io/library/NAME`.

use schemars::{Schema, SchemaGenerator, json_schema};
use std::fmt;

/// One host name label: letters (either case), digits and inner '-'.
const DOMAIN_COMPONENT: &str = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?";
/// One path component: lower-case runs joined by '.', '_', '__' or dashes.
const PATH_COMPONENT: &str = r"[a-z0-9]+(?:(?:[_.]|__|[-]+)[a-z0-9]+)*";
/// A tag: a word character, then up to 127 word characters, '.' or '-'.
const TAG: &str = r"[\w][\w.-]{0,127}";
/// The digests containerd accepts: sha256, sha384 and sha512 in lower-case hex.
const DIGEST: &str = r"(?:sha256:[a-f0-9]{64}|sha384:[a-f0-9]{96}|sha512:[a-f0-9]{128})";

/// Longest repository name (registry and path, without tag or digest).
pub const NAME_MAX: usize = 255;

/// RE2 pattern of a full image reference (the distribution reference grammar:
/// optional `host[:port]/` where host is a DNS name, an IPv4 address or an
/// IPv6 address in brackets; a lower-case path; an optional tag; an optional
/// digest of an algorithm containerd supports), used in CEL rules.
pub fn image_pattern() -> String {
    let host = format!(r"(?:{DOMAIN_COMPONENT}(?:\.{DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])");
    format!(
        r"^(?:{host}(?::[0-9]+)?/)?{PATH_COMPONENT}(?:/{PATH_COMPONENT})*(?::{TAG})?(?:@{DIGEST})?$"
    )
}

/// RE2 pattern whose first match is the repository name of a reference that
/// [`image_pattern`] accepts (everything before the tag and digest).
const NAME_PREFIX: &str = r"^(?:[^/@]+/)?[^:@]+";

const IMAGE_MESSAGE: &str = "must be a valid image reference such as \"nginx:1.25\", \
\"registry.example.com:5000/team/app:v1\", \"[::1]:5000/app:v1\" or \"app@sha256:<64 lower-case hex digits>\"";

/// Schema of one image reference field: non-empty, bounded, grammar-checked.
pub fn image_schema(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "minLength": 1,
        "maxLength": 512,
        "x-kubernetes-validations": [
            {
                "rule": format!("self.matches('{}')", crate::validation::cel(&image_pattern())),
                "message": IMAGE_MESSAGE,
            },
            {
                "rule": format!("size(self.find('{}')) <= {NAME_MAX}", crate::validation::cel(NAME_PREFIX)),
                "message": format!("image repository name (without tag and digest) must be at most {NAME_MAX} characters"),
            },
            {
                "rule": "!self.matches('^[a-f0-9]{64}$')",
                "message": "image reference must not be a 64-character hexadecimal image ID",
            },
        ],
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

/// A list of image references that may repeat one (KubeEdge's `images`).
pub fn image_repeatable_list_schema(g: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": 1,
        "maxItems": 255,
        "items": image_schema(g),
    })
}

/// Default registry of bare image names.
pub const DEFAULT_REGISTRY: &str = "docker.io";

/// The one name of a registry host that has several: Docker Hub answers as
/// `docker.io`, `index.docker.io`, `registry-1.docker.io` and
/// `registry.hub.docker.com`, and credentials, pacing and metrics must see
/// one registry. Any other host is returned as it is.
pub fn canonical_registry(host: &str) -> &str {
    match host {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => DEFAULT_REGISTRY,
        h => h,
    }
}

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
        if s.len() == 64 && s.bytes().all(|b| matches!(b, b'a'..=b'f' | b'0'..=b'9')) {
            return Err(ParseError::Invalid(
                "a 64-character hexadecimal image ID is not a reference".into(),
            ));
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
        if name.len() > NAME_MAX {
            return Err(ParseError::Invalid(format!(
                "repository name is {} characters long, more than {NAME_MAX}",
                name.len()
            )));
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
/// it has a `.` or `:`, is `localhost`, or has an upper-case letter (the rule
/// containerd and Docker normalise names by).
fn split_registry(name: &str) -> (String, String) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains('.')
                || first.contains(':')
                || first == "localhost"
                || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            (canonical_registry(first).to_string(), rest.to_string())
        }
        _ => (DEFAULT_REGISTRY.to_string(), name.to_string()),
    }
}

fn validate_registry(host: &str) -> Result<(), ParseError> {
    // `[v6]:port`, `[v6]`, `name:port` or `name`.
    let (h, port) = if let Some(rest) = host.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return Err(ParseError::Invalid(format!(
                "registry host {host:?} opens '[' without closing it"
            )));
        };
        let port = match after {
            "" => None,
            p => match p.strip_prefix(':') {
                Some(p) => Some(p),
                None => {
                    return Err(ParseError::Invalid(format!(
                        "registry host {host:?} has text after ']' that is not a port"
                    )));
                }
            },
        };
        let ok = !v6.is_empty() && v6.bytes().all(|b| b.is_ascii_hexdigit() || b == b':');
        if !ok {
            return Err(ParseError::Invalid(format!(
                "registry host {host:?} is not an IPv6 address in brackets"
            )));
        }
        (None, port)
    } else {
        match host.rsplit_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(host), None),
        }
    };
    if let Some(p) = port
        && (p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(ParseError::Invalid(format!(
            "registry port {p:?} is not a number"
        )));
    }
    let Some(h) = h else {
        return Ok(());
    };
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
        if !is_path_component(comp) {
            return Err(ParseError::Invalid(format!(
                "repository path component {comp:?} must be lower-case letters and digits, joined by '.', '_', '__' or dashes"
            )));
        }
    }
    Ok(())
}

/// `[a-z0-9]+` runs separated by exactly one of `.`, `_`, `__` or `-+`.
fn is_path_component(comp: &str) -> bool {
    let b = comp.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &b[start..i];
        let ok = sep == b"." || sep == b"_" || sep == b"__" || sep.iter().all(|&c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
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
    let hex_len = match d.split_once(':') {
        Some(("sha256", hex)) => Some((hex, 64)),
        Some(("sha384", hex)) => Some((hex, 96)),
        Some(("sha512", hex)) => Some((hex, 128)),
        _ => None,
    };
    let ok = hex_len.is_some_and(|(hex, len)| {
        hex.len() == len
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(ParseError::Invalid(format!(
            "digest {d:?} must be sha256:<64 lower-case hex digits> (or sha384/sha512)"
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

    /// The distribution reference grammar's own examples (valid or not),
    /// checked against both the parser and the CEL rule's pattern (with the
    /// name-length and image-ID rules beside it), so the API server and the
    /// daemon never disagree on what is an image.
    #[test]
    fn grammar_examples_parser_and_schema_agree() {
        let f64 = "f".repeat(64);
        let f63 = "f".repeat(63);
        let f128 = "f".repeat(128);
        let upper = "F".repeat(64);
        let long_ok = format!("{}a:tag-puts-this-over-max", "a/".repeat(127));
        let long_bad = format!("{}a:tag", "a/".repeat(128));
        let cases: Vec<(String, bool)> = vec![
            ("test_com".into(), true),
            ("test.com:tag".into(), true),
            ("test.com:5000".into(), true),
            ("test.com/repo:tag".into(), true),
            ("test:5000/repo".into(), true),
            ("test:5000/repo:tag".into(), true),
            (format!("test:5000/repo@sha256:{f64}"), true),
            (format!("test:5000/repo:tag@sha256:{f64}"), true),
            ("".into(), false),
            (":justtag".into(), false),
            (format!("@sha256:{f64}"), false),
            (format!("repo@sha256:{f63}"), false),
            (format!("repo@sha256:{upper}"), false),
            (format!("validname@invaliddigest:{f64}"), false),
            ("Uppercase:tag".into(), false),
            ("test:5000/Uppercase/lowercase:tag".into(), false),
            ("lowercase:Uppercase".into(), true),
            (long_bad, false),
            (long_ok, true),
            ("aa/asdf$$^/aa".into(), false),
            ("sub-dom1.foo.com/bar/baz/quux".into(), true),
            ("sub-dom1.foo.com/bar/baz/quux:some-long-tag".into(), true),
            (
                "b.gcr.io/test.example.com/my-app:test.example.com".into(),
                true,
            ),
            ("xn--n3h.com/myimage:xn--n3h.com".into(), true),
            (
                format!("xn--7o8h.com/myimage:xn--7o8h.com@sha512:{f128}"),
                true,
            ),
            ("foo_bar.com:8080".into(), true),
            ("foo/foo_bar.com:8080".into(), true),
            ("192.168.1.1".into(), true),
            ("192.168.1.1:tag".into(), true),
            ("192.168.1.1:5000".into(), true),
            ("192.168.1.1/repo".into(), true),
            ("192.168.1.1:5000/repo".into(), true),
            ("[2001:db8::1]".into(), false),
            ("[2001:db8::1]:5000".into(), false),
            ("[2001:db8::1]:tag".into(), false),
            ("[2001:db8::1]/repo".into(), true),
            ("[2001:db8:1:2:3:4:5:6]/repo:tag".into(), true),
            ("[2001:db8::1]:5000/repo".into(), true),
            ("[2001:db8::1]:5000/repo:tag".into(), true),
            (format!("[2001:db8::1]:5000/repo@sha256:{f64}"), true),
            (format!("[2001:db8::1]:5000/repo:tag@sha256:{f64}"), true),
            ("[2001:db8::]:5000/repo".into(), true),
            ("[::1]:5000/repo".into(), true),
            ("[fe80::1%eth0]:5000/repo".into(), false),
            ("[fe80::1%@invalidzone]:5000/repo".into(), false),
            // Beyond the grammar's own table: forms users write.
            ("localhost:5000/a/b:c".into(), true),
            ("localhost/app".into(), true),
            ("Registry.Example.com/app:v1".into(), true),
            ("a__b/c---d:e".into(), true),
            ("a___b".into(), false),
            ("a._b".into(), false),
            ("nginx:".into(), false),
            ("nginx:-x".into(), false),
            (format!("nginx:{}", "t".repeat(128)), true),
            (format!("nginx:{}", "t".repeat(129)), false),
            ("host:port/x".into(), false),
            ("a//b".into(), false),
            ("a:b:c".into(), false),
            (f64.clone(), false),
            (format!("{f64}:tag"), true),
        ];
        let pattern = regex::Regex::new(&image_pattern()).expect("pattern compiles");
        let name = regex::Regex::new(NAME_PREFIX).expect("name pattern compiles");
        let id = regex::Regex::new("^[a-f0-9]{64}$").expect("id pattern compiles");
        for (input, valid) in &cases {
            let parsed = ImageRef::parse(input);
            assert_eq!(parsed.is_ok(), *valid, "parser on {input:?}: {parsed:?}");
            let schema_ok = input.len() <= 512
                && !input.is_empty()
                && pattern.is_match(input)
                && name
                    .find(input)
                    .is_some_and(|m| m.as_str().len() <= NAME_MAX)
                && !id.is_match(input);
            assert_eq!(schema_ok, *valid, "schema rules on {input:?}");
        }
    }
}
