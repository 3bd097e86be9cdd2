//! A minimal blocking HTTP/1.1 client for plain-HTTP endpoints on loopback
//! (the test registries and the health endpoints). One request per
//! connection (`Connection: close`), bodies read to the end of the stream.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// A response: status code, headers (names lower-cased) and body.
#[derive(Clone, Debug)]
pub struct Response {
    /// Status code, e.g. 200.
    pub status: u16,
    /// Headers in the order received; names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body (empty for HEAD).
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as (lossy) text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Splits `http://host:port/path?query` into (`host:port`, `/path?query`).
pub fn split_url(url: &str) -> Result<(String, String), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("only http:// URLs are supported: {url}"))?;
    match rest.find('/') {
        Some(i) => Ok((rest[..i].to_string(), rest[i..].to_string())),
        None => Ok((rest.to_string(), "/".to_string())),
    }
}

/// Sends one request and reads the whole response.
pub fn request(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, String> {
    let (authority, path) = split_url(url)?;
    let addr = authority
        .to_socket_addrs()
        .map_err(|e| format!("{authority}: {e}"))?
        .next()
        .ok_or_else(|| format!("{authority}: no address"))?;
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
        .map_err(|e| format!("connect {authority}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .map_err(|e| format!("set timeout: {e}"))?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nUser-Agent: nodeimage-tests\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || matches!(method, "PUT" | "POST" | "PATCH") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .and_then(|()| stream.flush())
        .map_err(|e| format!("{method} {url}: write: {e}"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(|e| format!("{method} {url}: read: {e}"))?;
    parse_response(&raw, method == "HEAD").map_err(|e| format!("{method} {url}: {e}"))
}

/// Parses a complete HTTP/1.1 response.
pub fn parse_response(raw: &[u8], head_only: bool) -> Result<Response, String> {
    let end = find(raw, b"\r\n\r\n").ok_or("response has no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if head_only {
        Vec::new()
    } else if chunked {
        dechunk(rest)?
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn dechunk(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = find(data, b"\r\n").ok_or("truncated chunk size")?;
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if data.len() < size {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&data[..size]);
        data = data.get(size + 2..).unwrap_or_default();
    }
}

/// GETs `url` and returns only the status code (None when nothing answers).
pub fn status_of(url: &str) -> Option<u16> {
    request("GET", url, &[], &[]).ok().map(|r| r.status)
}

/// The text of a Prometheus `/metrics` page (empty when it does not answer).
pub fn scrape(url: &str) -> String {
    request("GET", url, &[], &[])
        .map(|r| r.text())
        .unwrap_or_default()
}

/// Value of the series whose line starts with `series` (name and labels).
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l[series.len()..].trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_chunked_and_head_responses() {
        let r = parse_response(
            b"HTTP/1.1 201 Created\r\nDocker-Content-Digest: sha256:ab\r\nContent-Length: 2\r\n\r\nok",
            false,
        )
        .expect("parses");
        assert_eq!(r.status, 201);
        assert_eq!(r.header("docker-content-digest"), Some("sha256:ab"));
        assert_eq!(r.text(), "ok");
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
            false,
        )
        .expect("parses");
        assert_eq!(r.text(), "abcde");
        let r =
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", true).expect("parses");
        assert!(r.body.is_empty());
        assert_eq!(
            split_url("http://127.0.0.1:5000/v2/x?y=1").expect("url"),
            ("127.0.0.1:5000".into(), "/v2/x?y=1".into())
        );
    }
}
