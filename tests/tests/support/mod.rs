//! Shared helpers for the end-to-end tests: server start-up, a real-wire HAIP
//! client over WebSocket that checks every envelope it receives against the
//! outbound rules of docs/protocol.md §2.4, a raw HTTP/1.1 GET for `/health` and
//! `/stats`, and tools whose timing the test controls.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use haip::{Context, Limits, Server, ServerBuilder, ServerHandle, Tool, ToolError};
use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Semaphore, mpsc};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Response;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};

/// How long any single wait may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(10);

/// The client side of one WebSocket connection.
pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// The 22 HAIP 1 event types, in the order the server's `HAI` lists them (§3.1).
pub(crate) const ALL_EVENTS: [&str; 22] = [
    "HAI",
    "RUN_STARTED",
    "RUN_FINISHED",
    "RUN_CANCEL",
    "RUN_ERROR",
    "PING",
    "PONG",
    "REPLAY_REQUEST",
    "TEXT_MESSAGE_START",
    "TEXT_MESSAGE_PART",
    "TEXT_MESSAGE_END",
    "AUDIO_CHUNK",
    "TOOL_CALL",
    "TOOL_UPDATE",
    "TOOL_DONE",
    "TOOL_CANCEL",
    "TOOL_LIST",
    "TOOL_SCHEMA",
    "ERROR",
    "FLOW_UPDATE",
    "PAUSE_CHANNEL",
    "RESUME_CHANNEL",
];

/// The five standard channels, the only ones the server sends on (§4).
pub(crate) const CHANNELS: [&str; 5] = ["USER", "AGENT", "SYSTEM", "AUDIO_IN", "AUDIO_OUT"];

/// Awaits `fut`, failing the test with a clear message after [`WAIT`].
pub(crate) async fn within<F: Future>(what: &str, fut: F) -> F::Output {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(out) => out,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// The limits of [`builder`]: the defaults with the heartbeat off, so no
/// server `PING` interleaves with replies. A test that sets limits starts
/// from these: `Limits { max_sessions: 1, ..base_limits() }`.
pub(crate) fn base_limits() -> Limits {
    Limits {
        heartbeat_interval: Duration::ZERO,
        ..Limits::default()
    }
}

/// A builder with the heartbeat off, so no server `PING` interleaves with replies.
pub(crate) fn builder() -> ServerBuilder {
    Server::builder().limits(base_limits())
}

/// The quickstart's tools, in the order [`demo_builder`] serves them.
pub(crate) const QUICKSTART_TOOLS: [&str; 7] = [
    "echo",
    "add",
    "weather",
    "calculator",
    "process_file",
    "create_user",
    "book_table",
];

/// [`builder`] serving the quickstart's tools: the built-ins, then the demo tools.
pub(crate) fn demo_builder() -> ServerBuilder {
    builder()
        .builtin_tools()
        .tools(haip_examples::demo::tools())
}

/// Builds and starts the server on `127.0.0.1:0`; returns its handle and its
/// WebSocket URL (`ws://ADDR/haip`).
pub(crate) async fn start(builder: ServerBuilder) -> (ServerHandle, String) {
    let server = builder
        .addr("127.0.0.1:0")
        .build()
        .expect("the test server configuration is valid");
    let handle = within("the server to start", server.start())
        .await
        .expect("the test server starts");
    let url = format!("ws://{}/haip", handle.local_addr());
    (handle, url)
}

/// The `HAI` payload of docs/protocol.md §3.1 with the default settings, on WebSocket.
pub(crate) fn expected_hai_payload() -> Value {
    json!({
        "haip_version": "1.1.2",
        "accept_major": [1],
        "accept_events": ALL_EVENTS,
        "capabilities": {
            "binary_frames": true,
            "flow_control": {"initial_credit_messages": 1000, "initial_credit_bytes": 1_048_576},
            "max_concurrent_runs": 10,
            "signed_envelopes": false
        }
    })
}

/// Whether `s` is a lower-case hyphenated UUID v4.
pub(crate) fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
        && b[14] == b'4'
        && matches!(b[19], b'8' | b'9' | b'a' | b'b')
}

