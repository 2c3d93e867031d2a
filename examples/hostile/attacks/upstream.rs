//! Attack 2: slow, stalled and absurd upstream POST bodies on an SSE session:
//! a body trickling 1 byte a second, many stalled 10 MiB bodies at once, and an
//! absurd `Content-Length`; then whether the stream still works.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::Args;
use crate::http::{
    find, open_sse, post_message, read_head, read_response, read_some, tcp_connect, write_all,
};
use crate::wire::{kind, ms, ping_text, round3};

fn stalled_post_head(addr: &str, session: &str, length: &str) -> String {
    format!(
        "POST /haip/message HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nX-HAIP-Session: {session}\r\nContent-Length: {length}\r\n\r\n"
    )
}

/// After a response: whether the server closes the connection within 3 s.
async fn closed_soon(s: &TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = vec![0u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, read_some(s, &mut chunk)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn trickle_post(addr: String, session: String) -> Value {
    let s = match tcp_connect(&addr).await {
        Ok(s) => s,
        Err(e) => return json!({"error": e}),
    };
    let started = Instant::now();
    if let Err(e) = write_all(&s, stalled_post_head(&addr, &session, "1000").as_bytes()).await {
        return json!({"error": format!("write: {e}")});
    }
    let mut sent = 0usize;
    let mut write_error = None;
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 4096];
    let deadline = started + Duration::from_secs(45);
    let mut next = started + Duration::from_secs(1);
    // One byte a second until the server answers (or 45 s).
    let answered = loop {
        if find(&buf, b"\r\n\r\n").is_some() {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        tokio::select! {
            r = read_some(&s, &mut chunk) => match r {
                Ok(0) | Err(_) => break false,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            },
            () = tokio::time::sleep_until(next.into()) => {
                next += Duration::from_secs(1);
                if sent < 1000 && write_error.is_none() {
                    match write_all(&s, b" ").await {
                        Ok(()) => sent += 1,
                        Err(e) => write_error = Some(e.to_string()),
                    }
                }
            }
        }
    };
    let elapsed = started.elapsed();
    if !answered {
        return json!({
            "status": Value::Null,
            "after_s": round3(elapsed.as_secs_f64()),
            "bytes_sent": sent,
            "write_error": write_error,
            "note": "no response",
        });
    }
    let head = read_head(&s, &mut buf, Duration::from_secs(1)).await;
    let closed = closed_soon(&s, &mut buf).await;
    json!({
        "status": head.as_ref().map(|h| h.status).ok(),
        "after_s": round3(elapsed.as_secs_f64()),
        "bytes_sent": sent,
        "connection_closed": closed,
        "write_error": write_error,
    })
}

async fn stalled_posts(addr: &str, session: &str, count: usize) -> Value {
    let mut tasks = Vec::new();
    let mut connect_errors = 0;
    for _ in 0..count {
        let s = match tcp_connect(addr).await {
            Ok(s) => s,
            Err(_) => {
                connect_errors += 1;
                continue;
            }
        };
        let head = stalled_post_head(addr, session, "10485760");
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            if let Err(e) = write_all(&s, head.as_bytes()).await {
                return (None, 0.0, false, false, Some(format!("write: {e}")));
            }
            let mut buf = Vec::new();
            match read_head(&s, &mut buf, Duration::from_secs(45)).await {
                Ok(h) => {
                    let after = started.elapsed().as_secs_f64();
                    let retry_after = h.header("retry-after").is_some();
                    let closed = closed_soon(&s, &mut buf).await;
                    (Some(h.status), after, retry_after, closed, None)
                }
                Err(e) => (None, started.elapsed().as_secs_f64(), false, false, Some(e)),
            }
        }));
    }
    let mut by_status: BTreeMap<String, (u64, f64, f64, u64, u64)> = BTreeMap::new();
    let mut errors = Vec::new();
    for t in tasks {
        let Ok((status, after, retry_after, closed, error)) = t.await else {
            continue;
        };
        let key = status.map_or("none".to_owned(), |s| s.to_string());
        let e = by_status
            .entry(key)
            .or_insert((0, f64::INFINITY, 0.0, 0, 0));
        e.0 += 1;
        e.1 = e.1.min(after);
        e.2 = e.2.max(after);
        e.3 += u64::from(retry_after);
        e.4 += u64::from(closed);
        if let Some(err) = error
            && errors.len() < 3
        {
            errors.push(err);
        }
    }
    let statuses: serde_json::Map<String, Value> = by_status
        .iter()
        .map(|(k, (n, min, max, retry, closed))| {
            (
                k.clone(),
                json!({"count": n, "min_s": round3(*min), "max_s": round3(*max), "with_retry_after": retry, "connection_closed": closed}),
            )
        })
        .collect();
    json!({"requests": count, "connect_errors": connect_errors, "statuses": statuses, "errors": errors})
}

