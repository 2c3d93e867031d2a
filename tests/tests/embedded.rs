//! haip as a tower service (`Server::into_service`) nested in the axum
//! application of `examples/axum_app.rs`, driven through the real wire by
//! haip's own test clients; and `Server::serve` on listeners the caller
//! bound (TCP, a Unix socket), and a prefix on haip's own listener.
//!
//! - Nested at `/agent`: the three HAIP transports list and call tools, the
//!   MCP endpoint serves a session, `/agent/health` answers, the host's own
//!   `/hello` answers, and nothing of haip is at the root.
//! - Stopping the application (haip's handover, then axum's graceful
//!   shutdown) ends every open call with exactly one `TOOL_DONE`, closes
//!   WebSockets with 1001, ends streams, and returns while the clients still
//!   hold their connections; after haip's handover alone the host keeps
//!   serving its routes and haip answers `503 SHUTTING_DOWN`.
//! - OAuth under the prefix: the `401` names the metadata under the prefix,
//!   which is served there and at the root's RFC 9728 path, and tokens must
//!   name the prefixed resource.
//! - Hostile clients against the app with haip at the root: the budgets and
//!   refusals of `hostile.rs`, `hostile_mcp.rs` and `security_origin.rs` that
//!   haip enforces itself (connection-level limits are the host's, and not
//!   tested here).
//! - Each peer address the app hands over (`haip::PeerAddr`) has its own
//!   share of sessions; without it, every caller shares one.
//! - `serve(listener)` on TCP and on a Unix socket; `path_prefix` on haip's
//!   own listener (with OAuth: the metadata under the prefix and at the
//!   root's RFC 9728 path).
//! - What `into_service` and `build` refuse, and a foreign `Host`.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use haip::auth::OAuth;
use haip::{Error, Server};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::conn::{self, Conn, Item, Kind, Refused};
use crate::embedded_support::{bind_then_start, start_embedded};
use crate::mcp_http::mcp_request_to;
use crate::support::{
    self, Client, HttpResponse, QUICKSTART_TOOLS, builder, demo_builder, gated_tool, get_json,
    http_get, http_request_with, within,
};

// ----- helpers ------------------------------------------------------------------------------

/// A HAIP connection of `kind` to the application at `addr`, haip nested at
/// `prefix`.
async fn open(kind: Kind, addr: SocketAddr, prefix: &str) -> Result<Conn, Refused> {
    match kind {
        Kind::Ws => {
            let request = format!("ws://{addr}{prefix}/haip")
                .into_client_request()
                .expect("a valid URL");
            Conn::open_ws(addr, request).await
        }
        Kind::Sse => Conn::open_http(addr, "GET", &format!("{prefix}/haip/sse"), &[], false).await,
        Kind::Stream => {
            let headers = [("content-type", "application/x-ndjson")];
            Conn::open_http(
                addr,
                "POST",
                &format!("{prefix}/haip/stream"),
                &headers,
                true,
            )
            .await
        }
    }
}

/// [`open`], which must succeed.
async fn connect(kind: Kind, addr: SocketAddr, prefix: &str) -> Conn {
    open(kind, addr, prefix)
        .await
        .unwrap_or_else(|refused| panic!("{kind:?} under {prefix:?} refused: {refused:?}"))
}

/// Sends `envelope` on `conn`; SSE's upstream POST goes to
/// `{prefix}/haip/message` (where the nested service is).
async fn send(conn: &mut Conn, prefix: &str, envelope: &Value) {
    if conn.kind == Kind::Sse {
        let session = conn.session.clone();
        let response = conn::post(
            conn.addr,
            &format!("{prefix}/haip/message"),
            conn.token.as_deref(),
            &[("x-haip-session", &session)],
            &envelope.to_string(),
        )
        .await;
        conn::assert_ok(&response);
    } else {
        conn.send(envelope).await;
    }
}

/// Sends a `TOOL_CALL` of `tool` as `call_id` (see [`send`]).
async fn call(conn: &mut Conn, prefix: &str, call_id: &str, tool: &str, params: Value) {
    let envelope = json!({"id": format!("env-{call_id}"), "channel": "USER", "type": "TOOL_CALL",
        "payload": {"call_id": call_id, "tool": tool, "params": params}});
    send(conn, prefix, &envelope).await;
}

/// Proves nothing else is queued on `conn` (see [`Conn::ping_marker`]),
/// under `prefix`.
async fn ping_marker(conn: &mut Conn, prefix: &str, nonce: &str) {
    let ping = json!({"id": format!("ping-{nonce}"), "channel": "SYSTEM", "type": "PING",
        "payload": {"nonce": nonce}});
    send(conn, prefix, &ping).await;
    let pong = conn.recv().await;
    assert_eq!(
        (pong["type"].as_str(), &pong["payload"]),
        (Some("PONG"), &json!({"nonce": nonce})),
        "nothing before the PONG marker"
    );
}

/// After the server's close frame, answers it as a WebSocket client does
/// (tungstenite sends its reply on the next read), and sees the end.
async fn answer_close(client: &mut Client) {
    let after = within("the end after the close", client.ws.next()).await;
    assert!(
        matches!(after, None | Some(Err(_))),
        "nothing after the close: {after:?}"
    );
}

/// The names of a `TOOL_LIST` payload's tools.
fn names(listed: &Value) -> Vec<&str> {
    listed["payload"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("not a tool list: {listed}"))
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default())
        .collect()
}

/// `envelopes` are (after any progress) the call's `CANCELLING`, then its one
/// `TOOL_DONE CANCELLED` for the shutdown, and nothing else.
fn assert_cancelled_by_shutdown(envelopes: &[Value], call_id: &str, kind: Kind) {
    let seen: Vec<(&Value, &Value)> = envelopes
        .iter()
        .map(|e| (&e["type"], &e["payload"]["status"]))
        .skip_while(|(_, status)| *status == "RUNNING")
        .collect();
    assert_eq!(
        seen,
        [
            (&json!("TOOL_UPDATE"), &json!("CANCELLING")),
            (&json!("TOOL_DONE"), &json!("CANCELLED"))
        ],
        "{kind:?}: {envelopes:?}"
    );
    assert_eq!(
        envelopes[envelopes.len() - 1]["payload"],
        json!({"call_id": call_id, "status": "CANCELLED", "result": {"reason": "server shutdown"}}),
        "{kind:?}"
    );
}

/// Opens a connection to `addr` and writes `request` on it; the caller
/// holds the socket.
async fn raw(addr: SocketAddr, request: &[u8]) -> TcpStream {
    let mut stream = within("connecting", TcpStream::connect(addr))
        .await
        .expect("connect");
    stream.write_all(request).await.expect("write the request");
    stream
}

