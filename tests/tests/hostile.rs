//! Hostile and slow clients against a real server (docs/protocol.md §18.1): clients
//! that never read, bodies that trickle or lie about their length, params and
//! results far larger than usual, a client that reads everything and asks for
//! a lot, idle sockets beyond a peer's share, sessions whose replay windows
//! outgrow the server's budget, and broken WebSocket frames. Each test asserts
//! that the server survives, that what it holds stays within its budgets, that
//! an unrelated canary client keeps being served, that every accepted call
//! gets exactly one `TOOL_DONE`, and that the attacker gets the documented
//! error or close code. Budgets are set small so the tests run in seconds;
//! RELIABILITY.md measures the same attacks at the defaults.
//!
//! Each test runs against haip's own listener and again, with the same
//! budgets, against `examples/axum_app.rs` with haip nested at its root
//! (`…_in_an_axum_app`, [`At::App`]); but connections per peer address, which
//! only haip's own listener counts (embedded, they are the host's).

use crate::conn;
use crate::embedded_support::{At, start_at};
use crate::support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use haip::{Context, Limits, Tool, ToolError};
use serde_json::{Map, Value, json};
use support::{
    Client, Ended, base_limits, builder, confirming_hai_payload, demo_builder, expect_on, get_json,
    http_get, resume_hai, seq_of, start, stats_until, within,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};

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

/// Sends `echo` calls carrying `message` until a send has not completed for
/// a second (the server stopped reading: TCP back-pressure) or fails (the
/// server closed the connection, `too slow`). Returns how many were sent.
/// Bounded: more than `limit` means the server never pushed back.
async fn flood_until_stalled(client: &mut Client, tag: &str, message: &str, limit: usize) -> usize {
    for sent in 0..limit {
        let text = json!({"type": "TOOL_CALL", "payload": {
            "call_id": format!("{tag}-{sent}"), "tool": "echo", "params": {"message": message}
        }})
        .to_string();
        let send = client.ws.send(Message::text(text));
        match tokio::time::timeout(Duration::from_secs(1), send).await {
            Ok(Ok(())) => {}
            // Stalled (not read any more), or closed (too slow).
            Ok(Err(_)) | Err(_) => return sent,
        }
    }
    panic!("{tag}: {limit} calls sent and the server still reads a client that never reads")
}

/// The `TOOL_DONE`s among raw texts, by call id.
fn dones_in(texts: &[String], dones: &mut HashMap<String, u32>) -> u64 {
    let mut last_seq = 0;
    for text in texts {
        let env: Value = serde_json::from_str(text).expect("the server sends JSON");
        last_seq = seq_of(&env);
        if env["type"] == "TOOL_DONE" {
            let id = env["payload"]["call_id"].as_str().unwrap_or_default();
            *dones.entry(id.to_owned()).or_default() += 1;
        }
    }
    last_seq
}

// ----- 1: clients that send large calls and never read -----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_cost_their_budget_and_lose_no_tool_done() {
    clients_that_never_read_cost_their_budget_and_lose_no_tool_done_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_cost_their_budget_and_lose_no_tool_done_in_an_axum_app() {
    clients_that_never_read_cost_their_budget_and_lose_no_tool_done_at(At::App).await;
}

