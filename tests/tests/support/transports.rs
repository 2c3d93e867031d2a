//! One HAIP client over every transport (docs/protocol.md §15): a [`Conn`] speaks
//! WebSocket, SSE (server→client events, client→server upstream POSTs) or
//! full-duplex HTTP streaming (`POST /haip/stream`, NDJSON both ways), and
//! checks every envelope it receives as [`Client`](crate::support::Client)
//! does: the §2.4 shape, one session id, `seq` +1 from `"1"`. Also a small
//! HTTP client on hyper's low-level API (chunked bodies included).
//!
//! Included with `#[path = "support/transports.rs"] mod conn;` next to `mod support;`.
#![allow(dead_code)]

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_tungstenite::connect_async;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request as WsRequest;

use crate::support::{HttpResponse, Ws, check_envelope, within};

/// The three transports of docs/protocol.md §15.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// WebSocket upgrade on `/haip`.
    Ws,
    /// `GET /haip/sse`, envelopes up by `POST /haip/message`.
    Sse,
    /// `POST /haip/stream`, NDJSON both ways on one request.
    Stream,
}

/// Generates `mod ws`, `mod sse` and `mod stream`, each with one `#[tokio::test]`
/// per named `async fn name(kind: Kind)` of the invoking module (which must
/// have `Kind` in scope).
macro_rules! per_transport {
    ($($name:ident),* $(,)?) => {
        mod ws {
            $( #[tokio::test] async fn $name() { super::$name(super::Kind::Ws).await } )*
        }
        mod sse {
            $( #[tokio::test] async fn $name() { super::$name(super::Kind::Sse).await } )*
        }
        mod stream {
            $( #[tokio::test] async fn $name() { super::$name(super::Kind::Stream).await } )*
        }
    };
}
pub(crate) use per_transport;

/// One thing read from a connection.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// One envelope's text (a WebSocket text message, an SSE `data:` event, an NDJSON line).
    Envelope(String),
    /// An SSE comment line (`: ping` is `Comment("ping")`).
    Comment(String),
    /// The SSE event `data: [DONE]`.
    Done,
    /// A WebSocket close frame (code and reason).
    Closed(Option<(u16, String)>),
    /// The stream (or socket) ended without a close frame.
    End,
    /// The transport failed.
    Failed(String),
}

/// Why a connection was refused.
#[derive(Debug)]
pub(crate) enum Refused {
    /// WebSocket: the upgrade completed, then this envelope and this end.
    Ws { error: Value, end: Item },
    /// SSE or HTTP streaming: a non-200 response.
    Http(HttpResponse),
}

type Chunk = Result<Frame<Bytes>, Infallible>;

/// Incremental reader of a streaming response body (SSE or NDJSON framing).
struct Reader {
    body: Incoming,
    buf: Vec<u8>,
    sse: bool,
    ended: bool,
}

impl Reader {
    async fn next(&mut self) -> Item {
        loop {
            if let Some(item) = self.parse() {
                return item;
            }
            if self.ended {
                assert!(
                    self.buf.is_empty(),
                    "the stream ended inside a frame: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return Item::End;
            }
            match self.body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(e)) => return Item::Failed(e.to_string()),
                None => self.ended = true,
            }
        }
    }

    fn parse(&mut self) -> Option<Item> {
        let text = |b: &[u8]| String::from_utf8(b.to_vec()).expect("the stream is UTF-8");
        if !self.sse {
            let end = self.buf.iter().position(|&b| b == b'\n')?;
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            let line = text(&line[..end]);
            assert!(!line.trim().is_empty(), "blank NDJSON line from the server");
            return Some(Item::Envelope(line));
        }
        let end = self.buf.windows(2).position(|w| w == b"\n\n")?;
        let event: Vec<u8> = self.buf.drain(..end + 2).collect();
        let event = text(&event[..end]);
        assert!(
            !event.contains('\n'),
            "each SSE event is one line (no event:/id: lines): {event:?}"
        );
        if let Some(data) = event.strip_prefix("data: ") {
            Some(if data == "[DONE]" {
                Item::Done
            } else {
                Item::Envelope(data.to_owned())
            })
        } else if let Some(comment) = event.strip_prefix(':') {
            Some(Item::Comment(comment.trim_start().to_owned()))
        } else {
            panic!("unexpected SSE event {event:?}")
        }
    }
}

enum Link {
    Ws(Box<Ws>),
    Http {
        reader: Reader,
        /// The open request body of a duplex `POST /haip/stream`.
        upstream: Option<mpsc::UnboundedSender<Chunk>>,
        /// The client connection task, aborted on drop (closing the socket).
        task: AbortHandle,
    },
}

/// A HAIP client on one connection of any transport.
pub(crate) struct Conn {
    /// The transport.
    pub(crate) kind: Kind,
    /// The server's address.
    pub(crate) addr: SocketAddr,
    /// The token sent with the connection and with every upstream POST.
    pub(crate) token: Option<String>,
    /// Response headers (lower-cased names): the HTTP response, or the upgrade response.
    pub(crate) headers: Vec<(String, String)>,
    /// The server's `HAI` envelope.
    pub(crate) hai: Value,
    /// The session id of the `HAI`.
    pub(crate) session: String,
    link: Link,
    last_seq: u64,
    next_id: u64,
    /// Relaxed mode (see [`Conn::relax`]): only the §2.4 shape is checked.
    relaxed: bool,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Link::Http { task, .. } = &self.link {
            task.abort();
        }
    }
}

