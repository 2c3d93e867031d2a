//! The `/mcp` door (MCP Streamable HTTP, on the HAIP port when the `mcp`
//! feature is on): the same measurement as the HAIP attacks, with raw
//! HTTP/1.1 clients whose every byte is under control, against
//! `http://127.0.0.1:PORT/mcp` of a server with `/mcp` stateless
//! (`HAIP_MCP_SESSIONS=0`, as `bench/reliability.sh` starts the quickstart:
//! every request here is a plain POST, no `initialize`), while an MCP canary
//! ([`canary`]) calls `echo` on `/mcp` every 100 ms on a keep-alive
//! connection of its own.
//!
//! | Mode | What it does |
//! |---|---|
//! | `mcp-stalled-bodies` | `--count` POSTs (600) announcing 10 MiB, then as many announcing 1 048 000 bytes that send all but 100 and trickle 1 byte/s |
//! | `mcp-stall` | one body each: trickling 1 byte/s, nothing after the headers, `Expect: 100-continue` then nothing, chunked with no chunk |
//! | `mcp-big-params` | 10 MiB `tools/call`s with a 5-million-element array (one, then 4 at once); ~1 MB ones with 500 000 elements (4 at once, then from 4 connections for `--duration` s, 15) |
//! | `mcp-unread-answers` | `--count` connections (100) with small receive buffers each pipeline 4 `echo` calls with ~2 MiB answers and never read |
//! | `mcp-progress-token` | progress tokens of 9 MB, 300 bytes, and 200 bytes on `process_file` calls whose streams are not read |
//! | `mcp-origin` | `echo` with `Origin` `http://evil.example`, `null`, `http://localhost:6274`, and none |
//! | `mcp-log-flood` | `--count` (100) each of: a 1 MB method name, a 1 MB tool name, `initialize` with a 1 MB `clientInfo.name` |
//! | `mcp-errors` | one each of the malformed messages JSON-RPC names, and HTTP ones |
//! | `mcp-canary` | nothing but the canary, for `--duration` seconds |
//!
//! The code: this file (the target, requests, answers, tallies, and the
//! report every mode shares), [`canary`], [`bodies`] (slow and stalled
//! bodies), [`big`] (big params), [`unread`] (unread answers) and
//! [`requests`] (progress tokens, origins, long names, malformed messages).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::http::{Response, active_connections, read_response, stats, tcp_connect, write_all};
use crate::wire::{ms, round3};
use crate::{Args, USAGE, clock};

pub(crate) mod big;
pub(crate) mod bodies;
pub(crate) mod canary;
pub(crate) mod requests;
pub(crate) mod unread;

use canary::McpCanary;

/// Where `/mcp` is: `127.0.0.1:PORT` and the path.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) addr: String,
    pub(crate) path: String,
}

impl Target {
    fn of(args: &Args) -> Target {
        let rest = args.url.strip_prefix("http://").unwrap_or(&args.url);
        let path = rest
            .find('/')
            .map_or_else(|| "/mcp".to_owned(), |i| rest[i..].to_owned());
        Target {
            addr: args.addr.clone(),
            path,
        }
    }
}

/// What a Streamable HTTP client must accept.
const ACCEPT: &str = "application/json, text/event-stream";

/// The head of a POST to `/mcp` declaring `length` bytes; `extra` is more
/// header lines, each ending in `\r\n`.
pub(crate) fn head(t: &Target, length: usize, extra: &str) -> String {
    format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: {ACCEPT}\r\nContent-Length: {length}\r\n{extra}\r\n",
        t.path, t.addr
    )
}

/// A whole request: head and body.
pub(crate) fn request(t: &Target, body: &[u8], extra: &str) -> Vec<u8> {
    let mut out = head(t, body.len(), extra).into_bytes();
    out.extend_from_slice(body);
    out
}

