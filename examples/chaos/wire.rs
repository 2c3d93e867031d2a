//! Connections to a haip instance on loopback, as a client sees them: a
//! WebSocket (`/haip`) or an SSE stream (`GET /haip/sse`, envelopes up by
//! `POST /haip/message`), each envelope arriving as its raw text on a
//! channel; plus the history recorder, the seeded RNG, and a text hash.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Longest wait for a TCP connect, an upgrade, a response head or a POST.
pub(crate) const STEP: Duration = Duration::from_secs(10);

/// A POST may be held while the instance resumes a session elsewhere.
const POST_LIMIT: Duration = Duration::from_secs(30);

/// A small seeded xorshift64* generator: the chaos is repeatable by seed.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        // splitmix64 of the seed, so that nearby seeds differ at once.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`0` when `n` is 0).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }

    /// Uniform duration in `lo..=hi` milliseconds.
    pub(crate) fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi.saturating_sub(lo) + 1))
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// FNV-1a 64 of `text`, as 16 hex digits: how the history names an
/// envelope's exact bytes.
pub(crate) fn hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Appends JSON lines to one history file.
pub(crate) struct Recorder {
    out: BufWriter<File>,
    failed: bool,
}

impl Recorder {
    pub(crate) fn create(path: &Path) -> Result<Recorder, String> {
        let file =
            File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        Ok(Recorder {
            out: BufWriter::new(file),
            failed: false,
        })
    }

    pub(crate) fn write(&mut self, line: &Value) {
        if self.failed {
            return;
        }
        if let Err(e) = writeln!(self.out, "{line}") {
            eprintln!("chaos: cannot write the history: {e}");
            self.failed = true;
        }
    }

    pub(crate) fn flush(&mut self) {
        let _ = self.out.flush();
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.flush();
    }
}

/// The two transports the clients use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    Ws,
    Sse,
}

impl Transport {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Transport::Ws => "ws",
            Transport::Sse => "sse",
        }
    }
}

/// What a connection's reader hands over.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// One envelope's raw text.
    Text(String),
    /// The connection ended, and how.
    Closed(String),
}

type WsSink = SplitSink<WebSocketStream<MaybeTlsStream<TcpStream>>, Message>;

/// One open connection. Dropping it closes the socket abruptly (no close
/// frame, no goodbye).
pub(crate) struct Link {
    pub(crate) addr: String,
    pub(crate) rx: mpsc::UnboundedReceiver<Incoming>,
    reader: JoinHandle<()>,
    sink: Option<WsSink>,
}

impl Drop for Link {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Link {
    pub(crate) async fn open(transport: Transport, addr: &str) -> Result<Link, String> {
        match transport {
            Transport::Ws => Link::open_ws(addr).await,
            Transport::Sse => Link::open_sse(addr).await,
        }
    }

    async fn open_ws(addr: &str) -> Result<Link, String> {
        let url = format!("ws://{addr}/haip");
        let (ws, _) = tokio::time::timeout(STEP, tokio_tungstenite::connect_async(url))
            .await
            .map_err(|_| "WebSocket upgrade timed out".to_owned())?
            .map_err(|e| format!("WebSocket upgrade: {e}"))?;
        let (sink, mut stream) = ws.split();
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let end = loop {
                match stream.next().await {
                    Some(Ok(Message::Text(text))) => {
                        let _ = tx.send(Incoming::Text(text.as_str().to_owned()));
                    }
                    Some(Ok(Message::Close(frame))) => {
                        break match frame {
                            Some(f) => format!("close {} {}", u16::from(f.code), f.reason),
                            None => "close".to_owned(),
                        };
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => break format!("error: {e}"),
                    None => break "end".to_owned(),
                }
            };
            let _ = tx.send(Incoming::Closed(end));
        });
        Ok(Link {
            addr: addr.to_owned(),
            rx,
            reader,
            sink: Some(sink),
        })
    }

    async fn open_sse(addr: &str) -> Result<Link, String> {
        let mut stream = connect(addr).await?;
        let request =
            format!("GET /haip/sse HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = Vec::new();
        let head = tokio::time::timeout(STEP, read_head(&mut stream, &mut buf))
            .await
            .map_err(|_| "no response to GET /haip/sse".to_owned())??;
        if head.status != 200 {
            return Err(format!("GET /haip/sse answered {}", head.status));
        }
        let chunked = head.chunked;
        let (tx, rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            let end = read_events(&mut stream, buf, chunked, &tx).await;
            let _ = tx.send(Incoming::Closed(end));
        });
        Ok(Link {
            addr: addr.to_owned(),
            rx,
            reader,
            sink: None,
        })
    }

    /// Sends one envelope: a WebSocket text message, or `POST /haip/message`
    /// naming the stream's session (`stream_session`).
    pub(crate) async fn send(&mut self, text: &str, stream_session: &str) -> Result<(), String> {
        match &mut self.sink {
            Some(sink) => tokio::time::timeout(STEP, sink.send(Message::text(text)))
                .await
                .map_err(|_| "WebSocket send timed out".to_owned())?
                .map_err(|e| format!("WebSocket send: {e}")),
            None => post(&self.addr, stream_session, text).await,
        }
    }
}

