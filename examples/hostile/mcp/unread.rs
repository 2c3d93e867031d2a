//! Answers nobody reads (mode `mcp-unread-answers`): connections that ask
//! `echo` for ~2 MiB answers and never read, while `/stats` shows what the
//! server holds for them and how many it closes as too slow.
//!
//! On loopback Linux takes megabytes of a connection's answers into its
//! socket buffers (64 KiB segments, send buffers grown up to 4 MiB), so one
//! ~2 MiB answer would leave the server holding nothing. Each connection
//! therefore shrinks its receive buffer and pipelines [`PIPELINED`]
//! requests (HTTP/1.1 answers them in order, one at a time): once the
//! kernel's share (about 1 MiB) is full, the server holds the rest of one
//! answer per connection, about 105 MiB for 100 connections (under the
//! 128 MiB `max_inflight_answer_bytes`: each is closed after
//! `write_timeout`; with `--count 150` the server goes over it, and closes
//! some after a second).
//!
//! The attacker does not read until the end: then a connection the server
//! closed yields what the kernel held for it, then its end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::{TcpSocket, TcpStream};

use super::{Target, echo_body, request};
use crate::http::{find, read_some, stats, write_all};
use crate::wire::{ms, round3};

/// Requests each connection sends without reading.
const PIPELINED: usize = 4;
/// The `echo` message: the answer carries it twice (text and
/// `structuredContent`), and the request stays under `max_message_bytes`.
const MESSAGE_CHARS: usize = 1_040_000;
/// `SO_RCVBUF` of the connections (Linux doubles it).
const RECEIVE_BUFFER: u32 = 4096;
/// How long the server is watched.
const WATCH: Duration = Duration::from_secs(40);

/// Connects with a receive buffer of a few KiB (no window growth).
async fn small_window_connect(addr: &str) -> Result<TcpStream, String> {
    let to = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| format!("resolve: {e}"))?
        .next()
        .ok_or("no address")?;
    let socket = if to.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|e| format!("socket: {e}"))?;
    socket
        .set_recv_buffer_size(RECEIVE_BUFFER)
        .map_err(|e| format!("SO_RCVBUF: {e}"))?;
    let s = tokio::time::timeout(Duration::from_secs(10), socket.connect(to))
        .await
        .map_err(|_| "TCP connect timed out".to_owned())?
        .map_err(|e| format!("TCP connect: {e}"))?;
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Pipelined responses read back: how many arrived whole.
#[derive(Default)]
struct Responses {
    head: Vec<u8>,
    body_left: usize,
    complete: usize,
    /// A head too long or without `Content-Length`: counting stopped.
    lost: bool,
}

impl Responses {
    fn feed(&mut self, data: &[u8]) {
        let mut i = 0;
        while i < data.len() && !self.lost {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len() - i);
                self.body_left -= n;
                i += n;
                if self.body_left == 0 {
                    self.complete += 1;
                }
                continue;
            }
            let start = self.head.len();
            self.head.extend_from_slice(&data[i..]);
            let Some(end) = find(&self.head, b"\r\n\r\n") else {
                self.lost = self.head.len() > 64 * 1024;
                return;
            };
            // The head ends in what was just added.
            i += end + 4 - start;
            let text = String::from_utf8_lossy(&self.head[..end]).to_ascii_lowercase();
            self.head.clear();
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            match length {
                Some(0) => self.complete += 1,
                Some(n) => self.body_left = n,
                None => self.lost = true,
            }
        }
    }
}

/// What one connection got to send, and read at the end.
#[derive(Default)]
struct Drained {
    requests_written: usize,
    write_error: Option<String>,
    bytes: usize,
    /// The server had closed it: the stream ended (or was reset).
    ended: bool,
    complete: usize,
}

/// Reads what `s` has: until its end, or 2 s without a byte (10 s at most).
async fn drain(s: &TcpStream, d: &mut Drained) {
    let mut responses = Responses::default();
    let mut chunk = vec![0u8; 64 * 1024];
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left.min(Duration::from_secs(2)), read_some(s, &mut chunk)).await
        {
            Err(_) => break,
            Ok(Ok(0)) | Ok(Err(_)) => {
                d.ended = true;
                break;
            }
            Ok(Ok(n)) => {
                d.bytes += n;
                responses.feed(&chunk[..n]);
            }
        }
    }
    d.complete = responses.complete;
}

