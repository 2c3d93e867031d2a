//! Hostile and slow clients against `/mcp`, the door most MCP hosts take
//! (docs/protocol.md §18.1 applied to MCP): bodies that stall or lie about their
//! length, params that cost far more parsed than sent, answers nobody reads,
//! results too large to send, progress tokens and method names meant to be
//! repeated, foreign `Origin`s and requests that are not JSON-RPC. Each test
//! asserts the status and the JSON-RPC error the attacker gets, that the
//! server's budgets hold (`/stats`), and that an ordinary `echo` call over
//! `/mcp` is still served. Budgets are set small so the tests run in seconds;
//! RELIABILITY.md measures the same attacks on the quickstart at defaults.
//! The servers here serve `/mcp` statelessly (`mcp_sessions(false)`): each
//! attack is a plain POST, which any instance would take; the front door it
//! meets is the same with sessions.
//!
//! Each test runs against haip's own listener and again, with the same
//! budgets, against `examples/axum_app.rs` with haip nested at its root
//! (`…_in_an_axum_app`, [`At::App`]); but the answers nobody takes: closing a
//! connection whose client stops reading is its listener's (embedded, the
//! host's), and so is what `write_timeout` and `max_inflight_answer_bytes`
//! do about such a client.

use crate::embedded_support::{At, start_at};
use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use haip::{Context, Limits, Tool, ToolError};
use serde_json::{Value, json};
use support::{base_limits, gated_tool, get_json, stats_until, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// [`support::builder`] with `/mcp` stateless: the attacks are single POSTs.
fn builder() -> haip::ServerBuilder {
    support::builder().mcp_sessions(false)
}

/// [`support::demo_builder`] with `/mcp` stateless.
fn demo_builder() -> haip::ServerBuilder {
    support::demo_builder().mcp_sessions(false)
}

/// At most 300 characters of `text`, for assertion messages.
fn short(text: &str) -> &str {
    match text.char_indices().nth(300) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

/// `{"data": "<bytes × 'x'>"}`: a tool whose result is as large as asked.
fn blob() -> Tool {
    Tool::builder("blob")
        .handler(|params: Value, _ctx: Context| async move {
            let bytes = params["bytes"].as_u64().unwrap_or(0) as usize;
            Ok::<_, ToolError>(json!({ "data": "x".repeat(bytes) }))
        })
        .build()
        .expect("blob is a valid tool")
}

/// A `tools/call` request body.
fn call_body(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

/// The head of a `POST /mcp` with the headers MCP asks for, plus `extra`.
fn post_head(extra: &[(&str, &str)]) -> String {
    let mut head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                    Accept: application/json, text/event-stream\r\n"
        .to_owned();
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head
}

/// A raw HTTP/1.1 response: status, lower-cased headers, body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl std::fmt::Debug for Answer {
    /// Long bodies are cut: an assertion message stays readable.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answer")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body", &short(&self.body))
            .field("body_len", &self.body.len())
            .finish()
    }
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", short(&self.body)))
    }

    /// The JSON-RPC error code of the body.
    fn rpc_code(&self) -> i64 {
        self.json()["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("no JSON-RPC error: {}", short(&self.body)))
    }
}

/// Reads one response from `stream` (a `Content-Length` body, or until the
/// connection closes); `None` when the connection ended before a status line.
async fn read_answer(stream: &mut TcpStream) -> Option<Answer> {
    let mut raw = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let head_end = loop {
        if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            // `100 Continue` is not the answer.
            if raw.starts_with(b"HTTP/1.1 100") {
                raw.drain(..i + 4);
                continue;
            }
            break i;
        }
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            return None;
        }
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[head_end + 4..].to_vec();
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse::<usize>().ok());
    loop {
        if length.is_some_and(|l| body.len() >= l) {
            break;
        }
        let n = stream.read(&mut buf).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        body.extend_from_slice(&buf[..n]);
    }
    Some(Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// One `POST /mcp` of `body` with `extra` headers, on a fresh connection.
async fn post(addr: SocketAddr, body: &str, extra: &[(&str, &str)]) -> Answer {
    within("a /mcp answer", async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!(
            "{}Content-Length: {}\r\n\r\n{body}",
            post_head(extra),
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        read_answer(&mut stream).await.expect("an answer")
    })
    .await
}

/// An ordinary `echo` call over `/mcp` is served: the canary of every test.
async fn echo_works(addr: SocketAddr) {
    let answer = post(
        addr,
        &call_body(1, "echo", json!({"message": "canary"})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        answer.json()["result"]["structuredContent"]["echoed"],
        "canary"
    );
}

/// Waits until the server closes `stream`, discarding what it reads.
async fn closed(stream: &mut TcpStream) {
    within("the server to close the connection", async {
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

// ----- bodies ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_get_408_and_their_connection_closes() {
    stalled_bodies_get_408_and_their_connection_closes_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_bodies_get_408_and_their_connection_closes_in_an_axum_app() {
    stalled_bodies_get_408_and_their_connection_closes_at(At::App).await;
}

async fn stalled_bodies_get_408_and_their_connection_closes_at(at: At) {
    let server = start_at(
        at,
        demo_builder().limits(Limits {
            body_read_timeout: Duration::from_secs(1),
            ..base_limits()
        }),
    )
    .await;
    let addr = server.addr();
    let body = call_body(1, "echo", json!({"message": "never whole"}));
    let length = body.len().to_string();
    let cases: [(&str, String, Vec<u8>); 4] = [
        (
            "nothing after the headers",
            format!("{}Content-Length: {length}\r\n\r\n", post_head(&[])),
            Vec::new(),
        ),
        (
            "100-continue, then nothing",
            format!(
                "{}Expect: 100-continue\r\nContent-Length: {length}\r\n\r\n",
                post_head(&[])
            ),
            Vec::new(),
        ),
        (
            "chunked, no chunk",
            format!("{}Transfer-Encoding: chunked\r\n\r\n", post_head(&[])),
            Vec::new(),
        ),
        (
            "a few bytes, then nothing",
            format!("{}Content-Length: {length}\r\n\r\n", post_head(&[])),
            body.as_bytes()[..10].to_vec(),
        ),
    ];
    let mut tasks = Vec::new();
    for (what, head, first) in cases {
        tasks.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.expect("connect");
            stream.write_all(head.as_bytes()).await.expect("head");
            stream.write_all(&first).await.expect("first bytes");
            let started = Instant::now();
            let answer = within(what, read_answer(&mut stream))
                .await
                .unwrap_or_else(|| panic!("{what}: closed without an answer"));
            (what, answer, started.elapsed(), stream)
        }));
    }
    // Meanwhile /mcp serves others.
    echo_works(addr).await;
    for task in tasks {
        let (what, answer, took, mut stream) = task.await.expect("the attacker task");
        assert_eq!(answer.status, 408, "{what}: {answer:?}");
        assert_eq!(answer.rpc_code(), -32600, "{what}");
        assert!(
            answer.json()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("in time"),
            "{what}: {answer:?}"
        );
        assert_eq!(answer.header("connection"), Some("close"), "{what}");
        assert!(
            took < Duration::from_secs(5),
            "{what}: answered after {took:?}"
        );
        closed(&mut stream).await;
    }
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["connectionsClosed"]["bodyTimeout"], 4, "{stats}");
    echo_works(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_message_bytes_is_refused_before_it_is_read() {
    a_message_over_max_message_bytes_is_refused_before_it_is_read_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_max_message_bytes_is_refused_before_it_is_read_in_an_axum_app() {
    a_message_over_max_message_bytes_is_refused_before_it_is_read_at(At::App).await;
}

async fn a_message_over_max_message_bytes_is_refused_before_it_is_read_at(at: At) {
    let server = start_at(at, demo_builder()).await;
    let addr = server.addr();
    within("413 before the body", async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        // 10 MiB announced, none sent: the answer comes at once.
        let head = format!("{}Content-Length: 10485760\r\n\r\n", post_head(&[]));
        stream.write_all(head.as_bytes()).await.expect("head");
        let answer = read_answer(&mut stream).await.expect("an answer");
        assert_eq!(answer.status, 413, "{answer:?}");
        assert_eq!(answer.rpc_code(), -32600);
        assert!(
            answer.body.contains("1048576"),
            "names the limit: {answer:?}"
        );
        assert_eq!(answer.header("connection"), Some("close"));
    })
    .await;
    // Without a length, reading stops at the limit.
    within("413 once over the limit", async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let head = format!("{}Transfer-Encoding: chunked\r\n\r\n", post_head(&[]));
        stream.write_all(head.as_bytes()).await.expect("head");
        // Exactly the limit, then one byte more: everything sent is read.
        let chunk = format!("{:x}\r\n{}\r\n", 256 * 1024, "0".repeat(256 * 1024));
        let mut sent = chunk.repeat(4);
        sent.push_str("1\r\n0\r\n");
        stream.write_all(sent.as_bytes()).await.expect("the chunks");
        let answer = read_answer(&mut stream).await.expect("an answer");
        assert_eq!(answer.status, 413, "{answer:?}");
    })
    .await;
    echo_works(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hold_the_body_budget_at_their_parsed_cost_until_answered() {
    requests_hold_the_body_budget_at_their_parsed_cost_until_answered_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_hold_the_body_budget_at_their_parsed_cost_until_answered_in_an_axum_app() {
    requests_hold_the_body_budget_at_their_parsed_cost_until_answered_at(At::App).await;
}

async fn requests_hold_the_body_budget_at_their_parsed_cost_until_answered_at(at: At) {
    let (gated, mut gate) = gated_tool("hold");
    let server = start_at(
        at,
        demo_builder().tool(gated).limits(Limits {
            max_inflight_body_bytes: 4 * 1024 * 1024,
            ..base_limits()
        }),
    )
    .await;
    let addr = server.addr();
    // ≈ 200 KB of `0,`: about 3.2 MB once parsed, most of the budget.
    let junk: Vec<u8> = vec![0; 100_000];
    let heavy = call_body(1, "hold", json!({ "junk": junk }));
    assert!(heavy.len() < 256 * 1024);
    let held = heavy.clone();
    let first = tokio::spawn(async move { post(addr, &held, &[]).await });
    gate.started().await;
    // The first holds its cost while its call runs: a second does not fit.
    let second = post(addr, &heavy, &[]).await;
    assert_eq!(second.status, 503, "{second:?}");
    assert_eq!(second.header("retry-after"), Some("1"));
    assert_eq!(second.rpc_code(), -32000);
    // Small requests still fit.
    echo_works(addr).await;
    gate.open(1);
    let first = within("the held call", first).await.expect("task");
    assert_eq!(first.status, 200, "{first:?}");
    // Answered: the budget is free again.
    gate.open(1);
    let again = post(addr, &heavy, &[]).await;
    assert_eq!(again.status, 200, "{again:?}");
    // More than the whole budget once parsed: refused at once.
    let server = start_at(
        at,
        demo_builder().limits(Limits {
            max_inflight_body_bytes: 1024 * 1024,
            ..base_limits()
        }),
    )
    .await;
    let answer = post(server.addr(), &heavy, &[]).await;
    assert_eq!(answer.status, 503, "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_params_are_checked_and_validated_off_the_workers() {
    large_params_are_checked_and_validated_off_the_workers_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_params_are_checked_and_validated_off_the_workers_in_an_axum_app() {
    large_params_are_checked_and_validated_off_the_workers_at(At::App).await;
}

async fn large_params_are_checked_and_validated_off_the_workers_at(at: At) {
    let server = start_at(at, demo_builder()).await;
    let addr = server.addr();
    // ≈ 600 KB of junk in an open schema: parsed, validated, answered.
    let junk: Vec<u8> = vec![0; 300_000];
    let answer = post(
        addr,
        &call_body(1, "echo", json!({"message": "big", "junk": junk})),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        answer.json()["result"]["structuredContent"]["echoed"],
        "big"
    );
    // ≈ 500 KB of unknown keys against a closed schema: a readable tool error.
    let mut params = serde_json::Map::new();
    for i in 0..40_000 {
        params.insert(format!("k{i}"), json!(i));
    }
    params.insert("name".into(), json!("ada"));
    params.insert("email".into(), json!("ada@example.com"));
    let answer = post(
        addr,
        &call_body(2, "create_user", Value::Object(params)),
        &[],
    )
    .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let result = &answer.json()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Invalid params for tool create_user"),
        "{}",
        short(text)
    );
    assert!(
        text.len() < 4096,
        "a bounded list of violations: {} bytes",
        text.len()
    );
}

// ----- answers --------------------------------------------------------------------------------

/// Sends a `blob` call of `bytes` on a connection with a tiny receive buffer
/// (so the kernel holds little of the answer) and does not read.
async fn unread_blob(addr: SocketAddr, bytes: usize) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    socket
        .set_recv_buffer_size(4096)
        .expect("small receive buffer");
    let mut stream = socket.connect(addr).await.expect("connect");
    let body = call_body(1, "blob", json!({ "bytes": bytes }));
    let request = format!(
        "{}Content-Length: {}\r\n\r\n{body}",
        post_head(&[]),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    stream
}

fn outbound(stats: &Value) -> u64 {
    stats["outboundBytes"].as_u64().unwrap_or(0)
}

// haip's own listener only: its connection task closes a stalled
// connection; embedded, hyper's connection is the host's, and the unread
// answer stays held (and counted in `outboundBytes`) until the client reads
// or goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_nobody_takes_is_dropped_with_its_connection() {
    let (handle, _) = support::start(builder().builtin_tools().tool(blob()).limits(Limits {
        write_timeout: Duration::from_secs(1),
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let mut stream = unread_blob(addr, 4 * 1024 * 1024).await;
    stats_until(addr, "the unread answer held", |s| {
        outbound(s) > 1024 * 1024
    })
    .await;
    let started = Instant::now();
    stats_until(addr, "the connection closed as too slow", |s| {
        s["connectionsClosed"]["tooSlow"] == 1 && outbound(s) == 0
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(5));
    closed(&mut stream).await;
    echo_works(addr).await;
}

// haip's own listener only, as the test above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_servers_answer_budget_stalled_clients_go_in_a_second_and_readers_stay() {
    let (handle, _) = support::start(builder().builtin_tools().tool(blob()).limits(Limits {
        write_timeout: Duration::from_secs(60),
        max_inflight_answer_bytes: 1024 * 1024,
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    // More than the kernel buffers of a loopback connection hold (4 MiB).
    let mut stalled = Vec::new();
    for _ in 0..3 {
        stalled.push(unread_blob(addr, 8 * 1024 * 1024).await);
    }
    stats_until(addr, "the stalled clients closed", |s| {
        s["connectionsClosed"]["tooSlow"] == 3 && outbound(s) == 0
    })
    .await;
    for stream in &mut stalled {
        closed(stream).await;
    }
    // A client that reads gets all of an answer larger than the budget,
    // even slowly.
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let body = call_body(1, "blob", json!({ "bytes": 12 * 1024 * 1024 }));
    let request = format!(
        "{}Content-Length: {}\r\n\r\n{body}",
        post_head(&[]),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut got = 0usize;
    let mut buf = vec![0u8; 256 * 1024];
    within("the whole answer, read slowly", async {
        loop {
            let n = stream.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got += n;
            if buf[..n].ends_with(b"}}") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(got > 12 * 1024 * 1024, "{got} bytes");
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["connectionsClosed"]["tooSlow"], 3, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_too_large_to_send_is_a_readable_tool_error() {
    a_result_too_large_to_send_is_a_readable_tool_error_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_too_large_to_send_is_a_readable_tool_error_in_an_axum_app() {
    a_result_too_large_to_send_is_a_readable_tool_error_at(At::App).await;
}

async fn a_result_too_large_to_send_is_a_readable_tool_error_at(at: At) {
    let server = start_at(
        at,
        builder().builtin_tools().tool(blob()).limits(Limits {
            max_outbound_message_bytes: 3 * 1024 * 1024,
            ..base_limits()
        }),
    )
    .await;
    let addr = server.addr();
    // `blob` has no output schema: its value is sent once, as text.
    let fits = post(addr, &call_body(1, "blob", json!({"bytes": 2 << 20})), &[]).await;
    assert_eq!(fits.json()["result"]["isError"], false);
    let answer = post(addr, &call_body(2, "blob", json!({"bytes": 3 << 20})), &[]).await;
    assert_eq!(answer.status, 200);
    let result = &answer.json()["result"];
    assert_eq!(result["isError"], true, "{}", short(&result.to_string()));
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("RESULT_TOO_LARGE") && text.contains("3145728"),
        "{}",
        short(text)
    );
    assert!(answer.body.len() < 1024, "{} bytes", answer.body.len());
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["toolExecutions"]["failed"], 1, "{stats}");
}

// ----- what requests carry -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_progress_token_is_refused_and_a_short_one_is_used() {
    a_long_progress_token_is_refused_and_a_short_one_is_used_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_progress_token_is_refused_and_a_short_one_is_used_in_an_axum_app() {
    a_long_progress_token_is_refused_and_a_short_one_is_used_at(At::App).await;
}

async fn a_long_progress_token_is_refused_and_a_short_one_is_used_at(at: At) {
    let server = start_at(at, demo_builder()).await;
    let addr = server.addr();
    let with_token = |token: Value| {
        json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
            "name": "echo", "arguments": {"message": "hi"}, "_meta": {"progressToken": token}}})
        .to_string()
    };
    let long = post(addr, &with_token(json!("t".repeat(300))), &[]).await;
    assert_eq!(long.status, 200, "{long:?}");
    assert_eq!(long.rpc_code(), -32602);
    assert_eq!(long.json()["id"], 9);
    assert!(
        long.body.len() < 300,
        "the token is not echoed: {}",
        long.body
    );
    let brief = post(addr, &with_token(json!("t".repeat(200))), &[]).await;
    assert_eq!(brief.status, 200, "{brief:?}");
    assert!(brief.body.contains("\"echoed\":\"hi\""), "{brief:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_not_allowed_are_refused_before_anything_runs() {
    origins_not_allowed_are_refused_before_anything_runs_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origins_not_allowed_are_refused_before_anything_runs_in_an_axum_app() {
    origins_not_allowed_are_refused_before_anything_runs_at(At::App).await;
}

async fn origins_not_allowed_are_refused_before_anything_runs_at(at: At) {
    let server = start_at(
        at,
        demo_builder().cors_allowed_origins(["https://app.example"]),
    )
    .await;
    let addr = server.addr();
    let body = call_body(1, "echo", json!({"message": "hi"}));
    for origin in [
        "http://evil.example",
        "null",
        "http://127.0.0.1.evil.example",
    ] {
        let answer = post(addr, &body, &[("Origin", origin)]).await;
        assert_eq!(answer.status, 403, "{origin}: {answer:?}");
        assert_eq!(answer.rpc_code(), -32600, "{origin}");
    }
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["toolExecutions"]["total"], 0, "nothing ran: {stats}");
    for origin in [
        "https://app.example",
        "http://localhost:6274",
        "http://127.0.0.1:3000",
    ] {
        let answer = post(addr, &body, &[("Origin", origin)]).await;
        assert_eq!(answer.status, 200, "{origin}: {answer:?}");
    }
    // No `Origin` (every non-browser client): served.
    echo_works(addr).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_json_rpc_request_gets_its_json_rpc_error() {
    what_is_not_a_json_rpc_request_gets_its_json_rpc_error_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_json_rpc_request_gets_its_json_rpc_error_in_an_axum_app() {
    what_is_not_a_json_rpc_request_gets_its_json_rpc_error_at(At::App).await;
}

async fn what_is_not_a_json_rpc_request_gets_its_json_rpc_error_at(at: At) {
    let server = start_at(at, demo_builder()).await;
    let addr = server.addr();
    let long_method = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"{}"}}"#,
        "m".repeat(500_000)
    );
    let cases: Vec<(String, u16, i64)> = vec![
        ("not json".into(), 400, -32700),
        ("{\"jsonrpc\":".into(), 400, -32700),
        (
            r#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#.into(),
            400,
            -32600,
        ),
        ("42".into(), 400, -32600),
        (r#"{"id":1,"method":"ping"}"#.into(), 400, -32600),
        (call_body(1, "echo", json!(5)), 200, -32602),
        (call_body(1, "echo", json!("text")), 200, -32602),
        (call_body(1, "echo", json!([1, 2])), 200, -32602),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"logging/setLevel","params":{"level":"loud"}}"#
                .into(),
            200,
            -32602,
        ),
        (long_method, 200, -32601),
    ];
    for (body, status, code) in &cases {
        let answer = post(addr, body, &[]).await;
        assert_eq!(
            answer.status,
            *status,
            "{}: {}",
            short(body),
            short(&answer.body)
        );
        assert_eq!(answer.rpc_code(), *code, "{}", short(body));
        assert!(
            answer.body.len() < 400,
            "{}: {}",
            short(body),
            short(&answer.body)
        );
    }
    // Not JSON at all, by its Content-Type.
    let answer = within("415", async {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n\
                       Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{}";
        stream.write_all(request.as_bytes()).await.expect("write");
        read_answer(&mut stream).await.expect("an answer")
    })
    .await;
    assert_eq!(answer.status, 415, "{answer:?}");
    assert_eq!(answer.rpc_code(), -32600);
    echo_works(addr).await;
    // Nothing reached a tool.
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["toolExecutions"]["total"], 1, "{stats}");
}
