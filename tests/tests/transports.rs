//! The transport suite (docs/protocol.md §3, §6, §9, §14, §15): each behaviour is
//! written once against [`Conn`] and run over WebSocket, SSE and HTTP
//! streaming; then what only the HTTP transports have (upstream POST
//! targeting and bodies, `X-HAIP-Message`, `data: [DONE]`, SSE keep-alives).

use crate::conn;
use crate::support;

use std::time::Duration;

use conn::{Conn, Item, Kind, assert_ok, per_transport, post};
use haip::Limits;
use serde_json::{Value, json};
use support::{
    base_limits, builder, demo_builder, expected_hai_payload, is_uuid_v4, keys, start, within,
};

per_transport!(
    handshake_comes_first,
    tool_call_reports_progress_then_result,
    cancel_mid_run,
    invalid_json_keeps_the_session,
    oversized_input_is_refused,
    ping_pong_and_unknown_type,
    incompatible_hai_closes,
    shutdown_cancels_calls_then_ends,
    heartbeat_pings,
);

/// Params for the demo's `process_file` (five 200 ms steps).
fn process() -> Value {
    json!({"filename": "data.csv", "operation": "read"})
}

/// §3.1, §15: the server's `HAI` is the first envelope, `binary_frames` only
/// on WebSocket, one session id per connection (the `X-HAIP-Session` header too).
async fn handshake_comes_first(kind: Kind) {
    let (handle, _) = start(builder()).await;
    let addr = handle.local_addr();
    let mut conn = Conn::connect(kind, addr, None).await;
    let hai = conn.hai.clone();
    assert_eq!(
        (&hai["seq"], &hai["channel"]),
        (&json!("1"), &json!("SYSTEM")),
        "{hai}"
    );
    let mut expected = expected_hai_payload();
    expected["capabilities"]["binary_frames"] = json!(kind == Kind::Ws);
    assert_eq!(hai["payload"], expected, "{kind:?}");
    if kind != Kind::Ws {
        let content_type = match kind {
            Kind::Sse => "text/event-stream",
            _ => "application/x-ndjson",
        };
        assert_eq!(conn.header("content-type"), Some(content_type));
        if kind == Kind::Sse {
            assert_eq!(conn.header("cache-control"), Some("no-cache"));
        }
        assert_eq!(conn.header("x-haip-session"), Some(conn.session.as_str()));
    }
    // The same session answers (seq 2), and a second connection is another session.
    let other = Conn::connect(kind, addr, None).await;
    assert_ne!(
        other.session, conn.session,
        "each connection is its own session"
    );
    conn.ping_marker().await;
}

/// §6.4–§6.6: results of the built-ins, then `process_file`'s progress 0..100
/// in order, then its `TOOL_DONE OK`.
async fn tool_call_reports_progress_then_result(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    let done = conn
        .call_done("e1", "echo", json!({"message": "héllo"}))
        .await;
    assert_eq!(
        done,
        json!({"call_id": "e1", "status": "OK", "result": {"echoed": "héllo"}})
    );
    let done = conn.call_done("a1", "add", json!({"a": 5, "b": 3})).await;
    assert_eq!(
        done,
        json!({"call_id": "a1", "status": "OK", "result": {"result": 8}})
    );

    conn.call("p1", "process_file", process()).await;
    for progress in [0, 20, 40, 60, 80, 100] {
        let update = conn.expect_update("p1").await;
        assert_eq!(
            update,
            json!({"call_id": "p1", "status": "RUNNING", "progress": progress})
        );
    }
    assert_eq!(
        conn.expect_done("p1").await,
        json!({"call_id": "p1", "status": "OK", "result": {"processed": true, "lines": 150}})
    );
    conn.ping_marker().await;
}

