//! The MCP canary: a client of its own, on its own thread and runtime (so
//! the attack's tasks cannot delay it), that calls `echo` on `/mcp` every
//! 100 ms over one keep-alive HTTP/1.1 connection and times each call from
//! the first byte sent to the last byte of its answer. A call fails unless
//! it gets a `200` with a JSON-RPC `result` within 5 s; after a failure (or
//! an answer that closes the connection) it connects again.
//!
//! An attack that compares `/stats` counters can [`McpCanary::pause`] it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::{Target, echo_body, exchange, request};
use crate::clock;
use crate::http::tcp_connect;
use crate::wire::{percentile, round3};

/// The canary's pace and its patience per call.
const INTERVAL: Duration = Duration::from_millis(100);
const TIMEOUT: Duration = Duration::from_secs(5);

/// What the attack and the canary's thread share.
#[derive(Default)]
struct Flags {
    stop: AtomicBool,
    /// Asked to make no calls.
    paused: AtomicBool,
    /// Paused, and no call of its own in flight.
    idle: AtomicBool,
}

pub(crate) struct McpCanary {
    flags: Arc<Flags>,
    thread: std::thread::JoinHandle<Value>,
}

impl McpCanary {
    /// Connects the canary and starts its calls.
    pub(crate) fn start(target: &Target) -> Result<McpCanary, String> {
        let flags = Arc::new(Flags::default());
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let target = target.clone();
        let shared = Arc::clone(&flags);
        let thread =
            std::thread::spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(canary_loop(target, shared, ready_tx)),
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("canary runtime: {e}")));
                        json!({"error": "no runtime"})
                    }
                }
            });
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(())) => Ok(McpCanary { flags, thread }),
            Ok(Err(e)) => Err(format!("canary: {e}")),
            Err(_) => Err("canary: not connected within 20 s".to_owned()),
        }
    }

    /// Stops the canary's calls; returns once none is in flight (at most
    /// about 6 s), whether it got there.
    pub(crate) async fn pause(&self) -> bool {
        self.flags.paused.store(true, Ordering::SeqCst);
        self.flags.idle.store(false, Ordering::SeqCst);
        let deadline = Instant::now() + TIMEOUT + Duration::from_secs(1);
        while Instant::now() < deadline {
            if self.flags.idle.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    pub(crate) fn resume(&self) {
        self.flags.paused.store(false, Ordering::SeqCst);
    }

    pub(crate) fn finish(self) -> Value {
        self.flags.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .unwrap_or_else(|_| json!({"error": "canary thread panicked"}))
    }
}

/// One keep-alive connection and what was read past the last answer.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

async fn connect(target: &Target) -> Result<Conn, String> {
    Ok(Conn {
        stream: tcp_connect(&target.addr).await?,
        buf: Vec::new(),
    })
}

/// One call: `Ok(keep the connection)` for a `200` with a `result`.
async fn call(conn: &mut Conn, target: &Target, id: u64) -> Result<bool, String> {
    let body = echo_body(id, "canary");
    let bytes = request(target, body.as_bytes(), "");
    let answer = tokio::time::timeout(
        TIMEOUT,
        exchange(&conn.stream, &mut conn.buf, &bytes, TIMEOUT),
    )
    .await
    .map_err(|_| "no answer within 5 s".to_owned())??;
    let id_matches = answer.rpc.as_ref().is_some_and(|v| v["id"] == id);
    if answer.status != 200 || !answer.has_result() || !id_matches {
        return Err(format!(
            "{} ({} B{})",
            answer.label(),
            answer.bytes,
            answer
                .message()
                .map(|m| format!(": {m}"))
                .unwrap_or_default()
        ));
    }
    Ok(!answer.closing)
}

async fn canary_loop(
    target: Target,
    flags: Arc<Flags>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Value {
    let mut conn = match connect(&target).await {
        Ok(c) => {
            let _ = ready.send(Ok(()));
            Some(c)
        }
        Err(e) => {
            let _ = ready.send(Err(e.clone()));
            return json!({"error": e});
        }
    };
    let mut latencies = Vec::new();
    // The slowest calls: (latency ms, sent at s).
    let mut slowest: Vec<(f64, f64)> = Vec::new();
    let mut failed = 0u64;
    let mut reconnects = 0u64;
    let mut failures: Vec<String> = Vec::new();
    let mut n = 0u64;
    let mut paused_s = 0.0;
    while !flags.stop.load(Ordering::SeqCst) {
        if flags.paused.load(Ordering::SeqCst) {
            flags.idle.store(true, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(20)).await;
            paused_s += 0.02;
            continue;
        }
        if conn.is_none() {
            match connect(&target).await {
                Ok(c) => {
                    conn = Some(c);
                    reconnects += 1;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        let t0 = Instant::now();
        let sent_at = clock();
        n += 1;
        let outcome = match conn.as_mut() {
            None => Err("not connected".to_owned()),
            Some(c) => call(c, &target, n).await,
        };
        match outcome {
            Ok(keep) => {
                let latency = t0.elapsed().as_secs_f64() * 1000.0;
                latencies.push(latency);
                slowest.push((latency, sent_at));
                if slowest.len() > 20 {
                    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
                    slowest.truncate(5);
                }
                if !keep {
                    conn = None;
                }
            }
            Err(e) => {
                failed += 1;
                if failures.len() < 5 {
                    failures.push(format!("at {sent_at:.1} s: {e}"));
                }
                conn = None;
            }
        }
        tokio::time::sleep_until((t0 + INTERVAL).into()).await;
    }
    drop(conn);
    latencies.sort_by(f64::total_cmp);
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    slowest.truncate(5);
    json!({
        "calls": n,
        "ok": latencies.len(),
        "failed": failed,
        "reconnects": reconnects,
        "paused_s": round3(paused_s),
        "p50_ms": percentile(&latencies, 50.0).map(round3),
        "p99_ms": percentile(&latencies, 99.0).map(round3),
        "max_ms": latencies.last().copied().map(round3),
        "first_failures": failures,
        "slowest": slowest.iter().map(|(ms, at)| json!({"ms": round3(*ms), "at_s": at})).collect::<Vec<_>>(),
    })
}