fn is_decimal(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

/// Checks one outbound envelope against docs/protocol.md §2.1/§2.4: all seven fields
/// with the right types, a UUID v4 `id`, decimal `seq`/`ts`, a standard channel,
/// one of the 22 types, an object payload, and no key the server never sends.
pub(crate) fn check_envelope(env: &Value) {
    let obj = env
        .as_object()
        .unwrap_or_else(|| panic!("envelope is not a JSON object: {env}"));
    for key in ["id", "session", "seq", "ts", "channel", "type"] {
        assert!(
            obj.get(key).is_some_and(Value::is_string),
            "envelope field `{key}` missing or not a string: {env}"
        );
    }
    assert!(
        obj.get("payload").is_some_and(Value::is_object),
        "envelope payload missing or not an object: {env}"
    );
    let allowed = [
        "id",
        "session",
        "seq",
        "ts",
        "channel",
        "type",
        "payload",
        "run_id",
        "thread_id",
        "bin_len",
        "bin_mime",
    ];
    for key in obj.keys() {
        assert!(
            allowed.contains(&key.as_str()),
            "envelope carries a key the server never sends (`{key}`): {env}"
        );
    }
    assert!(
        is_uuid_v4(env["id"].as_str().unwrap_or_default()),
        "envelope id is not a lower-case UUID v4: {env}"
    );
    assert!(
        is_uuid_v4(env["session"].as_str().unwrap_or_default()),
        "envelope session is not a UUID: {env}"
    );
    assert!(
        is_decimal(env["seq"].as_str().unwrap_or_default()),
        "seq is not decimal: {env}"
    );
    assert!(
        is_decimal(env["ts"].as_str().unwrap_or_default()),
        "ts is not decimal milliseconds: {env}"
    );
    let channel = env["channel"].as_str().unwrap_or_default();
    assert!(
        CHANNELS.contains(&channel),
        "non-standard channel {channel}: {env}"
    );
    let ty = env["type"].as_str().unwrap_or_default();
    assert!(ALL_EVENTS.contains(&ty), "unknown type {ty}: {env}");
}

/// What ended a connection, as the client saw it.
#[derive(Debug)]
pub(crate) enum Ended {
    /// A close frame with this code and reason.
    Closed(Option<(u16, String)>),
    /// The stream ended (or failed) without a close frame.
    Dropped(String),
}

/// A HAIP client on one WebSocket connection. It reads the server's `HAI` on
/// connect, and checks every envelope it receives: the §2.4 shape, the session
/// id, and `seq` exactly one above the previous one (no gaps, from `"1"`).
pub(crate) struct Client {
    /// The WebSocket (for tests that need raw frames).
    pub(crate) ws: Ws,
    /// The server's `HAI` envelope.
    pub(crate) hai: Value,
    /// The session id the `HAI` announced.
    pub(crate) session: String,
    last_seq: u64,
    next_id: u64,
    /// Relaxed mode (see [`Client::relax`]): only the §2.4 shape is checked.
    relaxed: bool,
}

impl Client {
    /// Connects to `url` and reads the server's first envelope, which must be its `HAI`.
    pub(crate) async fn connect(url: &str) -> Client {
        Client::connect_with(url).await.0
    }

    /// [`Client::connect`] with a custom upgrade request; also returns the
    /// upgrade response.
    pub(crate) async fn connect_with(
        request: impl IntoClientRequest + Unpin,
    ) -> (Client, Response) {
        let (ws, response) = within("connecting", connect_async(request))
            .await
            .unwrap_or_else(|e| panic!("connecting failed: {e}"));
        let mut client = Client {
            ws,
            hai: Value::Null,
            session: String::new(),
            last_seq: 0,
            next_id: 0,
            relaxed: false,
        };
        let hai = client.recv().await;
        assert_eq!(
            hai["type"], "HAI",
            "the first envelope must be the server's HAI: {hai}"
        );
        client.hai = hai;
        (client, response)
    }

    /// A fresh request id (`req-1`, `req-2`, ...).
    pub(crate) fn next_id(&mut self) -> String {
        self.next_id += 1;
        format!("req-{}", self.next_id)
    }

    /// The `seq` of the last envelope received.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Sends one text message.
    pub(crate) async fn send_text(&mut self, text: &str) {
        within("sending a message", self.ws.send(Message::text(text)))
            .await
            .expect("sending a WebSocket message");
    }

    /// Sends one JSON value as a text message.
    pub(crate) async fn send(&mut self, value: &Value) {
        self.send_text(&value.to_string()).await;
    }

    /// Sends an envelope `{"id","channel","type","payload"}` and returns its id.
    pub(crate) async fn request(&mut self, ty: &str, payload: Value) -> String {
        let id = self.next_id();
        let channel = if ty.starts_with("TOOL_") {
            "USER"
        } else {
            "SYSTEM"
        };
        self.send(&json!({"id": id, "channel": channel, "type": ty, "payload": payload}))
            .await;
        id
    }

    /// Sends a `TOOL_CALL`; returns the envelope id.
    pub(crate) async fn call(&mut self, call_id: &str, tool: &str, params: Value) -> String {
        self.request(
            "TOOL_CALL",
            json!({"call_id": call_id, "tool": tool, "params": params}),
        )
        .await
    }

    /// Calls a tool that finishes without updates and returns its `TOOL_DONE`
    /// payload (the next envelope must be that `TOOL_DONE`).
    pub(crate) async fn call_done(&mut self, call_id: &str, tool: &str, params: Value) -> Value {
        self.call(call_id, tool, params).await;
        self.expect_done(call_id).await
    }

    /// The next envelope must be the `TOOL_DONE` of `call_id`; returns its payload.
    pub(crate) async fn expect_done(&mut self, call_id: &str) -> Value {
        let env = self.recv().await;
        assert_eq!(env["type"], "TOOL_DONE", "expected TOOL_DONE, got {env}");
        assert_eq!(env["channel"], "AGENT", "TOOL_DONE goes on AGENT: {env}");
        assert_eq!(env["payload"]["call_id"], call_id, "wrong call: {env}");
        env["payload"].clone()
    }

    /// The next envelope must be a `TOOL_UPDATE` of `call_id`; returns its payload.
    pub(crate) async fn expect_update(&mut self, call_id: &str) -> Value {
        let env = self.recv().await;
        assert_eq!(
            env["type"], "TOOL_UPDATE",
            "expected TOOL_UPDATE, got {env}"
        );
        assert_eq!(env["channel"], "AGENT", "TOOL_UPDATE goes on AGENT: {env}");
        assert_eq!(env["payload"]["call_id"], call_id, "wrong call: {env}");
        env["payload"].clone()
    }

    /// The next envelope must be an `ERROR` on SYSTEM; returns the whole envelope.
    pub(crate) async fn expect_error(&mut self) -> Value {
        let env = self.recv().await;
        assert_eq!(env["type"], "ERROR", "expected ERROR, got {env}");
        assert_eq!(env["channel"], "SYSTEM", "ERROR goes on SYSTEM: {env}");
        env
    }

    /// Proves that nothing else is queued for this client: sends a `PING` with a
    /// fresh nonce and requires the very next envelope to be its `PONG`.
    pub(crate) async fn ping_marker(&mut self) {
        let nonce = format!("marker-{}", self.next_id + 1);
        self.request("PING", json!({ "nonce": nonce })).await;
        let env = self.recv().await;
        assert_eq!(
            (env["type"].as_str(), &env["payload"]),
            (Some("PONG"), &json!({ "nonce": nonce })),
            "expected nothing before the PONG marker, got {env}"
        );
    }

    /// The next text message as raw text and parsed JSON, checked as described on [`Client`].
    pub(crate) async fn recv_raw(&mut self) -> (String, Value) {
        loop {
            let frame = within("the next server message", self.ws.next()).await;
            let text = match frame {
                Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(frame))) => {
                    panic!("connection closed while waiting for a message: {frame:?}")
                }
                Some(Ok(other)) => panic!("unexpected non-text message: {other:?}"),
                Some(Err(e)) => panic!("connection failed while waiting for a message: {e}"),
                None => panic!("connection ended while waiting for a message"),
            };
            let env: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("server sent invalid JSON ({e}): {text}"));
            self.check(&env);
            return (text, env);
        }
    }

    /// The next envelope (see [`Client::recv_raw`]).
    pub(crate) async fn recv(&mut self) -> Value {
        self.recv_raw().await.1
    }

    /// Reads envelopes until one satisfies `pred`; returns it and the ones skipped.
    pub(crate) async fn recv_until(
        &mut self,
        mut pred: impl FnMut(&Value) -> bool,
    ) -> (Value, Vec<Value>) {
        let mut skipped = Vec::new();
        loop {
            let env = self.recv().await;
            if pred(&env) {
                return (env, skipped);
            }
            skipped.push(env);
        }
    }

    fn check(&mut self, env: &Value) {
        check_envelope(env);
        let seq: u64 = env["seq"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("seq is not a u64: {env}"));
        if self.relaxed {
            self.last_seq = seq;
            return;
        }
        assert_eq!(
            seq,
            self.last_seq + 1,
            "seq must grow by exactly one per envelope (previous {}): {env}",
            self.last_seq
        );
        self.last_seq = seq;
        let session = env["session"].as_str().unwrap_or_default();
        if self.session.is_empty() {
            self.session = session.to_owned();
        } else {
            assert_eq!(session, self.session, "session id changed: {env}");
        }
    }

    /// Reads until the connection ends; text messages before the end are
    /// returned (unchecked). For tests where the end is the point.
    pub(crate) async fn read_to_end(&mut self) -> (Vec<String>, Ended) {
        let mut texts = Vec::new();
        loop {
            match within("the connection to end", self.ws.next()).await {
                Some(Ok(Message::Text(text))) => texts.push(text.as_str().to_owned()),
                Some(Ok(Message::Close(frame))) => {
                    let frame = frame.map(|CloseFrame { code, reason }| {
                        (u16::from(code), reason.as_str().to_owned())
                    });
                    return (texts, Ended::Closed(frame));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return (texts, Ended::Dropped(e.to_string())),
                None => return (texts, Ended::Dropped("end of stream".to_owned())),
            }
        }
    }

    /// The next frame must be a close frame; returns its code and reason. Text
    /// messages before it fail the test.
    pub(crate) async fn expect_close(&mut self) -> (u16, String) {
        let (texts, ended) = self.read_to_end().await;
        assert!(
            texts.is_empty(),
            "expected a close frame, got messages first: {texts:?}"
        );
        match ended {
            Ended::Closed(Some(frame)) => frame,
            other => panic!("expected a close frame with a code, got {other:?}"),
        }
    }

    /// [`Client::connect`], then [`Client::relax`]: for a connection that
    /// resumes another session (its fresh `HAI` is `seq` "1" of a new session,
    /// the replayed envelopes carry the old session's id and `seq`s).
    pub(crate) async fn connect_raw(url: &str) -> Client {
        let mut client = Client::connect(url).await;
        client.relax();
        client
    }

    /// Stops checking `seq` continuity and the session id; every envelope is
    /// still checked against §2.4, and [`Client::last_seq`] is the `seq` of
    /// the last one received. For reading across a resumption point or a
    /// `REPLAY_REQUEST`.
    pub(crate) fn relax(&mut self) {
        self.relaxed = true;
    }

    /// Checks strictly again from here on: the connection is on `session`
    /// and the last envelope received there had `seq` `seq` (the confirming
    /// `HAI` of a resumption, say).
    pub(crate) fn follow(&mut self, session: &str, seq: u64) {
        self.relaxed = false;
        self.session = session.to_owned();
        self.last_seq = seq;
    }

    /// Closes the connection from the client side.
    pub(crate) async fn close(mut self) {
        let _ = within("closing", self.ws.close(None)).await;
    }
}

