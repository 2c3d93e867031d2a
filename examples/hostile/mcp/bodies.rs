//! Slow and stalled `/mcp` bodies (modes `mcp-stalled-bodies` and
//! `mcp-stall`): POSTs whose bodies come late or never, each on a connection
//! of its own, racing the server's answer. What each got: its status, how
//! long after its head it came, `Retry-After`, and whether the server then
//! closed the connection.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::{Target, head};
use crate::http::{find, read_head, read_some, tcp_connect, write_all};
use crate::wire::round3;

/// A slow POST: its head, the body it announces, how much of it goes at
/// once (then 1 byte a second, up to the whole body).
struct Plan {
    head: String,
    body: Arc<Vec<u8>>,
    bulk: usize,
}

/// What one slow POST got.
#[derive(Default)]
struct Outcome {
    status: Option<u16>,
    /// From the end of the head to the answer.
    after_s: f64,
    retry_after: bool,
    closed: bool,
    /// When a `100 Continue` came.
    continue_after_s: Option<f64>,
    sent: usize,
    write_error: Option<String>,
    error: Option<String>,
}

impl Outcome {
    fn to_json(&self) -> Value {
        json!({
            "status": self.status,
            "after_s": round3(self.after_s),
            "retry_after": self.retry_after,
            "connection_closed": self.closed,
            "continue_after_s": self.continue_after_s.map(round3),
            "bytes_sent": self.sent,
            "write_error": self.write_error,
            "error": self.error,
        })
    }
}

/// A body of `len` bytes: the start of an `echo` call, then letters.
fn echo_prefix_body(len: usize) -> Arc<Vec<u8>> {
    let mut body = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"message":""#.to_vec();
    body.resize(len.max(body.len()), b'x');
    body.truncate(len);
    Arc::new(body)
}

