//! Security: browser origins, `Host` names and simple POSTs on every route,
//! per-caller shares of HAIP sessions, `/metrics` on the main port, and
//! HS256 secrets too short to be secret. Each test plays the attack an
//! attacker's review reproduced against a running server, through the real
//! wire, and checks that nothing ran.
//!
//! The attacks run against haip's own listener and again against
//! `examples/axum_app.rs` with haip nested at its root
//! (`…_in_an_axum_app`, [`At::App`]), which writes no row of the security
//! report (`support::security_row`) a second time. `allowed_hosts` naming
//! public names is served by haip's own loopback listener only: embedded,
//! `into_service` refuses it without authentication (`embedded.rs`).

use std::net::SocketAddr;

use futures_util::StreamExt;
use haip::Limits;
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::{Value, json};
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::conn::{self, Conn, Kind, Refused};
use crate::embedded_support::{At, start_at};
use crate::support::{
    self, HttpResponse, base_limits, demo_builder, get_json, http_request_with, start, within,
};

const SECRET: &str = "a secret for the security tests, 32+ bytes";

/// An HS256 token of `sub` granting `scope` (space-separated).
fn token(sub: &str, scope: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 300;
    let claims = json!({"sub": sub, "exp": exp, "scope": scope});
    let key = EncodingKey::from_secret(SECRET.as_bytes()).unwrap();
    encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap()
}

/// How many tool calls the server accepted.
async fn calls_run(addr: SocketAddr) -> u64 {
    get_json(addr, "/stats").await["toolExecutions"]["total"]
        .as_u64()
        .unwrap()
}

fn refused_with(response: &HttpResponse, status: u16, code: &str) {
    assert_eq!(response.status, status, "{response:?}");
    assert_eq!(response.json()["code"], code, "{response:?}");
}

/// A WebSocket upgrade of `path` with one extra header, by the tiny client
/// (which stops at the response head).
async fn raw_upgrade(addr: SocketAddr, path: &str, extra: (&str, &str)) -> HttpResponse {
    let headers = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        extra,
    ];
    http_request_with(addr, "GET", path, &headers, b"").await
}

/// (1, High) A page on any site opened a WebSocket to a local server and
/// called every tool. Now a browser `Origin` that is not the server's own,
/// not a loopback page, and not listed gets `403` before anything runs,
/// on the HAIP paths and the inspector's socket alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_page_cannot_open_a_websocket() {
    a_foreign_page_cannot_open_a_websocket_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_page_cannot_open_a_websocket_in_an_axum_app() {
    a_foreign_page_cannot_open_a_websocket_at(At::App).await;
}

async fn a_foreign_page_cannot_open_a_websocket_at(at: At) {
    let server = start_at(at, demo_builder().inspector(true)).await;
    let addr = server.addr();
    let mut local = support::Client::connect(&format!("ws://{addr}/haip")).await;
    let (before, _) = support::timed(local.call_done("l1", "echo", json!({"message": "1"}))).await;
    for path in ["/haip", "/", "/haip/websocket"] {
        let refused = raw_upgrade(addr, path, ("Origin", "https://evil.example")).await;
        refused_with(&refused, 403, "ORIGIN_NOT_ALLOWED");
        assert!(refused.body.contains("cors_allowed_origins"), "{refused:?}");
    }
    // The real client, as a page would drive it: no socket at all.
    let mut request = format!("ws://{addr}/haip").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    assert!(
        within("a refused upgrade", connect_async(request))
            .await
            .is_err(),
        "a foreign origin opened a WebSocket"
    );
    // The server's own pages (the inspector), local pages, and clients
    // that are not browsers still connect and call.
    for origin in [
        Some(format!("http://{addr}")),
        Some(format!("http://localhost:{}", addr.port())),
        Some("http://localhost:5173".to_owned()),
        None,
    ] {
        let mut request = format!("ws://{addr}/haip").into_client_request().unwrap();
        if let Some(origin) = &origin {
            request
                .headers_mut()
                .insert("origin", origin.parse().unwrap());
        }
        let (mut client, _) = support::Client::connect_with(request).await;
        let done = client
            .call_done("c1", "echo", json!({"message": "hi"}))
            .await;
        assert_eq!(done["status"], "OK", "{origin:?}: {done}");
    }
    let (during, _) = support::timed(local.call_done("l2", "echo", json!({"message": "2"}))).await;
    assert_eq!(calls_run(addr).await, 6, "only the allowed clients called");
    // One row per attack in the report: the standalone server's.
    if at == At::Own {
        support::security_row(
            1,
            "A page on another site opens `ws://127.0.0.1/haip` (`Origin: https://evil.example`), on `/haip`, `/`, `/haip/websocket` (the inspector's socket)",
            "`403 ORIGIN_NOT_ALLOWED` before authentication; no socket, no call",
            "a local client's `echo`",
            Some(before),
            Some(during),
        );
    }
}