/// §6.7: `TOOL_CANCEL` mid-run ⇒ `CANCELLING`, then `TOOL_DONE CANCELLED` with
/// the reason; nothing after it.
async fn cancel_mid_run(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    conn.call("p1", "process_file", process()).await;
    assert_eq!(conn.expect_update("p1").await["progress"], 0);
    conn.request(
        "TOOL_CANCEL",
        json!({"call_id": "p1", "reason": "user abort"}),
    )
    .await;
    let (cancelling, before) = conn
        .recv_until(|e| e["payload"]["status"] == "CANCELLING")
        .await;
    for env in &before {
        assert_eq!(
            (
                &env["type"],
                &env["payload"]["call_id"],
                &env["payload"]["status"]
            ),
            (&json!("TOOL_UPDATE"), &json!("p1"), &json!("RUNNING")),
            "only progress may precede CANCELLING: {env}"
        );
    }
    assert_eq!(cancelling["type"], "TOOL_UPDATE");
    assert_eq!(
        cancelling["payload"],
        json!({"call_id": "p1", "status": "CANCELLING"})
    );
    assert_eq!(
        conn.expect_done("p1").await,
        json!({"call_id": "p1", "status": "CANCELLED", "result": {"reason": "user abort"}})
    );
    conn.ping_marker().await;
}

/// §2.2 step 2: unparsable text or a non-object ⇒ `INVALID_MESSAGE`, no
/// `related_id`; the session goes on.
async fn invalid_json_keeps_the_session(kind: Kind) {
    let (handle, _) = start(builder()).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    for (text, reason) in [("{not json", "invalid JSON"), ("42", "not an object")] {
        conn.send_raw(text).await;
        assert_eq!(
            conn.expect_error().await,
            json!({"code": "INVALID_MESSAGE", "message": "Invalid message format", "detail": {"reason": reason}}),
            "{kind:?} {text}"
        );
        conn.ping_marker().await;
    }
}

/// A `PING` envelope whose JSON text is exactly `len` bytes.
fn ping_of_len(len: usize) -> String {
    let empty = json!({"type": "PING", "payload": {"nonce": ""}}).to_string();
    let text = json!({"type": "PING", "payload": {"nonce": "x".repeat(len - empty.len())}});
    let text = text.to_string();
    assert_eq!(text.len(), len);
    text
}

/// §2.2 step 1, §14.3, §15.4, §18.1: a message or NDJSON line at
/// `max_message_bytes` is fine, one byte over ⇒ `MESSAGE_TOO_LARGE` and close
/// (WS 1009) or the stream ends; an upstream POST body at `max_body_bytes` is
/// handled envelope by envelope, each held to `max_message_bytes` (one over
/// it ⇒ `MESSAGE_TOO_LARGE`, skipped); a body over `max_body_bytes` ⇒ 413,
/// and the SSE stream is unaffected.
async fn oversized_input_is_refused(kind: Kind) {
    let (handle, _) = start(builder().limits(Limits {
        max_message_bytes: 1024,
        max_body_bytes: 4096,
        ..base_limits()
    }))
    .await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    if kind == Kind::Sse {
        // Four envelopes at the message limit, newline-separated: 4099 bytes
        // would be one too many, so the last is a byte shorter.
        let body = [
            ping_of_len(1024),
            ping_of_len(1024),
            ping_of_len(1024),
            ping_of_len(1021),
        ]
        .join("\n");
        assert_eq!(body.len(), 4096);
        conn.send_raw(&body).await;
        for _ in 0..4 {
            assert_eq!(
                conn.recv().await["type"],
                "PONG",
                "a body at the limit is handled"
            );
        }
        conn.send_raw(&ping_of_len(1025)).await;
        assert_eq!(
            conn.expect_error().await["code"],
            "MESSAGE_TOO_LARGE",
            "an envelope over the message limit is refused"
        );
        conn.ping_marker().await;
        let response = conn.post(&ping_of_len(4097)).await;
        assert_eq!(response.status, 413, "{response:?}");
        assert_eq!(
            response.json(),
            json!({"error": "Request body too large", "code": "MESSAGE_TOO_LARGE"})
        );
        assert_eq!(response.header("connection"), Some("close"), "{response:?}");
        conn.ping_marker().await;
        return;
    }
    conn.send_raw(&ping_of_len(1024)).await;
    assert_eq!(
        conn.recv().await["type"],
        "PONG",
        "a message at the limit is handled"
    );
    conn.send_raw(&ping_of_len(1025)).await;
    assert_eq!(
        conn.expect_error().await,
        json!({"code": "MESSAGE_TOO_LARGE", "message": "Message exceeds 1024 bytes", "detail": {"limit": 1024}})
    );
    let (rest, done, end) = conn.read_to_end().await;
    assert!(
        rest.is_empty() && !done,
        "nothing after the ERROR: {rest:?}"
    );
    let expected = match kind {
        Kind::Ws => Item::Closed(Some((1009, "message too large".to_owned()))),
        _ => Item::End,
    };
    assert_eq!(end, expected, "{kind:?}");
}