/// Writes the next bit of the body: up to 64 KiB while in the bulk, else
/// one byte at `next`.
async fn write_step(
    s: &TcpStream,
    body: &[u8],
    sent: usize,
    bulk: usize,
    next: Instant,
) -> std::io::Result<usize> {
    if sent < bulk {
        let end = bulk.min(sent + 64 * 1024);
        loop {
            s.writable().await?;
            match s.try_write(&body[sent..end]) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
    tokio::time::sleep_until(next.into()).await;
    write_all(s, &body[sent..sent + 1]).await.map(|()| 1)
}

/// After an answer: whether the server closes the connection within 3 s.
pub(super) async fn closed_soon(s: &TcpStream) -> bool {
    let mut chunk = vec![0u8; 16 * 1024];
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, read_some(s, &mut chunk)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// Sends `plan` and waits for the final answer until `deadline`.
async fn slow_post(addr: String, plan: Arc<Plan>, deadline: Instant) -> Outcome {
    let mut o = Outcome::default();
    let s = match tcp_connect(&addr).await {
        Ok(s) => s,
        Err(e) => {
            o.error = Some(e);
            return o;
        }
    };
    if let Err(e) = write_all(&s, plan.head.as_bytes()).await {
        o.error = Some(format!("write: {e}"));
        return o;
    }
    let started = Instant::now();
    let mut next = started + Duration::from_secs(1);
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        if find(&buf, b"\r\n\r\n").is_some() {
            // Complete in `buf`: parsed without waiting.
            match read_head(&s, &mut buf, Duration::from_secs(1)).await {
                Ok(h) if h.status == 100 => {
                    o.continue_after_s = Some(started.elapsed().as_secs_f64());
                    continue;
                }
                Ok(h) => {
                    o.after_s = started.elapsed().as_secs_f64();
                    o.status = Some(h.status);
                    o.retry_after = h.header("retry-after").is_some();
                    o.closed = closed_soon(&s).await;
                }
                Err(e) => o.error = Some(e),
            }
            return o;
        }
        if Instant::now() >= deadline {
            o.after_s = started.elapsed().as_secs_f64();
            o.error = Some("no answer".to_owned());
            return o;
        }
        let can_write = o.write_error.is_none() && o.sent < plan.body.len();
        tokio::select! {
            r = read_some(&s, &mut chunk) => match r {
                Ok(0) => {
                    o.after_s = started.elapsed().as_secs_f64();
                    o.error = Some("closed without an answer".to_owned());
                    o.closed = true;
                    return o;
                }
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                Err(e) => {
                    o.after_s = started.elapsed().as_secs_f64();
                    o.error = Some(format!("read: {e}"));
                    o.closed = true;
                    return o;
                }
            },
            w = write_step(&s, &plan.body, o.sent, plan.bulk, next), if can_write => match w {
                Ok(n) => {
                    o.sent += n;
                    if o.sent >= plan.bulk {
                        next = Instant::now() + Duration::from_secs(1);
                    }
                }
                Err(e) => o.write_error = Some(e.to_string()),
            },
            () = tokio::time::sleep_until(deadline.into()) => {}
        }
    }
}

/// Counts by status: how many, when (first and last), with `Retry-After`,
/// closed afterwards; and the bytes they got to send.
fn by_status(outcomes: &[Outcome]) -> Value {
    let mut groups: BTreeMap<String, Vec<&Outcome>> = BTreeMap::new();
    for o in outcomes {
        let key = o.status.map_or("none".to_owned(), |s| s.to_string());
        groups.entry(key).or_default().push(o);
    }
    groups
        .into_iter()
        .map(|(k, v)| {
            let min = v.iter().map(|o| o.after_s).fold(f64::INFINITY, f64::min);
            let max = v.iter().map(|o| o.after_s).fold(0.0, f64::max);
            let sent_min = v.iter().map(|o| o.sent).min().unwrap_or(0);
            let sent_max = v.iter().map(|o| o.sent).max().unwrap_or(0);
            let errors: Vec<&str> = v
                .iter()
                .filter_map(|o| o.error.as_deref())
                .take(3)
                .collect();
            (
                k,
                json!({
                    "count": v.len(),
                    "min_s": round3(min),
                    "max_s": round3(max),
                    "with_retry_after": v.iter().filter(|o| o.retry_after).count(),
                    "connection_closed": v.iter().filter(|o| o.closed).count(),
                    "bytes_sent_min": sent_min,
                    "bytes_sent_max": sent_max,
                    "errors": errors,
                }),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// `413: 600 in 0.0–0.1 s (0 with Retry-After, 600 closed)`.
fn describe_statuses(statuses: &Value) -> String {
    statuses
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    format!(
                        "{k}: {} in {:.1}–{:.1} s ({} with Retry-After, {} closed)",
                        v["count"],
                        v["min_s"].as_f64().unwrap_or(0.0),
                        v["max_s"].as_f64().unwrap_or(0.0),
                        v["with_retry_after"],
                        v["connection_closed"]
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default()
}

/// `count` connections sending `plan` at once; all answered by `deadline`.
async fn group(t: &Target, plan: Plan, count: usize, wait: Duration) -> Vec<Outcome> {
    let plan = Arc::new(plan);
    let deadline = Instant::now() + wait;
    let tasks: Vec<_> = (0..count)
        .map(|_| tokio::spawn(slow_post(t.addr.clone(), Arc::clone(&plan), deadline)))
        .collect();
    let mut out = Vec::with_capacity(count);
    for task in tasks {
        match task.await {
            Ok(o) => out.push(o),
            Err(e) => out.push(Outcome {
                error: Some(format!("task: {e}")),
                ..Outcome::default()
            }),
        }
    }
    out
}

/// Mode `mcp-stalled-bodies`.
pub(crate) async fn stalled_bodies(t: &Target, count: usize) -> Result<Value, String> {
    // (1) Over max_message_bytes: refused before anything is read.
    let huge = 10 * 1024 * 1024;
    let plan = Plan {
        head: head(t, huge, ""),
        body: echo_prefix_body(huge),
        bulk: huge - 1024,
    };
    let over = group(t, plan, count, Duration::from_secs(12)).await;
    // (2) Within it: held until the read deadline, within the body budget.
    let within = 1_048_000;
    let plan = Plan {
        head: head(t, within, ""),
        body: echo_prefix_body(within),
        bulk: within - 100,
    };
    let under = group(t, plan, count, Duration::from_secs(38)).await;
    let all = over.iter().chain(&under);
    let unanswered = all.clone().filter(|o| o.status.is_none()).count();
    let answered = all.filter(|o| o.status.is_some_and(|s| s >= 400)).count();
    let over_statuses = by_status(&over);
    let under_statuses = by_status(&under);
    let summary = format!(
        "{count} × Content-Length 10 MiB: {}; {count} × 1 048 000 bytes, all but 100 sent, then 1 byte/s: {}",
        describe_statuses(&over_statuses),
        describe_statuses(&under_statuses),
    );
    Ok(json!({
        "attack": "mcp-stalled-bodies",
        "name": "stalled bodies over and within the message limit",
        "attacker_got": summary,
        "requests": 2 * count,
        "refused_requests": 2 * count,
        "refused_answered": answered,
        "unanswered": unanswered,
        "over_limit": {"content_length": huge, "statuses": over_statuses},
        "within_limit": {"content_length": within, "statuses": under_statuses},
    }))
}

/// Mode `mcp-stall`.
pub(crate) async fn stall(t: &Target) -> Result<Value, String> {
    let wait = Duration::from_secs(20);
    let spaces = Arc::new(vec![b' '; 1000]);
    let chunked_head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
        t.path, t.addr
    );
    let plans = [
        (
            "trickle",
            Plan {
                head: head(t, 1000, ""),
                body: Arc::clone(&spaces),
                bulk: 0,
            },
        ),
        (
            "silent",
            Plan {
                head: head(t, 1000, ""),
                body: Arc::new(Vec::new()),
                bulk: 0,
            },
        ),
        (
            "expect_continue",
            Plan {
                head: head(t, 1000, "Expect: 100-continue\r\n"),
                body: Arc::new(Vec::new()),
                bulk: 0,
            },
        ),
        (
            "chunked_no_chunk",
            Plan {
                head: chunked_head,
                body: Arc::new(Vec::new()),
                bulk: 0,
            },
        ),
    ];
    let deadline = Instant::now() + wait;
    let tasks: Vec<_> = plans
        .into_iter()
        .map(|(name, plan)| {
            (
                name,
                tokio::spawn(slow_post(t.addr.clone(), Arc::new(plan), deadline)),
            )
        })
        .collect();
    let mut cases = serde_json::Map::new();
    let mut parts = Vec::new();
    let mut answered = 0;
    for (name, task) in tasks {
        let o = task.await.unwrap_or_else(|e| Outcome {
            error: Some(format!("task: {e}")),
            ..Outcome::default()
        });
        answered += usize::from(o.status.is_some_and(|s| s >= 400));
        let status = o.status.map_or("no answer".to_owned(), |s| s.to_string());
        let extra = if name == "expect_continue" {
            match o.continue_after_s {
                Some(s) => format!(", 100 Continue after {s:.3} s"),
                None => ", no 100 Continue".to_owned(),
            }
        } else {
            String::new()
        };
        parts.push(format!(
            "{}: {status} after {:.1} s{}{extra}",
            name.replace('_', " "),
            o.after_s,
            if o.closed { ", closed" } else { ", not closed" }
        ));
        cases.insert(name.to_owned(), o.to_json());
    }
    Ok(json!({
        "attack": "mcp-stall",
        "name": "stalled bodies, one of each kind",
        "attacker_got": parts.join("; "),
        "requests": 4,
        "refused_requests": 4,
        "refused_answered": answered,
        "cases": cases,
    }))
}