/// Sends one request over a fresh connection; returns the response with its
/// body still streaming, and the connection task.
pub(crate) async fn send_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: UnsyncBoxBody<Bytes, Infallible>,
) -> (hyper::Response<Incoming>, AbortHandle) {
    let tcp = within(
        &format!("connecting for {method} {path}"),
        TcpStream::connect(addr),
    )
    .await
    .expect("connect for HTTP");
    send_request_on(tcp, &addr.to_string(), method, path, headers, body).await
}

/// [`send_request`] over a connection the caller opened (a Unix socket's,
/// say), with `Host: host`.
pub(crate) async fn send_request_on<IO>(
    io: IO,
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: UnsyncBoxBody<Bytes, Infallible>,
) -> (hyper::Response<Incoming>, AbortHandle)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    within(&format!("the response to {method} {path}"), async {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .expect("HTTP/1.1 handshake");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut request = hyper::Request::builder()
            .method(method)
            .uri(path)
            .header("host", host);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request.body(body).expect("a valid request");
        let response = sender
            .send_request(request)
            .await
            .expect("an HTTP response");
        (response, task.abort_handle())
    })
    .await
}

/// Header names (lower-case) and values.
fn head(headers: &hyper::HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect()
}

async fn collect(response: hyper::Response<Incoming>) -> HttpResponse {
    let status = response.status().as_u16();
    let headers = head(response.headers());
    let body = within("the response body", response.into_body().collect())
        .await
        .expect("read the response body")
        .to_bytes();
    HttpResponse {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).expect("the body is UTF-8"),
    }
}

/// One complete request/response over a fresh connection.
pub(crate) async fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    let body = Full::new(Bytes::from(body.to_owned())).boxed_unsync();
    let (response, task) = send_request(addr, method, path, headers, body).await;
    let response = collect(response).await;
    task.abort();
    response
}

/// An upstream POST to `path` with `Content-Type: application/json`, the
/// token (if any) as `Authorization: Bearer`, and `headers`.
pub(crate) async fn post(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    headers: &[(&str, &str)],
    body: &str,
) -> HttpResponse {
    let bearer = token.map(|t| format!("Bearer {t}"));
    let mut all = vec![("content-type", "application/json")];
    all.extend(bearer.as_deref().map(|b| ("authorization", b)));
    all.extend_from_slice(headers);
    http(addr, "POST", path, &all, body).await
}

/// Asserts `response` is the `200 {"status":"ok"}` of a handled upstream POST.
pub(crate) fn assert_ok(response: &HttpResponse) {
    assert_eq!(
        (response.status, response.json()),
        (200, json!({"status": "ok"})),
        "upstream POST: {response:?}"
    );
}