async fn connect(addr: &str) -> Result<TcpStream, String> {
    let stream = tokio::time::timeout(STEP, TcpStream::connect(addr))
        .await
        .map_err(|_| "TCP connect timed out".to_owned())?
        .map_err(|e| format!("TCP connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

struct Head {
    status: u16,
    chunked: bool,
    length: Option<usize>,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads a response head; what follows it stays in `buf`.
async fn read_head(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Result<Head, String> {
    let mut chunk = [0u8; 8192];
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
            let mut head = Head {
                status,
                chunked: false,
                length: None,
            };
            for (name, value) in lines.filter_map(|l| l.split_once(':')) {
                let (name, value) = (name.trim(), value.trim());
                if name.eq_ignore_ascii_case("transfer-encoding") {
                    head.chunked = value.eq_ignore_ascii_case("chunked");
                } else if name.eq_ignore_ascii_case("content-length") {
                    head.length = value.parse().ok();
                }
            }
            return Ok(head);
        }
        if buf.len() > 64 * 1024 {
            return Err("a response head over 64 KiB".to_owned());
        }
        match stream.read(&mut chunk).await {
            Ok(0) => return Err("closed before a response".to_owned()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// Decodes `Transfer-Encoding: chunked` data from `raw` into `out`; true
/// once the last chunk came.
#[derive(Default)]
struct Chunked {
    data_left: usize,
    crlf_left: usize,
    done: bool,
}

impl Chunked {
    fn feed(&mut self, raw: &mut Vec<u8>, out: &mut Vec<u8>) -> Result<bool, String> {
        loop {
            if self.done {
                return Ok(true);
            }
            if self.data_left > 0 {
                let n = self.data_left.min(raw.len());
                if n == 0 {
                    return Ok(false);
                }
                out.extend(raw.drain(..n));
                self.data_left -= n;
            } else if self.crlf_left > 0 {
                let n = self.crlf_left.min(raw.len());
                if n == 0 {
                    return Ok(false);
                }
                raw.drain(..n);
                self.crlf_left -= n;
            } else {
                let Some(pos) = find(raw, b"\r\n") else {
                    return Ok(false);
                };
                let line = String::from_utf8_lossy(&raw[..pos]).into_owned();
                raw.drain(..pos + 2);
                let size = line.split(';').next().unwrap_or("").trim();
                let size = usize::from_str_radix(size, 16)
                    .map_err(|_| format!("bad chunk size `{line}`"))?;
                if size == 0 {
                    self.done = true;
                } else {
                    self.data_left = size;
                    self.crlf_left = 2;
                }
            }
        }
    }
}

/// Reads SSE events (`data: <json>\n\n`; comments skipped) until the stream
/// ends; returns how it ended.
async fn read_events(
    stream: &mut TcpStream,
    mut raw: Vec<u8>,
    chunked: bool,
    tx: &mpsc::UnboundedSender<Incoming>,
) -> String {
    let mut decoder = Chunked::default();
    let mut data = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let ended = if chunked {
            match decoder.feed(&mut raw, &mut data) {
                Ok(ended) => ended,
                Err(e) => return e,
            }
        } else {
            data.append(&mut raw);
            false
        };
        while let Some(end) = find(&data, b"\n\n") {
            let event: Vec<u8> = data.drain(..end + 2).collect();
            let event = String::from_utf8_lossy(&event[..end]).into_owned();
            for line in event.lines() {
                if let Some(body) = line.strip_prefix("data: ") {
                    if body == "[DONE]" {
                        return "data: [DONE]".to_owned();
                    }
                    let _ = tx.send(Incoming::Text(body.to_owned()));
                }
            }
        }
        if ended {
            return "stream ended".to_owned();
        }
        match stream.read(&mut chunk).await {
            Ok(0) => return "closed".to_owned(),
            Ok(n) => raw.extend_from_slice(&chunk[..n]),
            Err(e) => return format!("read: {e}"),
        }
    }
}

/// `POST /haip/message` with `X-HAIP-Session`; Ok on `200`.
async fn post(addr: &str, session: &str, body: &str) -> Result<(), String> {
    let exchange = async {
        let mut stream = connect(addr).await?;
        let request = format!(
            "POST /haip/message HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             X-HAIP-Session: {session}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut buf = Vec::new();
        let head = read_head(&mut stream, &mut buf).await?;
        if head.status == 200 {
            return Ok(());
        }
        // Read a little of the body, to say why.
        let want = head.length.unwrap_or(512).min(512);
        let mut chunk = [0u8; 512];
        while buf.len() < want {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        Err(format!(
            "POST /haip/message answered {}: {}",
            head.status,
            String::from_utf8_lossy(&buf)
        ))
    };
    tokio::time::timeout(POST_LIMIT, exchange)
        .await
        .map_err(|_| "POST /haip/message timed out".to_owned())?
}

/// `GET /health` answers 200 with this instance id.
pub(crate) async fn healthy(addr: &str, id: &str) -> bool {
    let exchange = async {
        let mut stream = connect(addr).await?;
        let request = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut body = Vec::new();
        let _ = stream.read_to_end(&mut body).await;
        Ok::<_, String>(String::from_utf8_lossy(&body).into_owned())
    };
    match tokio::time::timeout(Duration::from_secs(2), exchange).await {
        Ok(Ok(response)) => {
            response.starts_with("HTTP/1.1 200") && response.contains(&format!("\"{id}\""))
        }
        _ => false,
    }
}