async fn huge_length_post(addr: &str, session: &str) -> Value {
    let s = match tcp_connect(addr).await {
        Ok(s) => s,
        Err(e) => return json!({"error": e}),
    };
    let started = Instant::now();
    if let Err(e) = write_all(
        &s,
        stalled_post_head(addr, session, "99999999999999").as_bytes(),
    )
    .await
    {
        return json!({"error": format!("write: {e}")});
    }
    let mut buf = Vec::new();
    match read_response(&s, &mut buf, Duration::from_secs(15)).await {
        Ok(r) => json!({
            "status": r.head.status,
            "after_ms": ms(started.elapsed()),
            "body": String::from_utf8_lossy(&r.body),
        }),
        Err(e) => json!({"status": Value::Null, "error": e, "after_ms": ms(started.elapsed())}),
    }
}

pub(crate) async fn attack_upstream(args: &Args) -> Result<Value, String> {
    let mut sse = open_sse(&args.addr).await?;
    let session = sse.session.clone();
    // (c) first: it must be answered at once.
    let huge = huge_length_post(&args.addr, &session).await;
    // (a) and (b) together.
    let trickle = tokio::spawn(trickle_post(args.addr.clone(), session.clone()));
    let stalled = stalled_posts(&args.addr, &session, args.count.unwrap_or(200)).await;
    let trickle = trickle.await.map_err(|e| format!("trickle task: {e}"))?;
    // The stream must still work: a PING through a POST, its PONG on the stream.
    let post = post_message(&args.addr, &session, &ping_text("after-attack")).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut pong = false;
    while let Ok(Some(v)) = tokio::time::timeout_at(deadline.into(), sse.events.recv()).await {
        if kind(&v) == "PONG" && v["payload"]["nonce"] == "after-attack" {
            pong = true;
            break;
        }
    }
    sse.reader.abort();
    let fmt_status = |v: &Value| -> String {
        let n = v["count"].as_u64().unwrap_or(0);
        format!(
            "{n} in {:.1}–{:.1} s ({} with Retry-After, {} closed)",
            v["min_s"].as_f64().unwrap_or(0.0),
            v["max_s"].as_f64().unwrap_or(0.0),
            v["with_retry_after"],
            v["connection_closed"]
        )
    };
    let b_summary = stalled["statuses"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}: {}", fmt_status(v)))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    let summary = format!(
        "(a) trickle: {} after {:.1} s{}; (b) {} stalled 10 MiB bodies: {}; (c) huge Content-Length: {} in {} ms; stream afterwards: {}",
        trickle["status"],
        trickle["after_s"].as_f64().unwrap_or(0.0),
        if trickle["connection_closed"] == true {
            ", closed"
        } else {
            ", not closed"
        },
        stalled["requests"],
        b_summary,
        huge["status"],
        huge["after_ms"],
        if pong { "PONG received" } else { "no PONG" },
    );
    Ok(json!({
        "attack": "2",
        "name": "slow, stalled and absurd upstream POST bodies",
        "attacker_got": summary,
        "accepted_calls": 0,
        "tool_dones": 0,
        "lost_tool_dones": 0,
        "trickle": trickle,
        "stalled": stalled,
        "huge_length": huge,
        "final_post_status": post.as_ref().map(|r| r.head.status).ok(),
        "stream_pong_after": pong,
    }))
}