impl Conn {
    /// Opens a connection and reads the server's `HAI`; panics when refused.
    pub(crate) async fn connect(kind: Kind, addr: SocketAddr, token: Option<&str>) -> Conn {
        Conn::open(kind, addr, token)
            .await
            .unwrap_or_else(|refused| panic!("{kind:?} connection refused: {refused:?}"))
    }

    /// Opens a connection with the token (if any) as `Authorization: Bearer`.
    pub(crate) async fn open(
        kind: Kind,
        addr: SocketAddr,
        token: Option<&str>,
    ) -> Result<Conn, Refused> {
        let bearer = token.map(|t| format!("Bearer {t}"));
        let auth: Vec<_> = bearer
            .iter()
            .map(|b| ("authorization", b.as_str()))
            .collect();
        let mut conn = match kind {
            Kind::Ws => {
                let mut request = format!("ws://{addr}/haip")
                    .into_client_request()
                    .expect("a valid URL");
                if let Some(bearer) = &bearer {
                    let value = bearer.parse().expect("a valid header value");
                    request.headers_mut().insert("authorization", value);
                }
                Conn::open_ws(addr, request).await?
            }
            Kind::Sse => Conn::open_http(addr, "GET", "/haip/sse", &auth, false).await?,
            Kind::Stream => {
                // What a page cannot send without a preflight (`guard.rs`).
                let mut headers = auth.clone();
                headers.push(("content-type", "application/x-ndjson"));
                Conn::open_http(addr, "POST", "/haip/stream", &headers, true).await?
            }
        };
        conn.kind = kind;
        conn.token = token.map(str::to_owned);
        Ok(conn)
    }

    /// A WebSocket connection from a custom upgrade request.
    pub(crate) async fn open_ws(addr: SocketAddr, request: WsRequest) -> Result<Conn, Refused> {
        let (ws, response) = within("the WebSocket upgrade", connect_async(request))
            .await
            .unwrap_or_else(|e| panic!("the WebSocket upgrade failed: {e}"));
        let link = Link::Ws(Box::new(ws));
        Conn::handshake(Kind::Ws, addr, head(response.headers()), link).await
    }

    /// An SSE or HTTP-streaming connection: `method path` with `headers`; with
    /// `duplex`, the request body stays open for NDJSON envelopes.
    pub(crate) async fn open_http(
        addr: SocketAddr,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        duplex: bool,
    ) -> Result<Conn, Refused> {
        let (upstream, body) = if duplex {
            let (tx, mut rx) = mpsc::unbounded_channel::<Chunk>();
            let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
            (Some(tx), StreamBody::new(stream).boxed_unsync())
        } else {
            (None, Full::new(Bytes::new()).boxed_unsync())
        };
        let (response, task) = send_request(addr, method, path, headers, body).await;
        if response.status() != 200 {
            let refused = collect(response).await;
            task.abort();
            return Err(Refused::Http(refused));
        }
        let headers = head(response.headers());
        let content_type = headers
            .iter()
            .find(|(n, _)| n == "content-type")
            .map(|(_, v)| v.as_str());
        let sse = match content_type {
            Some("text/event-stream") => true,
            Some("application/x-ndjson") => false,
            other => panic!("{method} {path}: unexpected content type {other:?}"),
        };
        let reader = Reader {
            body: response.into_body(),
            buf: Vec::new(),
            sse,
            ended: false,
        };
        let link = Link::Http {
            reader,
            upstream,
            task,
        };
        let kind = if duplex { Kind::Stream } else { Kind::Sse };
        let conn = Conn::handshake(kind, addr, headers, link).await?;
        let header = conn.header("x-haip-session");
        assert_eq!(
            header,
            Some(conn.session.as_str()),
            "X-HAIP-Session names the session of the HAI"
        );
        Ok(conn)
    }

    async fn handshake(
        kind: Kind,
        addr: SocketAddr,
        headers: Vec<(String, String)>,
        link: Link,
    ) -> Result<Conn, Refused> {
        let mut conn = Conn {
            kind,
            addr,
            token: None,
            headers,
            hai: Value::Null,
            session: String::new(),
            link,
            last_seq: 0,
            next_id: 0,
            relaxed: false,
        };
        let first = conn.recv().await;
        if first["type"] == "ERROR" && kind == Kind::Ws {
            let end = conn.next_item().await;
            return Err(Refused::Ws { error: first, end });
        }
        assert_eq!(
            first["type"], "HAI",
            "the first envelope must be HAI: {first}"
        );
        conn.hai = first;
        Ok(conn)
    }

