//! A throttling TCP proxy in front of a registry: it forwards bytes both
//! ways, limits the registry-to-client direction to a rate shared by all
//! connections (so a pull through it is slow enough to watch), and records
//! the HTTP request lines clients send (so tests can count manifest fetches).
//! It can also play a registry that rate-limits: the first N requests are
//! answered by the proxy itself with 429 Too Many Requests (a `Retry-After`
//! header and a Docker-style `TOOMANYREQUESTS` body), each on a connection
//! it then closes; the rest are forwarded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

/// A running proxy; stops when dropped.
pub struct Proxy {
    /// `127.0.0.1:port` the proxy listens on.
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
}

struct Shared {
    upstream: String,
    limiter: Limiter,
    requests: Mutex<Vec<String>>,
    bytes_down: AtomicU64,
    /// Requests still to be answered with 429.
    refusals_left: AtomicUsize,
    /// `Retry-After` of those answers, in seconds.
    retry_after: u64,
    /// When the proxy started, for the times of refusals.
    started: Instant,
    /// Each request answered with 429: when (since the start) and its line.
    refused: Mutex<Vec<(Duration, String)>>,
}

impl Shared {
    /// Takes one refusal if any is left.
    fn take_refusal(&self) -> bool {
        self.refusals_left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// Hands out send slots so that all connections together stay under `rate`.
struct Limiter {
    rate: Mutex<u64>,
    next: Mutex<Instant>,
}

impl Limiter {
    async fn take(&self, n: usize) {
        let rate = *lock(&self.rate);
        if rate == 0 {
            return;
        }
        let until = {
            let mut next = lock(&self.next);
            let start = (*next).max(Instant::now());
            *next = start + Duration::from_secs_f64(n as f64 / rate as f64);
            *next
        };
        tokio::time::sleep_until(until).await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Proxy {
    /// Starts a proxy on a free loopback port forwarding to `upstream`
    /// (`host:port`), passing at most `bytes_per_second` towards clients
    /// (0: unlimited).
    pub fn start(upstream: &str, bytes_per_second: u64) -> std::io::Result<Proxy> {
        Self::spawn("127.0.0.1:0", upstream, bytes_per_second, 0, 0)
    }

    /// [`Proxy::start`] listening on `listen` (`127.0.0.1:port`), for a
    /// registry host named in the controller's flags.
    pub fn start_on(listen: &str, upstream: &str, bytes_per_second: u64) -> std::io::Result<Proxy> {
        Self::spawn(listen, upstream, bytes_per_second, 0, 0)
    }

    /// Starts a proxy forwarding to `upstream` at full speed that answers
    /// the first `refusals` requests itself with 429 Too Many Requests,
    /// `Retry-After: retry_after_secs` and a `TOOMANYREQUESTS` body.
    pub fn rate_limited(
        upstream: &str,
        refusals: usize,
        retry_after_secs: u64,
    ) -> std::io::Result<Proxy> {
        Self::spawn("127.0.0.1:0", upstream, 0, refusals, retry_after_secs)
    }

    fn spawn(
        listen: &str,
        upstream: &str,
        bytes_per_second: u64,
        refusals: usize,
        retry_after: u64,
    ) -> std::io::Result<Proxy> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("e2e-proxy")
            .build()?;
        let shared = Arc::new(Shared {
            upstream: upstream.to_string(),
            limiter: Limiter {
                rate: Mutex::new(bytes_per_second),
                next: Mutex::new(Instant::now()),
            },
            requests: Mutex::new(Vec::new()),
            bytes_down: AtomicU64::new(0),
            refusals_left: AtomicUsize::new(refusals),
            retry_after,
            started: Instant::now(),
            refused: Mutex::new(Vec::new()),
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
        Ok(Proxy {
            addr,
            shared,
            runtime: Some(runtime),
        })
    }

    /// `127.0.0.1:port`, to use as the registry host of image names.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// Changes the rate limit (0: unlimited).
    pub fn set_rate(&self, bytes_per_second: u64) {
        *lock(&self.shared.limiter.rate) = bytes_per_second;
    }

    /// Request lines seen so far, e.g. `GET /v2/x/manifests/v1 HTTP/1.1`.
    pub fn requests(&self) -> Vec<String> {
        lock(&self.shared.requests).clone()
    }

    /// How many requests so far had `needle` in their request line.
    pub fn count(&self, needle: &str) -> usize {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| r.contains(needle))
            .count()
    }

    /// The requests answered with 429 so far: when, counted from the
    /// proxy's start, and their request lines.
    pub fn refused(&self) -> Vec<(Duration, String)> {
        lock(&self.shared.refused).clone()
    }

    /// Bytes passed from the registry to clients so far.
    pub fn bytes_down(&self) -> u64 {
        self.shared.bytes_down.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

async fn serve(mut client: TcpStream, s: Arc<Shared>) -> std::io::Result<()> {
    // While refusals are left, the first request of each connection is read
    // before anything is forwarded, to answer it here if one still is.
    let mut head = Vec::new();
    if s.refusals_left.load(Ordering::SeqCst) > 0 {
        head = read_head(&mut client).await?;
        if head.is_empty() {
            return Ok(());
        }
        // A TLS handshake (containerd tries https first) goes to the
        // registry, which refuses it as it would without the proxy.
        if looks_like_http(&head) && s.take_refusal() {
            return refuse(client, &s, &head).await;
        }
    }
    let mut upstream = TcpStream::connect(&s.upstream).await?;
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    let up = async {
        let mut parser = RequestLines::default();
        for line in parser.feed(&head) {
            lock(&s.requests).push(line);
        }
        uw.write_all(&head).await?;
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = cr.read(&mut buf).await?;
            if n == 0 {
                uw.shutdown().await?;
                return Ok::<_, std::io::Error>(());
            }
            for line in parser.feed(&buf[..n]) {
                lock(&s.requests).push(line);
            }
            uw.write_all(&buf[..n]).await?;
        }
    };
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = ur.read(&mut buf).await?;
            if n == 0 {
                cw.shutdown().await?;
                return Ok::<_, std::io::Error>(());
            }
            s.limiter.take(n).await;
            cw.write_all(&buf[..n]).await?;
            s.bytes_down.fetch_add(n as u64, Ordering::SeqCst);
        }
    };
    tokio::try_join!(up, down).map(|_| ())
}

/// The bytes a client sent up to the end of its first request head (or
/// until it closed, or 64 KiB); only the first read when they do not start
/// like an HTTP request.
async fn read_head(client: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 64 * 1024 {
        let n = client.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if !looks_like_http(&head) {
            break;
        }
    }
    Ok(head)
}

/// Whether a connection's first bytes start like an HTTP/1 request (a
/// method in capitals), not like a TLS handshake.
fn looks_like_http(head: &[u8]) -> bool {
    head.first().is_some_and(u8::is_ascii_uppercase)
}

/// Answers the request in `head` with 429 as Docker Hub does, records it,
/// and closes the connection.
async fn refuse(mut client: TcpStream, s: &Shared, head: &[u8]) -> std::io::Result<()> {
    let text = String::from_utf8_lossy(head);
    let line = text.lines().next().unwrap_or_default().to_string();
    lock(&s.requests).push(line.clone());
    lock(&s.refused).push((s.started.elapsed(), line.clone()));
    let body = r#"{"errors":[{"code":"TOOMANYREQUESTS","message":"test proxy: too many requests, slow down"}]}"#;
    let answer = format!(
        "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n\
         Docker-Distribution-Api-Version: registry/2.0\r\nRetry-After: {}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        s.retry_after,
        body.len()
    );
    client.write_all(answer.as_bytes()).await?;
    // A HEAD answer has no body.
    if !line.starts_with("HEAD ") {
        client.write_all(body.as_bytes()).await?;
    }
    client.shutdown().await
}

/// Extracts request lines from the client-to-server byte stream of an
/// HTTP/1.1 connection (requests with Content-Length bodies are skipped over).
#[derive(Default)]
pub struct RequestLines {
    buf: Vec<u8>,
    skip: usize,
}

impl RequestLines {
    /// Feeds bytes; returns the request lines completed by them.
    pub fn feed(&mut self, data: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        let mut data = data;
        if self.skip > 0 {
            let n = self.skip.min(data.len());
            self.skip -= n;
            data = &data[n..];
        }
        self.buf.extend_from_slice(data);
        while let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
            let mut lines = head.split("\r\n");
            if let Some(first) = lines.next() {
                out.push(first.to_string());
            }
            let body: usize = lines
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.trim().parse().ok())
                .unwrap_or(0);
            let consumed = end + 4;
            let available = self.buf.len() - consumed;
            let from_buf = body.min(available);
            self.skip = body - from_buf;
            self.buf.drain(..consumed + from_buf);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// One request through `addr` on a connection of its own; the answer.
    fn ask(addr: SocketAddr, method: &str) -> String {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect to the proxy");
        let request = format!("{method} /v2/x/manifests/v1 HTTP/1.1\r\nHost: x\r\n\r\n");
        conn.write_all(request.as_bytes()).expect("send");
        let mut answer = String::new();
        conn.read_to_string(&mut answer).expect("read the answer");
        answer
    }

    #[test]
    fn answers_the_first_requests_with_429_then_forwards() {
        let upstream = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let upstream_addr = upstream.local_addr().expect("an address");
        std::thread::spawn(move || {
            for conn in upstream.incoming() {
                let Ok(mut conn) = conn else { return };
                let mut buf = [0u8; 1024];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                );
            }
        });
        let proxy = Proxy::rate_limited(&upstream_addr.to_string(), 2, 7).expect("start the proxy");
        // A TLS handshake is passed on and uses up no refusal.
        let mut tls = std::net::TcpStream::connect(proxy.addr).expect("connect to the proxy");
        tls.write_all(&[0x16, 0x03, 0x01, 0x00]).expect("send");
        let mut answer = String::new();
        tls.read_to_string(&mut answer).expect("read the answer");
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        let head = ask(proxy.addr, "HEAD");
        assert!(
            head.starts_with("HTTP/1.1 429 Too Many Requests\r\n"),
            "{head}"
        );
        assert!(head.contains("Retry-After: 7\r\n"), "{head}");
        assert!(head.ends_with("\r\n\r\n"), "no body for HEAD: {head}");
        let get = ask(proxy.addr, "GET");
        assert!(get.starts_with("HTTP/1.1 429"), "{get}");
        assert!(get.ends_with(r#""code":"TOOMANYREQUESTS","message":"test proxy: too many requests, slow down"}]}"#), "{get}");
        let third = ask(proxy.addr, "GET");
        assert!(third.starts_with("HTTP/1.1 200 OK"), "{third}");
        assert!(third.ends_with("ok"), "{third}");
        let refused: Vec<String> = proxy.refused().into_iter().map(|(_, l)| l).collect();
        assert_eq!(
            refused,
            [
                "HEAD /v2/x/manifests/v1 HTTP/1.1",
                "GET /v2/x/manifests/v1 HTTP/1.1"
            ]
        );
        assert_eq!(
            proxy.count("/v2/x/manifests/v1"),
            3,
            "{:?}",
            proxy.requests()
        );
    }

    #[test]
    fn request_lines_across_reads_and_bodies() {
        let mut p = RequestLines::default();
        assert!(
            p.feed(b"GET /v2/a/manifests/v1 HTTP/1.1\r\nHost: x\r")
                .is_empty()
        );
        assert_eq!(
            p.feed(b"\n\r\nHEAD /v2/ HTTP/1.1\r\n\r\n"),
            vec![
                "GET /v2/a/manifests/v1 HTTP/1.1".to_string(),
                "HEAD /v2/ HTTP/1.1".to_string()
            ]
        );
        assert_eq!(
            p.feed(b"PUT /up HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123"),
            vec!["PUT /up HTTP/1.1".to_string()]
        );
        assert_eq!(
            p.feed(b"456789GET /b HTTP/1.1\r\n\r\n"),
            vec!["GET /b HTTP/1.1".to_string()]
        );
    }
}