/// Reads one answer from `stream` (after any `100 Continue`): a
/// `Content-Length` body, or one read until the connection closes. `None`
/// when the connection ended before a status line.
async fn read_answer(stream: &mut TcpStream) -> Option<HttpResponse> {
    within("an answer", async {
        let mut raw = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        let head_end = loop {
            if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
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
        let length = headers
            .iter()
            .find(|(n, _)| n == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok());
        let mut body = raw[head_end + 4..].to_vec();
        while length.is_none_or(|l| body.len() < l) {
            let n = stream.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            body.extend_from_slice(&buf[..n]);
        }
        Some(HttpResponse {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    })
    .await
}

/// Waits until the server closes `stream`, discarding what it reads.
async fn closed(stream: &mut TcpStream, what: &str) {
    within(&format!("the server to close {what}"), async {
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// The JSON-RPC error code of an answer's body.
fn rpc_code(answer: &HttpResponse) -> i64 {
    answer.json()["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no JSON-RPC error: {answer:?}"))
}

/// The head of a `POST {path}` with a JSON body, `extra` headers after it.
fn post_head(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> String {
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n"
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head
}

/// A `tools/call` request body.
fn call_body(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
}

/// One `POST /mcp` of `body` (stateless `/mcp`), with `extra` headers.
async fn post_mcp(addr: SocketAddr, body: &str, extra: &[(&str, &str)]) -> HttpResponse {
    let request = format!(
        "{}Content-Length: {}\r\n\r\n{body}",
        post_head(addr, "/mcp", extra),
        body.len()
    );
    let mut stream = raw(addr, request.as_bytes()).await;
    read_answer(&mut stream).await.expect("an answer")
}

/// An ordinary `echo` over `/mcp` is served (the canary).
async fn echo_works(addr: SocketAddr) {
    let answer = post_mcp(
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

fn refused_with(response: &HttpResponse, status: u16, code: &str) {
    assert_eq!(response.status, status, "{response:?}");
    assert_eq!(response.json()["code"], code, "{response:?}");
}

/// A WebSocket upgrade request of `path` with `extra` headers, by the tiny
/// client (which stops at the response).
async fn raw_upgrade(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> HttpResponse {
    let mut headers = vec![
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];
    headers.extend_from_slice(extra);
    http_request_with(addr, "GET", path, &headers, b"").await
}

// ----- 1: nested at a prefix ----------------------------------------------------------------

/// haip nested at `/agent`: each HAIP transport lists the quickstart's tools
/// and calls `echo`; MCP opens a session and calls under the prefix;
/// `/agent/health` and the host's `/hello` answer; haip's paths at the root
/// are the host's (404), and a WebSocket there gets no HAIP session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_at_a_prefix_every_transport_lists_and_calls() {
    let app = start_embedded(demo_builder().inspector(true), "/agent").await;
    let addr = app.addr;
    for kind in [Kind::Ws, Kind::Sse, Kind::Stream] {
        let mut conn = connect(kind, addr, "/agent").await;
        assert_eq!(conn.hai["type"], "HAI", "{kind:?}");
        let list = json!({"id": "l1", "channel": "USER", "type": "TOOL_LIST", "payload": {}});
        send(&mut conn, "/agent", &list).await;
        let listed = conn.recv().await;
        assert_eq!(listed["type"], "TOOL_LIST", "{kind:?}: {listed}");
        assert_eq!(names(&listed), QUICKSTART_TOOLS, "{kind:?}");
        let message = format!("through {kind:?} under /agent");
        call(
            &mut conn,
            "/agent",
            "e1",
            "echo",
            json!({"message": message}),
        )
        .await;
        assert_eq!(
            conn.expect_done("e1").await,
            json!({"call_id": "e1", "status": "OK", "result": {"echoed": message}}),
            "{kind:?}"
        );
        ping_marker(&mut conn, "/agent", "after-echo").await;
        if kind == Kind::Sse {
            // The session's upstream POST at the root is not haip's.
            let session = conn.session.clone();
            let at_root = conn::post(
                addr,
                "/haip/message",
                None,
                &[("x-haip-session", &session)],
                &list.to_string(),
            )
            .await;
            assert_eq!(at_root.status, 404, "{at_root:?}");
            ping_marker(&mut conn, "/agent", "after-root-post").await;
        }
    }
    // MCP under the prefix: a session, then a call in it.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "embedded", "version": "0"}}});
    let init = mcp_request_to(addr, "/agent/mcp", "POST", Some(&initialize), &[]).await;
    assert_eq!(init.status, 200, "{init:?}");
    let session = init
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_else(|| panic!("no MCP session: {init:?}"))
        .to_owned();
    let in_session = [
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = mcp_request_to(addr, "/agent/mcp", "POST", Some(&initialized), &in_session).await;
    assert_eq!(reply.status, 202, "{reply:?}");
    let echo: Value = serde_json::from_str(&call_body(2, "echo", json!({"message": "mcp"})))
        .expect("a JSON body");
    let reply = mcp_request_to(addr, "/agent/mcp", "POST", Some(&echo), &in_session).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(
        reply.response()["result"]["structuredContent"],
        json!({"echoed": "mcp"}),
        "{reply:?}"
    );

    let health = get_json(addr, "/agent/health").await;
    assert_eq!(health["status"], "ok", "{health}");
    let stats = get_json(addr, "/agent/stats").await;
    assert_eq!(stats["toolExecutions"]["successful"], 4, "{stats}");
    let metrics = conn::http(addr, "GET", "/agent/metrics", &[], "").await;
    assert_eq!(metrics.status, 200, "{metrics:?}");
    assert!(metrics.body.contains("haip_"), "{metrics:?}");
    let inspector = http_get(addr, "/agent/inspector").await;
    assert_eq!(inspector.status, 200, "{inspector:?}");
    assert!(
        inspector
            .header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{inspector:?}"
    );
    let hello = http_get(addr, "/hello").await;
    assert_eq!(
        (hello.status, hello.body.as_str()),
        (200, "Hello from the host application\n")
    );
    // haip's routes at the root: the host's 404, not haip's answers.
    for path in ["/health", "/stats", "/haip/sse", "/agentx/health"] {
        let response = http_get(addr, path).await;
        assert_eq!(response.status, 404, "{path}: {response:?}");
    }
    let response = raw_upgrade(addr, "/haip", &[]).await;
    assert_eq!(response.status, 404, "{response:?}");
    let refused = within(
        "a WebSocket at the root",
        connect_async(format!("ws://{addr}/haip")),
    )
    .await;
    assert!(refused.is_err(), "a HAIP session at the root: {refused:?}");
    // The prefix itself is haip's `/`, a WebSocket path as at the root.
    let mut at_prefix = Client::connect(&format!("ws://{addr}/agent")).await;
    let done = at_prefix
        .call_done("p1", "echo", json!({"message": "at the prefix"}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    drop(at_prefix);
    app.stop().await;
}

// ----- 2: graceful shutdown -----------------------------------------------------------------

/// Stopping the application as on SIGTERM while a call runs on each
/// transport (and an idle WebSocket is open): each call gets `CANCELLING`
/// and exactly one `TOOL_DONE CANCELLED`, the tool sees its cancellation,
/// the WebSockets close with 1001, the streams end, and `stop` returns while
/// the clients still hold their connections; then nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_app_ends_every_open_call_once_and_closes_1001() {
    let (gated, mut gate) = gated_tool("gated");
    let app = start_embedded(builder().tool(gated), "/agent").await;
    let addr = app.addr;
    let mut open_calls = Vec::new();
    for (kind, call_id) in [
        (Kind::Ws, "ws-call"),
        (Kind::Sse, "sse-call"),
        (Kind::Stream, "stream-call"),
    ] {
        let mut conn = connect(kind, addr, "/agent").await;
        call(&mut conn, "/agent", call_id, "gated", json!({})).await;
        assert_eq!(gate.started().await, call_id);
        open_calls.push((conn, call_id));
    }
    let mut idle = Client::connect(&app.ws_url()).await;

    let stop = tokio::spawn(async move {
        let started = Instant::now();
        app.stop().await;
        started.elapsed()
    });
    let mut held = Vec::new();
    for (mut conn, call_id) in open_calls {
        let kind = conn.kind;
        let (envelopes, done, end) = conn.read_to_end().await;
        assert_cancelled_by_shutdown(&envelopes, call_id, kind);
        assert!(!done, "no data: [DONE] on {kind:?}");
        let expected = match kind {
            Kind::Ws => Item::Closed(Some((1001, "server shutdown".to_owned()))),
            _ => Item::End,
        };
        assert_eq!(end, expected, "{kind:?}");
        if kind == Kind::Ws {
            // A client answers the close (tungstenite sends its reply on
            // the next read).
            let after = conn.next_item().await;
            assert!(
                matches!(after, Item::End | Item::Failed(_)),
                "nothing after the close: {after:?}"
            );
        }
        // The HTTP connections stay open (the stream's request body too)
        // until the application has stopped.
        held.push(conn);
    }
    assert_eq!(
        idle.expect_close().await,
        (1001, "server shutdown".to_owned())
    );
    answer_close(&mut idle).await;
    let mut cancelled = Vec::new();
    for _ in 0..3 {
        cancelled.push(gate.cancelled().await);
    }
    cancelled.sort_unstable();
    assert_eq!(cancelled, ["sse-call", "stream-call", "ws-call"]);
    let took = within("the application to stop", stop)
        .await
        .expect("stop does not panic");
    // The streams ended with their sessions, not at the end of the grace
    // the service gives a stream that does not end (5 s).
    assert!(took < Duration::from_secs(4), "stop took {took:?}");
    assert_eq!(gate.runs(), 3, "every call ran once");
    assert!(gate.try_started().is_none(), "nothing started after");
    let refused = within("connecting after the stop", TcpStream::connect(addr)).await;
    assert!(refused.is_err(), "the application still listens");
    drop(held);
}

/// After haip's own handover (the host application still running): the
/// host's routes answer, haip's answer `503 SHUTTING_DOWN` (but
/// `/health`), a WebSocket gets no session; stopping the application then
/// (a second handover) returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_haips_handover_the_host_serves_and_haip_answers_503() {
    let app = start_embedded(demo_builder(), "/agent").await;
    let addr = app.addr;
    let mut ws = Client::connect(&app.ws_url()).await;
    let haip = app.haip.clone();
    let handover = tokio::spawn(async move { haip.shutdown().await });
    assert_eq!(
        ws.expect_close().await,
        (1001, "server shutdown".to_owned())
    );
    answer_close(&mut ws).await;
    within("haip's handover", handover)
        .await
        .expect("the handover does not panic");

    for path in ["/agent/stats", "/agent/haip/sse"] {
        let response = http_get(addr, path).await;
        refused_with(&response, 503, "SHUTTING_DOWN");
    }
    let response = http_request_with(
        addr,
        "POST",
        "/agent/mcp",
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        call_body(1, "echo", json!({"message": "late"})).as_bytes(),
    )
    .await;
    assert_eq!(response.status, 503, "{response:?}");
    assert_eq!(rpc_code(&response), -32000, "a JSON-RPC error on /mcp");
    let response = raw_upgrade(addr, "/agent/haip", &[]).await;
    refused_with(&response, 503, "SHUTTING_DOWN");
    let health = get_json(addr, "/agent/health").await;
    assert_eq!(health["status"], "ok", "{health}");
    let hello = http_get(addr, "/hello").await;
    assert_eq!(hello.status, 200, "{hello:?}");
    app.stop().await;
}

// ----- 3: OAuth under the prefix ------------------------------------------------------------

/// The issuer's RSA key (`haip/tests/fixtures/rsa_private.pem`): its private
/// half signs the test's tokens, its public half is the issuer's JWKS.
const RSA_PRIVATE: &[u8] = include_bytes!("../../haip/tests/fixtures/rsa_private.pem");
/// The modulus of that key, base64url (its exponent is 65537, `AQAB`).
const RSA_N: &str = "2nbR-v3DQ_qbhcIhRBulC4SuthgFMYRxcoZUryKOZw9sOYap4ukCkZd-INRfjzo8tGbFxMRniL8RMz2Zn-aMQvSP7njdiNzNWT5TC-14zZCw3NQrRRP0KU7_OBmL2IC4CQcdqHRwstf4oMyej44UMnqDVmiR6ENBGLvZixYs2xq8-ks67cCcK64fxB1biHIS5iDZ9T8cuOrKNXib4W4hv6bxlB8UOdbIQr-ZV9RGcXrSySFv9aj2HYS5xwTZQFA_Xv-R-n-Qiy0Z0NJNgBB6t4mzGNljkqOWOFvwvOFUBTsPI-EmgMBwJiF-vhYp4_0EvXKWQNaKWSg_2QczTsCeQw";

/// An authorization server on loopback: its RFC 8414 metadata and its JWKS.
struct Issuer {
    /// Its issuer identifier, `http://127.0.0.1:<port>`.
    url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Issuer {
    async fn start() -> Issuer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the issuer");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        let issuer = url.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let issuer = issuer.clone();
                tokio::spawn(async move {
                    let service =
                        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
                            let issuer = issuer.clone();
                            async move {
                                let body = match req.uri().path() {
                                    "/.well-known/oauth-authorization-server" => json!({
                                        "issuer": issuer,
                                        "jwks_uri": format!("{issuer}/jwks"),
                                    }),
                                    "/jwks" => json!({"keys": [{"kty": "RSA", "kid": "k1",
                                    "use": "sig", "alg": "RS256", "n": RSA_N, "e": "AQAB"}]}),
                                    _ => Value::Null,
                                };
                                let status = if body.is_null() { 404 } else { 200 };
                                let response = hyper::Response::builder()
                                    .status(status)
                                    .header("content-type", "application/json")
                                    .body(Full::new(Bytes::from(body.to_string())))
                                    .expect("a valid response");
                                Ok::<_, Infallible>(response)
                            }
                        });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Issuer { url, task }
    }

    /// An RS256 token of `sub` for `aud`, valid for five minutes.
    fn token(&self, sub: &str, aud: &str) -> String {
        use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
        let exp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs()
            + 300;
        let claims = json!({"iss": self.url, "sub": sub, "aud": aud, "exp": exp, "scope": ""});
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some("k1".to_owned());
        let key = EncodingKey::from_rsa_pem(RSA_PRIVATE).expect("the fixture key");
        encode(&header, &claims, &key).expect("the token encodes")
    }
}

/// OAuth with haip nested at `/agent` and its resource `http://ADDR/agent/mcp`:
/// a request without a token gets `401` naming the metadata under the
/// prefix; that URL and the root's RFC 9728 path (routed by the app) serve
/// it, naming the resource; a WebSocket without a token is refused naming
/// it too; a token for the resource calls over MCP and HAIP under the
/// prefix, one for the unprefixed `/mcp` is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_under_the_prefix_names_the_prefixed_metadata_and_resource() {
    let issuer = Issuer::start().await;
    let issuer_url = issuer.url.clone();
    let app = bind_then_start("/agent", |addr| {
        demo_builder()
            .tool(support::whoami())
            .mcp_sessions(false)
            .oauth(OAuth::issuer(&issuer_url).resource(format!("http://{addr}/agent/mcp")))
    })
    .await;
    let addr = app.addr;
    let resource = format!("http://{addr}/agent/mcp");
    let metadata_url = format!("http://{addr}/agent/.well-known/oauth-protected-resource/mcp");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});

    let reply = mcp_request_to(addr, "/agent/mcp", "POST", Some(&list), &[]).await;
    assert_eq!(reply.status, 401, "{reply:?}");
    let challenge = reply
        .headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\""),
        "{reply:?}"
    );
    // The metadata, where the challenge says, and where RFC 9728 puts it.
    for path in [
        "/agent/.well-known/oauth-protected-resource/mcp".to_owned(),
        "/.well-known/oauth-protected-resource/agent/mcp".to_owned(),
    ] {
        let metadata = get_json(addr, &path).await;
        assert_eq!(metadata["resource"], json!(resource), "{path}: {metadata}");
        assert_eq!(
            metadata["authorization_servers"],
            json!([issuer.url]),
            "{path}: {metadata}"
        );
    }
    // A WebSocket without a token: ERROR naming the metadata, close 1008.
    match open(Kind::Ws, addr, "/agent").await {
        Err(Refused::Ws { error, end }) => {
            assert_eq!(error["payload"]["code"], "MISSING_TOKEN", "{error}");
            assert_eq!(
                error["payload"]["detail"]["resource_metadata"],
                json!(metadata_url),
                "{error}"
            );
            assert!(
                matches!(end, Item::Closed(Some((1008, _)))),
                "expected close 1008: {end:?}"
            );
        }
        Err(other) => panic!("expected a WebSocket refusal, got {other:?}"),
        Ok(conn) => panic!("a session without a token: {}", conn.hai),
    }

    // A token for the prefixed resource: MCP and HAIP under the prefix.
    let token = issuer.token("embedded-user", &resource);
    let bearer = format!("Bearer {token}");
    let whoami: Value = serde_json::from_str(&call_body(2, "whoami", json!({}))).unwrap();
    let reply = mcp_request_to(
        addr,
        "/agent/mcp",
        "POST",
        Some(&whoami),
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    // `whoami` has no output schema: its result is the text content.
    let text = reply.response()["result"]["content"][0]["text"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no text content: {reply:?}"));
    let result: Value = serde_json::from_str(&text).expect("JSON text");
    assert_eq!(result, json!({"subject": "embedded-user"}), "{reply:?}");
    let mut ws = Client::connect(&format!("ws://{addr}/agent/haip?token={token}")).await;
    let done = ws.call_done("w1", "whoami", json!({})).await;
    assert_eq!(
        done["result"],
        json!({"subject": "embedded-user"}),
        "{done}"
    );

    // A token for the resource without the prefix is another resource's.
    let elsewhere = issuer.token("embedded-user", &format!("http://{addr}/mcp"));
    let reply = mcp_request_to(
        addr,
        "/agent/mcp",
        "POST",
        Some(&whoami),
        &[("authorization", &format!("Bearer {elsewhere}"))],
    )
    .await;
    assert_eq!(reply.status, 401, "{reply:?}");
    let challenge = reply
        .headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(
        challenge,
        format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata_url}\"")
    );
}

/// OAuth with a prefix on haip's own loopback listener: the default
/// resource is `http://ADDR/agent/mcp`, the `401` names the metadata under
/// the prefix, and the listener serves it there and at the root's RFC 9728
/// path (the one route outside the prefix); a token for that resource calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_with_a_prefix_on_haips_own_listener() {
    let issuer = Issuer::start().await;
    let (handle, _) = support::start(
        demo_builder()
            .mcp_sessions(false)
            .path_prefix("/agent")
            .oauth(OAuth::issuer(&issuer.url)),
    )
    .await;
    let addr = handle.local_addr();
    let resource = format!("http://{addr}/agent/mcp");
    let metadata_url = format!("http://{addr}/agent/.well-known/oauth-protected-resource/mcp");
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
    let reply = mcp_request_to(addr, "/agent/mcp", "POST", Some(&list), &[]).await;
    assert_eq!(reply.status, 401, "{reply:?}");
    assert_eq!(
        reply
            .headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some(format!("Bearer resource_metadata=\"{metadata_url}\"").as_str()),
        "{reply:?}"
    );
    for path in [
        "/agent/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource/agent/mcp",
    ] {
        let metadata = get_json(addr, path).await;
        assert_eq!(metadata["resource"], json!(resource), "{path}: {metadata}");
    }
    let bearer = format!("Bearer {}", issuer.token("own-listener", &resource));
    let reply = mcp_request_to(
        addr,
        "/agent/mcp",
        "POST",
        Some(&list),
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(reply.response()["result"]["tools"].is_array(), "{reply:?}");
}

// ----- 4: hostile clients, haip at the root of the app ---------------------------------------

/// Opens a raw `POST /haip/message` with this `Content-Length` and first
/// body bytes; the caller holds the socket.
async fn raw_message_post(addr: SocketAddr, length: &str, first: &[u8]) -> TcpStream {
    let head = format!(
        "POST /haip/message HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
    );
    let mut socket = raw(addr, head.as_bytes()).await;
    socket.write_all(first).await.expect("the first bytes");
    socket
}

/// `hostile.rs` item 2, embedded: a body whose announced length no message
/// may have gets `413` before it is read; of two stalled bodies that
/// together exceed the server-wide body budget one gets `503 Retry-After`
/// at once and the other `408`, as does a trickling one; each connection is
/// closed; an SSE session is unaffected, and an envelope over the message
/// limit in its POST is reported and skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_post_bodies_that_stall_trickle_or_lie_get_408_503_413() {
    let app = start_embedded(
        builder()
            .body_read_timeout(Duration::from_secs(2))
            .max_inflight_body_bytes(1024 * 1024)
            .max_message_bytes(64 * 1024),
        "",
    )
    .await;
    let addr = app.addr;
    let mut stream = Conn::connect(Kind::Sse, addr, None).await;

    let mut liar = raw_message_post(addr, "99999999999999", b"").await;
    let answer = read_answer(&mut liar).await.expect("an answer to the liar");
    assert_eq!(answer.status, 413, "{answer:?}");
    assert_eq!(answer.json()["code"], "MESSAGE_TOO_LARGE", "{answer:?}");
    closed(&mut liar, "the liar's connection").await;

    let stalled = [
        raw_message_post(addr, "600000", b"[").await,
        raw_message_post(addr, "600000", b"[").await,
    ];
    let answers = stalled.map(|mut socket| {
        tokio::spawn(async move {
            let answer = read_answer(&mut socket).await;
            closed(&mut socket, "a stalled POST's connection").await;
            answer
        })
    });
    let mut trickle = raw_message_post(addr, "100", b"{\"type\":").await;
    let answer = read_answer(&mut trickle).await.expect("an answer");
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.json()["code"], "REQUEST_TIMEOUT", "{answer:?}");
    closed(&mut trickle, "the trickling connection").await;
    let mut statuses = Vec::new();
    for answer in answers {
        let answer = within("a stalled POST's answer", answer)
            .await
            .expect("the task")
            .expect("an answer");
        if answer.status == 503 {
            assert_eq!(answer.header("retry-after"), Some("1"), "{answer:?}");
        }
        statuses.push(answer.status);
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [408, 503]);

    conn::assert_ok(
        &stream
            .post(r#"{"type":"PING","payload":{"nonce":"n"}}"#)
            .await,
    );
    assert_eq!(stream.recv().await["payload"], json!({"nonce": "n"}));
    let big = json!({"type": "PING", "payload": {"nonce": "x".repeat(100_000)}});
    let small = json!({"type": "PING", "payload": {"nonce": "after"}});
    conn::assert_ok(&stream.post(&json!([big, small]).to_string()).await);
    let error = stream.recv().await;
    assert_eq!(error["payload"]["code"], "MESSAGE_TOO_LARGE", "{error}");
    assert_eq!(stream.recv().await["payload"], json!({"nonce": "after"}));
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["connectionsClosed"]["bodyTimeout"], 2, "{stats}");
}

/// `hostile.rs` item 3, embedded: 80 000 unknown keys get a short
/// `INVALID_PARAMS` (20 listed, all counted), and a 900 KB value a short
/// one too, while another client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_huge_params_get_a_short_error() {
    let app = start_embedded(demo_builder(), "").await;
    let mut client = Client::connect(&app.ws_url()).await;
    let mut canary = Client::connect(&app.ws_url()).await;
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
    assert!(done.to_string().len() < 2048, "a short reply: {done}");
    client.ping_marker().await;
}

/// `hostile_mcp.rs`, embedded: `/mcp` bodies that stall (nothing after the
/// headers, `100-continue` then nothing, chunked without a chunk, a few
/// bytes) get `408` with JSON-RPC `-32600` and their connection closed,
/// while `echo` is served; a message announced over `max_message_bytes` gets
/// `413` before it is read, and a chunked one once over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_mcp_bodies_that_stall_or_are_too_large_are_refused() {
    let app = start_embedded(
        demo_builder()
            .mcp_sessions(false)
            .body_read_timeout(Duration::from_secs(1)),
        "",
    )
    .await;
    let addr = app.addr;
    let body = call_body(1, "echo", json!({"message": "never whole"}));
    let length = body.len().to_string();
    let head = |extra: &[(&str, &str)]| post_head(addr, "/mcp", extra);
    let cases: [(&str, String, Vec<u8>); 4] = [
        (
            "nothing after the headers",
            format!("{}Content-Length: {length}\r\n\r\n", head(&[])),
            Vec::new(),
        ),
        (
            "100-continue, then nothing",
            format!(
                "{}Content-Length: {length}\r\n\r\n",
                head(&[("Expect", "100-continue")])
            ),
            Vec::new(),
        ),
        (
            "chunked, no chunk",
            format!("{}Transfer-Encoding: chunked\r\n\r\n", head(&[])),
            Vec::new(),
        ),
        (
            "a few bytes, then nothing",
            format!("{}Content-Length: {length}\r\n\r\n", head(&[])),
            body.as_bytes()[..10].to_vec(),
        ),
    ];
    let mut tasks = Vec::new();
    for (what, head, first) in cases {
        tasks.push(tokio::spawn(async move {
            let mut stream = raw(addr, head.as_bytes()).await;
            stream.write_all(&first).await.expect("the first bytes");
            let started = Instant::now();
            let answer = read_answer(&mut stream)
                .await
                .unwrap_or_else(|| panic!("{what}: closed without an answer"));
            (what, answer, started.elapsed(), stream)
        }));
    }
    echo_works(addr).await;
    for task in tasks {
        let (what, answer, took, mut stream) = task.await.expect("the attacker task");
        assert_eq!(answer.status, 408, "{what}: {answer:?}");
        assert_eq!(rpc_code(&answer), -32600, "{what}");
        assert_eq!(answer.header("connection"), Some("close"), "{what}");
        assert!(took < Duration::from_secs(5), "{what}: after {took:?}");
        closed(&mut stream, what).await;
    }

    // 10 MiB announced, none sent: 413 at once, naming the limit.
    let request = format!("{}Content-Length: 10485760\r\n\r\n", head(&[]));
    let mut stream = raw(addr, request.as_bytes()).await;
    let answer = read_answer(&mut stream).await.expect("an answer");
    assert_eq!(answer.status, 413, "{answer:?}");
    assert_eq!(rpc_code(&answer), -32600);
    assert!(
        answer.body.contains("1048576"),
        "names the limit: {answer:?}"
    );
    closed(&mut stream, "the 413's connection").await;
    // Chunked, exactly the limit then one byte more.
    let chunk = format!("{:x}\r\n{}\r\n", 256 * 1024, "0".repeat(256 * 1024));
    let mut request = format!("{}Transfer-Encoding: chunked\r\n\r\n", head(&[]));
    request.push_str(&chunk.repeat(4));
    request.push_str("1\r\n0\r\n");
    let mut stream = raw(addr, request.as_bytes()).await;
    let answer = read_answer(&mut stream).await.expect("an answer");
    assert_eq!(answer.status, 413, "{answer:?}");
    echo_works(addr).await;
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["connectionsClosed"]["bodyTimeout"], 4, "{stats}");
}