/// §9, §14.2: `PING` ⇒ `PONG` with the nonce copied unchanged; an unknown
/// type ⇒ `UNSUPPORTED_TYPE` with `related_id`.
async fn ping_pong_and_unknown_type(kind: Kind) {
    let (handle, _) = start(builder()).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    for payload in [
        json!({"nonce": "n-1"}),
        json!({}),
        json!({"nonce": {"deep": [1, "2"]}}),
    ] {
        conn.request("PING", payload.clone()).await;
        let pong = conn.recv().await;
        assert_eq!(
            (&pong["type"], &pong["channel"], &pong["payload"]),
            (&json!("PONG"), &json!("SYSTEM"), &payload)
        );
    }
    conn.send(&json!({"id": "u-1", "type": "NOT_A_TYPE", "payload": {}}))
        .await;
    assert_eq!(
        conn.expect_error().await,
        json!({"code": "UNSUPPORTED_TYPE", "message": "Unknown message type: NOT_A_TYPE",
               "related_id": "u-1", "detail": {"type": "NOT_A_TYPE"}})
    );
    conn.ping_marker().await;
}

/// §3.2, §14.2: a client `HAI` without major 1 ⇒ `VERSION_INCOMPATIBLE`,
/// then close 1002 (WebSocket) or the stream ends.
async fn incompatible_hai_closes(kind: Kind) {
    let (handle, _) = start(builder()).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    conn.send(&json!({"type": "HAI", "payload": {"accept_major": [2]}}))
        .await;
    assert_eq!(
        conn.expect_error().await,
        json!({"code": "VERSION_INCOMPATIBLE", "message": "No common protocol major version",
               "detail": {"supported_major": [1]}})
    );
    let (rest, done, end) = conn.read_to_end().await;
    assert!(
        rest.is_empty() && !done,
        "nothing after the ERROR: {rest:?}"
    );
    let expected = match kind {
        Kind::Ws => Item::Closed(Some((1002, "version incompatible".to_owned()))),
        _ => Item::End,
    };
    assert_eq!(end, expected, "{kind:?}");
}

/// §6.7, §15: graceful shutdown cancels the running call (`CANCELLING`, then
/// `TOOL_DONE CANCELLED {"reason":"server shutdown"}`), then closes the
/// WebSocket with 1001 or ends the stream.
async fn shutdown_cancels_calls_then_ends(kind: Kind) {
    let (handle, _) = start(demo_builder()).await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    conn.call("p1", "process_file", process()).await;
    assert_eq!(conn.expect_update("p1").await["progress"], 0);
    let shutdown = tokio::spawn({
        let handle = handle.clone();
        async move { handle.shutdown().await }
    });
    let (envelopes, done, end) = conn.read_to_end().await;
    assert_cancelled_by_shutdown(&envelopes, "p1");
    assert!(!done, "no data: [DONE] on {kind:?}");
    let expected = match kind {
        Kind::Ws => Item::Closed(Some((1001, "server shutdown".to_owned()))),
        _ => Item::End,
    };
    assert_eq!(end, expected, "{kind:?}");
    // The server ends the connection itself: shutdown does not wait for the
    // client to hang up (the duplex request body is still open here).
    within("the shutdown to finish", shutdown)
        .await
        .expect("shutdown does not panic");
    drop(conn);
}

/// `envelopes` are progress of `call_id`, then its `CANCELLING`, then its
/// `TOOL_DONE CANCELLED` for the shutdown, and nothing else.
fn assert_cancelled_by_shutdown(envelopes: &[Value], call_id: &str) {
    let types: Vec<(&Value, &Value)> = envelopes
        .iter()
        .map(|e| (&e["type"], &e["payload"]["status"]))
        .skip_while(|(_, status)| *status == "RUNNING")
        .collect();
    assert_eq!(
        types,
        [
            (&json!("TOOL_UPDATE"), &json!("CANCELLING")),
            (&json!("TOOL_DONE"), &json!("CANCELLED"))
        ],
        "{envelopes:?}"
    );
    let done = &envelopes[envelopes.len() - 1]["payload"];
    assert_eq!(
        done,
        &json!({"call_id": call_id, "status": "CANCELLED", "result": {"reason": "server shutdown"}})
    );
}

