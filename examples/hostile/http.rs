//! Raw TCP and HTTP/1.1, every byte under control: connecting, writing and
//! reading without buffering, response heads, whole responses
//! (`Content-Length`, chunked, or up to the close), `GET /stats` and
//! `GET /health`, an SSE stream (`GET /haip/sse`) whose envelopes arrive on a
//! channel, and upstream POSTs to `/haip/message`.

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::net::TcpStream;

pub(crate) async fn tcp_connect(addr: &str) -> Result<TcpStream, String> {
    let stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
        .await
        .map_err(|_| "TCP connect timed out".to_owned())?
        .map_err(|e| format!("TCP connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

pub(crate) async fn write_all(s: &TcpStream, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        s.writable().await?;
        match s.try_write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads what is there (at least one byte, or 0 at the end of the stream).
pub(crate) async fn read_some(s: &TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
    loop {
        s.readable().await?;
        match s.try_read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

pub(crate) struct Head {
    pub(crate) status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Reads a response head into `buf`; what follows the head stays in `buf`.
pub(crate) async fn read_head(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    wait: Duration,
) -> Result<Head, String> {
    let deadline = Instant::now() + wait;
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        if let Some(end) = find(buf, b"\r\n\r\n") {
            let text = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let mut lines = text.split("\r\n");
            let status_line = lines.next().unwrap_or_default();
            let status = status_line
                .split_whitespace()
                .nth(1)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad status line `{status_line}`"))?;
            let headers = lines
                .filter_map(|l| l.split_once(':'))
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .collect();
            return Ok(Head { status, headers });
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, read_some(s, &mut chunk)).await {
            Err(_) => return Err("no response".to_owned()),
            Ok(Ok(0)) => return Err("closed without a response".to_owned()),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(format!("read: {e}")),
        }
    }
}

/// Decoding state of a `Transfer-Encoding: chunked` body.
#[derive(Default)]
struct Chunked {
    data_left: usize,
    crlf_left: usize,
    done: bool,
}

impl Chunked {
    /// Moves the decoded data of `raw` into `out`; returns whether the body ended.
    fn feed(&mut self, raw: &mut Vec<u8>, out: &mut Vec<u8>) -> bool {
        loop {
            if self.done {
                return true;
            }
            if self.data_left > 0 {
                let n = self.data_left.min(raw.len());
                if n == 0 {
                    return false;
                }
                out.extend_from_slice(&raw[..n]);
                raw.drain(..n);
                self.data_left -= n;
            } else if self.crlf_left > 0 {
                let n = self.crlf_left.min(raw.len());
                if n == 0 {
                    return false;
                }
                raw.drain(..n);
                self.crlf_left -= n;
            } else {
                let Some(pos) = find(raw, b"\r\n") else {
                    return false;
                };
                let line = String::from_utf8_lossy(&raw[..pos]).into_owned();
                raw.drain(..pos + 2);
                let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
                    .unwrap_or(0);
                if size == 0 {
                    self.done = true;
                    return true;
                }
                self.data_left = size;
                self.crlf_left = 2;
            }
        }
    }
}

pub(crate) struct Response {
    pub(crate) head: Head,
    pub(crate) body: Vec<u8>,
}

/// Reads a whole response (`Content-Length`, chunked, or up to the close).
pub(crate) async fn read_response(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    wait: Duration,
) -> Result<Response, String> {
    let deadline = Instant::now() + wait;
    let head = read_head(s, buf, wait).await?;
    let length: Option<usize> = head.header("content-length").and_then(|v| v.parse().ok());
    let chunked = head
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let mut body = Vec::new();
    let mut decoder = Chunked::default();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        if chunked {
            if decoder.feed(buf, &mut body) {
                break;
            }
        } else {
            body.append(buf);
            if length.is_some_and(|n| body.len() >= n) {
                break;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, read_some(s, &mut chunk)).await {
            Err(_) => break,
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Ok(Response { head, body })
}

async fn http_get(addr: &str, path: &str) -> Result<Response, String> {
    let s = tcp_connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    write_all(&s, request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    read_response(&s, &mut Vec::new(), Duration::from_secs(10)).await
}

pub(crate) async fn stats(addr: &str) -> Option<Value> {
    let response = http_get(addr, "/stats").await.ok()?;
    serde_json::from_slice(&response.body).ok()
}

pub(crate) async fn active_connections(addr: &str) -> Value {
    match http_get(addr, "/health").await {
        Ok(r) => serde_json::from_slice::<Value>(&r.body)
            .map(|v| v["activeConnections"].clone())
            .unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

/// An open SSE stream (`GET /haip/sse`) whose envelopes arrive on a channel.
pub(crate) struct Sse {
    pub(crate) session: String,
    pub(crate) events: tokio::sync::mpsc::UnboundedReceiver<Value>,
    pub(crate) reader: tokio::task::JoinHandle<String>,
}

pub(crate) async fn open_sse(addr: &str) -> Result<Sse, String> {
    let s = tcp_connect(addr).await?;
    let request = format!(
        "GET /haip/sse HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n"
    );
    write_all(&s, request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut buf = Vec::new();
    let head = read_head(&s, &mut buf, Duration::from_secs(10)).await?;
    if head.status != 200 {
        return Err(format!("GET /haip/sse answered {}", head.status));
    }
    let session = head
        .header("x-haip-session")
        .ok_or("no X-HAIP-Session header")?
        .to_owned();
    let chunked = head
        .header("transfer-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
    let (tx, events) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        let mut decoder = Chunked::default();
        let mut decoded = Vec::new();
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            if chunked {
                if decoder.feed(&mut buf, &mut decoded) {
                    return "stream ended".to_owned();
                }
            } else {
                decoded.append(&mut buf);
            }
            while let Some(pos) = decoded.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = decoded.drain(..=pos).collect();
                if let Some(data) = line.strip_prefix(b"data: ")
                    && let Ok(v) = serde_json::from_slice::<Value>(data)
                {
                    let _ = tx.send(v);
                }
            }
            match read_some(&s, &mut chunk).await {
                Ok(0) => return "closed by the server".to_owned(),
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => return format!("read: {e}"),
            }
        }
    });
    Ok(Sse {
        session,
        events,
        reader,
    })
}

/// One upstream POST with a complete body.
pub(crate) async fn post_message(
    addr: &str,
    session: &str,
    body: &str,
) -> Result<Response, String> {
    let s = tcp_connect(addr).await?;
    let request = format!(
        "POST /haip/message HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-HAIP-Session: {session}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    write_all(&s, request.as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    read_response(&s, &mut Vec::new(), Duration::from_secs(30)).await
}