/// `hostile_mcp.rs`, embedded: what is not a JSON-RPC request gets its
/// JSON-RPC error with the documented status, short; a non-JSON type gets
/// `415`; foreign origins get `403` before anything runs; nothing but the
/// canaries reached a tool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_bad_mcp_requests_get_their_json_rpc_errors() {
    let app = start_embedded(
        demo_builder()
            .mcp_sessions(false)
            .cors_allowed_origins(["https://app.example"]),
        "",
    )
    .await;
    let addr = app.addr;
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
        (call_body(1, "echo", json!([1, 2])), 200, -32602),
        (long_method, 200, -32601),
    ];
    for (body, status, code) in &cases {
        let answer = post_mcp(addr, body, &[]).await;
        let what = &body[..body.len().min(80)];
        assert_eq!(answer.status, *status, "{what}: {answer:?}");
        assert_eq!(rpc_code(&answer), *code, "{what}");
        assert!(answer.body.len() < 400, "{what}: {answer:?}");
    }
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: text/plain\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    let mut stream = raw(addr, request.as_bytes()).await;
    let answer = read_answer(&mut stream).await.expect("an answer");
    assert_eq!(answer.status, 415, "{answer:?}");
    assert_eq!(rpc_code(&answer), -32600);

    let echo = call_body(1, "echo", json!({"message": "hi"}));
    for origin in [
        "http://evil.example",
        "null",
        "http://127.0.0.1.evil.example",
    ] {
        let answer = post_mcp(addr, &echo, &[("Origin", origin)]).await;
        assert_eq!(answer.status, 403, "{origin}: {answer:?}");
        assert_eq!(rpc_code(&answer), -32600, "{origin}");
    }
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["toolExecutions"]["total"], 0, "nothing ran: {stats}");
    for origin in ["https://app.example", "http://localhost:6274"] {
        let answer = post_mcp(addr, &echo, &[("Origin", origin)]).await;
        assert_eq!(answer.status, 200, "{origin}: {answer:?}");
    }
    echo_works(addr).await;
    let stats = get_json(addr, "/stats").await;
    assert_eq!(stats["toolExecutions"]["total"], 3, "{stats}");
}