/// A `tools/call` of `tool` with `arguments` (JSON text).
pub(crate) fn call_body(id: u64, tool: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

/// An `echo` call of `message` (which needs no escaping).
pub(crate) fn echo_body(id: u64, message: &str) -> String {
    call_body(id, "echo", &format!(r#"{{"message":"{message}"}}"#))
}

/// One answer from `/mcp`.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// The JSON-RPC message answering the request: the JSON body, or the
    /// SSE event carrying a `result` or an `error`.
    pub(crate) rpc: Option<Value>,
    /// SSE events before it (progress, log lines).
    pub(crate) notifications: usize,
    pub(crate) sse: bool,
    pub(crate) retry_after: bool,
    /// `Connection: close` in the answer.
    pub(crate) closing: bool,
    pub(crate) bytes: usize,
    pub(crate) ms: f64,
}

impl Answer {
    pub(super) fn of(response: &Response, started: Instant) -> Answer {
        let head = &response.head;
        let sse = head
            .header("content-type")
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let (rpc, notifications) = if sse {
            sse_messages(&response.body)
        } else {
            (serde_json::from_slice(&response.body).ok(), 0)
        };
        Answer {
            status: head.status,
            rpc,
            notifications,
            sse,
            retry_after: head.header("retry-after").is_some(),
            closing: head
                .header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            bytes: response.body.len(),
            ms: ms(started.elapsed()),
        }
    }

    /// The JSON-RPC error code, if the answer is an error.
    pub(crate) fn code(&self) -> Option<i64> {
        self.rpc.as_ref()?["error"]["code"].as_i64()
    }

    pub(crate) fn has_result(&self) -> bool {
        self.rpc.as_ref().is_some_and(|v| v["result"].is_object())
    }

    /// A tool result marked `isError`.
    pub(crate) fn tool_error(&self) -> bool {
        self.rpc
            .as_ref()
            .is_some_and(|v| v["result"]["isError"] == true)
    }

    /// `200 result`, `200 isError`, `413 -32600`, `503 -32000`, `403 (no JSON-RPC)`…
    pub(crate) fn label(&self) -> String {
        let what = match (self.code(), self.has_result()) {
            (Some(code), _) => code.to_string(),
            (None, true) if self.tool_error() => "isError".to_owned(),
            (None, true) => "result".to_owned(),
            (None, false) => "(no JSON-RPC)".to_owned(),
        };
        format!("{} {what}", self.status)
    }

    /// The error message (or the first text of an `isError` result), cut short.
    pub(crate) fn message(&self) -> Option<String> {
        let rpc = self.rpc.as_ref()?;
        let text = rpc["error"]["message"]
            .as_str()
            .or_else(|| rpc["result"]["content"][0]["text"].as_str())?;
        Some(text.chars().take(160).collect())
    }

    /// Whether this is a clear refusal: a 4xx/5xx status or a JSON-RPC error.
    pub(crate) fn refused_clearly(&self) -> bool {
        self.status >= 400 || self.code().is_some()
    }

    pub(crate) fn to_json(&self) -> Value {
        json!({
            "status": self.status,
            "label": self.label(),
            "code": self.code(),
            "message": self.message(),
            "sse": self.sse,
            "notifications": self.notifications,
            "retry_after": self.retry_after,
            "connection_close": self.closing,
            "bytes": self.bytes,
            "ms": self.ms,
        })
    }
}

/// The answering message and the count of the others in an SSE body.
fn sse_messages(body: &[u8]) -> (Option<Value>, usize) {
    let mut answer = None;
    let mut others = 0;
    for line in body.split(|&b| b == b'\n') {
        let Some(data) = line.strip_prefix(b"data:") else {
            continue;
        };
        let Ok(v) = serde_json::from_slice::<Value>(data.trim_ascii()) else {
            continue;
        };
        if v.get("result").is_some() || v.get("error").is_some() {
            answer = Some(v);
        } else {
            others += 1;
        }
    }
    (answer, others)
}

/// Sends `request` on `s` while reading its answer (a server may answer
/// before it has read the body; writing stops then), within `wait`.
pub(crate) async fn exchange(
    s: &TcpStream,
    buf: &mut Vec<u8>,
    request: &[u8],
    wait: Duration,
) -> Result<Answer, String> {
    let started = Instant::now();
    let write = write_all(s, request);
    let read = read_response(s, buf, wait);
    tokio::pin!(write, read);
    let mut writing = true;
    let response = loop {
        tokio::select! {
            // A failed write is no failure yet: a server that answered
            // early and closed resets the rest, and its answer may still be
            // there to read.
            _ = &mut write, if writing => writing = false,
            response = &mut read => break response,
        }
    }?;
    Ok(Answer::of(&response, started))
}

/// One request on a connection of its own (`Connection: close`).
pub(crate) async fn post_once(
    t: &Target,
    body: &[u8],
    extra: &str,
    wait: Duration,
) -> Result<Answer, String> {
    let s = tcp_connect(&t.addr).await?;
    let extra = format!("{extra}Connection: close\r\n");
    exchange(&s, &mut Vec::new(), &request(t, body, &extra), wait).await
}

/// Outcomes counted by label, with the range of their times.
#[derive(Default)]
pub(crate) struct Tally {
    by: BTreeMap<String, (u64, f64, f64)>,
}

impl Tally {
    pub(crate) fn add(&mut self, label: &str, ms: f64) {
        let e = self
            .by
            .entry(label.to_owned())
            .or_insert((0, f64::INFINITY, 0.0));
        e.0 += 1;
        e.1 = e.1.min(ms);
        e.2 = e.2.max(ms);
    }

    pub(crate) fn merge(&mut self, other: &Tally) {
        for (k, (n, min, max)) in &other.by {
            let e = self.by.entry(k.clone()).or_insert((0, f64::INFINITY, 0.0));
            e.0 += n;
            e.1 = e.1.min(*min);
            e.2 = e.2.max(*max);
        }
    }

    /// Each label and its count.
    pub(crate) fn labels(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by.iter().map(|(k, e)| (k.as_str(), e.0))
    }

    pub(crate) fn to_json(&self) -> Value {
        self.by
            .iter()
            .map(|(k, (n, min, max))| {
                (
                    k.clone(),
                    json!({"count": n, "min_ms": round3(*min), "max_ms": round3(*max)}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// `3× 200 result (1–5 ms); 1× 413 -32600 (0.2 ms)`.
    pub(crate) fn summary(&self) -> String {
        if self.by.is_empty() {
            return "nothing".to_owned();
        }
        self.by
            .iter()
            .map(|(k, (n, min, max))| {
                if (max - min).abs() < 0.05 {
                    format!("{n}× {k} ({min:.1} ms)")
                } else {
                    format!("{n}× {k} ({min:.1}–{max:.1} ms)")
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// A `[0,0,…]` of `n` zeros.
pub(crate) fn zeros(n: usize) -> String {
    let mut s = String::with_capacity(2 * n + 1);
    s.push('[');
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        s.push('0');
    }
    s.push(']');
    s
}

/// Runs one `/mcp` mode with the MCP canary beside it; the report.
pub(crate) async fn run(args: &Args) -> Value {
    let target = Target::of(args);
    let canary = match McpCanary::start(&target) {
        Ok(c) => c,
        Err(e) => return json!({"attack": args.mode, "error": e}),
    };
    let started = Instant::now();
    let attack_started_at = clock();
    let duration = args.duration;
    let result = match args.mode.as_str() {
        "mcp-stalled-bodies" => bodies::stalled_bodies(&target, args.count.unwrap_or(600)).await,
        "mcp-stall" => bodies::stall(&target).await,
        "mcp-big-params" => {
            big::big_params(&target, duration.unwrap_or(Duration::from_secs(15))).await
        }
        "mcp-unread-answers" => unread::unread_answers(&target, args.count.unwrap_or(100)).await,
        "mcp-progress-token" => requests::progress_token(&target).await,
        "mcp-origin" => requests::origin(&target, &canary).await,
        "mcp-log-flood" => requests::log_flood(&target, args.count.unwrap_or(100)).await,
        "mcp-errors" => requests::errors(&target).await,
        "mcp-canary" => {
            tokio::time::sleep(duration.unwrap_or(Duration::from_secs(10))).await;
            Ok(json!({"attack": "mcp-canary", "attacker_got": "nothing (canary only)"}))
        }
        other => Err(format!("unknown attack `{other}`\n{USAGE}")),
    };
    let mut report = result.unwrap_or_else(|e| json!({"attack": args.mode, "error": e}));
    report["attack_seconds"] = json!(round3(started.elapsed().as_secs_f64()));
    report["attack_started_at_s"] = json!(attack_started_at);
    tokio::time::sleep(Duration::from_secs(1)).await;
    report["active_connections_after"] = active_connections(&target.addr).await;
    if let Some(after) = stats(&target.addr).await {
        report["stats_after"] = json!({
            "outboundBytes": after["outboundBytes"],
            "connectionsClosed": after["connectionsClosed"],
            "toolExecutions": after["toolExecutions"],
            "activeConnections": after["activeConnections"],
        });
    }
    report["canary"] = canary.finish();
    report
}