/// The `seq` of an envelope the server sent, as a number.
pub(crate) fn seq_of(env: &Value) -> u64 {
    env["seq"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("seq is not a decimal string: {env}"))
}

/// A client `HAI` asking to resume `session` after `last_rx_seq` (docs/protocol.md §11.3).
pub(crate) fn resume_hai(id: &str, session: &str, last_rx_seq: &str) -> Value {
    json!({
        "id": id,
        "session": session,
        "channel": "SYSTEM",
        "type": "HAI",
        "payload": {"haip_version": "1.1.2", "accept_major": [1], "last_rx_seq": last_rx_seq},
    })
}

/// Asserts `env` is a `ty` on `session` with `seq` `seq` (for envelopes read
/// in relaxed mode across a resumption); returns its payload.
pub(crate) fn expect_on(env: &Value, session: &str, seq: u64, ty: &str) -> Value {
    assert_eq!(
        (env["session"].as_str(), seq_of(env), env["type"].as_str()),
        (Some(session), seq, Some(ty)),
        "expected {ty} seq {seq} on session {session}: {env}"
    );
    env["payload"].clone()
}

/// The payload of a `HAI` confirming a resumption (docs/protocol.md §11.3): the §3.1
/// payload with the default settings, this `binary_frames`, and `last_rx_seq`.
pub(crate) fn confirming_hai_payload(binary_frames: bool, last_rx_seq: &str) -> Value {
    let mut payload = expected_hai_payload();
    payload["capabilities"]["binary_frames"] = json!(binary_frames);
    payload["last_rx_seq"] = json!(last_rx_seq);
    payload
}