/// `security_origin.rs`, embedded: a foreign page's WebSocket gets `403
/// ORIGIN_NOT_ALLOWED` (the real client: no socket); `text/plain` and
/// untyped POSTs get `415` and plant nothing in another client's SSE
/// session; a rebound name gets `403 HOST_NOT_ALLOWED` on every route but
/// `/health`; only the local client's calls ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_browser_rules_refuse_foreign_pages_and_names() {
    let app = start_embedded(demo_builder(), "").await;
    let addr = app.addr;
    let mut local = Client::connect(&app.ws_url()).await;
    let done = local.call_done("l1", "echo", json!({"message": "1"})).await;
    assert_eq!(done["status"], "OK");

    for path in ["/haip", "/"] {
        let refused = raw_upgrade(addr, path, &[("Origin", "https://evil.example")]).await;
        refused_with(&refused, 403, "ORIGIN_NOT_ALLOWED");
    }
    let mut request = app.ws_url().into_client_request().unwrap();
    request
        .headers_mut()
        .insert("origin", "https://evil.example".parse().unwrap());
    assert!(
        within("a refused upgrade", connect_async(request))
            .await
            .is_err(),
        "a foreign origin opened a WebSocket"
    );

    let planted = json!({"id": "e1", "type": "TOOL_CALL", "channel": "USER",
        "payload": {"call_id": "planted", "tool": "echo", "params": {"message": "pwned"}}})
    .to_string();
    let mut victim = Conn::connect(Kind::Sse, addr, None).await;
    let session = victim.session.clone();
    for content_type in [Some("text/plain;charset=UTF-8"), None] {
        let mut headers = vec![("x-haip-session", session.as_str())];
        headers.extend(content_type.map(|t| ("content-type", t)));
        for path in ["/haip/message", "/haip/stream"] {
            let response = conn::http(addr, "POST", path, &headers, &planted).await;
            refused_with(&response, 415, "UNSUPPORTED_MEDIA_TYPE");
        }
    }
    victim.ping_marker().await;

    let host = format!("evil.example:{}", addr.port());
    let origin = format!("http://{host}");
    let rebound = [("Host", host.as_str()), ("Origin", origin.as_str())];
    for path in ["/stats", "/metrics", "/haip/sse"] {
        let response = http_request_with(addr, "GET", path, &rebound, b"").await;
        refused_with(&response, 403, "HOST_NOT_ALLOWED");
    }
    let response = raw_upgrade(addr, "/haip", &[("Host", &host)]).await;
    refused_with(&response, 403, "HOST_NOT_ALLOWED");
    let response = http_request_with(
        addr,
        "POST",
        "/mcp",
        &[
            ("Host", host.as_str()),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        call_body(1, "echo", json!({"message": "rebound"})).as_bytes(),
    )
    .await;
    assert_eq!(response.status, 403, "{response:?}");
    assert_eq!(rpc_code(&response), -32600, "{response:?}");
    let response = http_request_with(addr, "GET", "/health", &rebound, b"").await;
    assert_eq!(response.status, 200, "{response:?}");

    let done = local.call_done("l2", "echo", json!({"message": "2"})).await;
    assert_eq!(done["status"], "OK");
    let stats = get_json(addr, "/stats").await;
    assert_eq!(
        stats["toolExecutions"]["total"], 2,
        "only the local calls: {stats}"
    );
}