/// (1, High) A `text/plain` POST is a CORS "simple request": a page sends
/// it cross-origin with no preflight. It ran a tool through `/haip/stream`
/// and planted a `TOOL_CALL` in another client's SSE session through
/// `/haip/message`. Now such a POST (or one with no type at all) gets `415`
/// even with no `Origin` header, and the session hears nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_posts_run_nothing() {
    simple_posts_run_nothing_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_posts_run_nothing_in_an_axum_app() {
    simple_posts_run_nothing_at(At::App).await;
}

async fn simple_posts_run_nothing_at(at: At) {
    let server = start_at(at, demo_builder()).await;
    let addr = server.addr();
    let call = json!({"id": "e1", "type": "TOOL_CALL", "channel": "USER",
        "payload": {"call_id": "planted", "tool": "echo", "params": {"message": "pwned"}}})
    .to_string();
    let mut local = support::Client::connect(&format!("ws://{addr}/haip")).await;
    let (before, _) = support::timed(local.call_done("l1", "echo", json!({"message": "1"}))).await;
    // A stream opened with a text/plain body of NDJSON.
    for content_type in [
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let mut headers = vec![];
        headers.extend(content_type.map(|t| ("content-type", t)));
        let response =
            conn::http(addr, "POST", "/haip/stream", &headers, &format!("{call}\n")).await;
        refused_with(&response, 415, "UNSUPPORTED_MEDIA_TYPE");
        assert!(response.body.contains("application/json"), "{response:?}");
    }
    // Another client's SSE session, and a plain-text POST naming it.
    let mut victim = Conn::connect(Kind::Sse, addr, None).await;
    for path in ["/haip/message", "/haip/sse", "/haip/handshake"] {
        let session = victim.session.clone();
        for content_type in ["text/plain", "multipart/form-data; boundary=x"] {
            let headers = [
                ("content-type", content_type),
                ("x-haip-session", session.as_str()),
            ];
            let response = conn::http(addr, "POST", path, &headers, &call).await;
            refused_with(&response, 415, "UNSUPPORTED_MEDIA_TYPE");
        }
    }
    // The victim's stream carries nothing of it: the next envelope is the
    // answer to its own ping.
    let ping =
        json!({"id": "p1", "type": "PING", "channel": "SYSTEM", "payload": {"nonce": "mine"}});
    conn::assert_ok(&victim.post(&ping.to_string()).await);
    let pong = victim.recv().await;
    assert_eq!(
        (pong["type"].as_str(), pong["payload"]["nonce"].as_str()),
        (Some("PONG"), Some("mine")),
        "{pong}"
    );
    assert_eq!(
        calls_run(addr).await,
        1,
        "nothing ran but the local client's call"
    );
    let (during, _) = support::timed(local.call_done("l2", "echo", json!({"message": "2"}))).await;
    // One row per attack in the report: the standalone server's.
    if at == At::Own {
        support::security_row(
            1,
            "`text/plain` (and form, and untyped) POSTs: a stream of NDJSON to `/haip/stream`; a `TOOL_CALL` planted in another client's SSE session via `/haip/message`, `/haip/sse`, `/haip/handshake`",
            "`415 UNSUPPORTED_MEDIA_TYPE`; nothing runs, the SSE session hears nothing",
            "a local client's `echo`",
            Some(before),
            Some(during),
        );
    }
    // The same POST as JSON is served: the rule costs clients nothing.
    conn::assert_ok(&victim.post(&call).await);
    let (done, _) = victim.recv_until(|e| e["type"] == "TOOL_DONE").await;
    assert_eq!(done["payload"]["status"], "OK", "{done}");
}