/// A new object payload from key/value pairs, for brevity.
pub(crate) fn obj(pairs: &[(&str, Value)]) -> Value {
    Value::Object(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect::<Map<_, _>>(),
    )
}

// ----- HTTP -------------------------------------------------------------------

/// A raw HTTP/1.1 response.
#[derive(Debug)]
pub(crate) struct HttpResponse {
    /// The status code.
    pub(crate) status: u16,
    /// Header names (lower-cased) and values.
    pub(crate) headers: Vec<(String, String)>,
    /// The body.
    pub(crate) body: String,
}

impl HttpResponse {
    /// The first header with this (case-insensitive) name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }
}

/// `GET path` over a fresh TCP connection with `Connection: close`.
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> HttpResponse {
    http_request(addr, "GET", path).await
}

/// `METHOD path` (no body) over a fresh TCP connection with `Connection: close`.
pub(crate) async fn http_request(addr: SocketAddr, method: &str, path: &str) -> HttpResponse {
    http_request_with(addr, method, path, &[], b"").await
}

/// [`http_request`] with extra headers and a body (sent with `Content-Length`).
pub(crate) async fn http_request_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    within(&format!("{method} {path}"), async {
        let mut stream = TcpStream::connect(addr).await.expect("connect for HTTP");
        // The server's own address, as a client that dialled it would say,
        // unless the test names another `Host`.
        let mut request = format!("{method} {path} HTTP/1.1\r\n");
        if !headers.iter().any(|(n, _)| n.eq_ignore_ascii_case("host")) {
            request.push_str(&format!("Host: {addr}\r\n"));
        }
        request.push_str("Connection: close\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        stream
            .write_all(request.as_bytes())
            .await
            .expect("write HTTP request");
        stream.write_all(body).await.expect("write HTTP body");
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .expect("read HTTP response");
        let raw = String::from_utf8(raw).expect("HTTP response is UTF-8");
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no end of headers in {raw:?}"));
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let headers: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        assert!(
            !headers
                .iter()
                .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked")),
            "chunked bodies are not supported by this tiny client: {head}"
        );
        HttpResponse {
            status,
            headers,
            body: body.to_owned(),
        }
    })
    .await
}