async fn clients_that_never_read_cost_their_budget_and_lose_no_tool_done_at(at: At) {
    let budget = 512 * 1024;
    let server = start_at(
        at,
        builder().builtin_tools().limits(Limits {
            max_outbound_bytes: budget,
            idle_timeout: Duration::from_secs(2),
            replay_window_bytes: 16 * 1024 * 1024,
            ..base_limits()
        }),
    )
    .await;
    let url = server.ws_url();
    let addr = server.addr();
    let message = "x".repeat(200_000);
    let mut flooders = Vec::new();
    for n in 0..3 {
        let mut client = Client::connect(&url).await;
        let sent = flood_until_stalled(&mut client, &format!("f{n}"), &message, 2000).await;
        flooders.push((client, sent));
    }
    // Held for the three at most: each one's budget, the envelope at the
    // head of its queue and a result that just arrived, and what its writer
    // may hold (256 KiB and one envelope).
    let stats = get_json(addr, "/stats").await;
    let outbound = stats["outboundBytes"].as_u64().unwrap();
    let bound = 3 * (budget as u64 + 256 * 1024 + 3 * 200_000);
    assert!(
        outbound <= bound,
        "outboundBytes {outbound} > {bound}: {stats}"
    );
    // A canary is served while the flooders hold their connections.
    let mut canary = Client::connect(&url).await;
    for i in 0..20 {
        let done = canary
            .call_done(&format!("c{i}"), "echo", json!({"message": "canary"}))
            .await;
        assert_eq!(done["status"], "OK", "{done}");
    }

    // Each flooder reads at last: what reached it before the server gave up
    // on it (closed `idle`, or `too slow` once the results of the calls it
    // had sent outgrew its budget, or reset once the close could not be
    // written); resuming the session brings the rest. Every accepted call has
    // exactly one TOOL_DONE.
    let mut dones: HashMap<String, u32> = HashMap::new();
    for (mut client, sent) in flooders {
        let session = client.session.clone();
        let (texts, ended) = client.read_to_end().await;
        match &ended {
            Ended::Closed(Some((1001, reason))) if reason == "idle" => {}
            Ended::Closed(Some((1008, reason))) if reason == "too slow" => {}
            Ended::Dropped(_) => {}
            other => {
                panic!("expected close 1001 idle or 1008 too slow after {sent} calls: {other:?}")
            }
        }
        // The HAI read at connect counts too, when nothing else got through.
        let last = dones_in(&texts, &mut dones).max(client.last_seq());
        let mut again = Client::connect_raw(&url).await;
        again
            .send(&resume_hai("r", &session, &last.to_string()))
            .await;
        for received in 0.. {
            // Inbound data keeps the connection from going idle while it reads.
            if received % 8 == 0 {
                again.send(&json!({"type": "PING", "payload": {}})).await;
            }
            let env = again.recv().await;
            // The HAI confirming the resumption (not one replayed from the window).
            if env["type"] == "HAI" && env["payload"].get("last_rx_seq").is_some() {
                assert_eq!(env["session"], session.as_str(), "resumed: {env}");
                break;
            }
            if env["type"] == "TOOL_DONE" {
                let id = env["payload"]["call_id"].as_str().unwrap_or_default();
                *dones.entry(id.to_owned()).or_default() += 1;
            }
        }
        again.close().await;
    }
    assert!(
        dones.values().all(|&n| n == 1),
        "one TOOL_DONE per call: {dones:?}"
    );
    let stats = get_json(addr, "/stats").await;
    let accepted = stats["toolExecutions"]["total"].as_u64().unwrap();
    assert_eq!(
        accepted,
        dones.len() as u64 + 20,
        "every accepted call reached its client: {stats}"
    );
    let closed = &stats["connectionsClosed"];
    let gone = closed["idle"].as_u64().unwrap_or(0) + closed["tooSlow"].as_u64().unwrap_or(0);
    assert!(gone >= 3, "{stats}");
}

// ----- 2: upstream POST bodies that trickle, stall or lie ---------------------------------