/// (1, High) DNS rebinding: the attacker's name, pointed at 127.0.0.1,
/// reaches a loopback server with `Host: evil.example` and the page's own
/// origin. `/stats` answered and the WebSocket opened; now every route but
/// none refuses a name the server does not answer to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_reaches_nothing() {
    a_rebound_name_reaches_nothing_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_name_reaches_nothing_in_an_axum_app() {
    a_rebound_name_reaches_nothing_at(At::App).await;
}

async fn a_rebound_name_reaches_nothing_at(at: At) {
    let server = start_at(at, demo_builder().inspector(true)).await;
    let addr = server.addr();
    let host = format!("evil.example:{}", addr.port());
    let origin = format!("http://{host}");
    let rebound = [("Host", host.as_str()), ("Origin", origin.as_str())];
    let mut local = support::Client::connect(&format!("ws://{addr}/haip")).await;
    let (before, _) = support::timed(local.call_done("l1", "echo", json!({"message": "1"}))).await;
    for path in ["/stats", "/inspector", "/metrics", "/haip"] {
        let response = http_request_with(addr, "GET", path, &rebound, b"").await;
        refused_with(&response, 403, "HOST_NOT_ALLOWED");
        assert!(response.body.contains("allowed_hosts"), "{response:?}");
    }
    let response = raw_upgrade(addr, "/haip", ("Host", &host)).await;
    refused_with(&response, 403, "HOST_NOT_ALLOWED");
    let response = http_request_with(addr, "GET", "/haip/sse", &[("Host", &host)], b"").await;
    refused_with(&response, 403, "HOST_NOT_ALLOWED");
    // Two `Host`s (no browser sends them): not a name the server answers to.
    let response = conn::http(addr, "GET", "/stats", &[("host", &host)], "").await;
    refused_with(&response, 403, "HOST_NOT_ALLOWED");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let mcp = [
        ("Host", host.as_str()),
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
    ];
    let response = http_request_with(addr, "POST", "/mcp", &mcp, body.as_bytes()).await;
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(response.json()["error"]["code"], -32600, "{response:?}");
    let (during, _) = support::timed(local.call_done("l2", "echo", json!({"message": "2"}))).await;
    // One row per attack in the report: the standalone server's.
    if at == At::Own {
        support::security_row(
            1,
            "DNS rebinding: `Host: evil.example` (and its own `Origin`) on `/stats`, `/inspector`, `/metrics`, a WebSocket upgrade, SSE, `/mcp`",
            "`403 HOST_NOT_ALLOWED` (`/mcp`: `403` with JSON-RPC `-32600`) on every route",
            "a local client's `echo`",
            Some(before),
            Some(during),
        );
    }
    // `/health` always answers (a probe's `Host` is its platform's).
    let response = http_request_with(addr, "GET", "/health", &rebound, b"").await;
    assert_eq!(response.status, 200, "{response:?}");
    // Loopback names are the server's own.
    for host in [addr.to_string(), format!("localhost:{}", addr.port())] {
        let response = http_request_with(addr, "GET", "/stats", &[("Host", &host)], b"").await;
        assert_eq!(response.status, 200, "{host}: {response:?}");
    }
}