/// `GET path`, which must answer `200` with a JSON body; returns the body.
pub(crate) async fn get_json(addr: SocketAddr, path: &str) -> Value {
    let response = http_get(addr, path).await;
    assert_eq!(response.status, 200, "GET {path}: {response:?}");
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "GET {path}: {response:?}"
    );
    response.json()
}

/// Polls `GET /stats` until `pred` holds (the stats are updated asynchronously
/// after a socket closes); fails after [`WAIT`].
pub(crate) async fn stats_until(addr: SocketAddr, what: &str, pred: impl Fn(&Value) -> bool) {
    poll_until(addr, "/stats", what, pred).await;
}

/// [`stats_until`] for `/health`, which needs no token.
pub(crate) async fn health_until(addr: SocketAddr, what: &str, pred: impl Fn(&Value) -> bool) {
    poll_until(addr, "/health", what, pred).await;
}

/// `GET path` until `pred` holds of its JSON; returns it. Fails after [`WAIT`].
pub(crate) async fn poll_until(
    addr: SocketAddr,
    path: &str,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let stats = get_json(addr, path).await;
        if pred(&stats) {
            return stats;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {path} to show {what}: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The sorted keys of a JSON object; panics if `v` is not an object.
pub(crate) fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

/// The `toolExecutions` counters of a `/stats` body as `[total, successful,
/// failed, cancelled, active]`, checking that the total adds up.
pub(crate) fn executions(stats: &Value) -> [u64; 5] {
    let t = &stats["toolExecutions"];
    let get = |k: &str| {
        t[k].as_u64()
            .unwrap_or_else(|| panic!("toolExecutions.{k} is not an integer: {stats}"))
    };
    let [total, ok, failed, cancelled, active] =
        ["total", "successful", "failed", "cancelled", "active"].map(get);
    assert_eq!(
        total,
        ok + failed + cancelled + active,
        "total = successful + failed + cancelled + active: {stats}"
    );
    [total, ok, failed, cancelled, active]
}

// ----- controllable tools -------------------------------------------------------

/// Signals when dropped: a tool holding one proves its future was dropped (aborted).
pub(crate) struct DropGuard(pub(crate) mpsc::UnboundedSender<()>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// The test's side of a [`gated_tool`]: it sees calls start and be cancelled,
/// and lets them finish one permit at a time.
pub(crate) struct Gate {
    permits: Arc<Semaphore>,
    started: mpsc::UnboundedReceiver<String>,
    cancelled: mpsc::UnboundedReceiver<String>,
    runs: Arc<AtomicUsize>,
}

impl Gate {
    /// Lets `n` waiting (or future) calls finish with `{"released": <call_id>}`.
    pub(crate) fn open(&self, n: usize) {
        self.permits.add_permits(n);
    }

    /// Waits until a call starts running; returns its call id.
    pub(crate) async fn started(&mut self) -> String {
        within("a gated call to start", self.started.recv())
            .await
            .expect("the gated tool is alive")
    }

    /// Waits until a running call observes its cancellation; returns its call id.
    pub(crate) async fn cancelled(&mut self) -> String {
        within(
            "a gated call to observe cancellation",
            self.cancelled.recv(),
        )
        .await
        .expect("the gated tool is alive")
    }

    /// A start not yet taken by [`Gate::started`], if any (no waiting).
    pub(crate) fn try_started(&mut self) -> Option<String> {
        self.started.try_recv().ok()
    }

    /// How many times the handler has run.
    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// A tool that reports its start, then waits for a permit from its [`Gate`]
/// (and returns `{"released": <call_id>}`) or for cancellation (reports it,
/// tries a late progress report and returns `{"late": true}`, which the server
/// must discard).
pub(crate) fn gated_tool(name: &str) -> (Tool, Gate) {
    let permits = Arc::new(Semaphore::new(0));
    let (started_tx, started) = mpsc::unbounded_channel();
    let (cancelled_tx, cancelled) = mpsc::unbounded_channel();
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Gate {
        permits: Arc::clone(&permits),
        started,
        cancelled,
        runs: Arc::clone(&runs),
    };
    let tool = Tool::builder(name)
        .description("Waits for the test to let it finish")
        .handler(move |_params: Value, ctx: Context| {
            let permits = Arc::clone(&permits);
            let started_tx = started_tx.clone();
            let cancelled_tx = cancelled_tx.clone();
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                let _ = started_tx.send(ctx.call_id().to_owned());
                tokio::select! {
                    permit = permits.acquire() => {
                        permit.expect("the gate's semaphore is never closed").forget();
                        Ok::<_, ToolError>(json!({ "released": ctx.call_id() }))
                    }
                    () = ctx.cancelled() => {
                        let _ = cancelled_tx.send(ctx.call_id().to_owned());
                        ctx.progress(99.0);
                        Ok(json!({ "late": true }))
                    }
                }
            }
        })
        .build()
        .expect("the gated tool is valid");
    (tool, gate)
}

/// An HS256 JWT of `sub` signed with `secret`, valid for five minutes, with
/// `aud` when given.
pub(crate) fn hs256_token(secret: &str, sub: &str, aud: Option<&str>) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs()
        + 300;
    let mut claims = json!({"sub": sub, "exp": exp});
    if let Some(aud) = aud {
        claims["aud"] = json!(aud);
    }
    let key = EncodingKey::from_secret(secret.as_bytes()).expect("a non-empty secret");
    encode(&Header::new(Algorithm::HS256), &claims, &key).expect("the token encodes")
}

/// Returns `{"subject": ctx.subject()}` (no output schema).
pub(crate) fn whoami() -> Tool {
    Tool::builder("whoami")
        .description("The caller's verified subject")
        .handler(|_params: Value, ctx: Context| async move {
            Ok::<_, ToolError>(json!({ "subject": ctx.subject() }))
        })
        .build()
        .expect("whoami is a valid tool")
}

/// One row of RELIABILITY.md's "Security" table: an attack a security test
/// played (`item`: its number in the review that found it), what the server refused, and what it cost another caller served
/// meanwhile (`before`: that caller's latency with no attack; `during`: under
/// it). Written as a JSON line to `$HAIP_SECURITY_REPORT` when that is set
/// (`bench/security.sh`), else nothing: the tests assert, the report measures.
pub(crate) fn security_row(
    item: u8,
    attack: &str,
    refused: &str,
    other: &str,
    before: Option<Duration>,
    during: Option<Duration>,
) {
    let Ok(path) = std::env::var("HAIP_SECURITY_REPORT") else {
        return;
    };
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1000.0);
    let line = json!({
        "item": item,
        "attack": attack,
        "refused": refused,
        "other": other,
        "before_ms": ms(before),
        "during_ms": ms(during),
    });
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("opening {path}: {e}"));
    writeln!(file, "{line}").expect("writing the security report");
}

/// How long `fut` took, and its output.
pub(crate) async fn timed<F: Future>(fut: F) -> (Duration, F::Output) {
    let start = std::time::Instant::now();
    let out = fut.await;
    (start.elapsed(), out)
}