/// Opens `GET /haip/sse` to `addr` from the local address `from`, and
/// reads the answer's head; returns its status and the socket (which holds
/// the session when `200`).
async fn sse_from(from: IpAddr, addr: SocketAddr) -> (u16, TcpStream) {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(from, 0))
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    let mut stream = within("connecting", socket.connect(addr))
        .await
        .expect("connect");
    let request = format!("GET /haip/sse HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("write the request");
    let head = within("the answer's head", async {
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).await.expect("read the head");
            assert!(n > 0, "closed before the head: {head:?}");
            head.push(byte[0]);
        }
        String::from_utf8_lossy(&head).into_owned()
    })
    .await;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, stream)
}

/// The app hands haip each request's peer address (`haip::PeerAddr`), so
/// each unauthenticated peer has its own share of sessions
/// (`max_sessions_per_caller`): beyond it one peer gets `503
/// TOO_MANY_SESSIONS` while another (`127.0.0.2`) is served. The same
/// service in a router that hands over no address counts every caller as
/// one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_peer_the_app_hands_over_has_its_own_share() {
    let (one, two) = (
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
    );
    let shared = || {
        builder()
            .max_sessions_per_caller(2)
            .limit_loopback_peers(true)
    };
    let app = start_embedded(shared(), "").await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let (status, socket) = sse_from(one, app.addr).await;
        assert_eq!(status, 200);
        held.push(socket);
    }
    let response = http_get(app.addr, "/haip/sse").await;
    refused_with(&response, 503, "TOO_MANY_SESSIONS");
    let (status, socket) = sse_from(two, app.addr).await;
    assert_eq!(status, 200, "another peer has a share of its own");
    held.push(socket);

    // No `PeerAddr`: one share for every caller.
    let service = within(
        "into_service",
        shared().build().expect("valid settings").into_service(),
    )
    .await
    .expect("the service");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("an address");
    let router = axum::Router::new().fallback_service(service);
    let served = tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    for _ in 0..2 {
        let (status, socket) = sse_from(one, addr).await;
        assert_eq!(status, 200);
        held.push(socket);
    }
    let (status, _) = sse_from(two, addr).await;
    assert_eq!(status, 503, "without PeerAddr, peers share one share");
    served.abort();
}

