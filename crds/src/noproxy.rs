//! Whether a request goes through the proxy of the environment
//! (`HTTP_PROXY`, `HTTPS_PROXY`) or around it by `NO_PROXY`, as Go's
//! net/http decides it: the rules kubectl and containerd (so the nodes'
//! pulls) follow. Used by the kubectl plugin for the API server (kube-rs
//! takes `HTTPS_PROXY` but compares `NO_PROXY` with the proxy's own
//! address, not the server's) and by the controller's followed-tag lookups.

use std::net::IpAddr;

/// The proxy settings of an environment, read once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proxies {
    /// Proxy URL for `http://` requests (`HTTP_PROXY`).
    pub http: Option<String>,
    /// Proxy URL for `https://` requests (`HTTPS_PROXY`).
    pub https: Option<String>,
    /// The `NO_PROXY` list.
    pub no_proxy: String,
}

impl Proxies {
    /// From the variables Go reads (upper case first, then lower case);
    /// `HTTP_PROXY` is ignored when `REQUEST_METHOD` is set (a CGI
    /// request could set it), as Go does.
    pub fn from_env() -> Proxies {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// From `get` (a variable's value), for tests.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Proxies {
        let read = |upper: &str| {
            get(upper)
                .or_else(|| get(&upper.to_ascii_lowercase()))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let cgi = get("REQUEST_METHOD").is_some_and(|v| !v.is_empty());
        Proxies {
            http: read("HTTP_PROXY").filter(|_| !cgi).map(with_scheme),
            https: read("HTTPS_PROXY").map(with_scheme),
            no_proxy: read("NO_PROXY").unwrap_or_default(),
        }
    }

    /// The proxy for a request to `scheme://host:port` (None: directly).
    /// Loopback hosts and `localhost` are never proxied, as in Go.
    pub fn for_url(&self, scheme: &str, host: &str, port: u16) -> Option<&str> {
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let loopback = bare.eq_ignore_ascii_case("localhost")
            || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if loopback || bypass(&self.no_proxy, host, port) {
            return None;
        }
        match scheme {
            "http" => self.http.as_deref(),
            "https" => self.https.as_deref(),
            _ => None,
        }
    }
}

/// A proxy given without a scheme (`proxy.corp:3128`) is an HTTP proxy, as in Go.
fn with_scheme(v: String) -> String {
    if v.contains("://") {
        v
    } else {
        format!("http://{v}")
    }
}

/// Whether `no_proxy` (comma-separated: `*`, host names that also cover
/// their subdomains, with or without a leading dot, IP addresses, CIDR
/// ranges, each optionally with `:port`) exempts `host:port` from the proxy.
pub fn bypass(no_proxy: &str, host: &str, port: u16) -> bool {
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_ascii_lowercase();
    let ip: Option<IpAddr> = host.parse().ok();
    no_proxy
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .any(|entry| {
            if entry == "*" {
                return true;
            }
            if let Some((net, bits)) = entry.split_once('/') {
                return ip.is_some_and(|ip| in_cidr(ip, net, bits));
            }
            let (name, want_port) = split_port(entry);
            if want_port.is_some_and(|p| p != port) {
                return false;
            }
            let name = name.to_ascii_lowercase();
            if let Ok(entry_ip) = name.parse::<IpAddr>() {
                return ip == Some(entry_ip);
            }
            let name = name.trim_start_matches("*.").trim_start_matches('.');
            !name.is_empty()
                && ip.is_none()
                && (host == name || host.ends_with(&format!(".{name}")))
        })
}

/// `name:port` or `[v6]:port` into its parts; a bare IPv6 address has none.
fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((addr, tail)) => (addr, tail.strip_prefix(':').and_then(|p| p.parse().ok())),
            None => (entry, None),
        };
    }
    match entry.rsplit_once(':') {
        Some((name, p)) if !name.contains(':') => match p.parse() {
            Ok(p) => (name, Some(p)),
            Err(_) => (entry, None),
        },
        _ => (entry, None),
    }
}