/// Opens a raw HTTP/1.1 request to `POST /haip/message` with these
/// `Content-Length` and first body bytes; the caller holds the socket.
async fn raw_post(addr: SocketAddr, length: &str, first: &[u8]) -> TcpStream {
    let mut socket = within("connecting", TcpStream::connect(addr))
        .await
        .unwrap();
    let head = format!(
        "POST /haip/message HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(first).await.unwrap();
    socket
}

/// Reads the response on `socket` until the server closes it; returns the
/// status and the whole text.
async fn read_response(socket: &mut TcpStream) -> (u16, String) {
    let mut raw = Vec::new();
    within("the response and the close", socket.read_to_end(&mut raw))
        .await
        .expect("reading the response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {text:?}"));
    (status, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_stalled_and_lying_post_bodies_get_408_503_413() {
    slow_stalled_and_lying_post_bodies_get_408_503_413_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_stalled_and_lying_post_bodies_get_408_503_413_in_an_axum_app() {
    slow_stalled_and_lying_post_bodies_get_408_503_413_at(At::App).await;
}

async fn slow_stalled_and_lying_post_bodies_get_408_503_413_at(at: At) {
    let server = start_at(
        at,
        builder().limits(Limits {
            body_read_timeout: Duration::from_secs(2),
            max_inflight_body_bytes: 1024 * 1024,
            max_message_bytes: 64 * 1024,
            ..base_limits()
        }),
    )
    .await;
    let addr = server.addr();
    let mut stream = conn::Conn::connect(conn::Kind::Sse, addr, None).await;

    // A length no body may have: refused before any of it is read.
    let mut liar = raw_post(addr, "99999999999999", b"").await;
    let (status, text) = read_response(&mut liar).await;
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("MESSAGE_TOO_LARGE"), "{text}");

    // Two stalled bodies of 600 KB: the first is admitted, the second would
    // exceed the server-wide 1 MiB and gets 503 at once.
    // Two stalled bodies of 600 KB: whichever the server takes first is
    // admitted (then times out), the other would exceed the server-wide
    // 1 MiB and gets 503 with Retry-After at once.
    let stalled = [
        raw_post(addr, "600000", b"[").await,
        raw_post(addr, "600000", b"[").await,
    ];
    let answers =
        stalled.map(|mut socket| tokio::spawn(async move { read_response(&mut socket).await }));
    // A trickling body: 408 once the time is up, and the connection closes.
    let mut trickle = raw_post(addr, "100", b"{\"type\":").await;
    let (status, text) = read_response(&mut trickle).await;
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("REQUEST_TIMEOUT"), "{text}");
    let mut statuses = Vec::new();
    for answer in answers {
        let (status, text) = within("a stalled POST's answer", answer).await.unwrap();
        if status == 503 {
            assert!(
                text.to_ascii_lowercase().contains("retry-after: 1"),
                "{text}"
            );
        }
        statuses.push(status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [408, 503]);

    // The session and everyone else are fine.
    conn::assert_ok(
        &stream
            .post(r#"{"type":"PING","payload":{"nonce":"n"}}"#)
            .await,
    );
    assert_eq!(stream.recv().await["payload"], json!({"nonce": "n"}));
    // One envelope of a body larger than any message may be: reported and
    // skipped, the rest of the body handled.
    let big = json!({"type": "PING", "payload": {"nonce": "x".repeat(100_000)}});
    let small = json!({"type": "PING", "payload": {"nonce": "after"}});
    conn::assert_ok(&stream.post(&json!([big, small]).to_string()).await);
    let error = stream.recv().await;
    assert_eq!(error["payload"]["code"], "MESSAGE_TOO_LARGE", "{error}");
    assert_eq!(stream.recv().await["payload"], json!({"nonce": "after"}));
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["connectionsClosed"]["bodyTimeout"], 2, "{stats}");
}

// ----- 3 and 5: huge params, huge results -------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_params_get_a_short_error_and_huge_results_end_exactly_once() {
    huge_params_get_a_short_error_and_huge_results_end_exactly_once_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_params_get_a_short_error_and_huge_results_end_exactly_once_in_an_axum_app() {
    huge_params_get_a_short_error_and_huge_results_end_exactly_once_at(At::App).await;
}

async fn huge_params_get_a_short_error_and_huge_results_end_exactly_once_at(at: At) {
    let limit = 4 * 1024 * 1024;
    let server = start_at(
        at,
        demo_builder().tool(blob()).limits(Limits {
            max_outbound_message_bytes: limit,
            ..base_limits()
        }),
    )
    .await;
    let url = server.ws_url();
    let mut client = Client::connect(&url).await;
    let mut canary = Client::connect(&url).await;

    // 80 000 unknown keys (under 1 MiB of JSON): 20 violations listed, all counted.
    let mut params = Map::new();
    params.insert("username".into(), json!("ada_l"));
    params.insert("email".into(), json!("ada@example.com"));
    params.insert("age".into(), json!(36));
    for i in 0..80_000 {
        params.insert(format!("a{i}"), json!(0));
    }
    client
        .call("keys", "create_user", Value::Object(params))
        .await;
    let (text, done) = client.recv_raw().await;
    assert_eq!(done["type"], "TOOL_DONE", "{done}");
    let result = &done["payload"]["result"];
    assert_eq!(result["code"], "INVALID_PARAMS", "{result}");
    assert_eq!(result["total"], 80_000);
    assert_eq!(result["details"].as_array().map(Vec::len), Some(20));
    assert!(text.len() < 8192, "a short reply: {} bytes", text.len());

    // A 900 KB value quoted in a few dozen characters, validated off the
    // session task while the canary is served.
    client
        .call(
            "long",
            "create_user",
            json!({"username": "x".repeat(900_000), "email": "a@b.example", "age": 30}),
        )
        .await;
    let done = canary
        .call_done("c", "echo", json!({"message": "canary"}))
        .await;
    assert_eq!(done["status"], "OK");
    let (done, _) = client.recv_until(|env| env["type"] == "TOOL_DONE").await;
    assert_eq!(
        done["payload"]["result"]["code"], "INVALID_PARAMS",
        "{done}"
    );
    let size = done.to_string().len();
    assert!(size < 2048, "a short reply: {size} bytes");

    // 3 MiB: one WebSocket frame larger than twice the inbound limit.
    let done = client
        .call_done("b3", "blob", json!({"bytes": 3 << 20}))
        .await;
    assert_eq!(done["status"], "OK");
    assert_eq!(done["result"]["data"].as_str().map(str::len), Some(3 << 20));
    // 5 MiB: over max_outbound_message_bytes, so RESULT_TOO_LARGE: still one TOOL_DONE.
    let done = client
        .call_done("b5", "blob", json!({"bytes": 5 << 20}))
        .await;
    assert_eq!(done["status"], "ERROR", "{done}");
    let result = &done["result"];
    assert_eq!(result["code"], "RESULT_TOO_LARGE", "{result}");
    assert_eq!(result["details"]["limit"], limit);
    assert!(
        result["details"]["size"].as_u64() > Some(5 << 20),
        "{result}"
    );
    client.ping_marker().await;
}

// ----- 4: a client that reads everything, and asks for a lot ----------------------------

/// 5000 `PING`s, read back as `PONG`s in batches of 250.
async fn pings(client: &mut Client, n: usize) {
    for batch in 0..n / 250 {
        for i in 0..250 {
            let nonce = format!("p{}", batch * 250 + i);
            client
                .send(&json!({"type": "PING", "payload": {"nonce": nonce}}))
                .await;
        }
        for _ in 0..250 {
            assert_eq!(client.recv().await["type"], "PONG");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_client_is_never_dropped_for_receiving_a_lot() {
    a_reading_client_is_never_dropped_for_receiving_a_lot_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_client_is_never_dropped_for_receiving_a_lot_in_an_axum_app() {
    a_reading_client_is_never_dropped_for_receiving_a_lot_at(At::App).await;
}

async fn a_reading_client_is_never_dropped_for_receiving_a_lot_at(at: At) {
    let server = start_at(at, builder()).await;
    let url = server.ws_url();
    // A REPLAY_REQUEST over 5000 kept envelopes (more than max_outbound_queue).
    let mut client = Client::connect(&url).await;
    pings(&mut client, 5000).await;
    client
        .request("REPLAY_REQUEST", json!({"from_seq": "1"}))
        .await;
    client.relax();
    for seq in 1..=5001 {
        let env = client.recv().await;
        assert_eq!(seq_of(&env), seq, "replayed in order: {env}");
    }
    client.follow(&client.session.clone(), 5001);
    client.ping_marker().await;

    // A resumption that missed 5000.
    let mut a = Client::connect(&url).await;
    pings(&mut a, 5000).await;
    let session = a.session.clone();
    drop(a);
    let mut b = Client::connect_raw(&url).await;
    b.send(&resume_hai("r", &session, "1")).await;
    for seq in 2..=5001 {
        expect_on(&b.recv().await, &session, seq, "PONG");
    }
    let hai = expect_on(&b.recv().await, &session, 5002, "HAI");
    assert_eq!(hai, confirming_hai_payload(true, "0"));

    // An upstream POST of 5000 PINGs, answered on the SSE stream.
    let addr = server.addr();
    let mut sse = conn::Conn::connect(conn::Kind::Sse, addr, None).await;
    let batch: Vec<Value> = (0..5000)
        .map(|i| json!({"type": "PING", "payload": {"nonce": format!("b{i}")}}))
        .collect();
    let body = Value::Array(batch).to_string();
    let target = sse.session.clone();
    let post = tokio::spawn(async move {
        conn::post(
            addr,
            "/haip/message",
            None,
            &[("x-haip-session", &target)],
            &body,
        )
        .await
    });
    for i in 0..5000 {
        assert_eq!(
            sse.recv().await["payload"],
            json!({"nonce": format!("b{i}")})
        );
    }
    conn::assert_ok(&within("the POST's answer", post).await.unwrap());
}

// ----- 6: a peer's share of connections, and idle ones ------------------------------------

// haip's own listener only: embedded, haip sees requests, not connections,
// and connections per peer address are the host's (`HaipService`'s docs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_a_peers_share_connections_are_refused_and_idle_ones_closed() {
    let (handle, url) = start(builder().limit_loopback_peers(true).limits(Limits {
        max_connections_per_peer: Some(3),
        idle_timeout: Duration::from_secs(1),
        ..base_limits()
    }))
    .await;
    let addr = handle.local_addr();
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(Client::connect(&url).await);
    }
    // The fourth WebSocket: the upgrade completes, then close 1013.
    let (mut ws, _) = within("the fourth upgrade", tokio_tungstenite::connect_async(&url))
        .await
        .expect("the upgrade completes");
    match within("the close", ws.next()).await {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 1013),
        other => panic!(
            "expected close 1013, got {other:?}; {}",
            get_json(addr, "/health").await
        ),
    }
    // Plain HTTP: 503, but /health is always served.
    let response = http_get(addr, "/stats").await;
    assert_eq!(response.status, 503, "{response:?}");
    assert_eq!(response.json()["code"], "TOO_MANY_SESSIONS");
    assert_eq!(http_get(addr, "/health").await.status, 200);
    // Silent connections are closed after idle_timeout, sessions kept.
    for mut client in held {
        assert_eq!(client.expect_close().await, (1001, "idle".to_owned()));
    }
    // The closed connections leave the peer's count once their sockets are
    // gone; until then even /stats is refused.
    let stats = within("/stats served again", async {
        loop {
            let response = http_get(addr, "/stats").await;
            if response.status == 200 {
                break response.json();
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert_eq!(stats["connectionsClosed"]["idle"], 3, "{stats}");
    assert!(
        stats["connectionsClosed"]["perPeerCap"].as_u64() >= Some(2),
        "{stats}"
    );
    assert_eq!(stats["detachedSessions"], 3, "{stats}");
}

// ----- 7: replay windows beyond the server's budget ---------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_budget_evicts_detached_sessions_oldest_first() {
    the_replay_budget_evicts_detached_sessions_oldest_first_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replay_budget_evicts_detached_sessions_oldest_first_in_an_axum_app() {
    the_replay_budget_evicts_detached_sessions_oldest_first_at(At::App).await;
}

async fn the_replay_budget_evicts_detached_sessions_oldest_first_at(at: At) {
    let budget = 300_000;
    let server = start_at(
        at,
        builder().limits(Limits {
            replay_budget_bytes: budget,
            ..base_limits()
        }),
    )
    .await;
    let url = server.ws_url();
    let addr = server.addr();
    let nonce = "n".repeat(5000);
    let mut sessions = Vec::new();
    for _ in 0..4 {
        let mut client = Client::connect(&url).await;
        // About 100 KB of window each.
        for _ in 0..20 {
            client
                .send(&json!({"type": "PING", "payload": {"nonce": nonce}}))
                .await;
            client.recv().await;
        }
        sessions.push((client.session.clone(), client.last_seq()));
        drop(client);
        stats_until(addr, "the session parked", |s| s["activeConnections"] == 0).await;
    }
    let stats = get_json(addr, "/stats").await;
    let replay = stats["replayBytes"].as_u64().unwrap();
    assert!(
        replay <= budget as u64 + 110_000,
        "replayBytes {replay}: {stats}"
    );
    // The oldest detached session was evicted: its resumption fails.
    let (oldest, seq) = &sessions[0];
    let mut client = Client::connect(&url).await;
    client
        .send(&resume_hai("r1", oldest, &seq.to_string()))
        .await;
    let error = client.expect_error().await;
    assert_eq!(error["payload"]["code"], "RESUME_FAILED", "{error}");
    assert_eq!(error["payload"]["detail"]["reason"], "unknown session");
    // The newest is still there.
    let (newest, seq) = &sessions[3];
    let mut client = Client::connect_raw(&url).await;
    client
        .send(&resume_hai("r4", newest, &seq.to_string()))
        .await;
    let hai = client.recv().await;
    assert_eq!(
        (hai["type"].as_str(), hai["session"].as_str()),
        (Some("HAI"), Some(newest.as_str())),
        "{hai}"
    );
}

// ----- 8: binary frames, broken frames, outsized numbers ----------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_frames_and_broken_frames_get_their_documented_answers() {
    binary_frames_and_broken_frames_get_their_documented_answers_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_frames_and_broken_frames_get_their_documented_answers_in_an_axum_app() {
    binary_frames_and_broken_frames_get_their_documented_answers_at(At::App).await;
}

async fn binary_frames_and_broken_frames_get_their_documented_answers_at(at: At) {
    let server = start_at(at, builder()).await;
    let url = server.ws_url();
    // Two-frame binary: the envelope is handled once its body arrives.
    let mut client = Client::connect(&url).await;
    client
        .send(&json!({"id": "b", "type": "PING", "bin_len": 3, "payload": {"nonce": "two"}}))
        .await;
    within(
        "sending the body",
        client.ws.send(Message::binary(&b"abc"[..])),
    )
    .await
    .unwrap();
    assert_eq!(client.recv().await["payload"], json!({"nonce": "two"}));
    // Outsized client numbers are not a crash.
    for _ in 0..2 {
        client
            .request(
                "FLOW_UPDATE",
                json!({"channel": "AGENT", "add_messages": u64::MAX, "add_bytes": u64::MAX}),
            )
            .await;
    }
    client.ping_marker().await;
    // A body larger than any message may be: MESSAGE_TOO_LARGE, close 1009.
    client
        .send(&json!({"type": "PING", "bin_len": u64::MAX, "payload": {}}))
        .await;
    assert_eq!(
        client.expect_error().await["payload"]["code"],
        "MESSAGE_TOO_LARGE"
    );
    assert_eq!(client.expect_close().await.0, 1009);

    // Invalid UTF-8 in a text frame: 1007.
    let mut client = Client::connect(&url).await;
    let bad = Frame::message(vec![b'{', 0xff, 0xfe, b'}'], OpCode::Data(Data::Text), true);
    within("sending", client.ws.send(Message::Frame(bad)))
        .await
        .unwrap();
    assert_eq!(client.expect_close().await.0, 1007);
    // A reserved opcode: 1002.
    let mut client = Client::connect(&url).await;
    let bad = Frame::message(vec![1, 2, 3], OpCode::Data(Data::Reserved(3)), true);
    within("sending", client.ws.send(Message::Frame(bad)))
        .await
        .unwrap();
    assert_eq!(client.expect_close().await.0, 1002);
}
