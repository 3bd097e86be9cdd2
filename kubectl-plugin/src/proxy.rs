//! Whether the API server is reached around the `HTTPS_PROXY` of the
//! environment, by `NO_PROXY`, as kubectl (Go's net/http) decides it.
//! kube-rs takes `HTTPS_PROXY` but compares `NO_PROXY` with the proxy's own
//! address, not the server's, so the plugin decides this itself.

use std::net::IpAddr;

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
    use super::bypass;

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
