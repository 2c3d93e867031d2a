//! Requests that are wrong in what they say, not in how they arrive (modes
//! `mcp-progress-token`, `mcp-origin`, `mcp-log-flood` and `mcp-errors`):
//! each gets an answer, recorded by its HTTP status and JSON-RPC code.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::net::TcpStream;

use super::canary::McpCanary;
use super::{Answer, Tally, Target, call_body, echo_body, exchange, post_once, request};
use crate::http::{read_response, stats, tcp_connect, write_all};
use crate::wire::round3;

/// How long any one answer may take here.
const WAIT: Duration = Duration::from_secs(30);

/// `tools/call` of `tool` with a progress token of `token_bytes` letters.
fn with_token(id: u64, tool: &str, arguments: &str, token_bytes: usize) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments},"_meta":{{"progressToken":"{}"}}}}}}"#,
        "t".repeat(token_bytes)
    )
}

/// `count` requests of `body` at once, each on a connection of its own;
/// requests that got no answer show as `no answer`.
async fn at_once(t: &Target, body: Arc<Vec<u8>>, count: usize) -> (Tally, Vec<Answer>) {
    let tasks: Vec<_> = (0..count)
        .map(|_| {
            let t = t.clone();
            let body = Arc::clone(&body);
            tokio::spawn(async move { post_once(&t, &body, "", WAIT).await })
        })
        .collect();
    let mut tally = Tally::default();
    let mut answers = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(a)) => {
                tally.add(&a.label(), a.ms);
                answers.push(a);
            }
            _ => tally.add("no answer", 0.0),
        }
    }
    (tally, answers)
}

/// Mode `mcp-progress-token`.
pub(crate) async fn progress_token(t: &Target) -> Result<Value, String> {
    let echo = r#"{"message":"x"}"#;
    let huge = Arc::new(with_token(1, "echo", echo, 9_000_000).into_bytes());
    let (huge_tally, huge_answers) = at_once(t, huge, 20).await;
    let long = Arc::new(with_token(2, "echo", echo, 300).into_bytes());
    let (long_tally, long_answers) = at_once(t, long, 20).await;

    // 200 bytes: taken, on a tool that reports progress; its answers are
    // left unread while it runs (about 1 s), then read.
    let body = with_token(
        3,
        "process_file",
        r#"{"filename":"a.txt","operation":"count"}"#,
        200,
    );
    let bytes = Arc::new(request(t, body.as_bytes(), "Connection: close\r\n"));
    let mut conns: Vec<(TcpStream, Instant)> = Vec::new();
    let mut send_errors = Vec::new();
    for _ in 0..20 {
        let sent = async {
            let s = tcp_connect(&t.addr).await?;
            let at = Instant::now();
            write_all(&s, &bytes)
                .await
                .map_err(|e| format!("write: {e}"))?;
            Ok::<_, String>((s, at))
        };
        match sent.await {
            Ok(c) => conns.push(c),
            Err(e) => send_errors.push(e),
        }
    }
    let mut held = Vec::new();
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(1250)).await;
        if let Some(st) = stats(&t.addr).await {
            held.push(st["outboundBytes"].clone());
        }
    }
    let mut unread_tally = Tally::default();
    let mut progress_seen = Vec::new();
    for (s, at) in &conns {
        match read_response(s, &mut Vec::new(), Duration::from_secs(5)).await {
            Ok(r) => {
                let a = Answer::of(&r, *at);
                unread_tally.add(
                    &format!("{}{}", a.label(), if a.sse { " (SSE)" } else { "" }),
                    0.0,
                );
                progress_seen.push(a.notifications);
            }
            Err(e) => unread_tally.add(&format!("no answer ({e})"), 0.0),
        }
    }
    drop(conns);
    let refused: Vec<&Answer> = huge_answers.iter().chain(&long_answers).collect();
    let summary = format!(
        "9 MB token ×20: {}; 300-byte token ×20: {}; 200-byte token on process_file ×20, unread for 5 s (/stats outboundBytes meanwhile {}): {} with {} progress notifications each",
        huge_tally.summary(),
        long_tally.summary(),
        held.iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        unread_tally.summary().replace(" (0.0 ms)", ""),
        describe_range(&progress_seen),
    );
    Ok(json!({
        "attack": "mcp-progress-token",
        "name": "progress tokens of 9 MB, 300 and 200 bytes",
        "attacker_got": summary,
        "refused_requests": 40,
        "refused_answered": refused.iter().filter(|a| a.refused_clearly()).count(),
        "unanswered": 40 - refused.len(),
        "token_9mb": {"statuses": huge_tally.to_json(), "first": huge_answers.first().map(Answer::to_json)},
        "token_300": {"statuses": long_tally.to_json(), "first": long_answers.first().map(Answer::to_json)},
        "token_200_unread": {
            "sent": bytes.len(),
            "connections": progress_seen.len(),
            "send_errors": send_errors,
            "outbound_bytes_while_unread": held,
            "statuses": unread_tally.to_json(),
            "progress_notifications": progress_seen,
        },
    }))
}