/// §9: with a 200 ms heartbeat, the server sends `PING {"nonce": <uuid>}`
/// envelopes on SYSTEM (SSE included: its client accepts every event).
async fn heartbeat_pings(kind: Kind) {
    let (handle, _) = start(builder().limits(Limits {
        heartbeat_interval: Duration::from_millis(200),
        ..base_limits()
    }))
    .await;
    let mut conn = Conn::connect(kind, handle.local_addr(), None).await;
    let mut nonces = Vec::new();
    for _ in 0..2 {
        let item = conn.next_item().await;
        let Item::Envelope(text) = item else {
            panic!("{kind:?}: expected a PING envelope, got {item:?}")
        };
        let ping: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (&ping["type"], &ping["channel"]),
            (&json!("PING"), &json!("SYSTEM"))
        );
        assert_eq!(keys(&ping["payload"]), ["nonce"], "{ping}");
        let nonce = ping["payload"]["nonce"].as_str().unwrap().to_owned();
        assert!(is_uuid_v4(&nonce), "{ping}");
        nonces.push(nonce);
    }
    assert_ne!(nonces[0], nonces[1], "a fresh nonce per PING");
}

// ----- HTTP transports only -----------------------------------------------------

const NO_SESSION: &str = "00000000-0000-4000-8000-000000000000";

fn ping(nonce: &str) -> String {
    json!({"type": "PING", "payload": {"nonce": nonce}}).to_string()
}

/// Expects the next envelope of `conn` to be the `PONG` of `nonce`.
async fn expect_pong(conn: &mut Conn, nonce: &str) {
    let env = conn.recv().await;
    assert_eq!(
        (&env["type"], &env["payload"]),
        (&json!("PONG"), &json!({"nonce": nonce})),
        "{env}"
    );
}

fn assert_session_not_found(response: &support::HttpResponse) {
    assert_eq!(response.status, 404, "{response:?}");
    assert_eq!(
        response.json(),
        json!({"error": "Session not found", "code": "SESSION_NOT_FOUND"})
    );
}

/// §15.4: no open stream session ⇒ 404 on every upstream path; with exactly
/// one open, an unknown id still reaches it (rule 4); with two, 404.
#[tokio::test]
async fn upstream_post_without_a_target_is_404() {
    let (handle, _) = start(builder()).await;
    let addr = handle.local_addr();
    let named = [("x-haip-session", NO_SESSION)];
    for path in ["/haip/sse", "/haip/message", "/haip/handshake"] {
        assert_session_not_found(&post(addr, path, None, &named, &ping("x")).await);
    }
    let stream_post = [("x-haip-message", "true"), ("x-haip-session", NO_SESSION)];
    assert_session_not_found(&post(addr, "/haip/stream", None, &stream_post, &ping("x")).await);

    let mut only = Conn::connect(Kind::Sse, addr, None).await;
    assert_ok(&post(addr, "/haip/message", None, &named, &ping("only")).await);
    expect_pong(&mut only, "only").await;
    let _second = Conn::connect(Kind::Sse, addr, None).await;
    assert_session_not_found(&post(addr, "/haip/message", None, &named, &ping("x")).await);
    assert_session_not_found(&post(addr, "/haip/message", None, &[], &ping("x")).await);
    only.ping_marker().await;
}

