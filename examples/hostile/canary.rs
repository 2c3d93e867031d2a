//! The canary: a client of its own, on its own thread and runtime, connected
//! before an attack starts, that calls `echo` about 50 times a second and
//! times each call from send to its `TOOL_DONE`; it reconnects when a call
//! fails and reports percentiles, failures and its slowest calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::clock;
use crate::wire::{call_text, close, describe, open, percentile, round3, wait_done};

/// The canary's pace and its patience per call.
const CANARY_INTERVAL: Duration = Duration::from_millis(20);
const CANARY_TIMEOUT: Duration = Duration::from_secs(5);

pub(crate) struct Canary {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Value>,
}

impl Canary {
    /// Connects the canary (on its own thread and runtime, so the attack's
    /// tasks cannot delay it) and starts its calls.
    pub(crate) fn start(url: &str) -> Result<Canary, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let url = url.to_owned();
        let flag = Arc::clone(&stop);
        let thread =
            std::thread::spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime.block_on(canary_loop(url, flag, ready_tx)),
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("canary runtime: {e}")));
                        json!({"error": "no runtime"})
                    }
                }
            });
        match ready_rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(())) => Ok(Canary { stop, thread }),
            Ok(Err(e)) => Err(format!("canary: {e}")),
            Err(_) => Err("canary: not connected within 20 s".to_owned()),
        }
    }

    pub(crate) fn finish(self) -> Value {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .unwrap_or_else(|_| json!({"error": "canary thread panicked"}))
    }
}

async fn canary_loop(
    url: String,
    stop: Arc<AtomicBool>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> Value {
    let mut ws = match open(&url).await {
        Ok((ws, _)) => {
            let _ = ready.send(Ok(()));
            Some(ws)
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
    let mut others = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let t0 = Instant::now();
        let sent_at = clock();
        n += 1;
        let id = format!("c-{n}");
        let outcome = match ws.as_mut() {
            None => Err("not connected".to_owned()),
            Some(socket) => {
                let text = call_text(&id, "echo", r#"{"message":"canary"}"#);
                match tokio::time::timeout(CANARY_TIMEOUT, socket.send(Message::text(text))).await {
                    Err(_) => Err("send took over 5 s".to_owned()),
                    Ok(Err(e)) => Err(format!("send: {e}")),
                    Ok(Ok(())) => {
                        let left = CANARY_TIMEOUT.saturating_sub(t0.elapsed());
                        wait_done(socket, &id, left, &mut others)
                            .await
                            .and_then(|(v, _)| match v["payload"]["status"].as_str() {
                                Some("OK") => Ok(()),
                                _ => Err(describe(&v)),
                            })
                    }
                }
            }
        };
        match outcome {
            Ok(()) => {
                let latency = t0.elapsed().as_secs_f64() * 1000.0;
                latencies.push(latency);
                slowest.push((latency, sent_at));
                if slowest.len() > 20 {
                    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
                    slowest.truncate(5);
                }
            }
            Err(e) => {
                failed += 1;
                if failures.len() < 5 {
                    failures.push(format!("at {sent_at:.1} s: {e}"));
                }
                ws = None;
                if !stop.load(Ordering::Relaxed) {
                    if let Ok((socket, _)) = open(&url).await {
                        ws = Some(socket);
                        reconnects += 1;
                    } else {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
        }
        tokio::time::sleep_until((t0 + CANARY_INTERVAL).into()).await;
    }
    if let Some(socket) = ws {
        close(socket).await;
    }
    latencies.sort_by(f64::total_cmp);
    slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
    slowest.truncate(5);
    json!({
        "calls": n,
        "ok": latencies.len(),
        "failed": failed,
        "reconnects": reconnects,
        "p50_ms": percentile(&latencies, 50.0).map(round3),
        "p99_ms": percentile(&latencies, 99.0).map(round3),
        "max_ms": latencies.last().copied().map(round3),
        "first_failures": failures,
        "slowest": slowest.iter().map(|(ms, at)| json!({"ms": round3(*ms), "at_s": at})).collect::<Vec<_>>(),
    })
}