fn describe_range(values: &[usize]) -> String {
    match (values.iter().min(), values.iter().max()) {
        (Some(a), Some(b)) if a == b => a.to_string(),
        (Some(a), Some(b)) => format!("{a}–{b}"),
        _ => "—".to_owned(),
    }
}

/// `/stats` `toolExecutions.total`.
async fn executions(t: &Target) -> Option<u64> {
    stats(&t.addr).await?["toolExecutions"]["total"].as_u64()
}

/// Mode `mcp-origin`. The canary pauses meanwhile, so that `/stats`
/// counts only these calls.
pub(crate) async fn origin(t: &Target, canary: &McpCanary) -> Result<Value, String> {
    let paused = canary.pause().await;
    let cases = [
        ("evil", Some("http://evil.example"), 403),
        ("null", Some("null"), 403),
        ("localhost", Some("http://localhost:6274"), 200),
        ("none", None, 200),
    ];
    let mut out = serde_json::Map::new();
    let mut parts = Vec::new();
    let mut refused_answered = 0;
    let mut as_expected = 0;
    for (i, (name, origin, expected)) in cases.into_iter().enumerate() {
        let before = executions(t).await;
        let extra = origin.map_or(String::new(), |o| format!("Origin: {o}\r\n"));
        let body = echo_body(i as u64 + 1, "origin");
        let answer = post_once(t, body.as_bytes(), &extra, WAIT).await;
        let after = executions(t).await;
        let ran = match (before, after) {
            (Some(b), Some(a)) => Some(a.saturating_sub(b)),
            _ => None,
        };
        let (label, status) = match &answer {
            Ok(a) => (a.label(), Some(a.status)),
            Err(e) => (format!("no answer ({e})"), None),
        };
        let want_ran = u64::from(expected == 200);
        let ok = status == Some(expected) && ran == Some(want_ran);
        as_expected += usize::from(ok);
        if expected == 403 && answer.as_ref().is_ok_and(Answer::refused_clearly) {
            refused_answered += 1;
        }
        parts.push(format!(
            "{}: {label}, tool ran {}",
            origin.unwrap_or("no Origin"),
            ran.map_or("?".to_owned(), |n| format!("{n}×"))
        ));
        out.insert(
            name.to_owned(),
            json!({
                "origin": origin,
                "expected_status": expected,
                "answer": answer.as_ref().ok().map(Answer::to_json),
                "error": answer.as_ref().err(),
                "tool_executions": ran,
                "as_expected": ok,
            }),
        );
    }
    canary.resume();
    Ok(json!({
        "attack": "mcp-origin",
        "name": "browser origins",
        "attacker_got": parts.join("; "),
        "canary_paused": paused,
        "refused_requests": 2,
        "refused_answered": refused_answered,
        "as_expected": as_expected,
        "cases": out,
    }))
}

