//! Attack 1: three clients send 900 KB `echo` calls as fast as they can and
//! never read. Also the pipelined callers that attacks 5 and 8e share: clients
//! that keep a few calls in flight and read every reply.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::Args;
use crate::http::stats;
use crate::wire::{Got, call_text, close, describe, kind, open, recv, round3};

/// Size of the `echo` messages of attacks 1 and 8e.
const FLOOD_MESSAGE_BYTES: usize = 900_000;

// ---------------------------------------------------------------------------
// Pipelined callers (attacks 5 and 8e)

#[derive(Default)]
pub(crate) struct Pipe {
    sent: u64,
    dones: u64,
    duplicate_dones: u64,
    statuses: BTreeMap<String, u64>,
    max_reply_bytes: usize,
    ended: Option<String>,
    send_error: Option<String>,
}

/// One client keeping `in_flight` calls going until `deadline`, reading every
/// reply; then it waits up to `grace` for the outstanding `TOOL_DONE`s.
pub(crate) async fn pipelined_client(
    url: String,
    make: Arc<dyn Fn(u64) -> String + Send + Sync>,
    in_flight: usize,
    deadline: Instant,
    grace: Duration,
) -> Pipe {
    let mut r = Pipe::default();
    let ws = match open(&url).await {
        Ok((ws, _)) => ws,
        Err(e) => {
            r.ended = Some(e);
            return r;
        }
    };
    let (mut sink, mut stream) = ws.split();
    let permits = Arc::new(tokio::sync::Semaphore::new(in_flight));
    let sent = Arc::new(AtomicU64::new(0));
    let writer_done = Arc::new(AtomicBool::new(false));
    let writer = {
        let permits = Arc::clone(&permits);
        let sent = Arc::clone(&sent);
        let writer_done = Arc::clone(&writer_done);
        tokio::spawn(async move {
            let mut n = 0;
            let mut error = None;
            while Instant::now() < deadline {
                match tokio::time::timeout_at(deadline.into(), permits.acquire()).await {
                    Ok(Ok(permit)) => permit.forget(),
                    _ => break,
                }
                n += 1;
                let text = make(n);
                let limit = deadline + Duration::from_secs(5);
                match tokio::time::timeout_at(limit.into(), sink.send(Message::text(text))).await {
                    Ok(Ok(())) => {
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(Err(e)) => {
                        error = Some(format!("send: {e}"));
                        break;
                    }
                    Err(_) => {
                        error = Some("send stalled".to_owned());
                        break;
                    }
                }
            }
            writer_done.store(true, Ordering::SeqCst);
            (sink, error)
        })
    };
    let hard = deadline + grace;
    let mut seen = HashSet::new();
    loop {
        if writer_done.load(Ordering::SeqCst) && r.dones >= sent.load(Ordering::SeqCst) {
            break;
        }
        let left = hard.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match recv(&mut stream, left.min(Duration::from_millis(200))).await {
            Got::Envelope(v, size) if kind(&v) == "TOOL_DONE" => {
                let id = v["payload"]["call_id"].as_str().unwrap_or("").to_owned();
                if !seen.insert(id) {
                    r.duplicate_dones += 1;
                    continue;
                }
                r.dones += 1;
                permits.add_permits(1);
                r.max_reply_bytes = r.max_reply_bytes.max(size);
                *r.statuses.entry(describe(&v)).or_default() += 1;
            }
            Got::Envelope(..) | Got::Timeout => {}
            other => {
                r.ended = Some(other.describe_end());
                permits.close();
                break;
            }
        }
    }
    permits.close();
    r.sent = sent.load(Ordering::SeqCst);
    if let Ok((sink, error)) = writer.await {
        r.send_error = error;
        if r.ended.is_none()
            && let Ok(ws) = sink.reunite(stream)
        {
            close(ws).await;
        }
    }
    r.sent = sent.load(Ordering::SeqCst);
    r
}

pub(crate) fn merge_pipes(pipes: &[Pipe]) -> Value {
    let mut statuses: BTreeMap<String, u64> = BTreeMap::new();
    for p in pipes {
        for (k, v) in &p.statuses {
            *statuses.entry(k.clone()).or_default() += v;
        }
    }
    let sent: u64 = pipes.iter().map(|p| p.sent).sum();
    let dones: u64 = pipes.iter().map(|p| p.dones).sum();
    json!({
        "accepted_calls": sent,
        "tool_dones": dones,
        "lost_tool_dones": sent.saturating_sub(dones),
        "duplicate_tool_dones": pipes.iter().map(|p| p.duplicate_dones).sum::<u64>(),
        "statuses": statuses,
        "max_reply_bytes": pipes.iter().map(|p| p.max_reply_bytes).max(),
        "per_client_calls": pipes.iter().map(|p| p.sent).collect::<Vec<_>>(),
        "connections_ended": pipes.iter().filter_map(|p| p.ended.clone()).collect::<Vec<_>>(),
        "send_errors": pipes.iter().filter_map(|p| p.send_error.clone()).collect::<Vec<_>>(),
    })
}

pub(crate) fn flood_message(call_id: &str) -> String {
    // One 900 KB message, as echo params.
    let big = "x".repeat(FLOOD_MESSAGE_BYTES);
    call_text(call_id, "echo", &format!(r#"{{"message":"{big}"}}"#))
}

// ---------------------------------------------------------------------------
// Attack 1: three clients flood 900 KB calls and never read

pub(crate) async fn attack_flood(args: &Args) -> Result<Value, String> {
    let duration = args.duration.unwrap_or(Duration::from_secs(30));
    let started = Instant::now();
    let deadline = started + duration;
    let mut clients = Vec::new();
    for i in 0..3 {
        let (ws, _) = open(&args.url).await?;
        clients.push(tokio::spawn(async move {
            let mut ws = ws;
            let mut sent = 0u64;
            let mut last_ok = Duration::ZERO;
            let mut error = None;
            while Instant::now() < deadline {
                let text = flood_message(&format!("f{i}-{}", sent + 1));
                match tokio::time::timeout_at(deadline.into(), ws.send(Message::text(text))).await {
                    Ok(Ok(())) => {
                        sent += 1;
                        last_ok = started.elapsed();
                    }
                    Ok(Err(e)) => {
                        error = Some(e.to_string());
                        break;
                    }
                    Err(_) => break,
                }
            }
            // The socket is handed back unread, to be dropped after the stats.
            (ws, sent, last_ok, error)
        }));
    }
    let mut results = Vec::new();
    for c in clients {
        results.push(c.await.map_err(|e| format!("flood task: {e}"))?);
    }
    let during = stats(&args.addr).await;
    let stalled: Vec<bool> = results
        .iter()
        .map(|(_, _, last, error)| {
            error.is_none() && duration.saturating_sub(*last) > Duration::from_secs(3)
        })
        .collect();
    let sent: Vec<u64> = results.iter().map(|r| r.1).collect();
    let last_send_s: Vec<f64> = results.iter().map(|r| round3(r.2.as_secs_f64())).collect();
    let errors: Vec<String> = results.iter().filter_map(|r| r.3.clone()).collect();
    let summary = if stalled.iter().all(|s| *s) {
        format!(
            "sends stalled after {} calls (last send at {} s); no close in {} s",
            sent.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
            last_send_s
                .iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join(" / "),
            duration.as_secs()
        )
    } else {
        format!(
            "sent {} calls; stalled: {:?}; errors: {:?}",
            sent.iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(" / "),
            stalled,
            errors
        )
    };
    drop(results);
    Ok(json!({
        "attack": "1",
        "name": "flood 900 KB calls, never read",
        "attacker_got": summary,
        "accepted_calls": sent.iter().sum::<u64>(),
        "tool_dones": Value::Null,
        "lost_tool_dones": Value::Null,
        "sent_per_client": sent,
        "last_send_s": last_send_s,
        "stalled": stalled,
        "send_errors": errors,
        "server_outbound_bytes_at_end": during.as_ref().map(|s| s["outboundBytes"].clone()),
        "server_connections_closed_at_end": during.as_ref().map(|s| s["connectionsClosed"].clone()),
    }))
}