/// §15.4: a JSON array body and an NDJSON body (blank line, bad line) are
/// handled element by element, in order, before the `200`.
#[tokio::test]
async fn upstream_array_and_ndjson_bodies_are_handled_in_order() {
    let (handle, _) = start(builder().builtin_tools()).await;
    let addr = handle.local_addr();
    let mut conn = Conn::connect(Kind::Sse, addr, None).await;
    let array = json!([
        {"id": "a1", "type": "PING", "payload": {"nonce": "1"}},
        {"id": "a2", "type": "TOOL_LIST", "payload": {}},
        {"id": "a3", "type": "NOPE", "payload": {}}
    ]);
    assert_ok(&post(addr, "/haip/sse", None, &[], &array.to_string()).await);
    expect_pong(&mut conn, "1").await;
    let list = conn.recv().await;
    assert_eq!(
        (&list["type"], &list["channel"]),
        (&json!("TOOL_LIST"), &json!("AGENT"))
    );
    assert_eq!(list["payload"]["tools"][0]["name"], "echo", "{list}");
    let error = conn.expect_error().await;
    assert_eq!(
        (&error["code"], &error["related_id"]),
        (&json!("UNSUPPORTED_TYPE"), &json!("a3"))
    );

    let ndjson = format!("{}\n\n{{bad json\n{}\n", ping("2"), ping("3"));
    assert_ok(&post(addr, "/haip/handshake", None, &[], &ndjson).await);
    expect_pong(&mut conn, "2").await;
    assert_eq!(
        conn.expect_error().await["detail"],
        json!({"reason": "invalid JSON"})
    );
    expect_pong(&mut conn, "3").await;
    conn.ping_marker().await;
}

/// §15.4: with two SSE sessions open, the target is the first element's
/// envelope `session`, else `X-HAIP-Session`, else the query `session`.
#[tokio::test]
async fn upstream_targets_by_envelope_header_then_query() {
    let (handle, _) = start(builder()).await;
    let addr = handle.local_addr();
    let mut a = Conn::connect(Kind::Sse, addr, None).await;
    let mut b = Conn::connect(Kind::Sse, addr, None).await;
    let (sa, sb) = (a.session.clone(), b.session.clone());

    assert_ok(
        &post(
            addr,
            "/haip/message",
            None,
            &[("x-haip-session", &sb)],
            &ping("h-b"),
        )
        .await,
    );
    expect_pong(&mut b, "h-b").await;
    let query_a = format!("/haip/message?session={sa}");
    assert_ok(&post(addr, &query_a, None, &[], &ping("q-a")).await);
    expect_pong(&mut a, "q-a").await;
    let with_session = json!({"session": sb, "type": "PING", "payload": {"nonce": "e-b"}});
    let header_a = [("x-haip-session", sa.as_str())];
    assert_ok(
        &post(
            addr,
            "/haip/message",
            None,
            &header_a,
            &with_session.to_string(),
        )
        .await,
    );
    expect_pong(&mut b, "e-b").await;
    let query_b = format!("/haip/message?session={sb}");
    assert_ok(&post(addr, &query_b, None, &header_a, &ping("h-a")).await);
    expect_pong(&mut a, "h-a").await;
    a.ping_marker().await;
    b.ping_marker().await;
}

/// §15.3, §15.4: `GET /haip/stream` (NDJSON unless SSE is asked for) and
/// `POST /haip/stream` sessions take upstream `POST /haip/stream` with
/// `X-HAIP-Message: true`.
#[tokio::test]
async fn x_haip_message_post_reaches_stream_sessions() {
    let (handle, _) = start(builder()).await;
    let addr = handle.local_addr();
    let accept = [("accept", "application/x-ndjson")];
    let mut get = Conn::open_http(addr, "GET", "/haip/stream", &accept, false)
        .await
        .expect("GET /haip/stream opens");
    assert_eq!(get.header("content-type"), Some("application/x-ndjson"));
    assert_eq!(get.hai["payload"]["capabilities"]["binary_frames"], false);
    // The POST stream is NDJSON whatever `Accept` says (§15.3).
    let accept_sse = [
        ("accept", "text/event-stream"),
        ("content-type", "application/x-ndjson"),
    ];
    let mut duplex = Conn::open_http(addr, "POST", "/haip/stream", &accept_sse, true)
        .await
        .expect("POST /haip/stream opens");
    assert_eq!(duplex.header("content-type"), Some("application/x-ndjson"));
    for (conn, nonce) in [(&mut get, "to-get"), (&mut duplex, "to-duplex")] {
        let headers = [
            ("x-haip-message", "true"),
            ("x-haip-session", conn.session.as_str()),
        ];
        assert_ok(&post(addr, "/haip/stream", None, &headers, &ping(nonce)).await);
        expect_pong(conn, nonce).await;
    }
    let untargeted = [("x-haip-message", "true")];
    assert_session_not_found(&post(addr, "/haip/stream", None, &untargeted, &ping("x")).await);
    get.ping_marker().await;
    // The end of the duplex request body does not end its session.
    duplex.send_raw(&ping("last-line")).await;
    duplex.finish_upstream();
    expect_pong(&mut duplex, "last-line").await;
    let headers = [
        ("x-haip-message", "true"),
        ("x-haip-session", duplex.session.as_str()),
    ];
    assert_ok(&post(addr, "/haip/stream", None, &headers, &ping("after-end")).await);
    expect_pong(&mut duplex, "after-end").await;
}