/// `count` requests of `body` from 4 keep-alive connections, each reading
/// every answer: the answers by label, the largest answer, the first one.
async fn from_four(t: &Target, body: String, count: usize) -> (Tally, usize, Option<Answer>) {
    let bytes = Arc::new(request(t, body.as_bytes(), ""));
    let tasks: Vec<_> = (0..4)
        .map(|k| {
            let t = t.clone();
            let bytes = Arc::clone(&bytes);
            let n = count / 4 + usize::from(k < count % 4);
            tokio::spawn(async move {
                let mut answers = Vec::new();
                let mut conn: Option<(TcpStream, Vec<u8>)> = None;
                for _ in 0..n {
                    if conn.is_none() {
                        conn = tcp_connect(&t.addr).await.ok().map(|s| (s, Vec::new()));
                    }
                    let Some((s, buf)) = conn.as_mut() else {
                        answers.push(Err("connect failed".to_owned()));
                        continue;
                    };
                    let a = exchange(s, buf, &bytes, WAIT).await;
                    if a.as_ref().map_or(true, |a| a.closing) {
                        conn = None;
                    }
                    answers.push(a);
                }
                answers
            })
        })
        .collect();
    let mut tally = Tally::default();
    let mut largest = 0;
    let mut first = None;
    for task in tasks {
        for a in task.await.unwrap_or_default() {
            match a {
                Ok(a) => {
                    tally.add(&a.label(), a.ms);
                    largest = largest.max(a.bytes);
                    first.get_or_insert(a);
                }
                Err(e) => tally.add(&format!("no answer ({e})"), 0.0),
            }
        }
    }
    (tally, largest, first)
}

/// Mode `mcp-log-flood` (the server's log is measured by the script).
pub(crate) async fn log_flood(t: &Target, count: usize) -> Result<Value, String> {
    let long = |c: char| c.to_string().repeat(1_000_000);
    let method = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{}","params":{{}}}}"#,
        long('m')
    );
    let tool = call_body(2, &long('n'), "{}");
    let initialize = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"{}","version":"1.0"}}}}}}"#,
        long('c')
    );
    let mut groups = serde_json::Map::new();
    let mut parts = Vec::new();
    let mut refused_answered = 0;
    for (name, body, refused) in [
        ("method_name", method, true),
        ("tool_name", tool, true),
        ("initialize_client_name", initialize, false),
    ] {
        let request_bytes = body.len();
        let (tally, largest, first) = from_four(t, body, count).await;
        if refused {
            refused_answered += tally
                .labels()
                .filter(|(l, _)| !l.starts_with("no answer") && !l.ends_with(" result"))
                .map(|(_, n)| n)
                .sum::<u64>();
        }
        parts.push(format!(
            "{count} × 1 MB {}: {} (largest answer {largest} B)",
            name.replace('_', " "),
            tally.summary()
        ));
        groups.insert(
            name.to_owned(),
            json!({
                "request_bytes": request_bytes,
                "statuses": tally.to_json(),
                "largest_answer_bytes": largest,
                "first": first.as_ref().map(Answer::to_json),
            }),
        );
    }
    Ok(json!({
        "attack": "mcp-log-flood",
        "name": "1 MB names that a log line could quote",
        "attacker_got": parts.join("; "),
        "refused_requests": 2 * count,
        "refused_answered": refused_answered,
        "groups": groups,
    }))
}

/// A request with its own head lines (no `Content-Type`, `Accept` or
/// `Content-Length` added).
fn raw(t: &Target, headers: &str, body: &str) -> Vec<u8> {
    format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\n{headers}Connection: close\r\n\r\n{body}",
        t.path, t.addr
    )
    .into_bytes()
}

