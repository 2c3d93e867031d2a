//! Attack 8, the small ones: a huge and a missing binary frame, overflowing
//! lengths and credits, invalid UTF-8, reserved opcodes and bits (on a
//! WebSocket handshaken by hand), and a spike of 900 KB calls that are read.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::Args;
use crate::attacks::flood::{flood_message, merge_pipes, pipelined_client};
use crate::attacks::merge_into;
use crate::http::{read_head, read_some, tcp_connect, write_all};
use crate::wire::{Got, Ws, close, describe, kind, open, ping_pong, ping_text, recv, round3};

/// Highest `u64`, as clients may write it.
const U64_MAX: &str = "18446744073709551615";

/// Reads until `until` matches, the connection closes, or `wait` passes;
/// returns what was seen (HAI and heartbeat PINGs left out).
async fn observe(
    ws: &mut Ws,
    wait: Duration,
    until: impl Fn(&Value) -> bool,
) -> (Vec<String>, bool) {
    let deadline = Instant::now() + wait;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match recv(ws, left).await {
            Got::Envelope(v, _) => {
                if !matches!(kind(&v), "HAI" | "PING") {
                    seen.push(describe(&v));
                }
                if until(&v) {
                    return (seen, true);
                }
            }
            Got::Timeout => {
                seen.push(format!("nothing more within {wait:?}"));
                return (seen, false);
            }
            other => {
                seen.push(other.describe_end());
                return (seen, true);
            }
        }
    }
}

async fn small_huge_bin_len(url: &str) -> Value {
    let (mut ws, _) = match open(url).await {
        Ok(x) => x,
        Err(e) => return json!({"error": e}),
    };
    let text = r#"{"type":"AUDIO_CHUNK","bin_len":99999999,"payload":{"message_id":"m-a","mime":"application/octet-stream"}}"#;
    if let Err(e) = ws.send(Message::text(text)).await {
        return json!({"error": format!("send: {e}")});
    }
    let (seen, _) = observe(&mut ws, Duration::from_secs(5), |_| false).await;
    json!({"sent": "bin_len 99999999, no payload.data", "got": seen})
}

async fn small_missing_frame(url: &str) -> Value {
    let (mut ws, _) = match open(url).await {
        Ok(x) => x,
        Err(e) => return json!({"error": e}),
    };
    let started = Instant::now();
    let first = r#"{"id":"bin-b","type":"AUDIO_CHUNK","bin_len":10,"payload":{"message_id":"m-b","mime":"application/octet-stream"}}"#;
    let send = async {
        ws.send(Message::text(first)).await?;
        ws.send(Message::text(ping_text("after-b"))).await
    };
    if let Err(e) = send.await {
        return json!({"error": format!("send: {e}")});
    }
    let (seen, _) = observe(&mut ws, Duration::from_secs(15), |v| {
        kind(v) == "PONG" && v["payload"]["nonce"] == "after-b"
    })
    .await;
    let seconds = round3(started.elapsed().as_secs_f64());
    close(ws).await;
    json!({"sent": "bin_len 10, then a text PING", "got": seen, "seconds": seconds})
}

async fn small_overflows(url: &str) -> Value {
    let bin = match open(url).await {
        Ok((mut ws, _)) => {
            let text = format!(
                r#"{{"type":"AUDIO_CHUNK","bin_len":{U64_MAX},"payload":{{"message_id":"m-c","mime":"application/octet-stream"}}}}"#
            );
            match ws.send(Message::text(text)).await {
                Err(e) => json!({"error": format!("send: {e}")}),
                Ok(()) => {
                    let (mut seen, closed) =
                        observe(&mut ws, Duration::from_secs(3), |_| false).await;
                    let still = if closed && !seen.last().is_some_and(|s| s.starts_with("nothing"))
                    {
                        "closed".to_owned()
                    } else {
                        match ping_pong(&mut ws, "after-c1").await {
                            Ok(()) => "PING→PONG ok".to_owned(),
                            Err(e) => format!("PING failed: {e}"),
                        }
                    };
                    seen.push(still);
                    close(ws).await;
                    json!(seen)
                }
            }
        }
        Err(e) => json!({"error": e}),
    };
    let flow = match open(url).await {
        Ok((mut ws, _)) => {
            let text = format!(
                r#"{{"type":"FLOW_UPDATE","payload":{{"channel":"USER","add_messages":{U64_MAX},"add_bytes":{U64_MAX}}}}}"#
            );
            let send = async {
                ws.send(Message::text(text.clone())).await?;
                ws.send(Message::text(text)).await
            };
            match send.await {
                Err(e) => json!({"error": format!("send: {e}")}),
                Ok(()) => {
                    let (mut seen, _) = observe(&mut ws, Duration::from_secs(2), |_| false).await;
                    seen.push(match ping_pong(&mut ws, "after-c2").await {
                        Ok(()) => "PING→PONG ok".to_owned(),
                        Err(e) => format!("PING failed: {e}"),
                    });
                    close(ws).await;
                    json!(seen)
                }
            }
        }
        Err(e) => json!({"error": e}),
    };
    json!({"bin_len_u64_max": bin, "flow_update_u64_max_twice": flow})
}