    /// Stops checking `seq` continuity and the session id (the §2.4 shape is
    /// still checked; [`Conn::last_seq`] follows the envelopes received): for
    /// reading across a resumption point or a `REPLAY_REQUEST`. Upstream POSTs
    /// still name [`Conn::session`].
    pub(crate) fn relax(&mut self) {
        self.relaxed = true;
    }

    /// Checks strictly again: the connection is on `session` (upstream POSTs
    /// now name it) and its last envelope received had `seq` `seq`.
    pub(crate) fn follow(&mut self, session: &str, seq: u64) {
        self.relaxed = false;
        self.session = session.to_owned();
        self.last_seq = seq;
    }

    /// The `seq` of the last envelope received.
    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The first response header with this (lower-case) name.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The next item from the connection, unchecked.
    pub(crate) async fn next_item(&mut self) -> Item {
        match &mut self.link {
            Link::Http { reader, .. } => within("the next stream item", reader.next()).await,
            Link::Ws(ws) => loop {
                return match within("the next WebSocket message", ws.next()).await {
                    Some(Ok(Message::Text(text))) => Item::Envelope(text.as_str().to_owned()),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                    Some(Ok(Message::Close(frame))) => Item::Closed(
                        frame.map(|f| (u16::from(f.code), f.reason.as_str().to_owned())),
                    ),
                    Some(Ok(other)) => panic!("unexpected WebSocket message: {other:?}"),
                    Some(Err(e)) => Item::Failed(e.to_string()),
                    None => Item::End,
                };
            },
        }
    }