/// §15.3: the `POST /haip/stream` body is read as it arrives: a line split
/// across chunks, several lines in one chunk, blank lines and CRLF; a partial
/// line already over `max_message_bytes` ends the stream.
#[tokio::test]
async fn ndjson_request_body_is_read_incrementally() {
    let (handle, _) = start(builder().limits(Limits {
        max_message_bytes: 1024,
        ..base_limits()
    }))
    .await;
    let mut conn = Conn::connect(Kind::Stream, handle.local_addr(), None).await;
    let split = ping("split");
    let (head, tail) = split.split_at(10);
    conn.write_body(head);
    conn.write_body(&format!("{tail}\n"));
    expect_pong(&mut conn, "split").await;
    conn.write_body(&format!("\n  \r\n{}\r\n\n{}\n", ping("a"), ping("b")));
    expect_pong(&mut conn, "a").await;
    expect_pong(&mut conn, "b").await;
    conn.ping_marker().await;
    conn.write_body(&"x".repeat(1500));
    assert_eq!(conn.expect_error().await["code"], "MESSAGE_TOO_LARGE");
    let (rest, _, end) = conn.read_to_end().await;
    assert_eq!((rest, end), (vec![], Item::End));
}

/// §15: `GET /haip/stream` with `Accept: text/event-stream` is `data:`-framed;
/// at shutdown the call is cancelled and `data: [DONE]` comes last.
#[tokio::test]
async fn sse_framed_get_stream_ends_with_done_at_shutdown() {
    let (handle, _) = start(demo_builder()).await;
    let addr = handle.local_addr();
    let accept = [("accept", "text/event-stream")];
    let mut conn = Conn::open_http(addr, "GET", "/haip/stream", &accept, false)
        .await
        .expect("GET /haip/stream opens");
    assert_eq!(conn.header("content-type"), Some("text/event-stream"));
    conn.call("p1", "process_file", process()).await;
    assert_eq!(conn.expect_update("p1").await["progress"], 0);
    let shutdown = tokio::spawn({
        let handle = handle.clone();
        async move { handle.shutdown().await }
    });
    let (envelopes, done, end) = conn.read_to_end().await;
    assert_cancelled_by_shutdown(&envelopes, "p1");
    assert!(done, "data: [DONE] ends the stream: {envelopes:?}");
    assert_eq!(end, Item::End);
    within("the shutdown to finish", shutdown).await.unwrap();
    drop(conn);
}

/// §9: an SSE client whose `accept_events` lacks `PING` gets `: ping`
/// comments instead of heartbeat `PING` envelopes.
#[tokio::test]
async fn sse_keep_alive_comments_replace_filtered_pings() {
    let heartbeat = Duration::from_millis(200);
    let (handle, _) = start(builder().builtin_tools().limits(Limits {
        heartbeat_interval: heartbeat,
        ..base_limits()
    }))
    .await;
    let mut conn = Conn::connect(Kind::Sse, handle.local_addr(), None).await;
    conn.request("HAI", json!({"accept_events": ["PONG"]}))
        .await;
    // A heartbeat committed before the HAI was handled may still arrive first.
    conn.request("PING", json!({"nonce": "after-hai"})).await;
    let (pong, before) = conn.recv_until(|e| e["type"] == "PONG").await;
    assert_eq!(pong["payload"], json!({"nonce": "after-hai"}));
    assert!(before.iter().all(|e| e["type"] == "PING"), "{before:?}");
    let mut comments = 0;
    while comments < 2 {
        match conn.next_item().await {
            Item::Comment(text) => {
                assert_eq!(text, "ping");
                comments += 1;
            }
            other => panic!("only keep-alive comments expected, got {other:?}"),
        }
    }
    // Replies to the client's own requests are never filtered (§3.3).
    let done = conn.call_done("e1", "echo", json!({"message": "m"})).await;
    assert_eq!(done["status"], "OK", "{done}");
}
