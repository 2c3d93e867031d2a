//! Attacks 6 and 7, a crowd of clients: thousands of silent WebSocket
//! connections, and hundreds of sessions that each fill about 1 MiB of replay
//! window and then vanish without a close.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt, stream};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::Args;
use crate::http::{active_connections, stats};
use crate::wire::{Got, Opened, close, kind, open, open_outcome, ping_text, recv, round3};

// ---------------------------------------------------------------------------
// Attack 6: thousands of silent connections

pub(crate) async fn attack_connections(args: &Args) -> Result<Value, String> {
    let count = args.count.unwrap_or(10_000);
    let started = Instant::now();
    let phase_deadline = started + Duration::from_secs(120);
    let mut opening = stream::iter(0..count)
        .map(|_| open_outcome(&args.url))
        .buffer_unordered(64);
    let mut sockets = Vec::with_capacity(count);
    let mut closes: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures: BTreeMap<String, u64> = BTreeMap::new();
    let mut finished = 0usize;
    while let Ok(Some(outcome)) =
        tokio::time::timeout_at(phase_deadline.into(), opening.next()).await
    {
        finished += 1;
        match outcome {
            Opened::Hai(ws, _) => sockets.push(*ws),
            Opened::Closed(code, reason) => {
                *closes.entry(format!("{code} {reason}")).or_default() += 1
            }
            Opened::Failed(e) => {
                let key: String = e.chars().take(80).collect();
                *failures.entry(key).or_default() += 1;
            }
        }
    }
    drop(opening);
    let seconds_to_open = round3(started.elapsed().as_secs_f64());
    let not_finished = count - finished;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let active_while_open = active_connections(&args.addr).await;
    // Hold them, silent, while the canary keeps calling.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let held = sockets.len();
    let _ = tokio::time::timeout(
        Duration::from_secs(60),
        stream::iter(sockets).for_each_concurrent(256, close),
    )
    .await;
    let summary = format!(
        "{held} got HAI; {}{}{} (of {count}, opened in {seconds_to_open:.1} s, server counted {active_while_open} active incl. the canary)",
        if closes.is_empty() {
            "no close".to_owned()
        } else {
            closes
                .iter()
                .map(|(k, v)| format!("{v} got close {k}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        if failures.is_empty() {
            String::new()
        } else {
            format!("; failures: {failures:?}")
        },
        if not_finished > 0 {
            format!("; {not_finished} unfinished at 120 s")
        } else {
            String::new()
        },
    );
    Ok(json!({
        "attack": "6",
        "name": "silent connections",
        "attacker_got": summary,
        "accepted_calls": 0,
        "tool_dones": 0,
        "lost_tool_dones": 0,
        "connections": count,
        "got_hai": held,
        "closes": closes,
        "failures": failures,
        "unfinished": not_finished,
        "seconds_to_open": seconds_to_open,
        "server_active_connections_while_open": active_while_open,
    }))
}

// ---------------------------------------------------------------------------
// Attack 7: replay windows of vanished sessions

async fn fill_window(
    url: String,
    nonce: Arc<str>,
    target_bytes: usize,
    index: usize,
) -> Result<(u64, u64), String> {
    let (ws, _) = open(&url).await?;
    let (mut sink, mut stream) = ws.split();
    let total = (target_bytes / nonce.len() + 1) as u64;
    let window = 16;
    let mut sent = 0u64;
    let mut got = 0u64;
    let mut bytes = 0u64;
    let ping = |n: u64| ping_text(&format!("{nonce}-{index}-{n}"));
    while sent < total.min(window) {
        sent += 1;
        sink.feed(Message::text(ping(sent)))
            .await
            .map_err(|e| format!("send: {e}"))?;
    }
    sink.flush().await.map_err(|e| format!("send: {e}"))?;
    while got < total {
        match recv(&mut stream, Duration::from_secs(10)).await {
            Got::Envelope(v, size) if kind(&v) == "PONG" => {
                got += 1;
                bytes += size as u64;
                if sent < total {
                    sent += 1;
                    sink.send(Message::text(ping(sent)))
                        .await
                        .map_err(|e| format!("send: {e}"))?;
                }
            }
            Got::Envelope(..) => {}
            other => return Err(other.describe_end()),
        }
    }
    // Vanish: the TCP connection ends without a WebSocket close.
    drop(sink);
    drop(stream);
    Ok((got, bytes))
}

pub(crate) async fn attack_replay_budget(args: &Args) -> Result<Value, String> {
    let sessions = args.count.unwrap_or(400);
    let nonce: Arc<str> = Arc::from("n".repeat(2048));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let addr = args.addr.clone();
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut max_replay = 0u64;
            let mut max_detached = 0u64;
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) && samples < 2000 {
                if let Some(s) = stats(&addr).await {
                    samples += 1;
                    max_replay = max_replay.max(s["replayBytes"].as_u64().unwrap_or(0));
                    max_detached = max_detached.max(s["detachedSessions"].as_u64().unwrap_or(0));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            (max_replay, max_detached, samples)
        })
    };
    let started = Instant::now();
    let results: Vec<Result<(u64, u64), String>> = tokio::time::timeout(
        Duration::from_secs(240),
        stream::iter(0..sessions)
            .map(|i| fill_window(args.url.clone(), Arc::clone(&nonce), 1 << 20, i))
            .buffer_unordered(16)
            .collect(),
    )
    .await
    .map_err(|_| "sessions not filled within 240 s".to_owned())?;
    let seconds = round3(started.elapsed().as_secs_f64());
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let (max_replay, max_detached, samples) = sampler.await.unwrap_or((0, 0, 0));
    let end = stats(&args.addr).await.unwrap_or(Value::Null);
    let filled = results.iter().filter(|r| r.is_ok()).count();
    let pongs: u64 = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|r| r.0)
        .sum();
    let pong_bytes: u64 = results
        .iter()
        .filter_map(|r| r.as_ref().ok())
        .map(|r| r.1)
        .sum();
    let errors: Vec<&String> = results
        .iter()
        .filter_map(|r| r.as_ref().err())
        .take(3)
        .collect();
    let mib = |v: &Value| {
        v.as_u64()
            .map_or("?".to_owned(), |b| format!("{:.1}", b as f64 / 1048576.0))
    };
    let summary = format!(
        "{filled} of {sessions} sessions filled ({:.0} MiB of PONGs) and vanished; /stats replayBytes peak {} MiB, at end {} MiB; detachedSessions at end {} (peak {max_detached}){}",
        pong_bytes as f64 / 1048576.0,
        mib(&json!(max_replay)),
        mib(&end["replayBytes"]),
        end["detachedSessions"],
        if errors.is_empty() {
            String::new()
        } else {
            format!("; errors: {errors:?}")
        },
    );
    Ok(json!({
        "attack": "7",
        "name": "replay windows of vanished sessions",
        "attacker_got": summary,
        "accepted_calls": 0,
        "tool_dones": 0,
        "lost_tool_dones": 0,
        "sessions": sessions,
        "filled": filled,
        "pongs": pongs,
        "pong_bytes": pong_bytes,
        "seconds": seconds,
        "replay_bytes_peak": max_replay,
        "detached_sessions_peak": max_detached,
        "stats_samples": samples,
        "replay_bytes_end": end["replayBytes"],
        "detached_sessions_end": end["detachedSessions"],
        "stats_end": end,
        "errors": errors,
    }))
}