/// `allowed_hosts` widens what a loopback server answers to (a name in
/// front of it), and only that.
/// haip's own listener only: embedded, `into_service` refuses public names
/// without authentication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowed_hosts_are_answered() {
    let (handle, _) =
        start(demo_builder().allowed_hosts(["tools.example.com", "*.internal.example"])).await;
    let addr = handle.local_addr();
    for (host, status) in [
        ("tools.example.com", 200),
        ("tools.example.com:8443", 200),
        ("a.internal.example", 200),
        ("internal.example", 403),
        ("evil.example", 403),
    ] {
        let response = http_request_with(addr, "GET", "/stats", &[("Host", host)], b"").await;
        assert_eq!(response.status, status, "{host}: {response:?}");
    }
    // The server's own origin under that name: a page it serves.
    let response = http_request_with(
        addr,
        "GET",
        "/stats",
        &[
            ("Host", "tools.example.com"),
            ("Origin", "https://tools.example.com"),
        ],
        b"",
    )
    .await;
    assert_eq!(response.status, 200, "{response:?}");
}

/// (5, HAIP side) One subject opened sessions until the server had none
/// left. Now each caller holds at most `max_sessions_per_caller` of them;
/// beyond it its WebSocket closes with 1013 and its stream gets `503`
/// naming the setting, while another subject connects and calls at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_subject_holds_only_its_share_of_sessions() {
    one_subject_holds_only_its_share_of_sessions_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_subject_holds_only_its_share_of_sessions_in_an_axum_app() {
    one_subject_holds_only_its_share_of_sessions_at(At::App).await;
}

async fn one_subject_holds_only_its_share_of_sessions_at(at: At) {
    let server = start_at(
        at,
        demo_builder().jwt_hs256(SECRET).limits(Limits {
            max_sessions: 100,
            max_sessions_per_caller: 3,
            ..base_limits()
        }),
    )
    .await;
    let addr = server.addr();
    let (alice, bob) = (token("alice", ""), token("bob", ""));
    let bob_calls = |n: &'static str| {
        let bob = bob.clone();
        async move {
            let mut conn = Conn::connect(Kind::Ws, addr, Some(&bob)).await;
            let done = conn.call_done(n, "echo", json!({"message": "bob"})).await;
            assert_eq!(done["status"], "OK", "{done}");
        }
    };
    let (before, ()) = support::timed(bob_calls("b0")).await;
    let mut held = Vec::new();
    for kind in [Kind::Ws, Kind::Sse, Kind::Stream] {
        held.push(Conn::connect(kind, addr, Some(&alice)).await);
    }
    // Over her share on every transport.
    let mut request = format!("ws://{addr}/haip").into_client_request().unwrap();
    request
        .headers_mut()
        .insert("authorization", format!("Bearer {alice}").parse().unwrap());
    let (mut ws, _) = within("the upgrade", connect_async(request)).await.unwrap();
    match within("the close", ws.next()).await {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 1013);
            assert!(
                frame.reason.contains("max_sessions_per_caller"),
                "{frame:?}"
            );
        }
        other => panic!("expected close 1013, got {other:?}"),
    }
    for kind in [Kind::Sse, Kind::Stream] {
        match Conn::open(kind, addr, Some(&alice)).await {
            Err(Refused::Http(response)) => {
                refused_with(&response, 503, "TOO_MANY_SESSIONS");
                assert!(
                    response.json()["error"]
                        .as_str()
                        .unwrap()
                        .contains("subject \"alice\" already holds 3"),
                    "{response:?}"
                );
                assert!(response.header("retry-after").is_some(), "{response:?}");
            }
            Err(other) => panic!("{other:?}"),
            Ok(_) => panic!("{kind:?}: alice went over her share"),
        }
    }
    // Bob is served at once, on every transport.
    let (during, ()) = support::timed(bob_calls("b00")).await;
    // One row per attack in the report: the standalone server's.
    if at == At::Own {
        support::security_row(
            5,
            "One subject opens sessions until the server has none left (shown with `max_sessions_per_caller: 3`)",
            "beyond its share: `503 TOO_MANY_SESSIONS` naming `max_sessions_per_caller` (WebSocket: close 1013)",
            "another subject's connect and `echo`",
            Some(before),
            Some(during),
        );
    }
    for kind in [Kind::Ws, Kind::Sse, Kind::Stream] {
        let mut conn = Conn::connect(kind, addr, Some(&bob)).await;
        let done = conn
            .call_done("b1", "echo", json!({"message": "bob"}))
            .await;
        assert_eq!(done["status"], "OK", "{kind:?}: {done}");
    }
    // A session that ends gives its place back.
    held.pop();
    support::health_until(addr, "alice's stream to close", |s| {
        s["activeConnections"] == 2
    })
    .await;
    let mut again = Conn::connect(Kind::Ws, addr, Some(&alice)).await;
    let done = again
        .call_done("a1", "echo", json!({"message": "alice"}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
}

/// (8, Low) `/metrics` on the main port answered any valid token, naming
/// tools hidden from it. Now a token that is not shown every tool gets
/// `403` saying how to read them; one shown every tool reads them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_tools_only_to_who_may_see_them_all() {
    metrics_name_tools_only_to_who_may_see_them_all_at(At::Own).await;
}