// ----- 5: serve(listener), and a prefix on haip's own listener --------------------------------

/// `serve` on a `TcpListener` the caller bound: the handle's address is the
/// listener's, a call works, and after shutdown nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_tcp_listener_the_caller_bound() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let bound = listener.local_addr().expect("an address");
    let server = demo_builder().build().expect("a valid server");
    let handle = within("serve", server.serve(listener))
        .await
        .expect("serves");
    assert_eq!(handle.local_addr(), bound);
    assert_eq!(handle.tcp_addr(), Some(bound));
    let mut client = Client::connect(&format!("ws://{bound}/haip")).await;
    let done = client
        .call_done("e1", "echo", json!({"message": "bound"}))
        .await;
    assert_eq!(done["result"], json!({"echoed": "bound"}), "{done}");
    assert_eq!(get_json(bound, "/health").await["status"], "ok");
    let shutdown = tokio::spawn(async move { handle.shutdown().await });
    assert_eq!(client.expect_close().await.0, 1001);
    answer_close(&mut client).await;
    within("shutdown", shutdown)
        .await
        .expect("shutdown does not panic");
    let refused = within("connecting after shutdown", TcpStream::connect(bound)).await;
    assert!(refused.is_err(), "still listening after shutdown");
}

/// A Unix socket path in the temp dir, unique to this process and `name`.
fn socket_path(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("haip-{}-{name}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// Sends one request over a fresh connection to the Unix socket `path`;
/// returns the response with its body streaming, and the connection task.
async fn unix_request(
    path: &Path,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: UnsyncBoxBody<Bytes, Infallible>,
) -> (hyper::Response<Incoming>, tokio::task::JoinHandle<()>) {
    within(&format!("{method} {uri} over the Unix socket"), async {
        let stream = tokio::net::UnixStream::connect(path)
            .await
            .expect("connect to the Unix socket");
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .expect("HTTP/1.1 handshake");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "localhost");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = sender
            .send_request(request.body(body).expect("a valid request"))
            .await
            .expect("an answer");
        (response, task)
    })
    .await
}

/// Reads NDJSON lines of a streaming body until one satisfies `pred`.
async fn next_line_until(
    body: &mut Incoming,
    buf: &mut Vec<u8>,
    mut pred: impl FnMut(&Value) -> bool,
) -> Value {
    within("an NDJSON line", async {
        loop {
            while let Some(end) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let env: Value = serde_json::from_slice(&line[..end]).expect("a JSON line");
                if pred(&env) {
                    return env;
                }
            }
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        buf.extend_from_slice(&data);
                    }
                }
                other => panic!("the stream ended: {other:?}"),
            }
        }
    })
    .await
}

