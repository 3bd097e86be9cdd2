//! A throttling TCP proxy in front of a registry: it forwards bytes both
//! ways, limits the registry-to-client direction to a rate shared by all
//! connections (so a pull through it is slow enough to watch), and records
//! the HTTP request lines clients send (so tests can count manifest fetches).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
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
        Self::start_on("127.0.0.1:0", upstream, bytes_per_second)
    }

    /// [`Proxy::start`] listening on `listen` (`127.0.0.1:port`), for a
    /// registry host named in the controller's flags.
    pub fn start_on(listen: &str, upstream: &str, bytes_per_second: u64) -> std::io::Result<Proxy> {
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
    let mut upstream = TcpStream::connect(&s.upstream).await?;
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    let up = async {
        let mut parser = RequestLines::default();
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