/// The same, haip nested at the root of `examples/axum_app.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_name_tools_only_to_who_may_see_them_all_in_an_axum_app() {
    metrics_name_tools_only_to_who_may_see_them_all_at(At::App).await;
}

async fn metrics_name_tools_only_to_who_may_see_them_all_at(at: At) {
    let hidden = haip::Tool::builder("payroll")
        .description("Hidden from tokens without payroll:read")
        .scopes(["payroll:read"])
        .handler(|_: Value, _: haip::Context| async { Ok::<_, haip::ToolError>(json!({})) })
        .build()
        .unwrap();
    let server = start_at(
        at,
        support::builder()
            .builtin_tools()
            .tool(hidden)
            .jwt_hs256(SECRET),
    )
    .await;
    let addr = server.addr();
    let bearer = |t: &str| format!("Bearer {t}");
    let narrow = bearer(&token("eve", ""));
    let response = conn::http(addr, "GET", "/metrics", &[("authorization", &narrow)], "").await;
    refused_with(&response, 403, "FORBIDDEN");
    assert!(!response.body.contains("payroll\""), "{response:?}");
    assert!(response.body.contains("metrics_addr"), "{response:?}");
    let wide = bearer(&token("ops", "payroll:read"));
    let response = conn::http(addr, "GET", "/metrics", &[("authorization", &wide)], "").await;
    assert_eq!(response.status, 200, "{response:?}");
    // One row per attack in the report: the standalone server's.
    if at == At::Own {
        support::security_row(
            8,
            "A valid token not allowed to see every tool reads `/metrics` on the main port",
            "`403` saying to use a token shown every tool, or `metrics_addr`",
            "—",
            None,
            None,
        );
    }
}

/// (8, Low) A short HS256 secret can be guessed offline from any token it
/// signed: the server refuses to start with one, saying how long it must be.
#[tokio::test]
async fn short_hs256_secrets_are_refused_at_build() {
    match support::builder().jwt_hs256("hunter2").build() {
        Err(haip::Error::InvalidConfig { setting, reason }) => {
            assert_eq!(setting, "jwt_secret");
            assert!(reason.contains("at least 32"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    support::security_row(
        8,
        "An HS256 secret too short to be secret (`jwt_hs256(\"hunter2\")`)",
        "the server does not build: `jwt_secret` must be at least 32 bytes",
        "—",
        None,
        None,
    );
}