/// `serve` on a Unix socket: no TCP address (`local_addr` panics,
/// `tcp_addr` is `None`), `/health` answers, an HTTP-streaming session gets
/// its `HAI` and a call's `TOOL_DONE`, and after shutdown nothing accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_a_unix_socket() {
    let path = socket_path("serve");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind the Unix socket");
    let server = demo_builder().build().expect("a valid server");
    let handle = within("serve", server.serve(listener))
        .await
        .expect("serves");
    assert_eq!(handle.tcp_addr(), None);
    let probe = handle.clone();
    let panicked =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || probe.local_addr()));
    assert!(panicked.is_err(), "local_addr without a TCP listener");

    let (response, task) = unix_request(
        &path,
        "GET",
        "/health",
        &[],
        Full::new(Bytes::new()).boxed_unsync(),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = within("the body", response.into_body().collect())
        .await
        .expect("the body")
        .to_bytes();
    let health: Value = serde_json::from_slice(&body).expect("JSON");
    assert_eq!(health["status"], "ok", "{health}");
    task.abort();

    let (tx, mut rx) = mpsc::unbounded_channel::<Result<Frame<Bytes>, Infallible>>();
    let upstream = StreamBody::new(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)));
    let (response, task) = unix_request(
        &path,
        "POST",
        "/haip/stream",
        &[("content-type", "application/x-ndjson")],
        upstream.boxed_unsync(),
    )
    .await;
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut buf = Vec::new();
    let hai = next_line_until(&mut body, &mut buf, |_| true).await;
    assert_eq!(hai["type"], "HAI", "{hai}");
    let line = json!({"id": "c1", "channel": "USER", "type": "TOOL_CALL",
        "payload": {"call_id": "u1", "tool": "echo", "params": {"message": "unix"}}});
    tx.send(Ok(Frame::data(Bytes::from(format!("{line}\n")))))
        .expect("the request body is open");
    let done = next_line_until(&mut body, &mut buf, |e| e["type"] == "TOOL_DONE").await;
    assert_eq!(
        done["payload"],
        json!({"call_id": "u1", "status": "OK", "result": {"echoed": "unix"}})
    );
    within("shutdown", handle.shutdown()).await;
    task.abort();
    let refused = within(
        "connecting after shutdown",
        tokio::net::UnixStream::connect(&path),
    )
    .await;
    assert!(refused.is_err(), "still accepting after shutdown");
    let _ = std::fs::remove_file(&path);
}