/// Mode `mcp-errors`.
pub(crate) async fn errors(t: &Target) -> Result<Value, String> {
    let rpc = |body: &str| request(t, body.as_bytes(), "Connection: close\r\n");
    let args = |a: &str| call_body(1, "echo", a);
    let set_level =
        r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"loud"}}"#;
    let long_method = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{}"}}"#,
        "m".repeat(1000)
    );
    let long_id = format!(
        r#"{{"jsonrpc":"2.0","id":"{}","method":"ping"}}"#,
        "i".repeat(300)
    );
    let body = echo_body(1, "hi");
    let length = body.len();
    // (name, request, expected status, expected JSON-RPC code; None: a result)
    let cases: Vec<(&str, Vec<u8>, u16, Option<i64>)> = vec![
        (
            "invalid JSON",
            rpc(r#"{"jsonrpc":"2.0","#),
            400,
            Some(-32700),
        ),
        ("empty body", rpc(""), 400, Some(-32700)),
        (
            "batch",
            rpc(r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#),
            400,
            Some(-32600),
        ),
        ("a number", rpc("5"), 400, Some(-32600)),
        ("a string", rpc(r#""tools/call""#), 400, Some(-32600)),
        (
            "no jsonrpc",
            rpc(r#"{"id":1,"method":"ping"}"#),
            400,
            Some(-32600),
        ),
        ("id of 300 bytes", rpc(&long_id), 400, Some(-32600)),
        ("method of 1000 bytes", rpc(&long_method), 200, Some(-32601)),
        ("arguments a number", rpc(&args("5")), 200, Some(-32602)),
        (
            "arguments a string",
            rpc(&args(r#""x""#)),
            200,
            Some(-32602),
        ),
        ("arguments an array", rpc(&args("[1]")), 200, Some(-32602)),
        ("setLevel loud", rpc(set_level), 200, Some(-32602)),
        (
            "unknown tool",
            rpc(&call_body(1, "nope", "{}")),
            200,
            Some(-32602),
        ),
        (
            "Content-Type text/plain",
            raw(
                t,
                &format!(
                    "Content-Type: text/plain\r\nAccept: application/json, text/event-stream\r\nContent-Length: {length}\r\n"
                ),
                &body,
            ),
            415,
            Some(-32600),
        ),
        (
            "Accept application/json only",
            raw(
                t,
                &format!(
                    "Content-Type: application/json\r\nAccept: application/json\r\nContent-Length: {length}\r\n"
                ),
                &body,
            ),
            406,
            Some(-32600),
        ),
        (
            "Content-Length not a number",
            raw(
                t,
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: abc\r\n",
                &body,
            ),
            400,
            None,
        ),
        (
            "a valid ping (control)",
            rpc(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            200,
            None,
        ),
    ];
    let mut results = Vec::new();
    let mut parts = Vec::new();
    let mut as_expected = 0;
    let mut refused_answered = 0;
    let refused_requests = cases.len() - 1;
    for (name, bytes, status, code) in cases {
        let started = Instant::now();
        let answer = match tcp_connect(&t.addr).await {
            Ok(s) => exchange(&s, &mut Vec::new(), &bytes, WAIT).await,
            Err(e) => Err(e),
        };
        let control = name.ends_with("(control)");
        let (ok, got) = match &answer {
            Ok(a) => {
                // "Content-Length not a number" may be refused by hyper
                // itself, before `/mcp` sees it: any 400 does.
                let code_ok = match code {
                    Some(c) => a.code() == Some(c),
                    None if control => a.has_result(),
                    None => true,
                };
                (a.status == status && code_ok, a.label())
            }
            Err(e) => (false, format!("no answer ({e})")),
        };
        if !control && answer.as_ref().is_ok_and(Answer::refused_clearly) {
            refused_answered += 1;
        }
        as_expected += usize::from(ok);
        parts.push(format!(
            "{name}: {got}{}",
            if ok { "" } else { " (unexpected)" }
        ));
        results.push(json!({
            "case": name,
            "expected_status": status,
            "expected_code": code,
            "answer": answer.as_ref().ok().map(Answer::to_json),
            "error": answer.as_ref().err(),
            "as_expected": ok,
            "ms": round3(started.elapsed().as_secs_f64() * 1000.0),
        }));
    }
    Ok(json!({
        "attack": "mcp-errors",
        "name": "malformed messages",
        "attacker_got": format!("{} of {} as expected: {}", as_expected, results.len(), parts.join("; ")),
        "refused_requests": refused_requests,
        "refused_answered": refused_answered,
        "as_expected": as_expected,
        "cases": results,
    }))
}