/// A masked client frame: `first` is FIN/RSV/opcode.
fn masked_frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut frame = vec![first];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n < 65_536 => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// One server frame from `buf` (unmasked): opcode and payload, removed from `buf`.
fn take_frame(buf: &mut Vec<u8>) -> Option<(u8, Vec<u8>)> {
    if buf.len() < 2 {
        return None;
    }
    let opcode = buf[0] & 0x0f;
    let masked = buf[1] & 0x80 != 0;
    let (len, mut at) = match buf[1] & 0x7f {
        126 => {
            if buf.len() < 4 {
                return None;
            }
            (u16::from_be_bytes([buf[2], buf[3]]) as usize, 4)
        }
        127 => {
            if buf.len() < 10 {
                return None;
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[2..10]);
            (u64::from_be_bytes(b) as usize, 10)
        }
        n => (n as usize, 2),
    };
    if masked {
        at += 4;
    }
    if buf.len() < at + len {
        return None;
    }
    let payload = buf[at..at + len].to_vec();
    buf.drain(..at + len);
    Some((opcode, payload))
}

/// Does the WebSocket handshake by hand, sends `frame`, and reports how the
/// server ends the connection.
async fn raw_bad_frame(addr: &str, frame: Vec<u8>) -> String {
    let s = match tcp_connect(addr).await {
        Ok(s) => s,
        Err(e) => return e,
    };
    let request = format!(
        "GET /haip HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    if let Err(e) = write_all(&s, request.as_bytes()).await {
        return format!("write: {e}");
    }
    let mut buf = Vec::new();
    match read_head(&s, &mut buf, Duration::from_secs(10)).await {
        Ok(h) if h.status == 101 => {}
        Ok(h) => return format!("handshake answered {}", h.status),
        Err(e) => return format!("handshake: {e}"),
    }
    let mut chunk = vec![0u8; 16 * 1024];
    let mut frames_before = 0;
    // The server speaks first: wait for its HAI before misbehaving.
    let deadline = Instant::now() + Duration::from_secs(5);
    while frames_before == 0 {
        while take_frame(&mut buf).is_some() {
            frames_before += 1;
        }
        if frames_before > 0 {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, read_some(&s, &mut chunk)).await {
            Ok(Ok(n)) if n > 0 => buf.extend_from_slice(&chunk[..n]),
            _ => return "no HAI frame".to_owned(),
        }
    }
    if let Err(e) = write_all(&s, &frame).await {
        return format!("write: {e}");
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        while let Some((opcode, payload)) = take_frame(&mut buf) {
            if opcode == 0x8 {
                if payload.len() >= 2 {
                    let code = u16::from_be_bytes([payload[0], payload[1]]);
                    let reason = String::from_utf8_lossy(&payload[2..]);
                    return format!("close {code} {reason}").trim().to_owned();
                }
                return "close frame without a code".to_owned();
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, read_some(&s, &mut chunk)).await {
            Err(_) => return "no close within 5 s (connection left open)".to_owned(),
            Ok(Ok(0)) => return "TCP closed without a close frame".to_owned(),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return format!("TCP error without a close frame: {e}"),
        }
    }
}

pub(crate) async fn attack_small(args: &Args) -> Result<Value, String> {
    let a = small_huge_bin_len(&args.url).await;
    let b = small_missing_frame(&args.url).await;
    let c = small_overflows(&args.url).await;
    let invalid_utf8 = raw_bad_frame(
        &args.addr,
        masked_frame(0x81, &[0x7b, 0xff, 0xfe, 0x80, 0x7d]),
    )
    .await;
    let reserved_opcode = raw_bad_frame(&args.addr, masked_frame(0x83, b"{}")).await;
    let rsv_bits = raw_bad_frame(
        &args.addr,
        masked_frame(0x81 | 0x70, br#"{"type":"PING","payload":{}}"#),
    )
    .await;
    // (e) a spike of 900 KB calls that are read, then stop.
    let duration = args.duration.unwrap_or(Duration::from_secs(10));
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for client in 0..3 {
        let make: Arc<dyn Fn(u64) -> String + Send + Sync> =
            Arc::new(move |n| flood_message(&format!("e{client}-{n}")));
        tasks.push(tokio::spawn(pipelined_client(
            args.url.clone(),
            make,
            2,
            deadline,
            Duration::from_secs(20),
        )));
    }
    let mut pipes = Vec::new();
    for t in tasks {
        pipes.push(t.await.map_err(|e| format!("client task: {e}"))?);
    }
    let spike = merge_pipes(&pipes);
    let list = |v: &Value| -> String {
        match v.as_array() {
            Some(a) => a
                .iter()
                .map(|s| s.as_str().unwrap_or("").to_owned())
                .collect::<Vec<_>>()
                .join(" → "),
            None => v.to_string(),
        }
    };
    let summary = format!(
        "(a) {}; (b) {}; (c) bin_len u64::MAX: {}; FLOW_UPDATE u64::MAX ×2: {}; (d) invalid UTF-8: {}; reserved opcode: {}; RSV bits: {}; (e) {} × 900 KB calls read back, {} TOOL_DONEs",
        list(&a["got"]),
        list(&b["got"]),
        list(&c["bin_len_u64_max"]),
        list(&c["flow_update_u64_max_twice"]),
        invalid_utf8,
        reserved_opcode,
        rsv_bits,
        spike["accepted_calls"],
        spike["tool_dones"],
    );
    let mut report = json!({
        "attack": "8",
        "name": "small ones",
        "attacker_got": summary,
        "huge_bin_len": a,
        "missing_binary_frame": b,
        "overflows": c,
        "invalid_utf8": invalid_utf8,
        "reserved_opcode": reserved_opcode,
        "rsv_bits": rsv_bits,
        "spike_seconds": duration.as_secs(),
    });
    merge_into(&mut report, spike);
    Ok(report)
}