/// Mode `mcp-unread-answers`.
pub(crate) async fn unread_answers(t: &Target, count: usize) -> Result<Value, String> {
    let one = Arc::new(request(
        t,
        echo_body(1, &"x".repeat(MESSAGE_CHARS)).as_bytes(),
        "",
    ));
    let before = stats(&t.addr).await.ok_or("no /stats before the attack")?;
    let slow_before = before["connectionsClosed"]["tooSlow"].as_u64().unwrap_or(0);
    let started = Instant::now();
    let deadline = started + WATCH;
    let mut conns = Vec::new();
    let mut connect_errors = Vec::new();
    for _ in 0..count {
        match small_window_connect(&t.addr).await {
            Ok(s) => conns.push(Arc::new(s)),
            Err(e) => connect_errors.push(e),
        }
    }
    // Writers: they stop when the server stops reading, at the latest at
    // the end of the watch.
    let writers: Vec<_> = conns
        .iter()
        .map(|s| {
            let s = Arc::clone(s);
            let one = Arc::clone(&one);
            tokio::spawn(async move {
                let mut written = 0;
                for _ in 0..PIPELINED {
                    match tokio::time::timeout_at(deadline.into(), write_all(&s, &one)).await {
                        Ok(Ok(())) => written += 1,
                        Ok(Err(e)) => return (written, Some(format!("write: {e}"))),
                        Err(_) => return (written, Some("write stalled".to_owned())),
                    }
                }
                (written, None)
            })
        })
        .collect();
    // Watch the server let go, without reading: `/stats` every 500 ms.
    let mut series = Vec::new();
    let mut outbound_peak = 0u64;
    let mut peak_at = 0.0;
    let mut zero_at: Option<f64> = None;
    let mut closes_at: Vec<(f64, u64)> = Vec::new();
    let mut last_slow = 0;
    while Instant::now() < deadline {
        let tick = Instant::now();
        if let Some(st) = stats(&t.addr).await {
            let at = round3(started.elapsed().as_secs_f64());
            let outbound = st["outboundBytes"].as_u64().unwrap_or(0);
            let slow = st["connectionsClosed"]["tooSlow"]
                .as_u64()
                .unwrap_or(0)
                .saturating_sub(slow_before);
            if outbound > outbound_peak {
                outbound_peak = outbound;
                peak_at = at;
            }
            if slow > last_slow {
                closes_at.push((at, slow - last_slow));
                last_slow = slow;
            }
            if outbound_peak > 0 && outbound < 64 * 1024 {
                zero_at.get_or_insert(at);
            } else {
                zero_at = None;
            }
            series.push(json!({"t_s": at, "outboundBytes": outbound, "tooSlow": slow}));
            // Every connection let go: no need to wait longer.
            if zero_at.is_some() && slow as usize >= conns.len() {
                break;
            }
        }
        tokio::time::sleep_until((tick + Duration::from_millis(500)).into()).await;
    }
    let mut drained = Vec::with_capacity(conns.len());
    for w in writers {
        // Each ends by the end of the watch; one that does not is dropped.
        let (requests_written, write_error) = tokio::time::timeout(Duration::from_secs(2), w)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_else(|| (0, Some("writer did not end".to_owned())));
        drained.push(Drained {
            requests_written,
            write_error,
            ..Drained::default()
        });
    }
    futures_util::future::join_all(
        conns
            .iter()
            .zip(drained.iter_mut())
            .map(|(s, d)| drain(s, d)),
    )
    .await;
    drop(conns);
    let ended = drained.iter().filter(|d| d.ended).count();
    let complete: usize = drained.iter().map(|d| d.complete).sum();
    let written: usize = drained.iter().map(|d| d.requests_written).sum();
    let bytes: Vec<usize> = drained.iter().map(|d| d.bytes).collect();
    let write_errors: Vec<&str> = drained
        .iter()
        .filter_map(|d| d.write_error.as_deref())
        .take(3)
        .collect();
    let summary = format!(
        "{} connections (receive buffer {RECEIVE_BUFFER} B) pipelined {written} of {} ~1 MiB echo calls (~2 MiB answers) and read nothing: /stats outboundBytes peaked at {:.1} MiB at {peak_at:.1} s, under 64 KiB again at {}; closed too slow: {last_slow} ({}); read at the end: {ended} ended by the server, {complete} whole answers",
        drained.len(),
        drained.len() * PIPELINED,
        outbound_peak as f64 / 1_048_576.0,
        zero_at.map_or("never (within 40 s)".to_owned(), |s| format!("{s:.1} s")),
        closes_at
            .iter()
            .map(|(at, n)| format!("{n} at {at:.1} s"))
            .collect::<Vec<_>>()
            .join(", "),
    );
    Ok(json!({
        "attack": "mcp-unread-answers",
        "name": "~2 MiB answers never read",
        "attacker_got": summary,
        "connections": drained.len(),
        "connect_errors": connect_errors,
        "pipelined_per_connection": PIPELINED,
        "receive_buffer_bytes": RECEIVE_BUFFER,
        "request_bytes": one.len(),
        "requests_written": written,
        "write_errors": write_errors,
        "outbound_peak_bytes": outbound_peak,
        "outbound_peak_at_s": peak_at,
        "outbound_zero_at_s": zero_at,
        "closed_too_slow": last_slow,
        "closes_at": closes_at.iter().map(|(at, n)| json!({"t_s": at, "closed": n})).collect::<Vec<_>>(),
        "ended_by_server": ended,
        "whole_answers_read": complete,
        "bytes_read_min": bytes.iter().min(),
        "bytes_read_max": bytes.iter().max(),
        "stats_series": series,
        "watch_ms": ms(started.elapsed()),
    }))
}
