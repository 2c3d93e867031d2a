//! Raw WebSocket clients and the small helpers every attack shares: opening
//! a connection and waiting for the server's `HAI`, reading one envelope with
//! a deadline, closing, building and describing envelopes, waiting for a
//! `TOOL_DONE` or a `PONG`; percentiles, rounding, a deterministic random
//! generator, and the unknown-key params of attacks 3 and 5.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, Stream, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Time to connect and receive the server's `HAI`.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(10);

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(8 * 1024)
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20))
}

/// What one read brought.
pub(crate) enum Got {
    /// An envelope and the size of its text.
    Envelope(Value, usize),
    /// A close frame: code and reason.
    Closed(Option<(u16, String)>),
    /// The stream ended or broke.
    Ended(String),
    Timeout,
}

impl Got {
    pub(crate) fn describe_end(&self) -> String {
        match self {
            Got::Closed(Some((code, reason))) => format!("close {code} {reason}").trim().to_owned(),
            Got::Closed(None) => "close (no code)".to_owned(),
            Got::Ended(e) => format!("connection ended ({e})"),
            Got::Timeout => "timeout".to_owned(),
            Got::Envelope(v, _) => describe(v),
        }
    }
}

pub(crate) async fn recv<S>(ws: &mut S, wait: Duration) -> Got
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let next = match tokio::time::timeout_at(deadline, ws.next()).await {
            Err(_) => return Got::Timeout,
            Ok(next) => next,
        };
        let text = match next {
            None => return Got::Ended("end of stream".to_owned()),
            Some(Err(e)) => return Got::Ended(e.to_string()),
            Some(Ok(Message::Text(t))) => t.as_str().to_owned(),
            Some(Ok(Message::Binary(b))) => String::from_utf8_lossy(&b).into_owned(),
            Some(Ok(Message::Close(frame))) => {
                return Got::Closed(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
            }
            Some(Ok(_)) => continue,
        };
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            return Got::Envelope(v, text.len());
        }
    }
}

/// How opening a connection went.
pub(crate) enum Opened {
    Hai(Box<Ws>, Value),
    Closed(u16, String),
    Failed(String),
}

pub(crate) async fn connect(url: &str) -> Result<Ws, String> {
    let (ws, _) = tokio::time::timeout(
        OPEN_TIMEOUT,
        tokio_tungstenite::connect_async_with_config(url, Some(ws_config()), true),
    )
    .await
    .map_err(|_| "connect timed out".to_owned())?
    .map_err(|e| format!("connect: {e}"))?;
    Ok(ws)
}

pub(crate) async fn open_outcome(url: &str) -> Opened {
    let started = Instant::now();
    let mut ws = match connect(url).await {
        Ok(ws) => ws,
        Err(e) => return Opened::Failed(e),
    };
    let left = OPEN_TIMEOUT.saturating_sub(started.elapsed());
    match recv(&mut ws, left).await {
        Got::Envelope(v, _) if kind(&v) == "HAI" && v["session"].is_string() => {
            Opened::Hai(Box::new(ws), v)
        }
        Got::Envelope(v, _) => Opened::Failed(format!("expected HAI first, got {}", describe(&v))),
        Got::Closed(Some((code, reason))) => Opened::Closed(code, reason),
        other => Opened::Failed(other.describe_end()),
    }
}

/// Connects and waits for the server's `HAI`.
pub(crate) async fn open(url: &str) -> Result<(Ws, Value), String> {
    match open_outcome(url).await {
        Opened::Hai(ws, hai) => Ok((*ws, hai)),
        Opened::Closed(code, reason) => Err(format!("close {code} {reason}")),
        Opened::Failed(e) => Err(e),
    }
}

pub(crate) async fn close<S>(mut ws: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
}

pub(crate) fn kind(v: &Value) -> &str {
    v["type"].as_str().unwrap_or("")
}

pub(crate) fn seq_of(v: &Value) -> Option<u64> {
    match &v["seq"] {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_u64(),
        _ => None,
    }
}

/// A short text for an envelope: its type plus what matters about it.
pub(crate) fn describe(v: &Value) -> String {
    let p = &v["payload"];
    match kind(v) {
        "ERROR" => {
            let detail = if p["detail"].is_null() {
                String::new()
            } else {
                format!(" {}", p["detail"])
            };
            format!("ERROR {}{detail}", p["code"].as_str().unwrap_or("?"))
        }
        "PONG" => format!("PONG {}", p["nonce"].as_str().unwrap_or("")),
        "TOOL_DONE" => format!(
            "TOOL_DONE {}{}",
            p["status"].as_str().unwrap_or("?"),
            p["result"]["code"]
                .as_str()
                .map(|c| format!(" {c}"))
                .unwrap_or_default()
        ),
        other => other.to_owned(),
    }
}

pub(crate) fn call_text(call_id: &str, tool: &str, params: &str) -> String {
    format!(
        r#"{{"type":"TOOL_CALL","payload":{{"call_id":"{call_id}","tool":"{tool}","params":{params}}}}}"#
    )
}

pub(crate) fn ping_text(nonce: &str) -> String {
    format!(r#"{{"type":"PING","payload":{{"nonce":"{nonce}"}}}}"#)
}

/// Waits for the `TOOL_DONE` of `call_id`; other `TOOL_DONE`s are counted in `others`.
pub(crate) async fn wait_done<S>(
    ws: &mut S,
    call_id: &str,
    wait: Duration,
    others: &mut u64,
) -> Result<(Value, usize), String>
where
    S: Stream<Item = Result<Message, WsError>> + Unpin,
{
    let deadline = Instant::now() + wait;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv(ws, left).await {
            Got::Envelope(v, size) if kind(&v) == "TOOL_DONE" => {
                if v["payload"]["call_id"] == call_id {
                    return Ok((v, size));
                }
                *others += 1;
            }
            Got::Envelope(..) => {}
            Got::Timeout => return Err(format!("no TOOL_DONE within {wait:?}")),
            other => return Err(other.describe_end()),
        }
    }
}

/// Sends a PING and waits for its PONG: whether the connection still works.
pub(crate) async fn ping_pong(ws: &mut Ws, nonce: &str) -> Result<(), String> {
    ws.send(Message::text(ping_text(nonce)))
        .await
        .map_err(|e| format!("send: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv(ws, left).await {
            Got::Envelope(v, _) if kind(&v) == "PONG" && v["payload"]["nonce"] == nonce => {
                return Ok(());
            }
            Got::Envelope(..) => {}
            other => return Err(other.describe_end()),
        }
    }
}

/// Percentile by nearest rank over sorted values.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

pub(crate) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

pub(crate) fn ms(d: Duration) -> f64 {
    round3(d.as_secs_f64() * 1000.0)
}

/// A small deterministic generator (xorshift64); no cryptography needed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// `count` distinct 3-character keys as JSON members `"Kab":value`, joined by
/// commas. The first character is a digit or capital letter, so no key
/// collides with a real (lower-case) parameter name.
pub(crate) fn unknown_members(count: usize, value: &str) -> String {
    const FIRST: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ";
    const REST: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(count * (value.len() + 7));
    for i in 0..count.min(FIRST.len() * REST.len() * REST.len()) {
        if i > 0 {
            out.push(',');
        }
        let a = FIRST[i / (REST.len() * REST.len())] as char;
        let b = REST[(i / REST.len()) % REST.len()] as char;
        let c = REST[i % REST.len()] as char;
        out.push('"');
        out.push(a);
        out.push(b);
        out.push(c);
        out.push_str("\":");
        out.push_str(value);
    }
    out
}
