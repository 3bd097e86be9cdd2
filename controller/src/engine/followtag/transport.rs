//! How a lookup reaches its registry: the way the nodes' runtimes do
//! (Go's net/http, as containerd uses it). Directly; through
//! `HTTPS_PROXY` by a CONNECT tunnel for HTTPS registries; through
//! `HTTP_PROXY` with the request's absolute URL for plain-HTTP ones; around
//! both by `NO_PROXY` and for loopback hosts (`nodeimage_api::noproxy`).

use http::{HeaderValue, Request, Response, Uri, header};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::rt::TokioIo;
use nodeimage_api::noproxy::Proxies;

type Https = hyper_rustls::HttpsConnector<HttpConnector>;
type Tunnelled = hyper_rustls::HttpsConnector<Tunnel<HttpConnector>>;

/// The clients of lookups, one per way out.
#[derive(Clone)]
pub struct Transport {
    direct: Client<Https, String>,
    /// HTTPS through `HTTPS_PROXY`, if set (and usable).
    tunnel: Option<Client<Tunnelled, String>>,
    proxies: Proxies,
}

/// A proxy URL as parsed: where it is, and its `Proxy-Authorization`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyAddr {
    /// `http://host:port` (no credentials: safe to print).
    pub uri: Uri,
    /// `host:port`, to connect to.
    pub authority: String,
    /// `Basic …` from the URL's `user:password@`, if any.
    pub auth: Option<String>,
}

/// Parses a proxy URL (`http://[user:password@]host[:port]`; port 80 by
/// default). Only HTTP proxies: TLS to the proxy is refused with why.
pub fn proxy_addr(url: &str) -> Result<ProxyAddr, String> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| format!("proxy {url:?} has no scheme"))?;
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "proxy scheme {scheme:?} is not supported (only http:// proxies)"
        ));
    }
    let hostport = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let (userinfo, hostport) = match hostport.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, hostport),
    };
    if hostport.is_empty() {
        return Err("proxy URL has no host".into());
    }
    let has_port = hostport
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit()));
    let authority = if has_port {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    let uri: Uri = format!("http://{authority}")
        .parse()
        .map_err(|e| format!("proxy host {hostport:?}: {e}"))?;
    let auth = userinfo.map(|u| {
        use base64::Engine;
        let raw = percent_decode(u);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    });
    Ok(ProxyAddr {
        uri,
        authority,
        auth,
    })
}

/// `%XX` escapes of a URL's user information, decoded.
fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The scheme, host and port of a request URL (ports 80 and 443 by default).
fn target(uri: &Uri) -> Option<(&str, &str, u16)> {
    let scheme = uri.scheme_str()?;
    let host = uri.host()?;
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "https" { 443 } else { 80 });
    Some((scheme, host, port))
}

impl Transport {
    /// Clients trusting the system's roots, for `proxies`.
    pub fn new(proxies: Proxies) -> Result<Self, String> {
        let roots = || {
            hyper_rustls::HttpsConnectorBuilder::new()
                .with_native_roots()
                .map_err(|e| format!("reading the system's certificate roots: {e}"))
        };
        let executor = hyper_util::rt::TokioExecutor::new();
        let https = roots()?.https_or_http().enable_http1().build();
        let direct = Client::builder(executor.clone()).build(https);
        let tunnel = match proxies.https.as_deref().map(proxy_addr) {
            None => None,
            Some(Err(why)) => {
                tracing::error!(error = %why, "HTTPS_PROXY cannot be used; lookups of HTTPS registries it covers fail");
                None
            }
            Some(Ok(p)) => {
                let mut t = Tunnel::new(p.uri.clone(), HttpConnector::new());
                if let Some(v) = p
                    .auth
                    .as_deref()
                    .and_then(|a| HeaderValue::from_str(a).ok())
                {
                    t = t.with_auth(v);
                }
                let tls = roots()?.https_only().enable_http1().wrap_connector(t);
                Some(Client::builder(executor).build(tls))
            }
        };
        Ok(Transport {
            direct,
            tunnel,
            proxies,
        })
    }

    /// Where a request to `uri` goes: None directly, else the proxy's URL.
    pub fn route(&self, uri: &Uri) -> Option<&str> {
        let (scheme, host, port) = target(uri)?;
        self.proxies.for_url(scheme, host, port)
    }