fn in_cidr(ip: IpAddr, net: &str, bits: &str) -> bool {
    let Ok(bits) = bits.parse::<u32>() else {
        return false;
    };
    match (ip, net.parse::<IpAddr>()) {
        (IpAddr::V4(a), Ok(IpAddr::V4(n))) if bits <= 32 => {
            let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), Ok(IpAddr::V6(n))) if bits <= 128 => {
            let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{Proxies, bypass};

    #[test]
    fn proxies_from_the_environment_as_go_reads_them() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            Proxies::from_lookup(move |k| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            })
        };
        let p = env(&[
            ("HTTP_PROXY", "proxy.corp:3128"),
            ("https_proxy", "https://secure.corp:443"),
            ("NO_PROXY", "internal.corp,10.0.0.0/8"),
        ]);
        // (scheme, host, port, proxy)
        let cases = [
            (
                "http",
                "registry.example.com",
                80,
                Some("http://proxy.corp:3128"),
            ),
            (
                "https",
                "registry.example.com",
                443,
                Some("https://secure.corp:443"),
            ),
            ("https", "registry.internal.corp", 443, None),
            ("https", "10.1.2.3", 5000, None),
            ("http", "127.0.0.1", 5000, None),
            ("http", "localhost", 5000, None),
            ("http", "[::1]", 5000, None),
            ("ftp", "registry.example.com", 21, None),
        ];
        for (scheme, host, port, want) in cases {
            assert_eq!(
                p.for_url(scheme, host, port),
                want,
                "{scheme}://{host}:{port}"
            );
        }
        // Upper case wins; empty values are unset; CGI ignores HTTP_PROXY.
        let p = env(&[
            ("HTTPS_PROXY", "http://a:1"),
            ("https_proxy", "http://b:1"),
            ("http_proxy", " "),
        ]);
        assert_eq!(
            (p.https.as_deref(), p.http.as_deref()),
            (Some("http://a:1"), None)
        );
        let p = env(&[("HTTP_PROXY", "http://a:1"), ("REQUEST_METHOD", "GET")]);
        assert_eq!(p.http, None);
        assert_eq!(env(&[]), Proxies::default());
    }

    #[test]
    fn no_proxy_table() {
        let cases = [
            ("*", "api.example.com", 443, true),
            ("", "api.example.com", 443, false),
            ("example.com", "example.com", 443, true),
            ("example.com", "api.example.com", 443, true),
            (".example.com", "api.example.com", 443, true),
            ("*.example.com", "api.example.com", 443, true),
            ("example.com", "notexample.com", 443, false),
            ("corp.local, example.com", "API.Example.com", 6443, true),
            ("example.com:6443", "api.example.com", 6443, true),
            ("example.com:6443", "api.example.com", 443, false),
            ("127.0.0.1", "127.0.0.1", 16443, true),
            ("127.0.0.1:16443", "127.0.0.1", 16443, true),
            ("127.0.0.1:443", "127.0.0.1", 16443, false),
            ("127.0.0.2", "127.0.0.1", 16443, false),
            ("10.0.0.0/8", "10.96.0.1", 443, true),
            ("10.0.0.0/8", "11.0.0.1", 443, false),
            ("0.0.0.0/0", "192.0.2.1", 443, true),
            ("10.0.0.0/33", "10.0.0.1", 443, false),
            ("::1", "[::1]", 443, true),
            ("[::1]:443", "::1", 443, true),
            ("fd00::/8", "fd12::1", 443, true),
            ("fd00::/8", "fe80::1", 443, false),
            ("example.com", "10.0.0.1", 443, false),
            (".", "example.com", 443, false),
        ];
        for (no_proxy, host, port, want) in cases {
            assert_eq!(
                bypass(no_proxy, host, port),
                want,
                "NO_PROXY={no_proxy:?} host {host}:{port}"
            );
        }
    }
}