/// `path_prefix` on haip's own listener: the routes are under the prefix
/// only (`/agent/health`, `ws://…/agent/haip`); at the root haip answers
/// `404`, and a WebSocket gets no session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefix_on_haips_own_listener_serves_only_under_it() {
    let (handle, _) = support::start(demo_builder().path_prefix("/agent")).await;
    let addr = handle.local_addr();
    assert_eq!(get_json(addr, "/agent/health").await["status"], "ok");
    for path in ["/health", "/stats", "/agentx/health", "/haip/sse"] {
        let response = http_get(addr, path).await;
        refused_with(&response, 404, "NOT_FOUND");
    }
    let mut client = Client::connect(&format!("ws://{addr}/agent/haip")).await;
    let done = client
        .call_done("e1", "echo", json!({"message": "prefixed"}))
        .await;
    assert_eq!(done["status"], "OK", "{done}");
    let mut sse = connect(Kind::Sse, addr, "/agent").await;
    call(&mut sse, "/agent", "s1", "echo", json!({"message": "sse"})).await;
    assert_eq!(sse.expect_done("s1").await["status"], "OK");
    let refused = within(
        "a WebSocket at the root",
        connect_async(format!("ws://{addr}/haip")),
    )
    .await;
    assert!(refused.is_err(), "a HAIP session at the root: {refused:?}");
}

// ----- 6: what into_service and build refuse ------------------------------------------------

const SECRET: &str = "a secret for the embedded tests, 32+ bytes long";

/// `into_service` with `allowed_hosts` naming a public name and no
/// authentication is refused (`UnauthenticatedBind`); with authentication
/// it serves that name, and not another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn into_service_refuses_public_hosts_without_authentication() {
    let server = builder()
        .allowed_hosts(["tools.example.com"])
        .build()
        .expect("the settings are valid");
    match within("into_service", server.into_service()).await {
        Err(Error::UnauthenticatedBind { addr }) => {
            assert!(addr.contains("tools.example.com"), "{addr}");
        }
        other => panic!("expected UnauthenticatedBind, got {other:?}"),
    }

    let server = builder()
        .allowed_hosts(["*"])
        .build()
        .expect("the settings are valid");
    let refused = within("into_service", server.into_service()).await;
    assert!(
        matches!(refused, Err(Error::UnauthenticatedBind { .. })),
        "any host without authentication: {refused:?}"
    );
    // Loopback names only: nothing to refuse.
    let server = builder()
        .allowed_hosts(["localhost", "127.0.0.1"])
        .build()
        .expect("the settings are valid");
    let service = within("into_service", server.into_service()).await;
    assert!(service.is_ok(), "loopback names only: {service:?}");
    // OAuth embedded needs its resource: the server cannot know its URL.
    let server = builder()
        .oauth(OAuth::issuer("http://127.0.0.1:9"))
        .build()
        .expect("the settings are valid");
    match within("into_service", server.into_service()).await {
        Err(Error::InvalidConfig { setting, .. }) => assert_eq!(setting, "oauth_resource"),
        other => panic!("expected InvalidConfig oauth_resource, got {other:?}"),
    }

    let app = start_embedded(
        demo_builder()
            .jwt_hs256(SECRET)
            .allowed_hosts(["tools.example.com"]),
        "/agent",
    )
    .await;
    let addr = app.addr;
    let bearer = format!("Bearer {}", support::hs256_token(SECRET, "ada", None));
    let response = http_request_with(
        addr,
        "GET",
        "/agent/stats",
        &[("Host", "tools.example.com"), ("authorization", &bearer)],
        b"",
    )
    .await;
    assert_eq!(response.status, 200, "{response:?}");
    let response = http_request_with(
        addr,
        "GET",
        "/agent/stats",
        &[("Host", "tools.example.com")],
        b"",
    )
    .await;
    refused_with(&response, 401, "MISSING_TOKEN");
    let response = http_request_with(
        addr,
        "GET",
        "/agent/stats",
        &[("Host", "evil.example"), ("authorization", &bearer)],
        b"",
    )
    .await;
    refused_with(&response, 403, "HOST_NOT_ALLOWED");
}

/// A prefix that does not start with `/`, or ends with one, is refused by
/// `build` naming `path_prefix`; `""` and `"/agent"` are fine.
#[test]
fn build_refuses_a_malformed_prefix() {
    for prefix in ["agent", "/agent/", "/", "/a?b", "/a*"] {
        match Server::builder().path_prefix(prefix).build() {
            Err(Error::InvalidConfig { setting, reason }) => {
                assert_eq!(setting, "path_prefix", "{prefix:?}: {reason}");
            }
            Err(other) => panic!("{prefix:?}: expected InvalidConfig, got {other}"),
            Ok(_) => panic!("{prefix:?} was accepted"),
        }
    }
    for prefix in ["", "/agent", "/a/b"] {
        assert!(
            Server::builder().path_prefix(prefix).build().is_ok(),
            "{prefix:?} refused"
        );
    }
}

/// Embedded, a request naming a host that is not a loopback name gets `403
/// HOST_NOT_ALLOWED` (the server does not know the host's address), on
/// plain routes, SSE, WebSocket upgrades and `/mcp`; `/health` answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_request_for_a_foreign_host_is_refused() {
    let app = start_embedded(demo_builder(), "/agent").await;
    let addr = app.addr;
    let evil = [("Host", "evil.example")];
    for path in ["/agent/stats", "/agent/haip/sse"] {
        let response = http_request_with(addr, "GET", path, &evil, b"").await;
        refused_with(&response, 403, "HOST_NOT_ALLOWED");
        assert!(response.body.contains("allowed_hosts"), "{response:?}");
    }
    let response = raw_upgrade(addr, "/agent/haip", &evil).await;
    refused_with(&response, 403, "HOST_NOT_ALLOWED");
    let response = http_request_with(
        addr,
        "POST",
        "/agent/mcp",
        &[
            ("Host", "evil.example"),
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
        ],
        call_body(1, "echo", json!({"message": "x"})).as_bytes(),
    )
    .await;
    assert_eq!(response.status, 403, "{response:?}");
    let response = http_request_with(addr, "GET", "/agent/health", &evil, b"").await;
    assert_eq!(response.status, 200, "{response:?}");
    // Loopback names are served.
    for host in [addr.to_string(), format!("localhost:{}", addr.port())] {
        let response =
            http_request_with(addr, "GET", "/agent/stats", &[("Host", &host)], b"").await;
        assert_eq!(response.status, 200, "{host}: {response:?}");
    }
}
