//! A tiny HTTP forward proxy on loopback, for registries that only it can
//! reach: host names it alone resolves (`*.invalid`, which no DNS answers)
//! are routed to real addresses. It serves the three ways registry clients
//! come through a proxy: an absolute URL (`GET http://host/v2/… HTTP/1.1`,
//! what `HTTP_PROXY` clients send), `CONNECT host:port` (an `HTTPS_PROXY`
//! tunnel), and an ordinary request carrying containerd's `ns=<host>` query
//! (the proxy as a node's registry mirror, `certs.d/<host>/hosts.toml`).
//! Every request is recorded with its way, host and User-Agent; one request
//! per connection (the answer closes it).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How a request came.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Way {
    /// An absolute URL (`HTTP_PROXY`).
    Forward,
    /// A CONNECT tunnel (`HTTPS_PROXY`).
    Tunnel,
    /// A mirror request (containerd's `ns` query).
    Mirror,
}

/// One request the proxy handled.
#[derive(Clone, Debug)]
pub struct Seen {
    /// How it came.
    pub way: Way,
    /// The registry host it was for (`host` or `host:port`).
    pub host: String,
    /// Its request line as received.
    pub line: String,
    /// Its User-Agent.
    pub user_agent: String,
    /// Whether a route existed (else the proxy answered 502).
    pub routed: bool,
}

struct Shared {
    routes: Mutex<BTreeMap<String, String>>,
    seen: Mutex<Vec<Seen>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A running proxy; stops when dropped.
pub struct HttpProxy {
    /// `127.0.0.1:port` it listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl HttpProxy {
    /// Listens on `listen` (`127.0.0.1:port`).
    pub fn start_on(listen: &str) -> std::io::Result<HttpProxy> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("e2e-http-proxy")
            .build()?;
        let shared = Arc::new(Shared {
            routes: Mutex::default(),
            seen: Mutex::default(),
        });
        let listener = runtime.block_on(TcpListener::bind(listen))?;
        let addr = listener.local_addr()?;
        let s = shared.clone();
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let _ = serve(client, s).await;
                });
            }
        });
        Ok(HttpProxy {
            addr,
            shared,
            runtime: Some(runtime),
        })
    }

    /// Routes requests for registry `host` (as named in image references,
    /// `host` or `host:port`) to `upstream` (`ip:port`).
    pub fn route(&self, host: &str, upstream: &str) {
        lock(&self.shared.routes).insert(host.to_string(), upstream.to_string());
    }

    /// Everything handled so far.
    pub fn seen(&self) -> Vec<Seen> {
        lock(&self.shared.seen).clone()
    }
}

impl Drop for HttpProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// The request head (through the blank line) and whatever followed it.
async fn read_head(client: &mut TcpStream) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > 64 * 1024 {
            return Err(std::io::Error::other("request head too long"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// What a request head asks: how, for which host, and the head to send
/// upstream (origin-form target, `Connection: close`).
pub fn parse(head: &str) -> Option<(Way, String, String)> {
    let mut lines = head.split("\r\n");
    let line = lines.next()?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if method == "CONNECT" {
        return Some((Way::Tunnel, target.to_string(), String::new()));
    }
    let (way, host, path) = match target.strip_prefix("http://") {
        Some(rest) => {
            let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
            let path = if path.is_empty() { "/" } else { path };
            (Way::Forward, host.to_string(), path.to_string())
        }
        None => {
            let query = target.split_once('?').map(|(_, q)| q).unwrap_or_default();
            let ns = query.split('&').find_map(|kv| kv.strip_prefix("ns="))?;
            (Way::Mirror, ns.replace("%3A", ":"), target.to_string())
        }
    };
    let mut out = format!("{method} {path} {version}\r\n");
    for h in lines.filter(|l| !l.is_empty()) {
        let name = h.split(':').next().unwrap_or_default().to_ascii_lowercase();
        if !matches!(
            name.as_str(),
            "connection" | "proxy-connection" | "proxy-authorization" | "keep-alive"
        ) {
            out.push_str(h);
            out.push_str("\r\n");
        }
    }
    out.push_str("Connection: close\r\n\r\n");
    Some((way, host, out))
}

fn header(head: &str, name: &str) -> String {
    head.split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default()
}

async fn serve(mut client: TcpStream, s: Arc<Shared>) -> std::io::Result<()> {
    let (head, rest) = read_head(&mut client).await?;
    let text = String::from_utf8_lossy(&head).into_owned();
    let Some((way, host, upstream_head)) = parse(&text) else {
        return client
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await;
    };
    let upstream = lock(&s.routes).get(&host).cloned();
    lock(&s.seen).push(Seen {
        way,
        host: host.clone(),
        line: text.lines().next().unwrap_or_default().to_string(),
        user_agent: header(&text, "user-agent"),
        routed: upstream.is_some(),
    });
    let Some(upstream) = upstream else {
        let body = format!("test proxy: no route to {host}");
        let answer = format!(
            "HTTP/1.1 502 Bad Gateway\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return client.write_all(answer.as_bytes()).await;
    };
    let mut up = TcpStream::connect(&upstream).await?;
    if way == Way::Tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
    } else {
        up.write_all(upstream_head.as_bytes()).await?;
    }
    up.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut up)
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_heads() {
        let (way, host, out) = parse(
            "HEAD http://reg.invalid/v2/a/manifests/stable HTTP/1.1\r\nHost: reg.invalid\r\nProxy-Authorization: Basic x\r\nUser-Agent: t\r\n\r\n",
        )
        .expect("a forward request");
        assert_eq!((way, host.as_str()), (Way::Forward, "reg.invalid"));
        assert_eq!(
            out,
            "HEAD /v2/a/manifests/stable HTTP/1.1\r\nHost: reg.invalid\r\nUser-Agent: t\r\nConnection: close\r\n\r\n"
        );
        let (way, host, _) = parse(
            "GET /v2/a/manifests/stable?ns=reg.invalid%3A5000 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n",
        )
        .expect("a mirror request");
        assert_eq!((way, host.as_str()), (Way::Mirror, "reg.invalid:5000"));
        let (way, host, _) = parse("CONNECT reg.invalid:443 HTTP/1.1\r\n\r\n").expect("a tunnel");
        assert_eq!((way, host.as_str()), (Way::Tunnel, "reg.invalid:443"));
        assert!(parse("GET /v2/ HTTP/1.1\r\n\r\n").is_none(), "no host");
    }
}