    /// Sends `req` the way the nodes would; an error says which proxy failed.
    pub async fn send(&self, req: Request<String>) -> Result<Response<Incoming>, String> {
        let Some(proxy) = self.route(req.uri()).map(str::to_string) else {
            return self.direct.request(req).await.map_err(|e| chain(&e));
        };
        let via = |e: String| match proxy_addr(&proxy) {
            Ok(p) => format!("through proxy {}: {e}", p.uri),
            Err(_) => format!("through the proxy: {e}"),
        };
        if req.uri().scheme_str() == Some("https") {
            let Some(tunnel) = &self.tunnel else {
                return Err(via("HTTPS_PROXY is not a usable http:// proxy URL".into()));
            };
            return tunnel.request(req).await.map_err(|e| via(chain(&e)));
        }
        let p = proxy_addr(&proxy).map_err(via)?;
        forward(&p, req).await.map_err(via)
    }
}

/// One plain-HTTP request through an HTTP proxy, on a connection of its
/// own: the absolute URL as request target, `Host` and any
/// `Proxy-Authorization` set (one lookup per interval needs no pool).
async fn forward(p: &ProxyAddr, mut req: Request<String>) -> Result<Response<Incoming>, String> {
    let host = req
        .uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .ok_or("the URL has no host")?;
    let headers = req.headers_mut();
    let value = |v: &str| HeaderValue::from_str(v).map_err(|_| "not a valid header".to_string());
    headers.insert(header::HOST, value(&host)?);
    if let Some(a) = &p.auth {
        let mut v = value(a)?;
        v.set_sensitive(true);
        headers.insert(header::PROXY_AUTHORIZATION, v);
    }
    let stream = tokio::net::TcpStream::connect(&p.authority)
        .await
        .map_err(|e| format!("connecting: {e}"))?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| chain(&e))?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "proxy connection ended");
        }
    });
    sender.send_request(req).await.map_err(|e| chain(&e))
}

/// An error with its sources, as one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_urls() {
        let p = proxy_addr("http://proxy.corp:3128").expect("valid");
        assert_eq!(
            (p.uri.to_string(), p.authority.as_str(), p.auth),
            ("http://proxy.corp:3128/".into(), "proxy.corp:3128", None)
        );
        let p = proxy_addr("http://u%40corp:p%3Ass@proxy.corp/").expect("valid");
        assert_eq!(p.authority, "proxy.corp:80");
        // base64("u@corp:p:ss")
        assert_eq!(p.auth.as_deref(), Some("Basic dUBjb3JwOnA6c3M="));
        assert!(
            !p.uri.to_string().contains("u%40corp"),
            "no credentials in {}",
            p.uri
        );
        let p = proxy_addr("http://[::1]:8080").expect("valid");
        assert_eq!(p.authority, "[::1]:8080");
        for (bad, why) in [
            ("proxy.corp:3128", "no scheme"),
            ("https://proxy.corp:3128", "only http:// proxies"),
            ("socks5://proxy.corp:1080", "only http:// proxies"),
            ("http://", "no host"),
            ("http://a b:1", "proxy host"),
        ] {
            let e = proxy_addr(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn routes_as_the_nodes_would() {
        let proxies = Proxies {
            http: Some("http://proxy.corp:3128".into()),
            https: Some("http://proxy.corp:3128".into()),
            no_proxy: "mirror.corp:5000,10.0.0.0/8".into(),
        };
        let t = Transport::new(proxies).expect("clients");
        let cases = [
            ("https://registry.example.com/v2/", true),
            ("http://registry.example.com:5000/v2/", true),
            ("http://mirror.corp:5000/v2/", false),
            ("https://mirror.corp/v2/", true),
            ("http://10.2.3.4:5000/v2/", false),
            ("http://127.0.0.1:5000/v2/", false),
            ("http://localhost:5000/v2/", false),
        ];
        for (url, proxied) in cases {
            let uri: Uri = url.parse().expect("uri");
            assert_eq!(t.route(&uri).is_some(), proxied, "{url}");
        }
        let direct = Transport::new(Proxies::default()).expect("clients");
        let uri: Uri = "https://registry.example.com/v2/".parse().expect("uri");
        assert_eq!(direct.route(&uri), None);
    }
}
