//! kubelet's `matchImages` rule, which both a provider's configuration and
//! the keys of its response use: `host[:port][/path]`, where each dot-part
//! of the host may hold `*` (any run of characters within that part) or `?`
//! (one character); the host must have as many parts as the pattern, the
//! port must be equal (both absent or the same), and the pattern's path must
//! be a prefix of the image's path.

/// A parsed `matchImages` entry (or auth key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    host_parts: Vec<String>,
    port: Option<String>,
    path: String,
}

/// `host[:port]` and `/path` of `s` (after an optional `https://` or
/// `http://`, which kubelet also accepts in auth keys).
fn split(s: &str) -> (&str, Option<&str>, &str) {
    let s = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
        .unwrap_or(s);
    let (host_port, path) = match s.find('/') {
        Some(i) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    // An IPv6 host is bracketed: its port, if any, follows the bracket.
    if host_port.starts_with('[') {
        return match host_port.find(']') {
            Some(i) => match host_port[i + 1..].strip_prefix(':') {
                Some(port) => (&host_port[..=i], Some(port), path),
                None => (host_port, None, path),
            },
            None => (host_port, None, path),
        };
    }
    match host_port.split_once(':') {
        Some((h, p)) => (h, Some(p), path),
        None => (host_port, None, path),
    }
}

impl Pattern {
    /// Parses a pattern; wildcards may appear in the host only.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        let (host, port, path) = split(s.trim());
        if host.is_empty() {
            return Err(format!("{s:?}: no host"));
        }
        if let Some(p) = port
            && (p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
        {
            return Err(format!(
                "{s:?}: the port must be a number (wildcards are allowed in the host only)"
            ));
        }
        if path.contains(['*', '?']) {
            return Err(format!(
                "{s:?}: wildcards are allowed in the host only, not in the path"
            ));
        }
        let host_parts: Vec<String> = host.split('.').map(str::to_string).collect();
        if host_parts.iter().any(String::is_empty) {
            return Err(format!("{s:?}: empty part in the host"));
        }
        Ok(Pattern {
            text: s.trim().to_string(),
            host_parts,
            port: port.map(str::to_string),
            path: path.to_string(),
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `image` (`host[:port]/path`, no tag or digest) matches.
    pub fn matches(&self, image: &str) -> bool {
        let (host, port, path) = split(image);
        if self.port.as_deref() != port || !path.starts_with(&self.path) {
            return false;
        }
        let parts: Vec<&str> = host.split('.').collect();
        parts.len() == self.host_parts.len()
            && self
                .host_parts
                .iter()
                .zip(&parts)
                .all(|(glob, part)| glob_matches(glob.as_bytes(), part.as_bytes()))
    }
}

/// `*` and `?` within one host part.
fn glob_matches(glob: &[u8], text: &[u8]) -> bool {
    match glob.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob_matches(rest, &text[i..])),
        Some((b'?', rest)) => !text.is_empty() && glob_matches(rest, &text[1..]),
        Some((c, rest)) => {
            text.first().is_some_and(|t| t.eq_ignore_ascii_case(c))
                && glob_matches(rest, &text[1..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_matching_rules() {
        // (pattern, image, matches)
        let table = [
            (
                "123456789.dkr.ecr.us-east-1.amazonaws.com",
                "123456789.dkr.ecr.us-east-1.amazonaws.com/app",
                true,
            ),
            (
                "*.dkr.ecr.*.amazonaws.com",
                "123456789.dkr.ecr.us-east-1.amazonaws.com/app",
                true,
            ),
            ("*.azurecr.io", "myreg.azurecr.io/team/app", true),
            // One wildcard is one part: *.io does not match a.k8s.io.
            ("*.io", "a.k8s.io/app", false),
            ("*.*.registry.io", "a.b.registry.io/app", true),
            ("*.*.registry.io", "a.registry.io/app", false),
            ("k8s.*", "k8s.io/app", true),
            ("app.k8s.io", "app.k8s.io/x", true),
            ("gcr.io", "gcr.io/project/app", true),
            ("gcr.io", "us.gcr.io/project/app", false),
            // Ports must be equal, both ways.
            ("registry.io:8080/path", "registry.io:8080/path/app", true),
            ("registry.io:8080", "registry.io/app", false),
            ("registry.io", "registry.io:8080/app", false),
            ("127.0.0.1:5001", "127.0.0.1:5001/e2e/app", true),
            ("127.0.0.1:5001", "127.0.0.1:5000/e2e/app", false),
            // The pattern's path is a prefix of the image's.
            ("registry.io/team", "registry.io/team/app", true),
            ("registry.io/team", "registry.io/other/app", false),
            ("reg?stry.io", "registry.io/app", true),
            ("REGISTRY.io", "registry.io/app", true),
            ("https://registry.io", "registry.io/app", true),
            ("[::1]:5000", "[::1]:5000/app", true),
            ("[::1]", "[::1]:5000/app", false),
        ];
        for (pattern, image, want) in table {
            let p = Pattern::parse(pattern).expect(pattern);
            assert_eq!(p.matches(image), want, "{pattern} ~ {image}");
        }
    }

    #[test]
    fn refuses_patterns_kubelet_refuses() {
        for bad in [
            "",
            ":5000",
            "registry.io:*",
            "registry.io:",
            "registry.io/te*m",
            "a..b",
            "registry.io:80a",
        ] {
            assert!(Pattern::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