    /// Parses and checks one envelope: §2.4 shape, session, `seq` +1.
    fn check(&mut self, text: &str) -> Value {
        let env: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("server sent invalid JSON ({e}): {text}"));
        check_envelope(&env);
        let seq: u64 = env["seq"].as_str().and_then(|s| s.parse().ok()).unwrap();
        if self.relaxed {
            self.last_seq = seq;
            return env;
        }
        assert_eq!(
            seq,
            self.last_seq + 1,
            "seq must grow by exactly one (previous {}): {env}",
            self.last_seq
        );
        self.last_seq = seq;
        let session = env["session"].as_str().unwrap_or_default();
        if self.session.is_empty() {
            self.session = session.to_owned();
        } else {
            assert_eq!(session, self.session, "session id changed: {env}");
        }
        env
    }

    /// The next envelope as its raw text and parsed, checked; SSE comments
    /// are skipped.
    pub(crate) async fn recv_raw(&mut self) -> (String, Value) {
        loop {
            match self.next_item().await {
                Item::Envelope(text) => {
                    let env = self.check(&text);
                    return (text, env);
                }
                Item::Comment(_) => continue,
                other => panic!(
                    "{:?} connection ended while waiting for an envelope: {other:?}",
                    self.kind
                ),
            }
        }
    }

    /// The next envelope, checked; SSE comments are skipped.
    pub(crate) async fn recv(&mut self) -> Value {
        loop {
            match self.next_item().await {
                Item::Envelope(text) => return self.check(&text),
                Item::Comment(_) => continue,
                other => panic!(
                    "{:?} connection ended while waiting for an envelope: {other:?}",
                    self.kind
                ),
            }
        }
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

    /// Reads to the end of the connection: the envelopes before it (checked),
    /// whether `data: [DONE]` came (it must be last), and how it ended.
    pub(crate) async fn read_to_end(&mut self) -> (Vec<Value>, bool, Item) {
        let mut envelopes = Vec::new();
        let mut done = false;
        loop {
            match self.next_item().await {
                Item::Envelope(text) => {
                    assert!(!done, "envelope after data: [DONE]: {text}");
                    envelopes.push(self.check(&text));
                }
                Item::Comment(_) => {}
                Item::Done => {
                    assert!(!done, "data: [DONE] twice");
                    done = true;
                }
                end => return (envelopes, done, end),
            }
        }
    }

    /// Sends one inbound unit: a WebSocket text message, an NDJSON line of the
    /// open request body, or the body of `POST /haip/message` (which must
    /// answer `200 {"status":"ok"}`).
    pub(crate) async fn send_raw(&mut self, text: &str) {
        match &mut self.link {
            Link::Ws(ws) => within("sending a message", ws.send(Message::text(text)))
                .await
                .expect("send a WebSocket message"),
            Link::Http {
                upstream: Some(_), ..
            } => self.write_body(&format!("{text}\n")),
            Link::Http { upstream: None, .. } => assert_ok(&self.post(text).await),
        }
    }

    /// Writes raw bytes into the open request body of a duplex stream.
    pub(crate) fn write_body(&mut self, bytes: &str) {
        let Link::Http {
            upstream: Some(tx), ..
        } = &self.link
        else {
            panic!("{:?} has no open request body", self.kind)
        };
        let chunk = Frame::data(Bytes::from(bytes.to_owned()));
        tx.send(Ok(chunk)).expect("the request body is open");
    }

    /// `POST /haip/message` with this body, targeted by `X-HAIP-Session`.
    pub(crate) async fn post(&self, body: &str) -> HttpResponse {
        let (token, session) = (self.token.as_deref(), self.session.as_str());
        post(
            self.addr,
            "/haip/message",
            token,
            &[("x-haip-session", session)],
            body,
        )
        .await
    }

    /// Sends one JSON value (see [`Conn::send_raw`]).
    pub(crate) async fn send(&mut self, value: &Value) {
        self.send_raw(&value.to_string()).await;
    }

    /// Ends the request body of a duplex stream (no-op elsewhere).
    pub(crate) fn finish_upstream(&mut self) {
        if let Link::Http { upstream, .. } = &mut self.link {
            upstream.take();
        }
    }

    /// Sends `{"id","channel","type","payload"}` with a fresh id (`req-1`,
    /// `req-2`, ...); returns the id.
    pub(crate) async fn request(&mut self, ty: &str, payload: Value) -> String {
        self.next_id += 1;
        let id = format!("req-{}", self.next_id);
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
        let payload = json!({"call_id": call_id, "tool": tool, "params": params});
        self.request("TOOL_CALL", payload).await
    }

    /// Calls a tool that sends no updates; returns its `TOOL_DONE` payload.
    pub(crate) async fn call_done(&mut self, call_id: &str, tool: &str, params: Value) -> Value {
        self.call(call_id, tool, params).await;
        self.expect_done(call_id).await
    }

    /// The next envelope must be `ty` on `channel`; returns its payload.
    async fn expect(&mut self, ty: &str, channel: &str) -> Value {
        let env = self.recv().await;
        let got = (env["type"].as_str(), env["channel"].as_str());
        assert_eq!(
            got,
            (Some(ty), Some(channel)),
            "expected {ty} on {channel}: {env}"
        );
        env["payload"].clone()
    }

    /// The next envelope must be the `TOOL_DONE` of `call_id`; returns its payload.
    pub(crate) async fn expect_done(&mut self, call_id: &str) -> Value {
        let payload = self.expect("TOOL_DONE", "AGENT").await;
        assert_eq!(payload["call_id"], call_id, "wrong call: {payload}");
        payload
    }

    /// The next envelope must be a `TOOL_UPDATE` of `call_id`; returns its payload.
    pub(crate) async fn expect_update(&mut self, call_id: &str) -> Value {
        let payload = self.expect("TOOL_UPDATE", "AGENT").await;
        assert_eq!(payload["call_id"], call_id, "wrong call: {payload}");
        payload
    }

    /// The next envelope must be an `ERROR` on SYSTEM; returns its payload.
    pub(crate) async fn expect_error(&mut self) -> Value {
        self.expect("ERROR", "SYSTEM").await
    }

    /// Proves nothing else is queued: a `PING` with a fresh nonce whose `PONG`
    /// must be the very next envelope.
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
}
