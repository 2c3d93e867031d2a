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
//! - Hostile clients and the browser rules run elsewhere: `hostile.rs`,
//!   `hostile_mcp.rs` and `security_origin.rs` run their tests against
//!   haip's own listener and again (`…_in_an_axum_app`) against this app
//!   with haip at its root (`embedded_support::start_at`), with the same
//!   budgets; what only haip's own listener enforces (connections per peer,
//!   closing a connection whose client stops reading) is tested there
//!   against it alone.
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
use haip::{Error, Limits, Server};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::conn::{self, Conn, Item, Kind, Refused};
use crate::embedded_support::{bind_then_start, start_embedded};
use crate::mcp_http::mcp_request_to;
use crate::support::{
    self, Client, HttpResponse, QUICKSTART_TOOLS, base_limits, builder, demo_builder, gated_tool,
    get_json, http_get, http_request_with, within,
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

/// The JSON-RPC error code of an answer's body.
fn rpc_code(answer: &HttpResponse) -> i64 {
    answer.json()["error"]["code"]
        .as_i64()
        .unwrap_or_else(|| panic!("no JSON-RPC error: {answer:?}"))
}

/// A `tools/call` request body.
fn call_body(id: u64, tool: &str, arguments: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": arguments}})
    .to_string()
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

// ----- 4: each peer's share ----------------------------------------------------------------

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
            .limits(Limits {
                max_sessions_per_caller: 2,
                ..base_limits()
            })
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
) -> (hyper::Response<Incoming>, AbortHandle) {
    let stream = within(
        "connecting to the Unix socket",
        tokio::net::UnixStream::connect(path),
    )
    .await
    .expect("connect to the Unix socket");
    conn::send_request_on(stream, "localhost", method, uri, headers, body).await
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
